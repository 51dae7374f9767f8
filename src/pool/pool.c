/*
 * Blocks and the allocations cut from them (see pool.h). A shared block
 * keeps two bitmaps of its 64-byte units: which are in use, and which
 * start an allocation. An allocation is the run of used units from its
 * head to the next head or free unit, so a free needs no size and a
 * pointer that is not a head is refused without touching anything.
 */
#include "pool/pool.h"
#include "api/activation.h"
#include "comm/comm.h"
#include "host/progress.h"
#include "topo/topo.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

typedef struct {
    uintptr_t base;
    size_t size;
    zcopy_mem_handle_t handle;
    bool shared;                  /* cut in units; else one allocation */
    size_t units;
    uint64_t *used;               /* unit in use */
    uint64_t *head;               /* unit starts an allocation */
    size_t nlive;                 /* live allocations */
    size_t first_free;            /* no free unit below it */
} pool_block_t;

#define NODE_UNKNOWN (-2)
#define RETIRED_MAX 64

/* The address space of a released block, kept reserved (PROT_NONE, no
 * pages) so that nobody else is handed its addresses while the mpool
 * component still answers for them (a second MPI_Free_mem), and so that a
 * block of the same size can be placed there again without a new mmap. */
typedef struct {
    uintptr_t base;
    size_t size;
} pool_retired_t;

/* One pool per process, like the registry it fills: MPI_Alloc_mem belongs
 * to no communicator, and Open MPI holds one mpool module per process. */
static struct {
    pthread_mutex_t lock;
    pool_block_t *blocks;         /* in address order */
    size_t nblocks, cap;
    size_t block_size;
    int node;                     /* NUMA node of new blocks, -1 any */
    pool_retired_t retired[RETIRED_MAX]; /* oldest first */
    size_t nretired;
    uint64_t releases;            /* address ranges given back to the kernel */
} pool = { .lock = PTHREAD_MUTEX_INITIALIZER,
           .block_size = ZCOPY_POOL_DEFAULT_BLOCK, .node = NODE_UNKNOWN };

/* --- bitmaps ------------------------------------------------------------ */

static bool bit_test(const uint64_t *bm, size_t i)
{
    return (bm[i / 64] >> (i % 64)) & 1;
}

static void bits_assign(uint64_t *bm, size_t from, size_t n, bool on)
{
    while (n > 0) {
        size_t bit = from % 64, k = 64 - bit < n ? 64 - bit : n;
        uint64_t mask = (k == 64 ? ~0ull : (1ull << k) - 1) << bit;

        if (on)
            bm[from / 64] |= mask;
        else
            bm[from / 64] &= ~mask;
        from += k;
        n -= k;
    }
}

/* First index in [from, limit) whose bit equals @set, or @limit. */
static size_t bits_next(const uint64_t *bm, size_t from, size_t limit, bool set)
{
    while (from < limit) {
        uint64_t word = (set ? bm[from / 64] : ~bm[from / 64]) >> (from % 64);

        if (word != 0) {
            size_t at = from + (size_t)__builtin_ctzll(word);
            return at < limit ? at : limit;
        }
        from = (from / 64 + 1) * 64;
    }
    return limit;
}

/* --- blocks ------------------------------------------------------------- */

static zcopy_mem_prop_t block_prop(void)
{
    if (pool.node == NODE_UNKNOWN &&
        zcopy_topo_nearest_device(ZCOPY_MEM_HOST, NULL, &pool.node) !=
            ZCOPY_SUCCESS)
        pool.node = -1;
    return (zcopy_mem_prop_t){ .kind = ZCOPY_MEM_HOST, .device = pool.node };
}

/* Physical memory for a block, on the nearest node if pages may be placed
 * there (a container may refuse set_mempolicy: then anywhere, from now on). */
static zcopy_status_t block_memory(size_t size, zcopy_mem_handle_t *handle)
{
    zcopy_mem_prop_t prop = block_prop();
    zcopy_status_t st = zcopy_mem_create(handle, size, &prop, 0);

    if (st == ZCOPY_ERR_UNSUPPORTED && prop.device >= 0) {
        zcopy_log(ZCOPY_LOG_DEBUG, "pool",
                  "pages cannot be placed on NUMA node %d (%s): any node",
                  prop.device, zcopy_error_detail());
        pool.node = -1;
        prop.device = -1;
        st = zcopy_mem_create(handle, size, &prop, 0);
    }
    return st;
}

static void bitmaps_free(pool_block_t *b)
{
    free(b->used);
    free(b->head);
}

/* A retired reservation of exactly @size whose base meets @align, taken
 * off the list; 0 if none. */
static uintptr_t retired_take(size_t size, size_t align)
{
    for (size_t i = 0; i < pool.nretired; i++) {
        pool_retired_t r = pool.retired[i];

        if (r.size != size || !zcopy_is_aligned(r.base, align))
            continue;
        memmove(&pool.retired[i], &pool.retired[i + 1],
                (pool.nretired - i - 1) * sizeof(r));
        pool.nretired--;
        return r.base;
    }
    return 0;
}

/* Keeps the reservation of a released block; the oldest kept one goes back
 * to the kernel when the list is full. */
static void retired_add(uintptr_t base, size_t size)
{
    if (pool.nretired == RETIRED_MAX) {
        zcopy_mem_release((void *)pool.retired[0].base);
        pool.releases++;
        memmove(&pool.retired[0], &pool.retired[1],
                (RETIRED_MAX - 1) * sizeof(pool.retired[0]));
        pool.nretired--;
    }
    pool.retired[pool.nretired++] = (pool_retired_t){ base, size };
}

/* Reserve (or reuse a retired reservation), set as a pool range, back,
 * map, activate: undone in reverse on any failure. */
static zcopy_status_t block_create(size_t size, size_t align, bool shared,
                                   pool_block_t *b)
{
    zcopy_mem_prop_t prop = block_prop();
    size_t gran, words;
    zcopy_status_t st;
    void *va = NULL;

    ZCOPY_CHECK(zcopy_mem_granularity(&prop, &gran));
    size = zcopy_align_up(size, gran);
    *b = (pool_block_t){ .size = size, .shared = shared, .nlive = 0 };
    if (shared) {
        b->units = size / ZCOPY_POOL_UNIT;
        words = (b->units + 63) / 64;
        b->used = calloc(words, sizeof(uint64_t));
        b->head = calloc(words, sizeof(uint64_t));
        if (b->used == NULL || b->head == NULL) {
            bitmaps_free(b);
            return zcopy_error(ZCOPY_ERR_NOMEM, "pool: out of memory");
        }
    }
    va = (void *)retired_take(size, align > gran ? align : gran);
    if (va == NULL) {
        st = zcopy_mem_reserve(&va, size, align > gran ? align : 0, NULL, 0);
        if (st != ZCOPY_SUCCESS)
            goto fail_bitmaps;
    }
    b->base = (uintptr_t)va;
    st = zcopy_registry_set_range(b->base, size, ZCOPY_OWNER_POOL);
    if (st != ZCOPY_SUCCESS)
        goto fail_release;
    st = block_memory(size, &b->handle);
    if (st != ZCOPY_SUCCESS)
        goto fail_unset;
    st = zcopy_mem_map(va, size, 0, b->handle, 0);
    if (st != ZCOPY_SUCCESS)
        goto fail_free;
    st = zcopy_activation_add(b->base, size, b->handle, ZCOPY_OWNER_POOL);
    if (st != ZCOPY_SUCCESS)
        goto fail_unmap;
    zcopy_log(ZCOPY_LOG_DEBUG, "pool", "%s block [%p, +%zu) activated",
              shared ? "shared" : "whole", va, size);
    return ZCOPY_SUCCESS;

fail_unmap:
    zcopy_mem_unmap(va);
fail_free:
    zcopy_mem_free(b->handle);
fail_unset:
    zcopy_registry_unset_range(b->base, ZCOPY_OWNER_POOL);
fail_release:
    retired_add(b->base, size);
fail_bitmaps:
    bitmaps_free(b);
    return st;
}

/* Deactivates and frees the block's pages; its reservation is retired. */
static void block_destroy(pool_block_t *b)
{
    void *va = (void *)b->base;
    zcopy_status_t st;

    st = zcopy_activation_remove(b->base, ZCOPY_OWNER_POOL);
    if (st == ZCOPY_SUCCESS)
        st = zcopy_mem_unmap(va);
    if (st == ZCOPY_SUCCESS)
        st = zcopy_mem_free(b->handle);
    if (st == ZCOPY_SUCCESS)
        st = zcopy_registry_unset_range(b->base, ZCOPY_OWNER_POOL);
    if (st == ZCOPY_SUCCESS)
        retired_add(b->base, b->size);
    else /* nothing the pool did can cause this */
        zcopy_log(ZCOPY_LOG_WARN, "pool", "releasing block [%p, +%zu): %s",
                  va, b->size, zcopy_error_detail());
    bitmaps_free(b);
}

/* Index of the block holding @addr, or -1. */
static ssize_t block_find(uintptr_t addr)
{
    size_t lo = 0, hi = pool.nblocks;

    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (pool.blocks[mid].base + pool.blocks[mid].size <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < pool.nblocks && pool.blocks[lo].base <= addr ? (ssize_t)lo : -1;
}

static zcopy_status_t block_insert(const pool_block_t *b, pool_block_t **at)
{
    size_t i = 0;

    if (!zcopy_array_reserve((void **)&pool.blocks, &pool.cap, pool.nblocks,
                             sizeof(*pool.blocks)))
        return zcopy_error(ZCOPY_ERR_NOMEM, "pool: out of memory");
    while (i < pool.nblocks && pool.blocks[i].base < b->base)
        i++;
    memmove(&pool.blocks[i + 1], &pool.blocks[i],
            (pool.nblocks - i) * sizeof(*b));
    pool.blocks[i] = *b;
    pool.nblocks++;
    *at = &pool.blocks[i];
    return ZCOPY_SUCCESS;
}

static void block_remove(size_t i)
{
    block_destroy(&pool.blocks[i]);
    memmove(&pool.blocks[i], &pool.blocks[i + 1],
            (pool.nblocks - i - 1) * sizeof(*pool.blocks));
    pool.nblocks--;
}

/* --- allocations ---------------------------------------------------------- */

/* First run of @n free units starting on a multiple of @align units. */
static bool units_find(const pool_block_t *b, size_t n, size_t align,
                       size_t *at)
{
    size_t i = zcopy_align_up(b->first_free, align);

    while (i + n <= b->units) {
        size_t used = bits_next(b->used, i, i + n, true);

        if (used == i + n) {
            *at = i;
            return true;
        }
        i = zcopy_align_up(bits_next(b->used, used, b->units, false), align);
    }
    return false;
}

static void *units_take(pool_block_t *b, size_t at, size_t n)
{
    bits_assign(b->used, at, n, true);
    bits_assign(b->head, at, 1, true);
    if (at == b->first_free)
        b->first_free = bits_next(b->used, at + n, b->units, false);
    b->nlive++;
    return (void *)(b->base + at * ZCOPY_POOL_UNIT);
}

static zcopy_status_t alloc_shared(size_t n, size_t align, void **p)
{
    pool_block_t fresh, *b;
    size_t at;

    for (size_t i = 0; i < pool.nblocks; i++) {
        b = &pool.blocks[i];
        if (b->shared && units_find(b, n, align, &at)) {
            *p = units_take(b, at, n);
            return ZCOPY_SUCCESS;
        }
    }
    ZCOPY_CHECK(block_create(pool.block_size, 0, true, &fresh));
    if (block_insert(&fresh, &b) != ZCOPY_SUCCESS) {
        block_destroy(&fresh);
        return ZCOPY_ERR_NOMEM;
    }
    *p = units_take(b, 0, n);
    return ZCOPY_SUCCESS;
}

static zcopy_status_t alloc_whole(size_t size, size_t align, void **p)
{
    pool_block_t fresh, *b;

    ZCOPY_CHECK(block_create(size, align, false, &fresh));
    if (block_insert(&fresh, &b) != ZCOPY_SUCCESS) {
        block_destroy(&fresh);
        return ZCOPY_ERR_NOMEM;
    }
    b->nlive = 1;
    *p = (void *)b->base;
    return ZCOPY_SUCCESS;
}

/* A wait's progress run, or an MPI call zcopy made, may hold locks that a
 * new block takes (UCX registration, the export table). */
ZCOPY_COMPONENT_API bool zcopy_pool_reentered(void)
{
    return zcopy_host_progress_depth > 0 || zcopy_internal_active();
}

ZCOPY_COMPONENT_API zcopy_status_t zcopy_pool_alloc(size_t size, size_t align,
                                                    void **p)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    zcopy_status_t st;

    *p = NULL;
    if (zcopy_pool_reentered())
        return zcopy_error(ZCOPY_ERR_BUSY, "pool: called from inside zcopy");
    if (size == 0)
        return zcopy_error(ZCOPY_ERR_ARG, "pool: size is 0");
    if (align & (align - 1))
        return zcopy_error(ZCOPY_ERR_ARG,
                           "pool: alignment %zu is not a power of two", align);
    if (size > SIZE_MAX / 4)
        return zcopy_error(ZCOPY_ERR_NOMEM, "pool: %zu bytes is too large",
                           size);
    if (align < ZCOPY_POOL_UNIT)
        align = ZCOPY_POOL_UNIT;

    pthread_mutex_lock(&pool.lock);
    /* Blocks start on a page, so within one any alignment up to a page
     * holds; larger ones and large requests get a block of their own. */
    if (size > pool.block_size / 2 || align > page)
        st = alloc_whole(size, align, p);
    else
        st = alloc_shared((size + ZCOPY_POOL_UNIT - 1) / ZCOPY_POOL_UNIT,
                          align / ZCOPY_POOL_UNIT, p);
    pthread_mutex_unlock(&pool.lock);
    return st;
}

static size_t empty_shared_blocks(void)
{
    size_t n = 0;

    for (size_t i = 0; i < pool.nblocks; i++)
        n += pool.blocks[i].shared && pool.blocks[i].nlive == 0;
    return n;
}

/* Frees the allocation at unit @u of shared block @i, if one starts there. */
static zcopy_status_t free_units(size_t i, size_t u)
{
    pool_block_t *b = &pool.blocks[i];
    size_t end;

    if (!bit_test(b->head, u))
        return ZCOPY_ERR_NOT_FOUND;
    end = bits_next(b->head, u + 1, b->units, true);
    end = bits_next(b->used, u + 1, end, false);
    bits_assign(b->used, u, end - u, false);
    bits_assign(b->head, u, 1, false);
    if (u < b->first_free)
        b->first_free = u;
    /* Keep one empty block for the next request; release the others. */
    if (--b->nlive == 0 && empty_shared_blocks() > 1)
        block_remove(i);
    return ZCOPY_SUCCESS;
}

ZCOPY_COMPONENT_API zcopy_status_t zcopy_pool_free(void *p)
{
    uintptr_t addr = (uintptr_t)p;
    zcopy_status_t st = ZCOPY_ERR_NOT_FOUND;
    ssize_t i;

    pthread_mutex_lock(&pool.lock);
    i = block_find(addr);
    if (i >= 0) {
        pool_block_t *b = &pool.blocks[i];
        size_t off = addr - b->base;

        if (!b->shared && off == 0) {
            block_remove((size_t)i);
            st = ZCOPY_SUCCESS;
        } else if (b->shared && off % ZCOPY_POOL_UNIT == 0) {
            st = free_units((size_t)i, off / ZCOPY_POOL_UNIT);
        }
    }
    pthread_mutex_unlock(&pool.lock);
    if (st != ZCOPY_SUCCESS)
        return zcopy_error(st, "pool: %p is not the start of a live "
                               "allocation (freed already?)", p);
    return ZCOPY_SUCCESS;
}

ZCOPY_COMPONENT_API bool zcopy_pool_contains(const void *p)
{
    uintptr_t addr = (uintptr_t)p;
    bool found;

    pthread_mutex_lock(&pool.lock);
    found = block_find(addr) >= 0;
    for (size_t i = 0; i < pool.nretired && !found; i++)
        found = zcopy_range_inside(addr, 1, pool.retired[i].base,
                                   pool.retired[i].size);
    pthread_mutex_unlock(&pool.lock);
    return found;
}

ZCOPY_COMPONENT_API uint64_t zcopy_pool_releases(void)
{
    uint64_t n;

    pthread_mutex_lock(&pool.lock);
    n = pool.releases;
    pthread_mutex_unlock(&pool.lock);
    return n;
}

ZCOPY_COMPONENT_API void zcopy_pool_set_block_size(size_t bytes)
{
    pthread_mutex_lock(&pool.lock);
    pool.block_size = bytes > ZCOPY_POOL_UNIT ? bytes : ZCOPY_POOL_UNIT;
    pthread_mutex_unlock(&pool.lock);
}

ZCOPY_COMPONENT_API void zcopy_pool_trim(void)
{
    pthread_mutex_lock(&pool.lock);
    for (size_t i = pool.nblocks; i-- > 0;)
        if (pool.blocks[i].nlive == 0)
            block_remove(i);
    while (pool.nretired > 0) {
        zcopy_mem_release((void *)pool.retired[--pool.nretired].base);
        pool.releases++;
    }
    if (pool.nblocks == 0) {
        free(pool.blocks);
        pool.blocks = NULL;
        pool.cap = 0;
    }
    pthread_mutex_unlock(&pool.lock);
}

