/*
 * Random bad and good input to the memory layer and the registry, no MPI
 * (issue 7, 5). Built from zcopy's core sources like tests/unit.
 *
 *   fuzz_registry [SEED [STEPS]]     SEED "random": from the clock
 *
 * Each step is one call drawn and judged by the model (fuzz_model.h).
 * After every step zcopy must agree with the model:
 *   - zcopy_registry_counts: the set ranges and activated blocks;
 *   - zcopy_registry_snapshot: every block's address, size, range, offset
 *     0, pages (inode of the fd it names), and generations that grow with
 *     activation order;
 * every 8 steps, coverage at every block's edges and at random, through
 * zcopy_registry_covers and through a zcopy_registry_covers_cached cache
 * kept across all steps (it must notice every change); every 64 steps,
 * /proc/self/maps (PROT_NONE wherever a reservation maps nothing, each
 * mapping its handle's pages at its offset, no zcopy memory mapped
 * anywhere else) and the number of open fds (one per live handle and per
 * exported fd held). Every 5,000 steps everything is torn down through
 * the API, which must succeed call by call and leave nothing.
 */
#include "fuzz_model.h"

#include "registry/registry.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define TEARDOWN_EVERY 5000

static unsigned long long seed;
static zcopy_covers_cache_t cache;

static fz_codes_t reg_set_range(void *ctx, void *base, size_t size,
                                size_t alignment, uint64_t flags)
{
    (void)ctx;
    (void)alignment;
    (void)flags;
    return fz_code(zcopy_registry_set_range((uintptr_t)base, size, ZCOPY_OWNER_APP));
}

static fz_codes_t reg_unset_range(void *ctx, void *base)
{
    (void)ctx;
    return fz_code(zcopy_registry_unset_range((uintptr_t)base, ZCOPY_OWNER_APP));
}

static fz_codes_t reg_activate(void *ctx, void *va, size_t size,
                               size_t offset, zcopy_mem_handle_t h,
                               uint64_t flags)
{
    (void)ctx;
    (void)offset;
    (void)flags;
    return fz_code(zcopy_registry_activate((uintptr_t)va, size, h, ZCOPY_OWNER_APP));
}

static fz_codes_t reg_deactivate(void *ctx, void *va)
{
    (void)ctx;
    return fz_code(zcopy_registry_deactivate((uintptr_t)va, ZCOPY_OWNER_APP));
}

/* Both ways of asking; they must agree before the model is asked. */
static bool reg_covers(void *ctx, const void *buf, size_t len)
{
    bool plain = zcopy_registry_covers(buf, len);
    bool cached = zcopy_registry_covers_cached(buf, len, &cache);

    if (plain != cached) {
        fprintf(stderr, "fuzz: covers(%p, %zu): %d, but %d through the "
                "cache\n", buf, len, plain, cached);
        ((fz_model_t *)ctx)->be.abort(ctx);
    }
    return plain;
}

static void reg_abort(void *ctx)
{
    (void)ctx;
    fprintf(stderr, "fuzz: FAILED with seed %llu (rerun: fuzz_registry %llu "
            "STEPS)\n", seed, seed);
    exit(1);
}

static int count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    int n = 0;

    while (d && (e = readdir(d)) != NULL)
        n += e->d_name[0] != '.';
    if (d)
        closedir(d);
    return n;
}

static int by_va(const void *a, const void *b)
{
    uintptr_t x = ((const fz_block_t *)a)->va, y = ((const fz_block_t *)b)->va;
    return (x > y) - (x < y);
}

static void check_registry(fz_model_t *m)
{
    static zcopy_block_t got[FZ_MAX_BLOCKS + 1];
    fz_block_t want[FZ_MAX_BLOCKS];
    size_t nranges, nblocks, n;
    uint64_t epoch;

    zcopy_registry_counts(&nranges, &nblocks);
    if (nranges != (size_t)m->nranges || nblocks != (size_t)m->nblocks)
        fz_fail(m, "after it: %zu ranges and %zu blocks, the model has %d "
                "and %d", nranges, nblocks, m->nranges, m->nblocks);
    n = zcopy_registry_snapshot(got, FZ_MAX_BLOCKS + 1, &epoch);
    if (n != nblocks)
        fz_fail(m, "snapshot of %zu blocks, counts say %zu", n, nblocks);
    memcpy(want, m->blocks, sizeof(*want) * (size_t)m->nblocks);
    qsort(want, (size_t)m->nblocks, sizeof(*want), by_va);
    for (size_t i = 0; i < n; i++) {
        const fz_block_t *w = &want[i];
        const zcopy_block_t *g = &got[i];
        uint64_t ino = 0;
        struct stat st;

        for (int k = 0; k < m->nhandles; k++)
            if (m->handles[k].h == w->h)
                ino = m->handles[k].ino;
        if (g->va != w->va || g->size != w->size ||
            g->range_base != w->range_base || g->range_size != w->range_size ||
            g->map.offset != 0 || (uint64_t)g->map.ino != ino ||
            fstat(g->map.fd, &st) != 0 || (uint64_t)st.st_ino != ino)
            fz_fail(m, "after it, block %zu is [%#lx, +%zu) in range [%#lx, "
                    "+%zu), offset %zu, inode %llu (fd %d); the model has "
                    "[%#lx, +%zu) in [%#lx, +%zu), offset 0, inode %llu", i,
                    (unsigned long)g->va, g->size,
                    (unsigned long)g->range_base, g->range_size,
                    g->map.offset, (unsigned long long)g->map.ino, g->map.fd,
                    (unsigned long)w->va, w->size,
                    (unsigned long)w->range_base, w->range_size,
                    (unsigned long long)ino);
        /* Generations grow with activation order (found by the model's
         * order): a later activation never reuses an earlier number. */
        for (size_t j = 0; j < n; j++)
            if (want[j].order < w->order &&
                got[j].generation >= g->generation)
                fz_fail(m, "block %#lx, activated after %#lx, has generation "
                        "%llu, not above %llu", (unsigned long)w->va,
                        (unsigned long)want[j].va,
                        (unsigned long long)g->generation,
                        (unsigned long long)got[j].generation);
    }
}

static void check_fds(fz_model_t *m, int base)
{
    int fds = count_fds();

    if (fds != base + m->nhandles + m->nexports)
        fz_fail(m, "%d fds open, expected %d (%d at start, %d handles, %d "
                "exported fds held)", fds, base + m->nhandles + m->nexports,
                base, m->nhandles, m->nexports);
}

int main(int argc, char **argv)
{
    static fz_model_t model;
    fz_model_t *m = &model;
    fz_backend_t be = { .set_range = reg_set_range,
                        .unset_range = reg_unset_range,
                        .activate = reg_activate,
                        .deactivate = reg_deactivate, .covers = reg_covers,
                        .abort = reg_abort, .ctx = m, .mpix = false,
                        .local_ranges = true, .strict_maps = true };
    unsigned long steps = argc > 2 ? strtoul(argv[2], NULL, 10) : 200000;
    int fd_base;

    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc > 1 && strcmp(argv[1], "random") == 0)
        seed = (unsigned long long)time(NULL);
    else
        seed = argc > 1 ? strtoull(argv[1], NULL, 10) : 1;
    printf("fuzz_registry: seed %llu, %lu steps\n", seed, steps);

    fz_init(m, &be, seed);
    fd_base = count_fds();
    while (m->step < steps) {
        fz_step(m);
        check_registry(m);
        if (m->step % 8 == 0)
            fz_check_covers(m, 2);
        if (m->step % 64 == 0) {
            fz_check_maps(m);
            check_fds(m, fd_base);
        }
        if (m->step % TEARDOWN_EVERY == 0) {
            fz_teardown(m);
            check_registry(m);
            fz_check_maps(m);
            check_fds(m, fd_base);
        }
    }
    fz_check_covers(m, 16);
    fz_check_maps(m);
    fz_teardown(m);
    check_registry(m);
    check_fds(m, fd_base);
    fz_fini(m);
    fz_print_stats(m, "fuzz_registry");
    printf("fuzz_registry: seed %llu: every call as the rules say, every "
           "check passed\n", seed);
    return 0;
}
