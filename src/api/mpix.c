/*
 * The MPIX calls of SPEC section 3: argument checks, the collective
 * agreement of set_memory_range, and statistics. The work itself is the
 * registry's; this file only adapts it to MPI conventions.
 */
#include "api/activation.h"
#include "api/errors.h"
#include "coll/coll.h"
#include "comm/comm.h"
#include "ipc/ipc.h"
#include "registry/registry.h"

#include <mpix_zcopy.h>
#include <stdio.h>
#include <string.h>

static int raise_status(MPI_Comm comm, const char *call, zcopy_status_t st)
{
    return zcopy_mpi_raise(comm, zcopy_mpi_error_class(st), call,
                           zcopy_error_detail());
}

static bool comm_is_null(MPI_Comm comm) { return comm == MPI_COMM_NULL; }

/* Every rank learns the lowest rank whose local step failed (size if none),
 * so that all ranks succeed or all fail. */
static int agree_first_failure(MPI_Comm comm, bool failed, int *first)
{
    int rank, size, mine, rc;

    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    mine = failed ? rank : size;
    zcopy_internal_enter();
    rc = MPI_Allreduce(&mine, first, 1, MPI_INT, MPI_MIN, comm);
    zcopy_internal_leave();
    if (*first == size)
        *first = -1;
    return rc;
}

ZCOPY_EXPORT int MPIX_Comm_set_memory_range(MPI_Comm comm, void *base,
                                            size_t size, size_t alignment,
                                            uint64_t flags)
{
    static const char call[] = "MPIX_Comm_set_memory_range";
    zcopy_comm_t *zc;
    zcopy_status_t st;
    char detail[160];
    int first, rc, inter = 0;

    if (comm_is_null(comm))
        return zcopy_mpi_raise(comm, MPI_ERR_COMM, call,
                               "communicator is MPI_COMM_NULL");
    if (MPI_Comm_test_inter(comm, &inter) != MPI_SUCCESS || inter)
        return zcopy_mpi_raise(comm, MPI_ERR_COMM, call,
                               "an intercommunicator: set ranges on an "
                               "intracommunicator");
    /* A collective like the others: the mirrors of blocks that peers
     * deactivated go first (SPEC section 3), before this rank maps more. */
    zcopy_ipc_sweep();
    if (alignment != 0 || flags != 0)
        st = zcopy_error(ZCOPY_ERR_ARG,
                         "alignment (%zu) and flags (0x%llx) must be 0",
                         alignment, (unsigned long long)flags);
    else
        st = zcopy_registry_set_range((uintptr_t)base, size, ZCOPY_OWNER_APP);

    rc = agree_first_failure(comm, st != ZCOPY_SUCCESS, &first);
    zc = zcopy_comm_lookup(comm);
    if (zc != NULL)
        zcopy_coll_range_set(zc);
    if (rc != MPI_SUCCESS) {
        if (st == ZCOPY_SUCCESS) /* unknown outcome elsewhere: undo */
            zcopy_registry_unset_range((uintptr_t)base, ZCOPY_OWNER_APP);
        return rc;
    }
    if (st != ZCOPY_SUCCESS)
        return raise_status(comm, call, st);
    if (first >= 0) {
        /* Another rank failed: undo so that nothing changed anywhere. */
        zcopy_registry_unset_range((uintptr_t)base, ZCOPY_OWNER_APP);
        snprintf(detail, sizeof(detail),
                 "rank %d rejected its range, so no rank set one", first);
        return zcopy_mpi_raise(comm, MPI_ERR_ARG, call, detail);
    }
    zcopy_log(ZCOPY_LOG_TRACE, "api", "range [%p, +%zu) set", base, size);
    return MPI_SUCCESS;
}

ZCOPY_EXPORT int MPIX_Comm_unset_memory_range(MPI_Comm comm, void *base)
{
    static const char call[] = "MPIX_Comm_unset_memory_range";
    zcopy_status_t st;

    if (comm_is_null(comm))
        return zcopy_mpi_raise(comm, MPI_ERR_COMM, call,
                               "communicator is MPI_COMM_NULL");
    st = zcopy_registry_unset_range((uintptr_t)base, ZCOPY_OWNER_APP);
    return st == ZCOPY_SUCCESS ? MPI_SUCCESS : raise_status(comm, call, st);
}

ZCOPY_EXPORT int MPIX_Comm_activate_memory(MPI_Comm comm, void *va,
                                           size_t size, size_t offset,
                                           zcopy_mem_handle_t handle,
                                           uint64_t flags)
{
    static const char call[] = "MPIX_Comm_activate_memory";
    zcopy_status_t st;

    if (comm_is_null(comm))
        return zcopy_mpi_raise(comm, MPI_ERR_COMM, call,
                               "communicator is MPI_COMM_NULL");
    if (offset != 0 || flags != 0) {
        st = zcopy_error(ZCOPY_ERR_ARG,
                         "offset (%zu) and flags (0x%llx) must be 0", offset,
                         (unsigned long long)flags);
        return raise_status(comm, call, st);
    }
    st = zcopy_activation_add((uintptr_t)va, size, handle, ZCOPY_OWNER_APP);
    return st == ZCOPY_SUCCESS ? MPI_SUCCESS : raise_status(comm, call, st);
}

ZCOPY_EXPORT int MPIX_Comm_deactivate_memory(MPI_Comm comm, void *va)
{
    static const char call[] = "MPIX_Comm_deactivate_memory";
    zcopy_status_t st;

    if (comm_is_null(comm))
        return zcopy_mpi_raise(comm, MPI_ERR_COMM, call,
                               "communicator is MPI_COMM_NULL");
    st = zcopy_activation_remove((uintptr_t)va, ZCOPY_OWNER_APP);
    return st == ZCOPY_SUCCESS ? MPI_SUCCESS : raise_status(comm, call, st);
}

ZCOPY_EXPORT int MPIX_Zcopy_query(MPI_Comm comm, const void *buf, size_t size,
                                  int *activated)
{
    static const char call[] = "MPIX_Zcopy_query";

    if (comm_is_null(comm))
        return zcopy_mpi_raise(comm, MPI_ERR_COMM, call,
                               "communicator is MPI_COMM_NULL");
    if (activated == NULL)
        return zcopy_mpi_raise(comm, MPI_ERR_ARG, call,
                               "activated pointer is NULL");
    *activated = buf != NULL && size > 0 && zcopy_registry_covers(buf, size);
    return MPI_SUCCESS;
}

/* Copies the first @size bytes of the counters: a caller's struct may
 * predate fields added since, and is never written past its end. */
static int get_stats(MPI_Comm comm, void *stats, size_t size, const char *call)
{
    MPIX_Zcopy_stats all;
    zcopy_comm_t *zc;

    if (comm_is_null(comm))
        return zcopy_mpi_raise(comm, MPI_ERR_COMM, call,
                               "communicator is MPI_COMM_NULL");
    if (stats == NULL)
        return zcopy_mpi_raise(comm, MPI_ERR_ARG, call, "stats is NULL");
    if (size < offsetof(MPIX_Zcopy_stats, inline_calls))
        return zcopy_mpi_raise(comm, MPI_ERR_ARG, call,
                               "stats size is smaller than the first "
                               "version of MPIX_Zcopy_stats");
    zc = zcopy_comm_lookup(comm);
    if (zc == NULL)
        memset(&all, 0, sizeof(all));
    else
        zcopy_comm_get_stats(zc, &all);
    memcpy(stats, &all, size < sizeof(all) ? size : sizeof(all));
    if (size > sizeof(all)) /* a newer header's fields this build lacks */
        memset((char *)stats + sizeof(all), 0, size - sizeof(all));
    return MPI_SUCCESS;
}

ZCOPY_EXPORT int MPIX_Zcopy_get_stats_sized(MPI_Comm comm,
                                            MPIX_Zcopy_stats *stats,
                                            size_t size)
{
    return get_stats(comm, stats, size, "MPIX_Zcopy_get_stats");
}

/* The symbol binaries built before the size was passed call: they may hold
 * the first version of the struct, which ended before inline_calls. */
#undef MPIX_Zcopy_get_stats
ZCOPY_EXPORT int MPIX_Zcopy_get_stats(MPI_Comm comm, MPIX_Zcopy_stats *stats)
{
    return get_stats(comm, stats, offsetof(MPIX_Zcopy_stats, inline_calls),
                     "MPIX_Zcopy_get_stats");
}
