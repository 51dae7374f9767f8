/*
 * How the algorithms of both paths move data: bulk copies, and the steps
 * and slices in which ranks share a reduction or a copy.
 */
#ifndef ZCOPY_COLL_DATA_H
#define ZCOPY_COLL_DATA_H

#include "base/base.h"

#include <stddef.h>

/* memcpy, or streaming stores from a length the caches decide (copy.c). */
void zcopy_copy(void *dst, const void *src, size_t len);

/* The copies of one in-server collective call. Where the caches leave a
 * range of lengths undecided, the call's first copy in it picks memcpy or
 * streaming stores for all of the call's copies in that range, and the
 * call's time from there to its end measures the choice (copy.c). Ready
 * once @kind is set. */
typedef struct {
    unsigned kind;                /* the collective (zcopy_coll_type_t):
                                     each one's calls are measured apart */
    bool measured;                /* a copy in the measured range was made */
    unsigned way, cls;            /* the way taken, the first such length's
                                     class */
    uint64_t start_ns;
    size_t bytes;                 /* copied in the measured range */
} zcopy_copy_call_t;

/* zcopy_copy, in a call. */
void zcopy_copy_in_call(zcopy_copy_call_t *call, void *dst, const void *src,
                        size_t len);

/* The call has ended (its last sync passed): what its way cost. */
void zcopy_copy_call_end(zcopy_copy_call_t *call);

/* Reductions work this many bytes per step: the inputs of a step stay in
 * cache while the result is copied out to the peers. A constant, not a
 * share of a cache hwloc names: of 8, 32 and 128 KiB (np 2, allreduce,
 * reduce and reduce_scatter_block of 64 KiB to 64 MiB, 5 interleaved runs
 * each, AMD EPYC VM with 1 MiB of L2 per core, 2026-12-03), 128 KiB took
 * 1.2-1.8x longer from 16 MiB on, and 8 KiB was neither faster nor slower
 * beyond the runs' spread; one machine gives no rule to scale by. */
#define ZCOPY_REDUCE_CHUNK (32u << 10)

/* Elements per step: at least one, however large the datatype. */
static inline size_t zcopy_chunk_elems(size_t elem)
{
    return elem >= ZCOPY_REDUCE_CHUNK ? 1 : ZCOPY_REDUCE_CHUNK / elem;
}

/* Elements [*lo, *hi) of @count that part @r of @n covers: parts start on
 * cache-line boundaries, so that ranks writing neighbouring parts never
 * share a line. */
static inline void zcopy_slice(size_t count, size_t elem, int r, int n,
                               size_t *lo, size_t *hi)
{
    size_t a = ZCOPY_CACHE_LINE, b = elem, unit, units;

    while (b) { /* gcd: a slice unit is a whole number of lines */
        size_t t = a % b;
        a = b;
        b = t;
    }
    unit = ZCOPY_CACHE_LINE / a;
    units = (count + unit - 1) / unit;
    *lo = units * (size_t)r / (size_t)n * unit;
    *hi = units * (size_t)(r + 1) / (size_t)n * unit;
    *lo = *lo < count ? *lo : count;
    *hi = *hi < count ? *hi : count;
}

#endif
