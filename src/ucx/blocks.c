/*
 * Activated blocks registered with UCX (SPEC section 6).
 *
 * UCX starts with the first communicator that needs it: one that spans
 * servers, or any under coll_zcopy_transport=ucx. A job that never leaves a
 * server never pays for a worker, its sockets and its shared-memory
 * segments. From that start on, the registrations follow the registry:
 * zcopy_ucx_blocks_refresh() runs after every activation and deactivation
 * (before the application can unmap the pages) and registers what is new
 * and unregisters what is gone, so every activated block is registered
 * from its activation until its deactivation.
 *
 * Peers' remote keys need no message here: a spanning collective's
 * arrival names the blocks under its buffers (address, size, generation),
 * and a peer that meets a generation it has no key for asks this process
 * for it (zcopy_ucx_rkey_fetch, served in serve.c), unpacks it and drops
 * the keys of the blocks it overlaps (ep.c). A deactivated block's key can
 * no longer be in use: every spanning collective completes its transfers
 * before it returns, and deactivation happens between collectives.
 */
#include "ucx.h"

#include "registry/registry.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    uint64_t generation;
    uintptr_t va;
    size_t size;
    zcopy_ucx_mem_t *mem;         /* NULL: UCX could not register it (or its
                                     key is too big to send); not retried */
} ucx_block_t;

/* Per process, like the registry it mirrors. The snapshot buffer is static
 * because a refresh must never fail for want of memory: a deactivated
 * block would then stay registered under pages the application unmaps. */
static struct {
    pthread_mutex_t lock;
    bool started;
    ucx_block_t *blocks;
    size_t nblocks, cap;
    zcopy_block_t snapshot[ZCOPY_UCX_MAX_BLOCKS];
} ublocks = { .lock = PTHREAD_MUTEX_INITIALIZER };

static bool snapshot_has(const zcopy_block_t *snap, size_t n, uint64_t gen)
{
    for (size_t i = 0; i < n; i++)
        if (snap[i].generation == gen)
            return true;
    return false;
}

static bool registered(uint64_t gen)
{
    for (size_t i = 0; i < ublocks.nblocks; i++)
        if (ublocks.blocks[i].generation == gen)
            return true;
    return false;
}

/* A block UCX cannot register, or whose key a peer could not fetch
 * (longer than ZCOPY_UCX_RKEY_FETCH_MAX), stays usable inside its server;
 * spanning collectives on it fall back ("buffer not inside one
 * UCX-registered block") instead of failing after the ranks agreed. It is
 * said once, when the block is activated, and not tried again. */
static void register_block(const zcopy_block_t *b)
{
    zcopy_ucx_mem_t *mem = NULL;
    const void *rkey;
    size_t rkey_len;

    if (!zcopy_array_reserve((void **)&ublocks.blocks, &ublocks.cap,
                             ublocks.nblocks, sizeof(*ublocks.blocks)))
        return; /* retried at the next refresh */
    if (zcopy_ucx_mem_register((void *)b->va, b->size, b->map.kind, &mem) !=
        ZCOPY_SUCCESS) {
        zcopy_log(ZCOPY_LOG_WARN, "ucx", "block [%p, +%zu): %s; collectives "
                  "across servers on it fall back", (void *)b->va, b->size,
                  zcopy_error_detail());
        mem = NULL;
    } else {
        zcopy_ucx_mem_packed_rkey(mem, &rkey, &rkey_len);
        if (rkey_len > ZCOPY_UCX_RKEY_FETCH_MAX) {
            zcopy_log(ZCOPY_LOG_WARN, "ucx", "block [%p, +%zu): its remote "
                      "key has %zu bytes, more than the %d a peer fetches; "
                      "collectives across servers on it fall back",
                      (void *)b->va, b->size, rkey_len,
                      ZCOPY_UCX_RKEY_FETCH_MAX);
            zcopy_ucx_mem_unregister(mem);
            mem = NULL;
        }
    }
    ublocks.blocks[ublocks.nblocks++] = (ucx_block_t){
        .generation = b->generation, .va = b->va, .size = b->size, .mem = mem };
}

static void refresh_locked(void)
{
    const zcopy_block_t *snap = ublocks.snapshot;
    uint64_t epoch;
    size_t n, kept = 0;

    n = zcopy_registry_snapshot(ublocks.snapshot, ZCOPY_UCX_MAX_BLOCKS,
                                &epoch);
    /* Unregister first: a block re-activated at the same address must not
     * overlap its predecessor's registration. */
    for (size_t i = 0; i < ublocks.nblocks; i++) {
        if (snapshot_has(snap, n, ublocks.blocks[i].generation))
            ublocks.blocks[kept++] = ublocks.blocks[i];
        else
            zcopy_ucx_mem_unregister(ublocks.blocks[i].mem);
    }
    ublocks.nblocks = kept;
    for (size_t i = 0; i < n; i++)
        if (!registered(snap[i].generation))
            register_block(&snap[i]);
}

zcopy_status_t zcopy_ucx_blocks_start(void)
{
    zcopy_status_t st;

    pthread_mutex_lock(&ublocks.lock);
    st = zcopy_ucx_init();
    if (st == ZCOPY_SUCCESS && !ublocks.started) {
        ublocks.started = true;
        refresh_locked();
    }
    pthread_mutex_unlock(&ublocks.lock);
    return st;
}

void zcopy_ucx_blocks_refresh(void)
{
    pthread_mutex_lock(&ublocks.lock);
    if (ublocks.started)
        refresh_locked();
    pthread_mutex_unlock(&ublocks.lock);
}

bool zcopy_ucx_blocks_find(uintptr_t addr, size_t len,
                           zcopy_ucx_block_ref_t *ref)
{
    bool found = false;

    pthread_mutex_lock(&ublocks.lock);
    for (size_t i = 0; i < ublocks.nblocks && !found; i++) {
        const ucx_block_t *b = &ublocks.blocks[i];

        if (!zcopy_range_inside(addr, len, b->va, b->size))
            continue;
        if (b->mem == NULL)
            break;
        *ref = (zcopy_ucx_block_ref_t){ .va = b->va, .size = b->size,
                                        .generation = b->generation };
        found = true;
    }
    pthread_mutex_unlock(&ublocks.lock);
    return found;
}
