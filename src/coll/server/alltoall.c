/*
 * alltoall and alltoallv. Out of place, each rank pulls its block from
 * every peer's input into its own output. In place, block (i, j) and block
 * (j, i) trade places: the lower rank of each pair swaps them through the
 * mapping, word by word in registers, so no buffer is staged anywhere.
 * A swap destroys inputs, so in place every rank first maps all it will
 * swap with, and swaps none of its pairs unless it reached them all: after
 * the sync, the pairs left unswapped are exactly those of the ranks that
 * reported a failure, and those pairs trade their blocks through the
 * point-to-point engine (repair.c). Without that engine, the ranks agree
 * that all could map before any swap (one sync more), so that a failure
 * leaves every input intact for the fallback.
 */
#include "algo.h"

#include <stdlib.h>

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

/* Trades this rank's block for @peer (@len bytes at @mine, in place) for
 * @peer's block for it, as two messages; the block goes out from a copy,
 * since the one coming in lands where it was. */
static zcopy_status_t swap_by_p2p(zcopy_algo_t *al, int peer, uint8_t *mine,
                                  size_t len)
{
    void *out = malloc(len), *sreq = NULL, *rreq = NULL;
    zcopy_status_t st, sent;

    if (out == NULL)
        return zcopy_error(ZCOPY_ERR_NOMEM, "alltoall in place: no memory "
                           "to trade a block with rank %d", peer);
    memcpy(out, mine, len);
    st = zcopy_algo_p2p_post(al, peer, false, mine, len, &rreq);
    sent = zcopy_algo_p2p_post(al, peer, true, out, len, &sreq);
    if (rreq != NULL) {
        zcopy_status_t got = zcopy_algo_p2p_wait(al, peer, false, rreq, len);

        st = st == ZCOPY_SUCCESS ? got : st;
    }
    if (sreq != NULL)
        sent = zcopy_algo_p2p_wait(al, peer, true, sreq, len);
    free(out);
    return st == ZCOPY_SUCCESS ? sent : st;
}

/* After the sync: every pair of a rank that reported a failure was left
 * unswapped, and its two ranks trade their blocks, in the same order
 * everywhere (by lower rank, then higher), so that no two ranks wait for
 * each other's next pair. */
static zcopy_status_t swap_repair(zcopy_algo_t *al)
{
    uint8_t *rbuf = al->a->rbuf;
    zcopy_status_t st = ZCOPY_SUCCESS;
    bool traded = false;
    size_t off, len;

    for (int i = 0; i < al->nranks; i++) {
        if (!zcopy_ctl_failed_at_sync(al->ctl, i) || i > al->rank)
            continue;
        for (int j = i + 1; j < al->nranks; j++) {
            const int peer = i == al->rank ? j : i;
            zcopy_status_t one;

            if (i != al->rank && j != al->rank)
                continue;
            recv_block(al, peer, &off, &len);
            if (len == 0)
                continue;
            one = swap_by_p2p(al, peer, rbuf + off, len);
            st = st == ZCOPY_SUCCESS ? one : st;
            traded = true;
        }
    }
    if (st != ZCOPY_SUCCESS)
        return st;
    return traded ? ZCOPY_REPAIRED : ZCOPY_SUCCESS;
}

static zcopy_status_t alltoall_swap(zcopy_algo_t *al)
{
    const int n = al->nranks, r = al->rank;
    const bool repairs = zcopy_algo_repairs_by_p2p();
    uint8_t *rbuf = al->a->rbuf;
    uint8_t **theirs = zcopy_comm_list(al->zc, ZCOPY_COMM_LIST_OUTPUTS);
    size_t off, len;

    for (int j = r + 1; j < n && !al->failed; j++) {
        recv_block(al, j, &off, &len);
        theirs[j] = len == 0 ? NULL
                             : zcopy_algo_at(al, j, zcopy_algo_args(al, j)->rbuf,
                                             peer_block(al, j, r, len, 1), len);
    }
    if (!repairs && zcopy_algo_finish(al))
        return ZCOPY_FALLBACK;
    for (int j = r + 1; j < n && !al->failed; j++) {
        if (theirs[j] == NULL)
            continue;
        recv_block(al, j, &off, &len);
        swap_bytes(rbuf + off, theirs[j], len);
        al->ipc_bytes += 2 * len;
    }
    /* The sync keeps every rank's buffer until the swaps into it are
     * done, and tells who swapped nothing. */
    if (!zcopy_algo_finish(al))
        return ZCOPY_SUCCESS;
    if (!repairs)
        return ZCOPY_ERR_INTERNAL; /* nothing could fail any more */
    return swap_repair(al);
}

zcopy_status_t zcopy_algo_alltoall(zcopy_algo_t *al)
{
    if (zcopy_algo_args(al, 0)->flags & ZCOPY_PLAN_IN_PLACE)
        return alltoall_swap(al);
    alltoall_pull(al);
    return zcopy_algo_done(al);
}
