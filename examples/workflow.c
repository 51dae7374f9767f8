/*
 * The whole zcopy workflow in one program:
 *   reserve -> set range -> create -> map -> activate -> collectives ->
 *   deactivate -> unmap -> free -> unset range -> release
 *
 *   mpirun -np 2 ./zcopy_workflow
 */
#include <mpix_zcopy.h>
#include <stdio.h>
#include <stdlib.h>

#define CHECK_MEM(_call)                                                     \
    do {                                                                     \
        int _rc = (_call);                                                   \
        if (_rc != ZCOPY_SUCCESS) {                                          \
            fprintf(stderr, "%s failed: %s (%s)\n", #_call,                  \
                    zcopy_strerror(_rc), zcopy_mem_last_error());            \
            MPI_Abort(MPI_COMM_WORLD, 1);                                    \
        }                                                                    \
    } while (0)

int main(int argc, char **argv)
{
    const zcopy_mem_prop_t prop = { .kind = ZCOPY_MEM_HOST, .device = -1 };
    const size_t count = 1 << 18; /* 1 MiB of int32 per buffer */
    zcopy_mem_handle_t handle;
    MPIX_Zcopy_stats stats;
    size_t gran, bytes;
    int rank, size, errors = 0;
    int32_t *send, *recv;
    void *base;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);

    /* 1. Address space, declared to zcopy on the whole job (collective). */
    CHECK_MEM(zcopy_mem_granularity(&prop, &gran));
    bytes = 2 * count * sizeof(int32_t);
    bytes = (bytes + gran - 1) / gran * gran;
    CHECK_MEM(zcopy_mem_reserve(&base, 4 * bytes, 0, NULL, 0));
    MPIX_Comm_set_memory_range(MPI_COMM_WORLD, base, 4 * bytes, 0, 0);

    /* 2. Physical memory, mapped and activated (local). */
    CHECK_MEM(zcopy_mem_create(&handle, bytes, &prop, 0));
    CHECK_MEM(zcopy_mem_map(base, bytes, 0, handle, 0));
    MPIX_Comm_activate_memory(MPI_COMM_WORLD, base, bytes, 0, handle, 0);

    /* 3. Collectives on buffers inside activated memory. */
    send = base;
    recv = send + count;
    for (size_t i = 0; i < count; i++)
        send[i] = (int32_t)(rank + i);
    MPI_Allreduce(send, recv, (int)count, MPI_INT32_T, MPI_SUM, MPI_COMM_WORLD);
    for (size_t i = 0; i < count; i++)
        if (recv[i] != (int32_t)(size * (size - 1) / 2 + size * i))
            errors++;
    MPI_Bcast(recv, (int)count, MPI_INT32_T, size - 1, MPI_COMM_WORLD);

    MPIX_Zcopy_get_stats(MPI_COMM_WORLD, &stats);
    if (rank == 0)
        printf("allreduce of %zu bytes: %s; zero-copy calls %llu, fallbacks "
               "%llu (last: %s), bytes through peer mappings %llu\n",
               count * sizeof(int32_t), errors ? "WRONG" : "correct",
               (unsigned long long)stats.zcopy_calls,
               (unsigned long long)stats.fallback_calls,
               stats.last_fallback_reason[0] ? stats.last_fallback_reason : "-",
               (unsigned long long)stats.ipc_bytes);

    /* 4. Undo everything, in reverse order. */
    MPIX_Comm_deactivate_memory(MPI_COMM_WORLD, base);
    CHECK_MEM(zcopy_mem_unmap(base));
    CHECK_MEM(zcopy_mem_free(handle));
    MPIX_Comm_unset_memory_range(MPI_COMM_WORLD, base);
    CHECK_MEM(zcopy_mem_release(base));

    MPI_Allreduce(MPI_IN_PLACE, &errors, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Finalize();
    return errors != 0;
}
