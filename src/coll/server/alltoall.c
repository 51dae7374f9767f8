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

/* What a rank that could not reach a partner posts before the sync, for
 * each pair (this rank, j > it) with a block: a receive into its block,
 * and a copy of what the block held, which it sends after the sync. */
typedef struct {
    void *recv, *send;
    uint8_t *copy;
} swap_trade_t;

static void trades_free(swap_trade_t *t, int n)
{
    for (int j = 0; j < n && t != NULL; j++) {
        if (t[j].recv != NULL)
            zcopy_algo_p2p_cancel(t[j].recv);
        free(t[j].copy);
    }
    free(t);
}

/* Before the sync, at a rank that swapped nothing: copies every block it
 * owes a higher rank and posts the receives of theirs, so that those
 * ranks, told by the sync, can send first and receive after. NULL, with
 * nothing left posted, when it could not: it then reports BROKEN, and
 * those pairs fail on both sides instead of waiting. */
static swap_trade_t *trades_post(zcopy_algo_t *al)
{
    const int n = al->nranks;
    swap_trade_t *t = calloc((size_t)n, sizeof(*t));
    uint8_t *rbuf = al->a->rbuf;
    size_t off, len;

    for (int j = al->rank + 1; j < n && t != NULL; j++) {
        recv_block(al, j, &off, &len);
        if (len == 0)
            continue;
        t[j].copy = malloc(len);
        if (t[j].copy != NULL)
            memcpy(t[j].copy, rbuf + off, len);
        if (t[j].copy == NULL ||
            zcopy_algo_p2p_post(al, j, false, rbuf + off, len, &t[j].recv) !=
                ZCOPY_SUCCESS) {
            trades_free(t, n);
            return NULL;
        }
    }
    return t;
}

/* After the sync, at a rank that swapped nothing: sends every copy. */
static zcopy_status_t trades_send(zcopy_algo_t *al, swap_trade_t *t)
{
    zcopy_status_t st = ZCOPY_SUCCESS;
    size_t off, len;

    for (int j = al->rank + 1; j < al->nranks; j++) {
        zcopy_status_t one;

        if (t[j].recv == NULL)
            continue;
        recv_block(al, j, &off, &len);
        one = zcopy_algo_p2p_post(al, j, true, t[j].copy, len, &t[j].send);
        st = st == ZCOPY_SUCCESS ? one : st;
    }
    return st;
}

/* Then waits for its pairs' messages both ways, and frees the trades. */
static zcopy_status_t trades_wait(zcopy_algo_t *al, swap_trade_t *t)
{
    zcopy_status_t st = ZCOPY_SUCCESS, one;
    size_t off, len;

    for (int j = al->rank + 1; j < al->nranks; j++) {
        recv_block(al, j, &off, &len);
        if (t[j].recv != NULL) {
            one = zcopy_algo_p2p_wait(al, j, false, t[j].recv, len);
            t[j].recv = NULL;
            st = st == ZCOPY_SUCCESS ? one : st;
        }
        if (t[j].send != NULL) {
            one = zcopy_algo_p2p_wait(al, j, true, t[j].send, len);
            t[j].send = NULL;
            st = st == ZCOPY_SUCCESS ? one : st;
        }
    }
    trades_free(t, al->nranks);
    return st;
}

/* After the sync, at a rank above one that swapped nothing: its block
 * goes out first, to the receive posted before the sync, and the
 * partner's comes in where it was. The receive is posted even when the
 * send failed, since the partner's message comes anyway and must not be
 * left to match a later repair. *@traded: whether the pair had a block. */
static zcopy_status_t trade_with(zcopy_algo_t *al, int i, unsigned flags,
                                 bool *traded)
{
    uint8_t *rbuf = al->a->rbuf;
    zcopy_status_t st, got;
    size_t off, len;

    recv_block(al, i, &off, &len);
    *traded = len > 0;
    if (len == 0)
        return ZCOPY_SUCCESS;
    if (flags & ZCOPY_SYNC_BROKEN)
        return zcopy_error(ZCOPY_ERR_SYSTEM, "%s in place: rank %d could "
                           "neither reach its partners' memory nor post its "
                           "blocks", zcopy_coll_names[al->a->type], i);
    st = zcopy_algo_p2p_move(al, i, true, rbuf + off, len);
    got = zcopy_algo_p2p_move(al, i, false, rbuf + off, len);
    return st == ZCOPY_SUCCESS ? got : st;
}

/* After the sync: the pairs of every rank that reported a failure were
 * left unswapped, and trade their blocks as messages. This rank's own
 * sends (if it failed) go first, so that no rank waits on a chain. */
static zcopy_status_t swap_repair(zcopy_algo_t *al, swap_trade_t *mine)
{
    zcopy_status_t st = mine != NULL ? trades_send(al, mine) : ZCOPY_SUCCESS;
    bool traded = al->failed;

    for (int i = 0; i < al->rank; i++) {
        const unsigned flags = zcopy_ctl_flags_at_sync(al->ctl, i);
        zcopy_status_t one;
        bool moved;

        if (flags == 0)
            continue;
        one = trade_with(al, i, flags, &moved);
        st = st == ZCOPY_SUCCESS ? one : st;
        traded = traded || moved;
    }
    if (mine != NULL) {
        zcopy_status_t one = trades_wait(al, mine);

        st = st == ZCOPY_SUCCESS ? one : st;
    } else if (al->failed) {
        st = zcopy_error(ZCOPY_ERR_SYSTEM, "%s in place: could not post the "
                         "blocks of the pairs this rank could not swap",
                         zcopy_coll_names[al->a->type]);
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
    swap_trade_t *trades = NULL;
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
    if (repairs && al->failed) {
        trades = trades_post(al);
        al->broken = trades == NULL;
    }
    /* The sync keeps every rank's buffer until the swaps into it are
     * done, and tells who swapped nothing. */
    if (zcopy_algo_finish_flags(al) == 0)
        return ZCOPY_SUCCESS;
    if (!repairs)
        return ZCOPY_ERR_INTERNAL; /* nothing could fail any more */
    return swap_repair(al, trades);
}

zcopy_status_t zcopy_algo_alltoall(zcopy_algo_t *al)
{
    if (zcopy_algo_args(al, 0)->flags & ZCOPY_PLAN_IN_PLACE)
        return alltoall_swap(al);
    alltoall_pull(al);
    return zcopy_algo_done(al);
}
