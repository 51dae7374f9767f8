/*
 * zcopy's own buffers where an application's allocator puts them: in
 * activated memory.
 *
 * This program's posix_memalign, which every library of the process
 * reaches before the C library's (the executable's definition comes first),
 * serves requests of 64 KiB or more from an activated heap while the test
 * says so, as a caching allocator over activated memory would; free and
 * realloc know its pointers. On a communicator that spans servers (run
 * with two virtual servers of two ranks), large allreduce and
 * reduce_scatter_block need a landing area and registered scratch:
 *   - each call must run zero-copy (no fallback "no memory for landing or
 *     scratch": internal memory overlapping an activated block's UCX
 *     registration), with results checked element by element;
 *   - the heap must have served requests made from libzcopy itself (the
 *     caller's address lies in libzcopy.so), or the test proved nothing.
 * Not under AddressSanitizer, whose allocator these definitions replace.
 */
#define _GNU_SOURCE /* posix_memalign, declared to be defined here */
#include "testutil.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define HEAP_BYTES (64u << 20)
#define HEAP_MIN (64u << 10)      /* requests served from the heap */
#define COUNT (1u << 20)          /* ints per call: 4 MiB, the bandwidth path */

/* glibc's own entry points, which the definitions below stand in front of. */
void *__libc_memalign(size_t align, size_t size);
void *__libc_malloc(size_t size);
void *__libc_realloc(void *p, size_t size);
void __libc_free(void *p);

/* The heap: a bump allocator over one activated arena, never reused (a
 * test's worth of requests fits). Each allocation is preceded by its size,
 * for realloc. Touched from one thread at a time, but atomics keep a
 * progress thread of any library honest. */
static zt_arena_t heap;
static _Atomic size_t heap_used;
static atomic_bool serving;
static atomic_uint served, served_zcopy;

static bool in_heap(const void *p)
{
    const uint8_t *base = heap.base;

    return base != NULL && (const uint8_t *)p >= base &&
           (const uint8_t *)p < base + heap.size;
}

static void *heap_alloc(size_t size)
{
    const size_t need = 64 + ((size + 63) & ~(size_t)63);
    size_t at = atomic_fetch_add(&heap_used, need);
    uint8_t *p;

    if (at + need > heap.size)
        return NULL;
    p = (uint8_t *)heap.base + at;
    memcpy(p + 64 - sizeof(size), &size, sizeof(size));
    atomic_fetch_add(&served, 1);
    return p + 64;
}

/* Whether @code lies in libzcopy (dladdr allocates nothing). */
static bool from_zcopy(const void *code)
{
    Dl_info info;

    return dladdr(code, &info) != 0 && info.dli_fname != NULL &&
           strstr(info.dli_fname, "libzcopy") != NULL;
}

int posix_memalign(void **out, size_t align, size_t size)
{
    void *p = NULL;

    if (atomic_load(&serving) && size >= HEAP_MIN && align <= 64) {
        p = heap_alloc(size);
        if (p != NULL && from_zcopy(__builtin_return_address(0)))
            atomic_fetch_add(&served_zcopy, 1);
    }
    if (p == NULL)
        p = __libc_memalign(align, size);
    if (p == NULL)
        return ENOMEM;
    *out = p;
    return 0;
}

void free(void *p)
{
    if (!in_heap(p))
        __libc_free(p);
}

void *realloc(void *p, size_t size)
{
    size_t old;
    void *q;

    if (!in_heap(p))
        return __libc_realloc(p, size);
    memcpy(&old, (uint8_t *)p - sizeof(old), sizeof(old));
    q = __libc_malloc(size);
    if (q != NULL)
        memcpy(q, p, old < size ? old : size);
    return q;
}

static int value(int rank, size_t i)
{
    return (int)((size_t)rank * 7919u + i % 1000u);
}

static void check_call(const char *what, const MPIX_Zcopy_stats *before,
                       const MPIX_Zcopy_stats *after)
{
    ZT_CHECK(after->zcopy_calls == before->zcopy_calls + 1 &&
             after->fallback_calls == before->fallback_calls,
             "%s: zcopy +%llu fallback +%llu (last reason: %s)", what,
             (unsigned long long)(after->zcopy_calls - before->zcopy_calls),
             (unsigned long long)(after->fallback_calls -
                                  before->fallback_calls),
             after->last_fallback_reason);
}

int main(int argc, char **argv)
{
    MPIX_Zcopy_stats s0, s1;
    zt_arena_t app;
    size_t off = 0;
    int rank, n, *in, *out;
    long bad;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    zt_arena_init(&heap, MPI_COMM_WORLD, HEAP_BYTES);
    zt_arena_init(&app, MPI_COMM_WORLD, 2 * COUNT * sizeof(int));
    in = zt_arena_alloc(&app, &off, COUNT * sizeof(int));
    out = zt_arena_alloc(&app, &off, COUNT * sizeof(int));
    for (size_t i = 0; i < COUNT; i++)
        in[i] = value(rank, i);

    atomic_store(&serving, true);
    s0 = zt_stats(MPI_COMM_WORLD);
    ZT_CHECK(MPI_Allreduce(in, out, COUNT, MPI_INT, MPI_SUM,
                           MPI_COMM_WORLD) == MPI_SUCCESS, "allreduce");
    s1 = zt_stats(MPI_COMM_WORLD);
    check_call("allreduce", &s0, &s1);
    ZT_FIND_BAD(bad, out, (size_t)COUNT,
                (int)((size_t)n * (n - 1) / 2 * 7919u +
                      (size_t)n * (i % 1000u)));
    ZT_CHECK(bad < 0, "allreduce: out[%ld] = %d", bad, bad < 0 ? 0 : out[bad]);

    s0 = s1;
    ZT_CHECK(MPI_Reduce_scatter_block(in, out, COUNT / n, MPI_INT, MPI_SUM,
                                      MPI_COMM_WORLD) == MPI_SUCCESS,
             "reduce_scatter_block");
    s1 = zt_stats(MPI_COMM_WORLD);
    check_call("reduce_scatter_block", &s0, &s1);
    ZT_FIND_BAD(bad, out, (size_t)(COUNT / n),
                (int)((size_t)n * (n - 1) / 2 * 7919u +
                      (size_t)n * (((size_t)rank * (COUNT / n) + i) % 1000u)));
    ZT_CHECK(bad < 0, "reduce_scatter_block: out[%ld] = %d", bad,
             bad < 0 ? 0 : out[bad]);
    atomic_store(&serving, false);

    ZT_CHECK(atomic_load(&served_zcopy) > 0, "libzcopy asked the heap for "
             "nothing (%u requests from others): the test did not put its "
             "buffers in activated memory", atomic_load(&served));
    zt_arena_fini(&app);
    /* The heap's memory stays activated until MPI_Finalize: libraries may
     * still hold what it served. */
    return zt_finish();
}
