/*
 * Remapping activated memory at one address, on a communicator that spans
 * servers (run with coll_zcopy_virtual_servers=2 or coll_zcopy_transport=ucx).
 *
 * Between servers, a peer reaches a block through UCX (a registration and a
 * remote key per activation) instead of through a mapping of its memfd.
 * Each cycle maps FRESH physical memory at the SAME address, fills it with
 * that cycle's data, activates it, and runs on MPI_COMM_WORLD:
 *   allreduce of 1 MiB of doubles (sum), allgather of 512 KiB per rank,
 *   bcast of 1 MiB from a root that rotates with the cycle (sizes above
 *   what rides the arrival between servers, so that UCX moves them);
 * then deactivates, unmaps and frees it. A peer that keeps using what it
 * learnt of the previous activation at that address (a stale remote key, a
 * registration of freed pages) reads the previous cycle's data, or none:
 * every result is checked exactly (small integers, so double sums are
 * exact), every call must run zero-copy, and each call must have moved bytes
 * through UCX, summed over the ranks (the side that counts a transfer is the
 * library's choice). On odd cycles a collective on another communicator
 * runs between the free and the next activation, on even ones none.
 *
 * Per-cycle UCX bytes are summed once at the end, through a dup of WORLD
 * with zcopy off, so the summation neither runs between the cycles'
 * collectives nor counts as a fallback. MPI_COMM_WORLD returns errors, so
 * that a failing collective is a failed check instead of an abort.
 */
#include "testutil.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define CYCLES 20
#define AR_COUNT ((size_t)(1u << 20) / sizeof(double)) /* 1 MiB of doubles */
#define AG_COUNT ((size_t)(512u << 10) / sizeof(int))  /* 512 KiB per rank */
#define BC_COUNT ((size_t)(1u << 20) / sizeof(int))    /* 1 MiB */

enum { ALLREDUCE, ALLGATHER, BCAST, NCOLL };
static const char *const coll_names[NCOLL] = { "allreduce", "allgather",
                                               "bcast" };

static const zcopy_mem_prop_t host = { .kind = ZCOPY_MEM_HOST, .device = -1 };
static int rank, nranks;
static size_t block_bytes;
static char *res;                 /* the reservation, set as a range */
static MPI_Comm other;            /* dup of WORLD with zcopy: "any comm" */
static MPI_Comm quiet;            /* dup of WORLD without zcopy */

static size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

/* --- data ---------------------------------------------------------------- */

/* A small non-negative integer of (cycle, collective, rank, index): a sum
 * over 64 ranks stays far below 2^53, and no two consecutive cycles agree
 * at any index, so data of the previous cycle never passes for this one. */
static int val(int cycle, int coll, int r, size_t i)
{
    return (int)(((size_t)cycle * 7919u + (size_t)coll * 1543u +
                  (size_t)r * 104729u + i * 31u) % 65521u);
}

static double ar_sum(int cycle, size_t i)
{
    double sum = 0;

    for (int r = 0; r < nranks; r++)
        sum += val(cycle, ALLREDUCE, r, i);
    return sum;
}

typedef struct {
    double *ar_s, *ar_r;
    int *ag_s, *ag_r, *bc;
} bufs_t;

/* Fixed offsets inside the block, the same in every cycle, each 64-byte
 * aligned (every count is a multiple of 64 bytes). */
static bufs_t layout(char *block)
{
    bufs_t b;

    b.ar_s = (double *)block;
    b.ar_r = b.ar_s + AR_COUNT;
    b.ag_s = (int *)(b.ar_r + AR_COUNT);
    b.ag_r = b.ag_s + AG_COUNT;
    b.bc = b.ag_r + (size_t)nranks * AG_COUNT;
    return b;
}

static size_t layout_bytes(void)
{
    return 2 * AR_COUNT * sizeof(double) +
           (1 + (size_t)nranks) * AG_COUNT * sizeof(int) +
           BC_COUNT * sizeof(int);
}

/* --- one cycle ----------------------------------------------------------- */

static bool check_rc(int rc, int cycle, const char *what)
{
    char msg[MPI_MAX_ERROR_STRING] = "";
    int len = 0;

    if (rc != MPI_SUCCESS && MPI_Error_string(rc, msg, &len) == MPI_SUCCESS)
        msg[len] = '\0';
    return ZT_CHECK(rc == MPI_SUCCESS, "cycle %d: %s failed: %s", cycle, what,
                    msg);
}

/* The call just made between @s0 and @s1 ran zero-copy; returns the bytes
 * this rank moved through UCX in it. */
static uint64_t check_path(int cycle, int coll, const MPIX_Zcopy_stats *s0,
                           const MPIX_Zcopy_stats *s1)
{
    ZT_CHECK(s1->zcopy_calls == s0->zcopy_calls + 1 &&
                 s1->fallback_calls == s0->fallback_calls,
             "cycle %d: rank %d: %s not zero-copy: zcopy +%llu fallback "
             "+%llu (last reason: %s)", cycle, rank, coll_names[coll],
             (unsigned long long)(s1->zcopy_calls - s0->zcopy_calls),
             (unsigned long long)(s1->fallback_calls - s0->fallback_calls),
             s1->last_fallback_reason);
    return s1->ucx_bytes - s0->ucx_bytes;
}

/* Fills the freshly mapped block with this cycle's data, runs the three
 * collectives, checks results and paths; @ucx gets each call's UCX bytes. */
static void run_cycle(char *block, int cycle, uint64_t ucx[NCOLL])
{
    const bufs_t b = layout(block);
    const int root = cycle % nranks;
    MPIX_Zcopy_stats s0, s1;
    long bad;
    int rc;

    /* The whole block first: what no collective writes is this cycle's
     * filler, never a previous cycle's data or zeros of a new memfd. */
    memset(block, 0x40 + cycle, block_bytes);
    for (size_t i = 0; i < AR_COUNT; i++) {
        b.ar_s[i] = val(cycle, ALLREDUCE, rank, i);
        b.ar_r[i] = -7.0;
    }
    for (size_t i = 0; i < AG_COUNT; i++)
        b.ag_s[i] = val(cycle, ALLGATHER, rank, i);
    for (size_t i = 0; i < (size_t)nranks * AG_COUNT; i++)
        b.ag_r[i] = -7;
    for (size_t i = 0; i < BC_COUNT; i++)
        b.bc[i] = rank == root ? val(cycle, BCAST, root, i) : -7;

    s0 = zt_stats(MPI_COMM_WORLD);
    rc = MPI_Allreduce(b.ar_s, b.ar_r, (int)AR_COUNT, MPI_DOUBLE, MPI_SUM,
                       MPI_COMM_WORLD);
    s1 = zt_stats(MPI_COMM_WORLD);
    ucx[ALLREDUCE] = check_path(cycle, ALLREDUCE, &s0, &s1);
    if (check_rc(rc, cycle, "allreduce")) {
        ZT_FIND_BAD(bad, b.ar_r, AR_COUNT, ar_sum(cycle, i));
        ZT_CHECK(bad < 0, "cycle %d: rank %d: allreduce of %zu doubles wrong "
                 "at %ld: %g, expected %g", cycle, rank, AR_COUNT, bad,
                 bad < 0 ? 0.0 : b.ar_r[bad],
                 bad < 0 ? 0.0 : ar_sum(cycle, (size_t)bad));
        ZT_FIND_BAD(bad, b.ar_s, AR_COUNT,
                    (double)val(cycle, ALLREDUCE, rank, i));
        ZT_CHECK(bad < 0, "cycle %d: rank %d: allreduce send buffer changed "
                 "at %ld", cycle, rank, bad);
    }

    s0 = zt_stats(MPI_COMM_WORLD);
    rc = MPI_Allgather(b.ag_s, (int)AG_COUNT, MPI_INT, b.ag_r, (int)AG_COUNT,
                       MPI_INT, MPI_COMM_WORLD);
    s1 = zt_stats(MPI_COMM_WORLD);
    ucx[ALLGATHER] = check_path(cycle, ALLGATHER, &s0, &s1);
    if (check_rc(rc, cycle, "allgather")) {
        ZT_FIND_BAD(bad, b.ag_r, (size_t)nranks * AG_COUNT,
                    val(cycle, ALLGATHER, (int)(i / AG_COUNT), i % AG_COUNT));
        ZT_CHECK(bad < 0, "cycle %d: rank %d: allgather of %zu ints per rank "
                 "wrong at %ld (block of rank %ld)", cycle, rank, AG_COUNT,
                 bad, bad < 0 ? -1L : bad / (long)AG_COUNT);
    }

    s0 = zt_stats(MPI_COMM_WORLD);
    rc = MPI_Bcast(b.bc, (int)BC_COUNT, MPI_INT, root, MPI_COMM_WORLD);
    s1 = zt_stats(MPI_COMM_WORLD);
    ucx[BCAST] = check_path(cycle, BCAST, &s0, &s1);
    if (check_rc(rc, cycle, "bcast")) {
        ZT_FIND_BAD(bad, b.bc, BC_COUNT, val(cycle, BCAST, root, i));
        ZT_CHECK(bad < 0, "cycle %d: rank %d: bcast of %zu ints from root %d "
                 "wrong at %ld", cycle, rank, BC_COUNT, root, bad);
    }
}

int main(int argc, char **argv)
{
    static uint64_t ucx[CYCLES][NCOLL], ucx_sum[CYCLES][NCOLL];
    MPIX_Zcopy_stats start, end;
    MPI_Info info;
    size_t gran;
    void *p;
    int activated;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);

    zt_require(zcopy_mem_granularity(&host, &gran) == ZCOPY_SUCCESS,
               "granularity");
    block_bytes = round_up(layout_bytes(), gran);
    zt_require(zcopy_mem_reserve(&p, block_bytes, 0, NULL, 0) == ZCOPY_SUCCESS,
               "reserve");
    res = p;
    zt_require(MPIX_Comm_set_memory_range(MPI_COMM_WORLD, res, block_bytes, 0,
               0) == MPI_SUCCESS, "set range");
    MPI_Comm_dup(MPI_COMM_WORLD, &other);
    MPI_Info_create(&info);
    MPI_Info_set(info, MPIX_ZCOPY_INFO_KEY, "false");
    MPI_Comm_dup_with_info(MPI_COMM_WORLD, info, &quiet);
    MPI_Info_free(&info);
    start = zt_stats(MPI_COMM_WORLD);

    for (int k = 0; k < CYCLES; k++) {
        zcopy_mem_handle_t h;

        /* Fresh physical memory, at the same address every cycle. */
        zt_require(zcopy_mem_create(&h, block_bytes, &host, 0) ==
                   ZCOPY_SUCCESS, "create");
        zt_require(zcopy_mem_map(res, block_bytes, 0, h, 0) == ZCOPY_SUCCESS,
                   "map");
        zt_require(MPIX_Comm_activate_memory(MPI_COMM_WORLD, res, block_bytes,
                   0, h, 0) == MPI_SUCCESS, "activate");
        activated = 0;
        MPIX_Zcopy_query(MPI_COMM_WORLD, res, block_bytes, &activated);
        ZT_CHECK(activated == 1, "cycle %d: rank %d: block not reported "
                 "activated", k, rank);

        run_cycle(res, k, ucx[k]);

        zt_require(MPIX_Comm_deactivate_memory(MPI_COMM_WORLD, res) ==
                   MPI_SUCCESS, "deactivate");
        zt_require(zcopy_mem_unmap(res) == ZCOPY_SUCCESS, "unmap");
        zt_require(zcopy_mem_free(h) == ZCOPY_SUCCESS, "free");
        /* Odd cycles: peers hear of the free through a collective on another
         * communicator first; even cycles: only at the next cycle's. */
        if (k & 1)
            MPI_Barrier(other);
    }
    end = zt_stats(MPI_COMM_WORLD);

    /* UCX bytes of each call, over all ranks. */
    MPI_Allreduce(ucx, ucx_sum, CYCLES * NCOLL, MPI_UINT64_T, MPI_SUM, quiet);
    for (int k = 0; k < CYCLES && rank == 0; k++)
        ZT_CHECK(ucx_sum[k][ALLREDUCE] > 0 && ucx_sum[k][ALLGATHER] > 0 &&
                     ucx_sum[k][BCAST] > 0,
                 "cycle %d: bytes through UCX over all ranks: allreduce %llu, "
                 "allgather %llu, bcast %llu; each must be > 0 on a "
                 "communicator that spans servers", k,
                 (unsigned long long)ucx_sum[k][ALLREDUCE],
                 (unsigned long long)ucx_sum[k][ALLGATHER],
                 (unsigned long long)ucx_sum[k][BCAST]);

    ZT_CHECK(end.fallback_calls == 0,
             "rank %d: %llu fallbacks on MPI_COMM_WORLD (last reason: %s)",
             rank, (unsigned long long)end.fallback_calls,
             end.last_fallback_reason);
    ZT_CHECK(end.zcopy_calls - start.zcopy_calls == 3 * CYCLES,
             "rank %d: %llu zero-copy collectives in the cycles, expected %d",
             rank, (unsigned long long)(end.zcopy_calls - start.zcopy_calls),
             3 * CYCLES);

    zt_require(MPIX_Comm_unset_memory_range(MPI_COMM_WORLD, res) ==
               MPI_SUCCESS, "unset range");
    zt_require(zcopy_mem_release(res) == ZCOPY_SUCCESS, "release");
    MPI_Comm_free(&other);
    MPI_Comm_free(&quiet);
    return zt_finish();
}
