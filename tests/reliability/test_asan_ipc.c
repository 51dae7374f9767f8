/*
 * Memory hygiene of a whole zero-copy exchange (issue 7, 2). This program
 * is built with AddressSanitizer, LeakSanitizer and UBSan together with
 * every source of libzcopy, and runs on 2 ranks without the coll
 * component (mca_coll_zcopy.so is not sanitized and would bring the
 * shared libzcopy with a second registry): it drives zcopy itself.
 *
 *  1. the MPIX and memory calls: reserve, set range, create, map,
 *     activate (which publishes the block in the export table);
 *  2. peer mapping: each rank's {pid, table fd, inode} and block address
 *     go round with MPI_Allgather; each rank imports every peer's block
 *     (zcopy_ipc_peer_get / zcopy_ipc_peer_map), checks its bytes and
 *     writes its own mark into it; after every owner deactivates, a sweep
 *     drops the imports, and the last put drops the peers;
 *  3. the collective algorithms of libzcopy (control plane, allreduce
 *     small and sliced, allgather, bcast, alltoall, reduce_scatter_block,
 *     an alltoallv of a few bytes per pair)
 *     through zcopy_coll_run on a communicator state made here, with
 *     service collectives on a dup of WORLD: right results, zero-copy;
 *  4. teardown of everything, then MPI_Finalize.
 * Any finding of the sanitizers aborts the rank and fails the job; leaks
 * are checked at exit (Open MPI's own, at MPI_Finalize, are suppressed by
 * asan.supp, by library).
 *
 * `test_asan_ipc ucx` runs step 3 with coll_zcopy_transport=ucx: every
 * collective takes the spanning path (src/coll/span/) with no payload in
 * the arrivals, so UCX registers the block, peers fetch its key and the
 * data moves by UCX transfers, all under the sanitizers.
 *
 * `test_asan_ipc vservers` (np 4) runs it between two virtual servers with
 * the spanning path's defaults: small payloads ride the arrivals; and an
 * alltoallv in place on rank 0 alone, which must fall back.
 *
 * `test_asan_ipc overflow` and `test_asan_ipc leak` make one deliberate
 * error each on rank 1, after the exchange: the suite runs them too and
 * expects the sanitizer's report, which proves the set-up would catch one.
 */
#include "coll/coll.h"
#include "ipc/ipc.h"
#include "registry/registry.h"
#include "ucx/ucx.h"

#include <mpix_zcopy.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BLOCK_INTS (64 * 1024) /* 256 KiB: room for every buffer below */
#define BIG 20000              /* ints: above the small-message threshold */

static int rank, nranks, failures;
static MPI_Comm service;         /* libzcopy's own setup collectives */

#define EXPECT(_cond, ...)                                                   \
    do {                                                                     \
        if (!(_cond)) {                                                      \
            failures++;                                                      \
            fprintf(stderr, "[rank %d] %s:%d: ", rank, __FILE__, __LINE__);  \
            fprintf(stderr, __VA_ARGS__);                                    \
            fputc('\n', stderr);                                             \
        }                                                                    \
    } while (0)

static void require(bool ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "[rank %d] %s failed: %s\n", rank, what,
                zcopy_mem_last_error());
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
}

/* The shared libzcopy and the components must not be in this process. */
static void only_this_copy(void)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[4096];

    while (f && fgets(line, sizeof(line), f))
        require(!strstr(line, "libzcopy.so") && !strstr(line, "_zcopy.so"),
                "running without the shared libzcopy");
    if (f)
        fclose(f);
}

/* --- 2. peer mapping ----------------------------------------------------- */

typedef struct {
    zcopy_ipc_id_t id;
    uint64_t va;
} rank_info_t;

static uint8_t mark(int owner, size_t i) { return (uint8_t)(owner * 31 + i * 7); }

static void peer_mapping(uint8_t *block, size_t bytes)
{
    rank_info_t mine = { .va = (uintptr_t)block }, *all;
    zcopy_ipc_peer_t **peers;
    uint8_t **maps;
    size_t npeers, nimports;
    int bad = 0;

    for (size_t i = 0; i < bytes; i++)
        block[i] = mark(rank, i);
    require(zcopy_ipc_local_id(&mine.id) == ZCOPY_SUCCESS, "local id");
    all = calloc((size_t)nranks, sizeof(*all));
    peers = calloc((size_t)nranks, sizeof(*peers));
    maps = calloc((size_t)nranks, sizeof(*maps));
    require(all != NULL && peers != NULL && maps != NULL, "out of memory");
    MPI_Allgather(&mine, sizeof(mine), MPI_BYTE, all, sizeof(mine), MPI_BYTE,
                  MPI_COMM_WORLD);

    for (int r = 0; r < nranks; r++) {
        uint8_t *p = NULL;
        zcopy_status_t st;

        if (r == rank)
            continue;
        st = zcopy_ipc_peer_get(&all[r].id, &peers[r]);
        EXPECT(st == ZCOPY_SUCCESS, "peer_get of rank %d: %s (%s)", r,
               zcopy_strerror(st), zcopy_error_detail());
        if (st != ZCOPY_SUCCESS)
            continue;
        st = zcopy_ipc_peer_map(peers[r], (uintptr_t)all[r].va, bytes,
                                (void **)&p);
        EXPECT(st == ZCOPY_SUCCESS, "peer_map of rank %d: %s (%s)", r,
               zcopy_strerror(st), zcopy_error_detail());
        if (st != ZCOPY_SUCCESS)
            continue;
        for (size_t i = 0; i < bytes; i++)
            bad += p[i] != mark(r, i);
        maps[r] = p;
    }
    EXPECT(bad == 0, "%d bytes of peers' blocks wrong", bad);
    /* Once every rank has read, a write through each import (beyond two
     * ranks, another would still be reading the marks it overwrites). */
    MPI_Barrier(MPI_COMM_WORLD);
    for (int r = 0; r < nranks; r++)
        if (maps[r] != NULL)
            maps[r][8 + rank] = 0xee;
    zcopy_ipc_counts(&npeers, &nimports);
    EXPECT(npeers == (size_t)nranks - 1 && nimports == (size_t)nranks - 1,
           "%zu peers and %zu imports, expected %d of each", npeers, nimports,
           nranks - 1);
    MPI_Barrier(MPI_COMM_WORLD);
    for (int r = 0; r < nranks; r++)
        EXPECT(r == rank || block[8 + r] == 0xee,
               "rank %d's write through its import did not land here", r);

    /* Owners deactivate; importers drop at their next sweep. */
    require(MPIX_Comm_deactivate_memory(MPI_COMM_WORLD, block) == MPI_SUCCESS,
            "deactivate");
    MPI_Barrier(MPI_COMM_WORLD);
    zcopy_ipc_sweep();
    zcopy_ipc_counts(&npeers, &nimports);
    EXPECT(nimports == 0, "%zu imports after every owner deactivated",
           nimports);
    for (int r = 0; r < nranks; r++)
        zcopy_ipc_peer_put(peers[r]);
    zcopy_ipc_counts(&npeers, &nimports);
    EXPECT(npeers == 0, "%zu peers after the last put", npeers);
    free(maps);
    free(peers);
    free(all);
}

/* --- 3. collectives ------------------------------------------------------ */

/* The service collectives wait like the component's do: UCX keeps
 * progressing (here by hand, there through Open MPI's progress loop), so a
 * peer's emulated get or put is served while this rank waits. */
static int svc_wait(MPI_Request *req, int rc)
{
    int done = 0;

    while (rc == MPI_SUCCESS && !done) {
        rc = MPI_Test(req, &done, MPI_STATUS_IGNORE);
        zcopy_ucx_progress();
    }
    return rc;
}

static int svc_allgather(const void *sbuf, void *rbuf, size_t bytes, void *ctx)
{
    MPI_Request req;

    return svc_wait(&req, MPI_Iallgather(sbuf, (int)bytes, MPI_BYTE, rbuf,
                                         (int)bytes, MPI_BYTE,
                                         *(MPI_Comm *)ctx, &req));
}

static int svc_alltoall(const void *sbuf, void *rbuf, size_t bytes, void *ctx)
{
    MPI_Request req;

    return svc_wait(&req, MPI_Ialltoall(sbuf, (int)bytes, MPI_BYTE, rbuf,
                                        (int)bytes, MPI_BYTE,
                                        *(MPI_Comm *)ctx, &req));
}

static int svc_bcast(void *buf, size_t bytes, int root, void *ctx)
{
    MPI_Request req;

    return svc_wait(&req, MPI_Ibcast(buf, (int)bytes, MPI_BYTE, root,
                                     *(MPI_Comm *)ctx, &req));
}

static int svc_barrier(void *ctx)
{
    MPI_Request req;

    return svc_wait(&req, MPI_Ibarrier(*(MPI_Comm *)ctx, &req));
}

static int svc_allreduce(void *buf, size_t count, MPI_Datatype type,
                         MPI_Op op, void *ctx)
{
    MPI_Request req;

    return svc_wait(&req, MPI_Iallreduce(MPI_IN_PLACE, buf, (int)count, type,
                                         op, *(MPI_Comm *)ctx, &req));
}

static int svc_reduce(const void *sbuf, void *rbuf, size_t count,
                      MPI_Datatype type, MPI_Op op, int root, void *ctx)
{
    MPI_Request req;

    return svc_wait(&req, MPI_Ireduce(sbuf, rbuf, (int)count, type, op, root,
                                      *(MPI_Comm *)ctx, &req));
}

static int val(int salt, int r, size_t i) { return salt * 3 + r * 1000 + (int)(i % 997); }

static void run(zcopy_comm_t *zc, const zcopy_coll_args_t *a, const char *what)
{
    zcopy_status_t st = zcopy_coll_run(zc, a);

    EXPECT(st == ZCOPY_SUCCESS, "%s: %s (%s; last fallback: %s)", what,
           st == ZCOPY_FALLBACK ? "fell back" : zcopy_strerror(st),
           zcopy_error_detail(), zc->stats.last_fallback_reason);
}

/* Bytes rank @from sends rank @to in alltoallv_bytes(): 1 to 3, and in
 * place the same both ways, as MPI's in-place form needs. */
static int v_bytes(int from, int to, bool in_place)
{
    return 1 + (in_place ? from + to : from + 2 * to) % 3;
}

/* An alltoallv of a few bytes per pair, packed back to back: between
 * virtual servers its blocks ride the arrival, and a leader's message
 * puts each member's table of offsets right after the previous member's
 * odd-sized blocks, where the receiving leader must read it unaligned. */
static void alltoallv_bytes(zcopy_comm_t *zc, uint8_t *s, uint8_t *r,
                            bool in_place)
{
    int scounts[nranks], sdispls[nranks], rcounts[nranks], rdispls[nranks];
    const uint64_t inline_before = zc->stats.inline_calls;
    int sat = 0, rat = 0, bad = 0;

    for (int j = 0; j < nranks; j++) {
        scounts[j] = v_bytes(rank, j, in_place);
        sdispls[j] = sat;
        for (int i = 0; i < scounts[j]; i++)
            s[sat + i] = (uint8_t)(rank * 16 + j * 4 + i);
        sat += scounts[j];
        rcounts[j] = v_bytes(j, rank, in_place);
        rdispls[j] = rat;
        rat += rcounts[j];
    }
    /* In place the receive layout holds what goes out (the same as the
     * send layout here, the counts being the same both ways). */
    if (in_place)
        memcpy(r, s, (size_t)sat);
    else
        memset(r, 0xff, (size_t)rat);
    run(zc, &(zcopy_coll_args_t){ .type = ZCOPY_COLL_ALLTOALLV,
                                  .sbuf = in_place ? MPI_IN_PLACE : s,
                                  .scounts = scounts, .sdispls = sdispls,
                                  .stype = MPI_BYTE, .rbuf = r,
                                  .rcounts = rcounts, .rdispls = rdispls,
                                  .rtype = MPI_BYTE },
        "alltoallv");
    for (int j = 0; j < nranks; j++)
        for (int i = 0; i < rcounts[j]; i++)
            bad += r[rdispls[j] + i] != (uint8_t)(j * 16 + rank * 4 + i);
    EXPECT(bad == 0, "alltoallv%s: %d wrong", in_place ? " in place" : "",
           bad);
    if (zcopy_config.virtual_servers > 1)
        EXPECT(zc->stats.inline_calls == inline_before + 1,
               "alltoallv%s between virtual servers did not ride the arrival",
               in_place ? " in place" : "");
}

/* A program that breaks MPI's rule for MPI_IN_PLACE (rank 0 alone in
 * place), in a call whose blocks do not all ride the arrival: rank 0's
 * fit its slot (made small for the call, alike on every rank), the last
 * rank's 200 bytes to each do not. Every rank falls back, "in place
 * across servers", rather than send rank 0, which carried and so named no
 * block, into the transfers. */
static void alltoallv_mixed_in_place(zcopy_comm_t *zc, uint8_t *s, uint8_t *r)
{
    const size_t limit = zcopy_config.span_inline_max;
    const int last = nranks - 1;
    int scounts[nranks], rcounts[nranks], displs[nranks];
    zcopy_status_t st;

    for (int j = 0; j < nranks; j++) {
        scounts[j] = rank == last ? 200 : 1;
        rcounts[j] = j == last ? 200 : 1;
        displs[j] = 200 * j;
    }
    zcopy_config.span_inline_max = 128; /* a slot of 256 bytes */
    st = zcopy_coll_run(zc, &(zcopy_coll_args_t){
        .type = ZCOPY_COLL_ALLTOALLV, .sbuf = rank == 0 ? MPI_IN_PLACE : s,
        .scounts = scounts, .sdispls = displs, .stype = MPI_BYTE, .rbuf = r,
        .rcounts = rcounts, .rdispls = displs, .rtype = MPI_BYTE });
    zcopy_config.span_inline_max = limit;
    EXPECT(st == ZCOPY_FALLBACK && zc->fallback_why != NULL &&
               strstr(zc->fallback_why, "in place across") != NULL,
           "alltoallv with rank 0 alone in place: %s (%s), expected a "
           "fallback \"in place across servers\"",
           st == ZCOPY_FALLBACK ? "fell back" : zcopy_strerror(st),
           zc->fallback_why ? zc->fallback_why : "no reason");
}

static void collectives(int *buf)
{
    const zcopy_comm_ops_t ops = { .allgather = svc_allgather,
                                   .alltoall = svc_alltoall,
                                   .bcast = svc_bcast,
                                   .barrier = svc_barrier,
                                   .allreduce = svc_allreduce,
                                   .reduce = svc_reduce, .ctx = &service };
    const size_t n = (size_t)nranks;
    int *s = buf, *r = buf + BIG, bad = 0;
    uint64_t calls;
    zcopy_comm_t *zc;

    require(zcopy_comm_create(MPI_COMM_WORLD, rank, nranks, &ops, &zc) ==
                ZCOPY_SUCCESS, "communicator state");
    for (size_t count = 3; count <= BIG; count = count == 3 ? BIG : BIG + 1) {
        for (size_t i = 0; i < count; i++)
            s[i] = val(1, rank, i);
        run(zc, &(zcopy_coll_args_t){ .type = ZCOPY_COLL_ALLREDUCE, .sbuf = s,
                                      .scount = count, .stype = MPI_INT,
                                      .rbuf = r, .rcount = count,
                                      .rtype = MPI_INT, .op = MPI_SUM },
            "allreduce");
        for (size_t i = 0; i < count; i++) {
            int sum = 0;
            for (int k = 0; k < nranks; k++)
                sum += val(1, k, i);
            bad += r[i] != sum;
        }
    }
    EXPECT(bad == 0, "allreduce: %d wrong", bad);

    for (size_t i = 0; i < 1000; i++)
        s[i] = val(2, rank, i);
    run(zc, &(zcopy_coll_args_t){ .type = ZCOPY_COLL_ALLGATHER, .sbuf = s,
                                  .scount = 1000, .stype = MPI_INT, .rbuf = r,
                                  .rcount = 1000, .rtype = MPI_INT },
        "allgather");
    bad = 0;
    for (size_t i = 0; i < n * 1000; i++)
        bad += r[i] != val(2, (int)(i / 1000), i % 1000);
    EXPECT(bad == 0, "allgather: %d wrong", bad);

    for (size_t i = 0; i < BIG; i++)
        r[i] = rank == nranks - 1 ? val(3, rank, i) : -1;
    run(zc, &(zcopy_coll_args_t){ .type = ZCOPY_COLL_BCAST, .sbuf = r,
                                  .scount = BIG, .stype = MPI_INT, .rbuf = r,
                                  .rcount = BIG, .rtype = MPI_INT,
                                  .root = nranks - 1 },
        "bcast");
    bad = 0;
    for (size_t i = 0; i < BIG; i++)
        bad += r[i] != val(3, nranks - 1, i);
    EXPECT(bad == 0, "bcast: %d wrong", bad);

    for (size_t i = 0; i < n * 500; i++)
        s[i] = val(4, rank, i);
    run(zc, &(zcopy_coll_args_t){ .type = ZCOPY_COLL_ALLTOALL, .sbuf = s,
                                  .scount = 500, .stype = MPI_INT, .rbuf = r,
                                  .rcount = 500, .rtype = MPI_INT },
        "alltoall");
    bad = 0;
    for (size_t i = 0; i < n * 500; i++)
        bad += r[i] != val(4, (int)(i / 500), (size_t)rank * 500 + i % 500);
    EXPECT(bad == 0, "alltoall: %d wrong", bad);

    for (size_t i = 0; i < n * 2000; i++)
        s[i] = val(5, rank, i);
    run(zc, &(zcopy_coll_args_t){ .type = ZCOPY_COLL_REDUCE_SCATTER_BLOCK,
                                  .sbuf = s, .scount = 2000, .stype = MPI_INT,
                                  .rbuf = r, .rcount = 2000, .rtype = MPI_INT,
                                  .op = MPI_SUM },
        "reduce_scatter_block");
    bad = 0;
    for (size_t i = 0; i < 2000; i++) {
        int sum = 0;
        for (int k = 0; k < nranks; k++)
            sum += val(5, k, (size_t)rank * 2000 + i);
        bad += r[i] != sum;
    }
    EXPECT(bad == 0, "reduce_scatter_block: %d wrong", bad);

    alltoallv_bytes(zc, (uint8_t *)s, (uint8_t *)r, false);
    /* In place between servers it rides or falls back: here it rides
     * but under transport ucx, whose arrivals carry nothing (this run's
     * span_inline_max 0), so skipped there. */
    if (zcopy_config.transport != ZCOPY_TRANSPORT_UCX)
        alltoallv_bytes(zc, (uint8_t *)s, (uint8_t *)r, true);
    calls = zcopy_config.transport != ZCOPY_TRANSPORT_UCX ? 8 : 7;
    EXPECT(zc->stats.zcopy_calls == calls && zc->stats.fallback_calls == 0,
           "%llu zero-copy calls and %llu fallbacks, expected %llu and 0",
           (unsigned long long)zc->stats.zcopy_calls,
           (unsigned long long)zc->stats.fallback_calls,
           (unsigned long long)calls);
    if (zcopy_config.virtual_servers > 1)
        alltoallv_mixed_in_place(zc, (uint8_t *)s, (uint8_t *)r);
    if (zcopy_config.transport == ZCOPY_TRANSPORT_UCX)
        EXPECT(zc->stats.ucx_bytes > 0 && zc->stats.ipc_bytes == 0,
               "transport ucx: %llu bytes through UCX, %llu through mappings",
               (unsigned long long)zc->stats.ucx_bytes,
               (unsigned long long)zc->stats.ipc_bytes);
    svc_barrier(&service); /* nobody reads a peer's block any more */
    zcopy_comm_destroy(zc);
}

/* --- the deliberate errors ----------------------------------------------- */

/* Volatile, so that the compiler neither sees the errors coming nor
 * optimises them away. */
void *volatile rel_lost;
volatile size_t rel_past_end = 16;

static void deliberate(const char *what)
{
    if (rank != 1)
        return;
    if (strcmp(what, "overflow") == 0) {
        char *p = calloc(rel_past_end, 1); /* a size UBSan cannot see */
        printf("rank 1: reading past a heap block on purpose\n");
        fflush(stdout);
        printf("%d\n", p[rel_past_end]);
        free(p);
    } else if (strcmp(what, "leak") == 0) {
        rel_lost = malloc(4242);
        printf("rank 1: losing a 4242-byte block on purpose (%p)\n",
               rel_lost);
        rel_lost = NULL;
    }
}

int main(int argc, char **argv)
{
    const zcopy_mem_prop_t host = { .kind = ZCOPY_MEM_HOST, .device = -1 };
    const size_t bytes = BLOCK_INTS * sizeof(int);
    size_t gran, nranges, nblocks, npeers, nimports;
    zcopy_mem_handle_t h;
    char *res;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    MPI_Comm_dup(MPI_COMM_WORLD, &service);
    only_this_copy();
    if (argc > 1 && strcmp(argv[1], "ucx") == 0) {
        zcopy_config.transport = ZCOPY_TRANSPORT_UCX;
        /* Data by UCX transfers, not with the arrivals, and small calls,
         * allgathers and alltoalls too, though each rank is a server of
         * its own. */
        zcopy_config.span_inline_max = 0;
        zcopy_config.one_per_server_min = 0;
        zcopy_config.one_per_server_moves = true;
    }
    /* Two servers on this host: the spanning path with its defaults, the
     * payloads of small calls riding the arrivals. */
    if (argc > 1 && strcmp(argv[1], "vservers") == 0)
        zcopy_config.virtual_servers = 2;

    /* 1. */
    require(zcopy_mem_granularity(&host, &gran) == ZCOPY_SUCCESS &&
                bytes % gran == 0, "granularity");
    require(zcopy_mem_reserve((void **)&res, 2 * bytes, 0, NULL, 0) ==
                ZCOPY_SUCCESS, "reserve");
    require(MPIX_Comm_set_memory_range(MPI_COMM_WORLD, res, 2 * bytes, 0,
                                       0) == MPI_SUCCESS, "set range");
    require(zcopy_mem_create(&h, bytes, &host, 0) == ZCOPY_SUCCESS, "create");
    require(zcopy_mem_map(res, bytes, 0, h, 0) == ZCOPY_SUCCESS, "map");
    require(MPIX_Comm_activate_memory(MPI_COMM_WORLD, res, bytes, 0, h, 0) ==
                MPI_SUCCESS, "activate");

    /* 2. (deactivates the block) */
    peer_mapping((uint8_t *)res, bytes);

    /* 3. */
    require(MPIX_Comm_activate_memory(MPI_COMM_WORLD, res, bytes, 0, h, 0) ==
                MPI_SUCCESS, "activate again");
    collectives((int *)res);
    if (argc > 1)
        deliberate(argv[1]);

    /* 4. */
    require(MPIX_Comm_deactivate_memory(MPI_COMM_WORLD, res) == MPI_SUCCESS,
            "deactivate");
    require(zcopy_mem_unmap(res) == ZCOPY_SUCCESS, "unmap");
    require(zcopy_mem_free(h) == ZCOPY_SUCCESS, "free");
    require(MPIX_Comm_unset_memory_range(MPI_COMM_WORLD, res) == MPI_SUCCESS,
            "unset range");
    require(zcopy_mem_release(res) == ZCOPY_SUCCESS, "release");
    zcopy_registry_counts(&nranges, &nblocks);
    zcopy_ipc_counts(&npeers, &nimports);
    EXPECT(nranges == 0 && nblocks == 0 && npeers == 0 && nimports == 0,
           "left: %zu ranges, %zu blocks, %zu peers, %zu imports", nranges,
           nblocks, npeers, nimports);
    {
        zcopy_ucx_counts_t uc;

        /* Deactivation unregistered the block; freeing the communicator
         * closed the endpoints and with them the remote keys. */
        zcopy_ucx_counts(&uc);
        EXPECT(uc.nmems == 0 && uc.neps == 0 && uc.nrkeys == 0,
               "UCX left: %zu registrations, %zu endpoints, %zu keys",
               uc.nmems, uc.neps, uc.nrkeys);
        EXPECT(uc.live == (zcopy_config.transport == ZCOPY_TRANSPORT_UCX ||
                           zcopy_config.virtual_servers > 1),
               "UCX %s", uc.live ? "started without a spanning communicator"
                                 : "never started");
        svc_barrier(&service);
        zcopy_ucx_cleanup();
    }

    {
        int mine = failures, all = 0;

        MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        if (rank == 0)
            printf("%s: %d failures\n", all ? "FAILED" : "passed", all);
        MPI_Comm_free(&service);
        MPI_Finalize();
        return all != 0;
    }
}
