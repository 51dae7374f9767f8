/*
 * The registry: memory ranges set for zero-copy and the blocks activated in
 * them. One per process (activation is per process, SPEC section 3): the
 * application's MPIX calls and the coll component share it.
 *
 * Every block carries a generation, unique in the process's lifetime, so a
 * block deactivated and activated again at the same address is never
 * mistaken for the old one by a peer that cached an import.
 */
#ifndef ZCOPY_REGISTRY_H
#define ZCOPY_REGISTRY_H

#include "base/base.h"
#include "mem/mem.h"

typedef struct {
    uintptr_t va;
    size_t size;
    uint64_t generation;
    uintptr_t range_base;         /* the set range holding the block */
    size_t range_size;
    zcopy_mem_mapping_info_t map; /* fd, offset and identity of the pages */
} zcopy_block_t;

/* Who set a range: only its owner may activate, deactivate or unset in it,
 * so an application's MPIX call can never take apart memory that
 * MPI_Alloc_mem handed out (the pool owns those ranges), nor the reverse. */
typedef enum {
    ZCOPY_OWNER_APP,              /* MPIX_Comm_set_memory_range */
    ZCOPY_OWNER_POOL              /* the MPI_Alloc_mem pool (pool/pool.h) */
} zcopy_owner_t;

zcopy_status_t zcopy_registry_set_range(uintptr_t base, size_t size,
                                        zcopy_owner_t owner);
zcopy_status_t zcopy_registry_unset_range(uintptr_t base, zcopy_owner_t owner);
zcopy_status_t zcopy_registry_activate(uintptr_t va, size_t size,
                                       zcopy_mem_handle_t handle,
                                       zcopy_owner_t owner);
zcopy_status_t zcopy_registry_deactivate(uintptr_t va, zcopy_owner_t owner);

/* The last extents found activated, valid while the registry is unchanged:
 * collectives ask about the same buffers call after call, and a hit answers
 * without taking the lock. */
typedef struct {
    struct {
        uint64_t epoch;
        uintptr_t lo, hi;
    } entry[2];
    unsigned next;
} zcopy_covers_cache_t;

/* Whether this process has any activated memory at all; a racing
 * activation may be seen either way, as by zcopy_registry_covers. */
bool zcopy_registry_any_activated(void);

/* Whether this process has ever had a range set (by the application or
 * by the MPI_Alloc_mem pool): false only in a process that has never used
 * zcopy, which no later activation can make eligible without first
 * setting a range. */
bool zcopy_registry_ever_used(void);

/* The registry's change counter: every range set or unset, activation and
 * deactivation moves it, so an answer about buffers kept with it holds
 * while it stays; 0 before the first change. */
uint64_t zcopy_registry_epoch(void);

/* True when [buf, buf + len) lies wholly in activated memory of one range
 * (it may span adjacent blocks). len == 0 is always covered. */
bool zcopy_registry_covers(const void *buf, size_t len);
/* The same, with a cache owned by the caller (one per communicator). */
bool zcopy_registry_covers_cached(const void *buf, size_t len,
                                  zcopy_covers_cache_t *cache);

/* Copies of the current blocks, for publication to peers; returns the count
 * (at most @max) and the registry's change counter in *@epoch. */
size_t zcopy_registry_snapshot(zcopy_block_t *blocks, size_t max,
                               uint64_t *epoch);

/* A generation no block of this process ever had or will have, for memory
 * that peers reach like a block but that is not in the registry (the
 * registered scratch of a communicator spanning servers). */
uint64_t zcopy_registry_new_generation(void);

/* Counts for tests and leak checks. */
void zcopy_registry_counts(size_t *nranges, size_t *nblocks);

#endif
