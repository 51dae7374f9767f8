/*
 * Small rooted collectives where waits yield go to the previous component
 * (coll_zcopy_rooted_yield_min), on every rank and in step.
 *
 *   test_rooted_yield handover  every rank activated (coll_zcopy_yield=1):
 *                               bcast, reduce, gather and scatter below
 *                               the limit fall back on every rank with
 *                               their own reason, at the limit they run
 *                               zero-copy; every root, in place and not,
 *                               with zero-copy allreduces between them
 *   test_rooted_yield idle      the last rank activates nothing, so it
 *                               declines other calls before describing
 *                               them: it must not decline a call that the
 *                               others hand over without a step, or the
 *                               ranks' control planes part
 *
 * Every result is checked on every rank, and each call's path from the
 * statistics: one fallback with the expected reason, or one zero-copy call.
 */
#include "testutil.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define HANDOVER_REASON "small rooted call, waits yield"

static int rank, nranks;
static bool idle_rank;          /* idle mode: this rank activates nothing */
static zt_arena_t arena;
static size_t cursor;

/* Buffers of one call: activated, or from malloc on the idle rank. */
static void *take(size_t bytes)
{
    void *p;

    if (!idle_rank)
        return zt_arena_alloc(&arena, &cursor, bytes);
    p = malloc(bytes ? bytes : 1);
    zt_require(p != NULL, "malloc");
    return p;
}

static void give_back(void *p)
{
    if (idle_rank)
        free(p);
}

static int value(int owner, int i, int call)
{
    return owner * 1000003 + i * 7 + call;
}

/* This rank's path for the one call since @b: a fallback whose reason
 * names @reason, or (@reason NULL) a zero-copy call. */
static void check_path(const char *what, int root, int ints,
                       const MPIX_Zcopy_stats *b, const char *reason)
{
    MPIX_Zcopy_stats a = zt_stats(MPI_COMM_WORLD);
    unsigned long long calls = a.zcopy_calls - b->zcopy_calls;
    unsigned long long fallbacks = a.fallback_calls - b->fallback_calls;

    if (reason == NULL) {
        ZT_CHECK(calls == 1 && fallbacks == 0, "%s of %d ints, root %d: "
                 "rank %d did not run it zero-copy (zcopy %llu, fallback "
                 "%llu, '%s')", what, ints, root, rank, calls, fallbacks,
                 a.last_fallback_reason);
        return;
    }
    ZT_CHECK(calls == 0 && fallbacks == 1 &&
                 strstr(a.last_fallback_reason, reason) != NULL,
             "%s of %d ints, root %d: rank %d did not fall back for '%s' "
             "(zcopy %llu, fallback %llu, '%s')", what, ints, root, rank,
             reason, calls, fallbacks, a.last_fallback_reason);
}

static void check_ints(const char *what, int root, const int *got, int n,
                       int owner, int call)
{
    long bad = -1;

    ZT_FIND_BAD(bad, got, (size_t)n, value(owner, (int)i, call));
    ZT_CHECK(bad < 0, "%s of %d ints, root %d: rank %d element %ld of rank "
             "%d's block is %d", what, n, root, rank, bad, owner,
             bad < 0 ? 0 : got[bad]);
}

static void run_bcast(int root, int ints, const char *reason, int call)
{
    int *buf = take((size_t)ints * sizeof(int));
    MPIX_Zcopy_stats b;

    for (int i = 0; i < ints; i++)
        buf[i] = rank == root ? value(root, i, call) : -1;
    b = zt_stats(MPI_COMM_WORLD);
    MPI_Bcast(buf, ints, MPI_INT, root, MPI_COMM_WORLD);
    check_path("bcast", root, ints, &b, reason);
    check_ints("bcast", root, buf, ints, root, call);
    give_back(buf);
}

static void run_reduce(int root, int ints, bool in_place, const char *reason,
                       int call)
{
    const char *what = in_place ? "reduce in place" : "reduce";
    int *send = take((size_t)ints * sizeof(int));
    int *recv = take((size_t)ints * sizeof(int));
    MPIX_Zcopy_stats b;
    long bad = -1;

    for (int i = 0; i < ints; i++) {
        send[i] = value(rank, i, call);
        recv[i] = rank == root && in_place ? send[i] : -1;
    }
    b = zt_stats(MPI_COMM_WORLD);
    MPI_Reduce(rank == root && in_place ? MPI_IN_PLACE : send, recv, ints,
               MPI_INT, MPI_SUM, root, MPI_COMM_WORLD);
    check_path(what, root, ints, &b, reason);
    for (int i = 0; i < ints && rank == root && bad < 0; i++) {
        long long sum = 0;

        for (int j = 0; j < nranks; j++)
            sum += value(j, i, call);
        if (recv[i] != (int)sum)
            bad = i;
    }
    ZT_CHECK(bad < 0, "%s of %d ints, root %d: element %ld is wrong", what,
             ints, root, bad);
    give_back(send);
    give_back(recv);
}

/* @ints per rank. */
static void run_gather(int root, int ints, bool in_place, const char *reason,
                       int call)
{
    const char *what = in_place ? "gather in place" : "gather";
    int *send = take((size_t)ints * sizeof(int));
    int *recv = take((size_t)ints * (size_t)nranks * sizeof(int));
    MPIX_Zcopy_stats b;

    for (int i = 0; i < ints; i++)
        send[i] = value(rank, i, call);
    if (rank == root && in_place)
        memcpy(recv + (size_t)ints * (size_t)rank, send,
               (size_t)ints * sizeof(int));
    b = zt_stats(MPI_COMM_WORLD);
    MPI_Gather(rank == root && in_place ? MPI_IN_PLACE : send, ints, MPI_INT,
               recv, ints, MPI_INT, root, MPI_COMM_WORLD);
    check_path(what, root, ints, &b, reason);
    for (int j = 0; j < nranks && rank == root; j++)
        check_ints(what, root, recv + (size_t)ints * (size_t)j, ints, j, call);
    give_back(send);
    give_back(recv);
}

/* @ints per rank. */
static void run_scatter(int root, int ints, bool in_place, const char *reason,
                        int call)
{
    const char *what = in_place ? "scatter in place" : "scatter";
    int *send = take((size_t)ints * (size_t)nranks * sizeof(int));
    int *recv = take((size_t)ints * sizeof(int));
    MPIX_Zcopy_stats b;

    for (int j = 0; j < nranks && rank == root; j++)
        for (int i = 0; i < ints; i++)
            send[(size_t)ints * (size_t)j + (size_t)i] = value(j, i, call);
    for (int i = 0; i < ints; i++)
        recv[i] = -1;
    b = zt_stats(MPI_COMM_WORLD);
    MPI_Scatter(send, ints, MPI_INT,
                rank == root && in_place ? MPI_IN_PLACE : recv, ints, MPI_INT,
                root, MPI_COMM_WORLD);
    check_path(what, root, ints, &b, reason);
    if (rank != root || !in_place)
        check_ints(what, root, recv, ints, rank, call);
    else
        check_ints(what, root, send + (size_t)ints * (size_t)rank, ints, rank,
                   call);
    give_back(send);
    give_back(recv);
}

/* An allreduce between the rooted calls: zero-copy when every rank is
 * activated, which it can only be if the control planes stayed in step. */
static void run_allreduce(int ints, const char *reason, int call)
{
    int *send = take((size_t)ints * sizeof(int));
    int *recv = take((size_t)ints * sizeof(int));
    MPIX_Zcopy_stats b;
    long bad = -1;

    for (int i = 0; i < ints; i++)
        send[i] = value(rank, i, call);
    b = zt_stats(MPI_COMM_WORLD);
    MPI_Allreduce(send, recv, ints, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    check_path("allreduce", -1, ints, &b, reason);
    for (int i = 0; i < ints && bad < 0; i++) {
        long long sum = 0;

        for (int j = 0; j < nranks; j++)
            sum += value(j, i, call);
        if (recv[i] != (int)sum)
            bad = i;
    }
    ZT_CHECK(bad < 0, "allreduce of %d ints: rank %d element %ld is wrong",
             ints, rank, bad);
    give_back(send);
    give_back(recv);
}

/* Every rooted form at @ints per rank from every root, each followed by an
 * allreduce; @reason: the fallback the rooted calls must take (NULL: none),
 * @other: the allreduces'. */
static void run_round(int ints, const char *reason, const char *other,
                      int *call)
{
    for (int root = 0; root < nranks; root++) {
        cursor = 0;
        run_bcast(root, ints, reason, ++*call);
        for (int ip = 0; ip < 2; ip++) {
            cursor = 0;
            run_reduce(root, ints, ip, reason, ++*call);
            cursor = 0;
            run_gather(root, ints, ip, reason, ++*call);
            cursor = 0;
            run_scatter(root, ints, ip, reason, ++*call);
            cursor = 0;
            run_allreduce(ints, other, ++*call);
        }
    }
}

int main(int argc, char **argv)
{
    const char *idle_reason = "no memory activated on this rank";
    unsigned long limit;
    MPI_Comm active;
    int call = 0, below;
    bool idle;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    zt_require(argc == 2 && (!strcmp(argv[1], "handover") ||
                             !strcmp(argv[1], "idle")),
               "usage: test_rooted_yield handover|idle");
    idle = !strcmp(argv[1], "idle");
    idle_rank = idle && rank == nranks - 1;
    limit = zt_cvar_ulong("coll_zcopy_rooted_yield_min", 0);
    zt_require(limit >= 2 * sizeof(int), "coll_zcopy_rooted_yield_min of "
               "at least 8 bytes");
    below = (int)(limit / sizeof(int)) - 1;
    /* The idle rank joins no arena, so that nothing is ever activated in
     * its process. */
    MPI_Comm_split(MPI_COMM_WORLD, idle_rank ? MPI_UNDEFINED : 0, rank,
                   &active);
    if (!idle_rank)
        zt_arena_init(&arena, active, 16u << 20);
    /* Below the limit every rank hands the call over, whatever its
     * buffers; at it, the rooted calls run zero-copy unless a rank has
     * nothing activated, as the allreduces do. */
    run_round(1, HANDOVER_REASON, idle ? idle_reason : NULL, &call);
    run_round(below, HANDOVER_REASON, idle ? idle_reason : NULL, &call);
    run_round((int)((limit + sizeof(int) - 1) / sizeof(int)),
              idle ? idle_reason : NULL, idle ? idle_reason : NULL, &call);
    if (!idle_rank) {
        zt_arena_fini(&arena);
        MPI_Comm_free(&active);
    }
    return zt_finish();
}
