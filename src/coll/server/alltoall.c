/*
 * alltoall and alltoallv. Out of place, each rank pulls its block from
 * every peer's input into its own output. In place, block (i, j) and block
 * (j, i) trade places: the lower rank of each pair swaps them through the
 * mapping, word by word in registers, so no buffer is staged anywhere.
 * A swap destroys inputs, so in place every rank first maps all it will
 * swap with, and the ranks agree that all could before any swap: one sync
 * more, for a call where a rank that cannot reach a peer must leave every
 * input intact for the fallback.
 */
#include "algo.h"

static void swap_bytes(uint8_t *a, uint8_t *b, size_t len)
{
    size_t i = 0;

    for (; i + sizeof(uint64_t) <= len; i += sizeof(uint64_t)) {
        uint64_t x, y;
        memcpy(&x, a + i, sizeof(x));
        memcpy(&y, b + i, sizeof(y));
        memcpy(a + i, &y, sizeof(y));
        memcpy(b + i, &x, sizeof(x));
    }
    for (; i < len; i++) {
        uint8_t t = a[i];
        a[i] = b[i];
        b[i] = t;
    }
}

/* Byte offset of block @j in this rank's output, and its length. */
static void recv_block(const zcopy_algo_t *al, int j, size_t *off, size_t *len)
{
    const zcopy_coll_args_t *a = al->a;

    if (a->type == ZCOPY_COLL_ALLTOALLV) {
        *off = (size_t)a->rdispls[j] * al->rsize;
        *len = (size_t)a->rcounts[j] * al->rsize;
    } else {
        *len = a->rcount * al->rsize;
        *off = *len * (size_t)j;
    }
}

/* Byte offset of the block for rank @to inside rank @from's buffer:
 * alltoallv ranks published it (@which: 0 send displacements, 1 receive
 * displacements for in place). */
static size_t peer_block(const zcopy_algo_t *al, int from, int to, size_t len,
                         int which)
{
    if (al->a->type == ZCOPY_COLL_ALLTOALLV)
        return (size_t)zcopy_ctl_vector(al->ctl, from, al->seq, which)[to];
    return len * (size_t)to;
}

static void alltoall_pull(zcopy_algo_t *al)
{
    const int n = al->nranks, r = al->rank;
    uint8_t *rbuf = al->a->rbuf;
    size_t off, len;

    for (int k = 0; k < n && !al->failed; k++) {
        int j = (r + k) % n;
        recv_block(al, j, &off, &len);
        if (len == 0)
            continue;
        zcopy_algo_copy(al, rbuf + off,
                        zcopy_algo_at(al, j, zcopy_algo_args(al, j)->sbuf,
                                      peer_block(al, j, r, len, 0), len),
                        len, j != r);
    }
}

static zcopy_status_t alltoall_swap(zcopy_algo_t *al)
{
    const int n = al->nranks, r = al->rank;
    uint8_t *rbuf = al->a->rbuf;
    uint8_t **theirs = zcopy_comm_list(al->zc, ZCOPY_COMM_LIST_OUTPUTS);
    size_t off, len;

    for (int j = r + 1; j < n && !al->failed; j++) {
        recv_block(al, j, &off, &len);
        theirs[j] = len == 0 ? NULL
                             : zcopy_algo_at(al, j, zcopy_algo_args(al, j)->rbuf,
                                             peer_block(al, j, r, len, 1), len);
    }
    if (zcopy_algo_finish(al))
        return ZCOPY_FALLBACK;
    for (int j = r + 1; j < n; j++) {
        if (theirs[j] == NULL)
            continue;
        recv_block(al, j, &off, &len);
        swap_bytes(rbuf + off, theirs[j], len);
        al->ipc_bytes += 2 * len;
    }
    /* Nothing can fail any more; the sync keeps every rank's buffer until
     * the swaps into it are done. */
    return zcopy_algo_finish(al) ? ZCOPY_ERR_INTERNAL : ZCOPY_SUCCESS;
}

zcopy_status_t zcopy_algo_alltoall(zcopy_algo_t *al)
{
    if (zcopy_algo_args(al, 0)->flags & ZCOPY_PLAN_IN_PLACE)
        return alltoall_swap(al);
    alltoall_pull(al);
    return zcopy_algo_done(al);
}
