/*
 * Control plane: segment setup, arrival, synchronisation and peer address
 * translation. See control.h for the slot protocol.
 */
#include "control.h"

#include "host/progress.h"
#include "topo/topo.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* CPUs 0 to 1023, as many as glibc's cpu_set_t holds by default. */
#define CTL_CPU_WORDS 16

/* What every rank tells the others when a communicator is set up. */
typedef struct {
    zcopy_topo_rank_t where;      /* server, local rank, nearest devices */
    zcopy_ipc_id_t ipc;           /* how to reach its export table */
    int32_t segment_fd;           /* rank 0: the control segment */
    int32_t status;
    uint64_t segment_ino;
    uint32_t access;              /* zcopy_ipc_access_local() */
    uint32_t reserved;
    uint64_t cpus[CTL_CPU_WORDS]; /* its affinity; all zero if unknown */
} ctl_hello_t;
static_assert(sizeof(ctl_hello_t) == 200, "exchanged between processes");

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* A wait in progress: which collective, and since when, so that a peer that
 * never arrives is reported once (the wait itself goes on, as MPI's does). */
typedef struct {
    const zcopy_ctl_t *ctl;
    const char *what;
    uint64_t seq;
    unsigned spins;
    bool reported;
    struct timespec since;
} ctl_wait_t;

/* Spins between two runs of the MPI library's progress engine: a few
 * hundred nanoseconds, longer than a tiny collective's arrival takes, so
 * the latency of a call whose peers are already there pays nothing. */
#define CTL_SPINS_PER_PROGRESS 16
/* Spins between two looks at a peer's arrival while waiting for its record. */
#define CTL_SPINS_PER_ARRIVAL 8
/* Spins between two looks at the clock for the stuck-peer report. */
#define CTL_SPINS_PER_CLOCK 4096

static void ctl_wait_init(ctl_wait_t *w, const zcopy_ctl_t *ctl,
                          const char *what, uint64_t seq)
{
    *w = (ctl_wait_t){ .ctl = ctl, .what = what, .seq = seq };
}

static void ctl_wait_check_clock(ctl_wait_t *w, int peer)
{
    struct timespec now;
    double waited;

    clock_gettime(CLOCK_MONOTONIC, &now);
    if (w->since.tv_sec == 0 && w->since.tv_nsec == 0) {
        w->since = now;
        return;
    }
    waited = (double)(now.tv_sec - w->since.tv_sec) +
             (double)(now.tv_nsec - w->since.tv_nsec) * 1e-9;
    if (w->reported || zcopy_config.wait_report_s <= 0 ||
        waited < (double)zcopy_config.wait_report_s)
        return;
    w->reported = true;
    zcopy_log(ZCOPY_LOG_WARN, "coll", "rank %d has waited %.0f s for rank %d "
              "in %s (collective %llu on this communicator); still waiting",
              w->ctl->rank, waited, peer, w->what ? w->what : "a collective",
              (unsigned long long)w->seq);
}

/* One turn of a wait for @peer. MPI's progress rule: while this rank waits,
 * its process's point-to-point, nonblocking and one-sided operations must
 * keep completing, so the MPI library's progress engine runs every few
 * spins (and, through it, zcopy's UCX worker, which a peer's emulated get
 * or put may need). Spin while every rank has a core; when ranks outnumber
 * cores, give the core away every turn, or the rank waited for cannot run:
 * once, by the engine's own yield when it has one (measured at np 4 on 2
 * cores: 10 us per tiny collective, against 19 us yielding twice). */
static inline void ctl_relax(ctl_wait_t *w, int peer)
{
    const unsigned n = ++w->spins;
    const bool yielding = w->ctl->yield && n > 8;
    bool yielded = false;

    if (yielding || n % CTL_SPINS_PER_PROGRESS == 0)
        yielded = zcopy_host_progress();
    if (n % CTL_SPINS_PER_CLOCK == 0 || (yielding && n % 64 == 0))
        ctl_wait_check_clock(w, peer);
    /* The engine says it yielded when it would have, idle; a busy one did
     * not, so every eighth turn yields here regardless. */
    if (yielded && n % 8 != 0)
        return;
    if (yielding || n % 4096 == 0)
        sched_yield();
    else
        cpu_relax();
}

static void cpus_of_self(uint64_t *words)
{
    cpu_set_t set;

    memset(words, 0, CTL_CPU_WORDS * sizeof(*words));
    if (sched_getaffinity(0, sizeof(set), &set) != 0)
        return;
    for (int c = 0; c < CTL_CPU_WORDS * 64 && c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &set))
            words[c / 64] |= UINT64_C(1) << (c % 64);
}

/* How many CPUs the ranks of @all may run on together; 0 if a rank could
 * not tell. */
static int cpus_shared(const ctl_hello_t *all, int nranks)
{
    uint64_t any[CTL_CPU_WORDS] = { 0 };
    int count = 0;

    for (int r = 0; r < nranks; r++) {
        uint64_t mine = 0;

        for (int w = 0; w < CTL_CPU_WORDS; w++) {
            any[w] |= all[r].cpus[w];
            mine |= all[r].cpus[w];
        }
        if (mine == 0)
            return 0;
    }
    for (int w = 0; w < CTL_CPU_WORDS; w++)
        count += __builtin_popcountll(any[w]);
    return count;
}

/* Ranks outnumber cores when more processes share the server's CPUs than
 * there are CPUs to run them. Two views, either is enough:
 * - this communicator's ranks against the CPUs they may run on together,
 *   which sees ranks that a cpuset or taskset confines to fewer CPUs than
 *   ranks (two to a core, say);
 * - the job's ranks on this host against the CPUs one process may use; a
 *   process bound to one core says nothing here (mpirun binds each rank to
 *   a core of its own when they fit), so only a set of several counts. */
static bool ranks_outnumber_cores(const ctl_hello_t *all, int rank,
                                  int nranks)
{
    const char *local_size = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int local = local_size ? atoi(local_size) : nranks;
    int shared = cpus_shared(all, nranks);
    int mine = 0;

    if (zcopy_config.yield_mode)
        return zcopy_config.yield_mode == 1;
    if (shared > 0 && nranks > shared)
        return true;
    for (int w = 0; w < CTL_CPU_WORDS; w++)
        mine += __builtin_popcountll(all[rank].cpus[w]);
    if (mine > 1 && mine < cores)
        cores = mine;
    return (local > nranks ? local : nranks) > cores;
}

/* --- setup --------------------------------------------------------------- */

static zcopy_status_t segment_create(size_t size, int *fd_p, uint64_t *ino_p)
{
    struct stat st;
    int fd = memfd_create("zcopy-ctl", MFD_CLOEXEC | MFD_ALLOW_SEALING);

    if (fd < 0)
        return zcopy_error(ZCOPY_ERR_SYSTEM, "control segment: %s",
                           strerror(errno));
    /* Allocate now: ENOMEM here rather than SIGBUS inside a collective.
     * memfds are born 0777; owner-only, as all shared state (SPEC 8). */
    if (fchmod(fd, 0600) != 0 || ftruncate(fd, (off_t)size) != 0 ||
        fallocate(fd, 0, 0, (off_t)size) != 0 ||
        zcopy_memfd_seal_size(fd) != 0 || fstat(fd, &st) != 0) {
        close(fd);
        return zcopy_error(ZCOPY_ERR_NOMEM, "control segment: %s",
                           strerror(errno));
    }
    *fd_p = fd;
    *ino_p = (uint64_t)st.st_ino;
    return ZCOPY_SUCCESS;
}

static zcopy_status_t ctl_alloc(zcopy_ctl_t **ctl_p, int rank, int nranks)
{
    zcopy_ctl_t *ctl = calloc(1, sizeof(*ctl));
    size_t vec_bytes = 2 * ZCOPY_CTL_NVEC * (size_t)nranks * sizeof(int64_t);

    if (ctl == NULL)
        return zcopy_error(ZCOPY_ERR_NOMEM, "control: out of memory");
    ctl->rank = rank;
    ctl->nranks = nranks;
    ctl->stride = sizeof(zcopy_ctl_slot_t) +
                  zcopy_align_up(vec_bytes, ZCOPY_CACHE_LINE);
    ctl->segment_size = ctl->stride * (size_t)nranks;
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
                                 int own_fd)
{
    void *p;
    int fd = own_fd;

    if (ctl->rank != 0)
        ZCOPY_CHECK(zcopy_ipc_fetch_fd(&all[0].ipc, all[0].segment_fd,
                                       all[0].segment_ino, &fd));
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
    int32_t ok, oks[ZCOPY_CTL_MAX_RANKS];
    zcopy_status_t st = zcopy_ipc_access_use(access, table_ino);

    if (access != ZCOPY_IPC_ACCESS_SOCKET)
        return st;
    ok = st;
    if (zc->ops.allgather(&ok, oks, sizeof(ok), zc->ops.ctx) != MPI_SUCCESS)
        return zcopy_error(ZCOPY_ERR_INTERNAL, "descriptor sockets: the "
                           "agreement failed");
    for (int r = 0; r < zc->size; r++)
        if (oks[r] != ZCOPY_SUCCESS)
            return st != ZCOPY_SUCCESS
                       ? st
                       : zcopy_error(oks[r], "rank %d cannot serve its "
                                     "descriptors", r);
    return ZCOPY_SUCCESS;
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

zcopy_status_t zcopy_ctl_create(zcopy_comm_t *zc, zcopy_ctl_t **ctl_p,
                                bool *spans, char *reason, size_t reason_len)
{
    ctl_hello_t mine = { .segment_fd = -1 }, *all;
    int32_t ok, oks[ZCOPY_CTL_MAX_RANKS]; /* on the stack: see below */
    zcopy_ctl_t *ctl = NULL;
    zcopy_status_t st;
    int rc, other, failed;

    if (zc->size > ZCOPY_CTL_MAX_RANKS) { /* the same on every rank */
        snprintf(reason, reason_len, "more than %d ranks", ZCOPY_CTL_MAX_RANKS);
        return ZCOPY_ERR_UNSUPPORTED;
    }
    /* A rank out of memory must still take part in every exchange, or the
     * others would wait for it forever: agree on the allocation first. */
    all = calloc((size_t)zc->size, sizeof(*all));
    ok = all ? ZCOPY_SUCCESS : ZCOPY_ERR_NOMEM;
    rc = zc->ops.allgather(&ok, oks, sizeof(ok), zc->ops.ctx);
    for (int r = 0; r < zc->size && rc == MPI_SUCCESS; r++) {
        if (oks[r] != ZCOPY_SUCCESS) {
            rc = MPI_ERR_NO_MEM;
            break;
        }
    }
    if (rc != MPI_SUCCESS) {
        free(all);
        snprintf(reason, reason_len, "setup: out of memory");
        return zcopy_error(ZCOPY_ERR_NOMEM, "control setup: out of memory");
    }
    zcopy_topo_rank_self(&mine.where);
    cpus_of_self(mine.cpus);
    st = ctl_alloc(&ctl, zc->rank, zc->size);
    if (st == ZCOPY_SUCCESS)
        st = zcopy_ipc_local_id(&mine.ipc);
    if (st == ZCOPY_SUCCESS && zc->rank == 0)
        st = segment_create(ctl->segment_size, &mine.segment_fd,
                            &mine.segment_ino);
    if (mine.segment_fd >= 0) /* to the others, if over sockets */
        zcopy_ipc_fdpass_offer(mine.segment_fd, mine.segment_ino);
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
    /* Every rank sees the same hellos: if one rank failed, all skip the
     * attach alike (nobody waits on a peer that cannot serve), and the
     * agreement below names that rank. */
    failed = first_failed(all, zc->size);
    if (failed < 0)
        st = access_apply(zc, all, mine.ipc.table_ino);
    if (st == ZCOPY_SUCCESS && failed < 0) {
        ctl->yield = ranks_outnumber_cores(all, zc->rank, zc->size);
        const int shared = zc->rank == 0 ? cpus_shared(all, zc->size) : 0;

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
        st = ctl_attach(ctl, all, mine.segment_fd);
    if (st != ZCOPY_SUCCESS)
        zcopy_log(ZCOPY_LOG_WARN, "ipc", "rank %d: %s", zc->rank,
                  zcopy_error_detail());

    /* Agree: zero-copy only if every rank attached. */
    ok = st;
    rc = zc->ops.allgather(&ok, oks, sizeof(ok), zc->ops.ctx);
    if (rc != MPI_SUCCESS) {
        st = ZCOPY_ERR_INTERNAL;
        snprintf(reason, reason_len, "setup agreement failed");
        goto out;
    }
    for (int r = 0; r < zc->size; r++) {
        if (oks[r] != ZCOPY_SUCCESS) {
            snprintf(reason, reason_len, oks[r] == ZCOPY_ERR_NOMEM
                                             ? "out of memory on rank %d"
                                             : "peer mapping failed on rank %d",
                     r);
            st = oks[r];
            goto out;
        }
    }
    st = ZCOPY_SUCCESS;

out:
    if (mine.segment_fd >= 0) {
        zcopy_ipc_fdpass_withdraw(mine.segment_fd);
        close(mine.segment_fd); /* peers fetched it; mappings keep it */
    }
    free(all);
    if (st != ZCOPY_SUCCESS) {
        zcopy_ctl_destroy(ctl);
        return st;
    }
    *ctl_p = ctl;
    return ZCOPY_SUCCESS;
}

/* --- per collective ------------------------------------------------------ */

void zcopy_ctl_claim(zcopy_ctl_t *ctl, uint64_t seq)
{
    ctl_wait_t w;

    if (ctl->arrived + 1 >= seq)
        return;
    ctl_wait_init(&w, ctl, "the arrival of the previous collective", seq);
    for (int r = 0; r < ctl->nranks; r++) {
        const zcopy_ctl_slot_t *slot = zcopy_ctl_slot(ctl, r);
        while (atomic_load_explicit(&slot->arrive, memory_order_acquire) <
               seq - 1)
            ctl_relax(&w, r);
    }
    ctl->arrived = seq - 1;
}

/* What a rank's peers read of its slot: counted once per record. */
static inline void ctl_count(zcopy_ctl_t *ctl, size_t bytes)
{
    ctl->sent_msgs++;
    ctl->sent_bytes += bytes;
}

void zcopy_ctl_decline(zcopy_ctl_t *ctl, uint32_t reason)
{
    zcopy_ctl_slot_t *own = zcopy_ctl_slot(ctl, ctl->rank);
    const uint64_t seq = ++ctl->seq;

    ctl_count(ctl, 2 * sizeof(uint64_t));

    /* Release: a peer that sees the arrival also sees the reason. */
    atomic_store_explicit(&own->reasons[seq % ZCOPY_CTL_REASONS],
                          seq << 8 | (reason & 0xffu), memory_order_release);
    atomic_store_explicit(&own->arrive, seq, memory_order_release);
}

uint64_t zcopy_ctl_publish(zcopy_ctl_t *ctl, const zcopy_ctl_args_t *args,
                           unsigned nvectors)
{
    zcopy_ctl_slot_t *own = zcopy_ctl_slot(ctl, ctl->rank);
    const uint64_t seq = ++ctl->seq;
    zcopy_ctl_record_t *rec = &own->rec[seq & 1];

    zcopy_ctl_claim(ctl, seq);
    ctl_count(ctl, sizeof(*rec) + sizeof(own->arrive) +
                       (size_t)nvectors * ctl->nranks * sizeof(int64_t));
    rec->args = *args;
    /* Release: peers that see the tag also see args and vectors. */
    atomic_store_explicit(&rec->seq, seq, memory_order_release);
    atomic_store_explicit(&own->arrive, seq, memory_order_release);
    return seq;
}

/* Waits for @rank's record of @seq (*tag, its tag word) or its arrival;
 * true when the record is there, false when the rank declined. */
static bool ctl_wait_record(ctl_wait_t *w, int rank, _Atomic uint64_t *tag,
                            uint64_t seq)
{
    const zcopy_ctl_slot_t *slot = zcopy_ctl_slot(w->ctl, rank);

    for (;;) {
        /* Acquire: pairs with the peer's release of the tag. */
        if (atomic_load_explicit(tag, memory_order_acquire) == seq)
            return true;
        /* The arrival line only every few spins: polling it with the tag
         * would share it with the peer, whose next store to it would then
         * cost a transfer on the critical path of every tiny collective.
         * A peer that declined is seen a few spins later instead. */
        if (w->spins % CTL_SPINS_PER_ARRIVAL == CTL_SPINS_PER_ARRIVAL - 1 &&
            atomic_load_explicit(&slot->arrive, memory_order_acquire) >= seq)
            /* The tag is stored before the arrival: look once more. */
            return atomic_load_explicit(tag, memory_order_acquire) == seq;
        ctl_relax(w, rank);
    }
}

/* Waits for every rank's record of @seq, inline or not; returns the first
 * rank that declined it, or -1. */
static int ctl_wait_all(zcopy_ctl_t *ctl, uint64_t seq, bool inline_records,
                        const char *what)
{
    int first_declined = -1;
    ctl_wait_t w;

    ctl_wait_init(&w, ctl, what, seq);
    for (int r = 0; r < ctl->nranks; r++) {
        zcopy_ctl_slot_t *slot = zcopy_ctl_slot(ctl, r);
        _Atomic uint64_t *tag = inline_records ? &slot->inl[seq & 1].seq
                                               : &slot->rec[seq & 1].seq;
        if (!ctl_wait_record(&w, r, tag, seq) && first_declined < 0)
            first_declined = r;
    }
    ctl->arrived = seq;
    return first_declined;
}

int zcopy_ctl_wait_arrivals(zcopy_ctl_t *ctl, uint64_t seq, const char *what)
{
    return ctl_wait_all(ctl, seq, false, what);
}

int zcopy_ctl_inline_exchange(zcopy_ctl_t *ctl, const void *data, size_t len,
                              const char *what)
{
    zcopy_ctl_slot_t *own = zcopy_ctl_slot(ctl, ctl->rank);
    const uint64_t seq = ++ctl->seq;
    zcopy_ctl_inline_t *line = &own->inl[seq & 1];

    zcopy_ctl_claim(ctl, seq);
    ctl_count(ctl, 2 * sizeof(uint64_t) + len);
    if (len > 0)
        memcpy(line->data, data, len);
    /* Release: a peer that sees the tag also sees the payload. */
    atomic_store_explicit(&line->seq, seq, memory_order_release);
    atomic_store_explicit(&own->arrive, seq, memory_order_release);
    return ctl_wait_all(ctl, seq, true, what);
}

uint32_t zcopy_ctl_reason(const zcopy_ctl_t *ctl, int rank, uint64_t seq)
{
    const zcopy_ctl_slot_t *slot = zcopy_ctl_slot(ctl, rank);
    const uint64_t v = atomic_load_explicit(
        &slot->reasons[seq % ZCOPY_CTL_REASONS], memory_order_acquire);

    return v >> 8 == seq ? (uint32_t)(v & 0xffu) : ZCOPY_CTL_REASON_UNKNOWN;
}

unsigned zcopy_ctl_sync_flags(zcopy_ctl_t *ctl, unsigned flags)
{
    zcopy_ctl_slot_t *own = zcopy_ctl_slot(ctl, ctl->rank);
    uint64_t target = ++ctl->syncs;
    unsigned any = flags & ZCOPY_CTL_SYNC_MASK;
    ctl_wait_t w;

    ctl_wait_init(&w, ctl, "a step of a zero-copy collective", ctl->seq);
    ctl_count(ctl, sizeof(own->sync));
    /* Release: every load and store this rank made on peers' buffers
     * happens before any peer passes this sync. */
    atomic_store_explicit(&own->sync, target << ZCOPY_CTL_SYNC_BITS | any,
                          memory_order_release);
    for (int r = 0; r < ctl->nranks; r++) {
        const zcopy_ctl_slot_t *slot = zcopy_ctl_slot(ctl, r);
        uint64_t v;
        while (((v = atomic_load_explicit(&slot->sync, memory_order_acquire)) >>
                ZCOPY_CTL_SYNC_BITS) < target)
            ctl_relax(&w, r);
        any |= (unsigned)(v & ZCOPY_CTL_SYNC_MASK);
    }
    return any;
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
