/*
 * Shared by the algorithm files: one collective call in flight, after the
 * ranks agreed to run it zero-copy, and the helpers that move data.
 *
 * Every algorithm follows the same shape: arrival (done by the caller),
 * loads and stores through peers' mappings, then zcopy_ctl_sync so that no
 * rank returns while a peer may still touch its buffers; or, where only the
 * root touched peers' buffers, zcopy_ctl_sync_from, for which the others
 * wait for the root alone; or, where every rank touched only the root's
 * buffers and its own, zcopy_ctl_sync_to, for which the root waits for
 * the others and they for nobody (movement.c's rooted_done). Every rank
 * passes the same syncs whatever its role, even after a failure (which it
 * reports through the sync), so a failure to reach a peer can never hang
 * the job. (Repairs through the point-to-point engine wait for their
 * partner's messages: there, an engine that refuses a message it already
 * promised, after the sync, leaves that partner waiting; repair.c.)
 */
#ifndef ZCOPY_COLL_ALGO_H
#define ZCOPY_COLL_ALGO_H

#include "control.h"
#include "coll/data.h"
#include "reduce/reduce.h"

#include <string.h>

typedef struct {
    zcopy_comm_t *zc;
    zcopy_ctl_t *ctl;
    const zcopy_coll_args_t *a;
    uint64_t seq;                 /* the collective's number on this comm */
    int rank, nranks;
    size_t ssize, rsize;          /* bytes per element of stype, rtype */
    uint64_t ipc_bytes;           /* moved through peer mappings */
    zcopy_copy_call_t copies;     /* the call's way of copying (copy.c) */
    bool failed;                  /* could not reach a peer; nothing written
                                     since (every algorithm maps first) */
    bool broken;                  /* failed after writing, or could not
                                     post its repair: beyond repair */
} zcopy_algo_t;

typedef zcopy_status_t (*zcopy_algo_fn_t)(zcopy_algo_t *algo);

/* The agreed arguments of @rank for this collective. */
static inline const zcopy_plan_args_t *zcopy_algo_args(const zcopy_algo_t *al,
                                                      int rank)
{
    return zcopy_ctl_args(al->ctl, rank, al->seq);
}

/* This process's address of @len bytes at @rank's buffer @base + @offset
 * (a peer's through its mapping); NULL, and the call marked failed, when it
 * cannot be mapped. */
static inline uint8_t *zcopy_algo_at(zcopy_algo_t *al, int rank, uint64_t base,
                                     size_t offset, size_t len)
{
    uint8_t *p;

    if (al->failed)
        return NULL;
    if (zcopy_ctl_map(al->ctl, rank, base + offset, len, &p) != ZCOPY_SUCCESS) {
        zcopy_log(ZCOPY_LOG_WARN, "coll", "rank %d: %s", al->rank,
                  zcopy_error_detail());
        al->failed = true;
        return NULL;
    }
    return p;
}

/* A copy where at least one side may be a peer's memory. */
static inline void zcopy_algo_copy(zcopy_algo_t *al, void *dst,
                                   const void *src, size_t len, bool remote)
{
    if (dst == NULL || src == NULL || len == 0 || dst == src)
        return;
    zcopy_copy_in_call(&al->copies, dst, src, len);
    if (remote)
        al->ipc_bytes += len;
}

/* What this rank reports at the end of its part. */
static inline unsigned zcopy_algo_report(const zcopy_algo_t *al)
{
    return al->broken   ? ZCOPY_SYNC_BROKEN
           : al->failed ? ZCOPY_SYNC_FAILED : 0;
}

/* Ends the collective: true when it failed on any rank. */
static inline bool zcopy_algo_finish(zcopy_algo_t *al)
{
    return zcopy_ctl_sync(al->ctl, al->failed);
}

/* The last sync of an algorithm that may repair: what the ranks reported. */
static inline unsigned zcopy_algo_finish_flags(zcopy_algo_t *al)
{
    return zcopy_ctl_sync_flags(al->ctl, zcopy_algo_report(al));
}

/* Whether any rank's arguments of this collective were MPI_IN_PLACE. */
static inline bool zcopy_algo_any_in_place(const zcopy_algo_t *al)
{
    for (int r = 0; r < al->nranks; r++)
        if (zcopy_algo_args(al, r)->flags & ZCOPY_PLAN_IN_PLACE)
            return true;
    return false;
}

/* The end of an algorithm that never writes any rank's input: when a rank
 * could not reach a peer, the fallback redoes the whole call from intact
 * inputs. */
static inline zcopy_status_t zcopy_algo_done(zcopy_algo_t *al)
{
    return zcopy_algo_finish(al) ? ZCOPY_FALLBACK : ZCOPY_SUCCESS;
}

/* Whether the root of this rooted call moves every block itself (or, for
 * a reduce, reduces every input alone), as its record says: the same
 * answer on every rank. */
static inline bool zcopy_algo_root_moves(const zcopy_algo_t *al)
{
    return zcopy_algo_args(al, al->a->root)->flags & ZCOPY_PLAN_ROOT_MOVES;
}

/* The end of a call in which only the root touched peers' buffers: the
 * others wait for the root alone, the root for nobody. */
static inline zcopy_status_t zcopy_algo_done_by_root(zcopy_algo_t *al)
{
    return zcopy_ctl_sync_from(al->ctl, al->a->root, zcopy_algo_report(al))
               ? ZCOPY_FALLBACK : ZCOPY_SUCCESS;
}

/* Repairs through the point-to-point engine (repair.c). Whether the host
 * has one (Open MPI's component; not the library alone): the same answer
 * in every process of a job. */
bool zcopy_algo_repairs_by_p2p(void);
/* Posts the send (@send) or the receive of @len bytes at @buf to or from
 * @peer; *@req: the request, or NULL and an error. */
zcopy_status_t zcopy_algo_p2p_post(zcopy_algo_t *al, int peer, bool send,
                                   void *buf, size_t len, void **req);
/* Waits for a request zcopy_algo_p2p_post() made. */
zcopy_status_t zcopy_algo_p2p_wait(zcopy_algo_t *al, int peer, bool send,
                                   void *req, size_t len);
/* Both: one block moved, and waited for. */
zcopy_status_t zcopy_algo_p2p_move(zcopy_algo_t *al, int peer, bool send,
                                   void *buf, size_t len);
/* Cancels a receive it posted that nothing will match, and frees it. */
void zcopy_algo_p2p_cancel(void *req);

zcopy_status_t zcopy_algo_allreduce(zcopy_algo_t *al);
zcopy_status_t zcopy_algo_reduce(zcopy_algo_t *al);
zcopy_status_t zcopy_algo_reduce_scatter(zcopy_algo_t *al);
zcopy_status_t zcopy_algo_allgather(zcopy_algo_t *al);
zcopy_status_t zcopy_algo_bcast(zcopy_algo_t *al);
zcopy_status_t zcopy_algo_gather(zcopy_algo_t *al);
zcopy_status_t zcopy_algo_scatter(zcopy_algo_t *al);
zcopy_status_t zcopy_algo_alltoall(zcopy_algo_t *al);

#endif
