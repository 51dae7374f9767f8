/*
 * Zero-copy on derived communicators (SPEC sections 3 and 5). Memory is
 * activated once, on MPI_COMM_WORLD; activation is per process, so every
 * communicator made afterwards must run zero-copy on it with no new call:
 * splits (contiguous, interleaved, a split of a split in reversed order),
 * a dup, MPI_Comm_create from a reversed group and from a two-rank group,
 * MPI_Comm_split_type(SHARED). On each, allreduce (also in place), bcast
 * from every root, allgather, alltoall and reduce_scatter_block, small and
 * above the small-message threshold, must be correct and counted zero-copy
 * in that communicator's stats alone. A dup with info mpix_zcopy=false
 * must be correct with all-zero stats.
 *
 * Then every derived communicator is freed while the memory is still
 * activated: file descriptors, control segments and imported blocks go
 * back to what WORLD alone holds, and new splits made after the frees
 * start from zero stats and run zero-copy again.
 *
 * MPI_COMM_WORLD (and so every communicator derived from it) returns
 * errors, so that a collective zcopy cannot run is a failed check.
 */
#define _GNU_SOURCE
#include "testutil.h"
#include "../common/proc.h"

#include <dirent.h>
#include <stdlib.h>
#include <string.h>

#define MAX_RANKS 16
#define MAX_COUNT 12000          /* ints: 48 KB, above the small-message
                                    threshold, so reductions are sliced */
#define NEW_SPLITS 10            /* split / collective / free rounds */

static const size_t counts[] = { 5, MAX_COUNT };
static int wrank, wsize;
static zt_arena_t arena;
static struct {
    int *ar_s, *ar_r, *bc, *ag_s, *ag_r, *a2a_s, *a2a_r, *rs_s, *rs_r;
} buf;

/* --- data ---------------------------------------------------------------- */

/* Keyed by WORLD rank, so that a rank translated wrongly between a
 * sub-communicator and the processes behind it gives wrong data. Small
 * enough that a sum over all ranks stays exact in an int. */
static int val(int salt, int wr, size_t i)
{
    return (int)(((size_t)salt * 7919u + (size_t)wr * 104729u + i * 31u) %
                 1000003u);
}

static int pairval(int salt, int from, int to, size_t i)
{
    return val(salt, from * MAX_RANKS + to, i);
}

/* One communicator under test: its name for messages, its ranks' WORLD
 * ranks, and the salt that makes its data its own. */
typedef struct {
    MPI_Comm comm;
    const char *name;
    int n, me, salt;
    int wr[MAX_RANKS];
} subject_t;

static int sum_over(const subject_t *t, int salt, size_t i)
{
    int sum = 0;

    for (int j = 0; j < t->n; j++)
        sum += val(salt, t->wr[j], i);
    return sum;
}

static bool check_rc(const subject_t *t, int rc, const char *what,
                     size_t count)
{
    char msg[MPI_MAX_ERROR_STRING] = "";
    int len = 0;

    if (rc != MPI_SUCCESS && MPI_Error_string(rc, msg, &len) == MPI_SUCCESS)
        msg[len] = '\0';
    return ZT_CHECK(rc == MPI_SUCCESS, "%s: %s of %zu ints failed: %s",
                    t->name, what, count, msg);
}

static void check_data(const subject_t *t, long bad, const char *what,
                       size_t count)
{
    ZT_CHECK(bad < 0, "%s: %s of %zu ints wrong at %ld", t->name, what,
             count, bad);
}

/* --- the collectives ----------------------------------------------------- */

/* Runs every collective at @count on @t; returns how many calls it made. */
static unsigned run_count(const subject_t *t, size_t count, int salt)
{
    const size_t n = (size_t)t->n;
    const int me = t->me, wme = t->wr[me];
    unsigned calls = 0;
    long bad;

    for (size_t i = 0; i < count; i++) {
        buf.ar_s[i] = val(salt, wme, i);
        buf.ar_r[i] = -7;
    }
    calls++;
    if (check_rc(t, MPI_Allreduce(buf.ar_s, buf.ar_r, (int)count, MPI_INT,
                                  MPI_SUM, t->comm), "allreduce", count)) {
        ZT_FIND_BAD(bad, buf.ar_r, count, sum_over(t, salt, i));
        check_data(t, bad, "allreduce", count);
    }

    for (size_t i = 0; i < count; i++)
        buf.ar_r[i] = val(salt + 1, wme, i);
    calls++;
    if (check_rc(t, MPI_Allreduce(MPI_IN_PLACE, buf.ar_r, (int)count,
                                  MPI_INT, MPI_SUM, t->comm),
                 "in-place allreduce", count)) {
        ZT_FIND_BAD(bad, buf.ar_r, count, sum_over(t, salt + 1, i));
        check_data(t, bad, "in-place allreduce", count);
    }

    for (int root = 0; root < t->n; root++) {
        for (size_t i = 0; i < count; i++)
            buf.bc[i] = me == root ? val(salt + 2 + root, wme, i) : -1;
        calls++;
        if (check_rc(t, MPI_Bcast(buf.bc, (int)count, MPI_INT, root, t->comm),
                     "bcast", count)) {
            ZT_FIND_BAD(bad, buf.bc, count, val(salt + 2 + root, t->wr[root], i));
            ZT_CHECK(bad < 0, "%s: bcast of %zu ints from root %d wrong at "
                     "%ld", t->name, count, root, bad);
        }
    }

    for (size_t i = 0; i < count; i++)
        buf.ag_s[i] = val(salt + 20, wme, i);
    for (size_t i = 0; i < n * count; i++)
        buf.ag_r[i] = -7;
    calls++;
    if (check_rc(t, MPI_Allgather(buf.ag_s, (int)count, MPI_INT, buf.ag_r,
                                  (int)count, MPI_INT, t->comm),
                 "allgather", count)) {
        ZT_FIND_BAD(bad, buf.ag_r, n * count,
                 val(salt + 20, t->wr[i / count], i % count));
        check_data(t, bad, "allgather", count);
    }

    for (size_t i = 0; i < n * count; i++) {
        buf.a2a_s[i] = pairval(salt, wme, t->wr[i / count], i % count);
        buf.a2a_r[i] = -7;
    }
    calls++;
    if (check_rc(t, MPI_Alltoall(buf.a2a_s, (int)count, MPI_INT, buf.a2a_r,
                                 (int)count, MPI_INT, t->comm),
                 "alltoall", count)) {
        ZT_FIND_BAD(bad, buf.a2a_r, n * count,
                 pairval(salt, t->wr[i / count], wme, i % count));
        check_data(t, bad, "alltoall", count);
    }

    /* Block me of the element-wise sum of everyone's n * count inputs. */
    for (size_t i = 0; i < n * count; i++)
        buf.rs_s[i] = val(salt + 21, wme, i);
    for (size_t i = 0; i < count; i++)
        buf.rs_r[i] = -7;
    calls++;
    if (check_rc(t, MPI_Reduce_scatter_block(buf.rs_s, buf.rs_r, (int)count,
                                             MPI_INT, MPI_SUM, t->comm),
                 "reduce_scatter_block", count)) {
        ZT_FIND_BAD(bad, buf.rs_r, count,
                 sum_over(t, salt + 21, (size_t)me * count + i));
        check_data(t, bad, "reduce_scatter_block", count);
    }
    return calls;
}

static subject_t subject(MPI_Comm comm, const char *name, int salt)
{
    subject_t t = { .comm = comm, .name = name, .salt = salt };
    int ranks[MAX_RANKS];
    MPI_Group g, wg;

    MPI_Comm_size(comm, &t.n);
    MPI_Comm_rank(comm, &t.me);
    for (int j = 0; j < t.n; j++)
        ranks[j] = j;
    MPI_Comm_group(comm, &g);
    MPI_Comm_group(MPI_COMM_WORLD, &wg);
    MPI_Group_translate_ranks(g, t.n, ranks, wg, t.wr);
    MPI_Group_free(&g);
    MPI_Group_free(&wg);
    return t;
}

static bool stats_zero(const MPIX_Zcopy_stats *s)
{
    return s->zcopy_calls == 0 && s->fallback_calls == 0 &&
           s->ipc_bytes == 0 && s->ucx_bytes == 0 &&
           s->last_fallback_reason[0] == '\0';
}

/* Every collective at every size on @comm (nothing if this rank is not in
 * it). @zcopy: whether zcopy is on there, so that every call must be
 * counted zero-copy; otherwise its stats must stay all zeros. Either way
 * the calls count in @comm's stats only, never in WORLD's. */
static void run_suite(MPI_Comm comm, const char *name, int salt, bool zcopy)
{
    MPIX_Zcopy_stats s0, s1, w0, w1;
    unsigned calls = 0;
    subject_t t;
    int activated = 0;

    if (comm == MPI_COMM_NULL)
        return;
    t = subject(comm, name, salt);
    MPIX_Zcopy_query(comm, buf.ar_s, MAX_COUNT * sizeof(int), &activated);
    ZT_CHECK(activated, "%s: memory activated on WORLD is not activated "
             "here", name);
    s0 = zt_stats(comm);
    w0 = zt_stats(MPI_COMM_WORLD);
    for (size_t k = 0; k < sizeof(counts) / sizeof(counts[0]); k++)
        calls += run_count(&t, counts[k], salt + 100 * (int)k);
    s1 = zt_stats(comm);
    w1 = zt_stats(MPI_COMM_WORLD);

    if (t.n < 2) {
        /* Nothing to share on a single rank; only the results count. */
    } else if (zcopy) {
        ZT_CHECK(s1.zcopy_calls - s0.zcopy_calls == calls &&
                     s1.fallback_calls == s0.fallback_calls,
                 "%s (%d ranks): %llu of %u collectives zero-copy, %llu "
                 "fallbacks (last: %s)", name, t.n,
                 (unsigned long long)(s1.zcopy_calls - s0.zcopy_calls), calls,
                 (unsigned long long)(s1.fallback_calls - s0.fallback_calls),
                 s1.last_fallback_reason);
        ZT_CHECK(s1.ipc_bytes > s0.ipc_bytes,
                 "%s: no bytes moved through peer mappings", name);
    } else {
        ZT_CHECK(stats_zero(&s1), "%s: zcopy is off here, yet stats show "
                 "%llu zero-copy, %llu fallbacks, %llu ipc bytes", name,
                 (unsigned long long)s1.zcopy_calls,
                 (unsigned long long)s1.fallback_calls,
                 (unsigned long long)s1.ipc_bytes);
    }
    if (comm != MPI_COMM_WORLD)
        ZT_CHECK(w1.zcopy_calls == w0.zcopy_calls &&
                     w1.fallback_calls == w0.fallback_calls &&
                     w1.ipc_bytes == w0.ipc_bytes,
                 "%s: its collectives were counted in WORLD's stats", name);
}

/* --- what the process holds ---------------------------------------------- */

/* fds; control segments mapped (memfds "zcopy-ctl", one per communicator
 * zcopy runs on); device memory mapped (memfds "zcopy", own and imported). */
typedef struct {
    int fds, segments, blocks;
} footprint_t;

static footprint_t footprint(void)
{
    return (footprint_t){ .fds = proc_count_fds(),
                          .segments = proc_count_maps("/memfd:zcopy-ctl"),
                          .blocks = proc_count_maps("/memfd:zcopy (deleted)") };
}

/* @live: communicators other than WORLD that zcopy runs on at this rank.
 * Imports of a peer's block are per process, shared by every communicator
 * (src/ipc/ipc.h), so sub-communicators never add block mappings. */
static void check_footprint(const footprint_t *base, int live,
                            const char *when)
{
    footprint_t now = footprint();

    ZT_CHECK(now.fds == base->fds, "%s: %d fds, %d with WORLD alone", when,
             now.fds, base->fds);
    ZT_CHECK(now.segments == base->segments + live,
             "%s: %d control segments mapped, expected %d", when,
             now.segments, base->segments + live);
    ZT_CHECK(now.blocks == base->blocks, "%s: %d zcopy memory mappings, "
             "expected %d (own block + one per peer)", when, now.blocks,
             base->blocks);
}

/* --- communicators ------------------------------------------------------- */

static int size_of(MPI_Comm comm)
{
    int n = 0;

    if (comm != MPI_COMM_NULL)
        MPI_Comm_size(comm, &n);
    return n;
}

/* A communicator of the ranks in @ranks (WORLD ranks, in this order) made
 * with MPI_Comm_create; MPI_COMM_NULL on the ranks left out. */
static MPI_Comm create_from(const int *ranks, int n)
{
    MPI_Group wg, g;
    MPI_Comm comm;

    MPI_Comm_group(MPI_COMM_WORLD, &wg);
    MPI_Group_incl(wg, n, ranks, &g);
    MPI_Comm_create(MPI_COMM_WORLD, g, &comm);
    MPI_Group_free(&g);
    MPI_Group_free(&wg);
    return comm;
}

static void test_derived(const footprint_t *base)
{
    enum { HALVES, REVERSED_HALF, INTERLEAVED, DUP, CREATED_REVERSED,
           CREATED_PAIR, SHARED, NCOMMS };
    static const char *const names[NCOMMS] = {
        [HALVES] = "split into halves",
        [REVERSED_HALF] = "split of the split, reversed",
        [INTERLEAVED] = "split interleaved",
        [DUP] = "dup of WORLD",
        [CREATED_REVERSED] = "create from the reversed group",
        [CREATED_PAIR] = "create from {last, first}",
        [SHARED] = "split_type SHARED",
    };
    MPI_Comm comms[NCOMMS], quiet;
    int ranks[MAX_RANKS], hrank, live = 0;
    MPIX_Zcopy_stats s;
    MPI_Info info;

    /* np 4: {0,1},{2,3}; np 3: {0,1},{2}. */
    MPI_Comm_split(MPI_COMM_WORLD, wrank / 2, wrank, &comms[HALVES]);
    MPI_Comm_rank(comms[HALVES], &hrank);
    MPI_Comm_split(comms[HALVES], 0, -hrank, &comms[REVERSED_HALF]);
    /* np 4: {0,2},{1,3}; np 3: {0,2},{1}: members not adjacent. */
    MPI_Comm_split(MPI_COMM_WORLD, wrank % 2, wrank, &comms[INTERLEAVED]);
    MPI_Comm_dup(MPI_COMM_WORLD, &comms[DUP]);
    for (int j = 0; j < wsize; j++)
        ranks[j] = wsize - 1 - j;
    comms[CREATED_REVERSED] = create_from(ranks, wsize);
    ranks[0] = wsize - 1;
    ranks[1] = 0;
    comms[CREATED_PAIR] = create_from(ranks, 2);
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, wrank,
                        MPI_INFO_NULL, &comms[SHARED]);
    ZT_CHECK(size_of(comms[SHARED]) == wsize, "split_type SHARED: %d ranks, "
             "expected all %d on this one machine", size_of(comms[SHARED]),
             wsize);

    for (int c = 0; c < NCOMMS; c++) {
        run_suite(comms[c], names[c], 1000 * (c + 1), true);
        live += size_of(comms[c]) >= 2;
    }

    MPI_Info_create(&info);
    MPI_Info_set(info, MPIX_ZCOPY_INFO_KEY, "false");
    MPI_Comm_dup_with_info(MPI_COMM_WORLD, info, &quiet);
    MPI_Info_free(&info);
    run_suite(quiet, "dup with mpix_zcopy=false", 9000, false);
    /* Opted out means not set up at all: no control segment for it. */
    check_footprint(base, live, "derived communicators alive");

    /* WORLD is untouched by all of the above. */
    run_suite(MPI_COMM_WORLD, "WORLD after the derived ones", 9500, true);

    for (int c = 0; c < NCOMMS; c++)
        if (comms[c] != MPI_COMM_NULL)
            MPI_Comm_free(&comms[c]);
    MPI_Comm_free(&quiet);
    /* Freed with the memory still activated: nothing of them remains. */
    check_footprint(base, 0, "derived communicators freed");
    s = zt_stats(MPI_COMM_WORLD);
    ZT_CHECK(s.zcopy_calls > 0, "WORLD lost its stats when others were "
             "freed");
}

/* New communicators after the frees: Open MPI reuses freed handles, and a
 * new communicator must neither inherit the stats of a freed one nor miss
 * zero-copy. */
static void test_after_free(const footprint_t *base)
{
    MPIX_Zcopy_stats s;
    MPI_Comm comm;
    int bad_zero = 0, bad_path = 0, bad_data = 0;

    MPI_Comm_split(MPI_COMM_WORLD, wrank % 2, -wrank, &comm);
    s = zt_stats(comm);
    ZT_CHECK(stats_zero(&s), "new split after frees: stats not zero at "
             "creation (%llu zero-copy, %llu fallbacks)",
             (unsigned long long)s.zcopy_calls,
             (unsigned long long)s.fallback_calls);
    run_suite(comm, "new split after frees", 20000, true);
    MPI_Comm_free(&comm);

    for (int k = 0; k < NEW_SPLITS; k++) {
        /* Alternately halves and interleaved, so that consecutive splits
         * differ while their handles are likely the same. */
        const bool halves = k % 2;
        int n, want = 0;

        MPI_Comm_split(MPI_COMM_WORLD, halves ? wrank / 2 : wrank % 2, wrank,
                       &comm);
        MPI_Comm_size(comm, &n);
        s = zt_stats(comm);
        bad_zero += !stats_zero(&s);
        for (int r = 0; r < wsize; r++)
            if (halves ? r / 2 == wrank / 2 : r % 2 == wrank % 2)
                want += r + k;
        buf.ar_s[0] = wrank + k;
        if (MPI_Allreduce(buf.ar_s, buf.ar_r, 1, MPI_INT, MPI_SUM, comm) !=
                MPI_SUCCESS ||
            buf.ar_r[0] != want)
            bad_data++;
        s = zt_stats(comm);
        if (n >= 2)
            bad_path += s.zcopy_calls != 1 || s.fallback_calls != 0;
        MPI_Comm_free(&comm);
    }
    ZT_CHECK(bad_zero == 0, "%d of %d new splits did not start from zero "
             "stats", bad_zero, NEW_SPLITS);
    ZT_CHECK(bad_data == 0, "%d of %d allreduces on new splits wrong",
             bad_data, NEW_SPLITS);
    ZT_CHECK(bad_path == 0, "%d of %d allreduces on new splits not "
             "zero-copy", bad_path, NEW_SPLITS);
    check_footprint(base, 0, "after split / free rounds");
}

int main(int argc, char **argv)
{
    const size_t w = (size_t)MAX_COUNT * sizeof(int);
    footprint_t base;
    size_t off = 0;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &wrank);
    MPI_Comm_size(MPI_COMM_WORLD, &wsize);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    if (wsize > MAX_RANKS) {
        fprintf(stderr, "at most %d ranks\n", MAX_RANKS);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }

    /* Activated once, on WORLD, before any other communicator exists. */
    zt_arena_init(&arena, MPI_COMM_WORLD,
                  (5 + 4 * (size_t)wsize) * w + 16 * 64);
    buf.ar_s = zt_arena_alloc(&arena, &off, w);
    buf.ar_r = zt_arena_alloc(&arena, &off, w);
    buf.bc = zt_arena_alloc(&arena, &off, w);
    buf.ag_s = zt_arena_alloc(&arena, &off, w);
    buf.ag_r = zt_arena_alloc(&arena, &off, (size_t)wsize * w);
    buf.a2a_s = zt_arena_alloc(&arena, &off, (size_t)wsize * w);
    buf.a2a_r = zt_arena_alloc(&arena, &off, (size_t)wsize * w);
    buf.rs_s = zt_arena_alloc(&arena, &off, (size_t)wsize * w);
    buf.rs_r = zt_arena_alloc(&arena, &off, w);

    /* WORLD first: it imports every peer's block, so that the footprint
     * below is what WORLD alone holds with everything activated. */
    run_suite(MPI_COMM_WORLD, "WORLD", 1, true);
    base = footprint();
    ZT_CHECK(base.segments == 1 && base.blocks == wsize,
             "WORLD alone: %d control segments, %d zcopy memory mappings "
             "(expected 1 and %d)", base.segments, base.blocks, wsize);

    test_derived(&base);
    test_after_free(&base);

    /* Every rank has checked its footprint before any deactivates: a rank
     * alone in its last split runs ahead, and its deactivation would
     * rightly take its block out of its peers' mappings at their next
     * collective. */
    MPI_Barrier(MPI_COMM_WORLD);
    zt_arena_fini(&arena);
    return zt_finish();
}
