/*
 * Pure data movement: allgather(v), bcast, gather(v), scatter(v). Each rank
 * moves its own share at once: allgather and scatter pull into the local
 * output, gather pushes into the root's output, bcast pulls from the root.
 * Where ranks outnumber cores, the root of a bcast or gather whose record
 * says so moves every block itself instead (server/run.c says when), and
 * only it can fail.
 * Peers are visited starting after this rank so that ranks do not all read
 * the same peer first. No rank writes any input (in place included), so a
 * call a rank could not finish is redone by the fallback; except where
 * each rank moved one block with the root, whose ranks other than the
 * root leave at once (rooted_done), and a block that could not be moved
 * travels between its rank and the root instead.
 */
#include "algo.h"

/* Byte offset and length of block @j in a (v-)layout of @elem-byte items. */
static void block_of(bool vector, const int *counts, const int *displs,
                     size_t count, size_t elem, int j, size_t *off, size_t *len)
{
    if (vector) {
        *off = (size_t)displs[j] * elem;
        *len = (size_t)counts[j] * elem;
    } else {
        *off = count * elem * (size_t)j;
        *len = count * elem;
    }
}

/* Where block @j of a rooted call lies in the root's buffers: *@buf and
 * *@len, and whether the root sends it (bcast, scatter) or receives it
 * (gather). */
typedef bool (*root_block_fn_t)(zcopy_algo_t *al, int j, uint8_t **buf,
                                size_t *len);

/* A rank other than the root: reports, and leaves unless it could not
 * reach the root. Then it moves its block (@mine, @len; @to_root: it
 * sends it) through the point-to-point engine, posting its part before
 * it reports, so that the root serves only ranks whose part is there: a
 * rank whose part the engine refused reports BROKEN, and both fail. */
static zcopy_status_t rooted_done_peer(zcopy_algo_t *al, void *mine,
                                       size_t len, bool to_root)
{
    const int root = al->a->root;
    zcopy_status_t st = ZCOPY_SUCCESS;
    void *req = NULL;

    if (al->failed)
        st = zcopy_algo_p2p_post(al, root, to_root, mine, len, &req);
    al->broken = st != ZCOPY_SUCCESS;
    zcopy_ctl_sync_to(al->ctl, root, zcopy_algo_report(al));
    if (!al->failed)
        return ZCOPY_SUCCESS;
    if (req == NULL)
        return st;
    st = zcopy_algo_p2p_wait(al, root, to_root, req, len);
    return st == ZCOPY_SUCCESS ? ZCOPY_REPAIRED : st;
}

/* The root: waits for every report, and serves every rank that could not
 * reach it. A part of its own that the engine refuses fails the call,
 * and its partner then waits on: an MPI error, which under the default
 * error handler ends the job (as for a pushed alltoall block). */
static zcopy_status_t rooted_done_root(zcopy_algo_t *al,
                                       root_block_fn_t root_block)
{
    zcopy_status_t st = ZCOPY_SUCCESS;

    /* The root reaches no peer here, so only the others can have failed. */
    if (zcopy_ctl_sync_to(al->ctl, al->rank, zcopy_algo_report(al)) == 0)
        return ZCOPY_SUCCESS;
    for (int j = 0; j < al->nranks; j++) {
        const unsigned flags = zcopy_ctl_flags_at_sync(al->ctl, j);
        zcopy_status_t one = ZCOPY_SUCCESS;
        uint8_t *buf;
        size_t len;
        bool send;

        if (j == al->rank || flags == 0)
            continue;
        if (flags & ZCOPY_SYNC_BROKEN) {
            one = zcopy_error(ZCOPY_ERR_SYSTEM, "%s: rank %d could neither "
                              "reach the root's memory nor post its block",
                              zcopy_coll_names[al->a->type], j);
        } else {
            send = root_block(al, j, &buf, &len);
            one = zcopy_algo_p2p_move(al, j, send, buf, len);
        }
        /* Every rank that posted its part waits for the root's: serve
         * them all before failing. */
        if (st == ZCOPY_SUCCESS)
            st = one;
    }
    return st == ZCOPY_SUCCESS ? ZCOPY_REPAIRED : st;
}

/* The end of a rooted call in which each rank moved its one block with
 * the root through the mappings. A rank other than the root reports and
 * leaves: nothing of its own is read or written by anyone else. The root
 * waits for every report, since the others read or wrote its buffers.
 * A rank that could not reach the root (@mine, @len: its side of its
 * block; @to_root: whether it sends it) then moves its block with the
 * root through the point-to-point engine; both count the call as a
 * fallback, the other ranks as zero-copy. Without that engine, every rank
 * waits for every report and falls back together, as other calls do. */
static zcopy_status_t rooted_done(zcopy_algo_t *al, void *mine, size_t len,
                                  bool to_root, root_block_fn_t root_block)
{
    if (!zcopy_algo_repairs_by_p2p())
        return zcopy_algo_done(al);
    if (al->rank != al->a->root)
        return rooted_done_peer(al, mine, len, to_root);
    return rooted_done_root(al, root_block);
}

/* Pulls every other rank's input into this rank's output, laid out as
 * this rank's receive counts and displacements say, and its own input
 * unless in place: an allgather's part, or a whole gather at its root. */
static void pull_blocks(zcopy_algo_t *al, bool vector)
{
    const zcopy_coll_args_t *a = al->a;
    const int n = al->nranks, r = al->rank;
    uint8_t *rbuf = a->rbuf;
    size_t off, len;

    for (int k = 1; k < n && !al->failed; k++) {
        int j = (r + k) % n;
        block_of(vector, a->rcounts, a->rdispls, a->rcount, al->rsize, j,
                 &off, &len);
        zcopy_algo_copy(al, rbuf + off,
                        zcopy_algo_at(al, j, zcopy_algo_args(al, j)->sbuf, 0,
                                      len),
                        len, true);
    }
    if (a->sbuf != MPI_IN_PLACE) {
        block_of(vector, a->rcounts, a->rdispls, a->rcount, al->rsize, r,
                 &off, &len);
        zcopy_algo_copy(al, rbuf + off, a->sbuf, len, false);
    }
}

zcopy_status_t zcopy_algo_allgather(zcopy_algo_t *al)
{
    pull_blocks(al, al->a->type == ZCOPY_COLL_ALLGATHERV);
    return zcopy_algo_done(al);
}

/* The root writes its buffer into every other rank's. */
static zcopy_status_t bcast_by_root(zcopy_algo_t *al, size_t len)
{
    const int n = al->nranks, r = al->rank;

    if (r != al->a->root)
        return zcopy_algo_done_by_root(al);
    for (int k = 1; k < n; k++) {
        int j = (r + k) % n;
        zcopy_algo_copy(al,
                        zcopy_algo_at(al, j, zcopy_algo_args(al, j)->rbuf, 0,
                                      len),
                        al->a->rbuf, len, true);
    }
    return zcopy_algo_done_by_root(al);
}

static bool bcast_root_block(zcopy_algo_t *al, int j, uint8_t **buf,
                             size_t *len)
{
    (void)j;
    *buf = al->a->rbuf;
    *len = al->a->rcount * al->rsize;
    return true;
}

/* Small: every rank pulls the whole message from the root. Large: the
 * message is cut into one slice per rank and rank k copies slice k from the
 * root to every other rank, so all ranks copy at once, the root included. */
zcopy_status_t zcopy_algo_bcast(zcopy_algo_t *al)
{
    const size_t len = al->a->rcount * al->rsize;
    const int root = al->a->root, n = al->nranks, r = al->rank;
    const uint8_t *src;
    size_t lo, hi;

    if (zcopy_algo_root_moves(al))
        return bcast_by_root(al, len);
    src = zcopy_algo_at(al, root, zcopy_algo_args(al, root)->sbuf, 0, len);
    if (len <= zcopy_config.small_msg) {
        if (r != root)
            zcopy_algo_copy(al, al->a->rbuf, src, len, true);
        return rooted_done(al, al->a->rbuf, len, false, bcast_root_block);
    }
    lo = zcopy_align_up(len * (size_t)r / (size_t)n, ZCOPY_CACHE_LINE);
    hi = r + 1 == n ? len
                    : zcopy_align_up(len * (size_t)(r + 1) / (size_t)n,
                                     ZCOPY_CACHE_LINE);
    hi = hi < len ? hi : len;
    for (int k = 0; k < n && src != NULL && lo < hi; k++) {
        int j = (r + k) % n; /* this rank's own buffer first */
        if (j == root)
            continue;
        zcopy_algo_copy(al,
                        zcopy_algo_at(al, j, zcopy_algo_args(al, j)->rbuf, lo,
                                      hi - lo),
                        src + lo, hi - lo, true);
    }
    return zcopy_algo_done(al);
}

/* Where block @j goes in the root's output (gather) or comes from in the
 * root's input (scatter): v-layouts use the byte displacements the root
 * published at arrival. */
static size_t root_offset(zcopy_algo_t *al, bool vector, size_t block, int j)
{
    if (vector)
        return (size_t)zcopy_ctl_vector(al->ctl, al->a->root, al->seq, 0)[j];
    return block * (size_t)j;
}

/* The root pulls every block from its rank's input (its own layout). */
static zcopy_status_t gather_by_root(zcopy_algo_t *al, bool vector)
{
    if (al->rank == al->a->root)
        pull_blocks(al, vector);
    return zcopy_algo_done_by_root(al);
}

static bool gather_root_block(zcopy_algo_t *al, int j, uint8_t **buf,
                              size_t *len)
{
    const zcopy_coll_args_t *a = al->a;
    size_t off;

    block_of(a->type == ZCOPY_COLL_GATHERV, a->rcounts, a->rdispls, a->rcount,
             al->rsize, j, &off, len);
    *buf = (uint8_t *)a->rbuf + off;
    return false;
}

zcopy_status_t zcopy_algo_gather(zcopy_algo_t *al)
{
    const zcopy_coll_args_t *a = al->a;
    const bool vector = a->type == ZCOPY_COLL_GATHERV;
    const int root = a->root, r = al->rank;
    const size_t len = a->scount * al->ssize;
    uint64_t out = zcopy_algo_args(al, root)->rbuf;

    if (zcopy_algo_root_moves(al))
        return gather_by_root(al, vector);
    if (r != root)
        zcopy_algo_copy(al,
                        zcopy_algo_at(al, root, out, root_offset(al, vector, len, r),
                                      len),
                        a->sbuf, len, true);
    else if (a->sbuf != MPI_IN_PLACE)
        zcopy_algo_copy(al, (uint8_t *)a->rbuf + root_offset(al, vector, len, r),
                        a->sbuf, len, false);
    return rooted_done(al, (void *)(uintptr_t)a->sbuf, len, true,
                       gather_root_block);
}

/* Where block @j of a scatter lies in the root's input, which the root
 * sends (rooted_done). */
static bool scatter_root_block(zcopy_algo_t *al, int j, uint8_t **buf,
                               size_t *len)
{
    const zcopy_coll_args_t *a = al->a;
    size_t off;

    block_of(a->type == ZCOPY_COLL_SCATTERV, a->scounts, a->sdispls,
             a->scount, al->ssize, j, &off, len);
    *buf = (uint8_t *)(uintptr_t)a->sbuf + off;
    return true;
}

zcopy_status_t zcopy_algo_scatter(zcopy_algo_t *al)
{
    const zcopy_coll_args_t *a = al->a;
    const bool vector = a->type == ZCOPY_COLL_SCATTERV;
    const int root = a->root, r = al->rank;
    uint64_t in = zcopy_algo_args(al, root)->sbuf;
    size_t len;

    if (r != root) {
        len = a->rcount * al->rsize;
        zcopy_algo_copy(al, a->rbuf,
                        zcopy_algo_at(al, root, in,
                                      root_offset(al, vector, len, r), len),
                        len, true);
    } else if (a->rbuf != MPI_IN_PLACE) {
        len = vector ? (size_t)a->scounts[r] * al->ssize : a->scount * al->ssize;
        zcopy_algo_copy(al, a->rbuf,
                        (const uint8_t *)a->sbuf + root_offset(al, vector, len, r),
                        len, false);
    }
    return rooted_done(al, a->rbuf, a->rcount * al->rsize, false,
                       scatter_root_block);
}
