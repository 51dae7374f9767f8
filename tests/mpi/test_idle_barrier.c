/*
 * What a barrier costs a job that has never set a memory range (SPEC
 * section 4: such a job pays nothing measurable), counted in what zcopy
 * asks of the previous component rather than timed: this program drives
 * libzcopy's collective entry itself, on a communicator state made here,
 * with service collectives on a dup of the world that count the words
 * they reduce (the coll component is not loaded: it would set up the
 * world on its own).
 *
 * While a communicator's set-up is put off (coll.c, coll_idle), a barrier
 * may ask the ranks one question, whether any has set a range since, and
 * that exchange is the barrier. It used to run the whole set-up agreement
 * (2 * settings + 2 words) at every barrier instead: at np 2 that made
 * such barriers 1.45x slower than stock's; and asking at every barrier
 * still made a loop of them 0.70x as fast. So of a run of barriers only
 * the 1st, 2nd, 4th ... 64th ask, and past that only the skip's end runs
 * the agreement; the others are the previous component's barrier. A
 * barrier right after another collective that reaches libzcopy asks, so
 * it still ends the skip at once when some rank has set a range, on any
 * communicator; within a run, the next barrier that asks does.
 */
#include "testutil.h"

#include "coll/coll.h"
#include "comm/comm.h"

#include <stdlib.h>

/* The whole agreement runs at calls 1 and 2 (the first call, then the end
 * of a skip of 0 calls); the barriers that ask (one word) start the skip
 * again from their own call (coll_idle); from the 65th barrier on only the
 * skip's end runs the agreement, once in 64 calls. */
#define BARRIERS 640

static MPI_Comm service;
static unsigned long words_reduced, previous_barriers;

static int svc_allgather(const void *sbuf, void *rbuf, size_t bytes, void *ctx)
{
    (void)ctx;
    return MPI_Allgather(sbuf, (int)bytes, MPI_BYTE, rbuf, (int)bytes,
                         MPI_BYTE, service);
}

static int svc_alltoall(const void *sbuf, void *rbuf, size_t bytes, void *ctx)
{
    (void)ctx;
    return MPI_Alltoall(sbuf, (int)bytes, MPI_BYTE, rbuf, (int)bytes,
                        MPI_BYTE, service);
}

static int svc_bcast(void *buf, size_t bytes, int root, void *ctx)
{
    (void)ctx;
    return MPI_Bcast(buf, (int)bytes, MPI_BYTE, root, service);
}

static int svc_barrier(void *ctx)
{
    (void)ctx;
    previous_barriers++;
    return MPI_Barrier(service);
}

static int svc_allreduce(void *buf, size_t count, MPI_Datatype type,
                         MPI_Op op, void *ctx)
{
    (void)ctx;
    words_reduced += count;
    return MPI_Allreduce(MPI_IN_PLACE, buf, (int)count, type, op, service);
}

static int svc_reduce(const void *sbuf, void *rbuf, size_t count,
                      MPI_Datatype type, MPI_Op op, int root, void *ctx)
{
    (void)ctx;
    words_reduced += count;
    return MPI_Reduce(sbuf, rbuf, (int)count, type, op, root, service);
}

/* One MPI_Barrier as the component runs it: zcopy's, or the previous
 * component's where zcopy hands it over. */
static zcopy_status_t barrier(zcopy_comm_t *zc)
{
    const zcopy_coll_args_t a = { .type = ZCOPY_COLL_BARRIER, .root = -1 };
    zcopy_status_t st = zcopy_coll_run(zc, &a);

    if (st == ZCOPY_FALLBACK)
        zt_require(svc_barrier(NULL) == MPI_SUCCESS, "the previous barrier");
    return st;
}

int main(int argc, char **argv)
{
    const zcopy_comm_ops_t ops = { .allgather = svc_allgather,
                                   .alltoall = svc_alltoall,
                                   .bcast = svc_bcast,
                                   .barrier = svc_barrier,
                                   .allreduce = svc_allreduce,
                                   .reduce = svc_reduce };
    unsigned long exchanges = 0, exchanges_at_64 = 0, handed_at_64 = 0;
    unsigned long questions = 0, late_questions = 0;
    zcopy_status_t st = ZCOPY_SUCCESS;
    MPIX_Zcopy_stats s;
    zcopy_comm_t *zc;
    zt_arena_t arena;
    MPI_Comm other;
    int rank, size;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_dup(MPI_COMM_WORLD, &service);
    MPI_Comm_dup(MPI_COMM_WORLD, &other);
    zt_require(zcopy_comm_create(MPI_COMM_WORLD, rank, size, &ops, &zc) ==
                   ZCOPY_SUCCESS, "communicator state");

    /* Each is zcopy's exchange (SUCCESS) or the previous component's
     * barrier (FALLBACK), never both, never an error. */
    for (int call = 1; call <= BARRIERS; call++) {
        const unsigned long handed = previous_barriers;
        const unsigned long words = words_reduced;

        st = barrier(zc);
        if (!ZT_CHECK(st == ZCOPY_SUCCESS || st == ZCOPY_FALLBACK,
                      "barrier %d with no range set returned %d (%s)", call,
                      (int)st, zcopy_error_detail()))
            break;
        if (!ZT_CHECK((words_reduced > words) != (previous_barriers > handed),
                      "barrier %d: %lu words reduced and %lu previous "
                      "barriers", call, words_reduced - words,
                      previous_barriers - handed))
            break;
        exchanges += st == ZCOPY_SUCCESS;
        questions += words_reduced - words == 1;
        /* Well past the run's 64th barrier that reached the question
         * (the agreements, at calls 1, 2 and each skip's end, do not). */
        if (call > 128)
            late_questions += words_reduced - words == 1;
        if (call == 64) {
            exchanges_at_64 = exchanges;
            handed_at_64 = previous_barriers;
        }
    }
    zcopy_comm_get_stats(zc, &s);
    ZT_CHECK(s.fallback_calls == BARRIERS && s.zcopy_calls == 0,
             "%d barriers with no range set: %llu fallbacks, %llu zero-copy",
             BARRIERS, (unsigned long long)s.fallback_calls,
             (unsigned long long)s.zcopy_calls);
    ZT_CHECK(exchanges - exchanges_at_64 <= (BARRIERS - 64) / 64 + 1 &&
                 previous_barriers - handed_at_64 + exchanges -
                         exchanges_at_64 == BARRIERS - 64,
             "barriers 65-%d of a job with no range: %lu exchanges, %lu "
             "previous barriers; expected one exchange in 64 at most",
             BARRIERS, exchanges - exchanges_at_64,
             previous_barriers - handed_at_64);
    /* The question is one word, not the whole agreement; and past the
     * 64th barrier of the run nobody asks it. */
    ZT_CHECK(questions >= 3 && late_questions == 0,
             "%lu barriers asked one word (%lu of them past the 128th), "
             "expected the 1st, 2nd, 4th ... of the run", questions,
             late_questions);

    /* Every rank sets a range, on a communicator zcopy does not know:
     * nothing tells this one but its next collective. Another collective
     * first (data, declined as the component declines it), so the barrier
     * after it asks, ends the skip and runs zero-copy. */
    zt_arena_init(&arena, other, 1 << 16);
    if (!zcopy_coll_decline_idle(zc, ZCOPY_COLL_BCAST, 1, MPI_INT, 1,
                                 MPI_INT, 0)) {
        /* The skip's end: the component routes the call, which falls
         * back (an ordinary buffer). */
        const zcopy_coll_args_t bcast = { .type = ZCOPY_COLL_BCAST,
                                          .sbuf = &rank, .scount = 1,
                                          .stype = MPI_INT, .rbuf = &rank,
                                          .rcount = 1, .rtype = MPI_INT,
                                          .root = 0 };

        zt_require(zcopy_coll_run(zc, &bcast) == ZCOPY_FALLBACK,
                   "a bcast of an ordinary buffer did not fall back");
    }
    zt_require(svc_bcast(&rank, sizeof(rank), 0, NULL) == MPI_SUCCESS,
               "the previous bcast");
    st = barrier(zc);
    zcopy_comm_get_stats(zc, &s);
    ZT_CHECK(st == ZCOPY_SUCCESS && s.zcopy_calls == 1,
             "the first barrier after a range was set elsewhere: %llu "
             "zero-copy, expected 1 (last fallback: %s)",
             (unsigned long long)s.zcopy_calls, s.last_fallback_reason);

    zcopy_comm_destroy(zc);
    zt_arena_fini(&arena);
    MPI_Comm_free(&other);
    MPI_Comm_free(&service);
    return zt_finish();
}
