/*
 * Bulk copies for the data-movement algorithms. Once a destination will not
 * stay in cache anyway, ordinary stores first read every destination line
 * they write (a third memory stream); streaming stores skip that read. How
 * long such a copy is depends on the caches: the threshold comes from the
 * topology layer (zcopy_topo_streaming_min), once per process.
 */
#include "data.h"
#include "topo/topo.h"

#include <stdatomic.h>
#include <string.h>

#if defined(__x86_64__)
#include <emmintrin.h>

static void copy_streaming(uint8_t *dst, const uint8_t *src, size_t len)
{
    size_t head = (16 - ((uintptr_t)dst & 15)) & 15, i;

    memcpy(dst, src, head);
    for (i = head; i + 64 <= len; i += 64) {
        __m128i a = _mm_loadu_si128((const __m128i *)(src + i));
        __m128i b = _mm_loadu_si128((const __m128i *)(src + i + 16));
        __m128i c = _mm_loadu_si128((const __m128i *)(src + i + 32));
        __m128i d = _mm_loadu_si128((const __m128i *)(src + i + 48));
        _mm_stream_si128((__m128i *)(dst + i), a);
        _mm_stream_si128((__m128i *)(dst + i + 16), b);
        _mm_stream_si128((__m128i *)(dst + i + 32), c);
        _mm_stream_si128((__m128i *)(dst + i + 48), d);
    }
    memcpy(dst + i, src + i, len - i);
    /* Streaming stores are weakly ordered: make them visible before the
     * release store of the sync that tells peers the data is there. */
    _mm_sfence();
}
#endif

/* Computed on the first copy: one machine, and the parameter is set before
 * any collective runs. Racing first copies compute the same value. */
static _Atomic size_t streaming_min;

static size_t copy_streaming_min(void)
{
    size_t min = atomic_load_explicit(&streaming_min, memory_order_relaxed);

    if (min == 0) {
        min = zcopy_topo_streaming_min(NULL);
        atomic_store_explicit(&streaming_min, min, memory_order_relaxed);
    }
    return min;
}

void zcopy_copy(void *dst, const void *src, size_t len)
{
#if defined(__x86_64__)
    if (len >= copy_streaming_min()) {
        copy_streaming(dst, src, len);
        return;
    }
#endif
    memcpy(dst, src, len);
}
