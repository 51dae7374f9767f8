/*
 * MPI_Alloc_mem and MPI_Free_mem with the mpool/zcopy component, as a
 * program that knows nothing of zcopy's API uses them.
 *
 *   test_alloc_mem hint      memory asked for with mpool_hints=zcopy
 *   test_alloc_mem default   MPI_INFO_NULL, job run with
 *                            --mca mpool_base_default_hints zcopy
 *   test_alloc_mem stock     MPI_INFO_NULL, no default hints: Open MPI's own
 *                            MPI_Alloc_mem, nothing activated
 *
 * Cases (hint and default):
 *   - a large allocation is activated, aligned, and an allreduce on it runs
 *     zero-copy with the right result;
 *   - freed and allocated again (most often at the same address), with new
 *     contents: peers see the new pages, never the old ones;
 *   - 10,000 allocations of 64 bytes: every one activated, distinct, not
 *     overlapping, each usable in a zero-copy allreduce, and together they
 *     add only a few mappings to the process;
 *   - a second MPI_Free_mem of the same pointer is an MPI error (class
 *     MPI_ERR_NO_MEM, Open MPI's answer to a bad base) and changes nothing,
 *     for a small allocation and for one with a block of its own;
 *   - threads (MPI_THREAD_MULTIPLE): two threads allocating and freeing at
 *     once never see a correct MPI_Free_mem refused;
 *   - zcopy's own calls cannot take pool memory apart: deactivating it or
 *     setting a range over it is MPI_ERR_ARG, and it stays activated;
 *   - churn: 20,000 allocations and frees of random sizes (8 B to 3 MiB,
 *     both kinds of block) in random order, each filled with its own
 *     pattern and checked before its free, so an overlap or a unit handed
 *     out twice shows; every one activated and 64-byte aligned.
 */
#include "testutil.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define BIG_COUNT (1u << 20) /* doubles: 8 MiB, a block of its own */
#define SMALL_COUNT 10000
#define SMALL_BYTES 64

static MPI_Info hints;
static int rank, size;

static bool activated(const void *p, size_t bytes)
{
    int on = 0;
    MPIX_Zcopy_query(MPI_COMM_WORLD, p, bytes, &on);
    return on != 0;
}

static void *alloc(size_t bytes)
{
    void *p = NULL;
    zt_require(MPI_Alloc_mem((MPI_Aint)bytes, hints, &p) == MPI_SUCCESS &&
                   p != NULL,
               "MPI_Alloc_mem");
    return p;
}

static long mappings(void)
{
    FILE *f = fopen("/proc/self/maps", "r");
    long n = 0;
    int c;

    if (f == NULL)
        return -1;
    while ((c = fgetc(f)) != EOF)
        n += c == '\n';
    fclose(f);
    return n;
}

/* An allreduce of @count doubles, rank r contributing seed + r + i; checks
 * the sum and whether the call ran zero-copy as @zcopy says. */
static void allreduce_check(double *buf, size_t count, double seed, bool zcopy,
                            const char *what)
{
    MPIX_Zcopy_stats before = zt_stats(MPI_COMM_WORLD), after;
    double rank_sum = (double)size * (size - 1) / 2;
    long bad;

    for (size_t i = 0; i < count; i++)
        buf[i] = seed + rank + (double)i;
    MPI_Allreduce(MPI_IN_PLACE, buf, (int)count, MPI_DOUBLE, MPI_SUM,
                  MPI_COMM_WORLD);
    after = zt_stats(MPI_COMM_WORLD);
    ZT_FIND_BAD(bad, buf, count, size * (seed + (double)i) + rank_sum);
    ZT_CHECK(bad < 0, "%s: element %ld is %g", what, bad,
             bad < 0 ? 0.0 : buf[bad]);
    ZT_CHECK(after.zcopy_calls - before.zcopy_calls == (zcopy ? 1u : 0u),
             "%s: expected the %s path (fallback reason \"%s\")", what,
             zcopy ? "zero-copy" : "fallback", after.last_fallback_reason);
}

static void test_big_and_again(void)
{
    size_t bytes = BIG_COUNT * sizeof(double);
    double *a = alloc(bytes);
    uintptr_t first = (uintptr_t)a;

    ZT_CHECK(activated(a, bytes), "8 MiB from MPI_Alloc_mem is activated");
    ZT_CHECK(first % 64 == 0, "allocation %p is 64-byte aligned", (void *)a);
    allreduce_check(a, BIG_COUNT, 1.0, true, "allreduce on 8 MiB");
    MPI_Free_mem(a);

    /* Allocated again, typically at the same address: new pages, which
     * peers must map afresh (the remap rules of deactivation). */
    a = alloc(bytes);
    if (rank == 0)
        printf("re-allocation %s the same address\n",
               (uintptr_t)a == first ? "at" : "not at");
    ZT_CHECK(activated(a, bytes), "re-allocated 8 MiB is activated");
    allreduce_check(a, BIG_COUNT, 1000.0, true, "allreduce after re-allocation");
    MPI_Free_mem(a);
}

static int cmp_ptr(const void *x, const void *y)
{
    uintptr_t a = *(const uintptr_t *)x, b = *(const uintptr_t *)y;
    return a < b ? -1 : a > b;
}

static void test_many_small(void)
{
    uintptr_t *p = malloc(SMALL_COUNT * sizeof(*p));
    long maps_before = mappings(), maps_after;
    size_t not_active = 0, overlaps = 0;

    zt_require(p != NULL, "malloc");
    for (size_t i = 0; i < SMALL_COUNT; i++) {
        p[i] = (uintptr_t)alloc(SMALL_BYTES);
        not_active += !activated((void *)p[i], SMALL_BYTES);
    }
    maps_after = mappings();
    ZT_CHECK(not_active == 0, "%zu of %d small allocations not activated",
             not_active, SMALL_COUNT);
    /* Each one zero-copy in a collective: 8 doubles, inline or mapped. */
    for (size_t i = 0; i < SMALL_COUNT; i += 997)
        allreduce_check((double *)p[i], SMALL_BYTES / sizeof(double),
                        (double)i, true, "allreduce on a 64-byte allocation");
    /* Shared blocks: a handful of mappings for all 10,000, not one each. */
    ZT_CHECK(maps_after - maps_before < 64,
             "10,000 allocations of 64 bytes added %ld mappings",
             maps_after - maps_before);
    qsort(p, SMALL_COUNT, sizeof(*p), cmp_ptr);
    for (size_t i = 1; i < SMALL_COUNT; i++)
        overlaps += p[i] < p[i - 1] + SMALL_BYTES;
    ZT_CHECK(overlaps == 0, "%zu small allocations overlap", overlaps);
    for (size_t i = 0; i < SMALL_COUNT; i++)
        ZT_CHECK(MPI_Free_mem((void *)p[i]) == MPI_SUCCESS, "MPI_Free_mem");
    free(p);
}

static void free_twice(void *p, const char *what)
{
    int rc, cls = MPI_SUCCESS;

    ZT_CHECK(MPI_Free_mem(p) == MPI_SUCCESS, "first MPI_Free_mem of %s", what);
    rc = MPI_Free_mem(p);
    MPI_Error_class(rc, &cls);
    ZT_CHECK(cls == MPI_ERR_NO_MEM, "second MPI_Free_mem of %s: class %d, "
             "want MPI_ERR_NO_MEM", what, cls);
}

static void test_double_free(void)
{
    double *keep = alloc(4096);

    free_twice(alloc(4096), "a small allocation");
    free_twice(alloc(BIG_COUNT * sizeof(double)), "a block of its own");
    /* Nothing changed: the neighbour is still live and zero-copy. */
    ZT_CHECK(activated(keep, 4096), "neighbour still activated");
    allreduce_check(keep, 512, 7.0, true, "allreduce after a bad free");
    ZT_CHECK(MPI_Free_mem(keep) == MPI_SUCCESS, "MPI_Free_mem");
}

static void test_api_cannot_take_apart(void)
{
    size_t bytes = BIG_COUNT * sizeof(double);
    double *a = alloc(bytes);
    int rc, cls = MPI_SUCCESS;

    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    rc = MPIX_Comm_deactivate_memory(MPI_COMM_WORLD, a);
    MPI_Error_class(rc, &cls);
    ZT_CHECK(cls == MPI_ERR_ARG, "deactivating MPI_Alloc_mem memory: class "
             "%d, want MPI_ERR_ARG", cls);
    rc = MPIX_Comm_set_memory_range(MPI_COMM_WORLD, a, bytes, 0, 0);
    MPI_Error_class(rc, &cls);
    ZT_CHECK(cls == MPI_ERR_ARG, "a range over MPI_Alloc_mem memory: class "
             "%d, want MPI_ERR_ARG", cls);
    ZT_CHECK(activated(a, bytes), "still activated after refused calls");
    allreduce_check(a, BIG_COUNT, 3.0, true, "allreduce after refused calls");
    MPI_Free_mem(a);
}

typedef struct {
    uint8_t *p;
    size_t bytes;
    uint8_t tag;
} live_t;

/* xorshift32: the same sequence on every machine. */
static unsigned next_random(unsigned *state)
{
    unsigned x = *state;

    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    return *state = x;
}

static bool pattern_holds(const live_t *l)
{
    for (size_t i = 0; i < l->bytes; i++)
        if (l->p[i] != (uint8_t)(l->tag + i))
            return false;
    return true;
}

static void test_churn(void)
{
    enum { OPS = 20000, LIVE = 256 };
    live_t live[LIVE] = { { 0 } };
    size_t bad_pattern = 0, bad_align = 0, not_active = 0;
    unsigned seed = 12345u + (unsigned)rank;

    for (int op = 0; op < OPS; op++) {
        live_t *l = &live[next_random(&seed) % LIVE];

        if (l->p != NULL) {
            bad_pattern += !pattern_holds(l);
            ZT_CHECK(MPI_Free_mem(l->p) == MPI_SUCCESS, "churn free");
            l->p = NULL;
            continue;
        }
        /* Mostly small, some near the shared/whole boundary, a few whole. */
        switch (next_random(&seed) % 64) {
        case 0:
            l->bytes = (2u << 20) + (size_t)(next_random(&seed) % (1u << 20));
            break;
        case 1:
        case 2:
            l->bytes = (1u << 20) + (size_t)(next_random(&seed) % (1u << 20));
            break;
        default:
            l->bytes = 8 + (size_t)(next_random(&seed) % 4096);
            break;
        }
        l->p = alloc(l->bytes);
        l->tag = (uint8_t)op;
        bad_align += (uintptr_t)l->p % 64 != 0;
        not_active += !activated(l->p, l->bytes);
        for (size_t i = 0; i < l->bytes; i++)
            l->p[i] = (uint8_t)(l->tag + i);
    }
    for (int k = 0; k < LIVE; k++)
        if (live[k].p != NULL) {
            bad_pattern += !pattern_holds(&live[k]);
            MPI_Free_mem(live[k].p);
        }
    ZT_CHECK(bad_pattern == 0, "churn: %zu allocations lost their pattern "
             "(overlap)", bad_pattern);
    ZT_CHECK(bad_align == 0, "churn: %zu allocations not 64-byte aligned",
             bad_align);
    ZT_CHECK(not_active == 0, "churn: %zu allocations not activated",
             not_active);
}

enum { THREAD_OPS = 100000 };

static void *churn_thread(void *arg)
{
    size_t *refused = arg;

    for (int i = 0; i < THREAD_OPS; i++) {
        void *p = alloc(SMALL_BYTES);
        *refused += MPI_Free_mem(p) != MPI_SUCCESS;
    }
    return NULL;
}

static void test_threads(int provided)
{
    size_t refused[2] = { 0, 0 };
    pthread_t t;

    if (provided < MPI_THREAD_MULTIPLE) {
        ZT_CHECK(true, "no MPI_THREAD_MULTIPLE: threads case skipped");
        return;
    }
    zt_require(pthread_create(&t, NULL, churn_thread, &refused[0]) == 0,
               "pthread_create");
    churn_thread(&refused[1]);
    pthread_join(t, NULL);
    ZT_CHECK(refused[0] + refused[1] == 0, "two threads: %zu correct "
             "MPI_Free_mem calls refused", refused[0] + refused[1]);
}

static void test_stock(void)
{
    double *a = alloc(BIG_COUNT * sizeof(double));

    ZT_CHECK(!activated(a, BIG_COUNT * sizeof(double)),
             "without hints MPI_Alloc_mem memory is not activated");
    allreduce_check(a, BIG_COUNT, 1.0, false, "allreduce on stock memory");
    ZT_CHECK(MPI_Free_mem(a) == MPI_SUCCESS, "MPI_Free_mem");
}

int main(int argc, char **argv)
{
    int provided = MPI_THREAD_SINGLE;

    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc != 2 || (strcmp(argv[1], "hint") && strcmp(argv[1], "default") &&
                      strcmp(argv[1], "stock"))) {
        if (rank == 0)
            fprintf(stderr, "usage: %s hint|default|stock\n", argv[0]);
        MPI_Finalize();
        return 2;
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    hints = MPI_INFO_NULL;
    if (!strcmp(argv[1], "hint")) {
        MPI_Info_create(&hints);
        MPI_Info_set(hints, "mpool_hints", "zcopy");
    }
    if (!strcmp(argv[1], "stock")) {
        test_stock();
    } else {
        test_big_and_again();
        test_many_small();
        test_double_free();
        test_api_cannot_take_apart();
        test_churn();
        test_threads(provided);
    }
    if (hints != MPI_INFO_NULL)
        MPI_Info_free(&hints);
    return zt_finish();
}
