/*
 * The owner's side: this process's export table, rewritten from the
 * registry after every activation change.
 */
#include "table.h"

#include "registry/registry.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* One table per process, like the registry it mirrors. */
static struct {
    pthread_mutex_t lock;
    int fd;
    uint64_t ino;
    zcopy_ipc_table_t *table;
    zcopy_block_t snapshot[ZCOPY_IPC_MAX_BLOCKS + 1]; /* refresh's scratch */
    /* The blocks' descriptors as published, in private memory: what the
     * socket path may hand out is decided from here, never from the
     * table, which other processes hold. */
    struct {
        int fd;
        uint64_t ino;
    } offers[ZCOPY_IPC_MAX_BLOCKS];
    size_t noffers;
} exported = { .lock = PTHREAD_MUTEX_INITIALIZER, .fd = -1 };

uint64_t zcopy_ipc_job_id(void)
{
    const char *job = getenv("PMIX_NAMESPACE");
    uint64_t h = 0xcbf29ce484222325ull;

    if (job == NULL || *job == '\0')
        job = getenv("OMPI_MCA_ess_base_jobid");
    if (job == NULL || *job == '\0')
        return 0;
    while (*job)
        h = (h ^ (uint8_t)*job++) * 0x100000001b3ull;
    return h;
}

static zcopy_status_t export_create_locked(void)
{
    struct stat st;
    void *p;
    int fd;

    if (exported.table != NULL)
        return ZCOPY_SUCCESS;
    fd = memfd_create("zcopy-export", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0)
        return zcopy_error(ZCOPY_ERR_SYSTEM, "export table: memfd_create: %s",
                           strerror(errno));
    /* memfds are born 0777; owner-only, as all shared state (SPEC 8). */
    if (fchmod(fd, 0600) != 0 ||
        ftruncate(fd, sizeof(zcopy_ipc_table_t)) != 0 || fstat(fd, &st) != 0)
        goto err_close;
    p = mmap(NULL, sizeof(zcopy_ipc_table_t), PROT_READ | PROT_WRITE,
             MAP_SHARED, fd, 0);
    if (p == MAP_FAILED)
        goto err_close;
    /* Peers only read the table: after our own mapping, nobody can map it
     * writable any more. */
    if (zcopy_memfd_seal_read_only(fd) != 0) {
        munmap(p, sizeof(zcopy_ipc_table_t));
        goto err_close;
    }
    exported.table = p;
    exported.table->magic = ZCOPY_IPC_TABLE_MAGIC;
    exported.table->job = zcopy_ipc_job_id();
    exported.fd = fd;
    exported.ino = (uint64_t)st.st_ino;
    return ZCOPY_SUCCESS;

err_close:
    close(fd);
    return zcopy_error(ZCOPY_ERR_SYSTEM, "export table: %s", strerror(errno));
}

zcopy_status_t zcopy_ipc_local_id(zcopy_ipc_id_t *id)
{
    zcopy_status_t st;

    pthread_mutex_lock(&exported.lock);
    st = export_create_locked();
    pthread_mutex_unlock(&exported.lock);
    if (st != ZCOPY_SUCCESS)
        return st;
    ZCOPY_CHECK(zcopy_ipc_export_refresh());
    id->pid = (int32_t)getpid();
    id->table_fd = exported.fd;
    id->table_ino = exported.ino;
    return ZCOPY_SUCCESS;
}

bool zcopy_ipc_export_offers(int fd, uint64_t ino)
{
    bool found;

    pthread_mutex_lock(&exported.lock);
    found = exported.table != NULL && fd == exported.fd &&
            ino == exported.ino;
    for (size_t i = 0; !found && i < exported.noffers; i++)
        found = exported.offers[i].fd == fd && exported.offers[i].ino == ino;
    pthread_mutex_unlock(&exported.lock);
    return found;
}

zcopy_status_t zcopy_ipc_export_refresh(void)
{
    zcopy_block_t *blocks = exported.snapshot;
    zcopy_status_t st = ZCOPY_SUCCESS;
    zcopy_ipc_table_t *t;
    uint64_t epoch;
    size_t n;

    /* Snapshot and publication under one lock: two threads changing the
     * registry at once must publish in the order they took snapshots, or
     * an older table could overwrite a newer one. */
    pthread_mutex_lock(&exported.lock);
    n = zcopy_registry_snapshot(blocks, ZCOPY_IPC_MAX_BLOCKS + 1, &epoch);
    if (n > ZCOPY_IPC_MAX_BLOCKS) {
        st = zcopy_error(ZCOPY_ERR_NOMEM,
                         "more than %d activated blocks in one process",
                         ZCOPY_IPC_MAX_BLOCKS);
        goto out;
    }
    t = exported.table;
    if (t == NULL) /* no communicator has asked for peers yet */
        goto out;
    /* Odd sequence: readers copying now will retry. The release fence
     * orders the odd store before the entry stores. */
    atomic_fetch_add_explicit(&t->seq, 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    for (size_t i = 0; i < n; i++)
        t->entries[i] = (zcopy_ipc_entry_t){
            .va = blocks[i].va, .size = blocks[i].size,
            .generation = blocks[i].generation,
            .range_base = blocks[i].range_base,
            .range_size = blocks[i].range_size,
            .offset = blocks[i].map.offset, .ino = (uint64_t)blocks[i].map.ino,
            .fd = blocks[i].map.fd };
    t->nblocks = (uint32_t)n;
    for (size_t i = 0; i < n; i++) {
        exported.offers[i].fd = blocks[i].map.fd;
        exported.offers[i].ino = (uint64_t)blocks[i].map.ino;
    }
    exported.noffers = n;
    /* Even again: publishes the entries written above. */
    atomic_fetch_add_explicit(&t->seq, 1, memory_order_release);
out:
    pthread_mutex_unlock(&exported.lock);
    return st;
}
