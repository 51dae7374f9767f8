/*
 * Control plane: segment setup, arrival, synchronisation and peer address
 * translation. See control.h for the slot protocol.
 */
#include "control.h"

#include "topo/topo.h"
#include "ucx/ucx.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* What every rank tells the others when a communicator is set up. */
typedef struct {
    zcopy_topo_rank_t where;      /* server, local rank, nearest devices */
    zcopy_ipc_id_t ipc;           /* how to reach its export table */
    int32_t segment_fd;           /* rank 0: the control segment */
    int32_t status;
    uint64_t segment_ino;
} ctl_hello_t;
static_assert(sizeof(ctl_hello_t) == 64, "exchanged between processes");

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* Waiting: spin while every rank has a core; when ranks outnumber cores,
 * give the core away quickly, or the rank being waited for cannot run.
 * Once UCX is in use, a peer's get or put may need our worker (UCX 1.13
 * emulates them with active messages), so every wait progresses it; before
 * that, zcopy_ucx_progress() is one load and a branch. */
static inline void ctl_relax(const zcopy_ctl_t *ctl, unsigned *spins)
{
    zcopy_ucx_progress();
    if (ctl->yield ? ++*spins > 8 : (++*spins & 0xfff) == 0)
        sched_yield();
    else
        cpu_relax();
}

/* Ranks outnumber cores when the job puts more processes on this node than
 * it has CPUs to run them. A process bound to one core says nothing about
 * the others (mpirun binds each rank to its own core), so affinity only
 * counts when it leaves the process several CPUs, e.g. a cpuset. */
static bool ranks_outnumber_cores(int nranks)
{
    const char *local_size = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int local = local_size ? atoi(local_size) : nranks;
    cpu_set_t set;

    if (zcopy_config.yield_mode)
        return zcopy_config.yield_mode == 1;
    if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 1 &&
        CPU_COUNT(&set) < cores)
        cores = CPU_COUNT(&set);
    return (local > nranks ? local : nranks) > cores;
}

/* --- setup --------------------------------------------------------------- */

static zcopy_status_t segment_create(size_t size, int *fd_p, uint64_t *ino_p)
{
    struct stat st;
    int fd = memfd_create("zcopy-ctl", MFD_CLOEXEC);

    if (fd < 0)
        return zcopy_error(ZCOPY_ERR_SYSTEM, "control segment: %s",
                           strerror(errno));
    /* Allocate now: ENOMEM here rather than SIGBUS inside a collective.
     * memfds are born 0777; owner-only, as all shared state (SPEC 8). */
    if (fchmod(fd, 0600) != 0 || ftruncate(fd, (off_t)size) != 0 ||
        fallocate(fd, 0, 0, (off_t)size) != 0 || fstat(fd, &st) != 0) {
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
    ctl->yield = ranks_outnumber_cores(nranks);
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
        ZCOPY_CHECK(zcopy_ipc_fetch_fd(all[0].ipc.pid, all[0].segment_fd,
                                       all[0].segment_ino, &fd));
    p = mmap(NULL, ctl->segment_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
             0);
    if (ctl->rank != 0)
        close(fd);
    if (p == MAP_FAILED)
        return zcopy_error(ZCOPY_ERR_SYSTEM, "mapping the control segment: %s",
                           strerror(errno));
    ctl->segment = p;
    for (int r = 0; r < ctl->nranks; r++)
        if (r != ctl->rank)
            ZCOPY_CHECK(zcopy_ipc_peer_get(&all[r].ipc, &ctl->peers[r]));
    return ZCOPY_SUCCESS;
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
    int rc, other;

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
    st = ctl_alloc(&ctl, zc->rank, zc->size);
    if (st == ZCOPY_SUCCESS)
        st = zcopy_ipc_local_id(&mine.ipc);
    if (st == ZCOPY_SUCCESS && zc->rank == 0)
        st = segment_create(ctl->segment_size, &mine.segment_fd,
                            &mine.segment_ino);
    mine.status = st;

    rc = zc->ops.allgather(&mine, all, sizeof(mine), zc->ops.ctx);
    if (rc != MPI_SUCCESS) {
        st = zcopy_error(ZCOPY_ERR_INTERNAL, "setup exchange failed (%d)", rc);
        snprintf(reason, reason_len, "setup exchange failed");
        goto out; /* every rank saw the service collective fail */
    }
    if (zcopy_config.verbose >= ZCOPY_LOG_INFO) {
        char name[MPI_MAX_OBJECT_NAME] = "";
        int len = 0;

        MPI_Comm_get_name(zc->handle, name, &len);
        zcopy_topo_print_server_map(name[0] ? name : "an unnamed communicator",
                                    zc->size, &all[0].where, sizeof(*all));
    }
    other = first_other_server(all, zc->size);
    if (other >= 0) {
        *spans = true;
        snprintf(reason, reason_len, "spans servers");
        st = ZCOPY_ERR_UNSUPPORTED;
        goto out;
    }
    if (st == ZCOPY_SUCCESS && all[0].status == ZCOPY_SUCCESS)
        st = ctl_attach(ctl, all, mine.segment_fd);
    else if (st == ZCOPY_SUCCESS)
        st = all[0].status;
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
            snprintf(reason, reason_len, "peer mapping failed on rank %d", r);
            st = oks[r];
            goto out;
        }
    }
    st = ZCOPY_SUCCESS;

out:
    if (mine.segment_fd >= 0)
        close(mine.segment_fd); /* peers fetched it; mappings keep it */
    free(all);
    if (st != ZCOPY_SUCCESS) {
        zcopy_ctl_destroy(ctl);
        return st;
    }
    *ctl_p = ctl;
    return ZCOPY_SUCCESS;
}

/* --- per collective ------------------------------------------------------ */

uint64_t zcopy_ctl_publish(zcopy_ctl_t *ctl, const zcopy_ctl_args_t *args)
{
    zcopy_ctl_slot_t *own = zcopy_ctl_slot(ctl, ctl->rank);
    uint64_t seq = ++ctl->seq;

    own->args[seq & 1] = *args;
    /* Release: peers that see seq also see args and vectors written above. */
    atomic_store_explicit(&own->arrive, seq, memory_order_release);
    return seq;
}

void zcopy_ctl_wait_arrivals(const zcopy_ctl_t *ctl, uint64_t seq)
{
    unsigned spins = 0;

    for (int r = 0; r < ctl->nranks; r++) {
        const zcopy_ctl_slot_t *slot = zcopy_ctl_slot(ctl, r);
        /* Acquire: pairs with the peer's release, so its args are visible. */
        while (atomic_load_explicit(&slot->arrive, memory_order_acquire) < seq)
            ctl_relax(ctl, &spins);
    }
}

/* A rank rewrites inl[seq % 2] only after it saw every peer at seq - 1,
 * so every peer has finished reading it for seq - 2. No sync is needed on
 * the way out: nobody touches another rank's buffers. */
uint64_t zcopy_ctl_inline_exchange(zcopy_ctl_t *ctl, uint32_t reason,
                                   const void *data, size_t len)
{
    zcopy_ctl_inline_t *own;
    uint64_t seq = ++ctl->inline_seq;
    unsigned spins = 0;

    own = &zcopy_ctl_slot(ctl, ctl->rank)->inl[seq & 1];
    own->reason = reason;
    if (len > 0)
        memcpy(own->data, data, len);
    /* Release: a peer that sees seq also sees reason and data. */
    atomic_store_explicit(&own->seq, seq, memory_order_release);
    for (int r = 0; r < ctl->nranks; r++) {
        const zcopy_ctl_inline_t *peer = zcopy_ctl_inline(ctl, r, seq);
        while (atomic_load_explicit(&peer->seq, memory_order_acquire) < seq)
            ctl_relax(ctl, &spins);
    }
    return seq;
}

bool zcopy_ctl_sync(zcopy_ctl_t *ctl, bool failed)
{
    zcopy_ctl_slot_t *own = zcopy_ctl_slot(ctl, ctl->rank);
    uint64_t target = ++ctl->syncs;
    unsigned spins = 0;
    bool any_failed = failed;

    /* Release: every load and store this rank made on peers' buffers
     * happens before any peer passes this sync. */
    atomic_store_explicit(&own->sync, target << 1 | failed,
                          memory_order_release);
    for (int r = 0; r < ctl->nranks; r++) {
        const zcopy_ctl_slot_t *slot = zcopy_ctl_slot(ctl, r);
        uint64_t v;
        while (((v = atomic_load_explicit(&slot->sync, memory_order_acquire)) >>
                1) < target)
            ctl_relax(ctl, &spins);
        any_failed |= v & 1;
    }
    return any_failed;
}

zcopy_status_t zcopy_ctl_map(zcopy_ctl_t *ctl, int rank, uintptr_t addr,
                             size_t len, uint8_t **local_p)
{
    zcopy_ctl_cache_t *cache, *c;
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
    ZCOPY_CHECK(zcopy_ipc_peer_map(ctl->peers[rank], addr, len, &local));
    c = &cache[ctl->cache_next[rank]++ & 1];
    *c = (zcopy_ctl_cache_t){ .table_version = version, .addr = addr,
                              .len = len, .local = local };
    *local_p = local;
    return ZCOPY_SUCCESS;
}
