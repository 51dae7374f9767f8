/*
 * The random drivers' model of zcopy's memory layer and registry (issue 7,
 * 5): what reservations, handles, mappings, set ranges and activated blocks
 * exist, and from that, what each call must answer. Shared by
 * fuzz_registry.c (the registry called directly, no MPI) and fuzz_mpix.c
 * (the MPIX calls, between collectives).
 *
 * Each step draws one call with arguments that are valid or not (addresses
 * inside, outside, straddling and at the edges of the objects; sizes 0,
 * unaligned, exact, huge; handles live, NULL, freed, bogus; fds of every
 * kind), predicts its outcome from the rules of SPEC section 2 and 3, makes
 * it and compares:
 *   - a call the rules allow must succeed, and one they forbid must fail;
 *   - a failure must return a documented ZCOPY_ERR_* (never INTERNAL), and
 *     one that names a rule the call broke (a call breaking several rules
 *     may name any of them);
 *   - a failed call changes nothing: the model is left as it was, and the
 *     invariant checks after the step compare it with zcopy.
 * A few calls depend on the machine (huge pages, address space for
 * terabyte reservations): either answer is accepted, and the model
 * follows what happened.
 *
 * Any mismatch prints the step, the call and what was expected, and ends
 * the run through the backend's abort (the two would diverge from there).
 */
#ifndef ZCOPY_FUZZ_MODEL_H
#define ZCOPY_FUZZ_MODEL_H

#include <zcopy/mem.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define FZ_MAX_RESV 10
#define FZ_MAX_HANDLES 24
#define FZ_MAX_MAPS 40
#define FZ_MAX_RANGES 12
#define FZ_MAX_BLOCKS 40
#define FZ_MAX_EXPORTS 6
#define FZ_MAX_FREED 32

/* A set of outcomes: bit 0 success, bit -code for each ZCOPY_ERR_*. */
typedef unsigned fz_codes_t;
#define FZ_OK 1u
#define FZ_CODE(_c) (1u << -(_c))
#define FZ_DOCUMENTED ((FZ_CODE(ZCOPY_ERR_INTERNAL) << 1) - 1)
#define FZ_UNDOCUMENTED (1u << 15)

/* The outcome of a zcopy_mem_* return value. */
static inline fz_codes_t fz_code(int rc)
{
    return rc <= 0 && rc > -15 ? 1u << -rc : FZ_UNDOCUMENTED;
}

/* How the registry is reached. Each call returns the outcomes consistent
 * with what it returned: one code for the registry itself, every code of
 * the MPI error class for the MPIX calls. */
typedef struct {
    fz_codes_t (*set_range)(void *ctx, void *base, size_t size,
                            size_t alignment, uint64_t flags);
    fz_codes_t (*unset_range)(void *ctx, void *base);
    fz_codes_t (*activate)(void *ctx, void *va, size_t size, size_t offset,
                           zcopy_mem_handle_t h, uint64_t flags);
    fz_codes_t (*deactivate)(void *ctx, void *va);
    bool (*covers)(void *ctx, const void *buf, size_t len);
    void (*abort)(void *ctx);
    void *ctx;
    bool mpix;            /* alignment/offset/flags arguments exist, a NULL
                             buffer or an empty one is never activated */
    bool local_ranges;    /* set_range may be drawn as a local step */
    bool strict_maps;     /* no zcopy memory mapped outside the model:
                             false where peers' blocks are imported */
    const unsigned *weights; /* of each FZ_OP_*, or NULL: the default mix */
} fz_backend_t;

typedef struct { uintptr_t va; size_t size; } fz_resv_t;
typedef struct {
    zcopy_mem_handle_t h;
    size_t size, gran;
    uint64_t ino;
} fz_handle_t;
typedef struct {
    uintptr_t va;
    size_t size, offset;
    zcopy_mem_handle_t h;
} fz_map_t;
typedef struct { uintptr_t base; size_t size; } fz_range_t;
typedef struct {
    uintptr_t va;
    size_t size;
    uintptr_t range_base;
    size_t range_size;
    zcopy_mem_handle_t h;
    uint64_t order;       /* activation order: generations must follow it */
} fz_block_t;
typedef struct { int fd; uint64_t ino; size_t size, gran; } fz_export_t;

enum {
    FZ_OP_RESERVE, FZ_OP_RELEASE, FZ_OP_CREATE, FZ_OP_FREE, FZ_OP_MAP,
    FZ_OP_UNMAP, FZ_OP_EXPORT, FZ_OP_IMPORT, FZ_OP_GET_SIZE,
    FZ_OP_GRANULARITY, FZ_OP_SET_RANGE, FZ_OP_UNSET_RANGE, FZ_OP_ACTIVATE,
    FZ_OP_DEACTIVATE, FZ_OP_COVERS, FZ_OP_CLOSE_EXPORT, FZ_NOPS
};

typedef struct {
    fz_backend_t be;
    uint64_t rng;
    size_t page, huge;
    bool node0;                   /* NUMA node 0 can hold pages here */
    fz_resv_t resv[FZ_MAX_RESV];
    fz_handle_t handles[FZ_MAX_HANDLES];
    fz_map_t maps[FZ_MAX_MAPS];
    fz_range_t ranges[FZ_MAX_RANGES];
    fz_block_t blocks[FZ_MAX_BLOCKS];
    fz_export_t exports[FZ_MAX_EXPORTS];
    zcopy_mem_handle_t freed[FZ_MAX_FREED];
    int nresv, nhandles, nmaps, nranges, nblocks, nexports, nfreed;
    uint64_t next_order;
    /* fds for import: not memfds, or memfds zcopy must refuse or take */
    int fd_pipe, fd_file, fd_odd, fd_empty, fd_plain, fd_closed;
    unsigned long step;
    char desc[320];               /* the call being made, for messages */
    char history[8][400];         /* the calls before it, for messages */
    unsigned long calls[FZ_NOPS], oks[FZ_NOPS];
    bool last_ok;                 /* outcome of the last verified call */
    unsigned long codes[16];      /* outcomes seen, by -code */
} fz_model_t;

void fz_init(fz_model_t *m, const fz_backend_t *be, uint64_t seed);
/* Undoes everything through the API, checking each call succeeds. */
void fz_teardown(fz_model_t *m);
void fz_fini(fz_model_t *m);

uint64_t fz_rand(fz_model_t *m);
static inline unsigned fz_below(fz_model_t *m, unsigned n) { return (unsigned)(fz_rand(m) % n); }

/* One random local call (every op but, without local_ranges, set_range). */
void fz_step(fz_model_t *m);

/* set_range in parts, for a driver that makes it collective. */
void fz_gen_set_range(fz_model_t *m, void **base, size_t *size,
                      size_t *alignment, uint64_t *flags);
fz_codes_t fz_expect_set_range(const fz_model_t *m, uintptr_t base,
                               size_t size, size_t alignment, uint64_t flags);
void fz_apply_set_range(fz_model_t *m, uintptr_t base, size_t size);
/* Compares outcomes @got with @allowed; aborts on a mismatch. */
bool fz_verify(fz_model_t *m, fz_codes_t allowed, fz_codes_t got);

/* Whether the model has [buf, buf + len) activated (registry semantics:
 * len 0 is covered). */
bool fz_covers(const fz_model_t *m, uintptr_t buf, size_t len);

/* Checks that zcopy agrees with the model where a driver can look:
 * coverage at every block's edges and a few random places, and the
 * address space in /proc/self/maps: every reservation PROT_NONE except
 * its mappings, each of which maps its handle's pages at its offset. */
void fz_check_covers(fz_model_t *m, int random_queries);
void fz_check_maps(fz_model_t *m);

void fz_fail(fz_model_t *m, const char *fmt, ...)
    __attribute__((format(printf, 2, 3), noreturn));
void fz_print_stats(const fz_model_t *m, const char *who);

#endif
