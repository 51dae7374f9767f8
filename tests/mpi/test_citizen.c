/*
 * Legal MPI programs that must behave exactly as under stock Open MPI with
 * coll/zcopy loaded (issue 11): one case per run, named by the argument.
 *
 *   progress   MPI's progress rule: a rank waiting inside a zcopy
 *              collective must still complete the point-to-point,
 *              nonblocking and one-sided operations its peers depend on
 *              (synchronous and rendezvous sends matched by a pre-posted
 *              receive, the interleaved Ibarrier example of the MPI
 *              standard, passive-target RMA), on malloc and on activated
 *              buffers, with the zero-copy path proven on the latter
 *   datatypes  derived types whose memory order differs from their
 *              signature order (permuted, duplicated, holed typemaps):
 *              never taken for contiguous, results as MPI defines them
 *   intercomm  intercommunicators built, merged and used (Open MPI makes
 *              datatypes of its own there; zcopy must not query them
 *              through the public, error-raising interface)
 *   reductions (type, op) pairs Open MPI 4.1 reduces beyond the standard's
 *              table (MPI_CHAR, the OSU benchmarks' default, and MPI_BYTE
 *              arithmetic), Fortran types through Open MPI's own op, and
 *              unsigned bytes above 127: zero-copy on activated buffers,
 *              results as MPI defines them
 *   settings   the info key mpix_zcopy on one rank only, and (run as
 *              settings-mca PARAM under two MCA values of PARAM, by
 *              default coll_zcopy_small_msg): no hang, correct results, a
 *              fallback naming the setting
 *   release    a peer's freed block is let go of by a process that, after
 *              its last blocking collective, only makes point-to-point and
 *              nonblocking calls (Open MPI's progress loop sweeps too)
 *   mapfail    a rank that cannot map a peer's memory (address space
 *              limit): the out-of-place call agreed zero-copy is still
 *              right, run by the fallback on every rank, and zero-copy
 *              resumes once the limit is lifted
 *   mapfail-inplace  the same for calls in place, where other ranks may
 *              already have overwritten their inputs: allreduce, reduce
 *              (small and large, the failing rank as root and not),
 *              reduce_scatter_block, allgather, alltoall and alltoallv,
 *              each on fresh memory; right results, a fallback counted by
 *              the ranks concerned (alltoall(v): the failed rank's pairs),
 *              then zero-copy; an alltoall whose failed rank cannot copy
 *              its blocks either is an MPI error on its pairs, no hang
 *   mapfail-rooted  bcast, scatter(v), gather(v) whose ranks each move
 *              their block with the root: a rank that cannot map the root
 *              and the root count a fallback, the others zero-copy, right
 *              results
 *   setupretry a communicator whose set-up ran out of memory on one rank
 *              (address space limit) falls back, and goes zero-copy once
 *              memory is there again, without any call of the program
 *   stats      MPIX_Zcopy_get_stats never writes past a caller's struct
 *              that predates later fields
 *   replan     the same call again after what changes its path: its
 *              buffers deactivated on one rank, then activated again (a
 *              plan kept from an earlier call must not be reused), a
 *              datatype freed and replaced by a non-contiguous one, which
 *              may come back at the freed handle's address, an allreduce
 *              whose op becomes a non-commutative one, a gather whose
 *              root moves
 *
 *   sleep      (run with coll_zcopy_yield=1 coll_zcopy_sleep=1) ranks
 *              that wait inside a zero-copy collective for a late rank
 *              give their core away:
 *              they sleep until it arrives, using a small part of the wait
 *              in CPU time, where yielding would spin through all of it;
 *              results right, every call zero-copy
 *
 *   idle       a job that does not use zcopy yet: collectives on malloc'd
 *              buffers, on the world, a split and a dup, reach the
 *              component and fall back without it loading the machine's
 *              topology or setting the communicators up; once the job
 *              sets a range, each communicator engages: at once where the
 *              range was set or after a barrier, within its skip else
 *
 * A hang is a failure: every case arms an alarm well inside the CTest
 * timeout and reports which step it was in.
 */
#define _POSIX_C_SOURCE 200809L /* nanosleep */
#include "testutil.h"

#include "../common/proc.h"

#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#define KIB 1024u
#define MIB (1024u * 1024u)
#define CASE_SECONDS 60

static int rank, size;
static const char *volatile step = "start";

static void on_alarm(int sig)
{
    char msg[160];
    int len = snprintf(msg, sizeof(msg), "[rank %d] HANG: no progress in %d s "
                       "during '%s'\n", rank, CASE_SECONDS, step);
    (void)sig;
    if (write(STDERR_FILENO, msg, (size_t)len) < 0)
        _exit(3);
    _exit(3);
}

static void arm(const char *what)
{
    step = what;
    alarm(CASE_SECONDS);
}

/* --- buffers ------------------------------------------------------------ */

typedef struct {
    bool activated;
    zt_arena_t arena;
    size_t used;
} pool_t;

static void pool_init(pool_t *p, bool activated, size_t bytes)
{
    memset(p, 0, sizeof(*p));
    p->activated = activated;
    if (activated)
        zt_arena_init(&p->arena, MPI_COMM_WORLD, bytes);
}

static void *pool_alloc(pool_t *p, size_t bytes)
{
    void *buf;

    if (p->activated)
        return zt_arena_alloc(&p->arena, &p->used, bytes);
    buf = malloc(bytes);
    zt_require(buf != NULL, "malloc");
    return buf;
}

static void pool_free(pool_t *p, void *buf)
{
    if (!p->activated)
        free(buf);
}

static void pool_fini(pool_t *p)
{
    if (p->activated)
        zt_arena_fini(&p->arena);
}

/* Checks that the collectives between two stats snapshots took the path the
 * buffers promise: zero-copy on activated memory, fallback on malloc. */
static void check_path(const char *what, bool activated,
                       const MPIX_Zcopy_stats *before,
                       const MPIX_Zcopy_stats *after, uint64_t calls)
{
    const uint64_t zc = after->zcopy_calls - before->zcopy_calls;
    const uint64_t fb = after->fallback_calls - before->fallback_calls;

    if (activated)
        ZT_CHECK(zc == calls && fb == 0, "%s: %llu zero-copy, %llu fallbacks "
                 "(last: %s), expected %llu zero-copy", what,
                 (unsigned long long)zc, (unsigned long long)fb,
                 after->last_fallback_reason, (unsigned long long)calls);
    else
        ZT_CHECK(zc == 0 && fb == calls, "%s: %llu zero-copy, %llu "
                 "fallbacks, expected %llu fallbacks", what,
                 (unsigned long long)zc, (unsigned long long)fb,
                 (unsigned long long)calls);
}

/* --- progress ------------------------------------------------------------ */

typedef enum { COLL_BARRIER, COLL_ALLREDUCE_8B, COLL_ALLREDUCE_64K } coll_t;
static const char *const coll_names[] = { "barrier", "allreduce 8 B",
                                          "allreduce 64 KiB" };

/* Rank 0 pre-posts a receive and enters the collective; rank 1 sends
 * (synchronously, or a rendezvous-sized message) before entering it. Rank 1
 * cannot leave its send until rank 0's process progresses, and rank 0 cannot
 * leave the collective before rank 1 arrives: only MPI's progress rule
 * inside rank 0's wait lets both finish. */
static void progress_send_then_coll(pool_t *pool, coll_t coll, bool sync_send,
                                    size_t msg_bytes)
{
    const size_t count = coll == COLL_ALLREDUCE_64K ? 64 * KIB / 8 : 1;
    uint8_t *msg = malloc(msg_bytes);
    double *in = pool_alloc(pool, count * sizeof(double));
    double *out = pool_alloc(pool, count * sizeof(double));
    MPIX_Zcopy_stats before, after;
    MPI_Request req = MPI_REQUEST_NULL;
    char what[96];

    zt_require(msg != NULL, "malloc");
    snprintf(what, sizeof(what), "%s %s of %zu B, then %s",
             pool->activated ? "activated:" : "malloc:",
             sync_send ? "MPI_Ssend" : "MPI_Send", msg_bytes, coll_names[coll]);
    for (size_t i = 0; i < count; i++)
        in[i] = rank + 1 + (double)i;
    memset(msg, rank == 1 ? 0x5a : 0, msg_bytes);
    MPI_Barrier(MPI_COMM_WORLD);
    before = zt_stats(MPI_COMM_WORLD);
    arm(what);
    if (rank == 0)
        MPI_Irecv(msg, (int)msg_bytes, MPI_BYTE, 1, 7, MPI_COMM_WORLD, &req);
    if (rank == 1) {
        if (sync_send)
            MPI_Ssend(msg, (int)msg_bytes, MPI_BYTE, 0, 7, MPI_COMM_WORLD);
        else
            MPI_Send(msg, (int)msg_bytes, MPI_BYTE, 0, 7, MPI_COMM_WORLD);
    }
    if (coll == COLL_BARRIER)
        MPI_Barrier(MPI_COMM_WORLD);
    else
        MPI_Allreduce(in, out, (int)count, MPI_DOUBLE, MPI_SUM,
                      MPI_COMM_WORLD);
    MPI_Wait(&req, MPI_STATUS_IGNORE);
    alarm(0);
    after = zt_stats(MPI_COMM_WORLD);
    /* A barrier moves no data, but the malloc round runs first, in a job
     * that has set no memory range yet: nothing is set up, so it falls
     * back too (coll.c, coll_idle). */
    check_path(what, pool->activated, &before, &after, 1);
    if (rank == 0) {
        size_t bad = 0;
        for (size_t i = 0; i < msg_bytes; i++)
            bad += msg[i] != 0x5a;
        ZT_CHECK(bad == 0, "%s: %zu bytes of the message wrong", what, bad);
    }
    if (coll != COLL_BARRIER) {
        const double ranks_sum = (double)size * (size + 1) / 2;
        size_t bad = 0;
        for (size_t i = 0; i < count; i++)
            bad += out[i] != ranks_sum + (double)size * (double)i;
        ZT_CHECK(bad == 0, "%s: %zu wrong sums", what, bad);
    }
    pool_free(pool, in);
    pool_free(pool, out);
    free(msg);
}

/* The MPI standard's example of collectives on two communicators: rank 0
 * waits for an Ibarrier on A before a barrier on B, every other rank enters
 * the barrier on B first and completes the Ibarrier afterwards. Rank 0's
 * Ibarrier can only complete while the others sit in the barrier on B. */
static void progress_interleaved_ibarrier(bool activated)
{
    MPI_Comm a, b;
    MPI_Request req;
    MPIX_Zcopy_stats before, after;

    MPI_Comm_dup(MPI_COMM_WORLD, &a);
    MPI_Comm_dup(MPI_COMM_WORLD, &b);
    MPI_Barrier(b); /* sets b up before the case proper */
    before = zt_stats(b);
    arm("Ibarrier on A, Barrier on B (MPI standard example)");
    MPI_Ibarrier(a, &req);
    if (rank == 0) {
        MPI_Wait(&req, MPI_STATUS_IGNORE);
        MPI_Barrier(b);
    } else {
        MPI_Barrier(b);
        MPI_Wait(&req, MPI_STATUS_IGNORE);
    }
    alarm(0);
    after = zt_stats(b);
    /* A barrier moves no data, but in the malloc round the job has set no
     * memory range yet: B is not set up and falls back (coll.c,
     * coll_idle); the activated round runs zcopy's own barrier. */
    if (activated)
        ZT_CHECK(after.zcopy_calls - before.zcopy_calls == 1,
                 "activated: the barrier on B did not run zero-copy (%s)",
                 after.last_fallback_reason);
    else
        ZT_CHECK(after.fallback_calls - before.fallback_calls == 1 &&
                     strstr(after.last_fallback_reason, "memory range"),
                 "malloc: the barrier on B: %llu fallbacks (%s), expected "
                 "one for \"no rank had set a memory range\"",
                 (unsigned long long)(after.fallback_calls -
                                      before.fallback_calls),
                 after.last_fallback_reason);
    MPI_Comm_free(&a);
    MPI_Comm_free(&b);
}

/* Passive-target RMA: rank 1 locks rank 0's window, puts and unlocks while
 * rank 0 is already inside a collective on another communicator. */
static void progress_passive_rma(pool_t *pool)
{
    const int n = 1024;
    int *base = NULL, *src = malloc((size_t)n * sizeof(int));
    double *in = pool_alloc(pool, 64), *out = pool_alloc(pool, 64);
    MPI_Comm other;
    MPI_Win win;
    int bad = 0;

    zt_require(src != NULL, "malloc");
    MPI_Comm_dup(MPI_COMM_WORLD, &other);
    MPI_Win_allocate((MPI_Aint)n * (MPI_Aint)sizeof(int), sizeof(int),
                     MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win);
    for (int i = 0; i < n; i++) {
        base[i] = -1;
        src[i] = i * 3 + 1;
    }
    in[0] = 1.0;
    MPI_Barrier(MPI_COMM_WORLD);
    arm("passive-target put while the target sits in an allreduce");
    if (rank == 1) {
        MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 0, 0, win);
        MPI_Put(src, n, MPI_INT, 0, 0, n, MPI_INT, win);
        MPI_Win_unlock(0, win);
    }
    MPI_Allreduce(in, out, 1, MPI_DOUBLE, MPI_SUM, other);
    alarm(0);
    ZT_CHECK(out[0] == (double)size, "rma: allreduce gave %g", out[0]);
    MPI_Win_lock(MPI_LOCK_SHARED, rank, 0, win);
    for (int i = 0; rank == 0 && i < n; i++)
        bad += base[i] != i * 3 + 1;
    MPI_Win_unlock(rank, win);
    ZT_CHECK(bad == 0, "rma: %d elements of the put missing", bad);
    MPI_Win_free(&win);
    MPI_Comm_free(&other);
    pool_free(pool, in);
    pool_free(pool, out);
    free(src);
}

static void run_progress(void)
{
    for (int activated = 0; activated < 2; activated++) {
        pool_t pool;

        pool_init(&pool, activated, 4 * MIB);
        for (coll_t c = COLL_BARRIER; c <= COLL_ALLREDUCE_64K; c++) {
            progress_send_then_coll(&pool, c, true, 8);
            progress_send_then_coll(&pool, c, false, MIB);
        }
        progress_interleaved_ibarrier(activated);
        progress_passive_rma(&pool);
        pool_fini(&pool);
    }
}

/* --- datatypes ----------------------------------------------------------- */

/* Types whose lb is 0 and whose extent and true extent equal their size,
 * yet are not one block in signature order. */
static MPI_Datatype make_type(const char *which)
{
    static const int ones[3] = { 1, 1, 1 };
    MPI_Datatype t;

    if (strcmp(which, "permuted") == 0) { /* ints 1, 0 */
        const int displs[2] = { 1, 0 };
        MPI_Type_indexed(2, ones, displs, MPI_INT, &t);
    } else if (strcmp(which, "duplicated") == 0) { /* ints 0, 0 */
        const int displs[2] = { 0, 0 };
        MPI_Type_indexed(2, ones, displs, MPI_INT, &t);
        MPI_Datatype r;
        MPI_Type_create_resized(t, 0, 2 * sizeof(int), &r);
        MPI_Type_free(&t);
        t = r;
    } else { /* holed: ints 0, 2, 2 (size 12, extent 12, int 1 unused) */
        const int displs[3] = { 0, 2, 2 };
        MPI_Type_indexed(3, ones, displs, MPI_INT, &t);
    }
    MPI_Type_commit(&t);
    return t;
}

/* The ints that one element of @which sends, in signature order. */
static int type_ints(const char *which, int *order)
{
    if (strcmp(which, "permuted") == 0) {
        order[0] = 1, order[1] = 0;
        return 2;
    }
    if (strcmp(which, "duplicated") == 0) {
        order[0] = 0, order[1] = 0;
        return 2;
    }
    order[0] = 0, order[1] = 2, order[2] = 2;
    return 3;
}

static int type_extent_ints(const char *which)
{
    return strcmp(which, "holed") == 0 ? 3 : 2;
}

/* bcast: the root sends @count elements of the derived type, every other
 * rank receives the same signature as plain MPI_INT. */
static void datatype_bcast(pool_t *pool, const char *which, int count,
                           int root)
{
    MPI_Datatype t = make_type(which);
    int order[3];
    const int per = type_ints(which, order), ext = type_extent_ints(which);
    const int nints = count * (rank == root ? ext : per);
    int *buf = pool_alloc(pool, (size_t)nints * sizeof(int) + 64);
    long bad = 0;
    MPIX_Zcopy_stats before, after;
    char what[80];

    snprintf(what, sizeof(what), "bcast %s x%d root %d (%s)", which, count,
             root, pool->activated ? "activated" : "malloc");
    for (int i = 0; i < nints; i++)
        buf[i] = rank == root ? 1000 + i : -1;
    before = zt_stats(MPI_COMM_WORLD);
    arm(what);
    if (rank == root)
        MPI_Bcast(buf, count, t, root, MPI_COMM_WORLD);
    else
        MPI_Bcast(buf, count * per, MPI_INT, root, MPI_COMM_WORLD);
    alarm(0);
    after = zt_stats(MPI_COMM_WORLD);
    for (int e = 0; rank != root && e < count; e++)
        for (int k = 0; k < per; k++)
            bad += buf[e * per + k] != 1000 + e * ext + order[k];
    ZT_CHECK(bad == 0, "%s: %ld wrong elements", what, bad);
    ZT_CHECK(after.zcopy_calls == before.zcopy_calls,
             "%s: took a zero-copy path", what);
    MPI_Type_free(&t);
    pool_free(pool, buf);
}

/* allgather: rank 0 sends the derived type, the others MPI_INT; every rank
 * receives MPI_INT. */
static void datatype_allgather(pool_t *pool, const char *which, int count)
{
    MPI_Datatype t = make_type(which);
    int order[3];
    const int per = type_ints(which, order), ext = type_extent_ints(which);
    const int sints = count * (rank == 0 ? ext : per), rints = count * per;
    int *sbuf = pool_alloc(pool, (size_t)sints * sizeof(int) + 64);
    int *rbuf = pool_alloc(pool, (size_t)rints * (size_t)size * sizeof(int));
    long bad = 0;
    char what[80];

    snprintf(what, sizeof(what), "allgather %s x%d (%s)", which, count,
             pool->activated ? "activated" : "malloc");
    for (int i = 0; i < sints; i++)
        sbuf[i] = rank * 100000 + i;
    arm(what);
    if (rank == 0)
        MPI_Allgather(sbuf, count, t, rbuf, rints, MPI_INT, MPI_COMM_WORLD);
    else
        MPI_Allgather(sbuf, rints, MPI_INT, rbuf, rints, MPI_INT,
                      MPI_COMM_WORLD);
    alarm(0);
    for (int r = 0; r < size; r++)
        for (int e = 0; e < count; e++)
            for (int k = 0; k < per; k++) {
                const int src = r == 0 ? e * ext + order[k] : e * per + k;
                bad += rbuf[r * rints + e * per + k] != r * 100000 + src;
            }
    ZT_CHECK(bad == 0, "%s: %ld wrong elements", what, bad);
    MPI_Type_free(&t);
    pool_free(pool, sbuf);
    pool_free(pool, rbuf);
}

/* Derived types that ARE one block in signature order (a contiguous run,
 * a dup, a struct of two adjacent ints, a vector of stride 1) go zero-copy
 * on activated buffers; a strided vector falls back. Results either way. */
static void datatype_constructors(pool_t *pool)
{
    static const int one[2] = { 1, 1 };
    const MPI_Aint adjacent[2] = { 0, sizeof(int) };
    const MPI_Datatype ints[2] = { MPI_INT, MPI_INT };
    struct { const char *name; MPI_Datatype t; int ints; bool contiguous; } c[5];
    const int count = 300;

    c[0].name = "contiguous(4)";
    MPI_Type_contiguous(4, MPI_INT, &c[0].t);
    c[0].ints = 4, c[0].contiguous = true;
    c[1].name = "dup";
    MPI_Type_dup(MPI_INT, &c[1].t);
    c[1].ints = 1, c[1].contiguous = true;
    c[2].name = "struct of adjacent ints";
    MPI_Type_create_struct(2, one, adjacent, ints, &c[2].t);
    c[2].ints = 2, c[2].contiguous = true;
    c[3].name = "vector stride 1";
    MPI_Type_vector(3, 1, 1, MPI_INT, &c[3].t);
    c[3].ints = 3, c[3].contiguous = true;
    c[4].name = "vector stride 2";
    MPI_Type_vector(2, 1, 2, MPI_INT, &c[4].t);
    c[4].ints = 2, c[4].contiguous = false;
    for (int k = 0; k < 5; k++) {
        /* Elements of the strided vector span 3 ints of which it sends 2. */
        const int span = k == 4 ? 3 : c[k].ints;
        int *buf = pool_alloc(pool, (size_t)(count * span + 4) * sizeof(int));
        MPIX_Zcopy_stats before, after;
        long bad = 0;

        MPI_Type_commit(&c[k].t);
        for (int i = 0; i < count * span + 4; i++)
            buf[i] = rank == 0 ? 7 * i + 1 : -1;
        before = zt_stats(MPI_COMM_WORLD);
        arm(c[k].name);
        MPI_Bcast(buf, count, c[k].t, 0, MPI_COMM_WORLD);
        alarm(0);
        after = zt_stats(MPI_COMM_WORLD);
        for (int e = 0; rank != 0 && e < count; e++)
            for (int j = 0; j < c[k].ints; j++) {
                const int i = e * span + (k == 4 ? 2 * j : j);
                bad += buf[i] != 7 * i + 1;
            }
        ZT_CHECK(bad == 0, "bcast %s: %ld wrong ints", c[k].name, bad);
        ZT_CHECK((after.zcopy_calls - before.zcopy_calls == 1) ==
                     (pool->activated && c[k].contiguous),
                 "bcast %s (%s): %s expected", c[k].name,
                 pool->activated ? "activated" : "malloc",
                 pool->activated && c[k].contiguous ? "zero-copy"
                                                    : "a fallback");
        MPI_Type_free(&c[k].t);
        pool_free(pool, buf);
    }
}

static void run_datatypes(void)
{
    static const char *const kinds[] = { "permuted", "duplicated", "holed" };
    static const int counts[] = { 1, 4, 1000 };

    for (int activated = 0; activated < 2; activated++) {
        pool_t pool;

        pool_init(&pool, activated, 4 * MIB);
        for (int k = 0; k < 3; k++)
            for (int c = 0; c < 3; c++) {
                pool.used = 0;
                datatype_bcast(&pool, kinds[k], counts[c], size - 1);
                datatype_bcast(&pool, kinds[k], counts[c], 0);
                if (strcmp(kinds[k], "permuted") == 0 ||
                    strcmp(kinds[k], "holed") == 0)
                    datatype_allgather(&pool, kinds[k], counts[c]);
            }
        pool.used = 0;
        datatype_constructors(&pool);
        pool_fini(&pool);
    }
}

/* --- intercommunicators -------------------------------------------------- */

static void run_intercomm(void)
{
    MPI_Comm half, inter, merged;
    const int color = rank % 2;
    int mrank, msize, sum = 0, value;
    double d[4] = { 0 };

    arm("intercomm create and merge");
    MPI_Comm_split(MPI_COMM_WORLD, color, rank, &half);
    MPI_Intercomm_create(half, 0, MPI_COMM_WORLD, 1 - color, 42, &inter);
    /* Collectives on the intercommunicator itself: coll/inter, which builds
     * datatypes of its own and calls intra collectives under them. */
    value = rank;
    MPI_Allreduce(&value, &sum, 1, MPI_INT, MPI_SUM, inter);
    {
        int remote = 0, expect = 0;
        MPI_Comm_remote_size(inter, &remote);
        for (int r = 0; r < size; r++)
            expect += r % 2 != color ? r : 0;
        ZT_CHECK(sum == expect && remote > 0,
                 "inter allreduce: %d, expected %d", sum, expect);
    }
    {
        int *all = calloc((size_t)size, sizeof(int)), remote;
        MPI_Comm_remote_size(inter, &remote);
        MPI_Allgather(&value, 1, MPI_INT, all, 1, MPI_INT, inter);
        for (int i = 0, r = 1 - color; i < remote; i++, r += 2)
            ZT_CHECK(all[i] == r, "inter allgather[%d] = %d", i, all[i]);
        free(all);
    }
    MPI_Intercomm_merge(inter, color, &merged);
    MPI_Comm_rank(merged, &mrank);
    MPI_Comm_size(merged, &msize);
    for (int i = 0; i < 4; i++)
        d[i] = mrank + i;
    MPI_Allreduce(MPI_IN_PLACE, d, 4, MPI_DOUBLE, MPI_MAX, merged);
    for (int i = 0; i < 4; i++)
        ZT_CHECK(d[i] == msize - 1 + i, "merged allreduce[%d] = %g", i, d[i]);
    value = mrank == 0 ? 1234 : 0;
    MPI_Bcast(&value, 1, MPI_INT, 0, merged);
    ZT_CHECK(value == 1234, "merged bcast gave %d", value);
    MPI_Barrier(merged);
    alarm(0);
    MPI_Comm_free(&merged);
    MPI_Comm_free(&inter);
    MPI_Comm_free(&half);
}

/* --- reductions ---------------------------------------------------------- */

/* Rank r contributes value(r, i); the result must be fold(value(0..n-1, i)). */
static int byte_value(int r, size_t i)
{
    return (int)((r * 37 + (int)(i % 251) * 11) % 256);
}

static void reduce_bytes(pool_t *pool, MPI_Datatype type, MPI_Op op,
                         const char *what, size_t count)
{
    uint8_t *in = pool_alloc(pool, count), *out = pool_alloc(pool, count);
    MPIX_Zcopy_stats before, after;
    size_t bad = 0;

    for (size_t i = 0; i < count; i++)
        in[i] = (uint8_t)byte_value(rank, i);
    before = zt_stats(MPI_COMM_WORLD);
    arm(what);
    MPI_Allreduce(in, out, (int)count, type, op, MPI_COMM_WORLD);
    alarm(0);
    after = zt_stats(MPI_COMM_WORLD);
    check_path(what, true, &before, &after, 1);
    for (size_t i = 0; i < count; i++) {
        int acc = byte_value(0, i);
        for (int r = 1; r < size; r++) {
            const int v = byte_value(r, i);
            if (op == MPI_SUM)
                acc = (acc + v) & 0xff;
            else if (type == MPI_CHAR) /* signed max */
                acc = (int8_t)v > (int8_t)acc ? v : acc;
            else
                acc = v > acc ? v : acc;
        }
        bad += out[i] != (uint8_t)acc;
    }
    ZT_CHECK(bad == 0, "%s: %zu wrong of %zu", what, bad, count);
}

static void reduce_fortran_integer(pool_t *pool, size_t count)
{
    int *in = pool_alloc(pool, count * sizeof(int));
    int *out = pool_alloc(pool, count * sizeof(int));
    MPIX_Zcopy_stats before, after;
    size_t bad = 0;

    for (size_t i = 0; i < count; i++)
        in[i] = rank * 1000 + (int)i;
    before = zt_stats(MPI_COMM_WORLD);
    arm("allreduce MPI_INTEGER sum");
    MPI_Allreduce(in, out, (int)count, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD);
    alarm(0);
    after = zt_stats(MPI_COMM_WORLD);
    check_path("allreduce MPI_INTEGER sum", true, &before, &after, 1);
    for (size_t i = 0; i < count; i++)
        bad += out[i] != 1000 * size * (size - 1) / 2 + size * (int)i;
    ZT_CHECK(bad == 0, "MPI_INTEGER sum: %zu wrong of %zu", bad, count);
}

static void run_reductions(void)
{
    static const size_t counts[] = { 5, 4096, 1 << 20 };
    pool_t pool;

    pool_init(&pool, true, 16 * MIB);
    for (int c = 0; c < 3; c++) {
        char what[64];
        pool.used = 0;
        snprintf(what, sizeof(what), "allreduce MPI_CHAR sum x%zu", counts[c]);
        reduce_bytes(&pool, MPI_CHAR, MPI_SUM, what, counts[c]);
        snprintf(what, sizeof(what), "allreduce MPI_CHAR max x%zu", counts[c]);
        reduce_bytes(&pool, MPI_CHAR, MPI_MAX, what, counts[c]);
        snprintf(what, sizeof(what), "allreduce MPI_BYTE sum x%zu", counts[c]);
        reduce_bytes(&pool, MPI_BYTE, MPI_SUM, what, counts[c]);
        snprintf(what, sizeof(what), "allreduce MPI_UNSIGNED_CHAR max x%zu",
                 counts[c]);
        reduce_bytes(&pool, MPI_UNSIGNED_CHAR, MPI_MAX, what, counts[c]);
        reduce_fortran_integer(&pool, counts[c]);
    }
    pool_fini(&pool);
}

/* --- settings that differ between ranks ---------------------------------- */

static void allreduce_expect_fallback(MPI_Comm comm, pool_t *pool,
                                      const char *key)
{
    double *in = pool_alloc(pool, 64 * sizeof(double));
    double *out = pool_alloc(pool, 64 * sizeof(double));
    MPIX_Zcopy_stats s;
    int n;

    MPI_Comm_size(comm, &n);
    for (int i = 0; i < 64; i++)
        in[i] = i;
    arm(key);
    for (int k = 0; k < 3; k++)
        MPI_Allreduce(in, out, 64, MPI_DOUBLE, MPI_SUM, comm);
    MPI_Barrier(comm);
    alarm(0);
    for (int i = 0; i < 64; i++)
        if (!ZT_CHECK(out[i] == (double)n * i, "%s: out[%d] = %g", key, i,
                      out[i]))
            break;
    s = zt_stats(comm);
    ZT_CHECK(s.zcopy_calls == 0 && s.fallback_calls == 4 &&
             strstr(s.last_fallback_reason, key) != NULL,
             "%s: %llu zero-copy, %llu fallbacks, reason \"%s\"", key,
             (unsigned long long)s.zcopy_calls,
             (unsigned long long)s.fallback_calls, s.last_fallback_reason);
}

/* The parameter that differs between ranks in settings-mca. */
static const char *mca_setting = "coll_zcopy_small_msg";

static void run_settings(bool mca)
{
    pool_t pool;
    MPI_Comm comm;
    MPI_Info info;

    pool_init(&pool, true, MIB);
    if (mca) {
        MPI_Comm_dup(MPI_COMM_WORLD, &comm);
        allreduce_expect_fallback(comm, &pool, mca_setting);
    } else {
        MPI_Info_create(&info);
        if (rank == 0)
            MPI_Info_set(info, "mpix_zcopy", "false");
        MPI_Comm_dup_with_info(MPI_COMM_WORLD, info, &comm);
        MPI_Info_free(&info);
        allreduce_expect_fallback(comm, &pool, "mpix_zcopy");
    }
    MPI_Comm_free(&comm);
    pool_fini(&pool);
}

/* --- release without blocking collectives -------------------------------- */

#define DEVICE_MEMORY "/memfd:zcopy (deleted)"

static void run_release(void)
{
    zt_arena_t arena;
    size_t used = 0;
    double *in, *out;
    int before, after = -1, token = 0;
    double start;

    zt_arena_init(&arena, MPI_COMM_WORLD, MIB);
    in = zt_arena_alloc(&arena, &used, 4096 * sizeof(double));
    out = zt_arena_alloc(&arena, &used, 4096 * sizeof(double));
    for (int i = 0; i < 4096; i++)
        in[i] = i;
    /* Zero-copy: every rank maps every peer's block. */
    MPI_Allreduce(in, out, 4096, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    ZT_CHECK(zt_stats(MPI_COMM_WORLD).zcopy_calls >= 1, "allreduce not "
             "zero-copy: %s", zt_stats(MPI_COMM_WORLD).last_fallback_reason);
    before = proc_count_maps(DEVICE_MEMORY);
    MPI_Barrier(MPI_COMM_WORLD); /* the last blocking collective */
    arm("release of a freed peer block from the progress loop");
    if (rank == 1) {
        /* The token first: the block goes while rank 0 is past its
         * receive, whose own turns of the progress loop (ob1's) would
         * otherwise let it go there. */
        MPI_Send(&token, 1, MPI_INT, 0, 11, MPI_COMM_WORLD);
        zt_arena_fini(&arena);
    } else if (rank == 0) {
        MPI_Recv(&token, 1, MPI_INT, 1, 11, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        /* Only nonblocking point-to-point from here on, for up to 10 s: a
         * probe that finds nothing (nothing is ever sent to
         * MPI_COMM_SELF), which turns Open MPI's progress loop (ob1 at
         * every probe, pml ucx at one in pml_ucx_progress_iterations).
         * A test of a request complete at once does not: made of
         * MPI_Ibarrier on MPI_COMM_SELF and MPI_Test, as it was, this
         * loop kept rank 1's block mapped for the 10 s in 5 of 6 runs,
         * under either PML. */
        start = MPI_Wtime();
        do {
            int found;

            MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_SELF, &found,
                       MPI_STATUS_IGNORE);
            after = proc_count_maps(DEVICE_MEMORY);
        } while (after >= before && MPI_Wtime() - start < 10);
        ZT_CHECK(after == before - 1, "rank 1's freed block still mapped "
                 "here: %d device-memory mappings, %d before", after, before);
    }
    alarm(0);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank != 1)
        zt_arena_fini(&arena);
}

/* --- a peer's memory that cannot be mapped ------------------------------- */

/* Where @on, leaves this process @room bytes of address space beyond what
 * it uses, so that its next mapping of a peer's range fails; returns the
 * limit as_restore() puts back. */
static struct rlimit as_squeeze(bool on, size_t room)
{
    struct rlimit old, tight;

    zt_require(getrlimit(RLIMIT_AS, &old) == 0, "getrlimit");
    tight = old;
    tight.rlim_cur = proc_vm_size() + room;
    if (on)
        zt_require(setrlimit(RLIMIT_AS, &tight) == 0, "setrlimit");
    return old;
}

static void as_restore(bool on, const struct rlimit *old)
{
    if (on)
        zt_require(setrlimit(RLIMIT_AS, old) == 0, "setrlimit back");
}

static void mapfail_allreduce(double *in, double *out, size_t count,
                              bool expect_zcopy, const char *what)
{
    MPIX_Zcopy_stats before, after;
    size_t bad = 0;

    for (size_t i = 0; i < count; i++) {
        in[i] = rank + (double)i;
        out[i] = -1;
    }
    before = zt_stats(MPI_COMM_WORLD);
    arm(what);
    MPI_Allreduce(in, out, (int)count, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    alarm(0);
    after = zt_stats(MPI_COMM_WORLD);
    for (size_t i = 0; i < count; i++)
        bad += out[i] != (double)size * (size - 1) / 2 + (double)size * i;
    ZT_CHECK(bad == 0, "%s: %zu wrong sums", what, bad);
    if (expect_zcopy)
        ZT_CHECK(after.zcopy_calls == before.zcopy_calls + 1, "%s: not "
                 "zero-copy (%s)", what, after.last_fallback_reason);
    else
        ZT_CHECK(after.fallback_calls == before.fallback_calls + 1 &&
                 strstr(after.last_fallback_reason, "could not be mapped"),
                 "%s: %llu fallbacks, reason \"%s\"", what,
                 (unsigned long long)(after.fallback_calls -
                                      before.fallback_calls),
                 after.last_fallback_reason);
}

static void run_mapfail(void)
{
    const size_t count = 512; /* 4 KiB: mapped, not inline */
    struct rlimit old;
    zt_arena_t arena;
    size_t used = 0;
    double *in, *out;

    zt_arena_init(&arena, MPI_COMM_WORLD, 64 * MIB);
    in = zt_arena_alloc(&arena, &used, count * sizeof(double));
    out = zt_arena_alloc(&arena, &used, count * sizeof(double));
    /* Rank 0 has mapped no peer yet: its first import needs a mirror of
     * each peer's 64 MiB range, which the limit leaves no room for. */
    old = as_squeeze(rank == 0, 16 * MIB);
    mapfail_allreduce(in, out, count, false, "allreduce, rank 0 out of "
                      "address space");
    as_restore(rank == 0, &old);
    mapfail_allreduce(in, out, count, true, "allreduce, limit lifted");
    MPI_Barrier(MPI_COMM_WORLD);
    zt_arena_fini(&arena);
}

/* One in-place call of @coll on @count doubles per block, on memory no
 * rank has mapped yet, first with the ranks in @victims (a bit per rank)
 * out of address space (a counted fallback, right results), then without
 * (zero-copy, right results). */
typedef enum {
    IP_ALLREDUCE, IP_REDUCE, IP_REDUCE_SCATTER, IP_ALLGATHER, IP_ALLTOALL
} ip_coll_t;

static double ip_input(int r, int block, size_t i)
{
    return 1000.0 * r + 100.0 * block + (double)(i % 97);
}

/* Fills this rank's buffer with its in-place input. */
static void ip_fill(ip_coll_t coll, double *buf, size_t count)
{
    const int blocks = coll == IP_ALLREDUCE || coll == IP_REDUCE ? 1 : size;

    for (int b = 0; b < blocks; b++)
        for (size_t i = 0; i < count; i++)
            buf[(size_t)b * count + i] =
                coll == IP_ALLGATHER ? (b == rank ? ip_input(rank, 0, i) : -1)
                                     : ip_input(rank, b, i);
}

/* The number of wrong elements in this rank's result. */
static size_t ip_check(ip_coll_t coll, const double *buf, size_t count,
                       int root)
{
    const double ranks = (double)size * (size - 1) / 2 * 1000.0;
    size_t bad = 0;

    for (size_t i = 0; i < count; i++) {
        switch (coll) {
        case IP_ALLREDUCE:
            bad += buf[i] != ranks + size * (double)(i % 97);
            break;
        case IP_REDUCE: /* a non-root's input must come back untouched */
            bad += rank == root ? buf[i] != ranks + size * (double)(i % 97)
                                : buf[i] != ip_input(rank, 0, i);
            break;
        case IP_REDUCE_SCATTER:
            bad += buf[i] != ranks + size * (100.0 * rank + (double)(i % 97));
            break;
        case IP_ALLGATHER:
        case IP_ALLTOALL:
            for (int b = 0; b < size; b++)
                bad += buf[(size_t)b * count + i] !=
                       ip_input(b, coll == IP_ALLTOALL ? rank : 0, i);
            break;
        }
    }
    return bad;
}

static int ip_call(ip_coll_t coll, double *buf, size_t count, int root)
{
    switch (coll) {
    case IP_ALLREDUCE:
        return MPI_Allreduce(MPI_IN_PLACE, buf, (int)count, MPI_DOUBLE,
                             MPI_SUM, MPI_COMM_WORLD);
    case IP_REDUCE:
        return MPI_Reduce(rank == root ? MPI_IN_PLACE : buf,
                          rank == root ? buf : NULL, (int)count, MPI_DOUBLE,
                          MPI_SUM, root, MPI_COMM_WORLD);
    case IP_REDUCE_SCATTER:
        return MPI_Reduce_scatter_block(MPI_IN_PLACE, buf, (int)count,
                                        MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    case IP_ALLGATHER:
        return MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf,
                             (int)count, MPI_DOUBLE, MPI_COMM_WORLD);
    case IP_ALLTOALL:
        return MPI_Alltoall(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf,
                            (int)count, MPI_DOUBLE, MPI_COMM_WORLD);
    }
    return MPI_ERR_OTHER;
}

static void mapfail_in_place(ip_coll_t coll, const char *name, size_t count,
                             int root, unsigned victims)
{
    const bool victim = victims >> rank & 1;
    /* Small in-place reduces are the root's alone: only a root that
     * cannot map falls back. In-place alltoall swaps each pair from its
     * lower rank (the last rank maps nobody), and a rank that cannot map
     * trades its pairs' blocks as messages: it and the ranks above it
     * count the fallback, those below it that nobody failed a swap with
     * zero-copy. */
    const bool falls_back =
        coll == IP_ALLTOALL
            ? (victim && rank != size - 1) ||
                  (victims & ((1u << rank) - 1)) != 0
        : coll == IP_REDUCE && count * sizeof(double) <= 16384
            ? (victims >> root & 1) != 0
            : true;
    struct rlimit old;
    MPIX_Zcopy_stats before, after;
    zt_arena_t arena;
    size_t used = 0, bad;
    char what[96];
    double *buf;
    int rc;

    zt_arena_init(&arena, MPI_COMM_WORLD, 64 * MIB);
    buf = zt_arena_alloc(&arena, &used, (size_t)size * count * sizeof(double));
    for (int pass = 0; pass < 2; pass++) {
        const bool limited = pass == 0;

        snprintf(what, sizeof(what), "%s in place, %zu doubles, root %d, %s "
                 "%#x", name, count, root, limited ? "out of address space:"
                                                   : "limit lifted, was", victims);
        ip_fill(coll, buf, count);
        old = as_squeeze(limited && victim, 16 * MIB);
        before = zt_stats(MPI_COMM_WORLD);
        arm(what);
        rc = ip_call(coll, buf, count, root);
        alarm(0);
        after = zt_stats(MPI_COMM_WORLD);
        as_restore(limited && victim, &old);
        ZT_CHECK(rc == MPI_SUCCESS, "%s: returned %d", what, rc);
        bad = ip_check(coll, buf, count, root);
        ZT_CHECK(bad == 0, "%s: %zu wrong elements", what, bad);
        if (limited && falls_back)
            ZT_CHECK(after.fallback_calls == before.fallback_calls + 1 &&
                     after.zcopy_calls == before.zcopy_calls &&
                     strstr(after.last_fallback_reason, "could not be mapped"),
                     "%s: zcopy +%llu fallback +%llu, reason \"%s\"", what,
                     (unsigned long long)(after.zcopy_calls -
                                          before.zcopy_calls),
                     (unsigned long long)(after.fallback_calls -
                                          before.fallback_calls),
                     after.last_fallback_reason);
        else
            ZT_CHECK(after.zcopy_calls == before.zcopy_calls + 1, "%s: not "
                     "zero-copy (%s)", what, after.last_fallback_reason);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    zt_arena_fini(&arena);
}

/* Doubles rank @a sends rank @b in mapfail_alltoallv: the same both ways
 * (an in-place alltoallv's pairs must match), none for every third pair. */
static int a2av_count(int a, int b, int count)
{
    const int lo = a < b ? a : b, hi = a < b ? b : a;

    return (lo + hi) % 3 == 1 ? 0 : count + 64 * (lo + hi);
}

/* An in-place alltoallv with some empty pairs, blocks in reverse rank
 * order, while the ranks in @victims are out of address space: results
 * right, and the fallback counted by the ranks of the pairs that traded
 * their blocks as messages (a failed rank and the ranks above it that it
 * shares a block with), zero-copy elsewhere. */
static void mapfail_alltoallv(int count, unsigned victims)
{
    int *counts = calloc((size_t)size, sizeof(int));
    int *displs = calloc((size_t)size, sizeof(int));
    const bool victim = victims >> rank & 1;
    struct rlimit old;
    MPIX_Zcopy_stats before, after;
    bool falls_back = false;
    zt_arena_t arena;
    size_t used = 0, bad = 0;
    int total = 0, rc;
    char what[96];
    double *buf;

    zt_require(counts != NULL && displs != NULL, "calloc");
    for (int j = size - 1; j >= 0; j--) {
        counts[j] = a2av_count(rank, j, count);
        displs[j] = total;
        total += counts[j];
    }
    /* A victim fails where it maps someone: a rank above it that it shares
     * a block with. Its pairs with a block then trade as messages. */
    for (int i = 0; i <= rank; i++) {
        bool failed = false;

        for (int j = i + 1; j < size && (victims >> i & 1); j++)
            failed = failed || a2av_count(i, j, count) > 0;
        if (failed && (i == rank || a2av_count(i, rank, count) > 0))
            falls_back = true;
    }
    zt_arena_init(&arena, MPI_COMM_WORLD, 64 * MIB);
    buf = zt_arena_alloc(&arena, &used, (size_t)total * sizeof(double) + 8);
    for (int j = 0; j < size; j++)
        for (int i = 0; i < counts[j]; i++)
            buf[displs[j] + i] = ip_input(rank, j, (size_t)i);
    snprintf(what, sizeof(what), "alltoallv in place, ranks %#x out of "
             "address space", victims);
    old = as_squeeze(victim, 16 * MIB);
    before = zt_stats(MPI_COMM_WORLD);
    arm(what);
    rc = MPI_Alltoallv(MPI_IN_PLACE, NULL, NULL, MPI_DATATYPE_NULL, buf,
                       counts, displs, MPI_DOUBLE, MPI_COMM_WORLD);
    alarm(0);
    after = zt_stats(MPI_COMM_WORLD);
    as_restore(victim, &old);
    ZT_CHECK(rc == MPI_SUCCESS, "%s: returned %d", what, rc);
    for (int j = 0; j < size; j++)
        for (int i = 0; i < counts[j]; i++)
            bad += buf[displs[j] + i] != ip_input(j, rank, (size_t)i);
    ZT_CHECK(bad == 0, "%s: %zu wrong elements on rank %d", what, bad, rank);
    ZT_CHECK(after.fallback_calls - before.fallback_calls == falls_back &&
                 after.zcopy_calls - before.zcopy_calls == !falls_back &&
                 (!falls_back ||
                  strstr(after.last_fallback_reason, "could not be mapped")),
             "%s: rank %d: zcopy +%llu fallback +%llu (expected %s), reason "
             "\"%s\"", what, rank,
             (unsigned long long)(after.zcopy_calls - before.zcopy_calls),
             (unsigned long long)(after.fallback_calls - before.fallback_calls),
             falls_back ? "a fallback" : "zero-copy",
             after.last_fallback_reason);
    MPI_Barrier(MPI_COMM_WORLD);
    zt_arena_fini(&arena);
    free(counts);
    free(displs);
}

/* An in-place alltoall whose rank 0 can neither map its partners nor
 * copy the blocks it owes them (each larger than its address space has
 * left): it reports so before anyone trades, and the call fails with an
 * MPI error on every rank of its pairs instead of leaving one waiting. */
static void mapfail_broken(void)
{
    const size_t count = (size_t)(17 * MIB) / sizeof(double);
    struct rlimit old;
    zt_arena_t arena;
    size_t used = 0;
    double *buf;
    int rc;

    zt_arena_init(&arena, MPI_COMM_WORLD, (size_t)size * 17 * MIB + MIB);
    buf = zt_arena_alloc(&arena, &used, (size_t)size * count * sizeof(double));
    for (size_t i = 0; i < (size_t)size * count; i++)
        buf[i] = (double)rank;
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    old = as_squeeze(rank == 0, 16 * MIB);
    arm("alltoall in place, rank 0 without room to map or copy");
    rc = MPI_Alltoall(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, (int)count,
                      MPI_DOUBLE, MPI_COMM_WORLD);
    alarm(0);
    as_restore(rank == 0, &old);
    ZT_CHECK(rc != MPI_SUCCESS, "alltoall in place, rank 0 without room to "
             "map or copy: rank %d returned success", rank);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
    MPI_Barrier(MPI_COMM_WORLD);
    zt_arena_fini(&arena);
}

/* The failing ranks: the first, the last (whose slice and block are not
 * at the front), and both. */
static void run_mapfail_in_place(void)
{
    const size_t small = 512, large = 8192; /* 4 KiB, 64 KiB per block */
    const unsigned sets[] = { 1u, 1u << (size - 1), 1u | 1u << (size - 1) };

    for (size_t v = 0; v < sizeof(sets) / sizeof(sets[0]); v++) {
        const unsigned s = sets[v];

        mapfail_in_place(IP_ALLREDUCE, "allreduce", small, 0, s);
        mapfail_in_place(IP_ALLREDUCE, "allreduce", large, 0, s);
        mapfail_in_place(IP_REDUCE, "reduce", small, 0, s);
        mapfail_in_place(IP_REDUCE, "reduce", small, size - 1, s);
        mapfail_in_place(IP_REDUCE, "reduce", large, 0, s);
        mapfail_in_place(IP_REDUCE, "reduce", large, size - 1, s);
        mapfail_in_place(IP_REDUCE_SCATTER, "reduce_scatter_block", small, 0,
                         s);
        mapfail_in_place(IP_ALLGATHER, "allgather", small, 0, s);
        mapfail_in_place(IP_ALLTOALL, "alltoall", small, 0, s);
    }
    /* A rank in the middle: the ranks below it swap with nobody that
     * failed, and stay zero-copy. Then the first two: rank 1 trades with
     * rank 0 below it and with the ranks above it. */
    if (size > 2) {
        mapfail_in_place(IP_ALLTOALL, "alltoall", small, 0, 1u << 1);
        mapfail_in_place(IP_ALLTOALL, "alltoall", small, 0, 3u);
    }
    if (size <= 4)
        for (unsigned v = 0; v < 1u << size; v++)
            mapfail_alltoallv(512, v);
    mapfail_broken();
}

/* --- rooted calls whose blocks a rank cannot reach ------------------------ */

/* bcast, scatter(v) and gather(v) end with every rank other than the root
 * leaving once it has moved its own block with the root's buffer; only
 * the root waits. A rank that cannot map the root's memory then moves its
 * block with the root through the point-to-point engine: both count a
 * fallback ("could not be mapped"), every other rank a zero-copy call, and
 * every result is right. */
typedef enum {
    RT_BCAST, RT_SCATTER, RT_SCATTERV, RT_GATHER, RT_GATHERV
} rt_coll_t;

static const char *const rt_names[] = { "bcast", "scatter", "scatterv",
                                        "gather", "gatherv" };

/* Doubles in rank @r's block: uneven in the v-forms. */
static int rt_count(rt_coll_t coll, int base, int r)
{
    return coll == RT_SCATTERV || coll == RT_GATHERV ? base + 512 * r : base;
}

static double rt_value(int r, size_t i)
{
    return 10000.0 * r + (double)(i % 1013);
}

/* In the v-forms the blocks lie in the root's buffer in reverse rank
 * order; @in_place: MPI_IN_PLACE at the root (not bcast). */
static void mapfail_rooted(rt_coll_t coll, int base, int root,
                           unsigned victims, bool in_place)
{
    const bool gather = coll == RT_GATHER || coll == RT_GATHERV;
    const bool vector = coll == RT_SCATTERV || coll == RT_GATHERV;
    const bool victim = victims >> rank & 1;
    const bool repairs = victim || (rank == root && victims != 0);
    int *counts = calloc((size_t)size, sizeof(int));
    int *displs = calloc((size_t)size, sizeof(int));
    struct rlimit old;
    MPIX_Zcopy_stats before, after;
    zt_arena_t arena;
    size_t used = 0, total = 0, bad = 0;
    double *big, *mine;
    char what[112];
    int rc = MPI_ERR_OTHER, n;

    zt_require(counts != NULL && displs != NULL, "calloc");
    for (int r = 0; r < size; r++) {
        counts[r] = rt_count(coll, base, r);
        total += (size_t)counts[r];
    }
    for (int r = 0, at = 0; r < size; r++) {
        const int j = vector ? size - 1 - r : r;

        displs[j] = at;
        at += counts[j];
    }
    n = counts[rank];
    zt_arena_init(&arena, MPI_COMM_WORLD, 64 * MIB);
    big = zt_arena_alloc(&arena, &used, total * sizeof(double));
    mine = zt_arena_alloc(&arena, &used, (size_t)n * sizeof(double));
    snprintf(what, sizeof(what), "%s%s of %d doubles per rank, root %d, "
             "ranks %#x out of address space", rt_names[coll],
             in_place ? " in place" : "", base, root, victims);
    for (size_t i = 0; i < total; i++)
        big[i] = -1;
    if (rank == root)
        for (int r = 0; r < size; r++)
            for (int i = 0; i < counts[r] && (!gather || (in_place && r == root));
                 i++)
                big[displs[r] + i] = rt_value(coll == RT_BCAST ? root : r,
                                              (size_t)i);
    for (int i = 0; i < n; i++)
        mine[i] = coll == RT_GATHER || coll == RT_GATHERV
                      ? rt_value(rank, (size_t)i) : -1;
    old = as_squeeze(victim, 16 * MIB);
    before = zt_stats(MPI_COMM_WORLD);
    arm(what);
    switch (coll) {
    case RT_BCAST:
        rc = MPI_Bcast(big, base, MPI_DOUBLE, root, MPI_COMM_WORLD);
        break;
    case RT_SCATTER:
        rc = MPI_Scatter(big, base, MPI_DOUBLE,
                         in_place && rank == root ? MPI_IN_PLACE : mine, base,
                         MPI_DOUBLE, root, MPI_COMM_WORLD);
        break;
    case RT_SCATTERV:
        rc = MPI_Scatterv(big, counts, displs, MPI_DOUBLE,
                          in_place && rank == root ? MPI_IN_PLACE : mine, n,
                          MPI_DOUBLE, root, MPI_COMM_WORLD);
        break;
    case RT_GATHER:
        rc = MPI_Gather(in_place && rank == root ? MPI_IN_PLACE : mine, base,
                        MPI_DOUBLE, big, base, MPI_DOUBLE, root,
                        MPI_COMM_WORLD);
        break;
    case RT_GATHERV:
        rc = MPI_Gatherv(in_place && rank == root ? MPI_IN_PLACE : mine, n,
                         MPI_DOUBLE, big, counts, displs, MPI_DOUBLE, root,
                         MPI_COMM_WORLD);
        break;
    }
    alarm(0);
    after = zt_stats(MPI_COMM_WORLD);
    as_restore(victim, &old);
    ZT_CHECK(rc == MPI_SUCCESS, "%s: returned %d", what, rc);
    if (coll == RT_BCAST)
        for (int i = 0; i < base; i++)
            bad += big[i] != rt_value(root, (size_t)i);
    else if (!gather) {
        const double *got = in_place && rank == root ? big + displs[rank]
                                                     : mine;

        for (int i = 0; i < n; i++)
            bad += got[i] != rt_value(rank, (size_t)i);
        /* The root's send buffer comes back untouched. */
        for (int r = 0; r < size && rank == root; r++)
            for (int i = 0; i < counts[r]; i++)
                bad += big[displs[r] + i] != rt_value(r, (size_t)i);
    } else if (rank == root)
        for (int r = 0; r < size; r++)
            for (int i = 0; i < counts[r]; i++)
                bad += big[displs[r] + i] != rt_value(r, (size_t)i);
    ZT_CHECK(bad == 0, "%s: %zu wrong elements on rank %d", what, bad, rank);
    if (repairs)
        ZT_CHECK(after.fallback_calls == before.fallback_calls + 1 &&
                 after.zcopy_calls == before.zcopy_calls &&
                 strstr(after.last_fallback_reason, "could not be mapped"),
                 "%s: rank %d: zcopy +%llu fallback +%llu, reason \"%s\"",
                 what, rank,
                 (unsigned long long)(after.zcopy_calls - before.zcopy_calls),
                 (unsigned long long)(after.fallback_calls -
                                      before.fallback_calls),
                 after.last_fallback_reason);
    else
        ZT_CHECK(after.zcopy_calls == before.zcopy_calls + 1 &&
                 after.fallback_calls == before.fallback_calls,
                 "%s: rank %d, not involved, did not stay zero-copy (zcopy "
                 "+%llu fallback +%llu, %s)", what, rank,
                 (unsigned long long)(after.zcopy_calls - before.zcopy_calls),
                 (unsigned long long)(after.fallback_calls -
                                      before.fallback_calls),
                 after.last_fallback_reason);
    MPI_Barrier(MPI_COMM_WORLD);
    zt_arena_fini(&arena);
    free(counts);
    free(displs);
}

/* 2048 doubles: 16 KiB, past the inline limits and within
 * coll_zcopy_small_msg, where a bcast's ranks pull the whole message from
 * the root. Victims: one rank other than the root, or all of them. */
static void run_mapfail_rooted(void)
{
    const int base = 2048;

    const unsigned all = (1u << size) - 1;

    for (int c = RT_BCAST; c <= RT_GATHERV; c++) {
        const rt_coll_t coll = (rt_coll_t)c;

        for (int in_place = 0; in_place <= (coll != RT_BCAST); in_place++) {
            mapfail_rooted(coll, base, 0, 1u << (size - 1), in_place);
            mapfail_rooted(coll, base, size - 1, 1u, in_place);
            /* Every other rank, around a root in the middle. */
            mapfail_rooted(coll, base, size / 2, all & ~(1u << size / 2),
                           in_place);
            mapfail_rooted(coll, base, 0, 0, in_place);
        }
    }
}

/* --- set-up retried after running out of memory --------------------------- */

static void run_setupretry(void)
{
    const size_t count = 512;
    struct rlimit old;
    zt_arena_t arena;
    size_t used = 0;
    double *in, *out;
    MPIX_Zcopy_stats s;
    MPI_Comm comm;
    int calls = 0;

    zt_arena_init(&arena, MPI_COMM_WORLD, 4 * MIB);
    in = zt_arena_alloc(&arena, &used, count * sizeof(double));
    out = zt_arena_alloc(&arena, &used, count * sizeof(double));
    for (size_t i = 0; i < count; i++)
        in[i] = rank + (double)i;
    /* WORLD set up first: the topology loaded and the peers known (hwloc
     * itself does not survive a failed allocation), so what the dup's
     * set-up lacks is its control segment. */
    MPI_Allreduce(in, out, (int)count, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    MPI_Comm_dup(MPI_COMM_WORLD, &comm);
    old = as_squeeze(rank == 0, 0); /* no room for one more mapping */
    arm("allreduce whose set-up runs out of memory");
    MPI_Allreduce(in, out, (int)count, MPI_DOUBLE, MPI_SUM, comm);
    alarm(0);
    as_restore(rank == 0, &old);
    s = zt_stats(comm);
    ZT_CHECK(s.fallback_calls == 1 && strstr(s.last_fallback_reason, "memory"),
             "first call: %llu fallbacks, reason \"%s\"",
             (unsigned long long)s.fallback_calls, s.last_fallback_reason);
    arm("allreduces until set-up is retried");
    do {
        MPI_Allreduce(in, out, (int)count, MPI_DOUBLE, MPI_SUM, comm);
        s = zt_stats(comm);
    } while (s.zcopy_calls == 0 && ++calls < 64);
    alarm(0);
    ZT_CHECK(s.zcopy_calls == 1 && calls <= 2, "zero-copy after %d more "
             "calls (reason \"%s\")", calls + 1, s.last_fallback_reason);
    /* The successful set-up must not blank the reason of the fallbacks
     * before it. */
    ZT_CHECK(strstr(s.last_fallback_reason, "memory") != NULL,
             "after the retry the last fallback's reason is \"%s\"",
             s.last_fallback_reason);
    for (size_t i = 0; i < count; i++)
        if (!ZT_CHECK(out[i] == (double)size * (size - 1) / 2 +
                                   (double)size * i, "out[%zu] = %g", i,
                      out[i]))
            break;
    MPI_Comm_free(&comm);
    zt_arena_fini(&arena);
}

/* --- idle ---------------------------------------------------------------- */

/* Whether a plugin of hwloc's is mapped: hwloc opens them when it loads a
 * topology (Debian's hwloc 2.9 always has its PCI plugin). Open MPI loads
 * one itself where it does not bind its processes, so the test runs
 * bound. */
static bool hwloc_plugin_mapped(void)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[512];
    bool found = false;

    if (!ZT_CHECK(f != NULL, "cannot read /proc/self/maps"))
        return false;
    while (!found && fgets(line, sizeof(line), f) != NULL)
        found = strstr(line, "/hwloc/hwloc_") != NULL;
    fclose(f);
    return found;
}

/* Calls of allreduce on @comm until one runs zero-copy, at most @limit. */
static int idle_calls_until_zcopy(MPI_Comm comm, double *in, double *out,
                                  int count, int limit)
{
    MPIX_Zcopy_stats s = zt_stats(comm);
    const uint64_t before = s.zcopy_calls;
    int calls = 0;

    while (calls < limit && s.zcopy_calls == before) {
        MPI_Allreduce(in, out, count, MPI_DOUBLE, MPI_SUM, comm);
        s = zt_stats(comm);
        calls++;
    }
    return s.zcopy_calls == before ? -1 : calls;
}

/* Whether collective @call of an idle communicator that had no barrier
 * agrees again (docs/citizen.md): at its first call, then
 * after as many calls as were made before each agreement, 64 at most. */
static bool idle_agrees_at(uint64_t call)
{
    uint64_t at = 1;

    while (at < call)
        at += at < 64 ? at : 64;
    return at == call;
}

/* SPEC section 4: a job that never activates memory pays nothing
 * measurable. Collectives on malloc'd buffers, on the world and on new
 * communicators, reach the component (it counts their fallbacks) without
 * it loading the machine's topology, which took 35 ms of the first one
 * here, and without setting the communicators up (the reason says so):
 * the agreement that finds no rank has set a range puts the set-up off
 * for as many calls as were made before it. Then the job starts using
 * zcopy, each communicator in the middle of such a skip: a range set on
 * the world ends the world's at once, a barrier ends a split's, and a dup
 * left alone engages exactly where its skip ends (coll.c, coll_idle). */
static void run_idle(void)
{
    const int count = 1024;
    const bool paired = rank / 2 * 2 + 1 < size; /* half has 2 ranks */
    double *in = malloc(count * sizeof(double));
    double *out = malloc(count * sizeof(double));
    MPIX_Zcopy_stats s, s0;
    MPI_Comm half, other;
    zt_arena_t arena;
    size_t used = 0;
    uint64_t world_calls;
    int calls;

    ZT_CHECK(!hwloc_plugin_mapped(), "a hwloc plugin is mapped after "
             "MPI_Init: this check cannot see the topology load");
    for (int i = 0; i < count; i++)
        in[i] = rank + i;
    arm("allreduce on the world");
    MPI_Allreduce(in, out, count, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    for (int i = 0; i < count; i++)
        if (!ZT_CHECK(out[i] == (double)size * (size - 1) / 2 +
                                   (double)size * i, "out[%d] = %g", i, out[i]))
            break;
    arm("a split and its bcasts");
    MPI_Comm_split(MPI_COMM_WORLD, rank / 2, rank, &half);
    /* Calls 1 to 7, then a barrier at 8, whose agreement is the barrier:
     * the split's next agreement is at call 16. */
    for (int i = 0; i < 7; i++)
        MPI_Bcast(out, count, MPI_DOUBLE, 0, half);
    s = zt_stats(half);
    ZT_CHECK(!paired || s.fallback_calls == 7,
             "bcasts on the split: %llu fallbacks (is the component there?)",
             (unsigned long long)s.fallback_calls);
    ZT_CHECK(!paired || strstr(s.last_fallback_reason, "memory range"),
             "bcast on the split fell back for \"%s\"", s.last_fallback_reason);
    s0 = s;
    MPI_Barrier(half);
    s = zt_stats(half);
    ZT_CHECK(!paired || (s.fallback_calls == s0.fallback_calls + 1 &&
                         s.zcopy_calls == 0),
             "an idle barrier: %llu fallbacks, %llu zero-copy, expected 1 "
             "fallback", (unsigned long long)(s.fallback_calls -
                                              s0.fallback_calls),
             (unsigned long long)s.zcopy_calls);
    MPI_Comm_dup(MPI_COMM_WORLD, &other);
    for (int i = 0; i < 40; i++) /* agreements at 1, 2, 4, 8, 16, 32 */
        MPI_Allreduce(in, out, count, MPI_DOUBLE, MPI_SUM, other);
    /* The world's calls so far (its allreduce, and what the split ran on
     * it): every one fell back. Then into the middle of a skip. */
    s = zt_stats(MPI_COMM_WORLD);
    world_calls = s.fallback_calls;
    while (idle_agrees_at(world_calls + 1)) {
        MPI_Allreduce(in, out, count, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        world_calls++;
    }
    alarm(0);
    s = zt_stats(MPI_COMM_WORLD);
    ZT_CHECK(s.fallback_calls == world_calls && s.zcopy_calls == 0,
             "world: %llu fallbacks, %llu zero-copy calls",
             (unsigned long long)s.fallback_calls,
             (unsigned long long)s.zcopy_calls);
    ZT_CHECK(strstr(s.last_fallback_reason, "memory range") != NULL,
             "the world fell back for \"%s\"", s.last_fallback_reason);
    ZT_CHECK(!hwloc_plugin_mapped(), "the topology was loaded by a job that "
             "never activated memory");
    free(in);
    free(out);

    /* Now the job uses zcopy, on memory activated on the world. */
    arm("activated memory after idle calls");
    zt_arena_init(&arena, MPI_COMM_WORLD, 1 << 20);
    in = zt_arena_alloc(&arena, &used, count * sizeof(double));
    out = zt_arena_alloc(&arena, &used, count * sizeof(double));
    for (int i = 0; i < count; i++)
        in[i] = rank + i;
    calls = idle_calls_until_zcopy(MPI_COMM_WORLD, in, out, count, 1);
    ZT_CHECK(calls == 1, "the world, its range set at call %llu: zero-copy "
             "after %d calls", (unsigned long long)world_calls, calls);
    for (int i = 0; i < count; i++)
        if (!ZT_CHECK(out[i] == (double)size * (size - 1) / 2 +
                                   (double)size * i, "out[%d] = %g", i, out[i]))
            break;
    /* Call 9 of the split, 10 its allreduce: both zero-copy. */
    MPI_Barrier(half);
    s = zt_stats(half);
    ZT_CHECK(!paired || s.zcopy_calls == 1, "a barrier on the split after "
             "the range was set elsewhere: %llu zero-copy (%s)",
             (unsigned long long)s.zcopy_calls, s.last_fallback_reason);
    calls = idle_calls_until_zcopy(half, in, out, count, 1);
    ZT_CHECK(calls == 1 || !paired, "the split after a barrier: zero-copy "
             "after %d calls", calls);
    /* The dup's 40 idle calls: its next agreement is call 64, and the
     * range is used there, not earlier, not later. */
    calls = idle_calls_until_zcopy(other, in, out, count, 64);
    ZT_CHECK(calls == 24, "the dup left alone: zero-copy after %d more "
             "calls, expected 24", calls);
    alarm(0);
    MPI_Comm_free(&other);
    MPI_Comm_free(&half);
    zt_arena_fini(&arena);
}

/* --- stats --------------------------------------------------------------- */

/* The struct of the SPEC's first version: a program built against it. */
typedef struct {
    uint64_t zcopy_calls, fallback_calls, ipc_bytes, ucx_bytes;
    char last_fallback_reason[64];
} stats_v1_t;

static void run_stats(void)
{
    struct {
        stats_v1_t s;
        unsigned char canary[64];
    } old;
    MPIX_Zcopy_stats now;
    pool_t pool;
    int rc;

    /* A range set on the world, so that its barrier runs zero-copy. */
    pool_init(&pool, true, MIB);
    MPI_Barrier(MPI_COMM_WORLD);
    memset(&old, 0xa5, sizeof(old));
    /* The exported symbol, as an old binary calls it (no macro). */
    rc = (MPIX_Zcopy_get_stats)(MPI_COMM_WORLD, (MPIX_Zcopy_stats *)&old.s);
    ZT_CHECK(rc == MPI_SUCCESS, "get_stats: %d", rc);
    for (size_t i = 0; i < sizeof(old.canary); i++)
        if (!ZT_CHECK(old.canary[i] == 0xa5, "byte %zu past a v1 struct "
                      "written", i))
            break;
    ZT_CHECK(old.s.zcopy_calls >= 1, "v1 struct: zcopy_calls %llu",
             (unsigned long long)old.s.zcopy_calls);
    now = zt_stats(MPI_COMM_WORLD);
    ZT_CHECK(now.zcopy_calls == old.s.zcopy_calls, "sized and v1 differ");
    pool_fini(&pool);
}

/* A sum that MPI must treat as non-commutative (zcopy leaves it to the
 * fallback). */
static void replan_sum(void *in, void *inout, int *len, MPI_Datatype *type)
{
    (void)type;
    for (int i = 0; i < *len; i++)
        ((double *)inout)[i] += ((const double *)in)[i];
}

/* An allreduce of @count doubles with @op; true if it went zero-copy. */
static bool replan_allreduce(double *in, double *out, int count, MPI_Op op,
                             const char *what)
{
    MPIX_Zcopy_stats before, after;

    for (int i = 0; i < count; i++) {
        in[i] = rank + (double)i;
        out[i] = -1;
    }
    before = zt_stats(MPI_COMM_WORLD);
    arm(what);
    MPI_Allreduce(in, out, count, MPI_DOUBLE, op, MPI_COMM_WORLD);
    alarm(0);
    after = zt_stats(MPI_COMM_WORLD);
    for (int i = 0; i < count; i++)
        if (!ZT_CHECK(out[i] == (double)size * (size - 1) / 2 +
                                    (double)size * i,
                      "%s: element %d is %g", what, i, out[i]))
            break;
    return after.zcopy_calls == before.zcopy_calls + 1;
}

/* A gather of @count doubles per rank to @root; true if zero-copy. */
static bool replan_gather(double *in, double *out, int count, int root,
                          const char *what)
{
    MPIX_Zcopy_stats before, after;

    for (int i = 0; i < count; i++)
        in[i] = 100.0 * rank + i;
    for (int i = 0; i < count * size; i++)
        out[i] = -1;
    before = zt_stats(MPI_COMM_WORLD);
    arm(what);
    MPI_Gather(in, count, MPI_DOUBLE, out, count, MPI_DOUBLE, root,
               MPI_COMM_WORLD);
    alarm(0);
    after = zt_stats(MPI_COMM_WORLD);
    for (int i = 0; i < count * size && rank == root; i++)
        if (!ZT_CHECK(out[i] == 100.0 * (i / count) + i % count,
                      "%s: element %d is %g", what, i, out[i]))
            break;
    return after.zcopy_calls == before.zcopy_calls + 1;
}

/* One call of @what on the same arguments every time: bcast of @count
 * elements of @type from rank 0 on WORLD; true if it went zero-copy,
 * checks that it counted one call either way and delivered the data. */
static bool replan_bcast(double *buf, int count, MPI_Datatype type,
                         const char *what)
{
    MPIX_Zcopy_stats before, after;

    for (int i = 0; i < 2 * count; i++)
        buf[i] = rank == 0 ? 1000.0 + i : -1.0;
    before = zt_stats(MPI_COMM_WORLD);
    arm(what);
    MPI_Bcast(buf, count, type, 0, MPI_COMM_WORLD);
    alarm(0);
    after = zt_stats(MPI_COMM_WORLD);
    ZT_CHECK(after.zcopy_calls + after.fallback_calls ==
                 before.zcopy_calls + before.fallback_calls + 1,
             "%s: %llu calls counted", what,
             (unsigned long long)(after.zcopy_calls + after.fallback_calls -
                                  before.zcopy_calls - before.fallback_calls));
    return after.zcopy_calls == before.zcopy_calls + 1;
}

static void run_replan(void)
{
    const int count = 512; /* 4 KiB of doubles: mapped, not inline */
    zt_arena_t data, other;
    MPIX_Zcopy_stats s;
    MPI_Datatype pair, strided;
    size_t used = 0, other_used = 0;
    double *buf;

    zt_arena_init(&data, MPI_COMM_WORLD, MIB);
    /* Memory that stays activated, so that the calls below are planned
     * (a process with nothing activated declines before any plan). */
    zt_arena_init(&other, MPI_COMM_WORLD, MIB);
    (void)zt_arena_alloc(&other, &other_used, 64);
    buf = zt_arena_alloc(&data, &used, 2 * count * sizeof(double));

    for (int i = 0; i < 3; i++)
        ZT_CHECK(replan_bcast(buf, count, MPI_DOUBLE, "bcast"),
                 "bcast %d on activated memory: not zero-copy", i);

    /* Rank 1's buffer is no longer activated: every rank falls back. */
    if (rank == 1)
        zt_require(MPIX_Comm_deactivate_memory(MPI_COMM_WORLD, data.base) ==
                       MPI_SUCCESS, "deactivate");
    ZT_CHECK(!replan_bcast(buf, count, MPI_DOUBLE, "bcast, deactivated"),
             "bcast with rank 1's buffer deactivated went zero-copy");
    s = zt_stats(MPI_COMM_WORLD);
    ZT_CHECK(strstr(s.last_fallback_reason, "not activated") != NULL,
             "fallback reason \"%s\"", s.last_fallback_reason);
    for (int i = 0; i < 2 * count; i++)
        if (!ZT_CHECK(buf[i] == (rank == 0 || i < count ? 1000.0 + i : -1.0),
                      "bcast, deactivated: element %d is %g", i, buf[i]))
            break;
    if (rank == 1)
        zt_require(MPIX_Comm_activate_memory(MPI_COMM_WORLD, data.base,
                                             data.size, 0, data.handle, 0) ==
                       MPI_SUCCESS, "activate again");
    ZT_CHECK(replan_bcast(buf, count, MPI_DOUBLE, "bcast, activated again"),
             "bcast after activating again: not zero-copy");

    /* A derived datatype, freed; the next one may take its handle. */
    MPI_Type_contiguous(2, MPI_DOUBLE, &pair);
    MPI_Type_commit(&pair);
    ZT_CHECK(replan_bcast(buf, count / 2, pair, "bcast of pairs"),
             "bcast of a contiguous derived type: not zero-copy");
    MPI_Type_free(&pair);
    MPI_Type_vector(2, 1, 2, MPI_DOUBLE, &strided);
    MPI_Type_commit(&strided);
    ZT_CHECK(!replan_bcast(buf, count / 2, strided, "bcast, strided"),
             "bcast of a strided type went zero-copy");
    s = zt_stats(MPI_COMM_WORLD);
    ZT_CHECK(strstr(s.last_fallback_reason, "non-contiguous") != NULL,
             "fallback reason \"%s\"", s.last_fallback_reason);
    /* Element k of the type is doubles 3k and 3k + 2. */
    for (int i = 0; i < 2 * count; i++)
        if (!ZT_CHECK(buf[i] == (rank == 0 || (i < 3 * count / 2 && i % 3 != 1)
                                     ? 1000.0 + i : -1.0),
                      "bcast, strided: element %d is %g", i, buf[i]))
            break;
    MPI_Type_free(&strided);

    /* The same buffers reduced with another op. */
    double *in = zt_arena_alloc(&data, &used, count * sizeof(double));
    double *out = zt_arena_alloc(&data, &used, size * count * sizeof(double));
    MPI_Op sum;

    ZT_CHECK(replan_allreduce(in, out, count, MPI_SUM, "allreduce"),
             "allreduce on activated memory: not zero-copy");
    MPI_Op_create(replan_sum, 0, &sum);
    ZT_CHECK(!replan_allreduce(in, out, count, sum, "allreduce, user op"),
             "allreduce with a non-commutative op went zero-copy");
    s = zt_stats(MPI_COMM_WORLD);
    ZT_CHECK(strstr(s.last_fallback_reason, "op not supported") != NULL,
             "fallback reason \"%s\"", s.last_fallback_reason);
    MPI_Op_free(&sum);

    /* The same gather to another root. */
    for (int root = 0; root < 2; root++)
        ZT_CHECK(replan_gather(in, out, count, root, "gather"),
                 "gather to root %d: not zero-copy", root);

    MPI_Barrier(MPI_COMM_WORLD);
    zt_arena_fini(&other);
    zt_arena_fini(&data);
}

/* --- sleep -------------------------------------------------------------- */

#define SLEEP_LATE_US 200000

static double cpu_seconds(void)
{
    struct rusage ru;

    getrusage(RUSAGE_SELF, &ru);
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
           (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
}

/* The last rank enters @what SLEEP_LATE_US late; every other rank's CPU
 * time during its wait must stay a small part of it. */
static void sleep_case(pool_t *pool, const char *what, size_t count)
{
    const int late = size - 1, root = late;
    double *in = pool_alloc(pool, count * sizeof(double));
    double *out = pool_alloc(pool, count * sizeof(double));
    MPIX_Zcopy_stats before, after;
    double wall, cpu;
    size_t bad = 0;

    arm(what);
    for (size_t i = 0; i < count; i++)
        in[i] = rank + (double)i;
    memcpy(out, in, count * sizeof(double));
    MPI_Barrier(MPI_COMM_WORLD);
    before = zt_stats(MPI_COMM_WORLD);
    if (rank == late)
        nanosleep(&(struct timespec){ 0, SLEEP_LATE_US * 1000L }, NULL);
    wall = MPI_Wtime();
    cpu = cpu_seconds();
    if (strcmp(what, "barrier") == 0)
        MPI_Barrier(MPI_COMM_WORLD);
    else if (strncmp(what, "bcast", 5) == 0)
        MPI_Bcast(out, (int)count, MPI_DOUBLE, root, MPI_COMM_WORLD);
    else
        MPI_Allreduce(in, out, (int)count, MPI_DOUBLE, MPI_SUM,
                      MPI_COMM_WORLD);
    cpu = cpu_seconds() - cpu;
    wall = MPI_Wtime() - wall;
    after = zt_stats(MPI_COMM_WORLD);
    check_path(what, true, &before, &after, 1);
    for (size_t i = 0; i < count && strcmp(what, "barrier") != 0; i++) {
        const double want = strncmp(what, "bcast", 5) == 0
                                ? root + (double)i
                                : size * (size - 1) / 2.0 + size * (double)i;
        bad += out[i] != want;
    }
    ZT_CHECK(bad == 0, "%s: %zu wrong elements", what, bad);
    if (rank != late) {
        ZT_CHECK(wall > SLEEP_LATE_US * 0.5e-6, "%s: rank %d left after "
                 "%.3f s, before the late rank came", what, rank, wall);
        ZT_CHECK(cpu < 0.25 * wall, "%s: rank %d used %.3f s of CPU "
                 "waiting %.3f s for the late rank", what, rank, cpu, wall);
    }
    pool_free(pool, out);
    pool_free(pool, in);
}

static void run_sleep(void)
{
    pool_t pool;

    pool_init(&pool, true, MIB);
    MPI_Barrier(MPI_COMM_WORLD); /* engages the range set on the world */
    sleep_case(&pool, "barrier", 0);
    sleep_case(&pool, "allreduce 8 B", 1);
    sleep_case(&pool, "allreduce 64 KiB", 8 * KIB);
    sleep_case(&pool, "bcast 64 KiB", 8 * KIB);
    pool_fini(&pool);
}

static void run_settings_info(void) { run_settings(false); }
static void run_settings_mca(void) { run_settings(true); }

static const struct {
    const char *name;
    void (*run)(void);
} cases[] = {
    { "progress", run_progress },     { "datatypes", run_datatypes },
    { "intercomm", run_intercomm },   { "reductions", run_reductions },
    { "settings", run_settings_info }, { "settings-mca", run_settings_mca },
    { "release", run_release },       { "mapfail", run_mapfail },
    { "mapfail-inplace", run_mapfail_in_place },
    { "mapfail-rooted", run_mapfail_rooted },
    { "setupretry", run_setupretry }, { "stats", run_stats },
    { "replan", run_replan },         { "idle", run_idle },
    { "sleep", run_sleep },
};

int main(int argc, char **argv)
{
    const char *which = argc > 1 ? argv[1] : "";

    if (argc > 2)
        mca_setting = argv[2];

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    signal(SIGALRM, on_alarm);
    if (size < 2) {
        fprintf(stderr, "needs at least 2 ranks\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        if (strcmp(which, cases[i].name) == 0) {
            cases[i].run();
            return zt_finish();
        }
    }
    if (rank == 0) {
        fprintf(stderr, "usage: test_citizen CASE, one of:");
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
            fprintf(stderr, " %s", cases[i].name);
        fputc('\n', stderr);
    }
    MPI_Abort(MPI_COMM_WORLD, 2);
    return 2;
}
