/*
 * v-collectives whose layouts differ from rank to rank, on a communicator
 * that spans servers (run with coll_zcopy_virtual_servers=2 or
 * coll_zcopy_transport=ucx).
 *
 * MPI lets every rank choose its own receive displacements (allgatherv,
 * alltoallv) and its own send displacements (alltoallv): a rank may keep
 * block j anywhere in its buffer. test_collectives gives every rank the
 * same layout; here odd ranks store the blocks in reverse order and with
 * different gaps, so an algorithm that reads block j of a peer's buffer at
 * its own displacement gets the wrong block. Each call runs at a small and
 * at a large size (above coll_zcopy_small_msg, where a server shares the
 * fetching of other servers' blocks), both riding with the arrival for
 * allgatherv (and for alltoallv where every rank's blocks fit its slot),
 * and at one beyond what rides (coll_zcopy_span_inline_max),
 * in and out of place where MPI allows, checks every element, that the
 * call ran zero-copy, and that bytes crossed through UCX (summed over the
 * ranks, at the end).
 */
#include "testutil.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAX_RANKS 8
#define SMALL 100           /* ints per block */
#define LARGE 9000          /* ints per block: 36 KB, above small_msg */
#define HUGE 70000          /* ints per block: 280 KB, beyond what rides
                               with the arrival (256 KiB per rank) */
#define GAP 16              /* ints between blocks on odd ranks */

static int rank, nranks;

/* The value of element @i of the block that rank @src sends to @dst. */
static int val(int call, int src, int dst, size_t i)
{
    return (int)(((size_t)call * 7919u + (size_t)src * 104729u +
                  (size_t)dst * 1299709u + i) % 1000003u);
}

/* This rank's layout of n blocks of @count ints: in rank order on even
 * ranks; reversed, with gaps, on odd ranks. Returns the ints it spans. */
static size_t layout(size_t count, int *counts, int *displs)
{
    for (int j = 0; j < nranks; j++) {
        int slot = rank % 2 ? nranks - 1 - j : j;
        counts[j] = (int)count;
        displs[j] = slot * (int)(count + (rank % 2 ? GAP : 0));
    }
    return (size_t)nranks * (count + GAP);
}

/* Whether an allgatherv of @count ints per rank rides with the arrival:
 * at most coll_zcopy_span_inline_max per rank, in whole cache lines, and
 * 1 MiB for all ranks together. */
static bool rides(size_t count)
{
    const size_t bytes = count * sizeof(int);

    return bytes <= zt_cvar_ulong("coll_zcopy_span_inline_max", 0) &&
           (bytes + 63) / 64 * 64 * (size_t)nranks <= (size_t)1 << 20;
}

/* Whether an alltoallv of @count ints per block rides with the arrival:
 * every rank's blocks, after a table of n + 1 four-byte offsets, fit its
 * slot, twice coll_zcopy_span_inline_max within the payload area (twice
 * the parameter per rank, 4 MiB at most) over the ranks, in whole cache
 * lines (src/coll/span/span.c, span_vslot), since on the layouts this
 * test runs (up to 8 ranks, fewer servers than
 * coll_zcopy_span_dissemination_min) leaders send each server only its
 * ranks' blocks. */
static bool v_rides(size_t count)
{
    const size_t limit = zt_cvar_ulong("coll_zcopy_span_inline_max", 0);
    const size_t n = (size_t)nranks, most = (size_t)4 << 20;
    const size_t area = 2 * limit > most / n
                            ? most : (2 * limit * n + 63) / 64 * 64;
    size_t slot = 2 * limit;

    if (slot > area / n)
        slot = area / n;
    slot -= slot % 64;
    return slot > (n + 1) * 4 && (n + 1) * 4 + n * count * sizeof(int) <= slot;
}

/* One zero-copy call since @before, riding with the arrival or not as
 * @inlined says. */
static void expect_zcopy(const char *what, size_t count, bool inlined,
                         const MPIX_Zcopy_stats *before, uint64_t *ucx)
{
    MPIX_Zcopy_stats after = zt_stats(MPI_COMM_WORLD);

    ZT_CHECK(after.zcopy_calls == before->zcopy_calls + 1 &&
             after.fallback_calls == before->fallback_calls,
             "%s count=%zu: rank %d: not zero-copy (last reason: %s)", what,
             count, rank, after.last_fallback_reason);
    ZT_CHECK(after.inline_calls - before->inline_calls == (inlined ? 1 : 0),
             "%s count=%zu: rank %d: %llu inline calls, expected %d", what,
             count, rank,
             (unsigned long long)(after.inline_calls - before->inline_calls),
             inlined ? 1 : 0);
    *ucx += after.ucx_bytes - before->ucx_bytes;
}

static void check_blocks(const char *what, size_t count, const int *buf,
                         const int *displs, int call, bool from_all)
{
    for (int j = 0; j < nranks; j++) {
        const int *b = buf + displs[j];
        long bad;

        ZT_FIND_BAD(bad, b, count, from_all ? val(call, j, rank, i)
                                            : val(call, j, j, i));
        ZT_CHECK(bad < 0, "%s count=%zu: rank %d: block of rank %d wrong at "
                 "%ld (%d)", what, count, rank, j, bad,
                 bad < 0 ? 0 : b[bad]);
    }
}

static void run_allgatherv(int *sbuf, int *rbuf, size_t count, bool in_place,
                           int call, uint64_t *ucx)
{
    int counts[MAX_RANKS], displs[MAX_RANKS];
    size_t span = layout(count, counts, displs);
    MPIX_Zcopy_stats before;
    int rc;

    memset(rbuf, 0xff, span * sizeof(int));
    for (size_t i = 0; i < count; i++)
        (in_place ? rbuf + displs[rank] : sbuf)[i] = val(call, rank, rank, i);
    before = zt_stats(MPI_COMM_WORLD);
    rc = MPI_Allgatherv(in_place ? MPI_IN_PLACE : sbuf, (int)count, MPI_INT,
                        rbuf, counts, displs, MPI_INT, MPI_COMM_WORLD);
    ZT_CHECK(rc == MPI_SUCCESS, "allgatherv: rank %d: returned %d", rank, rc);
    expect_zcopy(in_place ? "allgatherv in place" : "allgatherv", count,
                 rides(count), &before, ucx);
    check_blocks("allgatherv", count, rbuf, displs, call, false);
}

static void run_alltoallv(int *sbuf, int *rbuf, size_t count, int call,
                          uint64_t *ucx)
{
    int scounts[MAX_RANKS], sdispls[MAX_RANKS];
    int rcounts[MAX_RANKS], rdispls[MAX_RANKS];
    size_t span = layout(count, scounts, sdispls);
    MPIX_Zcopy_stats before;
    int rc;

    layout(count, rcounts, rdispls);
    /* The send layout is the receive layout shifted by a rank-dependent
     * offset, so send and receive displacements differ too. */
    for (int j = 0; j < nranks; j++)
        sdispls[j] += rank * GAP / 2;
    for (int j = 0; j < nranks; j++)
        for (size_t i = 0; i < count; i++)
            sbuf[sdispls[j] + i] = val(call, rank, j, i);
    memset(rbuf, 0xff, span * sizeof(int));
    before = zt_stats(MPI_COMM_WORLD);
    rc = MPI_Alltoallv(sbuf, scounts, sdispls, MPI_INT, rbuf, rcounts,
                       rdispls, MPI_INT, MPI_COMM_WORLD);
    ZT_CHECK(rc == MPI_SUCCESS, "alltoallv: rank %d: returned %d", rank, rc);
    expect_zcopy("alltoallv", count, v_rides(count), &before, ucx);
    check_blocks("alltoallv", count, rbuf, rdispls, call, true);
}

int main(int argc, char **argv)
{
    const size_t counts[] = { SMALL, LARGE, HUGE };
    const size_t buf_ints = (size_t)MAX_RANKS * (HUGE + GAP) + 4 * GAP;
    uint64_t ucx = 0, total = 0;
    size_t off = 0;
    zt_arena_t arena;
    int *sbuf, *rbuf, call = 0;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    zt_require(nranks >= 2 && nranks <= MAX_RANKS, "2 to 8 ranks");

    zt_arena_init(&arena, MPI_COMM_WORLD, 2 * buf_ints * sizeof(int) + 4096);
    sbuf = zt_arena_alloc(&arena, &off, buf_ints * sizeof(int));
    rbuf = zt_arena_alloc(&arena, &off, buf_ints * sizeof(int));
    for (size_t k = 0; k < sizeof(counts) / sizeof(counts[0]); k++) {
        run_allgatherv(sbuf, rbuf, counts[k], false, ++call, &ucx);
        run_allgatherv(sbuf, rbuf, counts[k], true, ++call, &ucx);
        run_alltoallv(sbuf, rbuf, counts[k], ++call, &ucx);
    }
    MPI_Allreduce(&ucx, &total, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
    ZT_CHECK(total > 0, "no byte crossed through UCX: does WORLD span "
             "servers in this job?");
    zt_arena_fini(&arena);
    return zt_finish();
}
