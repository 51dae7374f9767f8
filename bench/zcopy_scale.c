/*
 * zcopy_scale: what a communicator costs as it grows (docs/scaling.md).
 *
 * On activated buffers, for a communicator made by MPI_Comm_dup of
 * MPI_COMM_WORLD: its set-up time (the first collective, slowest rank),
 * the memory that set-up added to a rank (largest growth of VmSize and
 * VmRSS), and the control traffic per call of a barrier, an 8 B allreduce
 * (small enough to ride with the arrival between servers) and a 1 MiB
 * allreduce (moved by UCX between servers, with its syncs): messages and
 * bytes this rank sent, from the zcopy statistics, fewest and most over
 * the ranks. Between servers the fewest are a rank that leads no server,
 * the most a leader. Counts, not timings: oversubscribed runs are fine.
 *
 *   mpirun -np 16 --mca coll_zcopy_virtual_servers 8 zcopy_scale
 *
 * prints one line of key=value pairs, for scripts.
 */
#include <mpi.h>
#include <mpix_zcopy.h>
#include <zcopy/mem.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ARENA_BYTES (4u << 20)
#define BIG_DOUBLES (1024 * 1024 / 8)
#define CALLS 20

typedef struct {
    double msgs, bytes;
} per_call_t;

static void die(const char *what)
{
    fprintf(stderr, "zcopy_scale: %s\n", what);
    MPI_Abort(MPI_COMM_WORLD, 1);
}

/* VmSize or VmRSS of this process, in KiB. */
static long vm_kib(const char *key)
{
    FILE *f = fopen("/proc/self/status", "r");
    size_t klen = strlen(key);
    char line[256];
    long kib = -1;

    while (f != NULL && fgets(line, sizeof(line), f) != NULL)
        if (strncmp(line, key, klen) == 0 && line[klen] == ':') {
            kib = strtol(line + klen + 1, NULL, 10);
            break;
        }
    if (f != NULL)
        fclose(f);
    return kib;
}

static void *arena_activate(zcopy_mem_handle_t *handle_p)
{
    const zcopy_mem_prop_t prop = { .kind = ZCOPY_MEM_HOST, .device = -1 };
    zcopy_mem_handle_t handle;
    void *base;

    if (zcopy_mem_reserve(&base, ARENA_BYTES, 0, NULL, 0) != ZCOPY_SUCCESS ||
        zcopy_mem_create(&handle, ARENA_BYTES, &prop, 0) != ZCOPY_SUCCESS ||
        zcopy_mem_map(base, ARENA_BYTES, 0, handle, 0) != ZCOPY_SUCCESS)
        die(zcopy_mem_last_error());
    if (MPIX_Comm_set_memory_range(MPI_COMM_WORLD, base, ARENA_BYTES, 0, 0) ||
        MPIX_Comm_activate_memory(MPI_COMM_WORLD, base, ARENA_BYTES, 0,
                                  handle, 0))
        die("activation failed");
    *handle_p = handle;
    return base;
}

static void arena_release(void *base, zcopy_mem_handle_t handle)
{
    if (MPIX_Comm_deactivate_memory(MPI_COMM_WORLD, base) ||
        zcopy_mem_unmap(base) || zcopy_mem_free(handle) ||
        MPIX_Comm_unset_memory_range(MPI_COMM_WORLD, base) ||
        zcopy_mem_release(base))
        die("teardown failed");
}

/* Fewest and most per call over the ranks, of @calls calls of @kind. */
static void traffic(MPI_Comm comm, int kind, double *buf, per_call_t *lo,
                    per_call_t *hi)
{
    MPIX_Zcopy_stats s0, s1;
    double mine[2], most[2], fewest[2];
    const int count = kind == 1 ? 1 : BIG_DOUBLES;

    MPIX_Zcopy_get_stats(comm, &s0);
    for (int i = 0; i < CALLS; i++) {
        if (kind == 0)
            MPI_Barrier(comm);
        else
            MPI_Allreduce(buf, buf + BIG_DOUBLES, count, MPI_DOUBLE,
                          MPI_SUM, comm);
    }
    MPIX_Zcopy_get_stats(comm, &s1);
    if (s1.zcopy_calls - s0.zcopy_calls != CALLS)
        die(s1.last_fallback_reason);
    mine[0] = (double)(s1.ctl_msgs - s0.ctl_msgs) / CALLS;
    mine[1] = (double)(s1.ctl_bytes - s0.ctl_bytes) / CALLS;
    MPI_Allreduce(mine, most, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(mine, fewest, 2, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
    *lo = (per_call_t){ fewest[0], fewest[1] };
    *hi = (per_call_t){ most[0], most[1] };
}

int main(int argc, char **argv)
{
    static const char *const kinds[] = { "barrier", "allreduce8", "allreduce1m" };
    long size0, rss0, grown[2], most[2];
    double t, setup, *buf;
    per_call_t lo, hi;
    zcopy_mem_handle_t handle;
    MPI_Comm comm;
    int rank, nranks;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    buf = arena_activate(&handle);
    for (int i = 0; i < 2 * BIG_DOUBLES; i++)
        buf[i] = 1.0;

    MPI_Barrier(MPI_COMM_WORLD);
    size0 = vm_kib("VmSize");
    rss0 = vm_kib("VmRSS");
    MPI_Comm_dup(MPI_COMM_WORLD, &comm);
    t = MPI_Wtime();
    MPI_Barrier(comm); /* set-up happens at the first collective */
    t = MPI_Wtime() - t;
    grown[0] = vm_kib("VmSize") - size0;
    grown[1] = vm_kib("VmRSS") - rss0;
    MPI_Reduce(&t, &setup, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    MPI_Reduce(grown, most, 2, MPI_LONG, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank == 0)
        printf("ranks=%d setup_ms=%.2f vmsize_kib=%ld vmrss_kib=%ld",
               nranks, setup * 1e3, most[0], most[1]);
    for (int k = 0; k < 3; k++) {
        traffic(comm, k, buf, &lo, &hi);
        if (rank == 0)
            printf(" %s_msgs=%.2f..%.2f %s_bytes=%.0f..%.0f", kinds[k], lo.msgs,
                   hi.msgs, kinds[k], lo.bytes, hi.bytes);
    }
    if (rank == 0)
        printf("\n");
    MPI_Comm_free(&comm);
    arena_release(buf, handle);
    MPI_Finalize();
    return 0;
}
