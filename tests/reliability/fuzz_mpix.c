/*
 * Random bad and good input to the MPIX calls and the memory layer, mixed
 * with collectives, on every rank of a job with the component (issue 7, 5).
 *
 *   fuzz_mpix [SEED [STEPS]]
 *
 * Every rank keeps its own model (fuzz_model.h) and draws its own calls;
 * a stream shared by all ranks (the same seed) decides when they meet:
 *   - most steps are local: one call per rank, judged by its model. MPIX
 *     calls answer MPI error classes, which must be standard ones and
 *     match a rule the call broke; MPI_Error_string names the call;
 *   - some are MPIX_Comm_set_memory_range, collective: each rank its own
 *     arguments, valid or not; all succeed or all fail (a rank whose own
 *     arguments were fine reports another rank's rejection);
 *   - some are collectives (allreduce, allgather, bcast; sizes shared)
 *     on buffers each rank places where it likes: in an activated block,
 *     in mapped memory that is not activated, or on the heap. Results must
 *     be right, and the stats must show zero-copy exactly when every
 *     rank's buffers are activated in its model, a fallback otherwise.
 * Every 10 steps coverage (MPIX_Zcopy_query) is checked at every block's
 * edges and at random, every 50 /proc/self/maps. Peers' blocks come and go
 * under the collectives: remapped at the same address, freed, their ranges
 * unset and set again, so stale imports would show as wrong data.
 * At the end everything is torn down and, after one more collective, no
 * zcopy memory of anyone stays mapped.
 */
#include "fuzz_model.h"
#include "relutil.h"

#include <mpix_zcopy.h>
#include <stdlib.h>
#include <string.h>

#define COLLECTIVE_PERCENT 15
#define SET_RANGE_PERCENT 6
#define MAX_COUNT 6000               /* ints per rank in a collective */

static int rank, nranks;
static MPI_Comm quiet;               /* agreement and checks: zcopy off */
static unsigned long long seed;
static int *heap;                    /* ordinary memory for buffers */
static size_t heap_ints;
static unsigned long collectives, zero_copy, fallbacks, set_ranges;

/* --- the MPIX backend ---------------------------------------------------- */

/* Every ZCOPY_ERR_* an MPI error class can stand for (api/errors.c maps
 * them per SPEC section 3), and a check of the message. */
static fz_codes_t mpi_outcome(fz_model_t *m, int rc, const char *call)
{
    char msg[MPI_MAX_ERROR_STRING] = "";
    int cls = -1, len = 0;

    if (rc == MPI_SUCCESS)
        return FZ_OK;
    MPI_Error_class(rc, &cls);
    MPI_Error_string(rc, msg, &len);
    if (strncmp(msg, call, strlen(call)) != 0)
        fz_fail(m, "error string \"%s\" does not name %s", msg, call);
    switch (cls) {
    case MPI_ERR_ARG:
        return FZ_CODE(ZCOPY_ERR_ARG) | FZ_CODE(ZCOPY_ERR_RANGE) |
               FZ_CODE(ZCOPY_ERR_OVERLAP) | FZ_CODE(ZCOPY_ERR_NOT_FOUND) |
               FZ_CODE(ZCOPY_ERR_BUSY);
    case MPI_ERR_NO_MEM:
        return FZ_CODE(ZCOPY_ERR_NOMEM);
    case MPI_ERR_UNSUPPORTED_OPERATION:
        return FZ_CODE(ZCOPY_ERR_UNSUPPORTED);
    case MPI_ERR_OTHER:
        return FZ_CODE(ZCOPY_ERR_SYSTEM) | FZ_CODE(ZCOPY_ERR_INTERNAL);
    default:
        fz_fail(m, "error class %d (\"%s\") is none of SPEC section 3's", cls,
                msg);
    }
}

static fz_codes_t mpix_unset(void *ctx, void *base)
{
    return mpi_outcome(ctx, MPIX_Comm_unset_memory_range(MPI_COMM_WORLD, base),
                       "MPIX_Comm_unset_memory_range");
}

static fz_codes_t mpix_activate(void *ctx, void *va, size_t size,
                                size_t offset, zcopy_mem_handle_t h,
                                uint64_t flags)
{
    return mpi_outcome(ctx, MPIX_Comm_activate_memory(MPI_COMM_WORLD, va, size,
                                                      offset, h, flags),
                       "MPIX_Comm_activate_memory");
}

static fz_codes_t mpix_deactivate(void *ctx, void *va)
{
    return mpi_outcome(ctx, MPIX_Comm_deactivate_memory(MPI_COMM_WORLD, va),
                       "MPIX_Comm_deactivate_memory");
}

static bool mpix_covers(void *ctx, const void *buf, size_t len)
{
    int activated = -1;

    if (MPIX_Zcopy_query(MPI_COMM_WORLD, buf, len, &activated) != MPI_SUCCESS)
        fz_fail(ctx, "MPIX_Zcopy_query failed");
    return activated == 1;
}

static void mpix_abort(void *ctx)
{
    (void)ctx;
    fprintf(stderr, "fuzz: rank %d FAILED with seed %llu\n", rank, seed);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
}

/* --- the collective steps ------------------------------------------------ */

static void set_range_step(fz_model_t *m)
{
    size_t size, alignment;
    uint64_t flags;
    fz_codes_t mine, expect;
    int ok, all_ok;
    void *base;

    fz_gen_set_range(m, &base, &size, &alignment, &flags);
    mine = fz_expect_set_range(m, (uintptr_t)base, size, alignment, flags);
    if (mine == 0) { /* the model is full: take part with bad flags */
        flags = 1;
        mine = fz_expect_set_range(m, (uintptr_t)base, size, alignment, flags);
    }
    ok = mine == FZ_OK;
    MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, quiet);
    /* Own failure: its own cause. Own success, another's failure: that
     * rank's rejection, an argument error. */
    expect = !ok ? mine : all_ok ? FZ_OK : FZ_CODE(ZCOPY_ERR_ARG);
    snprintf(m->desc, sizeof(m->desc), "MPIX_Comm_set_memory_range(%p, %zu, "
             "alignment %zu, flags %llu), every rank's own fine: %d", base,
             size, alignment, (unsigned long long)flags, all_ok);
    if (fz_verify(m, expect,
                  mpi_outcome(m, MPIX_Comm_set_memory_range(MPI_COMM_WORLD,
                                                            base, size,
                                                            alignment, flags),
                              "MPIX_Comm_set_memory_range")))
        fz_apply_set_range(m, (uintptr_t)base, size);
    set_ranges++;
}

/* Whether mapping @i's pages are mapped nowhere else here (an imported
 * handle shares the pages of the one exported): buffers there cannot
 * alias other buffers. */
static bool pages_unique(const fz_model_t *m, int i)
{
    uint64_t ino = 0;
    int n = 0;

    for (int k = 0; k < m->nhandles; k++)
        if (m->handles[k].h == m->maps[i].h)
            ino = m->handles[k].ino;
    for (int j = 0; j < m->nmaps; j++)
        for (int k = 0; k < m->nhandles; k++)
            n += m->handles[k].h == m->maps[j].h && m->handles[k].ino == ino;
    return n == 1;
}

/* A place for @n ints: in a block, in any mapping, or on the heap (in
 * @half of it), never overlapping [@avoid, +@avoid_len). */
static int *place(fz_model_t *m, size_t n, int half, const int *avoid,
                  size_t avoid_len)
{
    size_t bytes = n * sizeof(int);
    unsigned r = fz_below(m, 100);

    for (int tries = 0; tries < 8 && m->nmaps; tries++) {
        int i;
        uintptr_t lo, hi, at;

        if (r < 70 && m->nblocks) {
            int b = fz_below(m, (unsigned)m->nblocks);
            lo = m->blocks[b].va;
            hi = lo + m->blocks[b].size;
            for (i = 0; i < m->nmaps && m->maps[i].va != lo; i++)
                ;
        } else {
            i = fz_below(m, (unsigned)m->nmaps);
            lo = m->maps[i].va;
            hi = lo + m->maps[i].size;
        }
        if (i == m->nmaps || !pages_unique(m, i) || hi - lo < bytes)
            continue;
        at = lo + (fz_below(m, (unsigned)((hi - lo - bytes) / 4 + 1))) * 4;
        if (avoid && at < (uintptr_t)(avoid + avoid_len) &&
            (uintptr_t)avoid < at + bytes)
            continue;
        return (int *)at;
    }
    return heap + (size_t)half * (heap_ints / 2);
}

static int val(unsigned long step, int r, size_t i)
{
    return (int)((step * 2654435761u + (unsigned)r * 40503u + i * 7u) % 1000003u);
}

static void collective_step(fz_model_t *m, unsigned kind, size_t count,
                            int root)
{
    const size_t n = (size_t)nranks;
    size_t rlen = kind == 1 ? n * count : count;
    int *recv = place(m, rlen, 0, NULL, 0);
    int *send = kind == 2 ? recv : place(m, count, 1, recv, rlen);
    int eligible, all_eligible, rc = MPI_ERR_OTHER;
    MPIX_Zcopy_stats s0, s1;
    long bad = -1;

    /* Coverage by the model: the rules, not zcopy's own answer. */
    eligible = fz_covers(m, (uintptr_t)send, count * sizeof(int)) &&
               fz_covers(m, (uintptr_t)recv, rlen * sizeof(int));
    MPI_Allreduce(&eligible, &all_eligible, 1, MPI_INT, MPI_MIN, quiet);
    for (size_t i = 0; i < count; i++)
        send[i] = kind == 2 && rank != root ? -1 : val(m->step, rank, i);
    MPIX_Zcopy_get_stats(MPI_COMM_WORLD, &s0);
    switch (kind) {
    case 0:
        snprintf(m->desc, sizeof(m->desc), "MPI_Allreduce(%p, %p, %zu ints)",
                 (void *)send, (void *)recv, count);
        rc = MPI_Allreduce(send, recv, (int)count, MPI_INT, MPI_SUM,
                           MPI_COMM_WORLD);
        for (size_t i = 0; rc == MPI_SUCCESS && i < count && bad < 0; i++) {
            int sum = 0;
            for (int r = 0; r < nranks; r++)
                sum += val(m->step, r, i);
            bad = recv[i] != sum ? (long)i : -1;
        }
        break;
    case 1:
        snprintf(m->desc, sizeof(m->desc), "MPI_Allgather(%p, %p, %zu ints)",
                 (void *)send, (void *)recv, count);
        rc = MPI_Allgather(send, (int)count, MPI_INT, recv, (int)count,
                           MPI_INT, MPI_COMM_WORLD);
        for (size_t i = 0; rc == MPI_SUCCESS && i < rlen && bad < 0; i++)
            bad = recv[i] != val(m->step, (int)(i / count), i % count)
                      ? (long)i : -1;
        break;
    default:
        snprintf(m->desc, sizeof(m->desc), "MPI_Bcast(%p, %zu ints, root %d)",
                 (void *)recv, count, root);
        rc = MPI_Bcast(recv, (int)count, MPI_INT, root, MPI_COMM_WORLD);
        for (size_t i = 0; rc == MPI_SUCCESS && i < count && bad < 0; i++)
            bad = recv[i] != val(m->step, root, i) ? (long)i : -1;
        break;
    }
    MPIX_Zcopy_get_stats(MPI_COMM_WORLD, &s1);
    if (rc != MPI_SUCCESS || bad >= 0)
        fz_fail(m, "failed (%d) or wrong at %ld; buffers %s activated here, "
                "%s everywhere", rc, bad, eligible ? "" : "not",
                all_eligible ? "" : "not");
    if (s1.zcopy_calls - s0.zcopy_calls != (uint64_t)all_eligible ||
        s1.fallback_calls - s0.fallback_calls != (uint64_t)!all_eligible)
        fz_fail(m, "%llu zero-copy and %llu fallbacks, but the buffers are "
                "%sactivated on every rank (last fallback: %s)",
                (unsigned long long)(s1.zcopy_calls - s0.zcopy_calls),
                (unsigned long long)(s1.fallback_calls - s0.fallback_calls),
                all_eligible ? "" : "not ", s1.last_fallback_reason);
    collectives++;
    zero_copy += (unsigned long)all_eligible;
    fallbacks += (unsigned long)!all_eligible;
}

/* More building than undoing than fuzz_registry's mix, so that blocks
 * live long enough for collectives to find them activated on every rank
 * (set_range is the collective step, not drawn here). */
static const unsigned weights[FZ_NOPS] = {
    [FZ_OP_RESERVE] = 6, [FZ_OP_RELEASE] = 2, [FZ_OP_CREATE] = 8,
    [FZ_OP_FREE] = 3, [FZ_OP_MAP] = 14, [FZ_OP_UNMAP] = 3,
    [FZ_OP_EXPORT] = 2, [FZ_OP_IMPORT] = 2, [FZ_OP_GET_SIZE] = 1,
    [FZ_OP_GRANULARITY] = 1, [FZ_OP_UNSET_RANGE] = 1, [FZ_OP_ACTIVATE] = 20,
    [FZ_OP_DEACTIVATE] = 3, [FZ_OP_COVERS] = 4, [FZ_OP_CLOSE_EXPORT] = 1,
};

int main(int argc, char **argv)
{
    static fz_model_t model;
    fz_model_t *m = &model;
    fz_backend_t be = { .unset_range = mpix_unset,
                        .activate = mpix_activate,
                        .deactivate = mpix_deactivate,
                        .covers = mpix_covers, .abort = mpix_abort, .ctx = m,
                        .mpix = true, .local_ranges = false,
                        .strict_maps = false, .weights = weights };
    unsigned long steps;
    uint64_t shared;
    MPI_Info info;
    int left;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Info_create(&info);
    MPI_Info_set(info, MPIX_ZCOPY_INFO_KEY, "false");
    MPI_Comm_dup_with_info(MPI_COMM_WORLD, info, &quiet);
    MPI_Info_free(&info);
    seed = argc > 1 ? strtoull(argv[1], NULL, 10) : 1;
    steps = argc > 2 ? strtoul(argv[2], NULL, 10) : 20000;
    if (rank == 0)
        printf("fuzz_mpix: seed %llu, %lu steps, %d ranks\n", seed, steps,
               nranks);
    heap_ints = 2 * (size_t)nranks * MAX_COUNT;
    heap = calloc(heap_ints, sizeof(int));

    fz_init(m, &be, seed * 1000 + (unsigned long long)rank);
    shared = seed * 0x9e3779b97f4a7c15ull | 1;
    while (m->step < steps) {
        unsigned r, kind;
        size_t count;

        /* The shared stream: the same draws on every rank. */
        shared ^= shared >> 12;
        shared ^= shared << 25;
        shared ^= shared >> 27;
        r = (unsigned)((shared * 0x2545f4914f6cdd1dull) >> 33);
        kind = (r >> 8) % 3;
        /* Inline-sized, small and sliced (above 16 KiB per rank). */
        count = (r >> 12) % 4 == 0   ? 1 + (r >> 16) % 12
                : (r >> 12) % 4 == 3 ? 1 + (r >> 16) % MAX_COUNT
                                     : 1 + (r >> 16) % 1024;
        if (r % 100 < COLLECTIVE_PERCENT) {
            m->step++;
            collective_step(m, kind, count, (int)((r >> 24) % (unsigned)nranks));
        } else if (r % 100 < COLLECTIVE_PERCENT + SET_RANGE_PERCENT) {
            m->step++;
            set_range_step(m);
        } else {
            fz_step(m);
        }
        if (m->step % 10 == 0)
            fz_check_covers(m, 2);
        if (m->step % 50 == 0)
            fz_check_maps(m);
    }

    /* Everything undone; after one more collective nobody maps anybody's
     * zcopy memory (own blocks gone, peers' imports dropped). */
    fz_check_maps(m);
    fz_teardown(m);
    MPI_Barrier(quiet);
    MPI_Barrier(MPI_COMM_WORLD);
    left = proc_count_maps(REL_MEM);
    if (left != 0)
        fz_fail(m, "after teardown and a collective, %d zcopy memory "
                "mappings remain", left);
    fz_fini(m);
    if (rank == 0) {
        fz_print_stats(m, "fuzz_mpix rank 0");
        printf("fuzz_mpix: %lu collectives (%lu zero-copy, %lu fallbacks), "
               "%lu collective set_memory_range calls\n", collectives,
               zero_copy, fallbacks, set_ranges);
        printf("fuzz_mpix: seed %llu: every call as the rules say, every "
               "check passed\n", seed);
    }
    free(heap);
    MPI_Comm_free(&quiet);
    MPI_Finalize();
    return 0;
}
