/*
 * Algorithms for communicators that span servers (span.h).
 *
 * Data moves from the source buffer to the destination buffer: through a
 * mapping inside a group, by one UCX get or put between groups. Where many
 * ranks of a group need the same bytes from another group (allgather,
 * bcast, the second half of allreduce), the group's ranks share the pulls,
 * each byte crosses between the groups once, and the group then copies it
 * among itself through mappings, so every rank keeps a link busy.
 *
 * Reductions: every element is reduced by exactly one rank and then
 * copied (or, for a small allreduce, by every rank in the same order), so
 * all ranks get bitwise the same result. They are hierarchical: each
 * group first reduces its own inputs for the slices that other groups
 * own, and only those partials cross between groups. Operands from another
 * group come by UCX get into the communicator's landing area, which the
 * reduction then reads. That copy of remote operands is the only one: a
 * reduction needs both operands in its own memory, and when the inputs
 * are also the outputs (MPI_IN_PLACE) there is no free part of the user's
 * buffers to receive them in.
 *
 * Like the server-only algorithms, every rank passes the same syncs
 * whatever its role, so a failure on one rank never hangs the others.
 */
#include "span.h"

#include <string.h>

/* The last sync of an algorithm: no rank leaves while a peer may still
 * read or write its buffers. */
static zcopy_status_t span_finish(zcopy_span_algo_t *sa)
{
    return zcopy_span_sync(sa) ? ZCOPY_ERR_INTERNAL : ZCOPY_SUCCESS;
}

/* The same where only this rank's group may still touch its buffers once
 * its own transfers are done: no message between servers. A failure is
 * reported to the group's ranks, whose results it concerns. */
static zcopy_status_t span_finish_group(zcopy_span_algo_t *sa)
{
    return zcopy_span_sync_group(sa) ? ZCOPY_ERR_INTERNAL : ZCOPY_SUCCESS;
}

static const zcopy_plan_args_t *args_of(const zcopy_span_algo_t *sa, int r)
{
    return &zcopy_span_desc(sa->sp, r)->args;
}

static bool in_place(const zcopy_span_algo_t *sa, int r)
{
    return args_of(sa, r)->flags & ZCOPY_PLAN_IN_PLACE;
}

static int group_of(const zcopy_span_algo_t *sa, int r)
{
    return sa->sp->group[r];
}

static bool same_group(const zcopy_span_algo_t *sa, int r)
{
    return group_of(sa, r) == group_of(sa, sa->rank);
}

static int my_group_size(const zcopy_span_algo_t *sa)
{
    return zcopy_span_group_size(sa->sp, group_of(sa, sa->rank));
}

/* Whether a group shares the fetching of @bytes from other groups and then
 * spreads them inside (a second stage, after a sync), rather than every
 * rank fetching all it needs itself: worth the sync for large messages
 * only. The same answer on every rank, so every rank passes the same
 * syncs. */
static bool spreads(const zcopy_span_algo_t *sa, size_t bytes)
{
    return sa->sp->ngroups > 1 && sa->sp->max_group > 1 &&
           bytes > zcopy_config.small_msg;
}

/* Copies [@off, +@len) of this rank's output @own into the same place of
 * every other member's output in its group. */
static void share_in_group(zcopy_span_algo_t *sa, const uint8_t *own,
                           size_t off, size_t len)
{
    const zcopy_span_t *sp = sa->sp;
    const int g = group_of(sa, sa->rank);

    for (int i = 0; i < zcopy_span_group_size(sp, g) && len > 0; i++) {
        int j = zcopy_span_member(sp, g, i);
        if (j != sa->rank)
            zcopy_span_put(sa, j, args_of(sa, j)->rbuf + off, len, own + off);
    }
}

/* --- reductions ------------------------------------------------------------ */

/* An allreduce small enough that every rank reducing the whole vector
 * beats two more syncs; in place it cannot, as peers still read the
 * outputs (their inputs). Every rank then fetches every other server's
 * vectors, so what lands is bounded, not the vector alone: up to
 * coll_zcopy_small_msg bytes of the other ranks' vectors (a bound on
 * every rank's landing whatever its server, so the same answer on every
 * rank), where a 16 KiB vector on 128 servers of 8 used to land 16 MiB per
 * rank per call. */
static bool allreduce_replicated(const zcopy_span_t *sp,
                                 const zcopy_coll_args_t *a, size_t elem)
{
    const size_t vectors = sp->nranks > 1 ? (size_t)(sp->nranks - 1) : 1;

    return a->sbuf != MPI_IN_PLACE &&
           a->scount * elem <= zcopy_config.small_msg / vectors;
}

/* dst[0 .. count) = ins[0] op ins[1] op ... op ins[n - 1], step by step so
 * that a step's inputs stay in cache. With @share (allreduce), each step's
 * result also goes at once to the group's outputs, at byte @share_off on:
 * it is still in cache then. */
static void reduce_inputs(zcopy_span_algo_t *sa, uint8_t *dst,
                          const uint8_t *const *ins, int n, size_t count,
                          bool share, size_t share_off)
{
    const void **srcs = zcopy_comm_list(sa->zc, ZCOPY_COMM_LIST_OPERANDS);
    const size_t e = sa->ssize, chunk = zcopy_chunk_elems(e);

    for (size_t at = 0; at < count && !sa->failed; at += chunk) {
        size_t len = count - at < chunk ? count - at : chunk;

        for (int k = 0; k < n; k++)
            srcs[k] = ins[k] + at * e;
        if (zcopy_reduce(sa->a->op, sa->a->stype, dst + at * e, srcs, n,
                         len) != ZCOPY_SUCCESS)
            sa->failed = true;
        if (share)
            share_in_group(sa, sa->a->rbuf, share_off + at * e, len * e);
    }
}

/* dst[0 .. count) = the reduction, over every rank in the order first,
 * first + 1, ... (mod n), of the @count elements at byte @off of each
 * rank's announced send buffer. dst may alias @first's input only. Other
 * groups' operands land in the landing area first. */
static void owner_reduce(zcopy_span_algo_t *sa, uint8_t *dst, int first,
                         size_t off, size_t count)
{
    const uint8_t **ins = zcopy_comm_list(sa->zc, ZCOPY_COMM_LIST_INPUTS);
    const int n = sa->nranks;
    const size_t bytes = count * sa->ssize;
    uint8_t *slot = sa->sp->landing;

    if (count == 0 || sa->failed)
        return;
    for (int k = 0; k < n; k++) {
        int j = (first + k) % n;
        uint64_t at = args_of(sa, j)->sbuf + off;

        if (same_group(sa, j)) {
            ins[k] = zcopy_span_map(sa, j, at, bytes);
            sa->ipc_bytes += j == sa->rank ? 0 : bytes;
            continue;
        }
        ins[k] = slot;
        zcopy_span_get(sa, j, at, bytes, slot);
        slot += bytes;
    }
    zcopy_span_complete(sa);
    reduce_inputs(sa, dst, ins, n, count, false, 0);
}

/* dst[0 .. count) = the reduction of this group's inputs at byte @off,
 * this rank's first (in place, dst may be its alias). */
static void group_reduce(zcopy_span_algo_t *sa, uint8_t *dst, size_t off,
                         size_t count)
{
    const zcopy_span_t *sp = sa->sp;
    const int g = group_of(sa, sa->rank), m = my_group_size(sa);
    const size_t e = sa->ssize;
    const uint8_t **ins = zcopy_comm_list(sa->zc, ZCOPY_COMM_LIST_INPUTS);

    if (count == 0)
        return;
    for (int k = 0; k < m; k++) {
        int j = zcopy_span_member(sp, g, sp->index[sa->rank] + k);
        ins[k] = zcopy_span_map(sa, j, args_of(sa, j)->sbuf + off,
                                count * e);
        sa->ipc_bytes += j == sa->rank ? 0 : count * e;
    }
    reduce_inputs(sa, dst, ins, m, count, false, 0);
}

/* Hierarchical reductions (SPEC section 6). Rank r reduces slice r (see
 * owned_slice). A group's partial of a slice that another group owns is
 * made by its member r mod (group size) and packed, in slice order, in
 * that member's registered scratch; a rank alone in its group has its
 * input as its partials. */

/* Offset and length, in elements, of rank @r's block of a reduce_scatter. */
static void scattered_block(const zcopy_span_t *sp, const zcopy_coll_args_t *a,
                            int r, size_t *displ, size_t *own)
{
    if (a->type == ZCOPY_COLL_REDUCE_SCATTER) {
        *displ = sp->block_lo[r];
        *own = (size_t)a->rcounts[r];
        return;
    }
    *displ = (size_t)r * a->rcount;
    *own = a->rcount;
}
/* Elements [*lo, *hi) of the slice that rank @r reduces: allreduce cuts
 * the vector into one slice per rank, reduce into one per rank of the
 * root's group (the others reduce nothing), reduce_scatter's slices are
 * its blocks. */
static void owned_slice(const zcopy_span_t *sp, const zcopy_coll_args_t *a,
                        size_t elem, int r, size_t *lo, size_t *hi)
{
    size_t displ, own;

    switch (a->type) {
    case ZCOPY_COLL_ALLREDUCE:
        zcopy_slice(a->scount, elem, r, sp->nranks, lo, hi);
        return;
    case ZCOPY_COLL_REDUCE:
        *lo = *hi = 0;
        if (sp->group[r] == sp->group[a->root])
            zcopy_slice(a->scount, elem, sp->index[r],
                        zcopy_span_group_size(sp, sp->group[r]), lo, hi);
        return;
    default:
        scattered_block(sp, a, r, &displ, &own);
        *lo = displ;
        *hi = displ + own;
    }
}

/* Bytes before group @g's partial of slice @r in its maker's scratch. */
static size_t partial_offset(const zcopy_span_algo_t *sa, int g, int r)
{
    const int m = zcopy_span_group_size(sa->sp, g);
    size_t off = 0, lo, hi;

    for (int q = r % m; q < r; q += m) {
        if (sa->sp->group[q] == g)
            continue;
        owned_slice(sa->sp, sa->a, sa->ssize, q, &lo, &hi);
        off += (hi - lo) * sa->ssize;
    }
    return off;
}

/* Stage 1: this rank's share of its group's partials. */
static void make_partials(zcopy_span_algo_t *sa)
{
    const zcopy_span_t *sp = sa->sp;
    const int m = my_group_size(sa);
    uint8_t *dst = (uint8_t *)(uintptr_t)sp->scratch.va;
    size_t lo, hi;

    for (int r = sp->index[sa->rank]; r < sa->nranks && m > 1; r += m) {
        if (same_group(sa, r))
            continue;
        owned_slice(sa->sp, sa->a, sa->ssize, r, &lo, &hi);
        group_reduce(sa, dst, lo * sa->ssize, hi - lo);
        dst += (hi - lo) * sa->ssize;
    }
}

/* Stage 2: @dst = slice [lo, hi) of this rank's group's inputs (rank
 * @first's first: in place, @dst is its alias) and of every other group's
 * partial, fetched into the landing area. With @share (allreduce), the
 * result also goes to the same place of the group's outputs. */
static void reduce_own_slice(zcopy_span_algo_t *sa, size_t lo, size_t hi,
                             uint8_t *dst, int first, bool share)
{
    const uint8_t **ins = zcopy_comm_list(sa->zc, ZCOPY_COMM_LIST_INPUTS);
    const zcopy_span_t *sp = sa->sp;
    const int me = sa->rank, g = group_of(sa, me), m = my_group_size(sa);
    const size_t e = sa->ssize, len = hi - lo;

    if (len == 0)
        return;
    for (int i = 0; i < m; i++) {
        int j = zcopy_span_member(sp, g, sp->index[first] + i);
        ins[i] = zcopy_span_map(sa, j, args_of(sa, j)->sbuf + lo * e,
                                len * e);
        sa->ipc_bytes += j == me ? 0 : len * e;
    }
    /* Operands in group order (the reduction's order); the gets start at
     * the next group, so that every group's ranks do not ask the same
     * group first where coll_zcopy_ucx_max_requests binds. */
    for (int s = 1; s < sp->ngroups; s++) {
        int t = (g + s) % sp->ngroups, at_k = m + t - (t > g ? 1 : 0);
        int j = zcopy_span_member(sp, t, me); /* the maker of our partial */
        uint64_t at;

        at = zcopy_span_group_size(sp, t) > 1
                 ? zcopy_span_desc(sp, j)->xblock.va + partial_offset(sa, t, me)
                 : args_of(sa, j)->sbuf + lo * e;
        ins[at_k] = sp->landing + (size_t)(at_k - m) * len * e;
        zcopy_span_get(sa, j, at, len * e, (uint8_t *)ins[at_k]);
    }
    zcopy_span_complete(sa);
    reduce_inputs(sa, dst, ins, m + sp->ngroups - 1, len, share, lo * e);
}

/* Stage 3: every slice another group owns is fetched once per group,
 * member o mod (group size) fetching slice o, from the owner's group
 * member that matches it (they all hold it now), then shared. */
static void fetch_other_slices(zcopy_span_algo_t *sa)
{
    const zcopy_span_t *sp = sa->sp;
    const int me = sa->rank, g = group_of(sa, me);
    const size_t e = sa->ssize, count = sa->a->scount;
    uint8_t *out = sa->a->rbuf;
    size_t lo, hi;

    for (int i = 0; i < sa->nranks; i++) {
        int o = (me + i) % sa->nranks; /* spread the sources */
        int from = zcopy_span_member(sp, group_of(sa, o), sp->index[me]);

        if (group_of(sa, o) == g || zcopy_span_member(sp, g, o) != me)
            continue;
        zcopy_slice(count, e, o, sa->nranks, &lo, &hi);
        zcopy_span_get(sa, from, args_of(sa, from)->rbuf + lo * e,
                       (hi - lo) * e, out + lo * e);
    }
    zcopy_span_complete(sa);
    for (int o = 0; o < sa->nranks && my_group_size(sa) > 1; o++) {
        if (group_of(sa, o) == g || zcopy_span_member(sp, g, o) != me)
            continue;
        zcopy_slice(count, e, o, sa->nranks, &lo, &hi);
        share_in_group(sa, out, lo * e, (hi - lo) * e);
    }
}

/* Partials crossing between groups: (groups - 1) / groups of the vector
 * into each group, and as much again for the results: what a ring would
 * move, at any number of groups, with memory per rank of about one slice
 * per other group. Every slice is reduced once, so every rank gets bitwise
 * the same result. Out of place and small enough (allreduce_replicated):
 * every rank reduces the whole vector, sources in rank order, with one
 * sync. */
zcopy_status_t zcopy_span_allreduce(zcopy_span_algo_t *sa)
{
    size_t lo, hi;

    if (allreduce_replicated(sa->sp, sa->a, sa->ssize)) {
        owner_reduce(sa, sa->a->rbuf, 0, 0, sa->a->scount);
        return span_finish(sa);
    }
    make_partials(sa);
    if (sa->sp->max_group > 1 && zcopy_span_sync(sa)) /* partials made */
        return ZCOPY_ERR_INTERNAL;
    zcopy_slice(sa->a->scount, sa->ssize, sa->rank, sa->nranks, &lo, &hi);
    reduce_own_slice(sa, lo, hi, (uint8_t *)sa->a->rbuf + lo * sa->ssize,
                     sa->rank, true);
    if (zcopy_span_sync(sa)) /* every slice reduced and in its group */
        return ZCOPY_ERR_INTERNAL;
    fetch_other_slices(sa);
    return span_finish(sa);
}

/* The root's group reduces, one slice per member (hierarchically, as
 * above), straight into the root's output. */
zcopy_status_t zcopy_span_reduce(zcopy_span_algo_t *sa)
{
    const int root = sa->a->root;
    const size_t e = sa->ssize;
    size_t lo, hi;
    uint8_t *out;

    make_partials(sa);
    if (sa->sp->max_group > 1 && zcopy_span_sync(sa)) /* partials made */
        return ZCOPY_ERR_INTERNAL;
    if (same_group(sa, root)) {
        owned_slice(sa->sp, sa->a, e, sa->rank, &lo, &hi);
        out = zcopy_span_map(sa, root, args_of(sa, root)->rbuf + lo * e,
                             (hi - lo) * e);
        if (out != NULL || hi == lo) {
            /* The root's input first: in place it is the output's alias. */
            reduce_own_slice(sa, lo, hi, out, root, false);
            sa->ipc_bytes += sa->rank == root ? 0 : (hi - lo) * e;
        }
    }
    return span_finish(sa);
}

/* Rank r reduces block r (hierarchically, as above) into its own output.
 * In place the result waits aside (the rest of the buffer is input the
 * peers may still read) and moves to the front after the last sync. */
zcopy_status_t zcopy_span_reduce_scatter(zcopy_span_algo_t *sa)
{
    const zcopy_coll_args_t *a = sa->a;
    const int me = sa->rank;
    const size_t e = sa->ssize;
    size_t displ, own;
    uint8_t *dst;

    scattered_block(sa->sp, a, me, &displ, &own);
    /* In place, the result waits in the communicator's holding buffer
     * (reserved before the arrival) until no peer reads this rank's
     * inputs, and its own block keeps its input (zcopy_coll_holding_bytes). */
    dst = in_place(sa, me) && displ > 0 ? sa->zc->holding : a->rbuf;
    make_partials(sa);
    if (sa->sp->max_group > 1 && zcopy_span_sync(sa)) /* partials made */
        return ZCOPY_ERR_INTERNAL;
    reduce_own_slice(sa, displ, displ + own, dst, me, false);
    if (zcopy_span_sync(sa))
        return ZCOPY_ERR_INTERNAL;
    if (in_place(sa, me) && displ > 0 && own > 0)
        memcpy(a->rbuf, dst, own * e);
    return ZCOPY_SUCCESS;
}

void zcopy_span_needs(const zcopy_span_t *sp, const zcopy_coll_args_t *a,
                      size_t elem, size_t *landing, size_t *scratch)
{
    const int me = sp->rank, g = sp->group[me];
    const int m = zcopy_span_group_size(sp, g);
    const size_t others = (size_t)(sp->nranks - m);
    size_t lo, hi;

    *landing = *scratch = 0;
    switch (a->type) {
    case ZCOPY_COLL_ALLREDUCE:
        if (allreduce_replicated(sp, a, elem)) {
            *landing = others * a->scount * elem;
            return;
        }
        break;
    case ZCOPY_COLL_REDUCE:
    case ZCOPY_COLL_REDUCE_SCATTER:
    case ZCOPY_COLL_REDUCE_SCATTER_BLOCK:
        break;
    default:
        return;
    }
    /* The hierarchical reductions: one slice per other group lands; this
     * rank makes its group's partials of its share of foreign slices. */
    owned_slice(sp, a, elem, me, &lo, &hi);
    *landing = (size_t)(sp->ngroups - 1) * (hi - lo) * elem;
    for (int r = sp->index[me]; r < sp->nranks && m > 1; r += m) {
        if (sp->group[r] == g)
            continue;
        owned_slice(sp, a, elem, r, &lo, &hi);
        *scratch += (hi - lo) * elem;
    }
}

/* --- data movement ---------------------------------------------------------- */

/* Offset and length in bytes of rank @j's block in a gathered buffer, as
 * this rank's arguments describe it. */
static void gathered_block(const zcopy_span_algo_t *sa, int j, size_t *off,
                           size_t *len)
{
    const zcopy_coll_args_t *a = sa->a;
    const bool v = a->type == ZCOPY_COLL_ALLGATHERV ||
                   a->type == ZCOPY_COLL_GATHERV;

    *len = (v ? (size_t)a->rcounts[j] : a->rcount) * sa->rsize;
    *off = v ? (size_t)a->rdispls[j] * sa->rsize : (size_t)j * *len;
}

/* Blocks of the own group come through mappings; blocks of other groups
 * are fetched once per group, member i taking every rank j with
 * j = i (mod group size), and then copied among the group. allgatherv is
 * not shared that way: each rank chooses its own displacements, so where
 * a member keeps block j is its own business; every rank fetches its
 * blocks itself. */
zcopy_status_t zcopy_span_allgather(zcopy_span_algo_t *sa)
{
    const zcopy_span_t *sp = sa->sp;
    const int n = sa->nranks, me = sa->rank, g = group_of(sa, me);
    uint8_t *out = sa->a->rbuf;
    size_t off, len, total = 0;
    bool spread;

    for (int j = 0; j < n; j++) {
        gathered_block(sa, j, &off, &len);
        total += len;
    }
    spread = sa->a->type == ZCOPY_COLL_ALLGATHER && spreads(sa, total);
    for (int i = 0; i < n; i++) {
        int j = (me + i) % n; /* spread the sources */

        gathered_block(sa, j, &off, &len);
        if (j == me && in_place(sa, me))
            continue;
        if (same_group(sa, j) || !spread || zcopy_span_member(sp, g, j) == me)
            zcopy_span_get(sa, j, args_of(sa, j)->sbuf, len, out + off);
    }
    if (spread) {
        if (zcopy_span_sync(sa))
            return ZCOPY_ERR_INTERNAL;
        for (int j = 0; j < n; j++) {
            int from = zcopy_span_member(sp, g, j);
            if (same_group(sa, j) || from == me)
                continue;
            gathered_block(sa, j, &off, &len);
            zcopy_span_get(sa, from, args_of(sa, from)->rbuf + off, len,
                           out + off);
        }
    }
    return span_finish(sa);
}

/* The root's group copies from the root; every other group fetches the
 * buffer once, one piece per member, and then copies the pieces among
 * itself. */
zcopy_status_t zcopy_span_bcast(zcopy_span_algo_t *sa)
{
    const zcopy_span_t *sp = sa->sp;
    const int root = sa->a->root, me = sa->rank, g = group_of(sa, me);
    const int m = my_group_size(sa);
    const size_t bytes = sa->a->rcount * sa->rsize;
    const uint64_t from_root = args_of(sa, root)->rbuf;
    const bool spread = spreads(sa, bytes);
    uint8_t *buf = sa->a->rbuf;
    size_t lo, hi;

    if (same_group(sa, root) || !spread) {
        if (me != root)
            zcopy_span_get(sa, root, from_root, bytes, buf);
    } else {
        zcopy_slice(bytes, 1, sp->index[me], m, &lo, &hi);
        zcopy_span_get(sa, root, from_root + lo, hi - lo, buf + lo);
    }
    if (spread) {
        if (zcopy_span_sync(sa))
            return ZCOPY_ERR_INTERNAL;
        for (int i = 0; i < m && !same_group(sa, root); i++) {
            int from = zcopy_span_member(sp, g, i);
            if (from == me)
                continue;
            zcopy_slice(bytes, 1, i, m, &lo, &hi);
            zcopy_span_get(sa, from, args_of(sa, from)->rbuf + lo, hi - lo,
                           buf + lo);
        }
    }
    return span_finish(sa);
}

/* Blocks of other groups: the root fetches them straight into its output.
 * Its own group's ranks copy theirs in themselves through the mapping
 * (gather), which spreads the copying; gatherv's displacements are known
 * at the root only, so there the root copies those too. */
zcopy_status_t zcopy_span_gather(zcopy_span_algo_t *sa)
{
    const int root = sa->a->root, me = sa->rank;
    const bool v = sa->a->type == ZCOPY_COLL_GATHERV;
    size_t off, len;

    if (!v && me != root && same_group(sa, root)) {
        len = sa->a->scount * sa->ssize;
        zcopy_span_put(sa, root, args_of(sa, root)->rbuf + (size_t)me * len,
                       len, sa->a->sbuf);
    }
    for (int j = 0; j < sa->nranks && me == root; j++) {
        if (j == root ? in_place(sa, root) : !v && same_group(sa, j))
            continue;
        gathered_block(sa, j, &off, &len);
        zcopy_span_get(sa, j, args_of(sa, j)->sbuf, len,
                       (uint8_t *)sa->a->rbuf + off);
    }
    return span_finish(sa);
}

/* scatter: every rank fetches its block from the root. scatterv: only the
 * root knows where each block starts, so it puts every block straight into
 * its owner's output. */
zcopy_status_t zcopy_span_scatter(zcopy_span_algo_t *sa)
{
    const zcopy_coll_args_t *a = sa->a;
    const int root = a->root, me = sa->rank;
    size_t len, off;

    if (a->type == ZCOPY_COLL_SCATTER) {
        len = a->rcount * sa->rsize;
        if (me != root || !in_place(sa, root))
            zcopy_span_get(sa, root, args_of(sa, root)->sbuf +
                                         (size_t)me * len, len, a->rbuf);
        return span_finish(sa);
    }
    for (int j = 0; j < sa->nranks && me == root; j++) {
        if (j == root && in_place(sa, root))
            continue;
        len = (size_t)a->scounts[j] * sa->ssize;
        off = (size_t)a->sdispls[j] * sa->ssize;
        zcopy_span_put(sa, j, j == root ? (uint64_t)(uintptr_t)a->rbuf
                                        : args_of(sa, j)->rbuf,
                       len, (const uint8_t *)a->sbuf + off);
    }
    return span_finish(sa);
}

/* Bytes of the block @j receives from this rank, and where it starts in
 * this rank's send buffer. */
static size_t alltoall_sent(const zcopy_span_algo_t *sa, int j, size_t *off)
{
    const zcopy_coll_args_t *a = sa->a;

    if (a->type != ZCOPY_COLL_ALLTOALLV) {
        *off = (size_t)j * a->scount * sa->ssize;
        return a->scount * sa->ssize;
    }
    *off = (size_t)a->sdispls[j] * sa->ssize;
    return (size_t)a->scounts[j] * sa->ssize;
}

/* Bytes of the block this rank receives from @j, and where it goes in
 * this rank's output. */
static size_t alltoall_received(const zcopy_span_algo_t *sa, int j,
                                size_t *off)
{
    const zcopy_coll_args_t *a = sa->a;

    if (a->type != ZCOPY_COLL_ALLTOALLV) {
        *off = (size_t)j * a->rcount * sa->rsize;
        return a->rcount * sa->rsize;
    }
    *off = (size_t)a->rdispls[j] * sa->rsize;
    return (size_t)a->rcounts[j] * sa->rsize;
}

/* Whether every block between groups is pushed: an alltoall's are one
 * size, an alltoallv's all go (zcopy_span_pushes_all). The same answer on
 * every rank. */
static bool alltoall_pushes_all(const zcopy_span_algo_t *sa)
{
    const zcopy_coll_args_t *a = sa->a;

    if (a->type == ZCOPY_COLL_ALLTOALLV)
        return zcopy_span_pushes_all(sa->sp);
    return zcopy_span_pushes(sa, a->scount * sa->ssize);
}

/* A block between groups that is pushed: its length, else 0 (an
 * alltoall's of at least coll_zcopy_ucx_push_min bytes, every one of an
 * alltoallv's where they go so). Both ranks of the pair answer alike. */
static size_t alltoall_pushed(const zcopy_span_algo_t *sa, int j, size_t len)
{
    if (same_group(sa, j))
        return 0;
    if (sa->a->type == ZCOPY_COLL_ALLTOALLV)
        return zcopy_span_pushes_all(sa->sp) ? len : 0;
    return zcopy_span_pushes(sa, len) ? len : 0;
}

/* One step of pushes (zcopy_span_push), in parts the point-to-point engine
 * can count (an alltoallv's block may pass 2 GiB;
 * coll_zcopy_ucx_push_part_max, agreed at set-up); the receiver cuts its
 * block where the sender does, and the engine keeps their order. */
static void alltoall_push(zcopy_span_algo_t *sa, int from, uint8_t *dst,
                          size_t rlen, int to, const uint8_t *src, size_t slen)
{
    const size_t part = zcopy_config.ucx_push_part_max;

    do {
        size_t r = rlen < part ? rlen : part;
        size_t s = slen < part ? slen : part;

        zcopy_span_push(sa, from, dst, r, to, src, s);
        dst += r;
        src += s;
        rlen -= r;
        slen -= s;
    } while (rlen + slen > 0);
}

/* Blocks between groups that are pushed first (an alltoall's from
 * coll_zcopy_ucx_push_min, an alltoallv's all), in steps of distance (see
 * zcopy_span_push), so that they travel while the rest is copied; then
 * every other block is fetched straight into the output (in place never
 * gets here: span.c delivers it from the arrival or falls back). */
zcopy_status_t zcopy_span_alltoall(zcopy_span_algo_t *sa)
{
    const zcopy_coll_args_t *a = sa->a;
    const bool v = a->type == ZCOPY_COLL_ALLTOALLV;
    const int me = sa->rank, n = sa->nranks;
    uint8_t *out = a->rbuf;
    size_t roff, soff, rlen, slen;

    for (int d = 1; d < n; d++) {
        const int from = (me - d + n) % n, to = (me + d) % n;

        rlen = alltoall_pushed(sa, from, alltoall_received(sa, from, &roff));
        slen = alltoall_pushed(sa, to, alltoall_sent(sa, to, &soff));
        alltoall_push(sa, from, out + roff, rlen, to,
                      (const uint8_t *)a->sbuf + soff, slen);
    }
    for (int k = 0; k < n; k++) {
        const int j = (me + k) % n; /* spread the sources */
        const uint64_t src = args_of(sa, j)->sbuf +
                             (v ? (uint64_t)sa->sp->sdispls[j]
                                : (uint64_t)me * a->rcount * sa->rsize);

        rlen = alltoall_received(sa, j, &roff);
        if (alltoall_pushed(sa, j, rlen) == 0)
            zcopy_span_get(sa, j, src, rlen, out + roff);
    }
    /* Where every block between groups was pushed, nobody outside the
     * group reads or writes this rank's buffers once its pushes are done:
     * only its group waits for its readers, and no message goes between
     * servers. Every rank knows (alltoall_pushes_all), and the layout is
     * agreed at set-up.
     * Not where groups share a host's cores: a group that left early
     * competes there for the CPUs of one still copying (alltoall of 1
     * MiB, medians of 5 interleaved jobs: 2 virtual servers of 2 ranks
     * 271 us against 228 with the full sync; 2 emulated servers of 2
     * ranks, 9 jobs, 632 against 738; src/ucx/README.md). */
    if (!sa->sp->hosts_shared && alltoall_pushes_all(sa))
        return span_finish_group(sa);
    return span_finish(sa);
}
