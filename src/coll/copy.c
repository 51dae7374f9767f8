/*
 * Bulk copies for the data-movement algorithms. Once a destination will not
 * stay in cache anyway, ordinary stores first read every destination line
 * they write (a third memory stream); streaming stores skip that read.
 *
 * From which length that pays depends on the caches, and on what else
 * shares them, which the topology does not always tell: a virtual machine
 * shows its few CPUs the whole socket's last-level cache (300 MiB for two
 * vCPUs on an Intel Xeon VM), as if all of it were theirs. So:
 * - from half the last-level cache's share per core (the topology layer,
 *   zcopy_topo_streaming_min), where even an honest cache could not keep
 *   the destination: streaming stores;
 * - below ZCOPY_TOPO_COPY_MEASURED_MIN (1 MiB): memcpy, since the
 *   destination fits the private cache of any recent server core;
 * - between the two: whichever of the two measures faster on this
 *   process's own copies, per power-of-two class of length (base/pick.h),
 *   streaming stores by a margin (x86-64 only; elsewhere memcpy).
 * coll_zcopy_streaming_min, when set, replaces all three with one
 * threshold.
 */
#include "data.h"
#include "base/pick.h"
#include "topo/topo.h"

#include <assert.h>
#include <pthread.h>
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

#define COPY_MEASURED_MIN ZCOPY_TOPO_COPY_MEASURED_MIN
#define COPY_CLASSES 8            /* 1-2 MiB ... 64-128 MiB, and beyond */
/* Streaming stores must measure this much cheaper to be taken: memcpy
 * leaves the destination in cache for its next touch, which the timing of
 * the copy does not see. */
#define COPY_STREAMING_MARGIN 0.10

enum { COPY_MEMCPY, COPY_STREAMING, COPY_NONE };

#define COPY_PICK { .margin = COPY_STREAMING_MARGIN }

/* The measurements are the process's, shared by every communicator and
 * thread: one memory system, so a copy of a given length costs the same
 * whichever collective makes it. The lock only guards the bookkeeping
 * around copies of a MiB and more. */
static struct {
    pthread_mutex_t lock;
    zcopy_pick_t picks[COPY_CLASSES];
    unsigned logged[COPY_CLASSES]; /* 1 + the way last logged, 0: none */
} copy_measured = {
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .picks = { COPY_PICK, COPY_PICK, COPY_PICK, COPY_PICK,
               COPY_PICK, COPY_PICK, COPY_PICK, COPY_PICK },
};
static_assert(COPY_CLASSES == 8, "one COPY_PICK per class");

/* The way of the process's last copy of a MiB or more, of any length:
 * the dirty lines a memcpy leaves are written back during the copies
 * after it, so a sample counts only after a copy of its own way. */
static _Atomic unsigned copy_last = COPY_NONE;

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

static unsigned copy_class(size_t len)
{
    unsigned c = 0;

    for (len /= COPY_MEASURED_MIN; len > 1 && c < COPY_CLASSES - 1; len >>= 1)
        c++;
    return c;
}

/* Says which way a class settled on, once, and whenever that changes. */
static void copy_log_choice(unsigned c, const zcopy_pick_t *p)
{
    double cost[2];
    unsigned best;

    if (!zcopy_pick_settled(p))
        return;
    best = zcopy_pick_best(p, cost);
    if (copy_measured.logged[c] == best + 1)
        return;
    copy_measured.logged[c] = best + 1;
    zcopy_log(ZCOPY_LOG_INFO, "coll", "copies of %zu MiB%s: %s, measured "
              "(%.1f ns per KiB against %.1f)", COPY_MEASURED_MIN << c >> 20,
              c == COPY_CLASSES - 1 ? " and more" : " to twice that",
              best == COPY_STREAMING ? "streaming stores" : "memcpy",
              cost[best] * 1024, cost[!best] * 1024);
}

static void copy_measured_run(uint8_t *dst, const uint8_t *src, size_t len)
{
    const unsigned c = copy_class(len);
    zcopy_pick_t *p = &copy_measured.picks[c];
    uint64_t t0;
    unsigned way;

    bool follows;

    pthread_mutex_lock(&copy_measured.lock);
    way = zcopy_pick_choose(p);
    pthread_mutex_unlock(&copy_measured.lock);
    follows = atomic_exchange_explicit(&copy_last, way,
                                       memory_order_relaxed) == way;
    t0 = zcopy_now_ns();
    if (way == COPY_STREAMING)
        copy_streaming(dst, src, len);
    else
        memcpy(dst, src, len);
    pthread_mutex_lock(&copy_measured.lock);
    zcopy_pick_record(p, way, follows, zcopy_now_ns() - t0, len);
    copy_log_choice(c, p);
    pthread_mutex_unlock(&copy_measured.lock);
}
#endif

void zcopy_copy(void *dst, const void *src, size_t len)
{
#if defined(__x86_64__)
    if (len >= copy_streaming_min()) {
        atomic_store_explicit(&copy_last, COPY_STREAMING,
                              memory_order_relaxed);
        copy_streaming(dst, src, len);
        return;
    }
    if (len >= COPY_MEASURED_MIN && zcopy_config.streaming_min == 0) {
        copy_measured_run(dst, src, len);
        return;
    }
#endif
    memcpy(dst, src, len);
}
