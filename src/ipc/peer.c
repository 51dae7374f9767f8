/*
 * The importer's side: peers, their mirrors and the blocks imported into
 * them. See ipc.h for the mechanism.
 */
#include "table.h"

#include "host/progress.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define IPC_MIRROR_MAX_HOLES 8

/* Parts of a mirror that are no longer ours: where a dropped import could
 * not be turned back into reservation (the kernel's mapping limit), it was
 * unmapped, and the process may have mapped something else there since.
 * Releasing the mirror must leave those alone. */
typedef struct {
    uint64_t offset, size;
} ipc_hole_t;

typedef struct {
    uint64_t base;                /* the owner's range */
    uint64_t size;
    uint8_t *local;               /* our reservation mirroring it */
    unsigned nimports;
    unsigned nholes;              /* > IPC_MIRROR_MAX_HOLES: too many to
                                     track; the reservation is kept */
    ipc_hole_t holes[IPC_MIRROR_MAX_HOLES];
} ipc_mirror_t;

typedef struct {
    uint64_t va;                  /* owner's address */
    uint64_t size;
    uint64_t generation;
    ipc_mirror_t *mirror;
} ipc_import_t;

struct zcopy_ipc_peer {
    pid_t pid;
    uint64_t table_ino;               /* with pid, names the process */
    int pidfd;                        /* -1 while dormant */
    unsigned refs;                    /* communicators using the peer */
    int watch;                        /* index in watches, or -1 */
    const zcopy_ipc_table_t *table;   /* the owner's, mapped read-only */
    uint64_t seen_seq;                /* table version the imports match */
    zcopy_ipc_entry_t *entries;       /* copy of the table at seen_seq */
    uint32_t nentries;
    ipc_mirror_t **mirrors;
    size_t nmirrors;
    ipc_import_t *imports;            /* sorted by va */
    size_t nimports;
    struct zcopy_ipc_peer *next;
};

/* Peers are per process: every communicator shares one import of each
 * peer, as it shares one registry. A peer no communicator uses any more
 * goes dormant: its imports, mirrors and pidfd are released, but its table
 * stays mapped, so that the lock-free check below never reads unmapped
 * memory; a later communicator with the same peer wakes it. */
static struct {
    pthread_mutex_t lock;
    zcopy_ipc_peer_t *head;
} peers = { .lock = PTHREAD_MUTEX_INITIALIZER };

/* What zcopy_ipc_sweep checks at every collective without a lock: for each
 * peer, where its table's version is and which version its imports match.
 * A locked instruction there would wait for the store that publishes the
 * rank's arrival, so the common case (nothing changed) takes no lock. */
#define ZCOPY_IPC_MAX_WATCHES 4096
static struct {
    _Atomic(const _Atomic uint64_t *) version;
    _Atomic uint64_t seen;
} watches[ZCOPY_IPC_MAX_WATCHES];
static _Atomic int nwatches;
static _Atomic bool watches_overflowed; /* then every sweep takes the lock */
/* Imports of all peers together (ipc.h). Changed under peers.lock. */
_Atomic size_t zcopy_ipc_imports_live;

static int sys_pidfd_open(pid_t pid) { return (int)syscall(SYS_pidfd_open, pid, 0); }

/* A pidfd for fetching from @pid: -1 when descriptors come over sockets
 * (none needed), -2 on failure. */
static int peer_pidfd_open(pid_t pid)
{
    int fd;

    if (zcopy_ipc_access_current() == ZCOPY_IPC_ACCESS_SOCKET)
        return -1;
    fd = sys_pidfd_open(pid);
    return fd >= 0 ? fd : -2;
}

static zcopy_ipc_id_t peer_owner(const zcopy_ipc_peer_t *peer)
{
    return (zcopy_ipc_id_t){ .pid = peer->pid, .table_ino = peer->table_ino };
}

zcopy_status_t zcopy_ipc_fetch_fd(const zcopy_ipc_id_t *owner, int remote_fd,
                                  uint64_t ino, int *fd_p)
{
    zcopy_status_t st;
    int pidfd = -1;

    if (zcopy_ipc_access_current() == ZCOPY_IPC_ACCESS_PIDFD) {
        pidfd = sys_pidfd_open(owner->pid);
        if (pidfd < 0)
            return zcopy_error(ZCOPY_ERR_SYSTEM, "pidfd_open(%d): %s",
                               (int)owner->pid, strerror(errno));
    }
    st = zcopy_ipc_fetch(owner, pidfd, remote_fd, ino, fd_p);
    if (pidfd >= 0)
        close(pidfd);
    return st;
}

/* --- table copy ---------------------------------------------------------- */

/* Copies the owner's table; returns the version copied. */
static uint64_t peer_copy_table(zcopy_ipc_peer_t *peer)
{
    const zcopy_ipc_table_t *t = peer->table;
    uint64_t before, after;
    uint32_t n;

    for (;;) {
        before = atomic_load_explicit(&t->seq, memory_order_acquire);
        if (before & 1) {
            sched_yield();
            continue;
        }
        n = t->nblocks;
        if (n > ZCOPY_IPC_MAX_BLOCKS)
            n = 0;
        memcpy(peer->entries, t->entries, n * sizeof(*peer->entries));
        /* The copy above must complete before the version is re-read. */
        atomic_thread_fence(memory_order_acquire);
        after = atomic_load_explicit(&t->seq, memory_order_relaxed);
        if (before == after)
            break;
    }
    peer->nentries = n;
    return before;
}

static const zcopy_ipc_entry_t *peer_entry(const zcopy_ipc_peer_t *peer,
                                           uint64_t generation)
{
    for (uint32_t i = 0; i < peer->nentries; i++)
        if (peer->entries[i].generation == generation)
            return &peer->entries[i];
    return NULL;
}

/* --- mirrors and imports ------------------------------------------------- */

static int hole_compare(const void *a, const void *b)
{
    const ipc_hole_t *x = a, *y = b;

    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* Unmaps the reservation around its holes. With more holes than tracked,
 * keeps it: address space lost is better than another mapping torn out. */
static void mirror_unmap(ipc_mirror_t *m)
{
    uint64_t at = 0;

    if (m->nholes > IPC_MIRROR_MAX_HOLES)
        return;
    qsort(m->holes, m->nholes, sizeof(m->holes[0]), hole_compare);
    for (unsigned i = 0; i <= m->nholes; i++) {
        const uint64_t end = i < m->nholes ? m->holes[i].offset : m->size;
        if (end > at)
            munmap(m->local + at, end - at);
        if (i < m->nholes)
            at = m->holes[i].offset + m->holes[i].size;
    }
}

static void mirror_release(zcopy_ipc_peer_t *peer, size_t index)
{
    ipc_mirror_t *m = peer->mirrors[index];

    mirror_unmap(m);
    free(m);
    peer->mirrors[index] = peer->mirrors[--peer->nmirrors];
}

static zcopy_status_t mirror_get(zcopy_ipc_peer_t *peer, uint64_t base,
                                 uint64_t size, ipc_mirror_t **mirror_p)
{
    ipc_mirror_t *m, **grown;
    void *p;

    for (size_t i = 0; i < peer->nmirrors; i++) {
        if (peer->mirrors[i]->base == base && peer->mirrors[i]->size == size) {
            *mirror_p = peer->mirrors[i];
            return ZCOPY_SUCCESS;
        }
    }
    grown = realloc(peer->mirrors, (peer->nmirrors + 1) * sizeof(*grown));
    if (grown == NULL)
        return zcopy_error(ZCOPY_ERR_NOMEM, "peer mirror: out of memory");
    peer->mirrors = grown;
    m = calloc(1, sizeof(*m));
    if (m == NULL)
        return zcopy_error(ZCOPY_ERR_NOMEM, "peer mirror: out of memory");
    p = mmap(NULL, size, PROT_NONE,
             MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
        free(m);
        return zcopy_error(ZCOPY_ERR_NOMEM,
                           "no %llu bytes of address space to mirror a range "
                           "of process %d", (unsigned long long)size,
                           (int)peer->pid);
    }
    *m = (ipc_mirror_t){ .base = base, .size = size, .local = p };
    peer->mirrors[peer->nmirrors++] = m;
    *mirror_p = m;
    return ZCOPY_SUCCESS;
}

static void import_drop(zcopy_ipc_peer_t *peer, size_t index)
{
    const int flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED;
    ipc_import_t *imp = &peer->imports[index];
    ipc_mirror_t *m = imp->mirror;

    /* Back to a hole in the mirror: the peer's pages are released here.
     * Should the kernel refuse the new mapping (mapping-count limit), the
     * pages must go anyway: unmap, leaving a gap in the reservation. */
    if (mmap(m->local + (imp->va - m->base), imp->size, PROT_NONE, flags, -1,
             0) == MAP_FAILED) {
        munmap(m->local + (imp->va - m->base), imp->size);
        if (m->nholes < IPC_MIRROR_MAX_HOLES)
            m->holes[m->nholes] = (ipc_hole_t){ .offset = imp->va - m->base,
                                                .size = imp->size };
        m->nholes++;
    }
    m->nimports--;
    memmove(imp, imp + 1, (peer->nimports - index - 1) * sizeof(*imp));
    peer->nimports--;
    atomic_fetch_sub_explicit(&zcopy_ipc_imports_live, 1, memory_order_relaxed);
    zcopy_log(ZCOPY_LOG_TRACE, "ipc", "dropped import of [%p, +%llu) of %d",
              (void *)(uintptr_t)imp->va, (unsigned long long)imp->size,
              (int)peer->pid);
}

static size_t import_lower_bound(const zcopy_ipc_peer_t *peer, uint64_t va)
{
    size_t lo = 0, hi = peer->nimports;

    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (peer->imports[mid].va + peer->imports[mid].size <= va)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static zcopy_status_t import_block(zcopy_ipc_peer_t *peer,
                                   const zcopy_ipc_entry_t *e)
{
    ipc_mirror_t *m = NULL;
    ipc_import_t *grown;
    size_t at;
    zcopy_ipc_id_t owner;
    zcopy_status_t st;
    void *p;
    int fd;

    /* The entry comes from another process: it must lie inside its range
     * before anything is mapped over our mirror of that range. */
    if (e->size == 0 || !zcopy_range_inside(e->va, e->size, e->range_base,
                                            e->range_size))
        return zcopy_error(ZCOPY_ERR_ARG, "process %d published a block "
                           "[%#llx, +%llu) outside its range [%#llx, +%llu)",
                           (int)peer->pid, (unsigned long long)e->va,
                           (unsigned long long)e->size,
                           (unsigned long long)e->range_base,
                           (unsigned long long)e->range_size);
    ZCOPY_CHECK(mirror_get(peer, e->range_base, e->range_size, &m));
    grown = realloc(peer->imports, (peer->nimports + 1) * sizeof(*grown));
    if (grown == NULL) {
        st = zcopy_error(ZCOPY_ERR_NOMEM, "import: out of memory");
        goto err_mirror;
    }
    peer->imports = grown;
    owner = peer_owner(peer);
    st = zcopy_ipc_fetch(&owner, peer->pidfd, e->fd, e->ino, &fd);
    if (st != ZCOPY_SUCCESS)
        goto err_mirror;
    p = mmap(m->local + (e->va - e->range_base), e->size,
             PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, (off_t)e->offset);
    close(fd); /* the mapping keeps the pages */
    if (p == MAP_FAILED) {
        st = zcopy_error(ZCOPY_ERR_SYSTEM, "mapping a block of %d: %s",
                         (int)peer->pid, strerror(errno));
        goto err_mirror;
    }
    at = import_lower_bound(peer, e->va);
    memmove(&peer->imports[at + 1], &peer->imports[at],
            (peer->nimports - at) * sizeof(*peer->imports));
    peer->imports[at] = (ipc_import_t){ .va = e->va, .size = e->size,
                                        .generation = e->generation,
                                        .mirror = m };
    peer->nimports++;
    m->nimports++;
    atomic_fetch_add_explicit(&zcopy_ipc_imports_live, 1, memory_order_relaxed);
    zcopy_log(ZCOPY_LOG_TRACE, "ipc", "imported [%p, +%llu) gen %llu of %d",
              (void *)(uintptr_t)e->va, (unsigned long long)e->size,
              (unsigned long long)e->generation, (int)peer->pid);
    return ZCOPY_SUCCESS;

err_mirror:
    /* A mirror made for this block alone must not outlive the failure. */
    for (size_t k = 0; m->nimports == 0 && k < peer->nmirrors; k++) {
        if (peer->mirrors[k] == m) {
            mirror_release(peer, k);
            break;
        }
    }
    return st;
}

/* Brings imports in line with the owner's table when it has changed. */
static void peer_resync(zcopy_ipc_peer_t *peer)
{
    uint64_t seq = atomic_load_explicit(&peer->table->seq, memory_order_acquire);

    if (seq == peer->seen_seq)
        return;
    peer->seen_seq = peer_copy_table(peer);
    if (peer->watch >= 0)
        atomic_store_explicit(&watches[peer->watch].seen, peer->seen_seq,
                              memory_order_relaxed);
    for (size_t i = peer->nimports; i-- > 0;)
        if (peer_entry(peer, peer->imports[i].generation) == NULL)
            import_drop(peer, i);
    for (size_t i = peer->nmirrors; i-- > 0;)
        if (peer->mirrors[i]->nimports == 0)
            mirror_release(peer, i);
}

/* --- public -------------------------------------------------------------- */

/* Releases what only an active peer needs. */
static void peer_release(zcopy_ipc_peer_t *peer)
{
    while (peer->nimports)
        import_drop(peer, peer->nimports - 1);
    while (peer->nmirrors)
        mirror_release(peer, peer->nmirrors - 1);
    if (peer->pidfd >= 0)
        close(peer->pidfd);
    peer->pidfd = -1;
}

/* Only for a peer that never reached the watch list. */
static void peer_free(zcopy_ipc_peer_t *peer)
{
    peer_release(peer);
    if (peer->table)
        munmap((void *)peer->table, sizeof(*peer->table));
    free(peer->entries);
    free(peer->mirrors);
    free(peer->imports);
    free(peer);
}

static zcopy_status_t peer_open(const zcopy_ipc_id_t *id,
                                zcopy_ipc_peer_t **peer_p)
{
    zcopy_ipc_peer_t *peer = calloc(1, sizeof(*peer));
    zcopy_status_t st;
    void *p;
    int fd;

    if (peer == NULL)
        return zcopy_error(ZCOPY_ERR_NOMEM, "peer: out of memory");
    peer->pid = id->pid;
    peer->table_ino = id->table_ino;
    peer->watch = -1;
    peer->seen_seq = UINT64_MAX;
    peer->entries = malloc(ZCOPY_IPC_MAX_BLOCKS * sizeof(*peer->entries));
    peer->pidfd = peer_pidfd_open(id->pid);
    if (peer->entries == NULL || peer->pidfd == -2) {
        st = zcopy_error(ZCOPY_ERR_SYSTEM, "peer %d: pidfd_open: %s",
                         (int)id->pid, strerror(errno));
        goto err;
    }
    st = zcopy_ipc_fetch(id, peer->pidfd, id->table_fd, id->table_ino, &fd);
    if (st != ZCOPY_SUCCESS)
        goto err;
    p = mmap(NULL, sizeof(zcopy_ipc_table_t), PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) {
        st = zcopy_error(errno == ENOMEM ? ZCOPY_ERR_NOMEM : ZCOPY_ERR_SYSTEM,
                         "peer %d: mapping its table: %s", (int)id->pid,
                         strerror(errno));
        goto err;
    }
    peer->table = p;
    if (peer->table->magic != ZCOPY_IPC_TABLE_MAGIC) {
        st = zcopy_error(ZCOPY_ERR_INTERNAL, "peer %d: not a zcopy table",
                         (int)id->pid);
        goto err;
    }
    /* zcopy's import path serves only processes of one job (SPEC 8). */
    if (peer->table->job != zcopy_ipc_job_id() || peer->table->job == 0) {
        st = zcopy_error(ZCOPY_ERR_UNSUPPORTED,
                         "import from process %d refused: it is not part of "
                         "this MPI job", (int)id->pid);
        zcopy_log(ZCOPY_LOG_WARN, "ipc", "%s", zcopy_error_detail());
        goto err;
    }
    *peer_p = peer;
    return ZCOPY_SUCCESS;

err:
    peer_free(peer);
    return st;
}

/* Called with the lock held, once the peer is in the list for good. */
static void peer_watch(zcopy_ipc_peer_t *peer)
{
    int n = atomic_load_explicit(&nwatches, memory_order_relaxed);

    if (n == ZCOPY_IPC_MAX_WATCHES) {
        atomic_store_explicit(&watches_overflowed, true, memory_order_relaxed);
        return;
    }
    peer->watch = n;
    atomic_store_explicit(&watches[n].seen, peer->seen_seq,
                          memory_order_relaxed);
    atomic_store_explicit(&watches[n].version, &peer->table->seq,
                          memory_order_relaxed);
    /* Release: a sweep that sees the new count sees the entry. */
    atomic_store_explicit(&nwatches, n + 1, memory_order_release);
}

static zcopy_status_t peer_wake(zcopy_ipc_peer_t *peer)
{
    if (peer->pidfd >= 0)
        return ZCOPY_SUCCESS;
    peer->pidfd = peer_pidfd_open(peer->pid);
    if (peer->pidfd == -2)
        return zcopy_error(ZCOPY_ERR_SYSTEM, "peer %d: pidfd_open: %s",
                           (int)peer->pid, strerror(errno));
    return ZCOPY_SUCCESS;
}

zcopy_status_t zcopy_ipc_peer_get(const zcopy_ipc_id_t *id,
                                  zcopy_ipc_peer_t **peer_p)
{
    zcopy_ipc_peer_t *peer;
    zcopy_status_t st;

    pthread_mutex_lock(&peers.lock);
    /* A reused pid is another process, with another table: a dormant peer
     * of the old one stays as it is and a new one is opened. */
    for (peer = peers.head;
         peer && (peer->pid != id->pid || peer->table_ino != id->table_ino);
         peer = peer->next)
        ;
    if (peer != NULL) {
        st = peer_wake(peer);
    } else {
        st = peer_open(id, &peer);
        if (st == ZCOPY_SUCCESS) {
            peer->next = peers.head;
            peers.head = peer;
            peer_watch(peer);
        }
    }
    if (st == ZCOPY_SUCCESS) {
        peer->refs++;
        *peer_p = peer;
    }
    pthread_mutex_unlock(&peers.lock);
    return st;
}

void zcopy_ipc_peer_put(zcopy_ipc_peer_t *peer)
{
    if (peer == NULL)
        return;
    pthread_mutex_lock(&peers.lock);
    if (--peer->refs == 0)
        peer_release(peer);
    pthread_mutex_unlock(&peers.lock);
}

zcopy_status_t zcopy_ipc_peer_map(zcopy_ipc_peer_t *peer, uintptr_t addr,
                                  size_t len, void **local_p)
{
    zcopy_status_t st = ZCOPY_SUCCESS;
    uint64_t at = addr, end = addr + len;
    const zcopy_ipc_entry_t *e;
    ipc_mirror_t *mirror = NULL;

    if (len == 0) {
        *local_p = NULL;
        return ZCOPY_SUCCESS;
    }
    pthread_mutex_lock(&peers.lock);
    peer_resync(peer);
    /* Walk the blocks under [addr, end): each must be imported and all must
     * lie in one mirror for the range to be contiguous here. */
    while (at < end) {
        size_t i = import_lower_bound(peer, at);
        if (i == peer->nimports || peer->imports[i].va > at) {
            e = NULL;
            for (uint32_t k = 0; k < peer->nentries && e == NULL; k++)
                if (peer->entries[k].va <= at &&
                    at - peer->entries[k].va < peer->entries[k].size)
                    e = &peer->entries[k];
            if (e == NULL) {
                st = zcopy_error(ZCOPY_ERR_NOT_FOUND,
                                 "process %d has no activated memory at %p",
                                 (int)peer->pid, (void *)(uintptr_t)at);
                goto out;
            }
            st = import_block(peer, e);
            if (st != ZCOPY_SUCCESS)
                goto out;
            /* Imports must be let go of from any MPI call, a program
             * that only uses nonblocking collectives included (SPEC 3). */
            zcopy_host_want_progress();
            i = import_lower_bound(peer, at);
        }
        if (mirror != NULL && peer->imports[i].mirror != mirror) {
            st = zcopy_error(ZCOPY_ERR_RANGE,
                             "[%p, +%zu) of process %d spans two ranges",
                             (void *)addr, len, (int)peer->pid);
            goto out;
        }
        mirror = peer->imports[i].mirror;
        at = peer->imports[i].va + peer->imports[i].size;
    }
    *local_p = mirror->local + (addr - mirror->base);
out:
    pthread_mutex_unlock(&peers.lock);
    return st;
}

uint64_t zcopy_ipc_peer_version(const zcopy_ipc_peer_t *peer)
{
    return atomic_load_explicit(&peer->table->seq, memory_order_acquire);
}

static bool watches_changed(void)
{
    int n;

    if (atomic_load_explicit(&zcopy_ipc_imports_live, memory_order_relaxed) == 0)
        return false;
    n = atomic_load_explicit(&nwatches, memory_order_acquire);
    if (atomic_load_explicit(&watches_overflowed, memory_order_relaxed))
        return true;
    for (int i = 0; i < n; i++) {
        const _Atomic uint64_t *version =
            atomic_load_explicit(&watches[i].version, memory_order_relaxed);
        if (atomic_load_explicit(version, memory_order_acquire) !=
            atomic_load_explicit(&watches[i].seen, memory_order_relaxed))
            return true;
    }
    return false;
}

void zcopy_ipc_sweep_imports(void)
{
    if (!watches_changed())
        return;
    pthread_mutex_lock(&peers.lock);
    for (zcopy_ipc_peer_t *peer = peers.head; peer; peer = peer->next)
        peer_resync(peer);
    pthread_mutex_unlock(&peers.lock);
}

bool zcopy_ipc_sweep_try(void)
{
    if (!watches_changed())
        return true;
    /* Busy: its holder is importing or sweeping; the next call will do. */
    if (pthread_mutex_trylock(&peers.lock) != 0)
        return false;
    for (zcopy_ipc_peer_t *peer = peers.head; peer; peer = peer->next)
        peer_resync(peer);
    pthread_mutex_unlock(&peers.lock);
    return true;
}

void zcopy_ipc_counts(size_t *npeers, size_t *nimports)
{
    *npeers = *nimports = 0;
    pthread_mutex_lock(&peers.lock);
    for (zcopy_ipc_peer_t *peer = peers.head; peer; peer = peer->next) {
        if (peer->refs == 0)
            continue; /* dormant */
        (*npeers)++;
        *nimports += peer->nimports;
    }
    pthread_mutex_unlock(&peers.lock);
}
