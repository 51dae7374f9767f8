/*
 * Servers and their scope on one machine (SPEC sections 3 and 5), run
 * with coll_zcopy_virtual_servers = V (passed again as --virtual-servers V
 * so the test knows what to expect). Local ranks are cut into V blocks of
 * B = ceil(local size / V); on one host a split with color = rank / B gives
 * exactly the servers.
 *
 *   1. Memory activated on MPI_COMM_WORLD. Collectives on each server's
 *      split, and on a reversed split of that split, run zero-copy through
 *      peer mappings. On WORLD and on an interleaved split they run
 *      zero-copy too: through mappings when V = 1, and also through UCX
 *      (ucx_bytes grows) when they span servers; with --transport-ipc (run
 *      under coll_zcopy_transport=ipc) those fall back with a reason
 *      containing "spans servers" instead, and stay correct.
 *   2. Memory activated by ranks 0 and 1 only, with the range set on their
 *      own split. Collectives there run zero-copy (through UCX if 0 and 1
 *      are on different servers); on a split of ranks 0
 *      and 2, where rank 2's buffers are plain memory and it has nothing
 *      activated, they fall back, on both ranks with the same reason, "no
 *      memory activated on this rank" (rank 2's), whether 0 and 2 share a
 *      server or not (under --transport-ipc, "spans servers" when they do
 *      not).
 *   With --cluster (on an emulated cluster, tests/cluster/), the servers
 *   are real hosts: each is the block of world ranks that share a host
 *   name (mpirun places them by slot), of any size.
 *   3. With --expect-map (run under coll_zcopy_verbose 10): stderr is
 *      captured from before MPI_Init; the first process of each server
 *      printed the server map of MPI_COMM_WORLD exactly once, with its
 *      server's number, scope and ranks; no other process printed one.
 *
 * MPI_COMM_WORLD and every split return errors, so a failing collective is
 * a failed check rather than an abort.
 */
#define _GNU_SOURCE
#include "testutil.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_RANKS 16
#define BIG_COUNT 70000          /* ints: 280 KB, above the small-message
                                    threshold and above what rides with
                                    an arrival between servers (256 KiB;
                                    but an allreduce's where every server
                                    has one rank, up to 512 KiB) */

static int wrank, wsize, virtual_servers = 1;
static bool cluster;                /* --cluster: servers are hosts */
static int nservers;
static int server_idx[MAX_RANKS];   /* world rank -> server */
static int server_first[MAX_RANKS]; /* server -> its first world rank */
static int server_end[MAX_RANKS];   /* server -> one past its last */
static bool transport_ipc;       /* --transport-ipc: coll_zcopy_transport=ipc */

typedef struct {
    int *s, *r;                   /* MAX_RANKS * BIG_COUNT ints each */
} bufs_t;

static const size_t buf_ints = (size_t)MAX_RANKS * BIG_COUNT;

/* --- data and checks ----------------------------------------------------- */

static int val(int salt, int rank, size_t i)
{
    return (int)(((size_t)salt * 7919u + (size_t)rank * 104729u + i * 31u) %
                 1000003u);
}

static bool ok_rc(const char *name, const char *what, int rc)
{
    char msg[MPI_MAX_ERROR_STRING] = "";
    int len = 0;

    if (rc != MPI_SUCCESS && MPI_Error_string(rc, msg, &len) == MPI_SUCCESS)
        msg[len] = '\0';
    return ZT_CHECK(rc == MPI_SUCCESS, "%s: %s failed: %s", name, what, msg);
}

/* Index of the first of @n ints of @got that differs from @want, or -1. */
static long first_bad(const int *got, const int *want, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (got[i] != want[i])
            return (long)i;
    return -1;
}

/* Allreduce, bcast, allgather and alltoall on @comm at two sizes, each
 * checked against values computed here; returns the number of calls. */
static unsigned run_collectives(MPI_Comm comm, const char *name, bufs_t b,
                                int salt)
{
    static int want[MAX_RANKS * BIG_COUNT];
    const size_t counts[] = { 7, BIG_COUNT };
    unsigned calls = 0;
    int n, me;

    MPI_Comm_size(comm, &n);
    MPI_Comm_rank(comm, &me);
    for (size_t k = 0; k < 2; k++) {
        const size_t c = counts[k], all = (size_t)n * c;
        const int root = n - 1;

        for (size_t i = 0; i < c; i++) {
            b.s[i] = val(salt, me, i);
            b.r[i] = -1;
            want[i] = 0;
            for (int j = 0; j < n; j++)
                want[i] += val(salt, j, i);
        }
        calls++;
        if (ok_rc(name, "allreduce", MPI_Allreduce(b.s, b.r, (int)c, MPI_INT,
                                                   MPI_SUM, comm)))
            ZT_CHECK(first_bad(b.r, want, c) < 0, "%s: allreduce of %zu "
                     "wrong at %ld", name, c, first_bad(b.r, want, c));

        for (size_t i = 0; i < c; i++) {
            b.r[i] = me == root ? val(salt + 1, root, i) : -1;
            want[i] = val(salt + 1, root, i);
        }
        calls++;
        if (ok_rc(name, "bcast", MPI_Bcast(b.r, (int)c, MPI_INT, root, comm)))
            ZT_CHECK(first_bad(b.r, want, c) < 0, "%s: bcast of %zu wrong "
                     "at %ld", name, c, first_bad(b.r, want, c));

        for (size_t i = 0; i < c; i++)
            b.s[i] = val(salt + 2, me, i);
        for (size_t i = 0; i < all; i++) {
            b.r[i] = -1;
            want[i] = val(salt + 2, (int)(i / c), i % c);
        }
        calls++;
        if (ok_rc(name, "allgather", MPI_Allgather(b.s, (int)c, MPI_INT, b.r,
                                                   (int)c, MPI_INT, comm)))
            ZT_CHECK(first_bad(b.r, want, all) < 0, "%s: allgather of %zu "
                     "wrong at %ld", name, c, first_bad(b.r, want, all));

        /* Block j of rank me's send buffer goes to rank j. */
        for (size_t i = 0; i < all; i++) {
            b.s[i] = val(salt + 3, me * MAX_RANKS + (int)(i / c), i % c);
            b.r[i] = -1;
            want[i] = val(salt + 3, (int)(i / c) * MAX_RANKS + me, i % c);
        }
        calls++;
        if (ok_rc(name, "alltoall", MPI_Alltoall(b.s, (int)c, MPI_INT, b.r,
                                                 (int)c, MPI_INT, comm)))
            ZT_CHECK(first_bad(b.r, want, all) < 0, "%s: alltoall of %zu "
                     "wrong at %ld", name, c, first_bad(b.r, want, all));
    }
    return calls;
}

typedef enum {
    PATH_MAPPED,                  /* zero-copy inside one server */
    PATH_UCX,                     /* zero-copy, spanning servers */
    PATH_FALLBACK
} path_t;

/* A communicator that spans servers goes through UCX, or, under
 * coll_zcopy_transport=ipc, falls back ("spans servers"). */
static path_t spanning_path(void)
{
    return transport_ipc ? PATH_FALLBACK : PATH_UCX;
}

/* Runs the collectives on @comm and checks the path they took: all
 * zero-copy (moving bytes through UCX exactly when @path says the comm
 * spans servers), or all fallbacks with a reason containing @reason.
 * Returns the stats after the calls. */
static MPIX_Zcopy_stats run_and_check(MPI_Comm comm, const char *name,
                                      bufs_t b, int salt, path_t path,
                                      const char *reason)
{
    const bool zcopy = path != PATH_FALLBACK;
    MPIX_Zcopy_stats s0 = zt_stats(comm), s1;
    unsigned calls = run_collectives(comm, name, b, salt);
    unsigned long long zc, fb;
    int size;

    s1 = zt_stats(comm);
    zc = s1.zcopy_calls - s0.zcopy_calls;
    fb = s1.fallback_calls - s0.fallback_calls;
    MPI_Comm_size(comm, &size);
    if (size == 1) {
        /* A server of one rank: zcopy is not selected on such a
         * communicator, stock runs it. */
        ZT_CHECK(zc == 0 && fb == 0, "%s: one rank, yet zcopy counted %llu "
                 "calls and %llu fallbacks", name, zc, fb);
    } else if (zcopy) {
        ZT_CHECK(zc == calls && fb == 0, "%s: %llu of %u collectives "
                 "zero-copy, %llu fallbacks (last: %s)", name, zc, calls, fb,
                 s1.last_fallback_reason);
        if (path == PATH_UCX)
            ZT_CHECK(s1.ucx_bytes > s0.ucx_bytes, "%s: spans servers but no "
                     "bytes moved through UCX", name);
        else
            ZT_CHECK(s1.ipc_bytes > s0.ipc_bytes && s1.ucx_bytes == s0.ucx_bytes,
                     "%s: expected bytes through peer mappings only (ipc +%llu, "
                     "ucx +%llu)", name,
                     (unsigned long long)(s1.ipc_bytes - s0.ipc_bytes),
                     (unsigned long long)(s1.ucx_bytes - s0.ucx_bytes));
    } else {
        ZT_CHECK(zc == 0 && fb == calls, "%s: %llu of %u collectives fell "
                 "back, %llu zero-copy", name, fb, calls, zc);
        ZT_CHECK(strstr(s1.last_fallback_reason, reason) != NULL,
                 "%s: last fallback reason \"%s\", expected \"%s\"", name,
                 s1.last_fallback_reason, reason);
    }
    return s1;
}

static MPI_Comm split(MPI_Comm comm, int color, int key)
{
    MPI_Comm out = MPI_COMM_NULL;

    ZT_CHECK(MPI_Comm_split(comm, color, key, &out) == MPI_SUCCESS,
             "MPI_Comm_split failed");
    return out;
}

static int server_of(int world_rank) { return server_idx[world_rank]; }

/* Virtual servers: blocks of ceil(size / V) world ranks. A cluster: the
 * blocks of ranks with one host name, which must be contiguous. */
static void find_servers(void)
{
    const int block = (wsize + virtual_servers - 1) / virtual_servers;
    char names[MAX_RANKS][MPI_MAX_PROCESSOR_NAME] = { { 0 } };
    char mine[MPI_MAX_PROCESSOR_NAME] = { 0 };
    int len;

    MPI_Get_processor_name(mine, &len);
    MPI_Allgather(mine, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, names,
                  MPI_MAX_PROCESSOR_NAME, MPI_CHAR, MPI_COMM_WORLD);
    nservers = 0;
    for (int r = 0; r < wsize; r++) {
        bool next = cluster ? r > 0 && strcmp(names[r], names[r - 1]) != 0
                            : r > 0 && r % block == 0;

        if (r == 0 || next)
            server_first[nservers++] = r;
        server_idx[r] = nservers - 1;
        server_end[nservers - 1] = r + 1;
        for (int q = 0; cluster && next && q < server_first[nservers - 1]; q++)
            ZT_CHECK(strcmp(names[q], names[r]) != 0, "ranks of host %s are "
                     "not contiguous", names[r]);
    }
}

/* The local rank Open MPI gives world rank @r. */
static int local_rank_of(int r)
{
    return cluster ? r - server_first[server_of(r)] : r;
}

/* Whether the world ranks of parity @parity are on more than one server. */
static bool parity_spans_servers(int parity)
{
    for (int r = parity + 2; r < wsize; r += 2)
        if (server_of(r) != server_of(parity))
            return true;
    return false;
}

/* --- 1. activation on WORLD ---------------------------------------------- */

static void test_world_activation(void)
{
    const bool split_servers = nservers > 1;
    MPI_Comm server, reversed, interleaved;
    const char *local = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    size_t off = 0;
    zt_arena_t arena;
    bufs_t b;

    /* The servers are blocks of world ranks, which is what the splits
     * below rely on (on one host the local rank is the world rank). */
    ZT_CHECK(local != NULL && atoi(local) == local_rank_of(wrank),
             "local rank %s, world rank %d: expected local rank %d", local,
             wrank, local_rank_of(wrank));

    zt_arena_init(&arena, MPI_COMM_WORLD, 2 * buf_ints * sizeof(int));
    b.s = zt_arena_alloc(&arena, &off, buf_ints * sizeof(int));
    b.r = zt_arena_alloc(&arena, &off, buf_ints * sizeof(int));

    server = split(MPI_COMM_WORLD, server_of(wrank), wrank);
    run_and_check(server, "server split", b, 10, PATH_MAPPED, NULL);

    /* A split of the split, in reverse rank order. */
    reversed = split(server, 0, -wrank);
    run_and_check(reversed, "reversed split of the server split", b, 20,
                  PATH_MAPPED, NULL);

    run_and_check(MPI_COMM_WORLD, "MPI_COMM_WORLD", b, 30,
                  split_servers ? spanning_path() : PATH_MAPPED,
                  "spans servers");

    /* Even and odd ranks: each spans servers unless there is just one. */
    interleaved = split(MPI_COMM_WORLD, wrank % 2, wrank);
    if (wsize > 2)
        run_and_check(interleaved, "interleaved split", b, 40,
                      parity_spans_servers(wrank % 2) ? spanning_path()
                                                      : PATH_MAPPED,
                      "spans servers");

    MPI_Comm_free(&interleaved);
    MPI_Comm_free(&reversed);
    MPI_Comm_free(&server);
    zt_arena_fini(&arena);
}

/* --- 2. activation by ranks 0 and 1 only --------------------------------- */

static void test_partial_activation(void)
{
    MPI_Comm pair01, pair02;
    zt_arena_t arena;
    int *plain = NULL;
    size_t off = 0;
    bufs_t b;

    pair01 = split(MPI_COMM_WORLD, wrank < 2 ? 0 : MPI_UNDEFINED, wrank);
    if (pair01 != MPI_COMM_NULL) {
        zt_arena_init(&arena, pair01, 2 * buf_ints * sizeof(int));
        b.s = zt_arena_alloc(&arena, &off, buf_ints * sizeof(int));
        b.r = zt_arena_alloc(&arena, &off, buf_ints * sizeof(int));
        run_and_check(pair01, "ranks 0,1 (activated on their split)", b, 50,
                      server_of(0) != server_of(1) ? spanning_path()
                                                   : PATH_MAPPED,
                      "spans servers");
    } else {
        plain = malloc(2 * buf_ints * sizeof(int));
        ZT_CHECK(plain != NULL, "out of memory");
        b.s = plain;
        b.r = plain + buf_ints;
    }

    pair02 = split(MPI_COMM_WORLD, wrank == 0 || wrank == 2 ? 0 : MPI_UNDEFINED,
                   wrank);
    if (pair02 != MPI_COMM_NULL) {
        int pair_size;
        const char *why = transport_ipc && server_of(0) != server_of(2)
                              ? "spans servers"
                              : "no memory activated on this rank";
        char mine[64], theirs[2][64];
        MPIX_Zcopy_stats s;

        s = run_and_check(pair02, "ranks 0,2 (2 not activated)", b, 60,
                          PATH_FALLBACK, why);
        /* Copied out first: the exchange below falls back too and would
         * overwrite the reason. */
        snprintf(mine, sizeof(mine), "%s", s.last_fallback_reason);
        /* With two ranks in all, rank 0 is alone in it. */
        MPI_Comm_size(pair02, &pair_size);
        MPI_Allgather(mine, sizeof(mine), MPI_CHAR, theirs, sizeof(mine),
                      MPI_CHAR, pair02);
        if (pair_size == 2)
            ZT_CHECK(strcmp(theirs[0], theirs[1]) == 0, "ranks 0 and 2 fell "
                     "back for different reasons: \"%s\" and \"%s\"",
                     theirs[0], theirs[1]);
        MPI_Comm_free(&pair02);
    }

    if (pair01 != MPI_COMM_NULL) {
        zt_arena_fini(&arena);
        MPI_Comm_free(&pair01);
    }
    free(plain);
}

/* --- 3. the server map ---------------------------------------------------- */

static int count_of(const char *text, const char *what)
{
    int n = 0;

    for (const char *p = text; (p = strstr(p, what)) != NULL; p++)
        n++;
    return n;
}

static void check_server_map(const char *text)
{
    const int servers = nservers, mine = server_of(wrank);
    const int first = server_first[mine], last = server_end[mine];
    const bool leader = wrank == first;
    char want[256];
    size_t len;

    ZT_CHECK(count_of(text, "server map of") == (leader ? 1 : 0),
             "rank %d printed %d server maps, expected %d", wrank,
             count_of(text, "server map of"), leader ? 1 : 0);
    if (!leader)
        return;
    snprintf(want, sizeof(want), "server map of MPI_COMM_WORLD (%d ranks, "
             "%d server%s): server %d of %d,", wsize, servers,
             servers == 1 ? "" : "s", mine + 1, servers);
    ZT_CHECK(strstr(text, want) != NULL, "no \"%s\" in the map", want);

    len = (size_t)snprintf(want, sizeof(want), "scope: the job's %d processes "
                           "on this server = ranks", last - first);
    for (int r = first; r < last; r++)
        len += (size_t)snprintf(want + len, sizeof(want) - len, " %d", r);
    snprintf(want + len, sizeof(want) - len, " of MPI_COMM_WORLD");
    ZT_CHECK(strstr(text, want) != NULL, "no \"%s\" in the map", want);

    ZT_CHECK(strstr(text, "  NUMA nodes: ") != NULL, "no NUMA nodes line");
    ZT_CHECK(strstr(text, "  GPUs: ") != NULL, "no GPUs line");
    for (int r = 0; r < wsize; r++) {
        snprintf(want, sizeof(want), "  rank %d: local rank %d, nearest NUMA "
                 "node ", r, local_rank_of(r));
        ZT_CHECK((strstr(text, want) != NULL) == (r >= first && r < last),
                 "rank %d is %s the map of server %d", r,
                 r >= first && r < last ? "missing from" : "wrongly in",
                 mine + 1);
    }
}

int main(int argc, char **argv)
{
    bool expect_map = false;
    const char *text;

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--virtual-servers") == 0 && i + 1 < argc)
            virtual_servers = atoi(argv[++i]);
        else if (strcmp(argv[i], "--expect-map") == 0)
            expect_map = true;
        else if (strcmp(argv[i], "--transport-ipc") == 0)
            transport_ipc = true;
        else if (strcmp(argv[i], "--cluster") == 0)
            cluster = true;
    }
    /* Before MPI_Init: the map is printed at the first setup of WORLD,
     * which nothing guarantees to come after it. */
    if (expect_map)
        zt_stderr_capture();
    MPI_Init(&argc, &argv);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &wrank);
    MPI_Comm_size(MPI_COMM_WORLD, &wsize);
    if (wsize > MAX_RANKS || virtual_servers < 1) {
        fprintf(stderr, "at most %d ranks and at least 1 virtual server\n",
                MAX_RANKS);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    find_servers();

    test_world_activation();
    test_partial_activation();

    if (expect_map) {
        /* Every setup above is done: a second map would be in by now. */
        MPI_Barrier(MPI_COMM_WORLD);
        text = zt_stderr_release();
        check_server_map(text);
    }
    return zt_finish();
}
