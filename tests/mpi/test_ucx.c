/*
 * The UCX layer (src/ucx) on its own, between the processes of one job, on
 * memory made the way applications make activated memory (zcopy_mem_*: a
 * memfd mapped into a PROT_NONE reservation). No collective uses it yet.
 *
 *  1. setup: the layer starts lazily; each rank registers one block and
 *     every rank learns every peer's worker address, block and packed key
 *     through MPI on a communicator zcopy stays out of.
 *  2. endpoints: one per peer, shared (a second get returns it with one
 *     more reference); a known pid with another worker address is another
 *     endpoint.
 *  3. transfers: each rank gets 8 B, 4 KiB and 1 MiB from every peer and
 *     puts as much into every peer, all in flight at once, half with the
 *     local registration given; then one 16 MiB get and put between
 *     neighbours, from and into unregistered memory. Flush, a "done"
 *     barrier that keeps progressing (a peer's RMA is emulated by our
 *     worker: blocking in MPI here would hang UCX 1.13), then the data and
 *     the byte counts are checked.
 *     A get that the layer calls native (rc, dc) finishes while its target
 *     does not progress; the others are only reported. A read served
 *     by a rank whose only progress is Open MPI's loop's (throttled) poll
 *     finishes.
 *  4. refusals: out-of-block ranges, a key on the wrong endpoint, a reused
 *     generation with another extent, overlapping and unsupported
 *     registrations.
 *  5. generations: each rank unregisters, unmaps, maps other memory at the
 *     same address and registers it again; peers take the new generation's
 *     key, prune the old one, and read and write the new memory.
 *     Then 500 blocks per peer at ever new addresses: the keys cached per
 *     endpoint stay bounded, and the current one still works.
 *  6. teardown: keys forgotten or dropped with their endpoint, endpoints
 *     closed, registrations gone, cleanup leaves nothing live.
 */
#include "testutil.h"
#include "ucx/ucx.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MIB (1u << 20)
#define NSMALL 3
static const size_t small_len[NSMALL] = { 8, 4096, MIB };
static const size_t small_off[NSMALL] = { 0, 4096, 8192 }; /* in a slot */
#define SLOT (8192 + MIB)         /* one peer's share of a region */
#define BIG (16 * MIB)            /* the one large transfer, and each region */
#define MAX_RANKS (BIG / SLOT)

/* The block: peers get from SRC, put into PUTIN; our gets land in GETIN. */
#define SRC 0
#define PUTIN BIG
#define GETIN (2 * BIG)
#define BLOCK (3 * BIG)

static const zcopy_mem_prop_t host = { .kind = ZCOPY_MEM_HOST, .device = -1 };
static int rank, nranks;
static MPI_Comm comm;             /* WORLD's dup with "mpix_zcopy" = false */

/* What each rank tells the others, followed by its worker address and
 * packed key. */
typedef struct {
    zcopy_ucx_peer_key_t key;
    uint64_t va, size, generation;
    uint64_t address_len, rkey_len;
} desc_t;

typedef struct {
    desc_t desc;
    void *address;
    void *rkey;
    zcopy_ucx_ep_t *ep;
    zcopy_ucx_rkey_t *rk;
} peer_t;

static peer_t *peers;

/* This rank's block. */
static struct {
    char *res;                    /* reservation, holds the block */
    zcopy_mem_handle_t handle;
    zcopy_ucx_mem_t *mem;
    uint64_t generation;
} me;

static double now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* --- data ---------------------------------------------------------------- */

/* Word @i of what @owner wrote in generation @gen (@salt tells apart the
 * big put's buffer from the block). */
static uint64_t pattern(int owner, uint64_t gen, unsigned salt, size_t i)
{
    return ((uint64_t)owner << 56) ^ (gen << 48) ^ ((uint64_t)salt << 40) ^
           (i * 0x9e3779b97f4a7c15ull);
}

static void fill(void *buf, size_t len, int owner, uint64_t gen,
                 unsigned salt, size_t word0)
{
    uint64_t *w = buf;

    for (size_t i = 0; i < len / 8; i++)
        w[i] = pattern(owner, gen, salt, word0 + i);
}

/* Whether @buf holds @owner's words from @word0 on. */
static bool holds(const void *buf, size_t len, int owner, uint64_t gen,
                  unsigned salt, size_t word0)
{
    const uint64_t *w = buf;

    for (size_t i = 0; i < len / 8; i++)
        if (w[i] != pattern(owner, gen, salt, word0 + i))
            return false;
    return true;
}

/* --- waiting without blocking UCX ----------------------------------------- */

/* Every rank passes once all have flushed, so every transfer to anyone has
 * completed. A blocking MPI_Barrier would stop our worker while a peer's
 * emulated get or put still needs it. */
static void progressing_barrier(void)
{
    MPI_Request req;
    int done = 0;

    MPI_Ibarrier(comm, &req);
    while (!done) {
        zcopy_ucx_progress();
        MPI_Test(&req, &done, MPI_STATUS_IGNORE);
    }
}

/* --- setup ---------------------------------------------------------------- */

static void block_map(uint64_t generation)
{
    char *va = me.res;

    zt_require(zcopy_mem_create(&me.handle, BLOCK, &host, 0) == ZCOPY_SUCCESS,
               "create");
    zt_require(zcopy_mem_map(va, BLOCK, 0, me.handle, 0) == ZCOPY_SUCCESS,
               "map");
    fill(va + SRC, BIG, rank, generation, 0, 0);
    memset(va + PUTIN, 0xee, BIG);
    memset(va + GETIN, 0xee, BIG);
    zt_require(zcopy_ucx_mem_register(va, BLOCK, ZCOPY_MEM_HOST, &me.mem) ==
               ZCOPY_SUCCESS, "register");
    me.generation = generation;
}

/* The deactivate side of a cycle: registration first, then the pages. */
static void block_unmap(void)
{
    zcopy_ucx_mem_unregister(me.mem);
    me.mem = NULL;
    zt_require(zcopy_mem_unmap(me.res) == ZCOPY_SUCCESS, "unmap");
    zt_require(zcopy_mem_free(me.handle) == ZCOPY_SUCCESS, "free");
}

/* Every rank's descriptor, worker address and key, to every rank. Blocking
 * MPI is fine here: nobody has a transfer in flight. */
static void exchange(void)
{
    const void *address, *rkey;
    size_t address_len, rkey_len, mine_len, total = 0;
    int *lens = malloc(sizeof(int) * (size_t)nranks);
    int *displs = malloc(sizeof(int) * (size_t)nranks);
    char *mine, *all;
    desc_t d;

    zt_require(zcopy_ucx_worker_address(&address, &address_len) ==
               ZCOPY_SUCCESS, "worker address");
    zcopy_ucx_mem_packed_rkey(me.mem, &rkey, &rkey_len);
    d = (desc_t){ .key = { .host = (uint64_t)gethostid(),
                           .pid = (uint64_t)getpid() },
                  .va = (uintptr_t)me.res, .size = BLOCK,
                  .generation = me.generation,
                  .address_len = address_len, .rkey_len = rkey_len };
    mine_len = sizeof(d) + address_len + rkey_len;
    mine = malloc(mine_len);
    memcpy(mine, &d, sizeof(d));
    memcpy(mine + sizeof(d), address, address_len);
    memcpy(mine + sizeof(d) + address_len, rkey, rkey_len);

    MPI_Allgather(&(int){ (int)mine_len }, 1, MPI_INT, lens, 1, MPI_INT, comm);
    for (int r = 0; r < nranks; r++) {
        displs[r] = (int)total;
        total += (size_t)lens[r];
    }
    all = malloc(total);
    MPI_Allgatherv(mine, (int)mine_len, MPI_BYTE, all, lens, displs, MPI_BYTE,
                   comm);
    for (int r = 0; r < nranks; r++) {
        const char *p = all + displs[r];
        peer_t *peer = &peers[r];

        memcpy(&peer->desc, p, sizeof(peer->desc));
        free(peer->address);
        free(peer->rkey);
        peer->address = malloc(peer->desc.address_len);
        peer->rkey = malloc(peer->desc.rkey_len);
        memcpy(peer->address, p + sizeof(d), peer->desc.address_len);
        memcpy(peer->rkey, p + sizeof(d) + peer->desc.address_len,
               peer->desc.rkey_len);
    }
    if (rank == 0)
        printf("worker address %zu bytes, packed key %zu bytes\n",
               address_len, rkey_len);
    free(all);
    free(mine);
    free(displs);
    free(lens);
}

static zcopy_ucx_remote_t remote_of(const peer_t *peer)
{
    return (zcopy_ucx_remote_t){
        .va = peer->desc.va, .size = peer->desc.size,
        .generation = peer->desc.generation,
        .packed_rkey = peer->rkey, .packed_rkey_len = peer->desc.rkey_len };
}

/* Keys of the peers' current generation; the previous ones are pruned. */
static void take_keys(void)
{
    for (int r = 0; r < nranks; r++) {
        peer_t *peer = &peers[r];
        zcopy_ucx_remote_t remote = remote_of(peer);
        zcopy_ucx_rkey_t *again = NULL;

        if (r == rank)
            continue;
        zt_require(zcopy_ucx_rkey_get(peer->ep, &remote, &peer->rk) ==
                   ZCOPY_SUCCESS, "rkey get");
        ZT_CHECK(zcopy_ucx_rkey_get(peer->ep, &remote, &again) ==
                     ZCOPY_SUCCESS && again == peer->rk,
                 "the key of generation %llu of rank %d is cached",
                 (unsigned long long)remote.generation, r);
        zcopy_ucx_rkey_prune(peer->ep, &remote.generation, 1);
    }
}

/* Blocks a peer activated at ever new addresses: no new generation overlaps
 * their keys, yet the keys cached per endpoint stay bounded (the least
 * recently used go; every arrival brings its packed key again). The packed
 * bytes are the peer's real key; only the claimed blocks are new. */
static void keys_bounded(void)
{
    zcopy_ucx_counts_t c;

    for (int r = 0; r < nranks; r++) {
        zcopy_ucx_remote_t remote = remote_of(&peers[r]);
        zcopy_ucx_rkey_t *rk;

        if (r == rank)
            continue;
        for (uint64_t i = 0; i < 500; i++) {
            remote.generation = 1000 + i;
            remote.va = (UINT64_C(1) << 45) + i * 4096;
            remote.size = 4096;
            ZT_CHECK(zcopy_ucx_rkey_get(peers[r].ep, &remote, &rk) ==
                     ZCOPY_SUCCESS, "key of generation %llu",
                     (unsigned long long)remote.generation);
        }
    }
    zcopy_ucx_counts(&c);
    ZT_CHECK(c.nrkeys <= 64 * (size_t)(nranks - 1), "%zu keys cached after "
             "500 blocks at new addresses per peer", c.nrkeys);
}

/* --- endpoints ------------------------------------------------------------ */

static void connect_peers(void)
{
    zcopy_ucx_counts_t c;

    for (int r = 0; r < nranks; r++) {
        peer_t *peer = &peers[r];
        zcopy_ucx_ep_t *again;

        if (r == rank)
            continue;
        zt_require(zcopy_ucx_ep_get(&peer->desc.key, peer->address,
                   peer->desc.address_len, &peer->ep) == ZCOPY_SUCCESS,
                   "endpoint");
        /* A second communicator reaching the same process. */
        ZT_CHECK(zcopy_ucx_ep_get(&peer->desc.key, peer->address,
                                  peer->desc.address_len, &again) ==
                     ZCOPY_SUCCESS && again == peer->ep,
                 "rank %d: one endpoint per peer process", r);
        zcopy_ucx_ep_put(again);
    }
    zcopy_ucx_counts(&c);
    ZT_CHECK(c.neps == (size_t)nranks - 1, "%zu endpoints for %d peers",
             c.neps, nranks - 1);

    /* A pid known with another worker address is another process (the
     * pid was reused): it must not get the first one's endpoint. */
    if (nranks >= 3) {
        int p = (rank + 1) % nranks, q = (rank + 2) % nranks;
        zcopy_ucx_ep_t *other;

        ZT_CHECK(zcopy_ucx_ep_get(&peers[p].desc.key, peers[q].address,
                                  peers[q].desc.address_len, &other) ==
                     ZCOPY_SUCCESS && other != peers[p].ep &&
                     other != peers[q].ep,
                 "same key, another address: another endpoint");
        zcopy_ucx_ep_put(other);
        zcopy_ucx_counts(&c);
        ZT_CHECK(c.neps == (size_t)nranks - 1,
                 "that endpoint closed with its last reference");
    }
}

/* --- transfers ------------------------------------------------------------ */

/* Every size to and from every peer, all in flight at once. Gets read the
 * peer's SRC at our slot and land in our GETIN at the peer's slot; puts
 * write our SRC at the peer's slot into the peer's PUTIN at our slot. */
static void transfer_small(void)
{
    zcopy_ucx_comp_t comp = ZCOPY_UCX_COMP_INIT;
    zcopy_ucx_counts_t before, after;
    uint64_t expect = 0;
    char *va = me.res;

    zcopy_ucx_counts(&before);
    for (int k = 0; k < NSMALL; k++) {
        for (int i = 1; i < nranks; i++) {
            int r = (rank + i) % nranks;  /* spread the load over peers */
            peer_t *peer = &peers[r];
            /* Half the transfers say which registration the local side is
             * in, half leave it to UCX. */
            const zcopy_ucx_mem_t *local = (i + k) % 2 ? me.mem : NULL;
            size_t len = small_len[k];

            ZT_CHECK(zcopy_ucx_get(peer->ep,
                                   va + GETIN + (size_t)r * SLOT + small_off[k],
                                   local,
                                   peer->desc.va + SRC +
                                       (size_t)rank * SLOT + small_off[k],
                                   peer->rk, len, &comp) == ZCOPY_SUCCESS,
                     "get %zu B from rank %d: %s", len, r,
                     zcopy_mem_last_error());
            ZT_CHECK(zcopy_ucx_put(peer->ep,
                                   va + SRC + (size_t)r * SLOT + small_off[k],
                                   local,
                                   peer->desc.va + PUTIN +
                                       (size_t)rank * SLOT + small_off[k],
                                   peer->rk, len, &comp) == ZCOPY_SUCCESS,
                     "put %zu B to rank %d: %s", len, r,
                     zcopy_mem_last_error());
            expect += 2 * len;
        }
    }
    for (int r = 0; r < nranks; r++)
        if (r != rank)
            ZT_CHECK(zcopy_ucx_flush_nb(peers[r].ep, &comp) == ZCOPY_SUCCESS,
                     "flush rank %d", r);
    ZT_CHECK(zcopy_ucx_wait(&comp) == ZCOPY_SUCCESS, "small transfers: %s",
             zcopy_mem_last_error());
    progressing_barrier();

    ZT_CHECK(comp.bytes == expect, "counted %llu bytes, moved %llu",
             (unsigned long long)comp.bytes, (unsigned long long)expect);
    zcopy_ucx_counts(&after);
    ZT_CHECK(after.bytes - before.bytes == expect,
             "process count grew by %llu, not %llu",
             (unsigned long long)(after.bytes - before.bytes),
             (unsigned long long)expect);
    for (int r = 0; r < nranks; r++) {
        uint64_t gen = peers[r].desc.generation;

        if (r == rank)
            continue;
        for (int k = 0; k < NSMALL; k++) {
            size_t at = (size_t)r * SLOT + small_off[k];

            ZT_CHECK(holds(va + GETIN + at, small_len[k], r, gen, 0,
                           ((size_t)rank * SLOT + small_off[k]) / 8),
                     "generation %llu: got %zu B of rank %d",
                     (unsigned long long)gen, small_len[k], r);
            ZT_CHECK(holds(va + PUTIN + at, small_len[k], r, gen, 0,
                           ((size_t)rank * SLOT + small_off[k]) / 8),
                     "generation %llu: rank %d put %zu B here",
                     (unsigned long long)gen, r, small_len[k]);
        }
    }
}

/* One 16 MiB get from the right neighbour and put into the left one, from
 * and into memory UCX has not registered. */
static void transfer_big(void)
{
    zcopy_ucx_comp_t comp = ZCOPY_UCX_COMP_INIT;
    int right = (rank + 1) % nranks, left = (rank + nranks - 1) % nranks;
    char *got = malloc(BIG), *out = malloc(BIG);
    double t_get, t_put;

    zt_require(got != NULL && out != NULL, "malloc");
    memset(got, 0xee, BIG);
    fill(out, BIG, rank, me.generation, 1, 0);
    memset(me.res + PUTIN, 0xee, BIG);
    progressing_barrier();        /* nobody puts before the poison is in */

    t_get = now();
    ZT_CHECK(zcopy_ucx_get(peers[right].ep, got, NULL, peers[right].desc.va,
                           peers[right].rk, BIG, &comp) == ZCOPY_SUCCESS,
             "16 MiB get: %s", zcopy_mem_last_error());
    /* zcopy_ucx_test is the non-blocking form of the wait. */
    while (!zcopy_ucx_test(&comp))
        ;
    t_get = now() - t_get;
    t_put = now();
    ZT_CHECK(zcopy_ucx_put(peers[left].ep, out, NULL,
                           peers[left].desc.va + PUTIN, peers[left].rk, BIG,
                           &comp) == ZCOPY_SUCCESS,
             "16 MiB put: %s", zcopy_mem_last_error());
    ZT_CHECK(zcopy_ucx_wait(&comp) == ZCOPY_SUCCESS &&
                 zcopy_ucx_flush(peers[left].ep) == ZCOPY_SUCCESS,
             "16 MiB transfers: %s", zcopy_mem_last_error());
    t_put = now() - t_put;
    progressing_barrier();

    ZT_CHECK(comp.bytes == 2ull * BIG, "16 MiB transfers counted %llu bytes",
             (unsigned long long)comp.bytes);
    ZT_CHECK(holds(got, BIG, right, peers[right].desc.generation, 0, 0),
             "16 MiB got from rank %d", right);
    ZT_CHECK(holds(me.res + PUTIN, BIG, (rank + 1) % nranks,
                   peers[right].desc.generation, 1, 0),
             "16 MiB put here by rank %d", right);
    if (rank == 0)
        printf("16 MiB: get %.1f ms, put + flush %.1f ms\n", t_get * 1e3,
               t_put * 1e3);
    free(out);
    free(got);
}

/* The same 16 MiB from the right neighbour, sent by it on request
 * (zcopy_ucx_read): the neighbour serves it from its own progress, here
 * from its wait in the same call; and a small read of the first bytes. */
static void transfer_read(void)
{
    zcopy_ucx_comp_t comp = ZCOPY_UCX_COMP_INIT;
    int right = (rank + 1) % nranks;
    char *got = malloc(BIG), head[64];
    double t_read;

    zt_require(got != NULL, "malloc");
    memset(got, 0xee, BIG);
    progressing_barrier();
    t_read = now();
    ZT_CHECK(zcopy_ucx_read(peers[right].ep, got, peers[right].desc.va,
                            peers[right].rk, BIG, &comp) == ZCOPY_SUCCESS &&
                 zcopy_ucx_read(peers[right].ep, head, peers[right].desc.va,
                                peers[right].rk, 64, &comp) == ZCOPY_SUCCESS,
             "16 MiB read: %s", zcopy_mem_last_error());
    ZT_CHECK(zcopy_ucx_wait(&comp) == ZCOPY_SUCCESS, "16 MiB read: %s",
             zcopy_mem_last_error());
    t_read = now() - t_read;
    progressing_barrier();
    ZT_CHECK(comp.bytes == BIG + 64, "reads counted %llu bytes",
             (unsigned long long)comp.bytes);
    ZT_CHECK(holds(got, BIG, right, peers[right].desc.generation, 0, 0) &&
                 memcmp(head, got, sizeof(head)) == 0,
             "16 MiB read from rank %d", right);
    if (rank == 0)
        printf("16 MiB: read (sent by the target) %.1f ms\n", t_read * 1e3);
    free(got);
}

/* What zcopy_ucx_ep_rma_native promises (coll_zcopy_ucx_fetch=auto reads
 * by get only there): a get that needs nothing of its target's worker.
 * Rank 0 gets 1 MiB from rank 1 while rank 1 sits in a stock MPI_Bcast,
 * which never runs this layer's worker (rank 1 says when it has left its
 * last progress call), and waits for the get for at most 1 s before it
 * tells rank 1 to go on. Where the endpoint says native the get must have
 * finished by then; emulated gets (every transport here) are only
 * reported. The bcast frees rank 1 either way, and its progress then
 * finishes an emulated get. */
static void native_gets_alone(void)
{
    zcopy_ucx_comp_t comp = ZCOPY_UCX_COMP_INIT;
    char *got = malloc(MIB);
    int alone = 0, left = 1;
    bool native;
    double deadline;

    zt_require(got != NULL, "malloc");
    progressing_barrier();
    /* Rank 1 has left its last progress call when rank 0 hears from it. */
    if (rank == 1)
        MPI_Send(&left, 1, MPI_INT, 0, 0, comm);
    if (rank == 0) {
        MPI_Recv(&left, 1, MPI_INT, 1, 0, comm, MPI_STATUS_IGNORE);
        native = zcopy_ucx_ep_rma_native(peers[1].ep);
        ZT_CHECK(zcopy_ucx_get(peers[1].ep, got, NULL, peers[1].desc.va,
                               peers[1].rk, MIB, &comp) == ZCOPY_SUCCESS,
                 "1 MiB get: %s", zcopy_mem_last_error());
        deadline = now() + 1.0;
        while (!alone && now() < deadline)
            alone = zcopy_ucx_test(&comp);
        ZT_CHECK(alone || !native, "a get the endpoint calls native "
                 "finished while its target did not progress");
        printf("1 MiB get while rank 1 does not progress: %s; the endpoint "
               "says %s\n", alone ? "finished" : "waited for rank 1",
               native ? "native" : "emulated");
    }
    MPI_Bcast(&alone, 1, MPI_INT, 0, comm);
    progressing_barrier();
    if (rank == 0) {
        ZT_CHECK(zcopy_ucx_wait(&comp) == ZCOPY_SUCCESS &&
                     holds(got, MIB, 1, peers[1].desc.generation, 0, 0),
                 "1 MiB got from rank 1: %s", zcopy_mem_last_error());
    }
    free(got);
}

/* Open MPI's progress loop polls the worker through
 * zcopy_ucx_progress_loop(), which polls seldom once its polls have found
 * nothing for a while (context.c). A rank whose only progress is that
 * loop must still serve a peer: rank 1 idles in it until it is throttled,
 * then tells rank 0 to read 1 MiB of its block (served by rank 1's worker)
 * and keeps calling only the loop until rank 0 reports. A read that does
 * not finish within 10 s stops the job rather than hang it. */
static void served_by_the_loop(void)
{
    zcopy_ucx_comp_t comp = ZCOPY_UCX_COMP_INIT;
    zcopy_ucx_counts_t c;
    char *got = malloc(MIB);
    int go = 1, done = 0, flag = 0;
    MPI_Request req;

    zt_require(got != NULL, "malloc");
    progressing_barrier();
    if (rank == 1) {
        for (int i = 0; i < 1000; i++)
            zcopy_ucx_progress_loop();
        zcopy_ucx_counts(&c);
        ZT_CHECK(c.loop_idle, "1000 empty polls leave the loop idle");
        MPI_Irecv(&done, 1, MPI_INT, 0, 7, comm, &req);
        MPI_Send(&go, 1, MPI_INT, 0, 6, comm);
        while (!flag) {
            zcopy_ucx_progress_loop();
            MPI_Test(&req, &flag, MPI_STATUS_IGNORE);
        }
    }
    if (rank == 0) {
        double deadline;
        bool finished = false;

        MPI_Recv(&go, 1, MPI_INT, 1, 6, comm, MPI_STATUS_IGNORE);
        deadline = now() + 10.0;
        ZT_CHECK(zcopy_ucx_read(peers[1].ep, got, peers[1].desc.va,
                                peers[1].rk, MIB, &comp) == ZCOPY_SUCCESS,
                 "1 MiB read: %s", zcopy_mem_last_error());
        while (!finished && now() < deadline)
            finished = zcopy_ucx_test(&comp);
        zt_require(finished, "a read served by a rank that only runs Open "
                   "MPI's (idle) progress loop finishes within 10 s");
        done = 1;
        MPI_Send(&done, 1, MPI_INT, 1, 7, comm);
        ZT_CHECK(zcopy_ucx_wait(&comp) == ZCOPY_SUCCESS &&
                     holds(got, MIB, 1, peers[1].desc.generation, 0, 0),
                 "1 MiB read from rank 1 by way of its loop: %s",
                 zcopy_mem_last_error());
    }
    progressing_barrier();
    free(got);
}

/* A tagged send of 1 MiB completes before its receive is posted, while
 * the receiver only progresses: zcopy's context sends eager at every size
 * (context.c), where UCX's default rendezvous would wait for the receive.
 * Each rank sends to its right neighbour and tells it over MPI once its
 * send is done, or after 10 s without (the failure; then the late receive
 * lets the rendezvous finish, so nothing hangs). */
#define EAGER_BYTES (1u << 20)
#define EAGER_TAG UINT64_C(0xea6e4)

static void eager_sends(void)
{
    zcopy_ucx_comp_t sent = ZCOPY_UCX_COMP_INIT, got = ZCOPY_UCX_COMP_INIT;
    int right = (rank + 1) % nranks, left = (rank + nranks - 1) % nranks;
    char *out = malloc(EAGER_BYTES), *in = malloc(EAGER_BYTES);
    int mine = 0, theirs = 0, arrived = 0;
    bool told = false;
    MPI_Request req;
    double deadline;

    zt_require(out != NULL && in != NULL, "malloc");
    if (getenv("UCX_RNDV_THRESH") != NULL) { /* the user's value rules */
        if (rank == 0)
            printf("eager sends: not checked, UCX_RNDV_THRESH is set\n");
        free(in);
        free(out);
        return;
    }
    fill(out, EAGER_BYTES, rank, 3, 0, 0);
    memset(in, 0xee, EAGER_BYTES);
    progressing_barrier();
    /* Without the send its receiver would wait for it forever. */
    zt_require(zcopy_ucx_tag_send(peers[right].ep, out, EAGER_BYTES,
                                  EAGER_TAG, &sent) == ZCOPY_SUCCESS,
               "1 MiB tagged send");
    MPI_Irecv(&theirs, 1, MPI_INT, left, 0, comm, &req);
    deadline = now() + 10.0;
    while (!told || !arrived) {
        if (!told && (zcopy_ucx_test(&sent) || now() > deadline)) {
            mine = sent.pending == 0;
            MPI_Send(&mine, 1, MPI_INT, right, 0, comm);
            told = true;
        }
        zcopy_ucx_progress();
        MPI_Test(&req, &arrived, MPI_STATUS_IGNORE);
    }
    ZT_CHECK(mine, "a 1 MiB tagged send to rank %d completed before its "
             "receive was posted (eager)", right);
    ZT_CHECK(zcopy_ucx_tag_recv(in, EAGER_BYTES, EAGER_TAG, &got) ==
                 ZCOPY_SUCCESS && zcopy_ucx_wait(&got) == ZCOPY_SUCCESS &&
                 zcopy_ucx_wait(&sent) == ZCOPY_SUCCESS,
             "1 MiB tagged message: %s", zcopy_mem_last_error());
    ZT_CHECK(holds(in, EAGER_BYTES, left, 3, 0, 0),
             "1 MiB tagged message from rank %d", left);
    progressing_barrier();
    free(in);
    free(out);
}

/* --- refusals ------------------------------------------------------------- */

static void refusals(void)
{
    zcopy_ucx_comp_t comp = ZCOPY_UCX_COMP_INIT;
    peer_t *peer = &peers[(rank + 1) % nranks];
    zcopy_ucx_remote_t remote = remote_of(peer);
    zcopy_ucx_rkey_t *rk;
    zcopy_ucx_mem_t *mem;
    char buf[64];

    ZT_CHECK(zcopy_ucx_get(peer->ep, buf, NULL, peer->desc.va + BLOCK - 8,
                           peer->rk, 16, &comp) == ZCOPY_ERR_RANGE,
             "a get past the end of the peer's block is refused");
    ZT_CHECK(zcopy_ucx_put(peer->ep, buf, NULL, peer->desc.va - 8, peer->rk,
                           8, &comp) == ZCOPY_ERR_RANGE,
             "a put before the peer's block is refused");
    ZT_CHECK(zcopy_ucx_read(peer->ep, buf, peer->desc.va + BLOCK - 8,
                            peer->rk, 16, &comp) == ZCOPY_ERR_RANGE,
             "a read past the end of the peer's block is refused");
    ZT_CHECK(zcopy_ucx_get(peer->ep, buf, me.mem, peer->desc.va, peer->rk,
                           8, &comp) == ZCOPY_ERR_RANGE,
             "a local buffer outside the registration given is refused");
    if (nranks >= 3) {
        peer_t *other = &peers[(rank + 2) % nranks];

        ZT_CHECK(zcopy_ucx_get(other->ep, buf, NULL, peer->desc.va,
                               peer->rk, 8, &comp) == ZCOPY_ERR_ARG,
                 "a key used on another peer's endpoint is refused");
    }
    ZT_CHECK(comp.pending == 0 && comp.bytes == 0,
             "refused transfers leave the completion untouched");

    remote.size -= 4096;
    ZT_CHECK(zcopy_ucx_rkey_get(peer->ep, &remote, &rk) == ZCOPY_ERR_ARG,
             "a cached generation with another extent is refused");
    ZT_CHECK(zcopy_ucx_mem_register(me.res + 4096, 4096, ZCOPY_MEM_HOST,
                                    &mem) == ZCOPY_ERR_OVERLAP,
             "an overlapping registration is refused");
    ZT_CHECK(zcopy_ucx_mem_register(buf, sizeof(buf), ZCOPY_MEM_CUDA, &mem) ==
                 ZCOPY_ERR_UNSUPPORTED,
             "CUDA memory with a UCX without CUDA is refused: %s",
             zcopy_mem_last_error());
}

/* --- teardown ------------------------------------------------------------- */

static void teardown(void)
{
    zcopy_ucx_counts_t c;

    /* Half the peers' keys are forgotten, the rest go with the endpoint. */
    for (int r = 0; r < nranks; r++) {
        if (r == rank)
            continue;
        if (r % 2 == 0)
            zcopy_ucx_rkey_forget(peers[r].ep, peers[r].desc.generation);
        zcopy_ucx_ep_put(peers[r].ep);
    }
    block_unmap();
    zcopy_ucx_counts(&c);
    ZT_CHECK(c.live && c.neps == 0 && c.nrkeys == 0 && c.nmems == 0,
             "teardown left %zu endpoints, %zu keys, %zu registrations",
             c.neps, c.nrkeys, c.nmems);
    /* Closing flushed in flush mode: peers may still need our progress. */
    progressing_barrier();
    zcopy_ucx_cleanup();
    zcopy_ucx_counts(&c);
    ZT_CHECK(!c.live, "cleanup destroys the worker");
    ZT_CHECK(zcopy_ucx_progress() == 0, "progress after cleanup is a no-op");
    zt_require(zcopy_mem_release(me.res) == ZCOPY_SUCCESS, "release");
    for (int r = 0; r < nranks; r++) {
        free(peers[r].address);
        free(peers[r].rkey);
    }
    free(peers);
}

int main(int argc, char **argv)
{
    zcopy_ucx_counts_t c;
    MPI_Info info;
    double t0;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    zt_require(nranks >= 2 && (size_t)nranks <= MAX_RANKS, "2..14 ranks");
    MPI_Info_create(&info);
    MPI_Info_set(info, "mpix_zcopy", "false");
    MPI_Comm_dup_with_info(MPI_COMM_WORLD, info, &comm);
    MPI_Info_free(&info);
    t0 = now();

    zcopy_ucx_counts(&c);
    ZT_CHECK(!c.live && zcopy_ucx_progress() == 0,
             "nothing of UCX exists before the first use");

    peers = calloc((size_t)nranks, sizeof(*peers));
    zt_require(zcopy_mem_reserve((void **)&me.res, BLOCK, 0, NULL, 0) ==
               ZCOPY_SUCCESS, "reserve");
    block_map(1);
    exchange();
    connect_peers();
    take_keys();
    transfer_small();
    transfer_big();
    transfer_read();
    native_gets_alone();
    served_by_the_loop();
    eager_sends();
    refusals();
    progressing_barrier();

    /* A new generation at the same address: the old key is pruned, and
     * what peers read and write is the new memory. */
    block_unmap();
    block_map(2);
    ZT_CHECK(!holds(me.res + SRC, 8, rank, 1, 0, 0),
             "the new memory is not the old one");
    exchange();
    take_keys();
    zcopy_ucx_counts(&c);
    ZT_CHECK(c.nrkeys == (size_t)nranks - 1,
             "one key per peer after pruning: %zu", c.nrkeys);
    for (int r = 0; r < nranks; r++)
        ZT_CHECK(peers[r].desc.generation == 2, "rank %d at generation 2", r);
    transfer_small();
    keys_bounded();
    take_keys();
    transfer_small();

    teardown();
    MPI_Comm_free(&comm);
    if (rank == 0)
        printf("test_ucx: %.2f s\n", now() - t0);
    return zt_finish();
}
