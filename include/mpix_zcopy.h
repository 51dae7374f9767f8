/*
 * zcopy MPI extension: declare, activate and query memory for zero-copy
 * collectives. Link with -lzcopy. Works with or without the coll/zcopy
 * component loaded; without it, collectives are simply not zero-copy.
 *
 * Workflow (every step has an inverse, undone in reverse order):
 *   zcopy_mem_reserve -> MPIX_Comm_set_memory_range (collective)
 *   zcopy_mem_create -> zcopy_mem_map -> MPIX_Comm_activate_memory (local)
 *   ... collectives on buffers inside activated memory ...
 *   MPIX_Comm_deactivate_memory -> zcopy_mem_unmap -> zcopy_mem_free
 *   MPIX_Comm_unset_memory_range -> zcopy_mem_release
 *
 * Errors return an MPI error code (class MPI_ERR_ARG, MPI_ERR_NO_MEM,
 * MPI_ERR_UNSUPPORTED_OPERATION, MPI_ERR_COMM or MPI_ERR_OTHER) through the
 * communicator's error handler; MPI_Error_string names the precise cause.
 */
#ifndef MPIX_ZCOPY_H
#define MPIX_ZCOPY_H

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>
#include <zcopy/mem.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MPIX_ZCOPY_INFO_KEY "mpix_zcopy" /* "false" opts a communicator out */

typedef struct {
    uint64_t zcopy_calls;     /* collectives that took the zero-copy path */
    uint64_t fallback_calls;  /* collectives handed to the previous
                                 component, or finished through the
                                 point-to-point engine after a peer's
                                 memory could not be mapped */
    uint64_t ipc_bytes;       /* bytes this rank moved through peer mappings */
    uint64_t ucx_bytes;       /* bytes this rank moved through UCX */
    char last_fallback_reason[64];
    uint64_t inline_calls;    /* of zcopy_calls: payloads of at most
                                 inline_max bytes per rank (below) that
                                 travelled inside the control plane instead
                                 of through a peer mapping */
    uint64_t ctl_msgs;        /* control messages this rank sent in
                                 collectives: a record in shared memory
                                 (arrival, decline, inline payload, sync)
                                 counts once, whoever reads it; what goes to
                                 another server counts once per rank it
                                 reaches */
    uint64_t ctl_bytes;       /* their bytes */
    uint64_t inline_max;      /* not a counter: payload bytes per rank up
                                 to which this communicator's collectives
                                 travel inside the control plane (between
                                 servers, within its payload area too,
                                 twice it for bcast, scatter and
                                 alltoall, and for allreduce where every
                                 server has one rank, over the most
                                 ranks of one server for allreduce
                                 otherwise, and a quarter of it for
                                 alltoall, reduce_scatter_block and
                                 scatter where leaders send whole
                                 payloads);
                                 0 before its first collective, and where
                                 zero-copy is off */
    uint64_t p2p_bytes;       /* bytes this rank read from other servers
                                 through Open MPI's point-to-point engine
                                 (coll_zcopy_ucx_fetch pml, and reads of
                                 coll_zcopy_ucx_p2p_min or more under
                                 auto), or received there as pushed
                                 alltoall blocks (coll_zcopy_ucx_push_min) */
} MPIX_Zcopy_stats;           /* fields may be added after these, never removed */

int MPIX_Comm_set_memory_range(MPI_Comm comm, void *base, size_t size,
                               size_t alignment, uint64_t flags);
int MPIX_Comm_unset_memory_range(MPI_Comm comm, void *base);
int MPIX_Comm_activate_memory(MPI_Comm comm, void *va, size_t size,
                              size_t offset, zcopy_mem_handle_t handle,
                              uint64_t flags);
int MPIX_Comm_deactivate_memory(MPI_Comm comm, void *va);
/* *activated = 1 when [buf, buf + size) lies wholly inside activated memory. */
int MPIX_Zcopy_query(MPI_Comm comm, const void *buf, size_t size,
                     int *activated);
/* Counters of @comm since its creation (zeros where zcopy is not enabled).
 * The macro passes the size of the caller's struct, so that a program
 * built against this header keeps working with a library whose struct has
 * grown, and is never written past the end of its own. */
int MPIX_Zcopy_get_stats(MPI_Comm comm, MPIX_Zcopy_stats *stats);
int MPIX_Zcopy_get_stats_sized(MPI_Comm comm, MPIX_Zcopy_stats *stats,
                               size_t size);
#define MPIX_Zcopy_get_stats(comm, stats)                                    \
    MPIX_Zcopy_get_stats_sized((comm), (stats), sizeof(*(stats)))

#ifdef __cplusplus
}
#endif

#endif /* MPIX_ZCOPY_H */
