/*
 * The path decision for every collective. A rank is eligible when each of
 * its buffers lies wholly in activated memory, the datatypes are contiguous
 * and the op is commutative; the ranks agree on it before any data moves.
 */
#include "coll.h"

#include <stdio.h>

ZCOPY_COMPONENT_API const char *const zcopy_coll_names[ZCOPY_COLL_COUNT] = {
    [ZCOPY_COLL_ALLREDUCE] = "allreduce",
    [ZCOPY_COLL_REDUCE] = "reduce",
    [ZCOPY_COLL_REDUCE_SCATTER] = "reduce_scatter",
    [ZCOPY_COLL_REDUCE_SCATTER_BLOCK] = "reduce_scatter_block",
    [ZCOPY_COLL_ALLGATHER] = "allgather",
    [ZCOPY_COLL_ALLGATHERV] = "allgatherv",
    [ZCOPY_COLL_BCAST] = "bcast",
    [ZCOPY_COLL_GATHER] = "gather",
    [ZCOPY_COLL_GATHERV] = "gatherv",
    [ZCOPY_COLL_SCATTER] = "scatter",
    [ZCOPY_COLL_SCATTERV] = "scatterv",
    [ZCOPY_COLL_ALLTOALL] = "alltoall",
    [ZCOPY_COLL_ALLTOALLV] = "alltoallv",
    [ZCOPY_COLL_BARRIER] = "barrier",
};

ZCOPY_COMPONENT_API zcopy_status_t zcopy_coll_run(zcopy_comm_t *zc, const zcopy_coll_args_t *args)
{
    char reason[64];

    snprintf(reason, sizeof(reason), "%s: zero-copy path not built",
             zcopy_coll_names[args->type]);
    zcopy_comm_count_fallback(zc, reason);
    return ZCOPY_FALLBACK;
}
