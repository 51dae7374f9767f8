/*
 * Ranges and activated blocks, in address order, behind one lock. The lock
 * also serialises against the memory layer's pins, so a block's mapping and
 * a range's reservation cannot disappear while they are registered.
 */
#include "registry.h"

#include <pthread.h>
#include <stdio.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    uintptr_t base;
    size_t size;
    unsigned nblocks;
    zcopy_owner_t owner;
} reg_range_t;

/* Per process by definition (SPEC section 3); see registry.h. */
static struct {
    pthread_mutex_t lock;
    reg_range_t *ranges;
    size_t nranges, cap_ranges;
    zcopy_block_t *blocks;
    size_t nblocks, cap_blocks;
    uint64_t next_generation;
    _Atomic uint64_t epoch;       /* bumped by every change, under lock */
    /* [lo, hi) bounds every activated block (empty when none): a buffer
     * outside it is answered without the lock, so that collectives on
     * ordinary memory cost a job nothing measurable (SPEC section 4). */
    _Atomic uintptr_t lo, hi;
} reg = { .lock = PTHREAD_MUTEX_INITIALIZER, .next_generation = 1 };

/* Under the lock, after every change to the blocks. */
static void blocks_changed(void)
{
    const zcopy_block_t *last = reg.nblocks ? &reg.blocks[reg.nblocks - 1]
                                            : NULL;

    atomic_store_explicit(&reg.lo, last ? reg.blocks[0].va : 0,
                          memory_order_relaxed);
    atomic_store_explicit(&reg.hi, last ? last->va + last->size : 0,
                          memory_order_relaxed);
    atomic_fetch_add_explicit(&reg.epoch, 1, memory_order_release);
}

/* First range that ends after @va. */
static size_t range_lower_bound(uintptr_t va)
{
    size_t lo = 0, hi = reg.nranges;

    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (reg.ranges[mid].base + reg.ranges[mid].size <= va)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static reg_range_t *range_containing(uintptr_t va)
{
    size_t i = range_lower_bound(va);
    return i < reg.nranges && reg.ranges[i].base <= va ? &reg.ranges[i] : NULL;
}

/* First block that ends after @va. */
static size_t block_lower_bound(uintptr_t va)
{
    size_t lo = 0, hi = reg.nblocks;

    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (reg.blocks[mid].va + reg.blocks[mid].size <= va)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Prefixes the memory layer's description of a failure with the call. */
static void error_prefix(zcopy_status_t st, const char *call)
{
    char cause[256];

    snprintf(cause, sizeof(cause), "%s", zcopy_error_detail());
    zcopy_error(st, "%s: %s", call, cause);
}

/* The error for a caller reaching into a range it did not set. */
static zcopy_status_t not_owner(const char *call, const reg_range_t *r)
{
    return zcopy_error(ZCOPY_ERR_ARG,
                       r->owner == ZCOPY_OWNER_POOL
                           ? "%s: [%p, +%zu) is memory from MPI_Alloc_mem: "
                             "release it with MPI_Free_mem"
                           : "%s: [%p, +%zu) is a range the application set",
                       call, (void *)r->base, r->size);
}

/* --- ranges -------------------------------------------------------------- */

zcopy_status_t zcopy_registry_set_range(uintptr_t base, size_t size,
                                        zcopy_owner_t owner)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE), i;
    zcopy_status_t st;

    if (base == 0)
        return zcopy_error(ZCOPY_ERR_ARG, "set memory range: base is NULL");
    if (size == 0)
        return zcopy_error(ZCOPY_ERR_ARG, "set memory range: size is 0");
    if (!zcopy_is_aligned(base, page) || size % page)
        return zcopy_error(ZCOPY_ERR_RANGE,
                           "set memory range: [%p, +%zu) is not page aligned",
                           (void *)base, size);
    if (base + size < base)
        return zcopy_error(ZCOPY_ERR_RANGE,
                           "set memory range: [%p, +%zu) wraps around",
                           (void *)base, size);

    pthread_mutex_lock(&reg.lock);
    i = range_lower_bound(base);
    if (i < reg.nranges &&
        zcopy_ranges_overlap(base, size, reg.ranges[i].base,
                             reg.ranges[i].size)) {
        st = zcopy_error(ZCOPY_ERR_OVERLAP,
                         "set memory range: [%p, +%zu) overlaps the set range "
                         "[%p, +%zu)", (void *)base, size,
                         (void *)reg.ranges[i].base, reg.ranges[i].size);
        goto out;
    }
    if (!zcopy_array_reserve((void **)&reg.ranges, &reg.cap_ranges, reg.nranges,
              sizeof(*reg.ranges))) {
        st = zcopy_error(ZCOPY_ERR_NOMEM, "set memory range: out of memory");
        goto out;
    }
    st = zcopy_mem_reservation_pin(base, size);
    if (st != ZCOPY_SUCCESS) {
        error_prefix(st, "set memory range");
        goto out;
    }
    memmove(&reg.ranges[i + 1], &reg.ranges[i],
            (reg.nranges - i) * sizeof(*reg.ranges));
    reg.ranges[i] = (reg_range_t){ .base = base, .size = size,
                                   .owner = owner };
    reg.nranges++;
    reg.epoch++;
out:
    pthread_mutex_unlock(&reg.lock);
    return st;
}

zcopy_status_t zcopy_registry_unset_range(uintptr_t base, zcopy_owner_t owner)
{
    zcopy_status_t st = ZCOPY_SUCCESS;
    reg_range_t *r;
    size_t i;

    pthread_mutex_lock(&reg.lock);
    r = range_containing(base);
    if (r == NULL || r->base != base) {
        st = r == NULL
                 ? zcopy_error(ZCOPY_ERR_NOT_FOUND,
                               "unset memory range: %p is not a set range",
                               (void *)base)
                 : zcopy_error(ZCOPY_ERR_NOT_FOUND,
                               "unset memory range: %p is inside the set range "
                               "[%p, +%zu) but not its base", (void *)base,
                               (void *)r->base, r->size);
        goto out;
    }
    if (r->owner != owner) {
        st = not_owner("unset memory range", r);
        goto out;
    }
    if (r->nblocks) {
        st = zcopy_error(ZCOPY_ERR_BUSY,
                         "unset memory range: [%p, +%zu) still holds %u "
                         "activated block(s)", (void *)base, r->size,
                         r->nblocks);
        goto out;
    }
    zcopy_mem_reservation_unpin(base);
    i = (size_t)(r - reg.ranges);
    memmove(r, r + 1, (reg.nranges - i - 1) * sizeof(*r));
    reg.nranges--;
    reg.epoch++;
out:
    pthread_mutex_unlock(&reg.lock);
    return st;
}

/* --- blocks -------------------------------------------------------------- */

static zcopy_status_t activate_check(uintptr_t va, size_t size,
                                     zcopy_mem_handle_t handle,
                                     zcopy_owner_t owner,
                                     reg_range_t **range, size_t *insert_at)
{
    reg_range_t *r;
    size_t i;

    if (handle == NULL)
        return zcopy_error(ZCOPY_ERR_ARG, "activate: handle is NULL");
    if (size == 0)
        return zcopy_error(ZCOPY_ERR_ARG, "activate: size is 0");
    if (va + size < va)
        return zcopy_error(ZCOPY_ERR_RANGE, "activate: [%p, +%zu) wraps",
                           (void *)va, size);
    r = range_containing(va);
    if (r == NULL)
        return zcopy_error(ZCOPY_ERR_RANGE,
                           "activate: %p is outside every set memory range",
                           (void *)va);
    if (r->owner != owner)
        return not_owner("activate", r);
    if (!zcopy_range_inside(va, size, r->base, r->size))
        return zcopy_error(ZCOPY_ERR_RANGE,
                           "activate: [%p, +%zu) straddles the end of the set "
                           "range [%p, +%zu)", (void *)va, size,
                           (void *)r->base, r->size);
    i = block_lower_bound(va);
    if (i < reg.nblocks &&
        zcopy_ranges_overlap(va, size, reg.blocks[i].va, reg.blocks[i].size))
        return zcopy_error(ZCOPY_ERR_OVERLAP,
                           "activate: [%p, +%zu) overlaps the activated block "
                           "[%p, +%zu)", (void *)va, size,
                           (void *)reg.blocks[i].va, reg.blocks[i].size);
    if (!zcopy_array_reserve((void **)&reg.blocks, &reg.cap_blocks, reg.nblocks,
              sizeof(*reg.blocks)))
        return zcopy_error(ZCOPY_ERR_NOMEM, "activate: out of memory");
    *range = r;
    *insert_at = i;
    return ZCOPY_SUCCESS;
}

zcopy_status_t zcopy_registry_activate(uintptr_t va, size_t size,
                                       zcopy_mem_handle_t handle,
                                       zcopy_owner_t owner)
{
    zcopy_mem_mapping_info_t info;
    reg_range_t *r = NULL;
    zcopy_status_t st;
    size_t i = 0;

    pthread_mutex_lock(&reg.lock);
    st = activate_check(va, size, handle, owner, &r, &i);
    if (st != ZCOPY_SUCCESS)
        goto out;
    st = zcopy_mem_mapping_pin(va, size, handle, &info);
    if (st != ZCOPY_SUCCESS) {
        error_prefix(st, "activate");
        goto out;
    }
    memmove(&reg.blocks[i + 1], &reg.blocks[i],
            (reg.nblocks - i) * sizeof(*reg.blocks));
    reg.blocks[i] = (zcopy_block_t){ .va = va, .size = size,
                                     .generation = reg.next_generation++,
                                     .range_base = r->base,
                                     .range_size = r->size, .map = info };
    reg.nblocks++;
    r->nblocks++;
    blocks_changed();
out:
    pthread_mutex_unlock(&reg.lock);
    return st;
}

zcopy_status_t zcopy_registry_deactivate(uintptr_t va, zcopy_owner_t owner)
{
    zcopy_status_t st = ZCOPY_SUCCESS;
    reg_range_t *r;
    zcopy_block_t *b;
    size_t i;

    pthread_mutex_lock(&reg.lock);
    i = block_lower_bound(va);
    b = i < reg.nblocks && reg.blocks[i].va <= va ? &reg.blocks[i] : NULL;
    if (b == NULL || b->va != va) {
        st = b == NULL
                 ? zcopy_error(ZCOPY_ERR_NOT_FOUND,
                               "deactivate: %p is not an activated block",
                               (void *)va)
                 : zcopy_error(ZCOPY_ERR_NOT_FOUND,
                               "deactivate: %p is inside the activated block "
                               "[%p, +%zu) but not its start", (void *)va,
                               (void *)b->va, b->size);
        goto out;
    }
    r = range_containing(b->range_base);
    if (r->owner != owner) {
        st = not_owner("deactivate", r);
        goto out;
    }
    r->nblocks--;
    zcopy_mem_mapping_unpin(va);
    memmove(b, b + 1, (reg.nblocks - i - 1) * sizeof(*b));
    reg.nblocks--;
    blocks_changed();
out:
    pthread_mutex_unlock(&reg.lock);
    return st;
}

bool zcopy_registry_any_activated(void)
{
    return atomic_load_explicit(&reg.hi, memory_order_relaxed) != 0;
}

bool zcopy_registry_ever_used(void)
{
    /* The first change of all is a range set: activation needs one. */
    return zcopy_registry_epoch() != 0;
}

uint64_t zcopy_registry_epoch(void)
{
    return atomic_load_explicit(&reg.epoch, memory_order_acquire);
}

bool zcopy_registry_covers_cached(const void *buf, size_t len,
                                  zcopy_covers_cache_t *cache)
{
    uintptr_t at = (uintptr_t)buf, end = at + len, lo;
    uint64_t epoch = atomic_load_explicit(&reg.epoch, memory_order_acquire);
    bool covered = false;
    size_t i;

    if (len == 0)
        return true;
    if (end < at)
        return false;
    /* Relaxed is enough: a buffer a racing activation is just covering
     * may be answered either way (the caller's own activation, done
     * before the call, is ordered by program order). */
    if (at < atomic_load_explicit(&reg.lo, memory_order_relaxed) ||
        end > atomic_load_explicit(&reg.hi, memory_order_relaxed))
        return false;
    for (int k = 0; k < 2; k++)
        if (cache->entry[k].epoch == epoch && epoch != 0 &&
            at >= cache->entry[k].lo && end <= cache->entry[k].hi)
            return true;

    pthread_mutex_lock(&reg.lock);
    i = block_lower_bound(at);
    lo = i < reg.nblocks ? reg.blocks[i].va : 0;
    /* Walk adjacent blocks of one range until the buffer's end is reached. */
    while (i < reg.nblocks && reg.blocks[i].va <= at) {
        uintptr_t block_end = reg.blocks[i].va + reg.blocks[i].size;
        if (block_end >= end) {
            unsigned k = cache->next++ & 1;
            covered = true;
            cache->entry[k].epoch = reg.epoch;
            cache->entry[k].lo = lo;
            cache->entry[k].hi = block_end;
            break;
        }
        if (i + 1 == reg.nblocks || reg.blocks[i + 1].va != block_end ||
            reg.blocks[i + 1].range_base != reg.blocks[i].range_base)
            break;
        at = block_end;
        i++;
    }
    pthread_mutex_unlock(&reg.lock);
    return covered;
}

bool zcopy_registry_covers(const void *buf, size_t len)
{
    /* Per thread: callers without a cache of their own share none. */
    static _Thread_local zcopy_covers_cache_t cache;

    return zcopy_registry_covers_cached(buf, len, &cache);
}

size_t zcopy_registry_snapshot(zcopy_block_t *blocks, size_t max,
                               uint64_t *epoch)
{
    size_t n;

    pthread_mutex_lock(&reg.lock);
    n = reg.nblocks < max ? reg.nblocks : max;
    if (n > 0)
        memcpy(blocks, reg.blocks, n * sizeof(*blocks));
    *epoch = reg.epoch;
    pthread_mutex_unlock(&reg.lock);
    return n;
}

uint64_t zcopy_registry_new_generation(void)
{
    uint64_t gen;

    pthread_mutex_lock(&reg.lock);
    gen = reg.next_generation++;
    pthread_mutex_unlock(&reg.lock);
    return gen;
}

void zcopy_registry_counts(size_t *nranges, size_t *nblocks)
{
    pthread_mutex_lock(&reg.lock);
    *nranges = reg.nranges;
    *nblocks = reg.nblocks;
    pthread_mutex_unlock(&reg.lock);
}
