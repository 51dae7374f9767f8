/*
 * The MPI_Alloc_mem pool: activated host memory handed out in pieces, for
 * the mpool component (mpi_ext/mpool_zcopy_component.c).
 *
 * Memory comes in blocks, each one reservation, one set range (owned by
 * the pool, ZCOPY_OWNER_POOL) and one activated mapping, on the NUMA node
 * nearest to the process. Small requests share blocks, cut in 64-byte
 * units, so 10,000 allocations of 64 bytes cost one block, one mapping per
 * peer and one UCX registration instead of 10,000; a request larger than
 * half a block, or aligned beyond a page, gets a block of its own,
 * released when it is freed. An emptied shared block is released unless it
 * is the only empty one. A released block's pages go at once; its address
 * space stays reserved (the last RETIRED_MAX of them), for a later block of
 * the same size and so that its addresses stay the pool's.
 *
 * Every allocation starts on a 64-byte boundary (more than malloc's
 * promise), or on its requested power-of-two alignment.
 */
#ifndef ZCOPY_POOL_H
#define ZCOPY_POOL_H

#include "base/base.h"

#define ZCOPY_POOL_UNIT 64u
#define ZCOPY_POOL_DEFAULT_BLOCK (4u << 20)

/* Bytes per shared block, rounded up to the memory's granularity; takes
 * effect for blocks created afterwards. */
ZCOPY_COMPONENT_API void zcopy_pool_set_block_size(size_t bytes);

/* @align: 0 or a power of two. *@p is NULL on failure (the cause in the
 * error detail); ZCOPY_ERR_BUSY when called back from inside zcopy (a
 * wait's progress run, an MPI call of zcopy's), where a new block could
 * deadlock: the caller serves such requests from ordinary memory. */
ZCOPY_COMPONENT_API zcopy_status_t zcopy_pool_alloc(size_t size, size_t align,
                                                    void **p);

/* True on a thread that is inside zcopy (a wait's progress run, an MPI
 * call of zcopy's) and called back: zcopy_pool_alloc answers BUSY there. */
ZCOPY_COMPONENT_API bool zcopy_pool_reentered(void);

/* ZCOPY_ERR_NOT_FOUND, with nothing changed, when @p is not the start of a
 * live allocation: freed already, inside one, or not from the pool. */
ZCOPY_COMPONENT_API zcopy_status_t zcopy_pool_free(void *p);

/* True when @p lies in a block of the pool or a retired reservation:
 * addresses nobody but the pool hands out. */
ZCOPY_COMPONENT_API bool zcopy_pool_contains(const void *p);

/* How many address ranges the pool has given back to the kernel so far:
 * when it moves, zcopy_pool_contains may have turned false somewhere. */
ZCOPY_COMPONENT_API uint64_t zcopy_pool_releases(void);

/* Releases every block without live allocations, and every retired
 * reservation (at component close). Blocks still in use stay, activated,
 * for the rest of the process. */
ZCOPY_COMPONENT_API void zcopy_pool_trim(void);

#endif
