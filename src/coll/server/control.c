/*
 * Control plane: segment setup, arrival, synchronisation and peer address
 * translation. See control.h for the slot protocol.
 */
#include "control.h"

#include "coll/wait.h"
#include "topo/topo.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

/* What every rank tells the others when a communicator is set up. */
typedef struct {
    zcopy_topo_rank_t where;      /* server, local rank, nearest devices */
    zcopy_ipc_id_t ipc;           /* how to reach its export table */
    int32_t status;
    uint32_t access;              /* zcopy_ipc_access_local() */
    zcopy_cpus_t cpus;            /* its affinity */
} ctl_hello_t;
static_assert(sizeof(ctl_hello_t) == 184, "exchanged between processes");

/* What rank 0 tells the others of the segment it made, once the hellos
 * showed that every rank shares the server. */
typedef struct {
    int32_t fd;                   /* in rank 0's process */
    int32_t status;
    uint64_t ino;
    uint32_t inline_cap;          /* payload bytes of its inline records */
    uint32_t reserved;
} ctl_offer_t;

/* Spins between two looks at a peer's arrival while waiting for its record. */
#define CTL_SPINS_PER_ARRIVAL 8

static void ctl_wait_init(zcopy_wait_t *w, const zcopy_ctl_t *ctl,
                          const char *what, uint64_t seq)
{
    zcopy_wait_init(w, ctl->yield, ctl->rank, what, seq);
}

/* The ranks' affinities, for zcopy_wait_yields(): borrows the call lists,
 * which no call uses before set-up ends. */
static const zcopy_cpus_t **ctl_cpus(const zcopy_comm_t *zc,
                                     const ctl_hello_t *all)
{
    const zcopy_cpus_t **cpus = zcopy_comm_list(zc, ZCOPY_COMM_LIST_INPUTS);

    for (int r = 0; r < zc->size; r++)
        cpus[r] = &all[r].cpus;
    return cpus;
}

/* --- setup --------------------------------------------------------------- */

size_t zcopy_ctl_inline_limit(bool yields)
{
    const size_t spin = zcopy_config.inline_max < ZCOPY_CTL_INLINE_MAX
                            ? zcopy_config.inline_max : ZCOPY_CTL_INLINE_MAX;
    const size_t more = zcopy_config.inline_max_yield <
                                ZCOPY_CTL_INLINE_YIELD_MAX
                            ? zcopy_config.inline_max_yield
                            : ZCOPY_CTL_INLINE_YIELD_MAX;

    return yields && more > spin ? more : spin;
}

/* The slots' layout, once the records' capacity is known (rank 0's). */
static void ctl_layout(zcopy_ctl_t *ctl, size_t inline_cap)
{
    const size_t vec_bytes =
        2 * ZCOPY_PLAN_NVEC * (size_t)ctl->nranks * sizeof(int64_t);

    ctl->inline_stride = zcopy_align_up(sizeof(zcopy_ctl_inline_t) +
                                            inline_cap, ZCOPY_CACHE_LINE);
    ctl->stride = sizeof(zcopy_ctl_slot_t) + 2 * ctl->inline_stride +
                  zcopy_align_up(vec_bytes, ZCOPY_CACHE_LINE);
    ctl->segment_size = (ctl->stride + sizeof(zcopy_ctl_bell_t)) *
                        (size_t)ctl->nranks;
}

static zcopy_status_t ctl_alloc(zcopy_ctl_t **ctl_p, int rank, int nranks)
{
    zcopy_ctl_t *ctl = calloc(1, sizeof(*ctl));

    if (ctl == NULL)
        return zcopy_error(ZCOPY_ERR_NOMEM, "control: out of memory");
    ctl->rank = rank;
    ctl->nranks = nranks;
    ctl->peers = calloc((size_t)nranks, sizeof(*ctl->peers));
    ctl->cache = calloc((size_t)nranks, sizeof(*ctl->cache));
    ctl->cache_next = calloc((size_t)nranks, sizeof(*ctl->cache_next));
    ctl->hints = calloc((size_t)nranks, sizeof(*ctl->hints));
    *ctl_p = ctl;
    if (!ctl->peers || !ctl->cache || !ctl->cache_next || !ctl->hints)
        return zcopy_error(ZCOPY_ERR_NOMEM, "control: out of memory");
    return ZCOPY_SUCCESS;
}

void zcopy_ctl_destroy(zcopy_ctl_t *ctl)
{
    if (ctl == NULL)
        return;
    for (int r = 0; ctl->peers && r < ctl->nranks; r++)
        zcopy_ipc_peer_put(ctl->peers[r]);
    if (ctl->segment)
        munmap(ctl->segment, ctl->segment_size);
    free(ctl->peers);
    free(ctl->cache);
    free(ctl->cache_next);
    free(ctl->hints);
    free(ctl);
}

/* This rank's part of setup after the hello exchange. */
static zcopy_status_t ctl_attach(zcopy_ctl_t *ctl, const ctl_hello_t *all,
                                 const ctl_offer_t *seg)
{
    void *p;
    int fd = seg->fd;

    if (ctl->rank != 0)
        ZCOPY_CHECK(zcopy_ipc_fetch_fd(&all[0].ipc, seg->fd, seg->ino, &fd));
    p = mmap(NULL, ctl->segment_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
             0);
    if (ctl->rank != 0)
        close(fd);
    if (p == MAP_FAILED)
        return zcopy_error(errno == ENOMEM ? ZCOPY_ERR_NOMEM : ZCOPY_ERR_SYSTEM,
                           "mapping the control segment: %s", strerror(errno));
    ctl->segment = p;
    for (int r = 0; r < ctl->nranks; r++)
        if (r != ctl->rank)
            ZCOPY_CHECK(zcopy_ipc_peer_get(&all[r].ipc, &ctl->peers[r]));
    return ZCOPY_SUCCESS;
}

/* The server's choice: the most restrictive of what each rank can do
 * (sockets, if one cannot use pidfd_getfd; an unknown answer counts as
 * that too). The same on every rank: it comes from the hello. */
static zcopy_ipc_access_t access_agreed(const ctl_hello_t *all, int nranks)
{
    uint32_t access = ZCOPY_IPC_ACCESS_PIDFD;

    for (int r = 0; r < nranks; r++)
        if (all[r].access > access)
            access = all[r].access;
    return access >= ZCOPY_IPC_ACCESS_SOCKET ? ZCOPY_IPC_ACCESS_SOCKET
                                             : ZCOPY_IPC_ACCESS_PIDFD;
}

/* Over sockets every rank serves before any fetches: a rank that could
 * not listen is known to all at once, rather than by a fetch that waits
 * for it in vain. */
static zcopy_status_t access_apply(zcopy_comm_t *zc, const ctl_hello_t *all,
                                   uint64_t table_ino)
{
    const zcopy_ipc_access_t access = access_agreed(all, zc->size);
    zcopy_status_t st = zcopy_ipc_access_use(access, table_ino);
    zcopy_comm_vote_t vote;

    if (access != ZCOPY_IPC_ACCESS_SOCKET)
        return st;
    if (zcopy_comm_vote(zc, st, 0, &vote) != MPI_SUCCESS)
        return zcopy_error(ZCOPY_ERR_INTERNAL, "descriptor sockets: the "
                           "agreement failed");
    if (vote.rank < 0)
        return ZCOPY_SUCCESS;
    return st != ZCOPY_SUCCESS ? st
                               : zcopy_error(vote.value, "rank %d cannot "
                                             "serve its descriptors",
                                             vote.rank);
}

/* The first rank whose own part of the set-up failed, or -1. */
static int first_failed(const ctl_hello_t *all, int nranks)
{
    for (int r = 0; r < nranks; r++)
        if (all[r].status != ZCOPY_SUCCESS)
            return r;
    return -1;
}

static int first_other_server(const ctl_hello_t *all, int nranks)
{
    for (int r = 1; r < nranks; r++)
        if (all[r].where.server[0] != all[0].where.server[0] ||
            all[r].where.server[1] != all[0].where.server[1])
            return r;
    return -1;
}

/* Rank 0 makes the segment and tells every rank (@seg; on rank 0 its fd
 * is its own, closed once set-up ends). It sizes the records by what it
 * sees alone (more local ranks than the CPUs it may use), the common case
 * of ranks that outnumber cores: the others' CPUs decide only later
 * whether their waits yield. An MPI error code when the bcast failed, on
 * every rank. */
static int ctl_segment_offer(zcopy_comm_t *zc, zcopy_ctl_t *ctl,
                             zcopy_status_t st, const zcopy_cpus_t *cpus,
                             ctl_offer_t *seg)
{
    *seg = (ctl_offer_t){ .fd = -1, .status = st };
    if (zc->rank == 0 && st == ZCOPY_SUCCESS) {
        seg->inline_cap = (uint32_t)zcopy_ctl_inline_limit(
            zcopy_wait_yields(&cpus, 1, 0));
        ctl_layout(ctl, seg->inline_cap);
        seg->status = zcopy_memfd_segment("zcopy-ctl", ctl->segment_size,
                                          &seg->fd, &seg->ino);
        if (seg->fd >= 0) /* to the others, if over sockets */
            zcopy_ipc_fdpass_offer(seg->fd, seg->ino);
    }
    return zc->ops.bcast(seg, sizeof(*seg), 0, zc->ops.ctx);
}

size_t zcopy_ctl_hello_bytes(void)
{
    return sizeof(ctl_hello_t);
}

/* This rank's part of the set-up's agreement on its waits. */
enum {
    CTL_VOTE_YIELDS = 1u << 0,     /* its waits yield */
    CTL_VOTE_HANDS_OVER = 1u << 1, /* ... and it would hand small rooted
                                      calls over (zcopy_wait_hands_over) */
};

zcopy_status_t zcopy_ctl_create(zcopy_comm_t *zc, void *hellos,
                                zcopy_ctl_t **ctl_p, bool *spans,
                                char *reason, size_t reason_len)
{
    ctl_hello_t mine = { 0 }, *all = hellos;
    ctl_offer_t seg = { .fd = -1 };
    zcopy_comm_vote_t vote;
    zcopy_ctl_t *ctl = NULL;
    zcopy_status_t st;
    unsigned flags = 0;
    int rc, other, failed;

    /* The devices only feed the server map printed below. */
    zcopy_topo_rank_self(&mine.where,
                         zcopy_config.verbose >= ZCOPY_LOG_INFO);
    zcopy_cpus_of_self(&mine.cpus);
    st = ctl_alloc(&ctl, zc->rank, zc->size);
    if (st == ZCOPY_SUCCESS)
        st = zcopy_ipc_local_id(&mine.ipc);
    mine.access = st == ZCOPY_SUCCESS
                      ? (uint32_t)zcopy_ipc_access_local(mine.ipc.table_fd)
                      : 0;
    mine.status = st;

    rc = zc->ops.allgather(&mine, all, sizeof(mine), zc->ops.ctx);
    if (rc != MPI_SUCCESS) {
        st = zcopy_error(ZCOPY_ERR_INTERNAL, "setup exchange failed (%d)", rc);
        snprintf(reason, reason_len, "setup exchange failed");
        goto out; /* every rank saw the service collective fail */
    }
    if (zcopy_config.verbose >= ZCOPY_LOG_INFO) {
        const char *name = zc->name;

        zcopy_topo_print_server_map(name && name[0] ? name
                                                    : "an unnamed communicator",
                                    zc->size, &all[0].where, sizeof(*all));
    }
    other = first_other_server(all, zc->size);
    if (other >= 0) {
        *spans = true;
        snprintf(reason, reason_len, "spans servers");
        st = ZCOPY_ERR_UNSUPPORTED;
        goto out;
    }
    /* Only now, with every rank known to share the server: the segment
     * grows with the square of the ranks (each slot holds vectors of n),
     * which a communicator that spans servers must not pay for. */
    rc = ctl_segment_offer(zc, ctl, st, &mine.cpus, &seg);
    if (rc != MPI_SUCCESS) {
        st = zcopy_error(ZCOPY_ERR_INTERNAL, "setup exchange failed (%d)", rc);
        snprintf(reason, reason_len, "setup exchange failed");
        goto out;
    }
    if (zc->rank == 0) /* the agreement below names it */
        st = seg.status;
    /* Every rank sees the same hellos: if one rank failed, all skip the
     * attach alike (nobody waits on a peer that cannot serve), and the
     * agreement below names that rank. */
    failed = first_failed(all, zc->size);
    if (failed < 0 && seg.status != ZCOPY_SUCCESS)
        failed = 0;
    if (failed < 0 && seg.inline_cap > ZCOPY_CTL_INLINE_YIELD_MAX)
        st = zcopy_error(ZCOPY_ERR_INTERNAL, "rank 0's inline records hold "
                         "%u bytes, more than any build makes",
                         seg.inline_cap);
    else if (failed < 0)
        ctl_layout(ctl, seg.inline_cap);
    if (st == ZCOPY_SUCCESS && failed < 0)
        st = access_apply(zc, all, mine.ipc.table_ino);
    if (st == ZCOPY_SUCCESS && failed < 0) {
        ctl->yield = zcopy_wait_yields(ctl_cpus(zc, all), zc->size, zc->rank);
        ctl->sleeps = zcopy_wait_sleeps(ctl_cpus(zc, all), zc->size, zc->rank);
        if (ctl->yield)
            flags = CTL_VOTE_YIELDS |
                    (zcopy_wait_hands_over(ctl_cpus(zc, all), zc->size,
                                           zc->rank)
                         ? CTL_VOTE_HANDS_OVER
                         : 0u);
        const int shared = zc->rank == 0
                               ? zcopy_cpus_shared(ctl_cpus(zc, all), zc->size)
                               : 0;

        if (shared > 0)
            zcopy_log(ZCOPY_LOG_INFO, "coll", "%d ranks share %d CPU%s: "
                      "waits %s", zc->size, shared, shared == 1 ? "" : "s",
                      ctl->yield ? "yield the processor" : "spin");
        else if (zc->rank == 0)
            zcopy_log(ZCOPY_LOG_INFO, "coll", "%d ranks, CPUs unknown: "
                      "waits %s", zc->size,
                      ctl->yield ? "yield the processor" : "spin");
    }
    if (st == ZCOPY_SUCCESS && failed < 0)
        st = ctl_attach(ctl, all, &seg);
    if (st != ZCOPY_SUCCESS)
        zcopy_log(ZCOPY_LOG_WARN, "ipc", "rank %d: %s", zc->rank,
                  zcopy_error_detail());

    /* Agree: zero-copy only if every rank attached; whether any rank's
     * waits yield, which decides the inline limit for all; and whether any
     * would hand small rooted calls over, which all then do. */
    rc = zcopy_comm_vote(zc, st, flags, &vote);
    if (rc != MPI_SUCCESS) {
        st = ZCOPY_ERR_INTERNAL;
        snprintf(reason, reason_len, "setup agreement failed");
        goto out;
    }
    if (vote.rank >= 0) {
        snprintf(reason, reason_len, vote.value == ZCOPY_ERR_NOMEM
                                         ? "out of memory on rank %d"
                                         : "peer mapping failed on rank %d",
                 vote.rank);
        st = vote.value;
        goto out;
    }
    ctl->crowded = (vote.any & CTL_VOTE_YIELDS) != 0;
    ctl->rooted_hand_over = (vote.any & CTL_VOTE_HANDS_OVER) != 0;
    if (ctl->crowded)
        ctl->bells = (zcopy_ctl_bell_t *)(ctl->segment +
                                          ctl->stride * (size_t)ctl->nranks);
    ctl->inline_limit = zcopy_ctl_inline_limit(ctl->crowded);
    if (ctl->inline_limit > seg.inline_cap)
        ctl->inline_limit = seg.inline_cap;
    if (zc->rank == 0)
        zcopy_log(ZCOPY_LOG_INFO, "coll", "small collectives: payloads of "
                  "up to %zu bytes per rank ride the control plane (%s)",
                  ctl->inline_limit,
                  !ctl->crowded ? "coll_zcopy_inline_max"
                  : ctl->inline_limit < zcopy_ctl_inline_limit(true)
                      ? "some rank's waits yield, but rank 0 saw no reason "
                        "to size the records for it"
                      : "some rank's waits yield: coll_zcopy_inline_max_yield");
    st = ZCOPY_SUCCESS;

out:
    if (zc->rank == 0 && seg.fd >= 0) {
        zcopy_ipc_fdpass_withdraw(seg.fd);
        close(seg.fd); /* peers fetched it; mappings keep it */
    }
    if (st != ZCOPY_SUCCESS) {
        zcopy_ctl_destroy(ctl);
        return st;
    }
    *ctl_p = ctl;
    return ZCOPY_SUCCESS;
}

/* --- waits --------------------------------------------------------------- */

/* What a wait waits for: @word (shifted right by @shift) reaching @min, or
 * @tag, when given, holding @tag_seq. */
typedef struct {
    const _Atomic uint64_t *word;
    unsigned shift;
    uint64_t min;
    const _Atomic uint64_t *tag;
    uint64_t tag_seq;
} ctl_until_t;

/* A sleep's timeout: a ring ends it sooner. Between two sleeps the rank
 * runs Open MPI's engine (MPI's progress rule); the kernel's timer slack
 * (50 us by default) can lengthen it, as it lengthens a yield's absence. */
#define CTL_SLEEP_NS 100000

/* Whether @until is met; *@word (if given) receives the word it read. */
static bool ctl_until_met(const ctl_until_t *until, uint64_t *word)
{
    uint64_t v;

    if (until->tag != NULL &&
        atomic_load_explicit(until->tag, memory_order_acquire) ==
            until->tag_seq)
        return true;
    v = atomic_load_explicit(until->word, memory_order_acquire);
    if (word != NULL)
        *word = v;
    return v >> until->shift >= until->min;
}

void zcopy_ctl_bell_ring(zcopy_ctl_bell_t *bell)
{
    atomic_fetch_add_explicit(&bell->ring, 1, memory_order_release);
    syscall(SYS_futex, (uint32_t *)&bell->ring, FUTEX_WAKE, INT32_MAX, NULL,
            NULL, 0);
}

/* Sleeps until @peer rings, or CTL_SLEEP_NS, unless @until is met once
 * this rank counts as a sleeper: the fence after the count pairs with the
 * one in zcopy_ctl_ring, so that either this look sees the peer's store or
 * the peer sees the count (and the ring value read before the look moves,
 * or the wake comes). */
static void ctl_sleep(const zcopy_ctl_t *ctl, int peer,
                      const ctl_until_t *until)
{
    zcopy_ctl_bell_t *bell = &ctl->bells[peer];
    const struct timespec most = { 0, CTL_SLEEP_NS };
    uint32_t ring;

    atomic_fetch_add_explicit(&bell->sleepers, 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_seq_cst);
    ring = atomic_load_explicit(&bell->ring, memory_order_acquire);
    if (!ctl_until_met(until, NULL))
        syscall(SYS_futex, (uint32_t *)&bell->ring, FUTEX_WAIT, ring, &most,
                NULL, 0);
    atomic_fetch_sub_explicit(&bell->sleepers, 1, memory_order_relaxed);
}

/* Whether the next turn of @w sleeps: where it would yield, on a crowded
 * communicator (bells), and this rank's waits sleep (zcopy_wait_sleeps). */
static bool ctl_sleeps(const zcopy_ctl_t *ctl, const zcopy_wait_t *w)
{
    return ctl->bells != NULL && ctl->sleeps && w->yield &&
           w->spins >= ZCOPY_WAIT_SPINS_BEFORE_YIELD;
}

/* One turn of a wait for @peer: a sleep on the bell once a yielding wait
 * has spun a few turns, else the common turn. */
static void ctl_relax(const zcopy_ctl_t *ctl, zcopy_wait_t *w, int peer,
                      const ctl_until_t *until)
{
    if (!ctl_sleeps(ctl, w)) {
        zcopy_wait_relax(w, peer);
        return;
    }
    zcopy_wait_tend(w, peer);
    ctl_sleep(ctl, peer, until);
}

/* --- per collective ------------------------------------------------------ */

/* Before an eligible rank writes records or vectors of collective @seq:
 * waits until every peer has entered @seq - 1, when they may still read
 * those of @seq - 2 (at once, unless this rank declined a collective since
 * it last saw them all). */
static void ctl_claim(zcopy_ctl_t *ctl, uint64_t seq)
{
    zcopy_wait_t w;

    if (ctl->arrived + 1 >= seq)
        return;
    ctl_wait_init(&w, ctl, "the arrival of the previous collective", seq);
    for (int r = 0; r < ctl->nranks; r++) {
        const zcopy_ctl_slot_t *slot = zcopy_ctl_slot(ctl, r);
        const ctl_until_t until = { .word = &slot->arrive, .min = seq - 1 };

        while (!ctl_until_met(&until, NULL))
            ctl_relax(ctl, &w, r, &until);
    }
    ctl->arrived = seq - 1;
}

/* What a rank's peers read of its slot: counted once per record. */
static inline void ctl_count(zcopy_ctl_t *ctl, size_t bytes)
{
    ctl->sent_msgs++;
    ctl->sent_bytes += bytes;
}

uint64_t zcopy_ctl_publish(zcopy_ctl_t *ctl, const coll_plan_t *plan)
{
    zcopy_ctl_slot_t *own = zcopy_ctl_slot(ctl, ctl->rank);
    const uint64_t seq = ++ctl->seq;
    zcopy_ctl_record_t *rec = &own->rec[seq & 1];
    unsigned nvectors = 0;

    ctl_claim(ctl, seq);
    for (int v = 0; v < ZCOPY_PLAN_NVEC; v++) {
        const zcopy_plan_vector_t *src = &plan->vectors[v];
        int64_t *dst;

        if (src->elems == NULL)
            continue;
        dst = zcopy_ctl_vector(ctl, ctl->rank, seq, v);
        for (int j = 0; j < ctl->nranks; j++)
            dst[j] = (int64_t)src->elems[j] * (int64_t)src->scale;
        nvectors++;
    }
    ctl_count(ctl, sizeof(*rec) + sizeof(own->arrive) +
                       (size_t)nvectors * ctl->nranks * sizeof(int64_t));
    rec->args = plan->args;
    /* Release: peers that see the tag also see args and vectors. */
    atomic_store_explicit(&rec->seq, seq, memory_order_release);
    atomic_store_explicit(&own->arrive, seq, memory_order_release);
    zcopy_ctl_ring(ctl);
    return seq;
}

/* Lines of a peer's inline payload to fetch while waiting for its tag:
 * the lines after the tag's that this rank will read. */
typedef struct {
    const uint8_t *first;
    unsigned lines;
} ctl_fetch_t;

/* A writer copies its payload in stores that may each span two lines (it
 * starts 16 bytes into the tag's line). A reader that fetches a line
 * between two of them makes the writer fetch it back, and once the copy
 * takes many stores that costs more than the reader saves by not waiting
 * for the tag before asking for the lines: np 2 on the AMD EPYC VM, 64 to
 * 512 bytes of payload 1.08-1.43x faster fetched early, 1 KiB 0.85x. */
#define CTL_FETCH_PAYLOAD_MAX 512

static ctl_fetch_t ctl_fetch_of(const zcopy_ctl_t *ctl, int rank, uint64_t seq,
                                const zcopy_coll_inline_reads_t *reads)
{
    const zcopy_ctl_inline_t *rec = zcopy_ctl_inline(ctl, rank, seq);
    const uintptr_t line = ZCOPY_CACHE_LINE;
    uintptr_t from, to;

    if (reads == NULL || reads->len == 0 || rank == ctl->rank ||
        reads->payload > CTL_FETCH_PAYLOAD_MAX ||
        (reads->from >= 0 && reads->from != rank))
        return (ctl_fetch_t){ 0 };
    from = (uintptr_t)(rec->data + reads->off) & ~(line - 1);
    to = (uintptr_t)(rec->data + reads->off + reads->len - 1) & ~(line - 1);
    if (from == (uintptr_t)rec) /* the tag's line is polled anyway */
        from += line;
    if (from > to)
        return (ctl_fetch_t){ 0 };
    return (ctl_fetch_t){ (const uint8_t *)from,
                          (unsigned)((to - from) / line + 1) };
}

/* Waits for @rank's record of @seq (*tag, its tag word) or its arrival,
 * asking meanwhile for the lines of its payload that @reads names (inline
 * records; NULL: none); true when the record is there, false when the
 * rank declined. */
static bool ctl_wait_record(const zcopy_ctl_t *ctl, zcopy_wait_t *w, int rank,
                            _Atomic uint64_t *tag, uint64_t seq,
                            const zcopy_coll_inline_reads_t *reads)
{
    const zcopy_ctl_slot_t *slot = zcopy_ctl_slot(ctl, rank);
    const ctl_until_t until = { .word = &slot->arrive, .min = seq,
                                .tag = tag, .tag_seq = seq };
    ctl_fetch_t fetch;

    /* Acquire: pairs with the peer's release of the tag. */
    if (atomic_load_explicit(tag, memory_order_acquire) == seq)
        return true;
    fetch = ctl_fetch_of(ctl, rank, seq, reads);
    for (;;) {
        /* Every turn: a line fetched before the writer's store is taken
         * back by it, and then fetched again here. A prefetch never
         * faults and orders nothing; the tag's acquire still does. */
        for (unsigned i = 0; i < fetch.lines; i++)
            __builtin_prefetch(fetch.first + i * ZCOPY_CACHE_LINE, 0, 3);
        /* The arrival line only every few spins: polling it with the tag
         * would share it with the peer, whose next store to it would then
         * cost a transfer on the critical path of every tiny collective.
         * A peer that declined is seen a few spins later instead. */
        if ((w->spins % CTL_SPINS_PER_ARRIVAL == CTL_SPINS_PER_ARRIVAL - 1 ||
             ctl_sleeps(ctl, w)) &&
            atomic_load_explicit(&slot->arrive, memory_order_acquire) >= seq)
            /* The tag is stored before the arrival: look once more. */
            return atomic_load_explicit(tag, memory_order_acquire) == seq;
        ctl_relax(ctl, w, rank, &until);
        if (atomic_load_explicit(tag, memory_order_acquire) == seq)
            return true;
    }
}

/* Waits for every rank's record of @seq, inline or not; returns the first
 * rank that declined it, or -1. */
static int ctl_wait_all(zcopy_ctl_t *ctl, uint64_t seq, bool inline_records,
                        const zcopy_coll_inline_reads_t *reads,
                        const char *what)
{
    int first_declined = -1;
    zcopy_wait_t w;

    ctl_wait_init(&w, ctl, what, seq);
    for (int r = 0; r < ctl->nranks; r++) {
        zcopy_ctl_slot_t *slot = zcopy_ctl_slot(ctl, r);
        _Atomic uint64_t *tag = inline_records
                                    ? &zcopy_ctl_inline(ctl, r, seq)->seq
                                    : &slot->rec[seq & 1].seq;
        if (!ctl_wait_record(ctl, &w, r, tag, seq, reads) &&
            first_declined < 0)
            first_declined = r;
    }
    ctl->arrived = seq;
    return first_declined;
}

int zcopy_ctl_wait_arrivals(zcopy_ctl_t *ctl, uint64_t seq, const char *what)
{
    return ctl_wait_all(ctl, seq, false, NULL, what);
}

int zcopy_ctl_inline_exchange(zcopy_ctl_t *ctl, const void *data, size_t len,
                              const zcopy_coll_inline_reads_t *reads,
                              const char *what)
{
    zcopy_ctl_slot_t *own = zcopy_ctl_slot(ctl, ctl->rank);
    const uint64_t seq = ++ctl->seq;
    zcopy_ctl_inline_t *line = zcopy_ctl_inline(ctl, ctl->rank, seq);

    ctl_claim(ctl, seq);
    ctl_count(ctl, 2 * sizeof(uint64_t) + len);
    if (len > 0)
        memcpy(line->data, data, len);
    /* Release: a peer that sees the tag also sees the payload. */
    atomic_store_explicit(&line->seq, seq, memory_order_release);
    atomic_store_explicit(&own->arrive, seq, memory_order_release);
    zcopy_ctl_ring(ctl);
    return ctl_wait_all(ctl, seq, true, reads, what);
}

uint32_t zcopy_ctl_reason(const zcopy_ctl_t *ctl, int rank, uint64_t seq)
{
    const zcopy_ctl_slot_t *slot = zcopy_ctl_slot(ctl, rank);
    const uint64_t v = atomic_load_explicit(
        &slot->reasons[seq % ZCOPY_CTL_REASONS], memory_order_acquire);

    return v >> 8 == seq ? (uint32_t)(v & 0xffu) : ZCOPY_CTL_REASON_UNKNOWN;
}

/* Stores this rank's word of the next sync, with @flags; returns the
 * sync's number. Release: every load and store this rank made on peers'
 * buffers happens before any peer that sees the word passes the sync. */
static uint64_t ctl_sync_store(zcopy_ctl_t *ctl, unsigned flags)
{
    zcopy_ctl_slot_t *own = zcopy_ctl_slot(ctl, ctl->rank);
    const uint64_t target = ++ctl->syncs;

    ctl_count(ctl, sizeof(own->sync));
    atomic_store_explicit(&own->sync,
                          target << ZCOPY_SYNC_BITS | (flags & ZCOPY_SYNC_MASK),
                          memory_order_release);
    zcopy_ctl_ring(ctl);
    return target;
}

/* Waits for every rank's word of sync @target; returns what they
 * reported, or-ed together. */
static unsigned ctl_sync_wait_all(zcopy_ctl_t *ctl, uint64_t target)
{
    unsigned any = 0;
    zcopy_wait_t w;

    ctl_wait_init(&w, ctl, "a step of a zero-copy collective", ctl->seq);
    for (int r = 0; r < ctl->nranks; r++) {
        const zcopy_ctl_slot_t *slot = zcopy_ctl_slot(ctl, r);
        const ctl_until_t until = { .word = &slot->sync,
                                    .shift = ZCOPY_SYNC_BITS, .min = target };
        uint64_t v;

        while (!ctl_until_met(&until, &v))
            ctl_relax(ctl, &w, r, &until);
        any |= (unsigned)(v & ZCOPY_SYNC_MASK);
    }
    return any;
}

unsigned zcopy_ctl_sync_flags(zcopy_ctl_t *ctl, unsigned flags)
{
    return ctl_sync_wait_all(ctl, ctl_sync_store(ctl, flags));
}

unsigned zcopy_ctl_sync_from(zcopy_ctl_t *ctl, int leader, unsigned flags)
{
    const zcopy_ctl_slot_t *slot = zcopy_ctl_slot(ctl, leader);
    const uint64_t target = ctl_sync_store(ctl, flags);
    /* The leader's word is rewritten only at its next sync, after this
     * rank has arrived at the next collective: read in time. */
    const ctl_until_t until = { .word = &slot->sync, .shift = ZCOPY_SYNC_BITS,
                                .min = target };
    zcopy_wait_t w;
    uint64_t v;

    if (ctl->rank == leader)
        return flags & ZCOPY_SYNC_MASK;
    ctl_wait_init(&w, ctl, "a step of a zero-copy collective", ctl->seq);
    /* Acquire (ctl_until_met): the leader's stores into this rank's
     * buffers are visible. */
    while (!ctl_until_met(&until, &v))
        ctl_relax(ctl, &w, leader, &until);
    return (unsigned)(v & ZCOPY_SYNC_MASK);
}

unsigned zcopy_ctl_sync_to(zcopy_ctl_t *ctl, int leader, unsigned flags)
{
    const uint64_t target = ctl_sync_store(ctl, flags);

    if (ctl->rank != leader)
        return flags & ZCOPY_SYNC_MASK;
    return ctl_sync_wait_all(ctl, target);
}

zcopy_status_t zcopy_ctl_map(zcopy_ctl_t *ctl, int rank, uintptr_t addr,
                             size_t len, uint8_t **local_p)
{
    zcopy_ctl_cache_t *cache, *c;
    zcopy_status_t st;
    uint64_t version;
    void *local;

    if (rank == ctl->rank || len == 0) {
        *local_p = (uint8_t *)addr;
        return ZCOPY_SUCCESS;
    }
    cache = ctl->cache[rank];
    version = zcopy_ipc_peer_version(ctl->peers[rank]);
    for (int i = 0; i < 2; i++) {
        c = &cache[i];
        if (c->table_version == version && c->local && addr >= c->addr &&
            addr - c->addr <= c->len && len <= c->len - (addr - c->addr)) {
            *local_p = c->local + (addr - c->addr);
            return ZCOPY_SUCCESS;
        }
    }
    st = zcopy_ipc_peer_map(ctl->peers[rank], addr, len, &local);
    if (st != ZCOPY_SUCCESS) {
        /* The collective falls back on every rank; only this one knows why. */
        zcopy_log(ZCOPY_LOG_INFO, "ipc", "rank %d: mapping rank %d's "
                  "[%#lx, +%zu): %s", ctl->rank, rank, (unsigned long)addr,
                  len, zcopy_error_detail());
        return st;
    }
    c = &cache[ctl->cache_next[rank]++ & 1];
    *c = (zcopy_ctl_cache_t){ .table_version = version, .addr = addr,
                              .len = len, .local = local };
    *local_p = local;
    return ZCOPY_SUCCESS;
}
