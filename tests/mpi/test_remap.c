/*
 * Remapping activated memory, and what peers keep of it (SPEC section 3).
 *
 *  1. remap: one range on MPI_COMM_WORLD; each cycle creates a handle, maps
 *     it at the SAME address, fills it with data of that cycle, activates
 *     it, runs allreduce / allgather / bcast / alltoall, then deactivates,
 *     unmaps and frees it. Every cycle's collectives must see the new
 *     memory on every rank (a peer still reading the previous handle's
 *     pages through a cached import returns the previous cycle's data) and
 *     run zero-copy. Half the cycles remap with no collective in between.
 *  2. release: after rank v deactivates, unmaps and frees its handle and
 *     every peer has run one more collective (on another communicator),
 *     no peer maps v's pages any more: /proc/self/maps lines of zcopy
 *     memory go back to own blocks + peers' blocks still activated.
 *  3. churn: 500 activate / collective / deactivate cycles of one handle
 *     grow neither file descriptors nor mappings.
 *  4. span: two handles mapped back to back in one range, both activated;
 *     a buffer across the boundary reduces zero-copy and correctly.
 *  5. teardown: fds and mappings are back where they started.
 *
 * MPI_COMM_WORLD returns errors, so that a collective zcopy cannot run is
 * a failed check instead of an abort.
 */
#define _GNU_SOURCE
#include "testutil.h"
#include "../common/proc.h"

#include <dirent.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define REMAP_CYCLES 50
#define CHURN_CYCLES 500
#define MAX_COUNT 8192           /* ints per buffer: up to 32 KiB, on both
                                    sides of the small-message threshold */
#define NBUF_UNITS 16            /* MAX_COUNT-int units per block (np <= 4) */
#define SPAN_BYTES (64u << 10)   /* each of the two adjacent blocks */

static const zcopy_mem_prop_t host = { .kind = ZCOPY_MEM_HOST, .device = -1 };
static int rank, nranks;
static size_t gran, block_bytes, span_bytes;
/* Ints just above coll_zcopy_inline_max: smaller calls copy through the
 * control plane and never touch the mappings this test inspects. */
static size_t min_count;
static char *res;                 /* the reservation, set as a range */
static MPI_Comm other;            /* dup of WORLD with zcopy: "any comm" */
static MPI_Comm quiet;            /* dup of WORLD without zcopy: ordering */

static size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

/* --- what the process holds ---------------------------------------------- */

static int block_maps(void) { return proc_count_maps("/memfd:zcopy (deleted)"); }

/* Orders "every rank has done its local step" before what follows, through
 * a communicator zcopy is off on, so the ordering itself sweeps nothing:
 * the collective after it is the one that must. */
static void everyone_done(void) { MPI_Barrier(quiet); }

/* --- data ---------------------------------------------------------------- */

/* Small enough that a sum over four ranks stays exact in an int. */
static int val(int salt, int r, size_t i)
{
    return (int)(((size_t)salt * 7919u + (size_t)r * 104729u + i * 31u) %
                  1000003u);
}

/* What rank @from sends to rank @to at index @i in the alltoall. */
static int pairval(int salt, int from, int to, size_t i)
{
    return val(salt, from * 16 + to, i);
}

typedef struct {
    int *ar_s, *ar_r, *ag_s, *ag_r, *bc, *a2a_s, *a2a_r;
} bufs_t;

/* Fixed offsets inside the block, so that every cycle uses the very same
 * addresses: a peer's cached translation is only wrong if they repeat. */
static bufs_t layout(char *block)
{
    int *u = (int *)block;
    const size_t n = (size_t)nranks;

    return (bufs_t){ .ar_s = u, .ar_r = u + MAX_COUNT,
                     .ag_s = u + 2 * MAX_COUNT, .bc = u + 3 * MAX_COUNT,
                     .ag_r = u + 4 * MAX_COUNT,
                     .a2a_s = u + (4 + n) * MAX_COUNT,
                     .a2a_r = u + (4 + 2 * n) * MAX_COUNT };
}

/* The expected allreduce result at index @i: the sum over every rank. */
static int sum_val(int salt, size_t i)
{
    int sum = 0;

    for (int r = 0; r < nranks; r++)
        sum += val(salt, r, i);
    return sum;
}

/* @where: the cycle, or -1 outside the cycles. */
static bool check_rc(int rc, int where, const char *what)
{
    char msg[MPI_MAX_ERROR_STRING] = "";
    int len = 0;

    if (rc != MPI_SUCCESS && MPI_Error_string(rc, msg, &len) == MPI_SUCCESS)
        msg[len] = '\0';
    if (where < 0)
        return ZT_CHECK(rc == MPI_SUCCESS, "%s failed: %s", what, msg);
    return ZT_CHECK(rc == MPI_SUCCESS, "cycle %d: %s failed: %s", where, what,
                    msg);
}

/* Fills the block's inputs from @salt, runs the four collectives on WORLD
 * and checks every output and that all four ran zero-copy. */
static void run_suite(char *block, size_t count, int salt, int cycle)
{
    const bufs_t b = layout(block);
    const size_t n = (size_t)nranks;
    const int root = salt % nranks;
    MPIX_Zcopy_stats s0, s1;
    long bad;

    for (size_t i = 0; i < count; i++) {
        b.ar_s[i] = val(salt, rank, i);
        b.ag_s[i] = val(salt + 1, rank, i);
        b.bc[i] = rank == root ? val(salt + 2, root, i) : -1;
        b.ar_r[i] = -7;
    }
    for (size_t j = 0; j < n; j++)
        for (size_t i = 0; i < count; i++) {
            b.a2a_s[j * count + i] = pairval(salt, rank, (int)j, i);
            b.a2a_r[j * count + i] = -7;
            b.ag_r[j * count + i] = -7;
        }

    s0 = zt_stats(MPI_COMM_WORLD);
    if (check_rc(MPI_Allreduce(b.ar_s, b.ar_r, (int)count, MPI_INT, MPI_SUM,
                               MPI_COMM_WORLD), cycle, "allreduce")) {
        ZT_FIND_BAD(bad, b.ar_r, count, sum_val(salt, i));
        ZT_CHECK(bad < 0, "cycle %d: allreduce of %zu ints wrong at %ld",
                 cycle, count, bad);
    }
    if (check_rc(MPI_Allgather(b.ag_s, (int)count, MPI_INT, b.ag_r,
                               (int)count, MPI_INT, MPI_COMM_WORLD),
                 cycle, "allgather")) {
        ZT_FIND_BAD(bad, b.ag_r, n * count,
                 val(salt + 1, (int)(i / count), i % count));
        ZT_CHECK(bad < 0, "cycle %d: allgather of %zu ints wrong at %ld",
                 cycle, count, bad);
    }
    if (check_rc(MPI_Bcast(b.bc, (int)count, MPI_INT, root, MPI_COMM_WORLD),
                 cycle, "bcast")) {
        ZT_FIND_BAD(bad, b.bc, count, val(salt + 2, root, i));
        ZT_CHECK(bad < 0, "cycle %d: bcast of %zu ints from %d wrong at %ld",
                 cycle, count, root, bad);
    }
    if (check_rc(MPI_Alltoall(b.a2a_s, (int)count, MPI_INT, b.a2a_r,
                              (int)count, MPI_INT, MPI_COMM_WORLD),
                 cycle, "alltoall")) {
        ZT_FIND_BAD(bad, b.a2a_r, n * count,
                 pairval(salt, (int)(i / count), rank, i % count));
        ZT_CHECK(bad < 0, "cycle %d: alltoall of %zu ints wrong at %ld",
                 cycle, count, bad);
    }
    s1 = zt_stats(MPI_COMM_WORLD);
    ZT_CHECK(s1.zcopy_calls - s0.zcopy_calls == 4 &&
                 s1.fallback_calls == s0.fallback_calls,
             "cycle %d: %llu of 4 collectives zero-copy, %llu fallbacks "
             "(last: %s)", cycle,
             (unsigned long long)(s1.zcopy_calls - s0.zcopy_calls),
             (unsigned long long)(s1.fallback_calls - s0.fallback_calls),
             s1.last_fallback_reason);
    ZT_CHECK(s1.ipc_bytes > s0.ipc_bytes,
             "cycle %d: no bytes moved through peer mappings", cycle);
}

/* A handle of @bytes mapped at @va and activated there. */
static zcopy_mem_handle_t activate_new(void *va, size_t bytes)
{
    zcopy_mem_handle_t h;

    zt_require(zcopy_mem_create(&h, bytes, &host, 0) == ZCOPY_SUCCESS,
               "create");
    zt_require(zcopy_mem_map(va, bytes, 0, h, 0) == ZCOPY_SUCCESS, "map");
    zt_require(MPIX_Comm_activate_memory(MPI_COMM_WORLD, va, bytes, 0, h, 0) ==
               MPI_SUCCESS, "activate");
    return h;
}

/* The whole inverse: afterwards the pages live only in peers' imports. */
static void release(void *va, zcopy_mem_handle_t h)
{
    zt_require(MPIX_Comm_deactivate_memory(MPI_COMM_WORLD, va) == MPI_SUCCESS,
               "deactivate");
    zt_require(zcopy_mem_unmap(va) == ZCOPY_SUCCESS, "unmap");
    zt_require(zcopy_mem_free(h) == ZCOPY_SUCCESS, "free");
}

/* --- 1. remap at the same address ---------------------------------------- */

static void test_remap(int fd0)
{
    int bad_maps = 0, bad_fds = 0, maps = 0, fds = 0;

    for (int k = 0; k < REMAP_CYCLES; k++) {
        /* Sizes on both sides of the small-message threshold, but above
         * the inline limit, so the data goes through the mappings this
         * test inspects; data, root and size all change from one handle
         * to the next. */
        size_t count = min_count + ((size_t)k * 2477u) %
                                       (MAX_COUNT - min_count + 1);
        zcopy_mem_handle_t h = activate_new(res, block_bytes);

        run_suite(res, count, 10 * k + 1, k);
        /* Own block plus at most each peer's current one: the previous
         * handles' imports must be gone. (A peer's current one may be gone
         * too: one that left the last sync first may have released it
         * already, seen by this rank's own wait.) */
        maps = block_maps();
        if ((maps < 1 || maps > nranks) && bad_maps++ == 0)
            ZT_CHECK(false, "cycle %d: %d zcopy memory mappings, expected 1 "
                     "to %d (own block + one per peer)", k, maps, nranks);
        release(res, h);
        fds = proc_count_fds();
        if (fds != fd0 && bad_fds++ == 0)
            ZT_CHECK(false, "cycle %d: %d fds after free, %d at start", k,
                     fds, fd0);
        /* Odd cycles: a collective on another comm between the free and
         * the next activation; even cycles: none, the remap is seen only
         * when the next collective arrives. */
        if (k & 1)
            MPI_Barrier(other);
    }
    ZT_CHECK(bad_maps == 0, "%d of %d cycles with stale or missing mappings",
             bad_maps, REMAP_CYCLES);
    ZT_CHECK(bad_fds == 0, "%d of %d cycles leaked fds", bad_fds,
             REMAP_CYCLES);
}

/* --- 2. pages released once every peer ran one more collective ----------- */

static void test_release(void)
{
    zcopy_mem_handle_t h = activate_new(res, block_bytes);
    int maps;

    for (int v = 0; v < nranks; v++) {
        run_suite(res, min_count, 1000 + v, 1000 + v);
        maps = block_maps();
        ZT_CHECK(maps == nranks, "victim %d, before: %d mappings, expected %d",
                 v, maps, nranks);
        if (rank == v)
            release(res, h);
        everyone_done();
        /* Each peer's one more collective: on a communicator zcopy runs on,
         * or, every other victim, on one that opted out of zcopy (its
         * collectives must release freed pages too). */
        MPI_Barrier(v % 2 ? quiet : other);
        /* v: its peers' blocks; the others: their own and n - 2 peers'. */
        maps = block_maps();
        ZT_CHECK(maps == nranks - 1,
                 "rank %d freed its handle and every rank ran a collective "
                 "since, yet %d zcopy mappings remain here, expected %d", v,
                 maps, nranks - 1);
        if (rank == v)
            h = activate_new(res, block_bytes);
    }

    /* Everyone releases: nothing of anyone may stay mapped anywhere. */
    run_suite(res, min_count, 2000, 2000);
    release(res, h);
    everyone_done();
    MPI_Barrier(other);
    maps = block_maps();
    ZT_CHECK(maps == 0, "every rank freed its handle and ran a collective "
             "since, yet %d zcopy mappings remain", maps);
}

/* --- 3. activation churn ------------------------------------------------- */

static void test_churn(int fd0)
{
    const size_t count = min_count; /* through the mappings */
    const bufs_t b = layout(res);
    int bad_rc = 0, bad_data = 0, bad_maps = 0, maps, fds;
    zcopy_mem_handle_t h;
    long bad;
    MPIX_Zcopy_stats s0, s1;

    zt_require(zcopy_mem_create(&h, block_bytes, &host, 0) == ZCOPY_SUCCESS,
               "create");
    zt_require(zcopy_mem_map(res, block_bytes, 0, h, 0) == ZCOPY_SUCCESS,
               "map");
    s0 = zt_stats(MPI_COMM_WORLD);
    for (int k = 0; k < CHURN_CYCLES; k++) {
        for (size_t i = 0; i < count; i++)
            b.ag_s[i] = val(k, rank, i);
        zt_require(MPIX_Comm_activate_memory(MPI_COMM_WORLD, res, block_bytes,
                   0, h, 0) == MPI_SUCCESS, "activate");
        /* Allgather reads every peer's block: a fresh import each cycle,
         * since each activation is a new generation. */
        if (MPI_Allgather(b.ag_s, (int)count, MPI_INT, b.ag_r, (int)count,
                          MPI_INT, MPI_COMM_WORLD) != MPI_SUCCESS) {
            bad_rc++;
        } else {
            ZT_FIND_BAD(bad, b.ag_r, (size_t)nranks * count,
                     val(k, (int)(i / count), i % count));
            bad_data += bad >= 0;
        }
        /* Own block plus at most one import per peer, never a stale one
         * on top. Fewer is right too: a peer that passed the last sync
         * first may have deactivated already, and the sweep this rank's
         * own wait runs from the progress loop lets its block go. */
        maps = block_maps();
        if (maps < 1 || maps > nranks)
            bad_maps++;
        zt_require(MPIX_Comm_deactivate_memory(MPI_COMM_WORLD, res) ==
                   MPI_SUCCESS, "deactivate");
    }
    s1 = zt_stats(MPI_COMM_WORLD);
    ZT_CHECK(bad_rc == 0, "%d of %d churn allgathers failed", bad_rc,
             CHURN_CYCLES);
    ZT_CHECK(bad_data == 0, "%d of %d churn allgathers gave wrong data",
             bad_data, CHURN_CYCLES);
    ZT_CHECK(bad_maps == 0, "%d of %d churn cycles had a mapping count "
             "outside 1..%d", bad_maps, CHURN_CYCLES, nranks);
    ZT_CHECK(s1.zcopy_calls - s0.zcopy_calls == CHURN_CYCLES &&
                 s1.fallback_calls == s0.fallback_calls,
             "churn: %llu of %d allgathers zero-copy (last fallback: %s)",
             (unsigned long long)(s1.zcopy_calls - s0.zcopy_calls),
             CHURN_CYCLES, s1.last_fallback_reason);

    everyone_done();
    MPI_Barrier(other);
    maps = block_maps();
    fds = proc_count_fds();
    ZT_CHECK(maps == 1, "after churn: %d zcopy mappings, expected 1 (own, "
             "still mapped)", maps);
    ZT_CHECK(fds == fd0 + 1, "after churn: %d fds, expected %d (start + the "
             "handle)", fds, fd0 + 1);
    zt_require(zcopy_mem_unmap(res) == ZCOPY_SUCCESS, "unmap");
    zt_require(zcopy_mem_free(h) == ZCOPY_SUCCESS, "free");
}

/* --- 4. a buffer across two adjacent blocks ------------------------------ */

/* Allreduce of @count ints from @in (NULL: in place) into @out, on data of
 * @salt; checks the result and that it ran zero-copy. */
static void span_allreduce(int *in, int *out, size_t count, int salt,
                           const char *what)
{
    MPIX_Zcopy_stats s0 = zt_stats(MPI_COMM_WORLD), s1;
    int *fill = in != NULL ? in : out;
    long bad;
    int rc;

    for (size_t i = 0; i < count; i++)
        fill[i] = val(salt, rank, i);
    rc = MPI_Allreduce(in != NULL ? in : MPI_IN_PLACE, out, (int)count,
                       MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    s1 = zt_stats(MPI_COMM_WORLD);
    if (!check_rc(rc, -1, what))
        return;
    ZT_FIND_BAD(bad, out, count, sum_val(salt, i));
    ZT_CHECK(bad < 0, "%s of %zu ints wrong at %ld", what, count, bad);
    ZT_CHECK(s1.zcopy_calls == s0.zcopy_calls + 1 &&
                 s1.fallback_calls == s0.fallback_calls,
             "%s not zero-copy (last fallback: %s)", what,
             s1.last_fallback_reason);
}

static void test_span(void)
{
    char *boundary = res + span_bytes;
    zcopy_mem_handle_t ha = activate_new(res, span_bytes);
    zcopy_mem_handle_t hb = activate_new(boundary, span_bytes);
    /* Half a block across the boundary, above the small-message threshold
     * so the reduction is sliced among the ranks; shifted by a few cache
     * lines so that the boundary falls inside a slice, not between two. */
    const size_t mid = span_bytes / 2 / sizeof(int);
    int *across = (int *)(boundary - span_bytes / 4 - 192);
    int *out = (int *)(boundary + span_bytes / 4);
    /* Nearly both blocks whole, in place. */
    int *wide = (int *)(res + 320);
    const size_t wide_count = (2 * span_bytes - 640) / sizeof(int);
    int activated = 0, maps;

    MPIX_Zcopy_query(MPI_COMM_WORLD, across, mid * sizeof(int), &activated);
    ZT_CHECK(activated, "a buffer across two adjacent activated blocks is "
             "not reported activated");
    span_allreduce(across, out, mid, 3001,
                   "allreduce, send buffer across the boundary");
    span_allreduce((int *)boundary - 8, out, 16, 3002,
                   "small allreduce, send buffer across the boundary");
    span_allreduce(NULL, wide, wide_count, 3003,
                   "in-place allreduce across the boundary");
    /* Each peer's two blocks were imported, adjacent in one mirror. */
    maps = block_maps();
    ZT_CHECK(maps == 2 * nranks, "span: %d zcopy mappings, expected %d", maps,
             2 * nranks);
    release(boundary, hb);
    release(res, ha);
}

int main(int argc, char **argv)
{
    int fd0, maps, fds, n;
    MPI_Info info;
    void *p;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    min_count = zt_cvar_ulong("coll_zcopy_inline_max", 48) / sizeof(int) + 1;

    zt_require(zcopy_mem_granularity(&host, &gran) == ZCOPY_SUCCESS,
               "granularity");
    block_bytes = round_up(NBUF_UNITS * MAX_COUNT * sizeof(int), gran);
    span_bytes = round_up(SPAN_BYTES, gran);
    zt_require(4 + 3 * (size_t)nranks <= NBUF_UNITS, "at most 4 ranks");
    zt_require(zcopy_mem_reserve(&p, block_bytes + 2 * span_bytes, 0, NULL, 0)
               == ZCOPY_SUCCESS, "reserve");
    res = p;
    zt_require(MPIX_Comm_set_memory_range(MPI_COMM_WORLD, res, block_bytes + 2
               * span_bytes, 0, 0) == MPI_SUCCESS, "set range");

    MPI_Comm_dup(MPI_COMM_WORLD, &other);
    MPI_Info_create(&info);
    MPI_Info_set(info, MPIX_ZCOPY_INFO_KEY, "false");
    MPI_Comm_dup_with_info(MPI_COMM_WORLD, info, &quiet);
    MPI_Info_free(&info);

    /* Warm up whatever MPI and zcopy open once per process (connections,
     * zcopy's export table, peers' pidfds), so that fd0 is the level to
     * which every later step must return. */
    {
        int *heap = calloc((size_t)nranks * 2, sizeof(int));
        MPI_Alltoall(heap, 1, MPI_INT, heap + nranks, 1, MPI_INT, quiet);
        MPI_Alltoall(heap, 1, MPI_INT, heap + nranks, 1, MPI_INT,
                     MPI_COMM_WORLD);
        free(heap);
        MPI_Barrier(MPI_COMM_WORLD);
        MPI_Barrier(other);
        MPI_Barrier(quiet);
    }
    fd0 = proc_count_fds();
    maps = block_maps();
    ZT_CHECK(fd0 > 0 && maps == 0, "start: %d fds, %d zcopy mappings", fd0,
             maps);

    test_remap(fd0);
    test_release();
    test_churn(fd0);
    test_span();

    zt_require(MPIX_Comm_unset_memory_range(MPI_COMM_WORLD, res) ==
               MPI_SUCCESS, "unset range");
    zt_require(zcopy_mem_release(res) == ZCOPY_SUCCESS, "release");
    everyone_done();
    MPI_Comm_free(&other);
    MPI_Comm_free(&quiet);
    MPI_Barrier(MPI_COMM_WORLD); /* the last collective */
    fds = proc_count_fds();
    maps = block_maps();
    n = proc_count_maps("/memfd:zcopy-ctl");
    ZT_CHECK(fds == fd0, "end: %d fds, %d at start", fds, fd0);
    ZT_CHECK(maps == 0, "end: %d zcopy memory mappings remain", maps);
    ZT_CHECK(n == 1, "end: %d control segments mapped, expected 1 (WORLD's; "
             "the dups' went with MPI_Comm_free)", n);
    return zt_finish();
}
