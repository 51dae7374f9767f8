/*
 * Small calls on a communicator with one rank on each server go to the
 * previous component (coll_zcopy_one_per_server_min), on every rank and
 * in step; elsewhere they stay zero-copy.
 *
 *   test_one_per_server lone    every server holds one rank (two virtual
 *                               servers of one rank, every rank through
 *                               UCX, or the emulated cluster's 2x1): below
 *                               the limit every fixed-form collective and
 *                               every barrier falls back on every rank
 *                               with the hand-over's reason and no control
 *                               message; at the limit each runs zero-copy,
 *                               and a small allgatherv (a v-form, whose
 *                               sizes only agree through the control
 *                               plane) always does
 *   test_one_per_server shared  a server holds two ranks: every size runs
 *                               zero-copy
 *
 * Every rank checks every result and each call's path from the
 * statistics. Rooted calls run from every root, in place and not; a root
 * describes its blocks with a type of its own of the same signature, so
 * that a rank counting elements for bytes decides apart from its peers.
 */
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

#define HANDOVER_REASON "small call, one rank per server"

static int rank, nranks;
static MPI_Datatype whole = MPI_DATATYPE_NULL; /* one block of ints */
static zt_arena_t arena;
static size_t cursor;

static int *take(size_t ints)
{
    return zt_arena_alloc(&arena, &cursor, ints * sizeof(int));
}

/* This rank's path for the one call since @b: the hand-over (@handed) or
 * a zero-copy call. */
static void check_path(const char *what, int root, int ints,
                       const MPIX_Zcopy_stats *b, bool handed)
{
    MPIX_Zcopy_stats a = zt_stats(MPI_COMM_WORLD);
    unsigned long long calls = a.zcopy_calls - b->zcopy_calls;
    unsigned long long fallbacks = a.fallback_calls - b->fallback_calls;
    unsigned long long msgs = a.ctl_msgs - b->ctl_msgs;

    if (!handed) {
        ZT_CHECK(calls == 1 && fallbacks == 0 && msgs > 0, "%s of %d ints, "
                 "root %d: rank %d did not run it zero-copy (zcopy %llu, "
                 "fallback %llu, control messages %llu, '%s')", what, ints,
                 root, rank, calls, fallbacks, msgs, a.last_fallback_reason);
        return;
    }
    ZT_CHECK(calls == 0 && fallbacks == 1 && msgs == 0 &&
                 strstr(a.last_fallback_reason, HANDOVER_REASON) != NULL,
             "%s of %d ints, root %d: rank %d did not hand it over (zcopy "
             "%llu, fallback %llu, control messages %llu, '%s')", what, ints,
             root, rank, calls, fallbacks, msgs, a.last_fallback_reason);
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

static void run_allreduce(int ints, bool in_place, bool handed, int call)
{
    int *send = take((size_t)ints), *recv = take((size_t)ints);
    MPIX_Zcopy_stats b;

    fill(in_place ? recv : send, ints, rank, call);
    b = zt_stats(MPI_COMM_WORLD);
    MPI_Allreduce(in_place ? MPI_IN_PLACE : send, recv, ints, MPI_INT,
                  MPI_SUM, MPI_COMM_WORLD);
    check_path("allreduce", -1, ints, &b, handed);
    check_sum("allreduce", ints, recv, ints, 0, call);
}

static void run_reduce(int ints, int root, bool in_place, bool handed,
                       int call)
{
    int *send = take((size_t)ints), *recv = take((size_t)ints);
    const bool ip = in_place && rank == root;
    MPIX_Zcopy_stats b;

    fill(ip ? recv : send, ints, rank, call);
    b = zt_stats(MPI_COMM_WORLD);
    MPI_Reduce(ip ? MPI_IN_PLACE : send, recv, ints, MPI_INT, MPI_SUM, root,
               MPI_COMM_WORLD);
    check_path("reduce", root, ints, &b, handed);
    if (rank == root)
        check_sum("reduce", ints, recv, ints, 0, call);
}

/* @ints per rank. */
static void run_reduce_scatter_block(int ints, bool in_place, bool handed,
                                     int call)
{
    const int all = ints * nranks;
    int *send = take((size_t)all), *recv = take((size_t)all);
    MPIX_Zcopy_stats b;

    fill(in_place ? recv : send, all, rank, call);
    b = zt_stats(MPI_COMM_WORLD);
    MPI_Reduce_scatter_block(in_place ? MPI_IN_PLACE : send, recv, ints,
                             MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    check_path("reduce_scatter_block", -1, ints, &b, handed);
    check_sum("reduce_scatter_block", ints, recv, ints, ints * rank, call);
}

/* @ints per rank; the receive side as blocks of the test's own type. */
static void run_allgather(int ints, bool in_place, bool handed, int call)
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
    check_path("allgather", -1, ints, &b, handed);
    for (int j = 0; j < nranks; j++)
        check_block("allgather", ints, -1, recv + ints * j, ints, j, 0, call);
}

/* Never handed over: only the control plane makes its sizes agree. */
static void run_allgatherv(int ints, int call)
{
    int *send = take((size_t)ints), *recv = take((size_t)(ints * nranks));
    int *counts = malloc(sizeof(int) * (size_t)nranks);
    int *displs = malloc(sizeof(int) * (size_t)nranks);
    MPIX_Zcopy_stats b;

    zt_require(counts && displs, "malloc");
    for (int j = 0; j < nranks; j++) {
        counts[j] = ints;
        displs[j] = ints * j;
    }
    fill(send, ints, rank, call);
    b = zt_stats(MPI_COMM_WORLD);
    MPI_Allgatherv(send, ints, MPI_INT, recv, counts, displs, MPI_INT,
                   MPI_COMM_WORLD);
    check_path("allgatherv", -1, ints, &b, false);
    for (int j = 0; j < nranks; j++)
        check_block("allgatherv", ints, -1, recv + ints * j, ints, j, 0, call);
    free(counts);
    free(displs);
}

static void run_bcast(int ints, int root, bool handed, int call)
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
    check_path("bcast", root, ints, &b, handed);
    check_block("bcast", ints, root, buf, ints, root, 0, call);
}

/* @ints per rank. */
static void run_gather(int ints, int root, bool in_place, bool handed,
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
    check_path("gather", root, ints, &b, handed);
    for (int j = 0; j < nranks && rank == root; j++)
        check_block("gather", ints, root, recv + ints * j, ints, j, 0, call);
}

/* @ints per rank. */
static void run_scatter(int ints, int root, bool in_place, bool handed,
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
    check_path("scatter", root, ints, &b, handed);
    check_block("scatter", ints, root, ip ? send + ints * rank : recv, ints,
                root, ints * rank, call);
}

/* @ints per pair of ranks; block j of rank r holds r's elements from j. */
static void run_alltoall(int ints, bool in_place, bool handed, int call)
{
    const int all = ints * nranks;
    int *send = take((size_t)all), *recv = take((size_t)all);
    MPIX_Zcopy_stats b;

    fill(in_place ? recv : send, all, rank, call);
    b = zt_stats(MPI_COMM_WORLD);
    MPI_Alltoall(in_place ? MPI_IN_PLACE : send, ints, MPI_INT, recv, 1,
                 whole, MPI_COMM_WORLD);
    check_path("alltoall", -1, ints, &b, handed);
    for (int j = 0; j < nranks; j++)
        check_block("alltoall", ints, -1, recv + ints * j, ints, j,
                    ints * rank, call);
}

static void run_barrier(bool handed)
{
    MPIX_Zcopy_stats b = zt_stats(MPI_COMM_WORLD);

    MPI_Barrier(MPI_COMM_WORLD);
    check_path("barrier", -1, 0, &b, handed);
}

/* Every collective at @ints per rank (the whole vector where there are no
 * blocks), each from every root and in place and not. */
static void run_round(int ints, bool handed, int *call)
{
    MPI_Type_contiguous(ints, MPI_INT, &whole);
    MPI_Type_commit(&whole);
    for (int ip = 0; ip < 2; ip++) {
        cursor = 0;
        run_allreduce(ints, ip, handed, ++*call);
        run_reduce_scatter_block(ints, ip, handed, ++*call);
        run_allgather(ints, ip, handed, ++*call);
        run_alltoall(ints, ip, handed, ++*call);
        for (int root = 0; root < nranks; root++) {
            cursor = 0;
            run_reduce(ints, root, ip, handed, ++*call);
            run_gather(ints, root, ip, handed, ++*call);
            run_scatter(ints, root, ip, handed, ++*call);
            if (!ip)
                run_bcast(ints, root, handed, ++*call);
        }
    }
    cursor = 0;
    run_allgatherv(ints, ++*call);
    MPI_Type_free(&whole);
}

int main(int argc, char **argv)
{
    unsigned long limit;
    int call = 0, below, at;
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
    below = (int)(limit / sizeof(int)) - 1;
    at = (int)((limit + sizeof(int) - 1) / sizeof(int));
    zt_arena_init(&arena, MPI_COMM_WORLD, 16u << 20);
    run_round(1, lone, &call);
    run_round(below, lone, &call);
    run_round(at, false, &call);
    run_barrier(lone); /* barriers have no size: handed over where lone */
    zt_arena_fini(&arena);
    return zt_finish();
}
