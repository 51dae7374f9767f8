/*
 * Repairs through the job's point-to-point engine: where a rank could not
 * reach a peer's memory after some ranks had already finished their part
 * (movement.c's rooted calls, whose other ranks have left; alltoall.c's
 * swaps in place, which other pairs have done), its share of the call
 * travels between it and the peers concerned as messages instead, with
 * no other rank involved. The rank that failed posts what it can before
 * it reports, and reports BROKEN where the engine refuses, so that its
 * partners never wait for a message that will not come; only a refusal
 * after the sync, of a message a partner already waits for, leaves that
 * partner waiting (an MPI error on this rank, which under the default
 * error handler ends the job).
 */
#include "algo.h"

#include "coll/wait.h"
#include "host/host.h"

#include <limits.h>

bool zcopy_algo_repairs_by_p2p(void)
{
    return zcopy_host.p2p_isend != NULL && zcopy_host.p2p_irecv != NULL &&
           zcopy_host.p2p_done != NULL && zcopy_host.p2p_cancel != NULL &&
           zcopy_host.comm_cid != NULL;
}

/* Posts the send (@send) or the receive of @len bytes at @buf to or
 * from @peer through the point-to-point engine, under the pushed blocks'
 * tag: a server's communicator carries no pushes of its own, and MPI's
 * order per source and tag keeps a following collective's messages
 * behind this one. *@req: the request, or NULL and an error. */
zcopy_status_t zcopy_algo_p2p_post(zcopy_algo_t *al, int peer, bool send,
                                   void *buf, size_t len, void **req)
{
    const uint32_t cid = zcopy_host.comm_cid(al->zc->handle);
    int rc;

    *req = NULL;
    if (len > INT_MAX)
        return zcopy_error(ZCOPY_ERR_RANGE, "%s: a block of %zu bytes is "
                           "beyond one point-to-point message",
                           zcopy_coll_names[al->a->type], len);
    rc = send ? zcopy_host.p2p_isend(cid, peer, ZCOPY_HOST_P2P_PUSH, buf, len,
                                     req)
              : zcopy_host.p2p_irecv(cid, peer, ZCOPY_HOST_P2P_PUSH, buf, len,
                                     req);
    if (rc == 0 && *req != NULL)
        return ZCOPY_SUCCESS;
    *req = NULL;
    return zcopy_error(ZCOPY_ERR_SYSTEM, "%s: the point-to-point engine "
                       "refused a block %s rank %d (error %d)",
                       zcopy_coll_names[al->a->type], send ? "to" : "from",
                       peer, rc);
}

/* Waits for @req, posted by zcopy_algo_p2p_post(). A send's byte count
 * is not checked: pml/ucx leaves it unset. */
zcopy_status_t zcopy_algo_p2p_wait(zcopy_algo_t *al, int peer, bool send,
                                   void *req, size_t len)
{
    bool failed = false;
    size_t moved = 0;
    zcopy_wait_t w;

    zcopy_wait_init(&w, al->ctl->yield, al->rank,
                    "a block through the point-to-point engine", al->seq);
    while (!zcopy_host.p2p_done(req, &moved, &failed))
        zcopy_wait_relax(&w, peer);
    if (failed || (!send && moved != len))
        return zcopy_error(ZCOPY_ERR_SYSTEM, "%s: a block %s rank %d failed "
                           "in the point-to-point engine (%zu of %zu bytes)",
                           zcopy_coll_names[al->a->type], send ? "to" : "from",
                           peer, moved, len);
    return ZCOPY_SUCCESS;
}

zcopy_status_t zcopy_algo_p2p_move(zcopy_algo_t *al, int peer, bool send,
                                   void *buf, size_t len)
{
    void *req;
    zcopy_status_t st = zcopy_algo_p2p_post(al, peer, send, buf, len, &req);

    return st == ZCOPY_SUCCESS ? zcopy_algo_p2p_wait(al, peer, send, req, len)
                               : st;
}

void zcopy_algo_p2p_cancel(void *req)
{
    zcopy_host.p2p_cancel(req);
}
