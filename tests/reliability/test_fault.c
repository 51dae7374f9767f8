/*
 * A rank killed in the middle of zero-copy collectives (issue 7, 3).
 *
 *   test_fault kill     every rank runs large zero-copy allreduces without
 *                       end; on rank 1 a helper thread waits until the main
 *                       thread is inside its 5th or a later one and sends
 *                       the process SIGKILL: no handler, no cleanup, peers
 *                       spinning on its arrival and reading its pages.
 *   test_fault normal   the next job: the same allreduces, 20 of them,
 *                       right and zero-copy, then a clean exit.
 *
 * jobcheck.sh runs the two in a row and checks that the first ends (mpirun
 * exits non-zero) within 60 s, that no process of it is left and no file
 * either, and that the second then passes and leaves nothing: a killed job
 * leaves no state behind for the next one (zcopy's is memfds, which die
 * with their last process).
 */
#define _GNU_SOURCE
#include "relutil.h"
#include "testutil.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <time.h>

#define COUNT (1 << 20)   /* ints: 4 MiB per buffer */
#define KILL_AFTER 5      /* collectives completed before the kill */
#define NORMAL_CALLS 20

static int rank, nranks;
static _Atomic int calls_done;
static _Atomic bool in_collective;

static void *killer(void *arg)
{
    struct timespec pause = { 0, 200 * 1000 };

    (void)arg;
    while (atomic_load(&calls_done) < KILL_AFTER || !atomic_load(&in_collective))
        nanosleep(&pause, NULL);
    printf("rel-fault: rank %d (pid %d) sends itself SIGKILL %s collective "
           "#%d\n", rank, (int)getpid(),
           atomic_load(&in_collective) ? "inside" : "between",
           atomic_load(&calls_done) + 1);
    fflush(stdout);
    raise(SIGKILL);
    return NULL;
}

int main(int argc, char **argv)
{
    bool kill_mode = argc > 1 && strcmp(argv[1], "kill") == 0;
    int provided, *send, *recv, bad_calls = 0;
    MPIX_Zcopy_stats s0, s1;
    zt_arena_t arena;
    pthread_t thread;
    char *res;

    /* The helper thread makes no MPI call. */
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    rel_announce_job(rank);

    zt_arena_init(&arena, MPI_COMM_WORLD, 2 * COUNT * sizeof(int));
    res = arena.base;
    send = (int *)res;
    recv = send + COUNT;
    for (int i = 0; i < COUNT; i++)
        send[i] = rank + i % 1000;

    if (kill_mode && rank == 1)
        pthread_create(&thread, NULL, killer, NULL);
    s0 = zt_stats(MPI_COMM_WORLD);
    for (int k = 0; kill_mode || k < NORMAL_CALLS; k++) {
        int rc, bad = 0;

        atomic_store(&in_collective, true);
        rc = MPI_Allreduce(send, recv, COUNT, MPI_INT, MPI_SUM,
                           MPI_COMM_WORLD);
        atomic_store(&in_collective, false);
        for (int i = 0; i < COUNT && rc == MPI_SUCCESS; i += 4099)
            bad += recv[i] != nranks * (nranks - 1) / 2 + nranks * (i % 1000);
        bad_calls += rc != MPI_SUCCESS || bad != 0;
        atomic_fetch_add(&calls_done, 1);
    }
    s1 = zt_stats(MPI_COMM_WORLD);
    ZT_CHECK(bad_calls == 0, "%d of %d allreduces failed or were wrong",
             bad_calls, NORMAL_CALLS);
    ZT_CHECK(s1.zcopy_calls - s0.zcopy_calls == NORMAL_CALLS,
             "%llu of %d allreduces zero-copy (last fallback: %s)",
             (unsigned long long)(s1.zcopy_calls - s0.zcopy_calls),
             NORMAL_CALLS, s1.last_fallback_reason);
    return zt_finish();
}
