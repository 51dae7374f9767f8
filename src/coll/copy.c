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
 * - between the two, in the calls of the in-server path: whichever of the
 *   two makes this process's calls faster, per power-of-two class of
 *   length (base/pick.h), streaming stores by a margin (x86-64 only;
 *   elsewhere memcpy). What is timed is the call from its first such copy
 *   to its end, not the copy: a memcpy leaves the destination's dirty
 *   lines to be written back later, and a root's pushes to be pulled from
 *   its cache by the peer, which timing the copy alone misses (bcast of 16
 *   MiB on the Intel VM: memcpy measured 1.6x cheaper per copy, and made
 *   the call 1.3x slower).
 * Other copies (the spanning path's) take the first two rules, memcpy in
 * between. coll_zcopy_streaming_min, when set, replaces all of this with
 * one threshold.
 */
#include "data.h"
#include "coll.h"
#include "base/pick.h"
#include "topo/topo.h"

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
/* Streaming stores must measure this much faster to be taken: memcpy
 * leaves the destination in cache for its next touch, which comes after
 * the call and its timing. */
#define COPY_STREAMING_MARGIN 0.10

enum { COPY_MEMCPY, COPY_STREAMING, COPY_NONE };

/* The measurements are the process's, shared by every communicator and
 * thread: one memory system, and each collective's calls of one length
 * class copy alike, whichever communicator they run on. The lock guards
 * the bookkeeping, twice per call that copies a MiB or more. */
static struct {
    pthread_mutex_t lock;
    pthread_once_t once;
    zcopy_pick_t picks[ZCOPY_COLL_COUNT][COPY_CLASSES];
    unsigned logged[ZCOPY_COLL_COUNT][COPY_CLASSES]; /* 1 + the way last
                                                        logged, 0: none */
} copy_measured = { .lock = PTHREAD_MUTEX_INITIALIZER,
                    .once = PTHREAD_ONCE_INIT };

static void copy_measured_init(void)
{
    for (unsigned k = 0; k < ZCOPY_COLL_COUNT; k++)
        for (unsigned c = 0; c < COPY_CLASSES; c++)
            zcopy_pick_init(&copy_measured.picks[k][c],
                            COPY_STREAMING_MARGIN);
}

/* The way of the process's last measured call: the dirty lines a memcpy
 * leaves are written back during the calls after it, whatever their
 * collective, so a call's sample counts only after a call of its way. */
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
static void copy_log_choice(const zcopy_copy_call_t *call,
                            const zcopy_pick_t *p)
{
    unsigned *logged = &copy_measured.logged[call->kind][call->cls];
    double cost[2];
    unsigned best;

    if (!zcopy_pick_settled(p))
        return;
    best = zcopy_pick_best(p, cost);
    if (*logged == best + 1)
        return;
    *logged = best + 1;
    zcopy_log(ZCOPY_LOG_INFO, "coll", "%s copies of %zu MiB%s: %s, measured "
              "(%.1f ns per KiB copied, against %.1f)",
              zcopy_coll_names[call->kind],
              COPY_MEASURED_MIN << call->cls >> 20,
              call->cls == COPY_CLASSES - 1 ? " and more" : " to twice that",
              best == COPY_STREAMING ? "streaming stores" : "memcpy",
              cost[best] * 1024, cost[!best] * 1024);
}

/* The call's first copy in the measured range: its way for the call. */
static void copy_call_begin(zcopy_copy_call_t *call, size_t len)
{
    pthread_once(&copy_measured.once, copy_measured_init);
    call->cls = copy_class(len);
    pthread_mutex_lock(&copy_measured.lock);
    call->way =
        zcopy_pick_choose(&copy_measured.picks[call->kind][call->cls]);
    pthread_mutex_unlock(&copy_measured.lock);
    call->measured = true;
    call->start_ns = zcopy_now_ns();
}
#endif

/* Whether @len is in the range left to measurement. */
static bool copy_is_measured(size_t len)
{
#if defined(__x86_64__)
    return zcopy_config.streaming_min == 0 && len >= COPY_MEASURED_MIN &&
           len < copy_streaming_min();
#else
    (void)len;
    return false;
#endif
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

void zcopy_copy_in_call(zcopy_copy_call_t *call, void *dst, const void *src,
                        size_t len)
{
    if (!copy_is_measured(len)) {
        zcopy_copy(dst, src, len);
        return;
    }
#if defined(__x86_64__)
    if (!call->measured)
        copy_call_begin(call, len);
    call->bytes += len;
    if (call->way == COPY_STREAMING)
        copy_streaming(dst, src, len);
    else
        memcpy(dst, src, len);
#endif
}

void zcopy_copy_call_end(zcopy_copy_call_t *call)
{
#if defined(__x86_64__)
    zcopy_pick_t *p;
    uint64_t ns;
    bool follows;

    if (!call->measured)
        return;
    p = &copy_measured.picks[call->kind][call->cls];
    ns = zcopy_now_ns() - call->start_ns;
    follows = atomic_exchange_explicit(&copy_last, call->way,
                                       memory_order_relaxed) == call->way;
    pthread_mutex_lock(&copy_measured.lock);
    zcopy_pick_record(p, call->way, follows, ns, call->bytes);
    copy_log_choice(call, p);
    pthread_mutex_unlock(&copy_measured.lock);
#else
    (void)call;
#endif
}
