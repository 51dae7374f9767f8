/*
 * Collectives from several threads at once (issue 7, 6). Under
 * MPI_THREAD_MULTIPLE, each of N threads per rank (argv[1], default 2)
 * runs allreduce (small and sliced), allgather and bcast on its own
 * communicator (dups made by the main thread, as MPI requires of
 * collective creation), on its own activated block. Every 10th iteration
 * the thread deactivates its block and activates it again while the other
 * threads' collectives run, so that peers sweep and re-import concurrently
 * with collectives on other communicators; each iteration's data depends
 * on the thread, iteration and rank, so a stale import gives wrong data.
 *
 * Every result must be right and every collective zero-copy on its
 * communicator (stats). Under coll_zcopy_ucx_fetch auto nothing may go
 * through Open MPI's point-to-point engine, whatever
 * coll_zcopy_ucx_p2p_min says: its target sends inside the UCX layer's
 * lock, which another thread's pool growth may be waiting for. The process-wide state all threads share is the
 * registry, the export table and the peers, each behind its own lock;
 * each communicator's state is its own, and MPI allows one collective at a
 * time on a communicator.
 */
#define _GNU_SOURCE
#include "testutil.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define MAX_THREADS 8
#define ITERS 60
#define RECYCLE_EVERY 10
#define BIG 20000   /* ints: above the small-message threshold */
#define SMALL 16
#define GATHER 1000

static const zcopy_mem_prop_t host = { .kind = ZCOPY_MEM_HOST, .device = -1 };
static int rank, nranks, nthreads;
static size_t block_bytes;
static char *res;

typedef struct {
    int t;
    MPI_Comm comm;
    char *block;
    zcopy_mem_handle_t handle;
    unsigned long checks, failures;
    char first_failure[200];
} worker_t;

static int val(int t, int k, int r, int i) { return t * 1000003 + k * 7919 + r * 104729 + i % 1009; }

static void fail(worker_t *w, const char *fmt, int k, long at)
{
    if (w->failures++ == 0)
        snprintf(w->first_failure, sizeof(w->first_failure), fmt, w->t, k,
                 at);
}

static void check(worker_t *w, bool ok, const char *fmt, int k, long at)
{
    w->checks++;
    if (!ok)
        fail(w, fmt, k, at);
}

static void *work(void *arg)
{
    worker_t *w = arg;
    int *ar_s = (int *)w->block, *ar_r = ar_s + BIG, *bc = ar_r + BIG;
    int *ag_s = bc + BIG, *ag_r = ag_s + GATHER;

    for (int k = 0; k < ITERS; k++) {
        int count = k & 1 ? BIG : SMALL, root = k % nranks, rc;
        long bad;

        if (k % RECYCLE_EVERY == RECYCLE_EVERY - 1) {
            rc = MPIX_Comm_deactivate_memory(w->comm, w->block);
            check(w, rc == MPI_SUCCESS, "thread %d, iteration %d: "
                  "deactivate failed (%ld)", k, rc);
            rc = MPIX_Comm_activate_memory(w->comm, w->block, block_bytes, 0,
                                           w->handle, 0);
            check(w, rc == MPI_SUCCESS, "thread %d, iteration %d: "
                  "activate failed (%ld)", k, rc);
        }
        for (int i = 0; i < count; i++) {
            ar_s[i] = val(w->t, k, rank, i);
            bc[i] = rank == root ? val(w->t, k + 1, root, i) : -1;
        }
        for (int i = 0; i < GATHER; i++)
            ag_s[i] = val(w->t, k + 2, rank, i);

        rc = MPI_Allreduce(ar_s, ar_r, count, MPI_INT, MPI_SUM, w->comm);
        bad = -1;
        for (int i = 0; i < count && rc == MPI_SUCCESS && bad < 0; i++) {
            int sum = 0;
            for (int r = 0; r < nranks; r++)
                sum += val(w->t, k, r, i);
            if (ar_r[i] != sum)
                bad = i;
        }
        check(w, rc == MPI_SUCCESS && bad < 0, "thread %d, iteration %d: "
              "allreduce failed or wrong at %ld", k, bad);

        rc = MPI_Allgather(ag_s, GATHER, MPI_INT, ag_r, GATHER, MPI_INT,
                           w->comm);
        bad = -1;
        for (int i = 0; i < nranks * GATHER && rc == MPI_SUCCESS && bad < 0;
             i++)
            if (ag_r[i] != val(w->t, k + 2, i / GATHER, i % GATHER))
                bad = i;
        check(w, rc == MPI_SUCCESS && bad < 0, "thread %d, iteration %d: "
              "allgather failed or wrong at %ld", k, bad);

        rc = MPI_Bcast(bc, count, MPI_INT, root, w->comm);
        bad = -1;
        for (int i = 0; i < count && rc == MPI_SUCCESS && bad < 0; i++)
            if (bc[i] != val(w->t, k + 1, root, i))
                bad = i;
        check(w, rc == MPI_SUCCESS && bad < 0, "thread %d, iteration %d: "
              "bcast failed or wrong at %ld", k, bad);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    worker_t workers[MAX_THREADS];
    pthread_t threads[MAX_THREADS];
    size_t gran;
    int provided;
    bool fetch_auto;

    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    nthreads = argc > 1 ? atoi(argv[1]) : 2;
    fetch_auto = zt_cvar_int("coll_zcopy_ucx_fetch", 0) == 0;
    if (!ZT_CHECK(provided == MPI_THREAD_MULTIPLE,
                  "MPI_THREAD_MULTIPLE not provided (got %d)", provided) ||
        !ZT_CHECK(nthreads >= 1 && nthreads <= MAX_THREADS,
                  "1 to %d threads, not %d", MAX_THREADS, nthreads))
        return zt_finish();

    zcopy_mem_granularity(&host, &gran);
    block_bytes = ((3 * BIG + (size_t)(nranks + 1) * GATHER) * sizeof(int) +
                   gran - 1) / gran * gran;
    if (zcopy_mem_reserve((void **)&res, (size_t)nthreads * block_bytes, 0,
                          NULL, 0) ||
        MPIX_Comm_set_memory_range(MPI_COMM_WORLD, res,
                                   (size_t)nthreads * block_bytes, 0, 0)) {
        fprintf(stderr, "[rank %d] setup failed: %s\n", rank,
                zcopy_mem_last_error());
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    for (int t = 0; t < nthreads; t++) {
        worker_t *w = &workers[t];

        memset(w, 0, sizeof(*w));
        w->t = t;
        w->block = res + (size_t)t * block_bytes;
        MPI_Comm_dup(MPI_COMM_WORLD, &w->comm);
        if (zcopy_mem_create(&w->handle, block_bytes, &host, 0) ||
            zcopy_mem_map(w->block, block_bytes, 0, w->handle, 0) ||
            MPIX_Comm_activate_memory(w->comm, w->block, block_bytes, 0,
                                      w->handle, 0)) {
            fprintf(stderr, "[rank %d] block %d failed: %s\n", rank, t,
                    zcopy_mem_last_error());
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
    }

    for (int t = 0; t < nthreads; t++)
        pthread_create(&threads[t], NULL, work, &workers[t]);
    for (int t = 0; t < nthreads; t++)
        pthread_join(threads[t], NULL);

    for (int t = 0; t < nthreads; t++) {
        worker_t *w = &workers[t];
        MPIX_Zcopy_stats s = zt_stats(w->comm);

        ZT_CHECK(w->failures == 0, "thread %d: %lu of %lu checks failed, "
                 "first: %s", t, w->failures, w->checks, w->first_failure);
        ZT_CHECK(s.zcopy_calls == 3 * ITERS && s.fallback_calls == 0,
                 "thread %d: %llu of %d collectives zero-copy, %llu "
                 "fallbacks (last: %s)", t,
                 (unsigned long long)s.zcopy_calls, 3 * ITERS,
                 (unsigned long long)s.fallback_calls,
                 s.last_fallback_reason);
        ZT_CHECK(!fetch_auto || s.p2p_bytes == 0, "thread %d: %llu bytes "
                 "read through the point-to-point engine under auto at "
                 "MPI_THREAD_MULTIPLE", t, (unsigned long long)s.p2p_bytes);
        MPIX_Comm_deactivate_memory(w->comm, w->block);
        zcopy_mem_unmap(w->block);
        zcopy_mem_free(w->handle);
        MPI_Comm_free(&w->comm);
    }
    MPIX_Comm_unset_memory_range(MPI_COMM_WORLD, res);
    zcopy_mem_release(res);
    return zt_finish();
}
