/*
 * Nothing grows over a long run (issue 7, 1b).
 *
 *  1. 10,000 activate / deactivate cycles of one block, local, with a new
 *     handle mapped in every 10th cycle and an allgather that imports
 *     every peer's current block every 100th cycle (checked right and
 *     zero-copy): 100 imports made and dropped, 1,000 handles created
 *     and freed, 20,000 export-table rewrites.
 *  2. 100 communicators alive at once (dups, reversed splits, split_type,
 *     dups of dups), all sharing the one activation: a zero-copy allreduce
 *     on each, then all freed.
 *
 * After one more collective on WORLD, every rank must be back to the file
 * descriptors and the /proc/self/maps lines it had before, exactly.
 */
#define _GNU_SOURCE
#include "relutil.h"
#include "testutil.h"

#define CYCLES 10000
#define REMAP_EVERY 10
#define COLLECTIVE_EVERY 100
#define NCOMMS 100
#define COUNT 4096 /* ints per rank in the allgather / allreduce */

static const zcopy_mem_prop_t host = { .kind = ZCOPY_MEM_HOST, .device = -1 };
static int rank, nranks;

static void require(bool ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "[rank %d] %s failed: %s\n", rank, what,
                zcopy_mem_last_error());
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
}

static int val(int salt, int r, int i) { return salt * 7 + r * 100003 + i; }

/* Allgather of @COUNT ints from @send into @recv on @comm: right and
 * zero-copy. Counts failures instead of reporting each of many cycles. */
static bool allgather_ok(MPI_Comm comm, int *send, int *recv, int salt)
{
    MPIX_Zcopy_stats s0 = zt_stats(comm), s1;
    int me, n, bad = 0;

    MPI_Comm_rank(comm, &me);
    MPI_Comm_size(comm, &n);
    for (int i = 0; i < COUNT; i++)
        send[i] = val(salt, me, i);
    if (MPI_Allgather(send, COUNT, MPI_INT, recv, COUNT, MPI_INT, comm) !=
        MPI_SUCCESS)
        return false;
    for (int i = 0; i < n * COUNT; i++)
        bad += recv[i] != val(salt, i / COUNT, i % COUNT);
    s1 = zt_stats(comm);
    return bad == 0 && s1.zcopy_calls == s0.zcopy_calls + 1 &&
           s1.fallback_calls == s0.fallback_calls;
}

static bool allreduce_ok(MPI_Comm comm, int *send, int *recv, int salt)
{
    MPIX_Zcopy_stats s0 = zt_stats(comm), s1;
    int me, n, bad = 0;

    MPI_Comm_rank(comm, &me);
    MPI_Comm_size(comm, &n);
    for (int i = 0; i < COUNT; i++)
        send[i] = val(salt, me, i);
    if (MPI_Allreduce(send, recv, COUNT, MPI_INT, MPI_SUM, comm) !=
        MPI_SUCCESS)
        return false;
    for (int i = 0; i < COUNT; i++) {
        int sum = 0;
        for (int r = 0; r < n; r++)
            sum += val(salt, r, i);
        bad += recv[i] != sum;
    }
    s1 = zt_stats(comm);
    return bad == 0 && s1.zcopy_calls == s0.zcopy_calls + 1 &&
           s1.fallback_calls == s0.fallback_calls;
}

/* 1. The churned block sits right after the arena in the same range; it
 * holds the allgather's send buffer, so each 100th cycle a peer must import
 * the block's current generation and see its current data. */
static void churn(char *slot, size_t slot_bytes, int *recv)
{
    zcopy_mem_handle_t h = NULL;
    int failed_collectives = 0;

    for (int k = 0; k < CYCLES; k++) {
        if (k % REMAP_EVERY == 0) {
            if (h != NULL)
                require(zcopy_mem_unmap(slot) == ZCOPY_SUCCESS &&
                            zcopy_mem_free(h) == ZCOPY_SUCCESS,
                        "unmap and free");
            require(zcopy_mem_create(&h, slot_bytes, &host, 0) ==
                            ZCOPY_SUCCESS &&
                        zcopy_mem_map(slot, slot_bytes, 0, h, 0) ==
                            ZCOPY_SUCCESS,
                    "create and map");
        }
        require(MPIX_Comm_activate_memory(MPI_COMM_WORLD, slot, slot_bytes,
                                          0, h, 0) == MPI_SUCCESS,
                "activate");
        if (k % COLLECTIVE_EVERY == COLLECTIVE_EVERY - 1)
            failed_collectives +=
                !allgather_ok(MPI_COMM_WORLD, (int *)slot, recv, k);
        require(MPIX_Comm_deactivate_memory(MPI_COMM_WORLD, slot) ==
                    MPI_SUCCESS, "deactivate");
    }
    require(zcopy_mem_unmap(slot) == ZCOPY_SUCCESS &&
                zcopy_mem_free(h) == ZCOPY_SUCCESS, "unmap and free");
    ZT_CHECK(failed_collectives == 0,
             "%d of %d allgathers on the churned block wrong or not "
             "zero-copy", failed_collectives, CYCLES / COLLECTIVE_EVERY);
}

/* 2. Communicators of every kind, alive together. */
static void many_comms(int *send, int *recv)
{
    MPI_Comm comms[NCOMMS];
    int failed = 0;

    for (int c = 0; c < NCOMMS; c++) {
        switch (c % 4) {
        case 0:
            MPI_Comm_dup(MPI_COMM_WORLD, &comms[c]);
            break;
        case 1:
            MPI_Comm_split(MPI_COMM_WORLD, 0, nranks - rank, &comms[c]);
            break;
        case 2:
            MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank,
                                MPI_INFO_NULL, &comms[c]);
            break;
        default:
            MPI_Comm_dup(comms[c - 1], &comms[c]);
            break;
        }
        MPI_Comm_set_errhandler(comms[c], MPI_ERRORS_RETURN);
    }
    for (int c = 0; c < NCOMMS; c++)
        failed += !allreduce_ok(comms[c], send, recv, 1000 + c);
    ZT_CHECK(failed == 0, "%d of %d communicators: allreduce wrong or not "
             "zero-copy", failed, NCOMMS);
    for (int c = 0; c < NCOMMS; c++)
        MPI_Comm_free(&comms[c]);
}

int main(int argc, char **argv)
{
    size_t gran, arena_bytes, slot_bytes;
    int fd0, maps0, fds, maps, *send, *recv;
    zcopy_mem_handle_t arena;
    char *res;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);

    require(zcopy_mem_granularity(&host, &gran) == ZCOPY_SUCCESS,
            "granularity");
    arena_bytes = ((size_t)(nranks + 1) * COUNT * sizeof(int) + gran - 1) /
                  gran * gran;
    slot_bytes = (COUNT * sizeof(int) + gran - 1) / gran * gran;
    require(zcopy_mem_reserve((void **)&res, arena_bytes + slot_bytes, 0,
                              NULL, 0) == ZCOPY_SUCCESS, "reserve");
    require(MPIX_Comm_set_memory_range(MPI_COMM_WORLD, res,
                                       arena_bytes + slot_bytes, 0, 0) ==
                MPI_SUCCESS, "set range");
    require(zcopy_mem_create(&arena, arena_bytes, &host, 0) ==
                    ZCOPY_SUCCESS &&
                zcopy_mem_map(res, arena_bytes, 0, arena, 0) ==
                    ZCOPY_SUCCESS &&
                MPIX_Comm_activate_memory(MPI_COMM_WORLD, res, arena_bytes,
                                          0, arena, 0) == MPI_SUCCESS,
            "arena");
    send = (int *)res;
    recv = send + COUNT;

    /* What stays for the whole run: WORLD's control plane, this process's
     * export table, the peers and their arenas imported. The level every
     * later step must return to. */
    ZT_CHECK(allreduce_ok(MPI_COMM_WORLD, send, recv, 1),
             "warm-up allreduce wrong or not zero-copy");
    fd0 = proc_count_fds();
    maps0 = rel_count_mappings();

    churn(res + arena_bytes, slot_bytes, recv);
    ZT_CHECK(allreduce_ok(MPI_COMM_WORLD, send, recv, 2),
             "allreduce after the churn wrong or not zero-copy");
    fds = proc_count_fds();
    maps = rel_count_mappings();
    ZT_CHECK(fds == fd0 && maps == maps0,
             "after %d activation cycles: %d fds and %d mappings, %d and %d "
             "before", CYCLES, fds, maps, fd0, maps0);

    many_comms(send, recv);
    ZT_CHECK(allreduce_ok(MPI_COMM_WORLD, send, recv, 3),
             "allreduce after the communicators wrong or not zero-copy");
    fds = proc_count_fds();
    maps = rel_count_mappings();
    ZT_CHECK(fds == fd0 && maps == maps0,
             "after %d communicators: %d fds and %d mappings, %d and %d "
             "before", NCOMMS, fds, maps, fd0, maps0);
    if (rank == 0)
        printf("rank 0: %d fds and %d mappings throughout\n", fd0, maps0);
    return zt_finish();
}
