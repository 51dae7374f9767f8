/*
 * Every intercepted collective against a reference the test computes on its
 * own, and the path every call took.
 *
 *   test_collectives activated   all buffers in a zt_arena activated on
 *                                MPI_COMM_WORLD: every call runs zero-copy
 *   test_collectives malloc      all buffers from malloc and no range set
 *                                anywhere: every call falls back, empty
 *                                ones too, for "no rank had set a memory
 *                                range" (which also proves the component
 *                                was selected: fallback_calls moves by one)
 *   test_collectives mixed       rank 1 uses malloc, the others the arena:
 *                                every call falls back on ALL ranks
 *   test_collectives alloc_mem   all buffers from MPI_Alloc_mem with the
 *                                info key mpool_hints=zcopy, no zcopy call:
 *                                every call runs zero-copy, as activated
 *   test_collectives alloc_mem_default   the same with MPI_INFO_NULL, for
 *                                jobs run with mpool_base_default_hints=zcopy
 *
 * An optional second argument, `span` (test_collectives activated span), is
 * for jobs whose MPI_COMM_WORLD spans servers (coll_zcopy_virtual_servers=2,
 * or coll_zcopy_transport=ucx, under which every peer is across servers).
 * Eligibility and the inline rule stay as above (a spanning communicator
 * carries tiny payloads in its arrivals), with these differences on a
 * communicator that spans servers:
 *   - in-place alltoall and in-place alltoallv fall back with the reason
 *     "in place across servers", unless their payloads ride the arrival
 *     (expect_inline, expect_vcarried). Either path is accepted for them
 *     (a split may lie in one server), a fallback for that reason only;
 *     phase end then holds the call to what its path implies, and to every
 *     rank having taken the same one.
 *   - data between servers moves through UCX, or through Open MPI's
 *     point-to-point engine under coll_zcopy_ucx_fetch pml: at the end of
 *     the WORLD and dup phases, every collective that ran zero-copy with
 *     data to move must have counted ucx_bytes or p2p_bytes (summed over
 *     its calls and all ranks). `span-p2p` instead of `span` says the job
 *     runs under pml, or under auto with coll_zcopy_ucx_p2p_min below its
 *     largest reads: each spanning phase that moved data between servers
 *     must have moved some through that engine; under `span`, none (every
 *     read here is below the parameter's default).
 *   - data inside a server moves through mappings: when a server holds
 *     several ranks (by host name, cut into coll_zcopy_virtual_servers
 *     blocks), WORLD's collectives must have counted ipc_bytes too, unless
 *     coll_zcopy_transport=ucx sends everything through UCX.
 *
 * Inputs are a hash of (call number, source rank, block, index), so every
 * rank knows every rank's input and checks its results without any extra
 * communication. Values are small integers: float sums and products are
 * exact, integer ops cannot overflow, and a byte of generated data is never
 * a poison byte, so a block that was never written is always noticed.
 *
 * Every buffer has poison guards on both sides, v-layouts have poison holes
 * (and blocks in reverse rank order), and after each call the test checks:
 * the result, that send buffers still hold their pattern, that guards and
 * holes were not touched, and the stats deltas of that one call. Stats
 * checks that need every rank (bytes moved, agreement on the fallback
 * reason) are logged per call and settled with one reduction per
 * communicator at the end of its phase, so they add no traffic in between.
 *
 * Expected path (SPEC section 4): zero-copy when on every rank every
 * buffer's extent lies in activated memory, the datatype is contiguous and
 * the op predefined or commutative. An empty extent lies inside activated
 * memory vacuously, so a call in which no malloc rank has a non-empty
 * buffer (count 0, a zero-count v-block, barrier) stays zero-copy in every
 * mode where some rank set a range; the test predicts the path per call
 * from that rule. Where no rank ever set one (malloc mode), the
 * communicators are never set up and every call falls back (coll.c,
 * coll_idle). MPI_DOUBLE_INT
 * (size 12, extent 16) is not contiguous and a user op created
 * non-commutative is not eligible: both must fall back in every mode.
 *
 * Sub-communicators (halves, odd/even in reverse order, a dup) run a
 * smaller set on the same memory, activated on WORLD only.
 */
#include "testutil.h"

#include <inttypes.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAX_RANKS 64
#define GUARD 64               /* poison bytes on either side of a buffer */
#define POOL_BYTES (16u << 20) /* every buffer of one call fits in here */
#define KIB 1024u
#define MIB (1024u * 1024u)

/* --- types ------------------------------------------------------------- */

/* Which ops apply to a type (MPI-3.1 section 5.9.2). */
enum { T_INT = 1, T_BYTE = 2, T_REAL = 4, T_PAIR = 8, T_INT32 = 16 };

typedef enum { K_SIGNED, K_UNSIGNED, K_REAL, K_PAIR_INT, K_PAIR_DOUBLE } kind_t;

typedef struct {
    const char *name;
    MPI_Datatype type;
    kind_t kind;
    size_t size;          /* bytes of the value (of the value part of a pair) */
    unsigned cls;         /* T_* */
    size_t extent;        /* from MPI at start */
    bool contiguous;      /* size == extent: the eligibility rule of SPEC 4 */
} type_desc_t;

/* The layout MPI_DOUBLE_INT describes. */
typedef struct {
    double v;
    int loc;
} double_int_t;

static type_desc_t types[] = {
    { "int8", MPI_INT8_T, K_SIGNED, 1, T_INT, 0, false },
    { "uint8", MPI_UINT8_T, K_UNSIGNED, 1, T_INT, 0, false },
    { "byte", MPI_BYTE, K_UNSIGNED, 1, T_BYTE, 0, false },
    { "int16", MPI_INT16_T, K_SIGNED, 2, T_INT, 0, false },
    { "int32", MPI_INT, K_SIGNED, 4, T_INT | T_INT32, 0, false },
    { "uint32", MPI_UNSIGNED, K_UNSIGNED, 4, T_INT, 0, false },
    { "int64", MPI_INT64_T, K_SIGNED, 8, T_INT, 0, false },
    { "uint64", MPI_UINT64_T, K_UNSIGNED, 8, T_INT, 0, false },
    { "float", MPI_FLOAT, K_REAL, 4, T_REAL, 0, false },
    { "double", MPI_DOUBLE, K_REAL, 8, T_REAL, 0, false },
    { "2int", MPI_2INT, K_PAIR_INT, 4, T_PAIR, 0, false },
    { "double_int", MPI_DOUBLE_INT, K_PAIR_DOUBLE, 8, T_PAIR, 0, false },
};
#define NTYPES (sizeof(types) / sizeof(types[0]))

static const type_desc_t *type_named(const char *name)
{
    for (size_t i = 0; i < NTYPES; i++)
        if (strcmp(types[i].name, name) == 0)
            return &types[i];
    MPI_Abort(MPI_COMM_WORLD, 3);
    return NULL;
}

/* --- ops --------------------------------------------------------------- */

typedef enum {
    O_SUM, O_PROD, O_MAX, O_MIN, O_BAND, O_BOR, O_BXOR, O_LAND, O_LOR,
    O_LXOR, O_MAXLOC, O_MINLOC, O_USER_MAX, O_USER_MAX_NC
} op_id_t;

/* What inputs an op gets, so that its result stays exact and small. */
typedef enum { V_ARITH, V_PROD, V_BITS, V_LOGIC, V_LOC, V_DATA } vclass_t;

typedef struct {
    const char *name;
    MPI_Op op;            /* user ops: created at start */
    op_id_t id;
    vclass_t values;
    unsigned applies;     /* T_* */
    bool eligible;        /* predefined or commutative: may run zero-copy */
} op_desc_t;

static op_desc_t ops[] = {
    { "SUM", MPI_SUM, O_SUM, V_ARITH, T_INT | T_REAL, true },
    { "PROD", MPI_PROD, O_PROD, V_PROD, T_INT | T_REAL, true },
    { "MAX", MPI_MAX, O_MAX, V_ARITH, T_INT | T_REAL, true },
    { "MIN", MPI_MIN, O_MIN, V_ARITH, T_INT | T_REAL, true },
    { "BAND", MPI_BAND, O_BAND, V_BITS, T_INT | T_BYTE, true },
    { "BOR", MPI_BOR, O_BOR, V_BITS, T_INT | T_BYTE, true },
    { "BXOR", MPI_BXOR, O_BXOR, V_BITS, T_INT | T_BYTE, true },
    { "LAND", MPI_LAND, O_LAND, V_LOGIC, T_INT, true },
    { "LOR", MPI_LOR, O_LOR, V_LOGIC, T_INT, true },
    { "LXOR", MPI_LXOR, O_LXOR, V_LOGIC, T_INT, true },
    { "MAXLOC", MPI_MAXLOC, O_MAXLOC, V_LOC, T_PAIR, true },
    { "MINLOC", MPI_MINLOC, O_MINLOC, V_LOC, T_PAIR, true },
    /* Commutative user op: runs zero-copy through MPI_Reduce_local. */
    { "user_max", MPI_OP_NULL, O_USER_MAX, V_ARITH, T_INT32, true },
    /* The same function declared non-commutative: must fall back. */
    { "user_max_noncomm", MPI_OP_NULL, O_USER_MAX_NC, V_ARITH, T_INT32, false },
};
#define NOPS (sizeof(ops) / sizeof(ops[0]))

static const op_desc_t *op_named(const char *name)
{
    for (size_t i = 0; i < NOPS; i++)
        if (strcmp(ops[i].name, name) == 0)
            return &ops[i];
    MPI_Abort(MPI_COMM_WORLD, 3);
    return NULL;
}

/* Elementwise max of MPI_INT, the body of both user ops. */
static void user_max_fn(void *in, void *inout, int *len, MPI_Datatype *type)
{
    const int *a = in;
    int *b = inout;

    (void)type;
    for (int i = 0; i < *len; i++)
        if (a[i] > b[i])
            b[i] = a[i];
}

/* --- one call ---------------------------------------------------------- */

typedef struct {
    uint8_t *data;        /* what MPI sees; GUARD poison bytes either side */
    size_t bytes;
    uint8_t poison;       /* fill of guards, holes and unwritten elements */
} gbuf_t;

typedef struct coll_case coll_case_t;

typedef struct {
    const char *name;     /* as in last_fallback_reason */
    bool reduction, rooted, in_place_ok;
    void (*prepare)(coll_case_t *c);   /* layout, buffers and inputs */
    int (*call)(coll_case_t *c);       /* the MPI call, nothing else */
    void (*verify)(coll_case_t *c);    /* results, inputs, guards, holes */
    bool (*touches)(const coll_case_t *c, int j); /* j has a non-empty buffer */
    bool (*moves)(const coll_case_t *c);          /* data crosses ranks */
} coll_desc_t;

struct coll_case {
    const coll_desc_t *coll;
    const type_desc_t *type;  /* NULL for barrier */
    const op_desc_t *op;      /* reductions only */
    size_t count;             /* elements: total (reductions) or per block */
    int root;                 /* -1 when not rooted */
    bool in_place;
    MPI_Comm comm;
    int rank, n;
    const bool *activated;    /* per rank of comm: buffers in the arena */
    bool zcopy;               /* expected to run zero-copy */
    uint64_t seed;            /* from the call number on this comm */
    char desc[160];
    gbuf_t s, r;
    int counts[MAX_RANKS], displs[MAX_RANKS];    /* v-layouts */
    int rdispls[MAX_RANKS], sdispls[MAX_RANKS];  /* alltoallv */
    size_t elems, selems;     /* elements a v-layout spans (recv, send) */
};

/* --- inputs and the reference ------------------------------------------ */

typedef struct {
    int64_t v, loc;           /* loc: pairs only, 0 otherwise */
} val_t;

static uint64_t mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return x;
}

/* Element @i of block @block of rank @rank's input in this call. */
static val_t gen(const coll_case_t *c, int rank, int block, size_t i)
{
    uint64_t h = mix64(c->seed ^ ((uint64_t)rank << 56) ^
                       ((uint64_t)block << 40) ^ (uint64_t)i);
    bool is_signed = c->type->kind != K_UNSIGNED;
    val_t x = { 0, 0 };

    switch (c->op ? c->op->values : V_DATA) {
    case V_ARITH: /* |sum| <= 8n fits int8 up to 8 ranks; 2n up to 64 */
        if (c->n <= 8)
            x.v = is_signed ? (int64_t)(h & 15) - 8 : (int64_t)(h & 15);
        else
            x.v = is_signed ? (int64_t)(h & 3) - 2 : (int64_t)(h & 3);
        break;
    case V_PROD: /* 1 or 2: 2^n fits int8 for n <= 6, else mostly 1 */
        x.v = 1 + (int64_t)(c->n <= 6 ? (h & 1) : (h & 63) == 0);
        break;
    case V_BITS:
        x.v = (int64_t)(h & 127);
        break;
    case V_LOGIC: /* zero a quarter of the time, else 1..3 */
        x.v = (int64_t)(h & 3);
        break;
    case V_LOC: /* few values, so ties and their lowest-loc rule show */
        x.v = (int64_t)(h & 3) - 1;
        x.loc = (int64_t)((h >> 8) & 1023);
        break;
    case V_DATA:
        x.v = (int64_t)(h & 127);
        if (c->type->cls & T_PAIR)
            x.loc = (int64_t)((h >> 8) & 0xffff);
        break;
    }
    return x;
}

static val_t combine(op_id_t op, val_t a, val_t b)
{
    switch (op) {
    case O_SUM: a.v += b.v; break;
    case O_PROD: a.v *= b.v; break;
    case O_MAX:
    case O_USER_MAX:
    case O_USER_MAX_NC: a.v = b.v > a.v ? b.v : a.v; break;
    case O_MIN: a.v = b.v < a.v ? b.v : a.v; break;
    case O_BAND: a.v &= b.v; break;
    case O_BOR: a.v |= b.v; break;
    case O_BXOR: a.v ^= b.v; break;
    case O_LAND: a.v = a.v && b.v; break;
    case O_LOR: a.v = a.v || b.v; break;
    case O_LXOR: a.v = !a.v != !b.v; break;
    case O_MAXLOC:
        if (b.v > a.v || (b.v == a.v && b.loc < a.loc))
            a = b;
        break;
    case O_MINLOC:
        if (b.v < a.v || (b.v == a.v && b.loc < a.loc))
            a = b;
        break;
    }
    return a;
}

/* Element @i of the reduction of every rank's input. */
static val_t reference(const coll_case_t *c, size_t i)
{
    val_t acc = gen(c, 0, 0, i);

    for (int j = 1; j < c->n; j++)
        acc = combine(c->op->id, acc, gen(c, j, 0, i));
    return acc;
}

/* A float that is not exactly a small integer never equals a reference. */
static int64_t exact_int(double d)
{
    if (d >= -1e15 && d <= 1e15 && d == (double)(int64_t)d)
        return (int64_t)d;
    return INT64_MIN;
}

static val_t load(const coll_case_t *c, const void *buf, size_t i)
{
    const type_desc_t *t = c->type;
    const uint8_t *p = (const uint8_t *)buf + i * t->extent;
    val_t x = { 0, 0 };

    switch (t->kind) {
    case K_SIGNED:
        if (t->size == 1) { int8_t v; memcpy(&v, p, 1); x.v = v; }
        else if (t->size == 2) { int16_t v; memcpy(&v, p, 2); x.v = v; }
        else if (t->size == 4) { int32_t v; memcpy(&v, p, 4); x.v = v; }
        else { int64_t v; memcpy(&v, p, 8); x.v = v; }
        break;
    case K_UNSIGNED:
        if (t->size == 1) { uint8_t v; memcpy(&v, p, 1); x.v = v; }
        else if (t->size == 2) { uint16_t v; memcpy(&v, p, 2); x.v = v; }
        else if (t->size == 4) { uint32_t v; memcpy(&v, p, 4); x.v = v; }
        else { uint64_t v; memcpy(&v, p, 8); x.v = (int64_t)v; }
        break;
    case K_REAL:
        if (t->size == 4) { float v; memcpy(&v, p, 4); x.v = exact_int(v); }
        else { double v; memcpy(&v, p, 8); x.v = exact_int(v); }
        break;
    case K_PAIR_INT: {
        int v[2];
        memcpy(v, p, sizeof(v));
        x.v = v[0];
        x.loc = v[1];
        break;
    }
    case K_PAIR_DOUBLE: {
        double v;
        int loc;
        memcpy(&v, p + offsetof(double_int_t, v), sizeof(v));
        memcpy(&loc, p + offsetof(double_int_t, loc), sizeof(loc));
        x.v = exact_int(v);
        x.loc = loc;
        break;
    }
    }
    return x;
}

static void store(const coll_case_t *c, void *buf, size_t i, val_t x)
{
    const type_desc_t *t = c->type;
    uint8_t *p = (uint8_t *)buf + i * t->extent;

    switch (t->kind) {
    case K_SIGNED:
    case K_UNSIGNED:
        /* Small non-negative or two's complement: the low bytes are it. */
        if (t->size == 1) { int8_t v = (int8_t)x.v; memcpy(p, &v, 1); }
        else if (t->size == 2) { int16_t v = (int16_t)x.v; memcpy(p, &v, 2); }
        else if (t->size == 4) { int32_t v = (int32_t)x.v; memcpy(p, &v, 4); }
        else memcpy(p, &x.v, 8);
        break;
    case K_REAL:
        if (t->size == 4) { float v = (float)x.v; memcpy(p, &v, 4); }
        else { double v = (double)x.v; memcpy(p, &v, 8); }
        break;
    case K_PAIR_INT: {
        int v[2] = { (int)x.v, (int)x.loc };
        memcpy(p, v, sizeof(v));
        break;
    }
    case K_PAIR_DOUBLE: {
        double v = (double)x.v;
        int loc = (int)x.loc;
        memcpy(p + offsetof(double_int_t, v), &v, sizeof(v));
        memcpy(p + offsetof(double_int_t, loc), &loc, sizeof(loc));
        break;
    }
    }
}

/* --- buffers ------------------------------------------------------------ */

/* The memory of this rank's buffers: the arena, or a malloc'ed block of
 * the same size; emptied before every call. */
static struct {
    uint8_t *base;
    size_t size, used;
} pool;

/* Poison differs per rank and between send and receive buffers, so that
 * an overrun copying one buffer's guard into another's still shows. Every
 * poison byte is above 127: never a byte of a generated small value, and
 * an element never written reads as a value no reference has. */
enum { RECV, SEND };

static uint8_t poison_of(const coll_case_t *c, int role)
{
    return (uint8_t)((role == SEND ? 0xB0 : 0xA0) | (c->rank & 15));
}

/* @elems elements of the case's type, guards included, all poison. */
static gbuf_t take(const coll_case_t *c, size_t elems, int role)
{
    const uint8_t poison = poison_of(c, role);
    size_t bytes = elems * c->type->extent;
    size_t at = (pool.used + 63) & ~(size_t)63;

    if (at + bytes + 2 * GUARD > pool.size) {
        fprintf(stderr, "%s: pool of %zu bytes too small\n", c->desc, pool.size);
        MPI_Abort(MPI_COMM_WORLD, 3);
    }
    memset(pool.base + at, poison, bytes + 2 * GUARD);
    pool.used = at + bytes + 2 * GUARD;
    return (gbuf_t){ pool.base + at + GUARD, bytes, poison };
}

/* Elements [at, at + count) of @b := block @block of @src's input. */
static void fill(const coll_case_t *c, gbuf_t *b, size_t at, size_t count,
                 int src, int block)
{
    for (size_t k = 0; k < count; k++)
        store(c, b->data, at + k, gen(c, src, block, k));
}

/* What a range of elements must hold: a block of some rank's input (from
 * its element @first on), or the reduction of everybody's input from
 * element @first on. */
typedef struct {
    bool reduced;
    int src, block;
    size_t first;
} want_t;

static val_t wanted(const coll_case_t *c, want_t w, size_t k)
{
    return w.reduced ? reference(c, w.first + k)
                     : gen(c, w.src, w.block, w.first + k);
}

/* One check per range: reports the first mismatch only. */
static void check_elems(const coll_case_t *c, const char *what, const gbuf_t *b,
                        size_t at, size_t count, want_t w)
{
    for (size_t k = 0; k < count; k++) {
        val_t got = load(c, b->data, at + k), exp = wanted(c, w, k);
        if (got.v != exp.v || got.loc != exp.loc) {
            ZT_CHECK(false,
                     "%s: rank %d %s[%zu]: got %" PRId64 " (loc %" PRId64
                     "), expected %" PRId64 " (loc %" PRId64 ")",
                     c->desc, c->rank, what, at + k, got.v, got.loc, exp.v,
                     exp.loc);
            return;
        }
    }
    ZT_CHECK(true, "%s", c->desc);
}

static void check_block(const coll_case_t *c, const char *what, const gbuf_t *b,
                        size_t at, size_t count, int src, int block)
{
    check_elems(c, what, b, at, count, (want_t){ false, src, block, 0 });
}

static void check_reduced(const coll_case_t *c, const char *what,
                          const gbuf_t *b, size_t at, size_t count, size_t first)
{
    check_elems(c, what, b, at, count, (want_t){ true, 0, 0, first });
}

static void check_poison(const coll_case_t *c, const char *what,
                         const gbuf_t *b, ptrdiff_t off, size_t len)
{
    const uint8_t *p = b->data + off;

    for (size_t k = 0; k < len; k++)
        if (p[k] != b->poison) {
            ZT_CHECK(false, "%s: rank %d %s: byte %td written (0x%02x)",
                     c->desc, c->rank, what, off + (ptrdiff_t)k, p[k]);
            return;
        }
    ZT_CHECK(true, "%s", c->desc);
}

/* Nothing before or after the buffer's extent was written. */
static void check_guards(const coll_case_t *c, const char *what, const gbuf_t *b)
{
    if (b->data == NULL)
        return;
    check_poison(c, what, b, -GUARD, GUARD);
    check_poison(c, what, b, (ptrdiff_t)b->bytes, GUARD);
}

/* The elements of a v-layout that belong to no block are still poison. */
static void check_holes(const coll_case_t *c, const char *what, const gbuf_t *b,
                        size_t elems, const int *counts, const int *displs)
{
    uint8_t *covered = calloc(elems ? elems : 1, 1);
    const size_t e = c->type->extent;

    for (int j = 0; j < c->n; j++)
        memset(covered + displs[j], 1, (size_t)counts[j]);
    for (size_t k = 0; k < elems; k++)
        if (!covered[k]) {
            size_t at = k;
            while (k + 1 < elems && !covered[k + 1])
                k++;
            check_poison(c, what, b, (ptrdiff_t)(at * e), (k + 1 - at) * e);
        }
    free(covered);
}

/* --- layouts ------------------------------------------------------------ */

/* Uneven v-counts around @base: every third rank gets none. */
static int vcount(size_t base, int j)
{
    return j % 3 == 1 ? 0 : (int)base + j;
}

/* Displacements with a hole before every block, blocks in rank order or
 * reversed; returns the elements the layout spans (with a trailing hole). */
static size_t layout(const int *counts, int n, bool reverse, int *displs)
{
    size_t at = 1;

    for (int k = 0; k < n; k++) {
        int j = reverse ? n - 1 - k : k;
        displs[j] = (int)at;
        at += (size_t)counts[j] + 1 + (size_t)(j % 3);
    }
    return at;
}

/* reduce_scatter counts summing to @total, uneven and some zero, so that
 * neither the total nor the blocks divide evenly. */
static void split_counts(size_t total, int n, int *counts)
{
    size_t weight = 0, given = 0;

    for (int j = 0; j < n; j++)
        weight += n > 2 && j % 3 == 1 ? 0 : (size_t)j + 1;
    for (int j = 0; j < n; j++) {
        size_t w = n > 2 && j % 3 == 1 ? 0 : (size_t)j + 1;
        counts[j] = (int)(total * w / weight);
        given += (size_t)counts[j];
    }
    counts[0] += (int)(total - given);
}

/* Elements rank @j sends to rank @k in alltoallv. In place, what j sends
 * to k is what k receives from j, so the matrix must be symmetric. */
static int a2a_count(const coll_case_t *c, int j, int k)
{
    if (c->in_place)
        return (j + k) % 3 == 0 ? 0 : (int)c->count + (j * k) % 2;
    return (j + 2 * k) % 3 == 0 ? 0 : (int)c->count + (j + k) % 3;
}

static const void *sendbuf(const coll_case_t *c)
{
    return c->in_place ? MPI_IN_PLACE : c->s.data;
}

static bool is_root(const coll_case_t *c)
{
    return c->rank == c->root;
}

/* The send buffer still holds this rank's input, guards untouched. */
static void check_send(const coll_case_t *c, size_t count)
{
    if (c->s.data == NULL)
        return;
    check_block(c, "sendbuf", &c->s, 0, count, c->rank, 0);
    check_guards(c, "sendbuf guard", &c->s);
}

static bool any_count(const coll_case_t *c)
{
    for (int j = 0; j < c->n; j++)
        if (c->counts[j] > 0)
            return true;
    return false;
}

static bool count_positive(const coll_case_t *c)
{
    return c->count > 0;
}

static bool count_positive_j(const coll_case_t *c, int j)
{
    (void)j;
    return c->count > 0;
}

/* --- allreduce, reduce ---------------------------------------------------- */

static void allreduce_prepare(coll_case_t *c)
{
    c->r = take(c, c->count, RECV);
    if (c->in_place) {
        fill(c, &c->r, 0, c->count, c->rank, 0);
    } else {
        c->s = take(c, c->count, SEND);
        fill(c, &c->s, 0, c->count, c->rank, 0);
    }
}

static int allreduce_call(coll_case_t *c)
{
    return MPI_Allreduce(sendbuf(c), c->r.data, (int)c->count, c->type->type,
                         c->op->op, c->comm);
}

static void allreduce_verify(coll_case_t *c)
{
    check_reduced(c, "recvbuf", &c->r, 0, c->count, 0);
    check_guards(c, "recvbuf guard", &c->r);
    check_send(c, c->count);
}

/* MPI_IN_PLACE is the root's alone; the other ranks' recvbuf is not
 * significant: it is given zero bytes between guards, so any write shows. */
static void reduce_prepare(coll_case_t *c)
{
    if (!is_root(c)) {
        c->r = take(c, 0, RECV);
        c->s = take(c, c->count, SEND);
        fill(c, &c->s, 0, c->count, c->rank, 0);
        return;
    }
    allreduce_prepare(c);
}

static int reduce_call(coll_case_t *c)
{
    const void *s = is_root(c) && c->in_place ? MPI_IN_PLACE : c->s.data;

    return MPI_Reduce(s, c->r.data, (int)c->count, c->type->type, c->op->op,
                      c->root, c->comm);
}

static void reduce_verify(coll_case_t *c)
{
    if (is_root(c))
        check_reduced(c, "recvbuf", &c->r, 0, c->count, 0);
    check_guards(c, "recvbuf guard", &c->r);
    check_send(c, c->count);
}

/* --- reduce_scatter, reduce_scatter_block --------------------------------- */

static size_t prefix(const int *counts, int j)
{
    size_t at = 0;

    for (int k = 0; k < j; k++)
        at += (size_t)counts[k];
    return at;
}

/* In place, recvbuf holds the whole input; the result takes its first
 * counts[rank] elements. Zero-copy leaves the rest as it was: MPI leaves
 * it unsaid, stock Open MPI keeps it for the ops zcopy takes (not for
 * all others: its non-commutative algorithm writes there), and mpi4py's
 * tests expect it. */
static void rs_prepare_buffers(coll_case_t *c, size_t total)
{
    const int own = c->counts[c->rank];

    if (c->in_place) {
        c->r = take(c, total, RECV);
        fill(c, &c->r, 0, total, c->rank, 0);
    } else {
        c->s = take(c, total, SEND);
        fill(c, &c->s, 0, total, c->rank, 0);
        c->r = take(c, (size_t)own, RECV);
    }
}

static void reduce_scatter_prepare(coll_case_t *c)
{
    split_counts(c->count, c->n, c->counts);
    rs_prepare_buffers(c, c->count);
}

static void rsb_prepare(coll_case_t *c)
{
    for (int j = 0; j < c->n; j++)
        c->counts[j] = (int)c->count;
    rs_prepare_buffers(c, c->count * (size_t)c->n);
}

static int reduce_scatter_call(coll_case_t *c)
{
    return MPI_Reduce_scatter(sendbuf(c), c->r.data, c->counts, c->type->type,
                              c->op->op, c->comm);
}

static int rsb_call(coll_case_t *c)
{
    return MPI_Reduce_scatter_block(sendbuf(c), c->r.data, (int)c->count,
                                    c->type->type, c->op->op, c->comm);
}

static void reduce_scatter_verify(coll_case_t *c)
{
    const size_t total = prefix(c->counts, c->n);

    const size_t own = (size_t)c->counts[c->rank];

    check_reduced(c, "recvbuf", &c->r, 0, own, prefix(c->counts, c->rank));
    if (c->in_place && c->zcopy)
        check_elems(c, "recvbuf past the result", &c->r, own, total - own,
                    (want_t){ false, c->rank, 0, own });
    check_guards(c, "recvbuf guard", &c->r);
    check_send(c, total);
}

static bool rs_touches(const coll_case_t *c, int j)
{
    (void)j;
    return any_count(c);
}

static bool rs_moves(const coll_case_t *c)
{
    return any_count(c);
}

/* --- allgather(v) --------------------------------------------------------- */

static void allgather_prepare(coll_case_t *c)
{
    c->r = take(c, c->count * (size_t)c->n, RECV);
    if (c->in_place) {
        fill(c, &c->r, c->count * (size_t)c->rank, c->count, c->rank, 0);
    } else {
        c->s = take(c, c->count, SEND);
        fill(c, &c->s, 0, c->count, c->rank, 0);
    }
}

static int allgather_call(coll_case_t *c)
{
    return MPI_Allgather(sendbuf(c), (int)c->count, c->type->type, c->r.data,
                         (int)c->count, c->type->type, c->comm);
}

static void allgather_verify(coll_case_t *c)
{
    for (int j = 0; j < c->n; j++)
        check_block(c, "recvbuf", &c->r, c->count * (size_t)j, c->count, j, 0);
    check_guards(c, "recvbuf guard", &c->r);
    check_send(c, c->count);
}

static void allgatherv_prepare(coll_case_t *c)
{
    for (int j = 0; j < c->n; j++)
        c->counts[j] = vcount(c->count, j);
    c->elems = layout(c->counts, c->n, true, c->displs);
    c->r = take(c, c->elems, RECV);
    if (c->in_place) {
        fill(c, &c->r, (size_t)c->displs[c->rank],
             (size_t)c->counts[c->rank], c->rank, 0);
    } else {
        c->s = take(c, (size_t)c->counts[c->rank], SEND);
        fill(c, &c->s, 0, (size_t)c->counts[c->rank], c->rank, 0);
    }
}

static int allgatherv_call(coll_case_t *c)
{
    return MPI_Allgatherv(sendbuf(c), c->counts[c->rank], c->type->type,
                          c->r.data, c->counts, c->displs, c->type->type,
                          c->comm);
}

/* Blocks of every rank at the v-layout's displacements, holes untouched. */
static void check_gathered(const coll_case_t *c)
{
    for (int j = 0; j < c->n; j++)
        check_block(c, "recvbuf", &c->r, (size_t)c->displs[j],
                    (size_t)c->counts[j], j, 0);
    check_holes(c, "recvbuf hole", &c->r, c->elems, c->counts, c->displs);
}

static void allgatherv_verify(coll_case_t *c)
{
    check_gathered(c);
    check_guards(c, "recvbuf guard", &c->r);
    check_send(c, (size_t)c->counts[c->rank]);
}

static bool allgatherv_touches(const coll_case_t *c, int j)
{
    (void)j;
    return any_count(c);
}

/* --- bcast ---------------------------------------------------------------- */

static void bcast_prepare(coll_case_t *c)
{
    c->r = take(c, c->count, RECV);
    if (is_root(c))
        fill(c, &c->r, 0, c->count, c->rank, 0);
}

static int bcast_call(coll_case_t *c)
{
    return MPI_Bcast(c->r.data, (int)c->count, c->type->type, c->root, c->comm);
}

/* At the root this is also the check that its send buffer is unchanged. */
static void bcast_verify(coll_case_t *c)
{
    check_block(c, "buffer", &c->r, 0, c->count, c->root, 0);
    check_guards(c, "buffer guard", &c->r);
}

/* --- gather(v) ------------------------------------------------------------ */

static void gather_prepare(coll_case_t *c)
{
    if (!is_root(c)) {
        c->r = take(c, 0, RECV);
        c->s = take(c, c->count, SEND);
        fill(c, &c->s, 0, c->count, c->rank, 0);
        return;
    }
    c->r = take(c, c->count * (size_t)c->n, RECV);
    if (c->in_place) {
        fill(c, &c->r, c->count * (size_t)c->rank, c->count, c->rank, 0);
    } else {
        c->s = take(c, c->count, SEND);
        fill(c, &c->s, 0, c->count, c->rank, 0);
    }
}

static int gather_call(coll_case_t *c)
{
    const void *s = is_root(c) && c->in_place ? MPI_IN_PLACE : c->s.data;

    return MPI_Gather(s, (int)c->count, c->type->type, c->r.data,
                      (int)c->count, c->type->type, c->root, c->comm);
}

static void gather_verify(coll_case_t *c)
{
    if (is_root(c))
        for (int j = 0; j < c->n; j++)
            check_block(c, "recvbuf", &c->r, c->count * (size_t)j, c->count,
                        j, 0);
    check_guards(c, "recvbuf guard", &c->r);
    check_send(c, c->count);
}

static void gatherv_prepare(coll_case_t *c)
{
    const int own = vcount(c->count, c->rank);

    for (int j = 0; j < c->n; j++)
        c->counts[j] = vcount(c->count, j);
    c->elems = layout(c->counts, c->n, true, c->displs);
    if (!is_root(c)) {
        c->r = take(c, 0, RECV);
    } else {
        c->r = take(c, c->elems, RECV);
        if (c->in_place)
            fill(c, &c->r, (size_t)c->displs[c->rank], (size_t)own, c->rank, 0);
    }
    if (!is_root(c) || !c->in_place) {
        c->s = take(c, (size_t)own, SEND);
        fill(c, &c->s, 0, (size_t)own, c->rank, 0);
    }
}

static int gatherv_call(coll_case_t *c)
{
    const void *s = is_root(c) && c->in_place ? MPI_IN_PLACE : c->s.data;

    return MPI_Gatherv(s, c->counts[c->rank], c->type->type, c->r.data,
                       c->counts, c->displs, c->type->type, c->root, c->comm);
}

static void gatherv_verify(coll_case_t *c)
{
    if (is_root(c))
        check_gathered(c);
    check_guards(c, "recvbuf guard", &c->r);
    check_send(c, (size_t)c->counts[c->rank]);
}

/* The root's buffer spans every block; another rank's only its own. */
static bool rooted_v_touches(const coll_case_t *c, int j)
{
    return j == c->root ? any_count(c) : c->counts[j] > 0;
}

static bool rooted_v_moves(const coll_case_t *c)
{
    for (int j = 0; j < c->n; j++)
        if (j != c->root && c->counts[j] > 0)
            return true;
    return false;
}

/* --- scatter(v) ----------------------------------------------------------- */

static void scatter_prepare(coll_case_t *c)
{
    if (is_root(c)) {
        c->s = take(c, c->count * (size_t)c->n, SEND);
        for (int j = 0; j < c->n; j++)
            fill(c, &c->s, c->count * (size_t)j, c->count, c->rank, j);
    } else {
        c->s = take(c, 0, SEND);
    }
    if (!is_root(c) || !c->in_place)
        c->r = take(c, c->count, RECV);
}

static int scatter_call(coll_case_t *c)
{
    void *r = is_root(c) && c->in_place ? MPI_IN_PLACE : c->r.data;

    return MPI_Scatter(c->s.data, (int)c->count, c->type->type, r,
                       (int)c->count, c->type->type, c->root, c->comm);
}

/* The root's send buffer holds one block per rank. */
static void scatter_verify(coll_case_t *c)
{
    if (c->r.data != NULL) {
        check_block(c, "recvbuf", &c->r, 0, c->count, c->root, c->rank);
        check_guards(c, "recvbuf guard", &c->r);
    }
    if (is_root(c))
        for (int j = 0; j < c->n; j++)
            check_block(c, "sendbuf", &c->s, c->count * (size_t)j, c->count,
                        c->rank, j);
    check_guards(c, "sendbuf guard", &c->s);
}

static void scatterv_prepare(coll_case_t *c)
{
    for (int j = 0; j < c->n; j++)
        c->counts[j] = vcount(c->count, j);
    c->elems = layout(c->counts, c->n, true, c->displs);
    if (is_root(c)) {
        c->s = take(c, c->elems, SEND);
        for (int j = 0; j < c->n; j++)
            fill(c, &c->s, (size_t)c->displs[j], (size_t)c->counts[j],
                 c->rank, j);
    } else {
        c->s = take(c, 0, SEND);
    }
    if (!is_root(c) || !c->in_place)
        c->r = take(c, (size_t)c->counts[c->rank], RECV);
}

static int scatterv_call(coll_case_t *c)
{
    void *r = is_root(c) && c->in_place ? MPI_IN_PLACE : c->r.data;

    return MPI_Scatterv(c->s.data, c->counts, c->displs, c->type->type, r,
                        c->counts[c->rank], c->type->type, c->root, c->comm);
}

static void scatterv_verify(coll_case_t *c)
{
    if (c->r.data != NULL) {
        check_block(c, "recvbuf", &c->r, 0, (size_t)c->counts[c->rank],
                    c->root, c->rank);
        check_guards(c, "recvbuf guard", &c->r);
    }
    if (is_root(c)) {
        for (int j = 0; j < c->n; j++)
            check_block(c, "sendbuf", &c->s, (size_t)c->displs[j],
                        (size_t)c->counts[j], c->rank, j);
        check_holes(c, "sendbuf hole", &c->s, c->elems, c->counts, c->displs);
    }
    check_guards(c, "sendbuf guard", &c->s);
}

/* --- alltoall(v) ---------------------------------------------------------- */

/* Block k of rank j's input is what j sends to k. */
static void alltoall_prepare(coll_case_t *c)
{
    const size_t total = c->count * (size_t)c->n;

    c->r = take(c, total, RECV);
    if (!c->in_place)
        c->s = take(c, total, SEND);
    for (int k = 0; k < c->n; k++)
        fill(c, c->in_place ? &c->r : &c->s, c->count * (size_t)k, c->count,
             c->rank, k);
}

static int alltoall_call(coll_case_t *c)
{
    return MPI_Alltoall(sendbuf(c), (int)c->count, c->type->type, c->r.data,
                        (int)c->count, c->type->type, c->comm);
}

static void alltoall_verify(coll_case_t *c)
{
    for (int j = 0; j < c->n; j++)
        check_block(c, "recvbuf", &c->r, c->count * (size_t)j, c->count, j,
                    c->rank);
    check_guards(c, "recvbuf guard", &c->r);
    if (c->s.data != NULL) {
        for (int k = 0; k < c->n; k++)
            check_block(c, "sendbuf", &c->s, c->count * (size_t)k, c->count,
                        c->rank, k);
        check_guards(c, "sendbuf guard", &c->s);
    }
}

/* counts: what this rank receives from each rank (forward layout with
 * holes); the send side uses its own counts in a reversed layout. */
static void alltoallv_prepare(coll_case_t *c)
{
    int scounts[MAX_RANKS];

    for (int j = 0; j < c->n; j++) {
        c->counts[j] = a2a_count(c, j, c->rank);
        scounts[j] = a2a_count(c, c->rank, j);
    }
    c->elems = layout(c->counts, c->n, false, c->rdispls);
    c->r = take(c, c->elems, RECV);
    if (c->in_place) {
        for (int k = 0; k < c->n; k++)
            fill(c, &c->r, (size_t)c->rdispls[k], (size_t)c->counts[k],
                 c->rank, k);
        return;
    }
    c->selems = layout(scounts, c->n, true, c->sdispls);
    c->s = take(c, c->selems, SEND);
    for (int k = 0; k < c->n; k++)
        fill(c, &c->s, (size_t)c->sdispls[k], (size_t)scounts[k], c->rank, k);
}

static int alltoallv_call(coll_case_t *c)
{
    int scounts[MAX_RANKS];

    for (int k = 0; k < c->n; k++)
        scounts[k] = a2a_count(c, c->rank, k);
    return MPI_Alltoallv(sendbuf(c), scounts, c->sdispls, c->type->type,
                         c->r.data, c->counts, c->rdispls, c->type->type,
                         c->comm);
}

static void alltoallv_verify(coll_case_t *c)
{
    int scounts[MAX_RANKS];

    for (int j = 0; j < c->n; j++)
        check_block(c, "recvbuf", &c->r, (size_t)c->rdispls[j],
                    (size_t)c->counts[j], j, c->rank);
    check_holes(c, "recvbuf hole", &c->r, c->elems, c->counts, c->rdispls);
    check_guards(c, "recvbuf guard", &c->r);
    if (c->s.data == NULL)
        return;
    for (int k = 0; k < c->n; k++) {
        scounts[k] = a2a_count(c, c->rank, k);
        check_block(c, "sendbuf", &c->s, (size_t)c->sdispls[k],
                    (size_t)scounts[k], c->rank, k);
    }
    check_holes(c, "sendbuf hole", &c->s, c->selems, scounts, c->sdispls);
    check_guards(c, "sendbuf guard", &c->s);
}

static bool alltoallv_touches(const coll_case_t *c, int j)
{
    for (int k = 0; k < c->n; k++)
        if (a2a_count(c, j, k) > 0 || a2a_count(c, k, j) > 0)
            return true;
    return false;
}

static bool alltoallv_moves(const coll_case_t *c)
{
    for (int j = 0; j < c->n; j++)
        for (int k = 0; k < c->n; k++)
            if (j != k && a2a_count(c, j, k) > 0)
                return true;
    return false;
}

/* --- barrier -------------------------------------------------------------- */

static void nothing(coll_case_t *c)
{
    (void)c;
}

static int barrier_call(coll_case_t *c)
{
    return MPI_Barrier(c->comm);
}

static bool never_j(const coll_case_t *c, int j)
{
    (void)c;
    (void)j;
    return false;
}

static bool never(const coll_case_t *c)
{
    (void)c;
    return false;
}

/* --- the table ------------------------------------------------------------ */

enum {
    C_ALLREDUCE, C_REDUCE, C_REDUCE_SCATTER, C_RSB, C_ALLGATHER, C_ALLGATHERV,
    C_BCAST, C_GATHER, C_GATHERV, C_SCATTER, C_SCATTERV, C_ALLTOALL,
    C_ALLTOALLV, C_BARRIER, C_COUNT
};

static const coll_desc_t colls[C_COUNT] = {
    [C_ALLREDUCE] = { "allreduce", true, false, true, allreduce_prepare,
                      allreduce_call, allreduce_verify, count_positive_j,
                      count_positive },
    [C_REDUCE] = { "reduce", true, true, true, reduce_prepare, reduce_call,
                   reduce_verify, count_positive_j, count_positive },
    [C_REDUCE_SCATTER] = { "reduce_scatter", true, false, true,
                           reduce_scatter_prepare, reduce_scatter_call,
                           reduce_scatter_verify, rs_touches, rs_moves },
    [C_RSB] = { "reduce_scatter_block", true, false, true, rsb_prepare,
                rsb_call, reduce_scatter_verify, rs_touches, rs_moves },
    [C_ALLGATHER] = { "allgather", false, false, true, allgather_prepare,
                      allgather_call, allgather_verify, count_positive_j,
                      count_positive },
    [C_ALLGATHERV] = { "allgatherv", false, false, true, allgatherv_prepare,
                       allgatherv_call, allgatherv_verify, allgatherv_touches,
                       rs_moves },
    [C_BCAST] = { "bcast", false, true, false, bcast_prepare, bcast_call,
                  bcast_verify, count_positive_j, count_positive },
    [C_GATHER] = { "gather", false, true, true, gather_prepare, gather_call,
                   gather_verify, count_positive_j, count_positive },
    [C_GATHERV] = { "gatherv", false, true, true, gatherv_prepare,
                    gatherv_call, gatherv_verify, rooted_v_touches,
                    rooted_v_moves },
    [C_SCATTER] = { "scatter", false, true, true, scatter_prepare,
                    scatter_call, scatter_verify, count_positive_j,
                    count_positive },
    [C_SCATTERV] = { "scatterv", false, true, true, scatterv_prepare,
                     scatterv_call, scatterv_verify, rooted_v_touches,
                     rooted_v_moves },
    [C_ALLTOALL] = { "alltoall", false, false, true, alltoall_prepare,
                     alltoall_call, alltoall_verify, count_positive_j,
                     count_positive },
    [C_ALLTOALLV] = { "alltoallv", false, false, true, alltoallv_prepare,
                      alltoallv_call, alltoallv_verify, alltoallv_touches,
                      alltoallv_moves },
    [C_BARRIER] = { "barrier", false, false, false, nothing, barrier_call,
                    nothing, never_j, never },
};

/* --- running a phase on one communicator ---------------------------------- */

/* What every rank must agree on for one call, settled at phase end. */
typedef struct {
    char desc[160];
    int coll;                 /* C_* */
    bool zcopy, moves;        /* zcopy: the path expected (or, where */
    bool either;              /* either path was acceptable, taken) */
    bool inlined;             /* payload travelled in the control line */
    uint64_t moved;           /* ipc + ucx bytes this rank moved */
    uint64_t ucx;             /* of which between servers: through UCX, or
                                 through the point-to-point engine */
    uint64_t p2p;             /* of which the latter */
    uint64_t pushed;          /* alltoall(v) where auto pushes: bytes of
                                 the blocks this rank receives from other
                                 servers, an alltoall's of push_min or
                                 more, every one of an alltoallv's */
    uint64_t reason_hash;     /* of last_fallback_reason; 0 for zero-copy */
} log_entry_t;

typedef struct {
    MPI_Comm comm;
    const char *name;
    int rank, n;
    bool spans;               /* span mode, and the comm spans servers */
    bool pushes;              /* it spans them, and auto may push large
                                 alltoall blocks and every alltoallv
                                 block (phase_pushes) */
    int server[MAX_RANKS];    /* each rank's server (with pushes) */
    int max_group;            /* the most ranks of one server, where the
                                 comm spans servers (phase_pushes) */
    bool blocks_split;        /* comm_splits_blocks(), in span mode */
    bool packs;               /* comm_packs(), in span mode */
    bool activated[MAX_RANKS];
    uint64_t calls;
    log_entry_t *log;
    size_t nlog, caplog;
} phase_t;

static enum { MODE_ACTIVATED, MODE_MALLOC, MODE_MIXED } mode;
static bool span;             /* the job's WORLD spans servers */
static bool expect_p2p;       /* span-p2p: reads between servers go through
                                 the point-to-point engine (ucx_fetch pml,
                                 or auto's reads from ucx_p2p_min) */
static bool fetch_auto;       /* coll_zcopy_ucx_fetch is auto */
static unsigned long push_min; /* coll_zcopy_ucx_push_min */
static unsigned long total_calls;

static uint64_t fnv1a(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ULL;

    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 0x100000001b3ULL;
    return h | 1; /* never 0, the mark of a zero-copy call */
}

static bool comm_splits_blocks(const int *wranks, int n);
static bool comm_packs(const int *wranks, int n);

/* Whether auto pushes alltoall blocks of push_min bytes or more (and every
 * alltoallv block) between the servers of WORLD or its dup, @ph: where
 * some server has several of its ranks (a host's ranks split into
 * coll_zcopy_virtual_servers runs of consecutive local ranks,
 * src/topo/server.c), not under coll_zcopy_transport ucx (one rank a
 * server), nor where any host has an RDMA device. Sets ph->server, each rank's server, and ph->max_group
 * (every rank a server of its own under coll_zcopy_transport ucx). */
static bool phase_pushes(phase_t *ph)
{
    const int vs = zt_cvar_int("coll_zcopy_virtual_servers", 1);
    const int servers = vs > 1 ? vs : 1; /* as the library clamps it */
    int local, index, mine[2], most, rdma = zt_host_has_rdma(), any_rdma;
    int all[MAX_RANKS][2];
    MPI_Comm host;

    MPI_Comm_split_type(ph->comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL,
                        &host);
    MPI_Comm_size(host, &local);
    MPI_Comm_rank(host, &index);
    mine[0] = ph->rank;
    MPI_Bcast(&mine[0], 1, MPI_INT, 0, host);
    MPI_Comm_free(&host);
    MPI_Allreduce(&local, &most, 1, MPI_INT, MPI_MAX, ph->comm);
    MPI_Allreduce(&rdma, &any_rdma, 1, MPI_INT, MPI_MAX, ph->comm);
    /* A server: this host (its first rank in the comm) and the run of
     * local ranks. */
    mine[1] = index / ((local + servers - 1) / servers);
    MPI_Allgather(mine, 2, MPI_INT, all, 2, MPI_INT, ph->comm);
    for (int r = 0; r < ph->n; r++)
        ph->server[r] = all[r][0] * 4096 + all[r][1];
    for (int r = 0; r < ph->n; r++) {
        int same = 0;

        for (int j = 0; j < ph->n; j++)
            same += ph->server[j] == ph->server[r];
        if (same > ph->max_group)
            ph->max_group = same;
    }
    if (zt_cvar_int("coll_zcopy_transport", 0) == 2)
        ph->max_group = 1;
    return fetch_auto && push_min > 0 && !any_rdma &&
           zt_cvar_int("coll_zcopy_transport", 0) != 2 &&
           (most + servers - 1) / servers > 1;
}

static void phase_begin(phase_t *ph, MPI_Comm comm, const char *name)
{
    MPI_Group world, group;
    int ranks[MAX_RANKS], wranks[MAX_RANKS];

    memset(ph, 0, sizeof(*ph));
    ph->comm = comm;
    ph->name = name;
    MPI_Comm_rank(comm, &ph->rank);
    MPI_Comm_size(comm, &ph->n);
    /* In a span job WORLD spans servers by construction, and so does its
     * dup; whether a split does depends on how ranks fall on servers. */
    ph->spans = span && (comm == MPI_COMM_WORLD || strcmp(name, "dup") == 0);
    ph->pushes = ph->spans && phase_pushes(ph);
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    MPI_Comm_group(comm, &group);
    for (int j = 0; j < ph->n; j++)
        ranks[j] = j;
    MPI_Group_translate_ranks(group, ph->n, ranks, world, wranks);
    ph->blocks_split = span && comm_splits_blocks(wranks, ph->n);
    ph->packs = span && comm_packs(wranks, ph->n);
    /* Which members use the arena: nobody in malloc mode, every rank but
     * world rank 1 in mixed mode. */
    for (int j = 0; j < ph->n; j++)
        ph->activated[j] = mode == MODE_ACTIVATED ||
                           (mode == MODE_MIXED && wranks[j] != 1);
    MPI_Group_free(&group);
    MPI_Group_free(&world);
}

static bool expect_zcopy(const coll_case_t *c)
{
    if (mode == MODE_MALLOC)
        return false;
    if (c->type != NULL && !c->type->contiguous)
        return false;
    if (c->op != NULL && !c->op->eligible)
        return false;
    for (int j = 0; j < c->n; j++)
        if (!c->activated[j] && c->coll->touches(c, j))
            return false;
    return true;
}

/* coll_zcopy_inline_max, coll_zcopy_inline_max_yield (never below the
 * first), coll_zcopy_span_inline_max and coll_zcopy_yield, as the job runs
 * them (read after MPI_Init). */
static unsigned long inline_max, inline_max_yield, span_inline_max;
/* zcopy's server of each rank of WORLD (world_servers()), in span jobs. */
static int world_server[MAX_RANKS];
static int yield;
/* What an inline record holds (larger settings act as this) while waits
 * spin and where they yield, and what the arrivals of a communicator that
 * spans servers carry at most in all. */
#define INLINE_CAPACITY 1072
#define INLINE_YIELD_CAPACITY (256 * 1024)
#define SPAN_PAYLOAD_MAX ((size_t)4 << 20)
#define SPAN_PAYLOAD_ALL_MAX ((size_t)1 << 20)

/* Whether a payload of @bytes per rank rides with the arrivals between
 * servers: at most coll_zcopy_span_inline_max (a quarter of it where each
 * rank reads one block of n, reduce_scatter_block, scatter, alltoall,
 * unless leaders send each server only its ranks' blocks; twice it for
 * bcast, scatter and alltoall otherwise; for allreduce over @max_group,
 * the most ranks of one server, or twice it where that is 1), and what
 * every sender's
 * payload needs fits the plane's area (n payloads of up to twice the
 * parameter, or the root's alone; within 1 MiB but for bcast, scatter and
 * alltoall). */
static bool span_carries(const coll_case_t *c, size_t bytes,
                         bool blocks_split, int max_group)
{
    const size_t n = (size_t)c->n;
    const char *name = c->coll->name;
    const bool root_only = strcmp(name, "bcast") == 0 ||
                           strcmp(name, "scatter") == 0;
    const bool blocks = strcmp(name, "reduce_scatter_block") == 0 ||
                        strcmp(name, "scatter") == 0 ||
                        strcmp(name, "alltoall") == 0;
    const bool once = root_only || strcmp(name, "alltoall") == 0;
    const size_t m = (size_t)max_group;
    const size_t limit = blocks && !blocks_split ? span_inline_max / 4
                         : once                  ? 2 * span_inline_max
                         : strcmp(name, "allreduce") == 0
                             ? (m == 1 ? 2 * span_inline_max
                                       : span_inline_max / m)
                             : span_inline_max;
    size_t area = 2 * span_inline_max > SPAN_PAYLOAD_MAX / n
                      ? SPAN_PAYLOAD_MAX
                      : (2 * span_inline_max * n + 63) / 64 * 64;

    if (!once && area > SPAN_PAYLOAD_ALL_MAX)
        area = SPAN_PAYLOAD_ALL_MAX;

    /* Each sender's payload takes whole cache lines. */
    return bytes <= limit &&
           (bytes + 63) / 64 * 64 <= area / (root_only ? 1 : n);
}

/* Whether the job's settings say which inline limit a communicator inside
 * one server has: where waits surely yield (coll_zcopy_yield 1) or surely
 * spin (2), or where both limits are the same (the suite's default). */
static bool limit_known(void)
{
    return yield == 1 || yield == 2 || inline_max_yield == inline_max;
}

static size_t limit_expected(void)
{
    return yield == 1 ? inline_max_yield : inline_max;
}

/* The in-server limit of @stats' communicator: the settings' where they
 * are certain, else what it reports (or, before its first collective,
 * coll_zcopy_inline_max). */
static size_t limit_of(const MPIX_Zcopy_stats *stats)
{
    if (limit_known())
        return limit_expected();
    return stats->inline_max ? stats->inline_max : inline_max;
}

/* An alltoallv between servers rides the arrival where every rank's
 * blocks, after a table of n + 1 four-byte offsets, fit its slot, in
 * whole lines: twice coll_zcopy_span_inline_max within the payload area
 * over the ranks, where leaders pack (ph->packs; in place too, else it
 * falls back; src/coll/span/span.c, span_vslot). Inside a server it never
 * does. 1, 0, or -1 where the communicator may or may not span servers.
 * Where every server holds one rank the call is handed over before any
 * of this unless coll_zcopy_one_per_server_moves, which the suite sets
 * (tests/CMakeLists.txt); the jobs that test its default run
 * test_one_per_server. */
static int expect_vcarried(const coll_case_t *c, const phase_t *ph)
{
    const size_t n = (size_t)c->n;
    const size_t area = 2 * span_inline_max > SPAN_PAYLOAD_MAX / n
                            ? SPAN_PAYLOAD_MAX
                            : (2 * span_inline_max * n + 63) / 64 * 64;
    size_t slot = 2 * span_inline_max <= SPAN_PAYLOAD_MAX
                      ? 2 * span_inline_max : span_inline_max;

    if (!span || !ph->packs)
        return 0;
    if (slot > area / n)
        slot = area / n;
    slot -= slot % 64;
    if (slot <= (n + 1) * 4)
        return 0;
    for (int j = 0; j < c->n; j++) {
        size_t bytes = (n + 1) * 4;

        for (int k = 0; k < c->n; k++)
            bytes += (size_t)a2a_count(c, j, k) * c->type->extent;
        if (bytes > slot)
            return 0;
    }
    return ph->spans ? 1 : -1;
}

/* zcopy's rule for small collectives (docs/design.md, "Small messages"):
 * when every rank's payload is 1 to @limit bytes in a server
 * (coll_zcopy_inline_max, at most 1072, or coll_zcopy_inline_max_yield
 * where waits yield: limit_of()), or small enough for span_carries()
 * between servers, it travels in the control plane. The payload is a
 * rank's input for reductions, bcast, allgather and gather, the largest
 * rank's for allgatherv (every rank knows the counts), and its n blocks
 * for reduce_scatter_block, scatter and alltoall. Returns 1
 * (inline), 0 (not), or -1 when it depends on whether a split of a span
 * job lies in one server, which the test does not know. */
static int expect_inline(const coll_case_t *c, const phase_t *ph,
                         size_t limit)
{
    static const char *const whole[] = { "allreduce", "reduce", "bcast",
                                         "allgather", "gather" };
    static const char *const blocks[] = { "reduce_scatter_block", "scatter",
                                          "alltoall" };
    size_t bytes = 0;
    int in_server, between;

    if (c->type == NULL)
        return 0;
    if (strcmp(c->coll->name, "alltoallv") == 0)
        return expect_vcarried(c, ph);
    for (size_t i = 0; i < sizeof(whole) / sizeof(whole[0]); i++)
        if (strcmp(c->coll->name, whole[i]) == 0)
            bytes = c->count * c->type->extent;
    for (size_t i = 0; i < sizeof(blocks) / sizeof(blocks[0]); i++)
        if (strcmp(c->coll->name, blocks[i]) == 0)
            bytes = c->count * c->type->extent * (size_t)c->n;
    for (int j = 0; strcmp(c->coll->name, "allgatherv") == 0 && j < c->n; j++)
        if ((size_t)c->counts[j] * c->type->extent > bytes)
            bytes = (size_t)c->counts[j] * c->type->extent;
    if (bytes == 0)
        return 0;
    in_server = bytes <= limit;
    if (!span)
        return in_server;
    /* A split's servers are not known here: its answer must not depend
     * on how many of its ranks share one. */
    between = span_carries(c, bytes, ph->blocks_split,
                           ph->spans ? ph->max_group : 1);
    if (ph->spans)
        return between;
    if (in_server == between &&
        between == span_carries(c, bytes, ph->blocks_split, ph->n))
        return between;
    return -1;
}

/* Open MPI's MPI layer returns before any coll component for some calls
 * with nothing to do (count 0 in allreduce, reduce, bcast, allgather,
 * gather, scatter, alltoall; all-zero counts in reduce_scatter): then no
 * counter moves, on every rank alike. */
static bool empty_call(const coll_case_t *c)
{
    if (c->type == NULL || c->count != 0)
        return false;
    for (int j = 0; j < c->n; j++)
        if (c->coll->touches(c, j))
            return false;
    return true;
}

static void run_case(phase_t *ph, int coll, const type_desc_t *type,
                     const op_desc_t *op, size_t count, int root, bool in_place)
{
    static coll_case_t c; /* big arrays: not on the stack */
    MPIX_Zcopy_stats before, after;
    uint64_t dz, df, di;
    log_entry_t *e;
    bool zcopy, either, fell_back = false;
    int rc;

    memset(&c, 0, sizeof(c));
    c.coll = &colls[coll];
    c.type = type;
    c.op = op;
    c.count = count;
    c.root = root;
    c.in_place = in_place;
    c.comm = ph->comm;
    c.rank = ph->rank;
    c.n = ph->n;
    c.activated = ph->activated;
    c.seed = mix64(++ph->calls * 0x9e3779b97f4a7c15ULL);
    snprintf(c.desc, sizeof(c.desc),
             "%s %s %s count=%zu root=%d in_place=%d comm=%s(n=%d) call=%" PRIu64,
             c.coll->name, type ? type->name : "-", op ? op->name : "-", count,
             root, in_place, ph->name, ph->n, ph->calls);
    pool.used = 0;
    c.coll->prepare(&c);
    before = zt_stats(c.comm); /* for the limit; again just before the call */
    zcopy = c.zcopy = expect_zcopy(&c);
    /* Span mode: in place, alltoall(v) cannot swap blocks with a peer on
     * another server (unless the payload is tiny enough to travel inline),
     * and a split may or may not lie in one server. On a comm known to
     * span servers the path is certain. */
    either = span && zcopy && c.n >= 2 && in_place &&
             (coll == C_ALLTOALL || coll == C_ALLTOALLV) &&
             expect_inline(&c, ph, limit_of(&before)) != 1;
    if (either && ph->spans) {
        either = false;
        zcopy = false;
    }

    before = zt_stats(c.comm);
    rc = c.coll->call(&c);
    after = zt_stats(c.comm);
    total_calls++;

    ZT_CHECK(rc == MPI_SUCCESS, "%s: rank %d: returned %d", c.desc, c.rank, rc);
    di = after.inline_calls - before.inline_calls;
    dz = after.zcopy_calls - before.zcopy_calls;
    df = after.fallback_calls - before.fallback_calls;
    if (c.n < 2) /* no component on a single-rank comm: stats stay zero */
        ZT_CHECK(dz == 0 && df == 0, "%s: rank %d: zcopy +%" PRIu64
                 " fallback +%" PRIu64 " on a single-rank comm", c.desc,
                 c.rank, dz, df);
    else if (empty_call(&c) && dz == 0 && df == 0)
        ZT_CHECK(true, "%s", c.desc); /* Open MPI returned before coll */
    else if (either && dz == 0 && df == 1 &&
             strstr(after.last_fallback_reason, "in place across servers")) {
        fell_back = true; /* logged as a fallback: phase end checks it so */
        ZT_CHECK(strstr(after.last_fallback_reason, c.coll->name) != NULL,
                 "%s: rank %d: fallback reason \"%s\" does not name the "
                 "collective", c.desc, c.rank, after.last_fallback_reason);
    }
    else if (zcopy) {
        ZT_CHECK(dz == 1 && df == 0, "%s: rank %d: expected zero-copy%s, got "
                 "zcopy +%" PRIu64 " fallback +%" PRIu64 " (last reason: %s)",
                 c.desc, c.rank, either ? " or a fallback \"in place across "
                 "servers\"" : "", dz, df, after.last_fallback_reason);
        const int inl = expect_inline(&c, ph, limit_of(&after));

        /* A communicator inside one server that just went zero-copy
         * reports the limit the settings say, where they say it. */
        if (!span && limit_known())
            ZT_CHECK(after.inline_max == limit_expected(), "%s: rank %d: "
                     "inline limit %" PRIu64 ", expected %zu", c.desc,
                     c.rank, after.inline_max, limit_expected());

        ZT_CHECK(inl < 0 ? di <= 1 : di == (uint64_t)inl, "%s: rank %d: "
                 "inline +%" PRIu64 ", expected %s", c.desc, c.rank, di,
                 inl < 0 ? "0 or 1" : inl ? "1" : "0");
    }
    else {
        ZT_CHECK(dz == 0 && df == 1, "%s: rank %d: expected a fallback, got "
                 "zcopy +%" PRIu64 " fallback +%" PRIu64 "%s", c.desc, c.rank,
                 dz, df, dz + df > 1 ? " (collectives nested in the previous "
                 "component's algorithm re-entered zcopy)" : "");
        ZT_CHECK(strstr(after.last_fallback_reason, c.coll->name) != NULL,
                 "%s: rank %d: fallback reason \"%s\" does not name the "
                 "collective", c.desc, c.rank, after.last_fallback_reason);
        if (expect_zcopy(&c)) /* only in-place alltoall(v) across servers */
            ZT_CHECK(strstr(after.last_fallback_reason, "in place across "
                            "servers") != NULL, "%s: rank %d: fallback "
                     "reason \"%s\", expected \"in place across servers\"",
                     c.desc, c.rank, after.last_fallback_reason);
        if (mode == MODE_MALLOC)
            ZT_CHECK(strstr(after.last_fallback_reason, "memory range") !=
                     NULL, "%s: rank %d: fallback reason \"%s\", expected "
                     "\"no rank had set a memory range\"", c.desc, c.rank,
                     after.last_fallback_reason);
    }
    c.coll->verify(&c);

    if (ph->nlog == ph->caplog) {
        ph->caplog = ph->caplog ? 2 * ph->caplog : 1024;
        ph->log = realloc(ph->log, ph->caplog * sizeof(*ph->log));
    }
    e = &ph->log[ph->nlog++];
    memcpy(e->desc, c.desc, sizeof(e->desc));
    e->coll = coll;
    e->zcopy = zcopy && !fell_back && c.n >= 2;
    e->either = either;
    e->inlined = di == 1;
    e->moves = c.coll->moves(&c);
    e->p2p = after.p2p_bytes - before.p2p_bytes;
    e->pushed = 0;
    for (int j = 0; ph->pushes && c.type && j < c.n; j++) {
        const uint64_t bytes = (coll == C_ALLTOALL ? c.count
                                : coll == C_ALLTOALLV ? (size_t)c.counts[j]
                                                      : 0) * c.type->extent;

        if (ph->server[j] != ph->server[c.rank] &&
            (coll == C_ALLTOALLV || bytes >= push_min))
            e->pushed += bytes;
    }
    e->ucx = after.ucx_bytes - before.ucx_bytes + e->p2p;
    e->moved = after.ipc_bytes - before.ipc_bytes + e->ucx;
    e->reason_hash = e->zcopy ? 0 : fnv1a(after.last_fallback_reason);
}

/* On a communicator that spans servers, each collective that ran zero-copy
 * with data to move, not inline, sent some of it through UCX: summed over
 * its calls (a
 * call whose ranks all share a server, e.g. a bcast within one, may rightly
 * move none) and over all ranks (either side may count a transfer). */
static void check_ucx_per_collective(const phase_t *ph, const uint64_t *ucx)
{
    uint64_t bytes[C_COUNT] = { 0 };
    unsigned calls[C_COUNT] = { 0 };

    for (size_t i = 0; i < ph->nlog; i++) {
        const log_entry_t *e = &ph->log[i];
        bytes[e->coll] += ucx[i];
        calls[e->coll] += e->zcopy && e->moves && !e->inlined;
    }
    for (int k = 0; k < C_COUNT; k++)
        if (calls[k] > 0)
            ZT_CHECK(bytes[k] > 0, "phase %s (n=%d, spans servers): %s: %u "
                     "zero-copy calls with data to move, yet no byte between "
                     "servers (ucx_bytes + p2p_bytes summed over the calls "
                     "and all ranks)",
                     ph->name, ph->n, colls[k].name, calls[k]);
}

/* Where auto pushes (ph->pushes): an alltoall whose blocks went through
 * the point-to-point engine (all of them or none: one size), or an
 * alltoallv, whose blocks all go so whatever their size. */
static bool pushable(const phase_t *ph, const log_entry_t *e)
{
    return ph->pushes && (e->coll == C_ALLTOALLV ||
                          (e->coll == C_ALLTOALL && e->pushed > 0));
}

/* With "span-p2p" (coll_zcopy_ucx_fetch pml, or a low
 * coll_zcopy_ucx_p2p_min), reads between servers go through the
 * point-to-point engine: a spanning phase that moved data
 * between servers moved some that way (puts stay UCX's, and a phase may
 * move its data by puts alone only if it has no read: none here). Under
 * auto, where servers have several ranks, alltoall blocks of
 * coll_zcopy_ucx_push_min or more, and every alltoallv block, are pushed
 * through it instead of read: every such call that ran zero-copy received
 * exactly its blocks from other servers that way, summed over the ranks. */
static void check_p2p_phase(const phase_t *ph)
{
    uint64_t mine = 0, p2p = 0, between = 0, all = 0;
    uint64_t mine_rooted = 0, rooted = 0, v[2], sum[2];

    for (size_t i = 0; i < ph->nlog; i++) {
        const log_entry_t *e = &ph->log[i];

        if (pushable(ph, e)) {
            v[0] = e->p2p;
            v[1] = e->zcopy && !e->inlined ? e->pushed : 0;
            MPI_Allreduce(v, sum, 2, MPI_UINT64_T, MPI_SUM, ph->comm);
            ZT_CHECK(sum[0] == sum[1], "%s: %" PRIu64 " bytes through the "
                     "point-to-point engine, %" PRIu64 " expected: every "
                     "alltoallv block and every alltoall block of "
                     "coll_zcopy_ucx_push_min (%lu) bytes or more between "
                     "servers pushed", e->desc, sum[0], sum[1],
                     push_min);
            continue;
        }
        mine += e->p2p;
        between += e->ucx;
        if (e->coll == C_BCAST || e->coll == C_SCATTER)
            mine_rooted += e->p2p;
    }
    MPI_Allreduce(&mine, &p2p, 1, MPI_UINT64_T, MPI_SUM, ph->comm);
    MPI_Allreduce(&between, &all, 1, MPI_UINT64_T, MPI_SUM, ph->comm);
    MPI_Allreduce(&mine_rooted, &rooted, 1, MPI_UINT64_T, MPI_SUM, ph->comm);
    if (ph->rank != 0)
        return;
    /* auto's large reads leave the root of a bcast or scatter, which
     * answers every reader, to UCX's tagged sends. */
    if (expect_p2p && fetch_auto)
        ZT_CHECK(rooted == 0, "phase %s (n=%d): %" PRIu64 " p2p_bytes read "
                 "from the roots of bcasts and scatters, which auto keeps on "
                 "UCX", ph->name, ph->n, rooted);
    if (expect_p2p)
        ZT_CHECK(all == 0 || p2p > 0, "phase %s (n=%d): %" PRIu64 " bytes "
                 "between servers, none through the point-to-point engine "
                 "(p2p_bytes)", ph->name, ph->n, all);
    else
        ZT_CHECK(p2p == 0, "phase %s (n=%d): %" PRIu64 " p2p_bytes, though "
                 "no read asked for the point-to-point engine (pml, or "
                 "coll_zcopy_ucx_p2p_min)", ph->name, ph->n, p2p);
}

/* Per call, over all ranks: a zero-copy call that had data to move between
 * ranks moved some through mappings or UCX, one with nothing to move moved
 * nothing, a fallback moved nothing through zcopy, and every rank recorded
 * the same path (and, where either path was acceptable, the same reason: a
 * zero-copy call records reason 0). */
static void phase_end(phase_t *ph)
{
    const int m = (int)ph->nlog;
    uint64_t *v = malloc(4 * (size_t)(m ? m : 1) * sizeof(uint64_t));
    uint64_t *sum = malloc(4 * (size_t)(m ? m : 1) * sizeof(uint64_t));

    /* [moved | ucx] summed, [hash | ~hash] by min */
    for (int i = 0; i < m; i++) {
        v[i] = ph->log[i].moved;
        v[m + i] = ph->log[i].ucx;
        v[2 * m + i] = ph->log[i].reason_hash;
        v[3 * m + i] = ~ph->log[i].reason_hash; /* max via min */
    }
    MPI_Allreduce(v, sum, 2 * m, MPI_UINT64_T, MPI_SUM, ph->comm);
    MPI_Allreduce(v + 2 * m, sum + 2 * m, 2 * m, MPI_UINT64_T, MPI_MIN,
                  ph->comm);
    if (ph->spans && ph->rank == 0 && ph->n >= 2)
        check_ucx_per_collective(ph, sum + m);
    if (ph->spans && ph->n >= 2)
        check_p2p_phase(ph);
    for (int i = 0; i < m && ph->rank == 0 && ph->n >= 2; i++) {
        const log_entry_t *e = &ph->log[i];
        uint64_t moved = sum[i], hmin = sum[2 * m + i],
                 hmax = ~sum[3 * m + i];

        if (!e->zcopy)
            ZT_CHECK(moved == 0, "%s: a fallback moved %" PRIu64
                     " bytes through zcopy", e->desc, moved);
        else if (e->inlined)
            ZT_CHECK(moved == 0, "%s: an inline call counted %" PRIu64
                     " bytes through mappings", e->desc, moved);
        else if (e->moves)
            ZT_CHECK(moved > 0, "%s: zero-copy call moved no bytes "
                     "(ipc_bytes + ucx_bytes + p2p_bytes over all ranks)",
                     e->desc);
        else
            ZT_CHECK(moved == 0, "%s: moved %" PRIu64 " bytes though no "
                     "data crosses ranks", e->desc, moved);
        /* Each rank's reason is its own, or the first declining peer's
         * (ranks may decline for different reasons, a zero-count block
         * against a buffer): only where either path was acceptable must
         * they agree, on the path and its reason. */
        if (e->either)
            ZT_CHECK(hmin == hmax, "%s: ranks disagree on the path or the "
                     "fallback reason", e->desc);
    }
    free(v);
    free(sum);
    free(ph->log);
    ph->log = NULL;
}

/* --- what runs ------------------------------------------------------------ */

/* Every in-place variant and root a collective allows, at one size. */
static void sweep(phase_t *ph, int coll, const type_desc_t *type,
                  const op_desc_t *op, size_t count)
{
    const coll_desc_t *d = &colls[coll];

    for (int in_place = 0; in_place <= (d->in_place_ok ? 1 : 0); in_place++)
        for (int root = d->rooted ? 0 : -1; root < (d->rooted ? ph->n : 0);
             root++)
            run_case(ph, coll, type, op, count, root, in_place);
}

static bool op_applies(const op_desc_t *op, const type_desc_t *t)
{
    return (op->applies & t->cls) != 0;
}

/* The 1 MiB size runs for every type with its first op, and every op on
 * int32 (the sliced and chunked paths per kernel): the rest of the matrix
 * would only repeat those paths at much more verification time. */
static bool large_ok(const op_desc_t *op, const type_desc_t *t)
{
    if (t->cls & T_INT32)
        return true;
    for (size_t i = 0; i < NOPS; i++)
        if (op_applies(&ops[i], t))
            return &ops[i] == op;
    return false;
}

/* Between servers, alltoall, reduce_scatter_block and scatter carry a
 * payload of n blocks with the arrival up to a quarter of
 * coll_zcopy_span_inline_max where leaders send other servers whole
 * payloads, and at least all of it where they send each server only its
 * ranks' blocks (span_carries): a count whose payload per rank, 128 KiB,
 * lies between the two (with the suite's 256 KiB) tells them apart. */
static size_t span_window_count(const phase_t *ph, const type_desc_t *t)
{
    return 128 * KIB / t->extent / (size_t)ph->n;
}

/* bcast, scatter and alltoall carry up to twice
 * coll_zcopy_span_inline_max where the others carry it once (span_carries):
 * a count whose payload per rank, 384 KiB, lies between the two (with the
 * suite's 256 KiB) tells them apart, where the area holds it (up to 8
 * ranks for alltoall) and blocks are split (not where leaders pass rounds
 * in steps, which keeps scatter and alltoall at a quarter). gather and
 * allgather, whose payload is a rank's input, get the same count, and
 * the v-forms 384 KiB per block (allgatherv rides as allgather by its
 * largest block; alltoallv rides by every rank's blocks, expect_vcarried;
 * the others never ride the arrival). */
static size_t span_twice_count(const phase_t *ph, int coll,
                               const type_desc_t *t)
{
    const bool blocks = coll == C_SCATTER || coll == C_ALLTOALL;

    return 384 * KIB / t->extent / (blocks ? (size_t)ph->n : 1);
}

/* An allreduce between servers carries coll_zcopy_span_inline_max over
 * the most ranks of one server with the arrival, or twice it where every
 * server has one, within 1 MiB of payloads in all (span_carries): with
 * the suite's 256 KiB, a vector of 128 KiB rides where a server has up to
 * 2 ranks (the limit is inclusive), one of 192 KiB only where every server
 * has one, and one of 320 KiB there on up to 3 servers. */
static size_t span_allreduce_count(const type_desc_t *t, size_t kib)
{
    return kib * KIB / t->extent;
}

static void run_reductions(phase_t *ph)
{
    static const int reductions[] = { C_ALLREDUCE, C_REDUCE, C_REDUCE_SCATTER,
                                      C_RSB };

    for (size_t ci = 0; ci < sizeof(reductions) / sizeof(reductions[0]); ci++) {
        const int coll = reductions[ci];
        for (size_t ti = 0; ti < NTYPES; ti++) {
            const type_desc_t *t = &types[ti];
            /* Reductions: totals; reduce_scatter_block: per block, the
             * largest making ~1 MiB in all. */
            const size_t large = coll == C_RSB
                ? MIB / t->extent / (size_t)ph->n + 3 : MIB / t->extent + 3;
            const size_t counts[] = { 0, 1, 7, 4 * KIB / t->extent, large,
                                      coll == C_RSB
                                          ? span_window_count(ph, t)
                                          : span_allreduce_count(t, 128),
                                      span_allreduce_count(t, 192),
                                      span_allreduce_count(t, 320) };
            /* The windows between servers: the payloads of blocks, and
             * allreduce's. */
            const size_t nsizes = !span              ? 5
                                  : coll == C_RSB       ? 6
                                  : coll == C_ALLREDUCE ? 8
                                                        : 5;
            for (size_t oi = 0; oi < NOPS; oi++) {
                if (!op_applies(&ops[oi], t))
                    continue;
                for (size_t k = 0; k < nsizes; k++)
                    if (k < 4 || large_ok(&ops[oi], t))
                        sweep(ph, coll, t, &ops[oi], counts[k]);
            }
        }
    }
}

static void run_movement(phase_t *ph)
{
    static const char *const names[] = { "int8", "int32", "double", "2int",
                                         "double_int" };

    for (int coll = C_ALLGATHER; coll <= C_ALLTOALLV; coll++)
        for (size_t ti = 0; ti < sizeof(names) / sizeof(names[0]); ti++) {
            const type_desc_t *t = type_named(names[ti]);
            const size_t counts[] = { 0, 1, 7, 4 * KIB / t->extent,
                                      256 * KIB / t->extent,
                                      span_window_count(ph, t) };
            /* The non-contiguous pair falls back anyway: small sizes do. */
            const size_t nsizes = !t->contiguous ? 3 : span ? 6 : 5;
            for (size_t k = 0; k < nsizes; k++)
                sweep(ph, coll, t, NULL, counts[k]);
            if (span && t->cls & T_INT32)
                sweep(ph, coll, t, NULL, span_twice_count(ph, coll, t));
        }
    for (int k = 0; k < 3; k++)
        run_case(ph, C_BARRIER, NULL, NULL, 0, -1, false);
}

/* On sub-communicators of memory activated on WORLD: a smaller set. */
static void run_subset(phase_t *ph)
{
    const type_desc_t *i8 = type_named("int8"), *i32 = type_named("int32"),
                      *dbl = type_named("double");
    const op_desc_t *sum = op_named("SUM"), *umax = op_named("user_max");
    const size_t sizes32[] = { 1, 7, 4 * KIB / 4, MIB / 4 + 3 };
    const size_t sizes64[] = { 1, 7, 4 * KIB / 8, MIB / 8 + 3 };

    for (size_t k = 0; k < 4; k++) {
        sweep(ph, C_ALLREDUCE, i32, sum, sizes32[k]);
        sweep(ph, C_ALLREDUCE, dbl, sum, sizes64[k]);
        sweep(ph, C_ALLREDUCE, i32, umax, sizes32[k]);
    }
    for (size_t k = 0; k < 3; k++) {
        sweep(ph, C_BCAST, i32, NULL, sizes32[k]);
        sweep(ph, C_ALLGATHER, i8, NULL, sizes32[k] * 4);
        sweep(ph, C_ALLGATHER, dbl, NULL, sizes64[k]);
        sweep(ph, C_ALLTOALL, i32, NULL, sizes32[k]);
    }
    if (span) /* whether a split's own servers split blocks */
        sweep(ph, C_ALLTOALL, i32, NULL, span_window_count(ph, i32));
    run_case(ph, C_BARRIER, NULL, NULL, 0, -1, false);
}

static int env_int(const char *name, int dflt)
{
    const char *v = getenv(name);

    return v && *v ? atoi(v) : dflt;
}

/* The server of each rank of WORLD, as zcopy sees servers (a host, cut
 * into coll_zcopy_virtual_servers blocks of local ranks), named by its
 * first rank, into @server[n]. */
static void world_servers(int *server)
{
    const int vs = env_int("OMPI_MCA_coll_zcopy_virtual_servers", 1);
    const int local = env_int("OMPI_COMM_WORLD_LOCAL_RANK", 0);
    const int local_size = env_int("OMPI_COMM_WORLD_LOCAL_SIZE", 1);
    const int block = (local_size + vs - 1) / (vs > 0 ? vs : 1);
    int wrank, key, first;
    MPI_Comm host, comm;

    MPI_Comm_rank(MPI_COMM_WORLD, &wrank);
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, wrank,
                        MPI_INFO_NULL, &host);
    key = block > 0 ? local / block : 0;
    MPI_Comm_split(host, key, wrank, &comm);
    MPI_Allreduce(&wrank, &first, 1, MPI_INT, MPI_MIN, comm);
    MPI_Allgather(&first, 1, MPI_INT, server, 1, MPI_INT, MPI_COMM_WORLD);
    MPI_Comm_free(&comm);
    MPI_Comm_free(&host);
}

/* Whether some server holds several ranks of WORLD (world_server, so in
 * span jobs). */
static bool a_server_holds_several(void)
{
    int n;

    MPI_Comm_size(MPI_COMM_WORLD, &n);
    for (int r = 0; r < n; r++)
        if (world_server[r] != r)
            return true;
    return false;
}

/* How a communicator of WORLD ranks @wranks[n] lies on servers: how many,
 * the most ranks of one, the most runs of consecutive ranks in one; and
 * whether its leaders pass rounds in steps (from
 * coll_zcopy_span_dissemination_min servers). */
typedef struct {
    int servers, most, runs_most;
    bool steps;
} comm_servers_t;

static comm_servers_t comm_servers(const int *wranks, int n)
{
    const bool ucx = zt_cvar_int("coll_zcopy_transport", 0) == 2;
    const int steps_from = zt_cvar_int("coll_zcopy_span_dissemination_min",
                                       64);
    comm_servers_t c = { 0 };
    int server[MAX_RANKS];

    /* With the ucx transport every rank is a server of its own. */
    for (int j = 0; j < n; j++)
        server[j] = ucx ? wranks[j] : world_server[wranks[j]];
    for (int first = 0; first < n; first++) {
        int size = 0, runs = 0, last = -2;
        bool seen = false;

        for (int j = 0; j < first && !seen; j++)
            seen = server[j] == server[first];
        if (seen)
            continue; /* counted with its first member */
        for (int j = first; j < n; j++) {
            if (server[j] != server[first])
                continue;
            size++;
            runs += j != last + 1;
            last = j;
        }
        c.servers++;
        c.most = size > c.most ? size : c.most;
        c.runs_most = runs > c.runs_most ? runs : c.runs_most;
    }
    c.steps = steps_from > 0 && c.servers >= steps_from;
    return c;
}

/* Whether the leaders of a communicator of WORLD ranks @wranks[n] send
 * each server only the blocks its ranks read of alltoall,
 * reduce_scatter_block and scatter payloads (src/coll/span/plane.c), so
 * that those ride the arrival up to the whole coll_zcopy_span_inline_max
 * (twice it for scatter and alltoall):
 * not where rounds go in steps (from coll_zcopy_span_dissemination_min
 * servers), nor where a message would take more than 256 pieces (1 + the
 * largest server's ranks times the most runs of consecutive ranks of the
 * communicator in a server). */
static bool comm_splits_blocks(const int *wranks, int n)
{
    const comm_servers_t c = comm_servers(wranks, n);

    return c.servers > 1 && !c.steps && 1 + c.most * c.runs_most <= 256;
}

/* Whether the leaders of a communicator of WORLD ranks @wranks[n] send
 * payloads that vary by rank (an alltoallv's packed blocks), each server
 * of each member's payload only its table and its ranks' blocks
 * (src/coll/span/plane.c, plane_packs): several servers, rounds not in
 * steps, and within 256 pieces a message (1 + the most ranks of a server
 * times one more than the most runs). */
static bool comm_packs(const int *wranks, int n)
{
    const comm_servers_t c = comm_servers(wranks, n);

    return c.servers > 1 && !c.steps &&
           1 + c.most * (1 + c.runs_most) <= 256;
}

/* WORLD's phase on a job that spans servers: mappings carried the part
 * inside servers (summed over all calls and ranks). */
static void check_mapped_inside(const MPIX_Zcopy_stats *before)
{
    const char *transport = getenv("OMPI_MCA_coll_zcopy_transport");
    MPIX_Zcopy_stats after = zt_stats(MPI_COMM_WORLD);
    unsigned long long mine = after.ipc_bytes - before->ipc_bytes, all;
    bool several = a_server_holds_several();

    MPI_Allreduce(&mine, &all, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM,
                  MPI_COMM_WORLD);
    if (transport && strcmp(transport, "ucx") == 0)
        return;
    ZT_CHECK((all > 0) == several, "phase world (spans servers): %llu bytes "
             "through mappings, yet %s server holds several ranks", all,
             several ? "a" : "no");
}

static void run_phase(MPI_Comm comm, const char *name, void (*body)(phase_t *))
{
    phase_t ph;

    phase_begin(&ph, comm, name);
    body(&ph);
    phase_end(&ph);
}

static void run_world(phase_t *ph)
{
    run_reductions(ph);
    run_movement(ph);
}

/* Sub-communicators: halves, odd/even in reverse order, and a dup. */
static void run_splits(int wrank, int wsize)
{
    MPI_Comm half, parity, dup;
    char name[32];

    MPI_Comm_split(MPI_COMM_WORLD, wrank < wsize / 2, wrank, &half);
    snprintf(name, sizeof(name), "half%d", wrank < wsize / 2);
    run_phase(half, name, run_subset);
    MPI_Comm_free(&half);

    MPI_Comm_split(MPI_COMM_WORLD, wrank % 2, wsize - wrank, &parity);
    snprintf(name, sizeof(name), "parity%d", wrank % 2);
    run_phase(parity, name, run_subset);
    MPI_Comm_free(&parity);

    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    run_phase(dup, "dup", run_subset);
    MPI_Comm_free(&dup);
}

int main(int argc, char **argv)
{
    MPIX_Zcopy_stats world_before;
    zt_arena_t arena;
    int wrank, wsize;
    double t0;
    bool use_arena, alloc_mem;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &wrank);
    MPI_Comm_size(MPI_COMM_WORLD, &wsize);
    if (argc < 2 || argc > 3 || wsize > MAX_RANKS ||
        (strcmp(argv[1], "activated") && strcmp(argv[1], "malloc") &&
         strcmp(argv[1], "mixed") && strcmp(argv[1], "alloc_mem") &&
         strcmp(argv[1], "alloc_mem_default")) ||
        (argc == 3 && strcmp(argv[2], "span") &&
         strcmp(argv[2], "span-p2p"))) {
        if (wrank == 0)
            fprintf(stderr, "usage: %s activated|malloc|mixed|alloc_mem|"
                    "alloc_mem_default [span|span-p2p] (at most "
                    "%d ranks)\n", argv[0], MAX_RANKS);
        MPI_Finalize();
        return 2;
    }
    alloc_mem = !strncmp(argv[1], "alloc_mem", 9);
    mode = !strcmp(argv[1], "activated") || alloc_mem ? MODE_ACTIVATED
         : !strcmp(argv[1], "malloc")    ? MODE_MALLOC : MODE_MIXED;
    span = argc == 3;
    expect_p2p = span && !strcmp(argv[2], "span-p2p");
    fetch_auto = zt_cvar_int("coll_zcopy_ucx_fetch", 0) == 0;
    push_min = zt_cvar_ulong("coll_zcopy_ucx_push_min", 0);
    inline_max = zt_cvar_ulong("coll_zcopy_inline_max", 0);
    span_inline_max = zt_cvar_ulong("coll_zcopy_span_inline_max", 0);
    inline_max_yield = zt_cvar_ulong("coll_zcopy_inline_max_yield", 0);
    yield = zt_cvar_int("coll_zcopy_yield", 0);
    if (inline_max > INLINE_CAPACITY)
        inline_max = INLINE_CAPACITY;
    if (inline_max_yield > INLINE_YIELD_CAPACITY)
        inline_max_yield = INLINE_YIELD_CAPACITY;
    if (inline_max_yield < inline_max)
        inline_max_yield = inline_max;
    /* A failing call is reported and checked, not fatal. */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);

    for (size_t i = 0; i < NTYPES; i++) {
        MPI_Aint lb, extent;
        int size;
        MPI_Type_get_extent(types[i].type, &lb, &extent);
        MPI_Type_size(types[i].type, &size);
        types[i].extent = (size_t)extent;
        types[i].contiguous = lb == 0 && extent == size;
    }
    for (size_t i = 0; i < NOPS; i++)
        if (ops[i].id == O_USER_MAX || ops[i].id == O_USER_MAX_NC)
            MPI_Op_create(user_max_fn, ops[i].id == O_USER_MAX, &ops[i].op);

    /* Arena on WORLD in the modes that use it (collective); in mixed mode
     * rank 1 takes part but keeps its buffers in malloc'ed memory. */
    use_arena = !alloc_mem &&
                (mode == MODE_ACTIVATED || (mode == MODE_MIXED && wrank != 1));
    if (mode != MODE_MALLOC && !alloc_mem)
        zt_arena_init(&arena, MPI_COMM_WORLD, POOL_BYTES);
    if (alloc_mem) {
        /* Nothing of zcopy's API: memory as any MPI program asks for it. */
        MPI_Info info = MPI_INFO_NULL;
        if (!strcmp(argv[1], "alloc_mem")) {
            MPI_Info_create(&info);
            MPI_Info_set(info, "mpool_hints", "zcopy");
        }
        zt_require(MPI_Alloc_mem(POOL_BYTES, info, &pool.base) == MPI_SUCCESS,
                   "MPI_Alloc_mem of the buffers");
        if (info != MPI_INFO_NULL)
            MPI_Info_free(&info);
        pool.size = POOL_BYTES;
    } else if (use_arena) {
        pool.base = arena.base;
        pool.size = arena.size;
    } else {
        pool.base = aligned_alloc(64, POOL_BYTES);
        pool.size = POOL_BYTES;
    }

    /* After the memory, as a program that sets its ranges before its
     * first collective: none of its calls falls back for "no rank had set
     * a memory range" (docs/citizen.md). */
    if (span)
        world_servers(world_server);
    t0 = MPI_Wtime();
    world_before = zt_stats(MPI_COMM_WORLD);
    run_phase(MPI_COMM_WORLD, "world", run_world);
    if (span)
        check_mapped_inside(&world_before);
    run_splits(wrank, wsize);
    if (wrank == 0)
        printf("test_collectives %s%s: %lu calls per rank in %.1f s\n",
               argv[1], span ? " span" : "", total_calls, MPI_Wtime() - t0);

    for (size_t i = 0; i < NOPS; i++)
        if (ops[i].id == O_USER_MAX || ops[i].id == O_USER_MAX_NC)
            MPI_Op_free(&ops[i].op);
    if (mode != MODE_MALLOC && !alloc_mem)
        zt_arena_fini(&arena);
    if (alloc_mem)
        MPI_Free_mem(pool.base);
    else if (!use_arena)
        free(pool.base);
    return zt_finish();
}
