/*
 * Spanning communicators: setup, arrival, syncs and the two ways of
 * reaching a peer's buffer (mapping inside the group, UCX between groups).
 * See span.h.
 */
#include "span.h"

#include "host/host.h"
#include "topo/topo.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

typedef zcopy_span_hello_t span_hello_t;

static bool same_server(const span_hello_t *a, const span_hello_t *b)
{
    return a->where.server[0] == b->where.server[0] &&
           a->where.server[1] == b->where.server[1];
}

/* A per-call exchange through the previous component: this rank's @bytes
 * reach every other rank. */
static void span_count(zcopy_comm_t *zc, size_t bytes)
{
    const uint64_t others = (uint64_t)zc->size - 1;

    zc->stats.ctl_msgs += others;
    zc->stats.ctl_bytes += others * bytes;
}

static void span_scratch_release(zcopy_span_t *sp)
{
    zcopy_ucx_mem_unregister(sp->scratch_mem);
    if (sp->scratch.size > 0)
        munmap((void *)(uintptr_t)sp->scratch.va, sp->scratch.size);
    sp->scratch_mem = NULL;
    memset(&sp->scratch, 0, sizeof(sp->scratch));
}

void zcopy_span_destroy(zcopy_span_t *sp)
{
    if (sp == NULL)
        return;
    zcopy_span_plane_drain(sp); /* messages in flight use endpoints */
    for (int r = 0; r < sp->nranks; r++) {
        if (sp->peers && sp->peers[r])
            zcopy_ipc_peer_put(sp->peers[r]);
        if (sp->eps && sp->eps[r])
            zcopy_ucx_ep_put(sp->eps[r]);
    }
    free(sp->group);
    free(sp->index);
    free(sp->group_start);
    free(sp->members);
    free(sp->peers);
    free(sp->eps);
    free(sp->sdispls);
    free(sp->sdispls_out);
    free(sp->flags);
    free(sp->block_lo);
    free(sp->landing);
    span_scratch_release(sp);
    zcopy_span_plane_destroy(sp);
    free(sp);
}

static zcopy_span_t *span_alloc(int rank, int n)
{
    zcopy_span_t *sp = calloc(1, sizeof(*sp));
    size_t un = (size_t)n;

    if (sp == NULL)
        return NULL;
    sp->rank = rank;
    sp->nranks = n;
    sp->group = calloc(un, sizeof(int));
    sp->index = calloc(un, sizeof(int));
    sp->group_start = calloc(un + 1, sizeof(int));
    sp->members = calloc(un, sizeof(int));
    sp->peers = calloc(un, sizeof(*sp->peers));
    sp->eps = calloc(un, sizeof(*sp->eps));
    sp->plane_fd = -1;
    sp->plane_id = ZCOPY_SPAN_PLANE_NO_ID;
    sp->sdispls = calloc(un, sizeof(int64_t));
    sp->sdispls_out = calloc(un, sizeof(int64_t));
    sp->flags = calloc(un, sizeof(int32_t));
    sp->block_lo = calloc(un, sizeof(size_t));
    if (!sp->block_lo || !sp->group || !sp->index || !sp->group_start || !sp->members ||
        !sp->peers || !sp->eps || !sp->sdispls ||
        !sp->sdispls_out || !sp->flags) {
        zcopy_span_destroy(sp);
        return NULL;
    }
    return sp;
}

/* qsort_r order of ranks: by server, then by rank. */
static int span_by_server(const void *x, const void *y, void *hellos)
{
    const span_hello_t *all = hellos;
    const int a = *(const int *)x, b = *(const int *)y;
    const uint64_t *sa = all[a].where.server, *sb = all[b].where.server;

    if (sa[0] != sb[0])
        return sa[0] < sb[0] ? -1 : 1;
    if (sa[1] != sb[1])
        return sa[1] < sb[1] ? -1 : 1;
    return (a > b) - (a < b);
}

/* Groups in order of their first rank; members in rank order. Under
 * transport=ucx every rank is a group of its own. Ranks sorted by server
 * (in members[], as scratch until the end) find their server's first
 * rank in O(n log n): set-up runs on communicators of 64k ranks, where
 * comparing each rank with the ranks before it took billions of steps. */
static void span_group(zcopy_span_t *sp, const span_hello_t *all)
{
    const bool one_per_rank = zcopy_config.transport == ZCOPY_TRANSPORT_UCX;
    const int n = sp->nranks;
    int *first = sp->index; /* by rank: its server's first rank, for now */

    for (int r = 0; r < n; r++)
        sp->members[r] = r;
    if (!one_per_rank)
        qsort_r(sp->members, (size_t)n, sizeof(int), span_by_server,
                (void *)all);
    sp->hosts_shared = one_per_rank;
    for (int i = 0, lead = 0; i < n; i++) {
        const span_hello_t *h = &all[sp->members[i]];

        if (one_per_rank || !same_server(h, &all[sp->members[lead]])) {
            /* Sorted by host first: virtual servers of one host follow
             * each other. */
            if (i > 0 && h->where.server[0] ==
                             all[sp->members[lead]].where.server[0])
                sp->hosts_shared = true;
            lead = i;
        }
        first[sp->members[i]] = sp->members[lead];
    }
    /* In rank order, a server's first rank comes before its others. */
    for (int r = 0; r < n; r++) {
        int g = first[r] == r ? sp->ngroups++ : sp->group[first[r]];

        sp->group[r] = g;
        sp->index[r] = sp->group_start[g + 1]++; /* a count until below */
    }
    for (int g = 0; g < sp->ngroups; g++) {
        int size = sp->group_start[g + 1];

        sp->max_group = size > sp->max_group ? size : sp->max_group;
        sp->group_start[g + 1] = sp->group_start[g] + size;
    }
    for (int r = 0; r < n; r++)
        sp->members[sp->group_start[sp->group[r]] + sp->index[r]] = r;
}

static zcopy_status_t span_connect(zcopy_span_t *sp, const span_hello_t *all,
                                   const uint8_t *addresses, size_t stride)
{
    for (int r = 0; r < sp->nranks; r++) {
        zcopy_ucx_peer_key_t key = { .host = all[r].where.server[0],
                                     .pid = (uint64_t)all[r].ipc.pid };
        if (r == sp->rank)
            continue;
        if (sp->group[r] == sp->group[sp->rank])
            ZCOPY_CHECK(zcopy_ipc_peer_get(&all[r].ipc, &sp->peers[r]));
        else
            ZCOPY_CHECK(zcopy_ucx_ep_get(&key, addresses + (size_t)r * stride,
                                         all[r].address_len, &sp->eps[r]));
    }
    return ZCOPY_SUCCESS;
}

/* The ranks of this rank's group fetch descriptors the same way: the most
 * restrictive of what each can do (see control.c's access_agree). */
static zcopy_status_t span_access_agree(const zcopy_span_t *sp,
                                        const span_hello_t *all)
{
    uint32_t access = ZCOPY_IPC_ACCESS_PIDFD;

    for (int r = 0; r < sp->nranks; r++)
        if (sp->group[r] == sp->group[sp->rank] && all[r].access > access)
            access = all[r].access;
    return zcopy_ipc_access_use(access >= ZCOPY_IPC_ACCESS_SOCKET
                                    ? ZCOPY_IPC_ACCESS_SOCKET
                                    : ZCOPY_IPC_ACCESS_PIDFD,
                                all[sp->rank].ipc.table_ino);
}

/* All ranks agree that everyone reached @st == success; else *reason.
 * Needs no memory of its own: a rank that ran out of it must still take
 * part, or the others would wait for it forever. */
static zcopy_status_t span_agree(zcopy_comm_t *zc, zcopy_status_t st,
                                 const char *what, char *reason,
                                 size_t reason_len)
{
    zcopy_comm_vote_t vote;

    if (zcopy_comm_vote(zc, st, 0, &vote) != MPI_SUCCESS) {
        snprintf(reason, reason_len, "setup agreement failed");
        return ZCOPY_ERR_INTERNAL;
    }
    if (vote.rank >= 0) {
        snprintf(reason, reason_len, "%s failed on rank %d", what, vote.rank);
        return vote.value;
    }
    return ZCOPY_SUCCESS;
}

zcopy_status_t zcopy_span_create(zcopy_comm_t *zc, zcopy_span_t **span_p,
                                 char *reason, size_t reason_len)
{
    span_hello_t mine = { 0 }, *all = NULL;
    const void *address = NULL;
    size_t address_len = 0, stride = 0;
    uint8_t *own = NULL, *addresses = NULL;
    zcopy_span_t *sp;
    zcopy_status_t st;

    sp = span_alloc(zc->rank, zc->size);
    all = calloc((size_t)zc->size, sizeof(*all));
    st = sp && all ? zcopy_comm_lists_alloc(zc) : ZCOPY_ERR_NOMEM;
    zcopy_topo_rank_self(&mine.where, false); /* the server is what counts */
    zcopy_cpus_of_self(&mine.cpus);
    if (sp != NULL)
        sp->plane_id = zcopy_span_plane_new_id();
    mine.plane_id = sp != NULL ? sp->plane_id : ZCOPY_SPAN_PLANE_NO_ID;
    if (st == ZCOPY_SUCCESS)
        st = zcopy_ipc_local_id(&mine.ipc);
    if (st == ZCOPY_SUCCESS)
        mine.access = (uint32_t)zcopy_ipc_access_local(mine.ipc.table_fd);
    /* UCX starts here, on the first communicator that needs it, and
     * registers the blocks activated so far. */
    if (st == ZCOPY_SUCCESS)
        st = zcopy_ucx_blocks_start();
    if (st == ZCOPY_SUCCESS)
        st = zcopy_ucx_worker_address(&address, &address_len);
    if (st != ZCOPY_SUCCESS)
        zcopy_log(ZCOPY_LOG_WARN, "ucx", "rank %d: %s", zc->rank,
                  zcopy_error_detail());
    mine.address_len = (uint32_t)address_len;
    if (st == ZCOPY_SUCCESS && zcopy_ucx_rma_network())
        mine.flags |= ZCOPY_SPAN_HELLO_RMA_NETWORK;
    st = span_agree(zc, st, "starting UCX", reason, reason_len);
    if (st != ZCOPY_SUCCESS)
        goto out;

    if (zc->ops.allgather(&mine, all, sizeof(mine), zc->ops.ctx) !=
        MPI_SUCCESS) {
        snprintf(reason, reason_len, "setup exchange failed");
        st = ZCOPY_ERR_INTERNAL;
        goto out;
    }
    for (int r = 0; r < zc->size; r++)
        stride = all[r].address_len > stride ? all[r].address_len : stride;
    own = calloc(1, stride);
    addresses = calloc((size_t)zc->size, stride);
    st = own && addresses ? ZCOPY_SUCCESS : ZCOPY_ERR_NOMEM;
    st = span_agree(zc, st, "setup (out of memory)", reason, reason_len);
    if (st != ZCOPY_SUCCESS)
        goto out;
    memcpy(own, address, address_len);
    if (zc->ops.allgather(own, addresses, stride, zc->ops.ctx) != MPI_SUCCESS) {
        snprintf(reason, reason_len, "worker address exchange failed");
        st = ZCOPY_ERR_INTERNAL;
        goto out;
    }
    span_group(sp, all);
    sp->gets_emulated = true;
    for (int r = 0; r < zc->size; r++)
        if (all[r].flags & ZCOPY_SPAN_HELLO_RMA_NETWORK)
            sp->gets_emulated = false;
    /* Every rank serves (if it must) before any fetches from it: one that
     * cannot is known to all at once. */
    st = span_agree(zc, span_access_agree(sp, all), "serving descriptors",
                    reason, reason_len);
    if (st == ZCOPY_SUCCESS)
        st = span_agree(zc, zcopy_span_plane_create(zc, sp, all),
                        "the control plane", reason, reason_len);
    zcopy_span_plane_shared(sp);
    if (st == ZCOPY_SUCCESS)
        st = span_connect(sp, all, addresses, stride);
    if (st == ZCOPY_SUCCESS)
        st = zcopy_span_plane_connect(sp);
    if (st != ZCOPY_SUCCESS)
        zcopy_log(ZCOPY_LOG_WARN, "coll", "rank %d: %s", zc->rank,
                  zcopy_error_detail());
    st = span_agree(zc, st, "connecting to peers", reason, reason_len);
    if (st == ZCOPY_SUCCESS)
        zcopy_log(ZCOPY_LOG_INFO, "coll", "rank %d of %d: %d groups (%s), "
                  "this rank's has %d", zc->rank, zc->size, sp->ngroups,
                  zcopy_config.transport == ZCOPY_TRANSPORT_UCX
                      ? "one rank each, transport ucx" : "one per server",
                  zcopy_span_group_size(sp, sp->group[zc->rank]));
out:
    free(own);
    free(addresses);
    free(all);
    if (st != ZCOPY_SUCCESS) {
        zcopy_span_destroy(sp);
        return st;
    }
    *span_p = sp;
    return ZCOPY_SUCCESS;
}

/* --- reaching peers' buffers --------------------------------------------- */

uint8_t *zcopy_span_map(zcopy_span_algo_t *sa, int r, uint64_t addr,
                        size_t len)
{
    void *local;

    if (sa->failed)
        return NULL;
    if (r == sa->rank || len == 0)
        return (uint8_t *)(uintptr_t)addr;
    if (sa->sp->peers[r] != NULL &&
        zcopy_ipc_peer_map(sa->sp->peers[r], addr, len, &local) ==
            ZCOPY_SUCCESS)
        return local;
    zcopy_log(ZCOPY_LOG_ERROR, "coll", "rank %d: mapping rank %d: %s",
              sa->rank, r, zcopy_error_detail());
    sa->failed = true;
    return NULL;
}

/* The key of @r's block under [addr, +len), which its arrival named:
 * cached, or asked of @r (a control message this rank sends). */
static zcopy_ucx_rkey_t *span_rkey(zcopy_span_algo_t *sa, int r, uint64_t addr,
                                   size_t len)
{
    const zcopy_span_desc_t *d = zcopy_span_desc(sa->sp, r);
    const zcopy_ucx_block_ref_t *b = NULL;
    zcopy_ucx_rkey_t *rkey;
    zcopy_status_t st;
    bool fetched;

    if (d->sblock.size && zcopy_range_inside(addr, len, d->sblock.va,
                                             d->sblock.size))
        b = &d->sblock;
    else if (d->rblock.size && zcopy_range_inside(addr, len, d->rblock.va,
                                                  d->rblock.size))
        b = &d->rblock;
    else if (d->xblock.size && zcopy_range_inside(addr, len, d->xblock.va,
                                                  d->xblock.size))
        b = &d->xblock;
    if (b == NULL) {
        zcopy_error(ZCOPY_ERR_RANGE, "[%#llx, +%zu) of rank %d is in no block "
                    "it announced", (unsigned long long)addr, len, r);
        return NULL;
    }
    st = zcopy_ucx_rkey_fetch(sa->sp->eps[r], b, &rkey, &fetched);
    if (fetched) {
        sa->zc->stats.ctl_msgs++;
        sa->zc->stats.ctl_bytes += ZCOPY_UCX_KEY_REQUEST_BYTES;
    }
    return st == ZCOPY_SUCCESS ? rkey : NULL;
}

static void span_fail(zcopy_span_algo_t *sa, const char *what, int r)
{
    zcopy_log(ZCOPY_LOG_ERROR, "coll", "rank %d: %s rank %d: %s", sa->rank,
              what, r, zcopy_error_detail());
    sa->failed = true;
}

/* A get or put inside the group (or on this rank's own memory): a copy
 * through the mapping, at once. */
static void span_copy_mapped(zcopy_span_algo_t *sa, int r, uint64_t addr,
                             size_t len, void *local, bool to_peer)
{
    uint8_t *peer = zcopy_span_map(sa, r, addr, len);

    if (peer == NULL || peer == local)
        return;
    if (to_peer)
        zcopy_copy(peer, local, len);
    else
        zcopy_copy(local, peer, len);
    sa->ipc_bytes += r == sa->rank ? 0 : len;
}

/* coll_zcopy_ucx_fetch: auto reads by get only where the network does it
 * without the peer's worker (src/ucx/README.md, "Fetch engines"). */
static bool span_fetch_by_get(zcopy_ucx_ep_t *ep)
{
    if (zcopy_config.ucx_fetch == ZCOPY_UCX_FETCH_AUTO)
        return zcopy_ucx_ep_rma_native(ep);
    return zcopy_config.ucx_fetch == ZCOPY_UCX_FETCH_GET;
}

/* Whether @r is the root of a bcast or a scatter, which answers every
 * reader on the other servers: there the point-to-point engine's
 * rendezvous waits for the root's progress twice, where one tagged send
 * needs it once (src/ucx/README.md, "The job's point-to-point engine"). */
static bool span_read_from_root(const zcopy_span_algo_t *sa, int r)
{
    const zcopy_coll_type_t type = sa->a->type;

    return (type == ZCOPY_COLL_BCAST || type == ZCOPY_COLL_SCATTER) &&
           r == sa->a->root;
}

/* Whether auto answers a read of @len bytes from @r through the job's
 * point-to-point engine: large reads where UCX's get is emulated. Not
 * under MPI_THREAD_MULTIPLE, where the target's send inside the UCX
 * layer's lock could wait for a free list that another thread, waiting
 * for that lock, is growing; nor on a communicator that lost a request
 * (a late answer would wait under the tag of the next read). */
static bool span_auto_by_p2p(const zcopy_span_algo_t *sa, int r, size_t len)
{
    return zcopy_config.ucx_p2p_min > 0 && len >= zcopy_config.ucx_p2p_min &&
           !zcopy_config.mpi_threads && !sa->sp->p2p_lost &&
           !span_read_from_root(sa, r) &&
           !zcopy_ucx_ep_rma_native(sa->sp->eps[r]);
}

/* Whether a read of @len bytes from @r is answered through the job's
 * point-to-point engine: where the host has one and the read fits one of
 * its messages (an int count of bytes), always under
 * coll_zcopy_ucx_fetch pml, and under auto as above. */
static bool span_fetch_by_p2p(const zcopy_span_algo_t *sa, int r, size_t len)
{
    if (zcopy_host.p2p_irecv == NULL || zcopy_host.comm_cid == NULL ||
        len > INT_MAX)
        return false;
    if (zcopy_config.ucx_fetch == ZCOPY_UCX_FETCH_PML)
        return true;
    return zcopy_config.ucx_fetch == ZCOPY_UCX_FETCH_AUTO &&
           span_auto_by_p2p(sa, r, len);
}

static const char *span_p2p_what(zcopy_span_p2p_kind_t kind)
{
    switch (kind) {
    case ZCOPY_SPAN_P2P_PUSH_IN:
        return "push from";
    case ZCOPY_SPAN_P2P_PUSH_OUT:
        return "push to";
    default:
        return "read from";
    }
}

/* Whether @rd has finished: sent or brought its bytes, or failed, or (a
 * read whose request was lost on the way) been cancelled, after which
 * auto no longer reads through the engine on this communicator. */
static bool span_p2p_done(zcopy_span_algo_t *sa, zcopy_span_p2p_t *rd)
{
    bool failed;
    size_t len;

    if (rd->lost) {
        zcopy_host.p2p_cancel(rd->req);
        sa->sp->p2p_lost = true;
        return true;
    }
    if (!zcopy_host.p2p_done(rd->req, &len, &failed))
        return false;
    if (failed || (rd->kind != ZCOPY_SPAN_P2P_PUSH_OUT && len != rd->len)) {
        /* An empty answer to a read: the peer refused the range. */
        zcopy_error(ZCOPY_ERR_RANGE, "a transfer through the point-to-point "
                    "engine failed or brought %zu of %zu bytes",
                    failed ? (size_t)0 : len, rd->len);
        span_fail(sa, span_p2p_what(rd->kind), rd->peer);
    }
    return true;
}

/* Marks lost every read of @p2p from @peer (from anyone: @all). Pushes
 * need no request, so nothing is lost of them: their peers post their
 * parts whatever happened to UCX. */
static void span_p2p_lose(zcopy_span_p2p_t *p2p, int peer, bool all)
{
    for (zcopy_span_p2p_t *rd = p2p; rd != NULL; rd = rd->next)
        if (rd->kind == ZCOPY_SPAN_P2P_READ && (all || rd->peer == peer))
            rd->lost = true;
}

/* Frees the transfers that have finished; returns how many have not. */
static unsigned span_p2p_retire(zcopy_span_algo_t *sa)
{
    zcopy_span_p2p_t **link = &sa->p2p;

    while (*link != NULL) {
        zcopy_span_p2p_t *rd = *link;

        if (!span_p2p_done(sa, rd)) {
            link = &rd->next;
            continue;
        }
        *link = rd->next;
        free(rd);
        sa->p2p_inflight--;
    }
    return sa->p2p_inflight;
}

/* Retires transfers until at most @most remain, progressing meanwhile. */
static void span_p2p_wait(zcopy_span_algo_t *sa, unsigned most)
{
    zcopy_wait_t w;

    zcopy_wait_init(&w, sa->sp->yield, sa->rank,
                    "a transfer through the point-to-point engine",
                    sa->zc->calls);
    while (span_p2p_retire(sa) > most) {
        zcopy_ucx_progress();
        zcopy_wait_turn(&w, sa->p2p->peer, 1);
    }
}

/* coll_zcopy_ucx_max_requests for transfers through the point-to-point
 * engine, before @need more: a read counts until its answer has landed,
 * not only its request message (which usually completes at once), so
 * that a large alltoall does not ask every peer at once; a pushed block
 * counts twice, its receive and its send. */
static void span_p2p_throttle(zcopy_span_algo_t *sa, unsigned need)
{
    const unsigned max = zcopy_config.ucx_max_requests;

    zcopy_ucx_throttle(&sa->comp, ZCOPY_UCX_GET_REQUESTS, max);
    if (max > 0 && sa->p2p_inflight + need > max)
        span_p2p_wait(sa, max > need ? max - need : 0);
}

/* Waits for the transfers through the point-to-point engine, which
 * completes them in Open MPI's progress while the UCX worker serves the
 * peers. Called once the reads' requests are done: every request that reached
 * its target is answered, even where this rank's collective has failed
 * (cancelling it would leave the answer unmatched, and its send pending). */
static void span_wait_p2p(zcopy_span_algo_t *sa, bool all_lost)
{
    /* A lost request may still have arrived (UCX reports the endpoint's
     * failure, not the message's): its answer would then match a later
     * read's receive from that peer. Nothing more from that peer is
     * awaited; the collective has failed anyway. */
    for (zcopy_span_p2p_t *rd = sa->p2p; rd != NULL; rd = rd->next)
        if (rd->lost || all_lost)
            span_p2p_lose(sa->p2p, rd->peer, all_lost);
    span_p2p_wait(sa, 0);
}

/* Starts @rd's receive into, or (a pushed block's send) send from, @buf;
 * the engine's nonzero error code when it would not. */
static int span_p2p_start(zcopy_span_algo_t *sa, zcopy_span_p2p_t *rd,
                          void *buf)
{
    const uint32_t cid = zcopy_host.comm_cid(sa->zc->handle);
    const zcopy_host_p2p_t tag = rd->kind == ZCOPY_SPAN_P2P_READ
                                     ? ZCOPY_HOST_P2P_READ
                                     : ZCOPY_HOST_P2P_PUSH;

    if (rd->kind == ZCOPY_SPAN_P2P_PUSH_OUT)
        return zcopy_host.p2p_isend(cid, rd->peer, tag, buf, rd->len,
                                    &rd->req);
    return zcopy_host.p2p_irecv(cid, rd->peer, tag, buf, rd->len, &rd->req);
}

/* A read's receive of @len bytes from @r into @dst; NULL, and the call
 * marked failed, when it could not be posted. Not yet in sa->p2p: the
 * caller links it once its request has left (span_p2p_link). */
static zcopy_span_p2p_t *span_read_post(zcopy_span_algo_t *sa, int r,
                                        void *dst, size_t len)
{
    zcopy_span_p2p_t *rd = malloc(sizeof(*rd));

    if (rd == NULL) {
        zcopy_error(ZCOPY_ERR_NOMEM, "out of memory");
        span_fail(sa, "read from", r);
        return NULL;
    }
    *rd = (zcopy_span_p2p_t){ .len = len, .peer = r,
                              .kind = ZCOPY_SPAN_P2P_READ };
    if (span_p2p_start(sa, rd, dst) != 0) {
        zcopy_error(ZCOPY_ERR_INTERNAL, "the point-to-point receive failed");
        free(rd);
        span_fail(sa, "read from", r);
        return NULL;
    }
    return rd;
}

/* Counts @rd (bytes: those it brings) and keeps it until it finishes. */
static void span_p2p_link(zcopy_span_algo_t *sa, zcopy_span_p2p_t *rd)
{
    rd->next = sa->p2p;
    sa->p2p = rd;
    if (++sa->p2p_inflight > sa->p2p_peak)
        sa->p2p_peak = sa->p2p_inflight;
    if (rd->kind != ZCOPY_SPAN_P2P_PUSH_OUT)
        sa->p2p_bytes += rd->len;
}

/* A read answered through the job's point-to-point engine: the receive
 * is posted before the request leaves, so the answer never waits
 * unexpected at this rank. */
static void span_read_p2p(zcopy_span_algo_t *sa, int r, uint64_t addr,
                          size_t len, void *dst)
{
    const uint32_t cid = zcopy_host.comm_cid(sa->zc->handle);
    zcopy_ucx_rkey_t *rkey;
    zcopy_span_p2p_t *rd;

    span_p2p_throttle(sa, 1);
    rkey = span_rkey(sa, r, addr, len);
    if (rkey == NULL) {
        span_fail(sa, "read from", r);
        return;
    }
    rd = span_read_post(sa, r, dst, len);
    if (rd == NULL)
        return;
    if (zcopy_ucx_read_ask(sa->sp->eps[r], addr, rkey, len, cid, sa->rank,
                           &rd->lost, &sa->comp) != ZCOPY_SUCCESS) {
        zcopy_host.p2p_cancel(rd->req); /* nobody will answer it */
        free(rd);
        span_fail(sa, "read from", r);
        return;
    }
    span_p2p_link(sa, rd);
}

/* Only where some server has several ranks: there a read waits until its
 * target, which shares its cores, runs and serves it, where a push needs
 * no request (emulated cluster, medians of 7 interleaved jobs, alltoall of
 * 1 MiB: 2 servers of 2 ranks 730 us read, 617-679 pushed; 2 virtual
 * servers of 2 ranks 491 and 291-307). With one rank per server the reads
 * won (2 servers of 1: 316 us read, 376-416 pushed; at 4 MiB 1112 against
 * 1442-1468): a read's eager answer needs no rendezvous. */
bool zcopy_span_pushes_all(const zcopy_span_t *sp)
{
    return sp->max_group > 1 &&
           zcopy_config.ucx_fetch == ZCOPY_UCX_FETCH_AUTO &&
           zcopy_config.ucx_push_min > 0 && sp->gets_emulated &&
           zcopy_host.p2p_isend != NULL && zcopy_host.comm_cid != NULL;
}

bool zcopy_span_pushes(const zcopy_span_algo_t *sa, size_t len)
{
    return zcopy_span_pushes_all(sa->sp) &&
           len >= zcopy_config.ucx_push_min && len <= INT_MAX;
}

/* Starts one part of a push whatever failed before: its partner waits
 * for it before any sync that could tell it of a failure here (none does
 * where the alltoall's last sync stays inside each server), so a part
 * left out would hang it. A receive the engine refuses is retried,
 * progressing (ob1 refuses one only for want of a request, and takes
 * nothing meanwhile); a refused send is not, since ob1 has then used up
 * the message's sequence number, and a retry would never match: the
 * call fails instead, and the error (fatal, under MPI's default handler)
 * ends the job rather than a hang. Returns its record, @spare where there
 * was no memory for one (the caller then waits for it before it leaves
 * the step), NULL for a refused send. */
static zcopy_span_p2p_t *span_push_part(zcopy_span_algo_t *sa,
                                        zcopy_span_p2p_kind_t kind, int r,
                                        void *buf, size_t len,
                                        zcopy_span_p2p_t *spare)
{
    zcopy_span_p2p_t *rd = malloc(sizeof(*rd));
    unsigned refused = 0;
    zcopy_wait_t w;
    int rc;

    if (rd == NULL)
        rd = spare;
    *rd = (zcopy_span_p2p_t){ .len = len, .peer = r, .kind = kind };
    zcopy_wait_init(&w, sa->sp->yield, sa->rank, "posting a pushed block",
                    sa->zc->calls);
    while ((rc = span_p2p_start(sa, rd, buf)) != 0) {
        if (!refused++)
            zcopy_log(ZCOPY_LOG_WARN, "coll", "rank %d: the point-to-point "
                      "engine refused a pushed block's %s (%s rank %d, "
                      "error %d)%s", sa->rank,
                      kind == ZCOPY_SPAN_P2P_PUSH_OUT ? "send" : "receive",
                      kind == ZCOPY_SPAN_P2P_PUSH_OUT ? "to" : "from", r, rc,
                      kind == ZCOPY_SPAN_P2P_PUSH_OUT ? "" : "; retrying");
        if (kind == ZCOPY_SPAN_P2P_PUSH_OUT) {
            zcopy_error(ZCOPY_ERR_INTERNAL, "the point-to-point send failed");
            span_fail(sa, "push to", r);
            if (rd != spare)
                free(rd);
            return NULL;
        }
        zcopy_ucx_progress();
        zcopy_wait_turn(&w, r, 1);
    }
    if (rd != spare)
        span_p2p_link(sa, rd);
    else if (kind == ZCOPY_SPAN_P2P_PUSH_IN)
        sa->p2p_bytes += len;
    return rd;
}

void zcopy_span_push(zcopy_span_algo_t *sa, int from, void *dst, size_t rlen,
                     int to, const void *src, size_t slen)
{
    zcopy_span_p2p_t spare[2], *rd[2] = { NULL, NULL };
    zcopy_wait_t w;

    if (rlen + slen == 0)
        return;
    /* Posted even where this rank's call has failed (span_push_part). */
    span_p2p_throttle(sa, (rlen > 0) + (slen > 0));
    if (rlen > 0)
        rd[0] = span_push_part(sa, ZCOPY_SPAN_P2P_PUSH_IN, from, dst, rlen,
                               &spare[0]);
    /* The engine only reads a send buffer; its interface takes no const. */
    if (slen > 0)
        rd[1] = span_push_part(sa, ZCOPY_SPAN_P2P_PUSH_OUT, to,
                               (void *)(uintptr_t)src, slen, &spare[1]);
    /* Both parts of the step are out, so waiting for them here is as safe
     * as the bound's waits. */
    zcopy_wait_init(&w, sa->sp->yield, sa->rank, "a pushed block",
                    sa->zc->calls);
    for (int i = 0; i < 2; i++)
        while (rd[i] == &spare[i] && !span_p2p_done(sa, rd[i])) {
            zcopy_ucx_progress();
            zcopy_wait_turn(&w, rd[i]->peer, 1);
        }
}

void zcopy_span_get(zcopy_span_algo_t *sa, int r, uint64_t addr, size_t len,
                    void *dst)
{
    zcopy_ucx_ep_t *ep = sa->sp->eps[r];
    zcopy_ucx_rkey_t *rkey;
    zcopy_status_t st;
    bool by_get;

    if (sa->failed || len == 0)
        return;
    if (ep == NULL) {
        span_copy_mapped(sa, r, addr, len, dst, false);
        return;
    }
    if (span_fetch_by_p2p(sa, r, len)) {
        span_read_p2p(sa, r, addr, len, dst);
        return;
    }
    by_get = span_fetch_by_get(ep);
    zcopy_ucx_throttle(&sa->comp, by_get ? ZCOPY_UCX_GET_REQUESTS
                                         : ZCOPY_UCX_READ_REQUESTS,
                       zcopy_config.ucx_max_requests);
    rkey = span_rkey(sa, r, addr, len);
    if (rkey == NULL) {
        span_fail(sa, "get from", r);
        return;
    }
    st = by_get ? zcopy_ucx_get(ep, dst, NULL, addr, rkey, len, &sa->comp)
                : zcopy_ucx_read(ep, dst, addr, rkey, len, &sa->comp);
    if (st != ZCOPY_SUCCESS)
        span_fail(sa, "get from", r);
}

void zcopy_span_put(zcopy_span_algo_t *sa, int r, uint64_t addr, size_t len,
                    const void *src)
{
    zcopy_ucx_rkey_t *rkey;

    if (sa->failed || len == 0)
        return;
    if (sa->sp->eps[r] == NULL) {
        span_copy_mapped(sa, r, addr, len, (void *)src, true);
        return;
    }
    zcopy_ucx_throttle(&sa->comp, ZCOPY_UCX_PUT_REQUESTS,
                       zcopy_config.ucx_max_requests);
    rkey = span_rkey(sa, r, addr, len);
    if (rkey == NULL || zcopy_ucx_put(sa->sp->eps[r], src, NULL, addr, rkey,
                                      len, &sa->comp) != ZCOPY_SUCCESS) {
        span_fail(sa, "put to", r);
        return;
    }
    sa->sp->flags[r] = 1; /* dirty: flushed before the next sync */
}

/* Waits for this rank's gets and puts, then makes its puts visible at the
 * targets (a put's own completion only frees the source). */
void zcopy_span_complete(zcopy_span_algo_t *sa)
{
    zcopy_span_t *sp = sa->sp;

    if (zcopy_ucx_wait(&sa->comp) != ZCOPY_SUCCESS)
        span_fail(sa, "transfers with", -1);
    /* Requests still pending outlived the worker: none will be answered. */
    if (sa->p2p != NULL)
        span_wait_p2p(sa, sa->comp.pending != 0);
    if (sa->comp.peak > 0)
        zcopy_log(ZCOPY_LOG_TRACE, "coll", "rank %d: %s: at most %u UCX "
                  "requests in flight (coll_zcopy_ucx_max_requests %u)",
                  sa->rank, zcopy_coll_names[sa->a->type], sa->comp.peak,
                  zcopy_config.ucx_max_requests);
    if (sa->p2p_peak > 0)
        zcopy_log(ZCOPY_LOG_TRACE, "coll", "rank %d: %s: at most %u "
                  "transfers through the point-to-point engine in flight "
                  "(coll_zcopy_ucx_max_requests %u)", sa->rank,
                  zcopy_coll_names[sa->a->type], sa->p2p_peak,
                  zcopy_config.ucx_max_requests);
    sa->p2p_peak = 0;
    sa->ucx_bytes += sa->comp.bytes;
    sa->comp = (zcopy_ucx_comp_t)ZCOPY_UCX_COMP_INIT;
    for (int r = 0; r < sp->nranks; r++) {
        if (!sp->flags[r])
            continue;
        sp->flags[r] = 0;
        if (zcopy_ucx_flush(sp->eps[r]) != ZCOPY_SUCCESS)
            span_fail(sa, "flush to", r);
    }
}

bool zcopy_span_sync(zcopy_span_algo_t *sa)
{
    zcopy_span_complete(sa);
    return zcopy_span_plane_sync(sa->zc, sa->sp, sa->failed
                                                     ? ZCOPY_SYNC_FAILED
                                                     : 0) != 0;
}

bool zcopy_span_sync_group(zcopy_span_algo_t *sa)
{
    zcopy_span_complete(sa);
    return zcopy_span_plane_sync_group(sa->zc, sa->sp, sa->failed
                                                           ? ZCOPY_SYNC_FAILED
                                                           : 0) != 0;
}

/* At least @bytes of landing area, kept between calls. */
static bool span_landing_reserve(zcopy_span_t *sp, size_t bytes)
{
    void *p;

    if (bytes <= sp->landing_size)
        return true;
    if (posix_memalign(&p, ZCOPY_CACHE_LINE, bytes) != 0)
        return false;
    free(sp->landing);
    sp->landing = p;
    sp->landing_size = bytes;
    return true;
}

/* At least @bytes of registered scratch, kept between calls and grown by
 * replacing it: each replacement is a new registration with a generation
 * of its own, so peers never use the old key for the new memory. Called
 * before the arrival, when no transfer can touch the old scratch.
 *
 * Pages of its own, straight from the kernel: memory from the process's
 * allocator may lie in an activated block (an application whose allocator
 * serves activated memory), whose UCX registration a second one would
 * overlap. */
static bool span_scratch_reserve(zcopy_span_t *sp, size_t bytes)
{
    const void *rkey;
    size_t rkey_len;
    void *p;

    if (bytes <= sp->scratch.size)
        return true;
    /* Doubling: a growing message size re-registers only log times. */
    bytes = zcopy_align_up(bytes > 2 * sp->scratch.size ? bytes
                                                        : 2 * sp->scratch.size,
                           64u << 10);
    span_scratch_release(sp);
    p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
             -1, 0);
    if (p == MAP_FAILED)
        return false;
    if (zcopy_ucx_mem_register(p, bytes, ZCOPY_MEM_HOST, &sp->scratch_mem) !=
        ZCOPY_SUCCESS) {
        munmap(p, bytes);
        return false;
    }
    zcopy_ucx_mem_packed_rkey(sp->scratch_mem, &rkey, &rkey_len);
    if (rkey_len > ZCOPY_UCX_RKEY_FETCH_MAX) { /* peers could not fetch it */
        zcopy_ucx_mem_unregister(sp->scratch_mem);
        sp->scratch_mem = NULL;
        munmap(p, bytes);
        return false;
    }
    sp->scratch = (zcopy_ucx_block_ref_t){
        .va = (uintptr_t)p, .size = bytes,
        .generation = zcopy_registry_new_generation() };
    return true;
}

/* --- one collective ------------------------------------------------------- */

static const zcopy_span_fn_t span_algorithms[ZCOPY_COLL_COUNT] = {
    [ZCOPY_COLL_ALLREDUCE] = zcopy_span_allreduce,
    [ZCOPY_COLL_REDUCE] = zcopy_span_reduce,
    [ZCOPY_COLL_REDUCE_SCATTER] = zcopy_span_reduce_scatter,
    [ZCOPY_COLL_REDUCE_SCATTER_BLOCK] = zcopy_span_reduce_scatter,
    [ZCOPY_COLL_ALLGATHER] = zcopy_span_allgather,
    [ZCOPY_COLL_ALLGATHERV] = zcopy_span_allgather,
    [ZCOPY_COLL_BCAST] = zcopy_span_bcast,
    [ZCOPY_COLL_GATHER] = zcopy_span_gather,
    [ZCOPY_COLL_GATHERV] = zcopy_span_gather,
    [ZCOPY_COLL_SCATTER] = zcopy_span_scatter,
    [ZCOPY_COLL_SCATTERV] = zcopy_span_scatter,
    [ZCOPY_COLL_ALLTOALL] = zcopy_span_alltoall,
    [ZCOPY_COLL_ALLTOALLV] = zcopy_span_alltoall,
};

/* This rank's arrival: the plan, plus the blocks under its buffers, which
 * peers in other groups need to reach them; only the plan when the
 * payloads ride along (@inline_total). */
static void span_describe(zcopy_comm_t *zc, const zcopy_coll_args_t *a,
                          const coll_plan_t *plan, size_t inline_total,
                          zcopy_span_desc_t *d)
{
    size_t landing, scratch;

    memset(d, 0, sizeof(*d));
    d->args = plan->args;
    if (d->args.reason != REASON_NONE || inline_total > 0)
        return;
    /* Swapping blocks in place between servers needs a copy of one side
     * somewhere: not zero-copy, so the previous component does it, but
     * for an alltoallv whose blocks ride the arrival, copied into their
     * slots (zcopy_span_run). */
    if ((a->type == ZCOPY_COLL_ALLTOALL || a->type == ZCOPY_COLL_ALLTOALLV) &&
        (d->args.flags & ZCOPY_PLAN_IN_PLACE)) {
        d->args.reason = REASON_SPAN_IN_PLACE;
        return;
    }
    zcopy_span_needs(zc->span, a, plan->ssize, &landing, &scratch);
    if ((plan->slen > 0 && !zcopy_ucx_blocks_find((uintptr_t)plan->sbuf,
                                                  plan->slen, &d->sblock)) ||
        (plan->rlen > 0 && !zcopy_ucx_blocks_find((uintptr_t)plan->rbuf,
                                                  plan->rlen, &d->rblock)))
        d->args.reason = REASON_UCX_BLOCK;
    else if (!span_landing_reserve(zc->span, landing) ||
             (scratch > 0 && !span_scratch_reserve(zc->span, scratch)) ||
             !zcopy_comm_hold(zc, zcopy_coll_holding_bytes(zc, a,
                                                           plan->ssize)))
        d->args.reason = REASON_SCRATCH;
    else if (scratch > 0)
        d->xblock = zc->span->scratch;
}

/* Byte where this rank's block for @j starts in its send buffer. */
static int64_t span_sdispl(const zcopy_coll_args_t *a, size_t ssize, int j)
{
    return a->sbuf == MPI_IN_PLACE ? 0
                                   : (int64_t)a->sdispls[j] * (int64_t)ssize;
}

/* alltoallv, where every block between groups is pushed: this rank's
 * displacements for its group's members, in its row of the group's
 * segment, before its arrival (zcopy_span_group_displs); control bytes,
 * as a server's alltoallv counts the vectors it publishes, but no
 * message. */
static void span_publish_sdispls(zcopy_comm_t *zc, zcopy_span_t *sp,
                                 const zcopy_coll_args_t *a, size_t ssize)
{
    const int g = sp->group[sp->rank], m = zcopy_span_group_size(sp, g);
    int64_t *row = zcopy_span_group_displs(sp, sp->index[sp->rank]);

    for (int i = 0; i < m; i++)
        row[i] = span_sdispl(a, ssize, zcopy_span_member(sp, g, i));
    zc->stats.ctl_bytes += (uint64_t)m * sizeof(int64_t);
}

/* alltoallv: each rank learns where its block starts in the send buffers
 * of the peers that it reads (only the owner's sdispls say so), once all
 * have agreed to run zero-copy. Where every block between groups is
 * pushed, it reads its group's alone, from their rows of the segment,
 * with no message. Otherwise through the previous component's alltoall:
 * a message per other rank, which grows with the ranks (data of an
 * alltoallv does too); a rank that waits there still serves its peers'
 * reads through Open MPI's progress loop. */
static int span_learn_sdispls(zcopy_comm_t *zc, zcopy_span_t *sp,
                              const zcopy_coll_args_t *a, size_t ssize)
{
    const int g = sp->group[sp->rank];

    if (zcopy_span_pushes_all(sp)) {
        for (int i = 0; i < zcopy_span_group_size(sp, g); i++)
            sp->sdispls[zcopy_span_member(sp, g, i)] =
                zcopy_span_group_displs(sp, i)[sp->index[sp->rank]];
        return MPI_SUCCESS;
    }
    for (int j = 0; j < sp->nranks; j++)
        sp->sdispls_out[j] = span_sdispl(a, ssize, j);
    span_count(zc, sizeof(int64_t));
    return zc->ops.alltoall(sp->sdispls_out, sp->sdispls, sizeof(int64_t),
                            zc->ops.ctx);
}

/* A code from another process: checked before it indexes. */
static const char *span_reason_text(uint32_t reason)
{
    return reason != REASON_NONE && reason < REASON_COUNT
               ? zcopy_coll_reason_text[reason]
               : "a rank was not eligible";
}

/* The fallback of an arrival this rank's group settled alone (plane.c,
 * plane_settles): a rank of the group declined, so every rank falls
 * back. The reason is the first of the group's
 * (the same on all its ranks); other groups' places may not be here. */
static zcopy_status_t span_fallback_settled(zcopy_comm_t *zc,
                                            zcopy_span_t *sp,
                                            zcopy_coll_type_t type)
{
    const int g = sp->group[sp->rank];
    uint32_t reason = REASON_NONE;

    for (int i = 0; i < zcopy_span_group_size(sp, g) && !reason; i++)
        reason = zcopy_span_desc(sp, zcopy_span_member(sp, g, i))->args.reason;
    return zcopy_coll_fallback(zc, type, span_reason_text(reason));
}

/* Payload bytes per rank that may ride the arrival round.
 *
 * Where each rank reads one block of every payload (alltoall,
 * reduce_scatter_block, scatter) and leaders cannot send each server only
 * its ranks' blocks (rounds in steps, or a message that would need more
 * pieces than plane.c allows), a server of h ranks receives n / h times
 * what they read, so such calls get a quarter of
 * coll_zcopy_span_inline_max: on the emulated cluster they ran up to 1.4x
 * slower inline than through transfers at 128-256 KiB, while the others
 * ran 1.2-2x faster inline up to 256 KiB (docs/parameters.md).
 *
 * bcast, scatter and alltoall get twice the parameter otherwise, and the
 * whole payload area, where the others keep ZCOPY_SPAN_PAYLOAD_ALL_MAX in
 * all (span_inline_room): each of their ranks reads at most one payload's
 * worth of the arrival and reduces nothing, so what crosses between
 * servers is what the receivers keep, copied out of the segment once,
 * while through transfers each rank asks for its part and waits for its
 * sender's progress to serve it. At 512 KiB per rank they ran 1.0-1.6x
 * faster inline on 2 servers of 1 and of 2 ranks and on two virtual
 * servers, where allreduce, reduce_scatter_block and allgather, whose
 * ranks reduce or read every payload, ran up to 2x slower inline
 * (docs/parameters.md).
 *
 * An allreduce inline sends each other server its m ranks' whole vectors
 * (m the largest server's ranks), where the hierarchical allreduce sends
 * about one vector's worth in more rounds, so it carries the parameter
 * over m. On 2 of 2 (emulated or virtual) it ran 1.1-1.7x slower inline
 * at 256 KiB, and at 96-128 KiB either way (docs/parameters.md). With one
 * rank a server it carries twice the parameter, within the 1 MiB of all
 * payloads (512 KiB on 2 servers, 341 KiB on 3, as before from 4): there
 * stock's recursive doubling sends the whole vector once too, and on 2
 * servers of 1 rank 512 KiB took 238 us inline against 360 through
 * transfers (11 interleaved jobs, docs/parameters.md). */
static size_t span_inline_limit(const zcopy_span_t *sp,
                                const zcopy_coll_args_t *a)
{
    const size_t limit = zcopy_config.span_inline_max;
    const size_t m = (size_t)sp->max_group;

    if (zcopy_coll_payload_is_blocks(a->type) && !sp->blocks_split)
        return limit / 4;
    if (zcopy_span_reads_one_payload(a->type))
        return zcopy_span_payload_rank_max();
    if (a->type == ZCOPY_COLL_ALLREDUCE)
        return m == 1 ? zcopy_span_payload_rank_max() : limit / m;
    return limit;
}

/* Bytes of payload one arrival of @a may carry in all (span_inline_limit). */
static size_t span_inline_room(const zcopy_coll_args_t *a)
{
    return zcopy_span_reads_one_payload(a->type) ? ZCOPY_SPAN_PAYLOAD_MAX
                                                 : ZCOPY_SPAN_PAYLOAD_ALL_MAX;
}

/* Whether a payload can be read from its source until the call ends
 * (zcopy_span_arrive): MPI keeps the buffers of a call still, and its
 * delivery writes no input (zcopy_coll_inline_deliver) but in place,
 * where output and input are one buffer; even then a bcast's root
 * delivers nothing, and an allgather or a gather's root writes every
 * block but its own. */
static bool span_source_stays(const zcopy_coll_args_t *a)
{
    return a->type == ZCOPY_COLL_BCAST || a->type == ZCOPY_COLL_ALLGATHER ||
           a->type == ZCOPY_COLL_GATHER || a->sbuf != MPI_IN_PLACE;
}

/* Bytes of payload that ride with @a's arrival, 0 where its data moves
 * after it; fills @pl. The same decision on every rank: from arguments
 * MPI makes agree and parameters agreed at set-up. */
static size_t span_payload(const zcopy_comm_t *zc, const zcopy_span_t *sp,
                           const zcopy_coll_args_t *a,
                           zcopy_span_payload_t *pl)
{
    size_t total = zcopy_coll_inline_bytes(zc, a, span_inline_limit(sp, a));

    if (a->type == ZCOPY_COLL_BCAST || a->type == ZCOPY_COLL_SCATTER)
        pl->root = a->root;
    if (a->type == ZCOPY_COLL_REDUCE || a->type == ZCOPY_COLL_GATHER)
        pl->reader = a->root;
    pl->len = total;
    if (!zcopy_span_payload_fits(sp, pl, span_inline_room(a)))
        total = pl->len = 0;
    /* Each rank reads one block of these payloads: where blocks are
     * split, leaders send each server only its ranks' (plane.c). */
    if (zcopy_coll_payload_is_blocks(a->type))
        pl->block = total / (size_t)sp->nranks;
    return total;
}

/* alltoallv: the slot in which each rank's blocks may ride its arrival,
 * packed with their offsets (zcopy_coll_vpack), or 0 where they never do.
 * Only each pair knows its block's size, so a rank carries its blocks
 * where they fit, says so in its place, and the call is inline where
 * every rank did (span_all_carried); else they move after the arrival as
 * before. Leaders send each server only its ranks' blocks (plane.c), so
 * the slot is an alltoall's payload at most: twice
 * coll_zcopy_span_inline_max, within the area over the ranks. Where
 * leaders cannot (sp->packs), none rides. In place too: a rank that
 * carries its blocks swaps nothing in its buffer with another server's
 * (span_describe), so only one that does not declines. The same on every
 * rank. A rank that carries still names its blocks and reserves what the
 * transfers need: whether they run, it learns only from the arrival (in
 * place it names nothing: the call rides or falls back). */
static size_t span_vslot(const zcopy_span_t *sp, const zcopy_coll_args_t *a)
{
    size_t slot = zcopy_span_payload_rank_max();

    if (a->type != ZCOPY_COLL_ALLTOALLV || !sp->packs)
        return 0;
    if (slot > sp->payload_size / (size_t)sp->nranks)
        slot = sp->payload_size / (size_t)sp->nranks;
    slot -= slot % ZCOPY_CACHE_LINE;
    return slot > zcopy_coll_vpack_min(sp->nranks) ? slot : 0;
}

/* alltoallv: this rank's blocks packed into its slot of the coming
 * arrival, where they fit, and how much it filled said in @mine (the
 * arrival's payloads then vary, @pl); in place, where they do not, it
 * declines ("in place across servers", from span_describe). */
static void span_carry_blocks(zcopy_comm_t *zc, zcopy_span_t *sp,
                              const zcopy_coll_args_t *a,
                              const coll_plan_t *plan, size_t slot,
                              zcopy_span_payload_t *pl,
                              zcopy_span_desc_t *mine)
{
    const bool in_place = mine->args.reason == REASON_SPAN_IN_PLACE &&
                          plan->args.reason == REASON_NONE;

    pl->len = slot;
    pl->varies = true;
    if (mine->args.reason == REASON_NONE || in_place)
        mine->carried = zcopy_coll_vpack(zc, a, plan,
                                         zcopy_span_payload_next(sp, pl),
                                         slot);
    if (in_place && mine->carried > 0)
        mine->args.reason = REASON_NONE;
}

/* Whether every rank's alltoallv blocks rode the arrival in its slot of
 * @slot bytes: at least their table of offsets (zcopy_coll_vpack). */
static bool span_all_carried(const zcopy_span_t *sp, size_t slot)
{
    const size_t head = zcopy_coll_vpack_min(sp->nranks);

    for (int r = 0; r < sp->nranks; r++) {
        const uint64_t carried = zcopy_span_desc(sp, r)->carried;

        if (carried < head || carried > slot)
            return false;
    }
    return true;
}

/* Whether a rank's alltoallv is in place. MPI has every rank's be or
 * none, and then one that did not carry its blocks declines; a program
 * that mixes them could otherwise send an in-place rank, which named no
 * block, into the transfers: every rank falls back alike instead. */
static bool span_any_in_place(const zcopy_span_t *sp)
{
    for (int r = 0; r < sp->nranks; r++)
        if (zcopy_span_desc(sp, r)->args.flags & ZCOPY_PLAN_IN_PLACE)
            return true;
    return false;
}

/* The payloads came with the arrivals: nobody reads a peer's buffer, so
 * no sync follows (as in a server, inline.c). @total: each rank's
 * payload, or an alltoallv's slot. */
static zcopy_status_t span_deliver(zcopy_comm_t *zc, zcopy_span_t *sp,
                                   const zcopy_coll_args_t *a, size_t total)
{
    const uint8_t **lines = zcopy_comm_list(zc, ZCOPY_COMM_LIST_INPUTS);

    for (int r = 0; r < sp->nranks; r++)
        lines[r] = zcopy_span_payload_at(sp, r);
    ZCOPY_CHECK(zcopy_coll_inline_deliver(zc, a, lines, total));
    zc->stats.zcopy_calls++;
    zc->stats.inline_calls++;
    return ZCOPY_SUCCESS;
}

zcopy_status_t zcopy_span_run(zcopy_comm_t *zc, const zcopy_coll_args_t *a)
{
    zcopy_span_t *sp = zc->span;
    zcopy_span_algo_t sa = { .zc = zc, .sp = sp, .a = a, .rank = zc->rank,
                             .nranks = zc->size,
                             .comp = ZCOPY_UCX_COMP_INIT };
    zcopy_span_payload_t pl = { .root = -1, .reader = -1 };
    const size_t inline_total = span_payload(zc, sp, a, &pl);
    const size_t vslot = span_vslot(sp, a);
    const char *handed = zcopy_span_hands_over(zc, a, inline_total > 0);
    zcopy_span_desc_t mine;
    const void *src = NULL;
    size_t len = 0;
    coll_plan_t plan;

    if (handed != NULL)
        return zcopy_coll_fallback(zc, a->type, handed);
    zcopy_coll_plan(zc, a, &plan);
    if (a->type == ZCOPY_COLL_REDUCE_SCATTER &&
        plan.args.reason == REASON_NONE) { /* counts checked: none negative */
        size_t at = 0;
        for (int r = 0; r < sp->nranks; r++) {
            sp->block_lo[r] = at;
            at += (size_t)a->rcounts[r];
        }
    }
    span_describe(zc, a, &plan, inline_total, &mine);
    if (a->type == ZCOPY_COLL_ALLTOALLV && mine.args.reason == REASON_NONE &&
        zcopy_span_pushes_all(sp))
        span_publish_sdispls(zc, sp, a, plan.ssize);
    if (vslot > 0)
        span_carry_blocks(zc, sp, a, &plan, vslot, &pl, &mine);
    if (inline_total > 0 && mine.args.reason == REASON_NONE)
        src = zcopy_coll_inline_source(zc, a, &plan, inline_total, &len);
    if (zcopy_span_arrive(zc, sp, &mine, &pl, src, len,
                          span_source_stays(a)) != ZCOPY_SUCCESS)
        return zcopy_error(ZCOPY_ERR_INTERNAL, "%s: arrival exchange failed",
                           zcopy_coll_names[a->type]);
    if (sp->settled)
        return span_fallback_settled(zc, sp, a->type);
    for (int r = 0; r < sp->nranks; r++) {
        const uint32_t reason = zcopy_span_desc(sp, r)->args.reason;

        if (reason != REASON_NONE)
            return zcopy_coll_fallback(zc, a->type, span_reason_text(reason));
    }
    if (inline_total > 0)
        return span_deliver(zc, sp, a, inline_total);
    if (vslot > 0 && span_all_carried(sp, vslot))
        return span_deliver(zc, sp, a, vslot);
    if (vslot > 0 && span_any_in_place(sp))
        return zcopy_coll_fallback(zc, a->type,
                                   span_reason_text(REASON_SPAN_IN_PLACE));
    /* Every rank is eligible, so every rank learns; a call that falls
     * back never sends displacements (its rows cost no message). */
    if (a->type == ZCOPY_COLL_ALLTOALLV &&
        span_learn_sdispls(zc, sp, a, plan.ssize) != MPI_SUCCESS)
        return zcopy_error(ZCOPY_ERR_INTERNAL, "alltoallv: exchanging "
                           "displacements failed");
    zc->stats.zcopy_calls++;
    if (a->type == ZCOPY_COLL_BARRIER)
        return ZCOPY_SUCCESS; /* the arrival exchange was the barrier */
    sa.ssize = plan.ssize;
    sa.rsize = plan.rsize;
    if (span_algorithms[a->type](&sa) != ZCOPY_SUCCESS)
        return zcopy_error(ZCOPY_ERR_INTERNAL,
                           "%s: a rank could not reach a peer's memory; the "
                           "results are undefined", zcopy_coll_names[a->type]);
    zc->stats.ipc_bytes += sa.ipc_bytes;
    zc->stats.ucx_bytes += sa.ucx_bytes;
    zc->stats.p2p_bytes += sa.p2p_bytes;
    return ZCOPY_SUCCESS;
}
