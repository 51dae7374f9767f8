/*
 * Collective entry points of libzcopy, one per collective of SPEC section 4.
 * Each returns ZCOPY_SUCCESS when the collective ran zero-copy,
 * ZCOPY_FALLBACK when every rank agreed to hand it to the previous component
 * (the caller does so; the fallback is already counted), or a negative
 * ZCOPY_ERR_* when it failed.
 */
#ifndef ZCOPY_COLL_H
#define ZCOPY_COLL_H

#include "comm/comm.h"

typedef enum {
    ZCOPY_COLL_ALLREDUCE,
    ZCOPY_COLL_REDUCE,
    ZCOPY_COLL_REDUCE_SCATTER,
    ZCOPY_COLL_REDUCE_SCATTER_BLOCK,
    ZCOPY_COLL_ALLGATHER,
    ZCOPY_COLL_ALLGATHERV,
    ZCOPY_COLL_BCAST,
    ZCOPY_COLL_GATHER,
    ZCOPY_COLL_GATHERV,
    ZCOPY_COLL_SCATTER,
    ZCOPY_COLL_SCATTERV,
    ZCOPY_COLL_ALLTOALL,
    ZCOPY_COLL_ALLTOALLV,
    ZCOPY_COLL_BARRIER,
    ZCOPY_COLL_COUNT
} zcopy_coll_type_t;

extern const char *const zcopy_coll_names[ZCOPY_COLL_COUNT];

/* One collective call as this rank sees it. Counts are in elements of the
 * matching datatype; vectors are MPI's int arrays. */
typedef struct {
    zcopy_coll_type_t type;
    const void *sbuf;             /* MPI_IN_PLACE allowed where MPI allows */
    size_t scount;
    MPI_Datatype stype;
    void *rbuf;
    size_t rcount;
    MPI_Datatype rtype;
    const int *scounts, *sdispls; /* v-variants */
    const int *rcounts, *rdispls;
    MPI_Op op;
    int root;
} zcopy_coll_args_t;

zcopy_status_t zcopy_coll_run(zcopy_comm_t *zc, const zcopy_coll_args_t *args);

/* The call of a process with nothing activated that has data in it (so it
 * could only decline), on a communicator inside one server: declined at
 * once, before the call is even described, as SPEC section 4 lets a job
 * that never activates memory pay for two stores only. True when declined
 * and counted: the caller runs the previous component. A call that every
 * rank hands over without a step (server/server.h) is counted as such,
 * not declined. Spanning communicators decline in their arrival round
 * instead. Also any call with data of a communicator whose set-up was put
 * off (no rank had set a memory range), within its skip. */
bool zcopy_coll_decline_idle(zcopy_comm_t *zc, zcopy_coll_type_t type,
                             size_t scount, MPI_Datatype stype, size_t rcount,
                             MPI_Datatype rtype, int root);

/* MPIX_Comm_set_memory_range ran on @zc's communicator, collectively: a
 * communicator whose set-up found that no rank had set a range (idle,
 * coll.c) sets up at its next call, so that memory activated in the new
 * range is used at once. */
void zcopy_coll_range_set(zcopy_comm_t *zc);

/* For Open MPI's progress loop, hooked in once libzcopy wants it (host
 * want_progress): one poll of the UCX worker, since a rank blocked in any
 * MPI call must still serve its peers' emulated gets and puts (SPEC section
 * 6), and the release of peers' deactivated blocks, which a program using
 * only nonblocking collectives would otherwise keep (SPEC section 3). */
int zcopy_coll_progress(void);

/* For the start of MPI_Finalize, while every peer is still there: closes
 * the connections between servers in order (zcopy_ucx_disconnect()), so
 * that nothing is flushed towards a process that has already exited when
 * the communicators go; first, every communicator's control messages in
 * flight land. A later collective reconnects. */
void zcopy_coll_disconnect(void);

#endif
