/*
 * Who moves the data of a rooted collective inside one server.
 *
 *   test_root_moves root   waits yield (coll_zcopy_yield=1) and the blocks
 *                          fit coll_zcopy_root_moves_max: the root of bcast
 *                          and gather(v) moves every block itself, the root
 *                          of a reduce reduces every input alone; a
 *                          scatter(v)'s ranks still move their own blocks
 *                          (server/run.c says why)
 *   test_root_moves peers  coll_zcopy_root_moves_max=0: every other rank
 *                          moves its own block (or reduces a slice), as
 *                          where waits spin
 *
 * Each call's result is checked on every rank, and each rank's ipc_bytes
 * delta says who moved what: under `root` the root counts every peer's
 * block and the others nothing; under `peers` the reverse (bcasts above
 * coll_zcopy_small_msg go by slices, counted over all ranks). Every call
 * runs zero-copy and not inline (the blocks exceed the inline limit),
 * every root in turn, in place and not, as in the MPI standard's
 * examples. First, under `root`, a gather's root that cannot map its
 * peers (out of address space) must take every rank to the fallback, with
 * right results: it alone moved data, so it alone could fail, and the
 * others learn it from its word at the end.
 */
#include "testutil.h"
#include "../common/proc.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

/* Ints of a block: 16 KiB, above any inline limit where waits yield (8 KiB
 * by default, 1 KiB under the suite's settings). */
#define BLOCK_INTS 4096

static int rank, nranks;
static bool root_moves;
static zt_arena_t arena;
static size_t cursor;           /* bump offset in the arena, reset per call */

/* Buffers of one call, from the start of the arena. */
static void *take(size_t bytes)
{
    return zt_arena_alloc(&arena, &cursor, bytes);
}

/* One zero-copy call on this rank since @b, through the mappings (not
 * inline). */
static void check_zcopy(const char *what, int root, const MPIX_Zcopy_stats *b)
{
    MPIX_Zcopy_stats a = zt_stats(MPI_COMM_WORLD);
    unsigned long long calls = a.zcopy_calls - b->zcopy_calls;
    unsigned long long fallbacks = a.fallback_calls - b->fallback_calls;
    unsigned long long inlined = a.inline_calls - b->inline_calls;

    ZT_CHECK(calls == 1 && fallbacks == 0 && inlined == 0,
             "%s root %d: not one mapped zero-copy call (zcopy %llu, "
             "fallback %llu, inline %llu)", what, root, calls, fallbacks,
             inlined);
}

/* Bytes this rank moved through the mappings since @b. */
static unsigned long long moved_since(const MPIX_Zcopy_stats *b)
{
    return zt_stats(MPI_COMM_WORLD).ipc_bytes - b->ipc_bytes;
}

static void check_moved(const char *what, int root, const MPIX_Zcopy_stats *b,
                        unsigned long long want)
{
    unsigned long long moved = moved_since(b);

    ZT_CHECK(moved == want, "%s root %d: rank %d moved %llu bytes through "
             "mappings, expected %llu (%s)", what, root, rank, moved, want,
             root_moves ? "under coll_zcopy_root_moves_max"
                        : "coll_zcopy_root_moves_max=0");
}

/* The same over all ranks together (collective). */
static void check_moved_total(const char *what, int root,
                              const MPIX_Zcopy_stats *b,
                              unsigned long long want)
{
    unsigned long long moved = moved_since(b), all;

    MPI_Allreduce(&moved, &all, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM,
                  MPI_COMM_WORLD);
    ZT_CHECK(all == want, "%s root %d: %llu bytes through mappings on all "
             "ranks, expected %llu", what, root, all, want);
}

static void check_ints(const char *what, int root, const int *got, int n,
                       int owner, int call)
{
    long bad = -1;

    ZT_FIND_BAD(bad, got, (size_t)n, zt_value(owner, (int)i, call));
    ZT_CHECK(bad < 0, "%s root %d: rank %d element %ld of rank %d's block "
             "is %d", what, root, rank, bad, owner, bad < 0 ? 0 : got[bad]);
}

/* Bytes through mappings that this call must count on this rank: every
 * other rank's block at the root when it moves them all (@by_root), else
 * the rank's own block everywhere but at the root. */
static unsigned long long expect_moved(int root, bool by_root,
                                       const int *counts)
{
    unsigned long long others = 0;

    for (int j = 0; j < nranks; j++)
        others += j == root ? 0 : (unsigned long long)counts[j] * sizeof(int);
    if (by_root)
        return rank == root ? others : 0;
    return rank == root ? 0 : (unsigned long long)counts[rank] * sizeof(int);
}

/* A bcast of @ints ints: 16 KiB (every rank pulls the whole message where
 * the root does not move it) or 64 KiB (above coll_zcopy_small_msg: each
 * rank copies a slice to everyone; 3 x 64 KiB is within the root's limit). */
static void run_bcast(int root, int ints, int call)
{
    int *buf = take((size_t)ints * sizeof(int));
    const unsigned long long len = (unsigned long long)ints * sizeof(int);
    MPIX_Zcopy_stats b;

    for (int i = 0; i < ints; i++)
        buf[i] = rank == root ? zt_value(root, i, call) : -1;
    b = zt_stats(MPI_COMM_WORLD);
    MPI_Bcast(buf, ints, MPI_INT, root, MPI_COMM_WORLD);
    check_zcopy("bcast", root, &b);
    if (root_moves)
        check_moved("bcast", root, &b,
                    rank == root ? len * (unsigned long long)(nranks - 1) : 0);
    else if (len <= zt_cvar_ulong("coll_zcopy_small_msg", 16384))
        check_moved("bcast", root, &b, rank == root ? 0 : len);
    else /* slices: each rank's, from the root to every other rank */
        check_moved_total("bcast", root, &b,
                          len * (unsigned long long)(nranks - 1));
    check_ints("bcast", root, buf, ints, root, call);
}

/* Ints in rank j's block: uneven in the v-forms, so that one rank's count
 * used for another's shows. */
static int count_of(int j, bool vector, int ints)
{
    return vector ? ints + 16 * j : ints;
}

/* The blocks of @ints ints per rank in the root's buffer: in rank order,
 * or, in the v-forms, in reverse rank order with a gap after each. Returns
 * the ints between two blocks' starts. */
static int layout(bool vector, int ints, int *counts, int *displs)
{
    const int stride = vector ? 2 * ints : ints;

    for (int j = 0; j < nranks; j++) {
        counts[j] = count_of(j, vector, ints);
        displs[j] = (vector ? nranks - 1 - j : j) * stride;
    }
    return stride;
}

/* gather, or gatherv with blocks in reverse rank order and gaps. */
static void run_gather(int root, bool vector, bool in_place, int call)
{
    const char *what = vector ? (in_place ? "gatherv in place" : "gatherv")
                              : (in_place ? "gather in place" : "gather");
    const int mine = count_of(rank, vector, BLOCK_INTS);
    int *counts = malloc(sizeof(int) * (size_t)nranks);
    int *displs = malloc(sizeof(int) * (size_t)nranks);
    int *send = take((size_t)mine * sizeof(int));
    int *recv, stride;
    MPIX_Zcopy_stats b;

    zt_require(counts && displs, "malloc");
    stride = layout(vector, BLOCK_INTS, counts, displs);
    recv = take((size_t)stride * (size_t)nranks * sizeof(int));
    for (int i = 0; i < mine; i++)
        send[i] = zt_value(rank, i, call);
    if (rank == root && in_place)
        memcpy(recv + displs[rank], send, (size_t)mine * sizeof(int));
    b = zt_stats(MPI_COMM_WORLD);
    if (vector)
        MPI_Gatherv(rank == root && in_place ? MPI_IN_PLACE : send, mine,
                    MPI_INT, recv, counts, displs, MPI_INT, root,
                    MPI_COMM_WORLD);
    else
        MPI_Gather(rank == root && in_place ? MPI_IN_PLACE : send, mine,
                   MPI_INT, recv, BLOCK_INTS, MPI_INT, root, MPI_COMM_WORLD);
    check_zcopy(what, root, &b);
    check_moved(what, root, &b, expect_moved(root, root_moves, counts));
    for (int j = 0; j < nranks && rank == root; j++)
        check_ints(what, root, recv + displs[j], counts[j], j, call);
    free(counts);
    free(displs);
}

/* scatter, or scatterv with blocks in reverse rank order and gaps: each
 * rank pulls its own block in both modes. */
static void run_scatter(int root, bool vector, bool in_place, int call)
{
    const int ints = BLOCK_INTS;
    const char *what = vector ? (in_place ? "scatterv in place" : "scatterv")
                              : (in_place ? "scatter in place" : "scatter");
    const int mine = count_of(rank, vector, ints);
    int *counts = malloc(sizeof(int) * (size_t)nranks);
    int *displs = malloc(sizeof(int) * (size_t)nranks);
    int *recv = take((size_t)mine * sizeof(int));
    int *send, stride;
    MPIX_Zcopy_stats b;

    zt_require(counts && displs, "malloc");
    stride = layout(vector, ints, counts, displs);
    send = take((size_t)stride * (size_t)nranks * sizeof(int));
    for (int j = 0; j < nranks && rank == root; j++)
        for (int i = 0; i < counts[j]; i++)
            send[displs[j] + i] = zt_value(j, i, call);
    for (int i = 0; i < mine; i++)
        recv[i] = -1;
    b = zt_stats(MPI_COMM_WORLD);
    if (vector)
        MPI_Scatterv(send, counts, displs, MPI_INT,
                     rank == root && in_place ? MPI_IN_PLACE : recv, mine,
                     MPI_INT, root, MPI_COMM_WORLD);
    else
        MPI_Scatter(send, ints, MPI_INT,
                    rank == root && in_place ? MPI_IN_PLACE : recv, ints,
                    MPI_INT, root, MPI_COMM_WORLD);
    check_zcopy(what, root, &b);
    check_moved(what, root, &b, expect_moved(root, false, counts));
    if (rank != root || !in_place)
        check_ints(what, root, recv, mine, rank, call);
    else /* in place: the root's own block stays where it was */
        check_ints(what, root, send + displs[rank], mine, rank, call);
    free(counts);
    free(displs);
}

/* A reduce of 32 KiB, above coll_zcopy_small_msg (where the root reduces
 * alone whatever the setting): under `root` the root reads every other
 * input itself; under `peers` every rank reduces a slice. */
static void run_reduce(int root, bool in_place, int call)
{
    const char *what = in_place ? "reduce in place" : "reduce";
    const int ints = 2 * BLOCK_INTS;
    const unsigned long long len = (unsigned long long)ints * sizeof(int);
    int *send = take((size_t)len), *recv = take((size_t)len);
    MPIX_Zcopy_stats b;
    long bad = -1;

    for (int i = 0; i < ints; i++) {
        send[i] = zt_value(rank, i, call);
        recv[i] = rank == root && in_place ? send[i] : -1;
    }
    b = zt_stats(MPI_COMM_WORLD);
    MPI_Reduce(rank == root && in_place ? MPI_IN_PLACE : send, recv, ints,
               MPI_INT, MPI_SUM, root, MPI_COMM_WORLD);
    check_zcopy(what, root, &b);
    if (root_moves)
        check_moved(what, root, &b,
                    rank == root ? len * (unsigned long long)(nranks - 1) : 0);
    else /* slices: each rank reads its slice of every input */
        ZT_CHECK(moved_since(&b) > 0, "%s root %d: rank %d reduced no "
                 "slice", what, root, rank);
    if (rank == root)
        bad = zt_find_bad_sum(recv, ints, nranks, call);
    ZT_CHECK(bad < 0, "%s root %d: element %ld is wrong", what, root, bad);
}

/* Rank 0 has mapped no peer yet: its first import of each peer needs a
 * mirror of the peer's whole arena, which the limit leaves no room for.
 * A gather, whose root reads every block itself under `root`. */
static void run_mapfail(void)
{
    const size_t block = BLOCK_INTS * sizeof(int);
    struct rlimit old, tight;
    MPIX_Zcopy_stats b, a;
    int *send, *recv;
    bool fell_back;

    cursor = 0;
    send = take(block);
    recv = take(block * (size_t)nranks);
    for (int i = 0; i < BLOCK_INTS; i++)
        send[i] = zt_value(rank, i, 0);
    zt_require(getrlimit(RLIMIT_AS, &old) == 0, "getrlimit");
    tight = old;
    if (rank == 0) {
        tight.rlim_cur = proc_vm_size() + (16u << 20);
        zt_require(setrlimit(RLIMIT_AS, &tight) == 0, "setrlimit");
    }
    b = zt_stats(MPI_COMM_WORLD);
    MPI_Gather(send, BLOCK_INTS, MPI_INT, recv, BLOCK_INTS, MPI_INT, 0,
               MPI_COMM_WORLD);
    a = zt_stats(MPI_COMM_WORLD);
    if (rank == 0)
        zt_require(setrlimit(RLIMIT_AS, &old) == 0, "setrlimit back");
    fell_back = a.fallback_calls == b.fallback_calls + 1 &&
                a.zcopy_calls == b.zcopy_calls &&
                strstr(a.last_fallback_reason, "could not be mapped");
    ZT_CHECK(fell_back, "gather, root out of address space: rank %d did "
             "not fall back for it (zcopy %llu, fallback %llu, reason '%s')",
             rank, (unsigned long long)(a.zcopy_calls - b.zcopy_calls),
             (unsigned long long)(a.fallback_calls - b.fallback_calls),
             a.last_fallback_reason);
    for (int j = 0; j < nranks && rank == 0; j++)
        check_ints("gather, root out of address space", 0,
                   recv + (size_t)j * BLOCK_INTS, BLOCK_INTS, j, 0);
}

int main(int argc, char **argv)
{
    int call = 0;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    zt_require(argc == 2 && (!strcmp(argv[1], "root") ||
                             !strcmp(argv[1], "peers")),
               "usage: test_root_moves root|peers");
    root_moves = !strcmp(argv[1], "root");
    zt_arena_init(&arena, MPI_COMM_WORLD, 64u << 20);
    if (root_moves)
        run_mapfail();
    for (int root = 0; root < nranks; root++) {
        for (int ints = BLOCK_INTS; ints <= 4 * BLOCK_INTS; ints *= 4) {
            cursor = 0;
            run_bcast(root, ints, ++call);
        }
        for (int v = 0; v < 2; v++)
            for (int ip = 0; ip < 2; ip++) {
                cursor = 0;
                run_gather(root, v, ip, ++call);
                cursor = 0;
                run_scatter(root, v, ip, ++call);
            }
        for (int ip = 0; ip < 2; ip++) {
            cursor = 0;
            run_reduce(root, ip, ++call);
        }
    }
    zt_arena_fini(&arena);
    return zt_finish();
}
