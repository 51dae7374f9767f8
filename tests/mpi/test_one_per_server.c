/*
 * On a communicator with one rank on each server, small calls go to the
 * previous component (coll_zcopy_one_per_server_min), and so do the
 * allgathers and alltoalls whose payloads do not ride with the arrival,
 * unless coll_zcopy_one_per_server_moves is set; on every rank and in
 * step. Elsewhere they stay zero-copy.
 *
 *   test_one_per_server lone    every server holds one rank (two virtual
 *                               servers of one rank, every rank through
 *                               UCX, or the emulated cluster's 2x1): below
 *                               the limit every fixed-form collective,
 *                               allgatherv and every barrier falls back on every rank
 *                               with the small calls' reason and no
 *                               control message; from the limit every
 *                               one runs zero-copy, but allgather(v) and
 *                               alltoall of 512 KiB per block (beyond
 *                               what rides with the arrival), handed over
 *                               with the reason of data that only moves
 *                               (allgatherv by its largest block, which
 *                               every rank knows); alltoallv (whose ranks
 *                               learn whether its blocks ride only from
 *                               the arrival) is handed over so at every
 *                               size.
 *                               Under coll_zcopy_one_per_server_moves
 *                               those run zero-copy: allgather(v) and
 *                               alltoall from the limit on, alltoallv
 *                               (whose sizes only agree through the
 *                               control plane) always
 *   test_one_per_server shared  a server holds two ranks: every size runs
 *                               zero-copy
 *
 * Either way an alltoall in place of 512 KiB per block is the fallback's
 * (not carried, in place across servers: span.c), after the arrival.
 *
 * Every rank checks every result and each call's path from the
 * statistics. Rooted calls run from every root, in place and not; a root
 * describes its blocks with a type of its own of the same signature, so
 * that a rank counting elements for bytes decides apart from its peers.
 */
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

#define SMALL_REASON "small call, one rank per server"
#define INPLACE_REASON "in place across servers"
/* 512 KiB per block (an allgather's rank, an alltoall's pair of ranks, so
 * n times that per rank): beyond what rides with an arrival
 * (coll_zcopy_span_inline_max, 256 KiB by default; twice that per rank
 * for alltoall). */
#define BIG_INTS (131072)
#define MOVES_REASON "one rank per server: stock moves the same bytes"

static int rank, nranks;
static MPI_Datatype whole = MPI_DATATYPE_NULL; /* one block of ints */
static zt_arena_t arena;
static size_t cursor;

static int *take(size_t ints)
{
    return zt_arena_alloc(&arena, &cursor, ints * sizeof(int));
}

/* This rank's path for the one call since @b: a fallback for the reason
 * @want, without a control message where it is a hand-over (every reason
 * but INPLACE_REASON, which the ranks agree on at the arrival), or
 * (@want NULL) a zero-copy call. */
static void check_path(const char *what, int root, int ints,
                       const MPIX_Zcopy_stats *b, const char *want)
{
    MPIX_Zcopy_stats a = zt_stats(MPI_COMM_WORLD);
    unsigned long long calls = a.zcopy_calls - b->zcopy_calls;
    unsigned long long fallbacks = a.fallback_calls - b->fallback_calls;
    unsigned long long msgs = a.ctl_msgs - b->ctl_msgs;
    char reason[sizeof(a.last_fallback_reason)];

    if (want == NULL) {
        ZT_CHECK(calls == 1 && fallbacks == 0 && msgs > 0, "%s of %d ints, "
                 "root %d: rank %d did not run it zero-copy (zcopy %llu, "
                 "fallback %llu, control messages %llu, '%s')", what, ints,
                 root, rank, calls, fallbacks, msgs, a.last_fallback_reason);
        return;
    }
    snprintf(reason, sizeof(reason), "%s: %s", what, want);
    ZT_CHECK(calls == 0 && fallbacks == 1 &&
                 (msgs == 0 || strcmp(want, INPLACE_REASON) == 0) &&
                 strcmp(a.last_fallback_reason, reason) == 0,
             "%s of %d ints, root %d: rank %d did not fall back as '%s' "
             "(zcopy %llu, fallback %llu, control messages %llu, '%s')",
             what, ints, root, rank, want, calls, fallbacks, msgs,
             a.last_fallback_reason);
}

/* @n ints of @got against rank @owner's input from element @from. */
static void check_block(const char *what, int ints, int root, const int *got,
                        int n, int owner, int from, int call)
{
    long bad;

    ZT_FIND_BAD(bad, got, (size_t)n, zt_value(owner, from + (int)i, call));
    ZT_CHECK(bad < 0, "%s of %d ints, root %d: rank %d element %ld of rank "
             "%d's block is %d", what, ints, root, rank, bad, owner,
             bad < 0 ? 0 : got[bad]);
}

/* @n ints of @got against the sum over ranks from element @from. */
static void check_sum(const char *what, int ints, const int *got, int n,
                      int from, int call)
{
    long bad = -1;

    for (int i = 0; i < n && bad < 0; i++) {
        long long sum = 0;

        for (int j = 0; j < nranks; j++)
            sum += zt_value(j, from + i, call);
        if (got[i] != (int)sum)
            bad = i;
    }
    ZT_CHECK(bad < 0, "%s of %d ints: rank %d element %ld is wrong", what,
             ints, rank, bad);
}

static void fill(int *buf, int n, int owner, int call)
{
    for (int i = 0; i < n; i++)
        buf[i] = zt_value(owner, i, call);
}

static void run_allreduce(int ints, bool in_place, const char *want, int call)
{
    int *send = take((size_t)ints), *recv = take((size_t)ints);
    MPIX_Zcopy_stats b;

    fill(in_place ? recv : send, ints, rank, call);
    b = zt_stats(MPI_COMM_WORLD);
    MPI_Allreduce(in_place ? MPI_IN_PLACE : send, recv, ints, MPI_INT,
                  MPI_SUM, MPI_COMM_WORLD);
    check_path("allreduce", -1, ints, &b, want);
    check_sum("allreduce", ints, recv, ints, 0, call);
}

static void run_reduce(int ints, int root, bool in_place, const char *want,
                       int call)
{
    int *send = take((size_t)ints), *recv = take((size_t)ints);
    const bool ip = in_place && rank == root;
    MPIX_Zcopy_stats b;

    fill(ip ? recv : send, ints, rank, call);
    b = zt_stats(MPI_COMM_WORLD);
    MPI_Reduce(ip ? MPI_IN_PLACE : send, recv, ints, MPI_INT, MPI_SUM, root,
               MPI_COMM_WORLD);
    check_path("reduce", root, ints, &b, want);
    if (rank == root)
        check_sum("reduce", ints, recv, ints, 0, call);
}

/* @ints per rank. */
static void run_reduce_scatter_block(int ints, bool in_place, const char *want,
                                     int call)
{
    const int all = ints * nranks;
    int *send = take((size_t)all), *recv = take((size_t)all);
    MPIX_Zcopy_stats b;

    fill(in_place ? recv : send, all, rank, call);
    b = zt_stats(MPI_COMM_WORLD);
    MPI_Reduce_scatter_block(in_place ? MPI_IN_PLACE : send, recv, ints,
                             MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    check_path("reduce_scatter_block", -1, ints, &b, want);
    check_sum("reduce_scatter_block", ints, recv, ints, ints * rank, call);
}

/* @ints per rank; the receive side as blocks of the test's own type. */
static void run_allgather(int ints, bool in_place, const char *want, int call)
{
    int *send = take((size_t)ints), *recv = take((size_t)(ints * nranks));
    MPIX_Zcopy_stats b;

    fill(in_place ? recv + ints * rank : send, ints, rank, call);
    b = zt_stats(MPI_COMM_WORLD);
    if (in_place)
        MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, recv, 1, whole,
                      MPI_COMM_WORLD);
    else
        MPI_Allgather(send, ints, MPI_INT, recv, 1, whole, MPI_COMM_WORLD);
    check_path("allgather", -1, ints, &b, want);
    for (int j = 0; j < nranks; j++)
        check_block("allgather", ints, -1, recv + ints * j, ints, j, 0, call);
}

/* A v-form's arguments for @ints per rank (of the type they count), blocks
 * in rank order, in the arena (@counts, then @displs). */
static void v_blocks(int ints, int **counts, int **displs)
{
    *counts = take((size_t)nranks);
    *displs = take((size_t)nranks);
    for (int j = 0; j < nranks; j++) {
        (*counts)[j] = ints;
        (*displs)[j] = ints * j;
    }
}

/* Handed over as allgather is (@want): by its largest block, which every
 * rank knows from the counts. As allgather's, the receive counts whole
 * blocks of a type of its own where the send counts ints, so only the
 * bytes agree. (Every rank alike: stock's tuned picks its allgatherv
 * algorithm from the receive type too, and ranks with different types
 * would run different algorithms and hang.) */
static void run_allgatherv(int ints, bool in_place, const char *want,
                           int call)
{
    int *send = take((size_t)ints), *recv = take((size_t)(ints * nranks));
    int *counts, *displs;
    MPIX_Zcopy_stats b;

    v_blocks(1, &counts, &displs);
    fill(in_place ? recv + ints * rank : send, ints, rank, call);
    b = zt_stats(MPI_COMM_WORLD);
    MPI_Allgatherv(in_place ? MPI_IN_PLACE : send, ints, MPI_INT, recv,
                   counts, displs, whole, MPI_COMM_WORLD);
    check_path("allgatherv", -1, ints, &b, want);
    for (int j = 0; j < nranks; j++)
        check_block("allgatherv", ints, -1, recv + ints * j, ints, j, 0, call);
}

static void run_bcast(int ints, int root, const char *want, int call)
{
    int *buf = take((size_t)ints);

    if (rank == root)
        fill(buf, ints, root, call);
    else
        memset(buf, 0xff, (size_t)ints * sizeof(int));
    MPIX_Zcopy_stats b = zt_stats(MPI_COMM_WORLD);
    if (rank == root)
        MPI_Bcast(buf, 1, whole, root, MPI_COMM_WORLD);
    else
        MPI_Bcast(buf, ints, MPI_INT, root, MPI_COMM_WORLD);
    check_path("bcast", root, ints, &b, want);
    check_block("bcast", ints, root, buf, ints, root, 0, call);
}

/* @ints per rank. */
static void run_gather(int ints, int root, bool in_place, const char *want,
                       int call)
{
    int *send = take((size_t)ints), *recv = take((size_t)(ints * nranks));
    const bool ip = in_place && rank == root;
    MPIX_Zcopy_stats b;

    fill(ip ? recv + ints * rank : send, ints, rank, call);
    b = zt_stats(MPI_COMM_WORLD);
    if (rank != root)
        MPI_Gather(send, ints, MPI_INT, NULL, 0, MPI_DATATYPE_NULL, root,
                   MPI_COMM_WORLD);
    else
        MPI_Gather(ip ? MPI_IN_PLACE : send, ints, MPI_INT, recv, 1, whole,
                   root, MPI_COMM_WORLD);
    check_path("gather", root, ints, &b, want);
    for (int j = 0; j < nranks && rank == root; j++)
        check_block("gather", ints, root, recv + ints * j, ints, j, 0, call);
}

/* @ints per rank. */
static void run_scatter(int ints, int root, bool in_place, const char *want,
                        int call)
{
    int *send = take((size_t)(ints * nranks)), *recv = take((size_t)ints);
    const bool ip = in_place && rank == root;
    MPIX_Zcopy_stats b;

    if (rank == root)
        fill(send, ints * nranks, root, call);
    b = zt_stats(MPI_COMM_WORLD);
    if (rank != root)
        MPI_Scatter(NULL, 0, MPI_DATATYPE_NULL, recv, ints, MPI_INT, root,
                    MPI_COMM_WORLD);
    else
        MPI_Scatter(send, 1, whole, ip ? MPI_IN_PLACE : recv, ints, MPI_INT,
                    root, MPI_COMM_WORLD);
    check_path("scatter", root, ints, &b, want);
    check_block("scatter", ints, root, ip ? send + ints * rank : recv, ints,
                root, ints * rank, call);
}

/* @ints per pair of ranks; block j of rank r holds r's elements from j. */
static void run_alltoall(int ints, bool in_place, const char *want, int call)
{
    const int all = ints * nranks;
    int *send = take((size_t)all), *recv = take((size_t)all);
    MPIX_Zcopy_stats b;

    fill(in_place ? recv : send, all, rank, call);
    b = zt_stats(MPI_COMM_WORLD);
    MPI_Alltoall(in_place ? MPI_IN_PLACE : send, ints, MPI_INT, recv, 1,
                 whole, MPI_COMM_WORLD);
    check_path("alltoall", -1, ints, &b, want);
    for (int j = 0; j < nranks; j++)
        check_block("alltoall", ints, -1, recv + ints * j, ints, j,
                    ints * rank, call);
}

/* The same as an alltoallv: never handed over for its size, which only
 * its two ranks know of each block; handed over as data that only moves
 * (@want), before any displacement is exchanged (no control message). */
static void run_alltoallv(int ints, const char *want, int call)
{
    const int all = ints * nranks;
    int *send = take((size_t)all), *recv = take((size_t)all);
    int *counts, *displs;
    MPIX_Zcopy_stats b;

    v_blocks(ints, &counts, &displs);
    fill(send, all, rank, call);
    b = zt_stats(MPI_COMM_WORLD);
    MPI_Alltoallv(send, counts, displs, MPI_INT, recv, counts, displs,
                  MPI_INT, MPI_COMM_WORLD);
    check_path("alltoallv", -1, ints, &b, want);
    for (int j = 0; j < nranks; j++)
        check_block("alltoallv", ints, -1, recv + ints * j, ints, j,
                    ints * rank, call);
}

static void run_barrier(const char *want)
{
    MPIX_Zcopy_stats b = zt_stats(MPI_COMM_WORLD);

    MPI_Barrier(MPI_COMM_WORLD);
    check_path("barrier", -1, 0, &b, want);
}

/* Every collective at @ints per rank (the whole vector where there are no
 * blocks), each from every root and in place and not: allgather(v) and
 * alltoall, which only move data, expecting @moved (a reason, or NULL for
 * zero-copy), alltoallv @moved_v, and the others @sized. */
static void run_round(int ints, const char *sized, const char *moved,
                      const char *moved_v, int *call)
{
    MPI_Type_contiguous(ints, MPI_INT, &whole);
    MPI_Type_commit(&whole);
    for (int ip = 0; ip < 2; ip++) {
        cursor = 0;
        run_allreduce(ints, ip, sized, ++*call);
        run_reduce_scatter_block(ints, ip, sized, ++*call);
        run_allgather(ints, ip, moved, ++*call);
        run_allgatherv(ints, ip, moved, ++*call);
        /* Beyond the arrival, an alltoall in place across servers is
         * the fallback's (span.c), where it is not handed over first. */
        run_alltoall(ints, ip,
                     ip && ints == BIG_INTS && moved == NULL ? INPLACE_REASON
                                                             : moved,
                     ++*call);
        for (int root = 0; root < nranks; root++) {
            cursor = 0;
            run_reduce(ints, root, ip, sized, ++*call);
            run_gather(ints, root, ip, sized, ++*call);
            run_scatter(ints, root, ip, sized, ++*call);
            if (!ip)
                run_bcast(ints, root, sized, ++*call);
        }
    }
    cursor = 0;
    run_alltoallv(ints, moved_v, ++*call);
    MPI_Type_free(&whole);
}

int main(int argc, char **argv)
{
    const char *small, *moved;
    unsigned long limit, inline_max;
    int call = 0, below, at, moves;
    bool lone;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    zt_require(argc == 2 && (!strcmp(argv[1], "lone") ||
                             !strcmp(argv[1], "shared")),
               "usage: test_one_per_server lone|shared");
    lone = !strcmp(argv[1], "lone");
    limit = zt_cvar_ulong("coll_zcopy_one_per_server_min", 0);
    zt_require(limit >= 2 * sizeof(int), "coll_zcopy_one_per_server_min of "
               "at least 8 bytes");
    moves = zt_cvar_bool("coll_zcopy_one_per_server_moves", -1);
    zt_require(moves == 0 || moves == 1, "coll_zcopy_one_per_server_moves "
               "readable");
    inline_max = zt_cvar_ulong("coll_zcopy_span_inline_max", 0);
    zt_require(inline_max <= BIG_INTS * sizeof(int) / 2 &&
                   inline_max >= limit * (unsigned long)nranks,
               "coll_zcopy_span_inline_max between the calls at the limit "
               "(which must ride with the arrival) and 256 KiB (so that 512 "
               "KiB per block moves after it)");
    small = lone ? SMALL_REASON : NULL;
    moved = lone && !moves ? MOVES_REASON : NULL;
    below = (int)(limit / sizeof(int)) - 1;
    at = (int)((limit + sizeof(int) - 1) / sizeof(int));
    zt_arena_init(&arena, MPI_COMM_WORLD, 32u << 20);
    run_round(1, small, small, moved, &call);
    run_round(below, small, small, moved, &call);
    run_round(at, NULL, NULL, moved, &call);
    run_round(BIG_INTS, NULL, moved, moved, &call);
    run_barrier(small); /* barriers have no size: handed over where lone */
    zt_arena_fini(&arena);
    return zt_finish();
}
