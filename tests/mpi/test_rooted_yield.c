/*
 * Small rooted collectives where some rank's waits yield without sleeping,
 * or where ranks are three times the cores, go to the previous component
 * (coll_zcopy_rooted_yield_min), on every rank and in step.
 *
 *   test_rooted_yield handover  every rank activated, some rank's waits
 *                               yielding without sleeping or the ranks
 *                               three times the cores:
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
 *   test_rooted_yield spin      no rank's waits yield (coll_zcopy_yield=2):
 *                               every size runs zero-copy
 *   test_rooted_yield sleep     every rank's waits yield and sleep, the
 *                               ranks fewer than three times the cores:
 *                               every size runs zero-copy
 *
 * Every result is checked on every rank, and each call's path from the
 * statistics: one fallback with the expected reason and no control
 * message, or one zero-copy call. The arguments MPI ignores on a rank
 * (the receive side of gather's other ranks, the send side of scatter's,
 * the root's own block in place) are zeros and null types, and the root
 * of bcast, gather and scatter describes the blocks with a type of its
 * own of the same signature, so that a rank reading what it must not, or
 * counting elements for bytes, decides apart from its peers.
 */
#include "testutil.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define HANDOVER_REASON "small rooted call, waits yield"

static int rank, nranks;
static bool idle_rank;          /* idle mode: this rank activates nothing */
static MPI_Datatype whole = MPI_DATATYPE_NULL; /* the root's: a block */
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

/* This rank's path for the one call since @b: a fallback whose reason
 * names @reason, or (@reason NULL) a zero-copy call. */
static void check_path(const char *what, int root, int ints,
                       const MPIX_Zcopy_stats *b, const char *reason)
{
    MPIX_Zcopy_stats a = zt_stats(MPI_COMM_WORLD);
    unsigned long long calls = a.zcopy_calls - b->zcopy_calls;
    unsigned long long fallbacks = a.fallback_calls - b->fallback_calls;
    unsigned long long msgs = a.ctl_msgs - b->ctl_msgs;

    if (reason == NULL) {
        ZT_CHECK(calls == 1 && fallbacks == 0 && msgs > 0, "%s of %d ints, "
                 "root %d: rank %d did not run it zero-copy (zcopy %llu, "
                 "fallback %llu, control messages %llu, '%s')", what, ints,
                 root, rank, calls, fallbacks, msgs, a.last_fallback_reason);
        return;
    }
    ZT_CHECK(calls == 0 && fallbacks == 1 &&
                 strstr(a.last_fallback_reason, reason) != NULL,
             "%s of %d ints, root %d: rank %d did not fall back for '%s' "
             "(zcopy %llu, fallback %llu, '%s')", what, ints, root, rank,
             reason, calls, fallbacks, a.last_fallback_reason);
    if (!strcmp(reason, HANDOVER_REASON))
        ZT_CHECK(msgs == 0, "%s of %d ints, root %d: rank %d sent %llu "
                 "control messages for a call it handed over", what, ints,
                 root, rank, msgs);
}

/* The root's description of @ints ints: one element of its own type. */
static void root_type(int ints)
{
    if (whole != MPI_DATATYPE_NULL)
        MPI_Type_free(&whole);
    MPI_Type_contiguous(ints, MPI_INT, &whole);
    MPI_Type_commit(&whole);
}

static void check_ints(const char *what, int root, const int *got, int n,
                       int owner, int call)
{
    long bad = -1;

    ZT_FIND_BAD(bad, got, (size_t)n, zt_value(owner, (int)i, call));
    ZT_CHECK(bad < 0, "%s of %d ints, root %d: rank %d element %ld of rank "
             "%d's block is %d", what, n, root, rank, bad, owner,
             bad < 0 ? 0 : got[bad]);
}

static void run_bcast(int root, int ints, const char *reason, int call)
{
    int *buf = take((size_t)ints * sizeof(int));
    MPIX_Zcopy_stats b;

    for (int i = 0; i < ints; i++)
        buf[i] = rank == root ? zt_value(root, i, call) : -1;
    b = zt_stats(MPI_COMM_WORLD);
    if (rank == root)
        MPI_Bcast(buf, 1, whole, root, MPI_COMM_WORLD);
    else
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
        send[i] = zt_value(rank, i, call);
        recv[i] = rank == root && in_place ? send[i] : -1;
    }
    b = zt_stats(MPI_COMM_WORLD);
    MPI_Reduce(rank == root && in_place ? MPI_IN_PLACE : send, recv, ints,
               MPI_INT, MPI_SUM, root, MPI_COMM_WORLD);
    check_path(what, root, ints, &b, reason);
    if (rank == root)
        bad = zt_find_bad_sum(recv, ints, nranks, call);
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
        send[i] = zt_value(rank, i, call);
    if (rank == root && in_place)
        memcpy(recv + (size_t)ints * (size_t)rank, send,
               (size_t)ints * sizeof(int));
    b = zt_stats(MPI_COMM_WORLD);
    if (rank != root)
        MPI_Gather(send, ints, MPI_INT, NULL, 0, MPI_DATATYPE_NULL, root,
                   MPI_COMM_WORLD);
    else if (in_place)
        MPI_Gather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, recv, 1, whole, root,
                   MPI_COMM_WORLD);
    else
        MPI_Gather(send, ints, MPI_INT, recv, 1, whole, root, MPI_COMM_WORLD);
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
            send[(size_t)ints * (size_t)j + (size_t)i] = zt_value(j, i, call);
    for (int i = 0; i < ints; i++)
        recv[i] = -1;
    b = zt_stats(MPI_COMM_WORLD);
    if (rank != root)
        MPI_Scatter(NULL, 0, MPI_DATATYPE_NULL, recv, ints, MPI_INT, root,
                    MPI_COMM_WORLD);
    else if (in_place)
        MPI_Scatter(send, 1, whole, MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, root,
                    MPI_COMM_WORLD);
    else
        MPI_Scatter(send, 1, whole, recv, ints, MPI_INT, root, MPI_COMM_WORLD);
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
        send[i] = zt_value(rank, i, call);
    b = zt_stats(MPI_COMM_WORLD);
    MPI_Allreduce(send, recv, ints, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    check_path("allreduce", -1, ints, &b, reason);
    bad = zt_find_bad_sum(recv, ints, nranks, call);
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
    root_type(ints);
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
    const char *handover;
    int call = 0, below;
    bool idle, stays;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    zt_require(argc == 2 && (!strcmp(argv[1], "handover") ||
                             !strcmp(argv[1], "idle") ||
                             !strcmp(argv[1], "spin") ||
                             !strcmp(argv[1], "sleep")),
               "usage: test_rooted_yield handover|idle|spin|sleep");
    idle = !strcmp(argv[1], "idle");
    stays = !strcmp(argv[1], "spin") || !strcmp(argv[1], "sleep");
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
    /* Below the limit every rank hands the call over where the set-up
     * agreed to (handover and idle modes), whatever its buffers; at it,
     * the rooted calls run zero-copy unless a rank has nothing activated,
     * as the allreduces do. */
    handover = stays ? NULL : HANDOVER_REASON;
    run_round(1, handover, idle ? idle_reason : NULL, &call);
    run_round(below, handover, idle ? idle_reason : NULL, &call);
    run_round((int)((limit + sizeof(int) - 1) / sizeof(int)),
              idle ? idle_reason : NULL, idle ? idle_reason : NULL, &call);
    MPI_Type_free(&whole);
    if (!idle_rank) {
        zt_arena_fini(&arena);
        MPI_Comm_free(&active);
    }
    return zt_finish();
}
