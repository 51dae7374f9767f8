/*
 * Reductions: allreduce, reduce, reduce_scatter and reduce_scatter_block.
 *
 * Large messages are split into one slice per rank, so that every rank
 * reduces at once: rank r reads slice r of every input through the
 * mappings and writes the result where it belongs (every rank's output for
 * allreduce, the root's for reduce, its own for reduce_scatter). Slice r of
 * every buffer is touched by rank r alone, which is what makes MPI_IN_PLACE
 * safe without a scratch buffer. Slices start on cache-line boundaries so
 * that ranks writing neighbouring slices never share a line.
 *
 * Each slice is reduced by exactly one rank and then copied, so every rank
 * gets bitwise the same result.
 *
 * A rank that cannot map a peer's buffer does none of its work (it maps
 * everything first). Out of place the inputs are intact and the fallback
 * redoes the call. In place the other ranks' slices are already reduced,
 * in the very buffers that held the inputs; but the failed rank's slices
 * were touched by nobody, so every rank hands just those to the previous
 * component's reduction, in rank order (the repair).
 */
#include "algo.h"

/* Local addresses of every rank's whole buffer (sbuf or rbuf as published). */
static bool map_all(zcopy_algo_t *al, bool send, size_t len, uint8_t **bufs)
{
    for (int j = 0; j < al->nranks; j++) {
        const zcopy_plan_args_t *args = zcopy_algo_args(al, j);
        bufs[j] = zcopy_algo_at(al, j, send ? args->sbuf : args->rbuf, 0, len);
    }
    return !al->failed;
}

/* dst = the reduction of @nsrcs inputs at @offset, sources taken in the
 * order first, first + 1, ... (mod n). */
static void reduce_step(zcopy_algo_t *al, uint8_t *dst, uint8_t *const *ins,
                        int first, size_t offset, size_t count)
{
    const void **srcs = zcopy_comm_list(al->zc, ZCOPY_COMM_LIST_OPERANDS);
    const int n = al->nranks;

    for (int k = 0; k < n; k++) {
        int j = (first + k) % n;
        srcs[k] = ins[j] + offset;
        if (j != al->rank)
            al->ipc_bytes += count * al->ssize;
    }
    /* Not a mapping failure: results are half written, nothing repairs
     * them (planning rules out the pairs that could get here). */
    if (zcopy_reduce(al->a->op, al->a->stype, dst, srcs, n, count) !=
        ZCOPY_SUCCESS)
        al->failed = al->broken = true;
}

/* Small and out of place: every rank reduces the whole vector into its own
 * output, sources in rank order, so nobody writes to a peer. */
static void allreduce_replicated(zcopy_algo_t *al, uint8_t *const *ins,
                                 uint8_t *out, size_t count)
{
    reduce_step(al, out, ins, 0, 0, count);
    for (int j = 0; j < al->nranks; j++)
        al->ctl->hints[j] = j == al->rank ? NULL : ins[j];
}

/* A rank's reduction failed half-way: the same error on every rank. */
static zcopy_status_t reduction_broken(const zcopy_algo_t *al)
{
    return zcopy_error(ZCOPY_ERR_INTERNAL, "%s: a rank's reduction failed; "
                       "the results are undefined",
                       zcopy_coll_names[al->a->type]);
}

/* After a sync that reported failure: the slices of the ranks that failed,
 * reduced in place by the previous component (rbuf + lo * e, hi - lo
 * elements), the root's own for a reduce (@root -1: an allreduce). */
static zcopy_status_t repair_slices(zcopy_algo_t *al, size_t count, int root)
{
    const zcopy_coll_args_t *a = al->a;
    const size_t e = al->ssize;
    zcopy_comm_ops_t *ops = &al->zc->ops;
    size_t lo, hi;
    int rc;

    for (int q = 0; q < al->nranks; q++) {
        if (!zcopy_ctl_failed_at_sync(al->ctl, q))
            continue;
        zcopy_slice(count, e, q, al->nranks, &lo, &hi);
        if (lo == hi)
            continue;
        if (root < 0)
            rc = ops->allreduce((uint8_t *)a->rbuf + lo * e, hi - lo,
                                a->stype, a->op, ops->ctx);
        else if (al->rank == root)
            rc = ops->reduce(MPI_IN_PLACE, (uint8_t *)a->rbuf + lo * e,
                             hi - lo, a->stype, a->op, root, ops->ctx);
        else
            rc = ops->reduce((const uint8_t *)a->sbuf + lo * e, NULL,
                             hi - lo, a->stype, a->op, root, ops->ctx);
        if (rc != MPI_SUCCESS)
            return zcopy_error(ZCOPY_ERR_INTERNAL, "%s: repairing rank %d's "
                               "slice failed (%d)", zcopy_coll_names[a->type],
                               q, rc);
    }
    return ZCOPY_REPAIRED;
}

static void allreduce_sliced(zcopy_algo_t *al, uint8_t *const *ins,
                             uint8_t *const *outs, size_t count)
{
    const size_t e = al->ssize, chunk = zcopy_chunk_elems(e);
    const int n = al->nranks, r = al->rank;
    size_t lo, hi;

    zcopy_slice(count, e, r, n, &lo, &hi);
    for (size_t at = lo; at < hi && !al->failed; at += chunk) {
        size_t len = hi - at < chunk ? hi - at : chunk;
        /* Own input first: in place, it is the one dst aliases. */
        reduce_step(al, outs[r] + at * e, ins, r, at * e, len);
        for (int k = 1; k < n; k++)
            zcopy_algo_copy(al, outs[(r + k) % n] + at * e, outs[r] + at * e,
                            len * e, true);
    }
}

zcopy_status_t zcopy_algo_allreduce(zcopy_algo_t *al)
{
    uint8_t **ins = zcopy_comm_list(al->zc, ZCOPY_COMM_LIST_INPUTS);
    uint8_t **outs = zcopy_comm_list(al->zc, ZCOPY_COMM_LIST_OUTPUTS);
    const size_t count = al->a->scount, bytes = count * al->ssize;
    const bool in_place = zcopy_algo_args(al, 0)->flags & ZCOPY_PLAN_IN_PLACE;
    unsigned flags;

    if (count > 0 && map_all(al, true, bytes, ins) &&
        map_all(al, false, bytes, outs)) {
        if (bytes <= zcopy_config.small_msg && !in_place)
            allreduce_replicated(al, ins, outs[al->rank], count);
        else
            allreduce_sliced(al, ins, outs, count);
    }
    flags = zcopy_algo_finish_flags(al);
    if (flags == 0)
        return ZCOPY_SUCCESS;
    if (flags & ZCOPY_SYNC_BROKEN)
        return reduction_broken(al);
    return in_place ? repair_slices(al, count, -1) : ZCOPY_FALLBACK;
}

zcopy_status_t zcopy_algo_reduce(zcopy_algo_t *al)
{
    uint8_t **ins = zcopy_comm_list(al->zc, ZCOPY_COMM_LIST_INPUTS), *out;
    const size_t e = al->ssize, count = al->a->scount, bytes = count * e;
    const int root = al->a->root;
    const bool root_alone = bytes <= zcopy_config.small_msg ||
                            zcopy_algo_root_moves(al);
    const bool in_place = zcopy_algo_args(al, root)->flags & ZCOPY_PLAN_IN_PLACE;
    size_t lo, hi, chunk = zcopy_chunk_elems(e);
    unsigned flags;

    /* Small (or where waits yield, up to what the root's record allows):
     * the root alone reduces; nobody else maps anything (a rank that could
     * not would fail a call the root completed), so the others wait for
     * the root alone at the end. */
    if (count == 0 || (root_alone && al->rank != root) ||
        !map_all(al, true, bytes, ins))
        goto out;
    out = zcopy_algo_at(al, root, zcopy_algo_args(al, root)->rbuf, 0, bytes);
    if (out == NULL)
        goto out;
    if (root_alone) {
        reduce_step(al, out, ins, root, 0, count);
        goto out;
    }
    zcopy_slice(count, e, al->rank, al->nranks, &lo, &hi);
    for (size_t at = lo; at < hi && !al->failed; at += chunk) {
        size_t len = hi - at < chunk ? hi - at : chunk;
        /* Root's input first: in place at the root, it is dst's alias. */
        reduce_step(al, out + at * e, ins, root, at * e, len);
        if (al->rank != root)
            al->ipc_bytes += len * e;
    }
out:
    flags = root_alone
                ? zcopy_ctl_sync_from(al->ctl, root, zcopy_algo_report(al))
                : zcopy_algo_finish_flags(al);
    if (flags == 0)
        return ZCOPY_SUCCESS;
    if (flags & ZCOPY_SYNC_BROKEN)
        return reduction_broken(al);
    /* Reduced by the root alone, only it can have failed, before writing
     * anything. */
    return in_place && !root_alone ? repair_slices(al, count, root)
                                   : ZCOPY_FALLBACK;
}

/* After a sync that reported failure, in place: the blocks of the ranks
 * that failed, each reduced to its rank by the previous component, from
 * the inputs nobody has touched (block q of every buffer is read by rank q
 * alone, and its result written by it alone, to @own_dst: rank 0's own
 * place, another rank's holding buffer). */
static zcopy_status_t repair_blocks(zcopy_algo_t *al, uint8_t *own_dst)
{
    const zcopy_coll_args_t *a = al->a;
    zcopy_comm_ops_t *ops = &al->zc->ops;
    const size_t e = al->ssize;
    size_t displ = 0, c;
    int rc;

    for (int q = 0; q < al->nranks; q++, displ += c) {
        const bool own_in_place = zcopy_algo_args(al, al->rank)->flags &
                                  ZCOPY_PLAN_IN_PLACE;
        const uint8_t *in = own_in_place ? a->rbuf : a->sbuf;

        c = a->type == ZCOPY_COLL_REDUCE_SCATTER ? (size_t)a->rcounts[q]
                                                 : a->rcount;
        if (c == 0 || !zcopy_ctl_failed_at_sync(al->ctl, q))
            continue;
        if (q == al->rank && own_in_place && displ == 0)
            rc = ops->reduce(MPI_IN_PLACE, a->rbuf, c, a->stype, a->op, q,
                             ops->ctx);
        else if (q == al->rank && own_in_place)
            rc = ops->reduce((uint8_t *)a->rbuf + displ * e, own_dst, c,
                             a->stype, a->op, q, ops->ctx);
        else
            rc = ops->reduce(in + displ * e, q == al->rank ? a->rbuf : NULL,
                             c, a->stype, a->op, q, ops->ctx);
        if (rc != MPI_SUCCESS)
            return zcopy_error(ZCOPY_ERR_INTERNAL, "%s: repairing rank %d's "
                               "block failed (%d)", zcopy_coll_names[a->type],
                               q, rc);
    }
    return ZCOPY_REPAIRED;
}

/* Rank r reduces block r of every input. In place, the inputs are the
 * outputs, and block 0 of this rank's buffer may only be overwritten once
 * rank 0 has read it, while block r must keep its input: hence the result
 * waits in the communicator's holding buffer (reserved before the arrival,
 * zcopy_coll_holding_bytes), then goes to the front after the sync. */
zcopy_status_t zcopy_algo_reduce_scatter(zcopy_algo_t *al)
{
    uint8_t **ins = zcopy_comm_list(al->zc, ZCOPY_COMM_LIST_INPUTS);
    const zcopy_coll_args_t *a = al->a;
    const int n = al->nranks, r = al->rank;
    const size_t e = al->ssize;
    const bool in_place = zcopy_algo_args(al, r)->flags & ZCOPY_PLAN_IN_PLACE;
    size_t total = 0, displ = 0, own;
    zcopy_status_t st = ZCOPY_SUCCESS;
    unsigned flags;
    uint8_t *dst;

    for (int j = 0; j < n; j++) {
        size_t c = a->type == ZCOPY_COLL_REDUCE_SCATTER ? (size_t)a->rcounts[j]
                                                        : a->rcount;
        if (j < r)
            displ += c;
        total += c;
    }
    own = a->type == ZCOPY_COLL_REDUCE_SCATTER ? (size_t)a->rcounts[r] : a->rcount;
    dst = in_place && displ > 0 ? al->zc->holding : (uint8_t *)a->rbuf;
    if (own > 0 && map_all(al, true, total * e, ins)) {
        const size_t chunk = zcopy_chunk_elems(e);
        for (size_t at = 0; at < own && !al->failed; at += chunk) {
            size_t len = own - at < chunk ? own - at : chunk;
            reduce_step(al, dst + at * e, ins, r, (displ + at) * e, len);
        }
    }
    flags = zcopy_algo_finish_flags(al);
    if (flags & ZCOPY_SYNC_BROKEN)
        return reduction_broken(al);
    if (flags != 0) {
        if (!zcopy_algo_any_in_place(al))
            return ZCOPY_FALLBACK;
        st = repair_blocks(al, dst);
    }
    if (in_place && displ > 0 && own > 0 && st >= 0)
        memcpy(a->rbuf, dst, own * e);
    return st;
}
