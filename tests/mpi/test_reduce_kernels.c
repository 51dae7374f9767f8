/*
 * The reduction kernels (src/reduce/) against MPI_Reduce_local, on one
 * process. For every predefined op and every predefined C type:
 *   - a kernel exists exactly where the MPI standard defines the op on the
 *     type, and zcopy_reduce_supported agrees;
 *   - where it exists, the kernel, zcopy_reduce and the in-place kernel give
 *     bitwise the reference result (dst = src0, then MPI_Reduce_local of
 *     src1, src2, ... into it), for several source counts and lengths,
 *     without writing past the end of dst or touching a source.
 * Then the MPI_Reduce_local path for user ops, and the refusals.
 */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include "reduce/reduce.h"
#include "testutil.h"

#include <float.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define ARRAY_LENGTH(_a) (sizeof(_a) / sizeof((_a)[0]))
#define POISON 0xA5

/* --- what is reduced ------------------------------------------------------ */

typedef enum {
    CLASS_SIGNED,   /* C integers, including MPI_AINT, MPI_OFFSET, MPI_COUNT */
    CLASS_UNSIGNED,
    CLASS_FLOATING,
    CLASS_COMPLEX,
    CLASS_BOOL,
    CLASS_PAIR      /* the MAXLOC/MINLOC types */
} type_class_t;

/* How a floating value is stored, for generating and comparing it. */
typedef enum { REAL_NONE, REAL_FLOAT, REAL_DOUBLE, REAL_LONG_DOUBLE } real_kind_t;

typedef struct {
    const char *name;
    MPI_Datatype type;
    type_class_t cls;
    size_t size;          /* sizeof the C element */
    real_kind_t real;     /* floating, complex and pair values, else REAL_NONE */
    size_t int_width;     /* integers and integer-valued pairs: bytes */
    size_t index_offset;  /* pairs: where the int index lives */
    MPI_Datatype reference; /* what MPI_Reduce_local computes the reference
                             * with, when not the type itself */
} test_type_t;

typedef struct { float value; int index; } float_int_t;
typedef struct { double value; int index; } double_int_t;
typedef struct { long value; int index; } long_int_t;
typedef struct { int value; int index; } two_int_t;
typedef struct { short value; int index; } short_int_t;
typedef struct { long double value; int index; } long_double_int_t;

#define INTEGER(_mpi, _ctype, _cls)                                              \
    { #_mpi, _mpi, _cls, sizeof(_ctype), REAL_NONE, sizeof(_ctype), 0, _mpi }
#define FLOATING(_mpi, _ctype, _real)                                            \
    { #_mpi, _mpi, CLASS_FLOATING, sizeof(_ctype), _real, 0, 0, _mpi }
#define COMPLEX(_mpi, _ctype, _real)                                             \
    { #_mpi, _mpi, CLASS_COMPLEX, sizeof(_ctype), _real, 0, 0, _mpi }
#define PAIR(_mpi, _struct, _real, _width)                                       \
    { #_mpi, _mpi, CLASS_PAIR, sizeof(_struct), _real, _width, offsetof(_struct, index), _mpi }

/* Open MPI 4.1.4 gets MAX and MIN wrong on two integer types: it compares
 * MPI_UNSIGNED_LONG as signed (open-mpi/ompi#10525) and MPI_OFFSET as
 * unsigned. Their references come from the fixed-width type of the same
 * width and sign. */
#define SAME_WIDTH_UNSIGNED(_ctype) (sizeof(_ctype) == 8 ? MPI_UINT64_T : MPI_UINT32_T)
#define SAME_WIDTH_SIGNED(_ctype) (sizeof(_ctype) == 8 ? MPI_INT64_T : MPI_INT32_T)

static const test_type_t test_types[] = {
    INTEGER(MPI_SIGNED_CHAR, signed char, CLASS_SIGNED),
    INTEGER(MPI_UNSIGNED_CHAR, unsigned char, CLASS_UNSIGNED),
    INTEGER(MPI_SHORT, short, CLASS_SIGNED),
    INTEGER(MPI_UNSIGNED_SHORT, unsigned short, CLASS_UNSIGNED),
    INTEGER(MPI_INT, int, CLASS_SIGNED),
    INTEGER(MPI_UNSIGNED, unsigned, CLASS_UNSIGNED),
    INTEGER(MPI_LONG, long, CLASS_SIGNED),
    { "MPI_UNSIGNED_LONG", MPI_UNSIGNED_LONG, CLASS_UNSIGNED, sizeof(unsigned long),
      REAL_NONE, sizeof(unsigned long), 0, SAME_WIDTH_UNSIGNED(unsigned long) },
    INTEGER(MPI_LONG_LONG_INT, long long, CLASS_SIGNED),
    INTEGER(MPI_LONG_LONG, long long, CLASS_SIGNED),
    INTEGER(MPI_UNSIGNED_LONG_LONG, unsigned long long, CLASS_UNSIGNED),
    INTEGER(MPI_INT8_T, int8_t, CLASS_SIGNED),
    INTEGER(MPI_INT16_T, int16_t, CLASS_SIGNED),
    INTEGER(MPI_INT32_T, int32_t, CLASS_SIGNED),
    INTEGER(MPI_INT64_T, int64_t, CLASS_SIGNED),
    INTEGER(MPI_UINT8_T, uint8_t, CLASS_UNSIGNED),
    INTEGER(MPI_UINT16_T, uint16_t, CLASS_UNSIGNED),
    INTEGER(MPI_UINT32_T, uint32_t, CLASS_UNSIGNED),
    INTEGER(MPI_UINT64_T, uint64_t, CLASS_UNSIGNED),
    INTEGER(MPI_AINT, MPI_Aint, CLASS_SIGNED),
    { "MPI_OFFSET", MPI_OFFSET, CLASS_SIGNED, sizeof(MPI_Offset), REAL_NONE,
      sizeof(MPI_Offset), 0, SAME_WIDTH_SIGNED(MPI_Offset) },
    INTEGER(MPI_COUNT, MPI_Count, CLASS_SIGNED),
    FLOATING(MPI_FLOAT, float, REAL_FLOAT),
    FLOATING(MPI_DOUBLE, double, REAL_DOUBLE),
    FLOATING(MPI_LONG_DOUBLE, long double, REAL_LONG_DOUBLE),
    COMPLEX(MPI_C_COMPLEX, float _Complex, REAL_FLOAT),
    COMPLEX(MPI_C_FLOAT_COMPLEX, float _Complex, REAL_FLOAT),
    COMPLEX(MPI_C_DOUBLE_COMPLEX, double _Complex, REAL_DOUBLE),
    COMPLEX(MPI_C_LONG_DOUBLE_COMPLEX, long double _Complex, REAL_LONG_DOUBLE),
    { "MPI_C_BOOL", MPI_C_BOOL, CLASS_BOOL, sizeof(_Bool), REAL_NONE, 0, 0, MPI_C_BOOL },
    /* Open MPI 4.1 reduces MPI_BYTE as an unsigned 8-bit integer and
     * MPI_CHAR as a signed one (every op but the pair ones), MPI_CXX_BOOL
     * as MPI_C_BOOL; the references come from the standard's types. */
    { "MPI_BYTE", MPI_BYTE, CLASS_UNSIGNED, 1, REAL_NONE, 1, 0, MPI_UINT8_T },
    { "MPI_CHAR", MPI_CHAR, CLASS_SIGNED, 1, REAL_NONE, 1, 0, MPI_SIGNED_CHAR },
    { "MPI_CXX_BOOL", MPI_CXX_BOOL, CLASS_BOOL, 1, REAL_NONE, 0, 0, MPI_C_BOOL },
    COMPLEX(MPI_CXX_FLOAT_COMPLEX, float _Complex, REAL_FLOAT),
    COMPLEX(MPI_CXX_DOUBLE_COMPLEX, double _Complex, REAL_DOUBLE),
    PAIR(MPI_FLOAT_INT, float_int_t, REAL_FLOAT, 0),
    PAIR(MPI_DOUBLE_INT, double_int_t, REAL_DOUBLE, 0),
    PAIR(MPI_LONG_INT, long_int_t, REAL_NONE, sizeof(long)),
    PAIR(MPI_2INT, two_int_t, REAL_NONE, sizeof(int)),
    PAIR(MPI_SHORT_INT, short_int_t, REAL_NONE, sizeof(short)),
    PAIR(MPI_LONG_DOUBLE_INT, long_double_int_t, REAL_LONG_DOUBLE, 0),
};

/* What the inputs must look like for the op to be exercised and stay
 * defined: no signed overflow in the reference, ties for the pair ops,
 * zeros and non-0/1 truth values for the logical ops. */
typedef enum { OPS_SUM, OPS_PROD, OPS_MINMAX, OPS_LOGICAL, OPS_BITWISE, OPS_LOC, OPS_NONE } op_class_t;

typedef struct {
    const char *name;
    MPI_Op op;
    op_class_t cls;
} test_op_t;

#define OP(_mpi, _cls) { #_mpi, _mpi, _cls }
static const test_op_t test_ops[] = {
    OP(MPI_SUM, OPS_SUM),       OP(MPI_PROD, OPS_PROD),
    OP(MPI_MAX, OPS_MINMAX),    OP(MPI_MIN, OPS_MINMAX),
    OP(MPI_LAND, OPS_LOGICAL),  OP(MPI_LOR, OPS_LOGICAL),  OP(MPI_LXOR, OPS_LOGICAL),
    OP(MPI_BAND, OPS_BITWISE),  OP(MPI_BOR, OPS_BITWISE),  OP(MPI_BXOR, OPS_BITWISE),
    OP(MPI_MAXLOC, OPS_LOC),    OP(MPI_MINLOC, OPS_LOC),
    OP(MPI_REPLACE, OPS_NONE),  OP(MPI_NO_OP, OPS_NONE),
};

/* MPI-4.0 section 6.9.2 as Open MPI 4.1 applies it, written out
 * independently of src/reduce/. */
static bool op_applies(op_class_t op, type_class_t type)
{
    const bool integer = type == CLASS_SIGNED || type == CLASS_UNSIGNED;

    switch (op) {
    case OPS_SUM:
    case OPS_PROD:    return integer || type == CLASS_FLOATING || type == CLASS_COMPLEX;
    case OPS_MINMAX:  return integer || type == CLASS_FLOATING;
    case OPS_LOGICAL: return integer || type == CLASS_BOOL;
    case OPS_BITWISE: return integer;
    case OPS_LOC:     return type == CLASS_PAIR;
    case OPS_NONE:    return false;
    }
    return false;
}

/* --- inputs --------------------------------------------------------------- */

static uint64_t splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);

    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static void store_integer(void *at, size_t width, int64_t value)
{
    int8_t v8 = (int8_t)value;
    int16_t v16 = (int16_t)value;
    int32_t v32 = (int32_t)value;

    switch (width) {
    case 1: memcpy(at, &v8, 1); break;
    case 2: memcpy(at, &v16, 2); break;
    case 4: memcpy(at, &v32, 4); break;
    default: memcpy(at, &value, 8); break;
    }
}

static void store_real(void *at, real_kind_t real, double value)
{
    float f = (float)value;
    long double ld = value;

    switch (real) {
    case REAL_FLOAT: memcpy(at, &f, sizeof(f)); break;
    case REAL_DOUBLE: memcpy(at, &value, sizeof(value)); break;
    case REAL_LONG_DOUBLE: memcpy(at, &ld, sizeof(ld)); break;
    case REAL_NONE: break;
    }
}

static size_t real_size(real_kind_t real)
{
    switch (real) {
    case REAL_FLOAT: return sizeof(float);
    case REAL_DOUBLE: return sizeof(double);
    /* x87 extended precision: 10 bytes of value, the rest is padding that
     * neither side promises to preserve. */
    case REAL_LONG_DOUBLE: return LDBL_MANT_DIG == 64 ? 10 : sizeof(long double);
    case REAL_NONE: break;
    }
    return 0;
}

/* Inexact in binary, so the rounding of every step shows in the result. */
static double sum_value(uint64_t r) { return (double)((int64_t)(r % 2000001) - 1000000) / 997.0; }
/* Magnitudes in [0.5, 2): seven factors neither overflow nor vanish. */
static double prod_value(uint64_t r)
{
    return ((r >> 40) & 1 ? -1.0 : 1.0) * (0.5 + (double)(r % 1000) / 667.0);
}

static int64_t integer_value(op_class_t op, bool is_signed, size_t width, size_t element,
                             int source, uint64_t r)
{
    static const int64_t truth[] = { 0, 1, 2, -1 };

    switch (op) {
    case OPS_SUM:
        /* Signed: a range where seven terms cannot overflow. Unsigned
         * wrap-around is defined, so any value. */
        if (is_signed) {
            const int64_t limit = (int64_t)((UINT64_C(1) << (8 * width - 1)) / 8 - 1);
            return (int64_t)(r % (uint64_t)(2 * limit + 1)) - limit;
        }
        return (int64_t)r;
    case OPS_PROD:
        /* At most one factor of 2 per element, the rest +-1 (or 1 and 3
         * unsigned) and some zeros: no signed overflow, some wrap for
         * uint8. */
        if ((element + (size_t)source) % 7 == 0)
            return 2;
        if (r % 16 == 0)
            return 0;
        return (r >> 8) & 1 ? 1 : (is_signed ? -1 : 3);
    case OPS_LOGICAL:
        return truth[r % 4];
    default:
        return (int64_t)r;
    }
}

static void fill_element(const test_type_t *t, op_class_t op, void *at, size_t element,
                         int source, uint64_t r)
{
    char *p = at;

    switch (t->cls) {
    case CLASS_SIGNED:
    case CLASS_UNSIGNED:
        store_integer(p, t->int_width,
                      integer_value(op, t->cls == CLASS_SIGNED, t->int_width, element,
                                    source, r));
        break;
    case CLASS_FLOATING:
        store_real(p, t->real, op == OPS_PROD ? prod_value(r) : sum_value(r));
        break;
    case CLASS_COMPLEX:
        store_real(p, t->real, op == OPS_PROD ? prod_value(r) : sum_value(r));
        store_real(p + t->size / 2, t->real,
                   op == OPS_PROD ? prod_value(r >> 20) : sum_value(r >> 20));
        break;
    case CLASS_BOOL: {
        const _Bool b = r & 1;
        memcpy(p, &b, sizeof(b));
        break;
    }
    case CLASS_PAIR: {
        /* Few distinct values, so ties and the smaller-index rule occur. */
        const int index = (int)((r >> 8) % 1000);
        if (t->real != REAL_NONE)
            store_real(p, t->real, (double)(r % 4));
        else
            store_integer(p, t->int_width, (int64_t)(r % 4));
        memcpy(p + t->index_offset, &index, sizeof(index));
        break;
    }
    }
}

/* --- comparison ------------------------------------------------------------ */

/* Only the bytes that carry the value: padding inside long double and the
 * pair structs is nobody's promise. */
static bool same_element(const test_type_t *t, const char *a, const char *b)
{
    switch (t->cls) {
    case CLASS_FLOATING:
        return memcmp(a, b, real_size(t->real)) == 0;
    case CLASS_COMPLEX:
        return memcmp(a, b, real_size(t->real)) == 0 &&
               memcmp(a + t->size / 2, b + t->size / 2, real_size(t->real)) == 0;
    case CLASS_PAIR: {
        const size_t value_size = t->real != REAL_NONE ? real_size(t->real) : t->int_width;
        return memcmp(a, b, value_size) == 0 &&
               memcmp(a + t->index_offset, b + t->index_offset, sizeof(int)) == 0;
    }
    default:
        return memcmp(a, b, t->size) == 0;
    }
}

/* Index of the first differing element, or -1. */
static long first_difference(const test_type_t *t, const void *got, const void *want,
                             size_t count)
{
    for (size_t i = 0; i < count; i++)
        if (!same_element(t, (const char *)got + i * t->size, (const char *)want + i * t->size))
            return (long)i;
    return -1;
}

static bool all_poison(const void *at, size_t bytes)
{
    for (size_t i = 0; i < bytes; i++)
        if (((const unsigned char *)at)[i] != POISON)
            return false;
    return true;
}

static uint64_t fnv1a(const void *data, size_t bytes, uint64_t hash)
{
    for (size_t i = 0; i < bytes; i++)
        hash = (hash ^ ((const unsigned char *)data)[i]) * 0x100000001B3ull;
    return hash;
}

/* --- one (op, type, nsrcs, count) case ------------------------------------- */

#define MAX_SOURCES 7

static void check_case(const test_op_t *op, const test_type_t *t, zcopy_reduce_fn_t kernel,
                       int nsrcs, size_t count, uint64_t seed)
{
    const size_t esize = t->size, bytes = count * esize;
    /* Sources start at different element offsets, so dst and the sources
     * are not all equally aligned. */
    char *source_blocks[MAX_SOURCES];
    const void *srcs[MAX_SOURCES], *inplace_srcs[MAX_SOURCES];
    char *want = malloc(bytes + esize), *got = malloc(bytes + esize);
    char *inplace = malloc(bytes + esize);
    uint64_t state = seed, sources_hash = 0xCBF29CE484222325ull;
    long diff;
    int rc;

    if (want == NULL || got == NULL || inplace == NULL) {
        fprintf(stderr, "out of memory\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    for (int s = 0; s < nsrcs; s++) {
        source_blocks[s] = malloc(bytes + 3 * esize);
        if (source_blocks[s] == NULL) {
            fprintf(stderr, "out of memory\n");
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
        srcs[s] = source_blocks[s] + (size_t)(s % 3) * esize;
        for (size_t i = 0; i < count; i++)
            fill_element(t, op->cls, (char *)srcs[s] + i * esize, i, s, splitmix64(&state));
        sources_hash = fnv1a(srcs[s], bytes, sources_hash);
    }

    /* Reference: the fold MPI itself does. */
    memset(want, POISON, bytes + esize);
    memcpy(want, srcs[0], bytes);
    for (int s = 1; s < nsrcs && count > 0; s++) {
        rc = MPI_Reduce_local(srcs[s], want, (int)count, t->reference, op->op);
        ZT_CHECK(rc == MPI_SUCCESS, "%s %s: reference MPI_Reduce_local failed (%d)",
                 op->name, t->name, rc);
    }

    memset(got, POISON, bytes + esize);
    kernel(got, srcs, nsrcs, count);
    diff = first_difference(t, got, want, count);
    ZT_CHECK(diff < 0, "%s %s nsrcs %d count %zu: kernel differs at element %ld",
             op->name, t->name, nsrcs, count, diff);
    ZT_CHECK(all_poison(got + bytes, esize), "%s %s nsrcs %d count %zu: kernel wrote past dst",
             op->name, t->name, nsrcs, count);

    memset(got, POISON, bytes + esize);
    rc = zcopy_reduce(op->op, t->type, got, srcs, nsrcs, count);
    diff = first_difference(t, got, want, count);
    ZT_CHECK(rc == ZCOPY_SUCCESS && diff < 0,
             "%s %s nsrcs %d count %zu: zcopy_reduce rc %d, differs at element %ld",
             op->name, t->name, nsrcs, count, rc, diff);

    memcpy(inplace, srcs[0], bytes);
    memset(inplace + bytes, POISON, esize);
    inplace_srcs[0] = inplace;
    for (int s = 1; s < nsrcs; s++)
        inplace_srcs[s] = srcs[s];
    kernel(inplace, inplace_srcs, nsrcs, count);
    diff = first_difference(t, inplace, want, count);
    ZT_CHECK(diff < 0 && all_poison(inplace + bytes, esize),
             "%s %s nsrcs %d count %zu: in place differs at element %ld", op->name,
             t->name, nsrcs, count, diff);

    {
        uint64_t after = 0xCBF29CE484222325ull;
        for (int s = 0; s < nsrcs; s++)
            after = fnv1a(srcs[s], bytes, after);
        ZT_CHECK(after == sources_hash, "%s %s nsrcs %d count %zu: a source changed",
                 op->name, t->name, nsrcs, count);
    }

    for (int s = 0; s < nsrcs; s++)
        free(source_blocks[s]);
    free(inplace);
    free(got);
    free(want);
}

/* Every op against every type: the table, then the numbers. */
static void check_predefined(void)
{
    static const int source_counts[] = { 1, 2, 3, 4, 7 };
    /* 4099 crosses the 8 KiB blocks of most kinds, 20011 those of bytes. */
    static const size_t lengths[] = { 0, 1, 3, 17, 4099, 20011 };

    for (size_t ti = 0; ti < ARRAY_LENGTH(test_types); ti++) {
        const test_type_t *t = &test_types[ti];
        MPI_Aint lb, extent;

        MPI_Type_get_extent(t->type, &lb, &extent);
        ZT_CHECK(lb == 0 && (size_t)extent == t->size,
                 "%s: MPI's extent %ld differs from the C layout %zu", t->name,
                 (long)extent, t->size);

        for (size_t oi = 0; oi < ARRAY_LENGTH(test_ops); oi++) {
            const test_op_t *op = &test_ops[oi];
            const bool applies = op_applies(op->cls, t->cls);
            const zcopy_reduce_fn_t kernel = zcopy_reduce_kernel(op->op, t->type);

            ZT_CHECK((kernel != NULL) == applies, "%s %s: kernel %s, expected %s", op->name,
                     t->name, kernel ? "found" : "missing", applies ? "one" : "none");
            ZT_CHECK(zcopy_reduce_supported(op->op, t->type) == applies,
                     "%s %s: supported should be %d", op->name, t->name, applies);
            if (kernel == NULL || !applies)
                continue;
            for (size_t ni = 0; ni < ARRAY_LENGTH(source_counts); ni++)
                for (size_t li = 0; li < ARRAY_LENGTH(lengths); li++)
                    check_case(op, t, kernel, source_counts[ni], lengths[li],
                               ti * 1000003u + oi * 1009u + ni * 101u + li);
        }
    }
}

/* --- user ops and refusals -------------------------------------------------- */

/* Wrapping addition of unsigned ints over any type made of them: commutative
 * and associative, so any fold order gives one answer. */
static void user_add(void *in, void *inout, int *len, MPI_Datatype *type)
{
    int type_size;
    size_t n;

    MPI_Type_size(*type, &type_size);
    n = (size_t)*len * (size_t)type_size / sizeof(unsigned);
    for (size_t i = 0; i < n; i++)
        ((unsigned *)inout)[i] += ((const unsigned *)in)[i];
}

/* Keeps the left operand: associative, not commutative. */
static void user_first(void *in, void *inout, int *len, MPI_Datatype *type)
{
    memcpy(inout, in, (size_t)*len * sizeof(int));
}

static void check_user_op(MPI_Op add, MPI_Datatype type, int per_element)
{
    static const int source_counts[] = { 1, 2, 3, 7 };
    static const size_t lengths[] = { 0, 1, 17, 4099 };

    for (size_t ni = 0; ni < ARRAY_LENGTH(source_counts); ni++) {
        for (size_t li = 0; li < ARRAY_LENGTH(lengths); li++) {
            const int nsrcs = source_counts[ni];
            const size_t count = lengths[li], words = count * (size_t)per_element;
            unsigned *sources = malloc((words + 1) * (size_t)nsrcs * sizeof(unsigned));
            unsigned *want = calloc(words + 1, sizeof(unsigned));
            unsigned *got = malloc((words + 1) * sizeof(unsigned));
            const void *srcs[MAX_SOURCES];
            uint64_t state = count * 31 + (size_t)nsrcs;
            bool same = true;
            int rc;

            for (int s = 0; s < nsrcs; s++) {
                srcs[s] = sources + (size_t)s * (words + 1);
                for (size_t i = 0; i < words; i++) {
                    sources[(size_t)s * (words + 1) + i] = (unsigned)splitmix64(&state);
                    want[i] += sources[(size_t)s * (words + 1) + i];
                }
            }
            memset(got, POISON, (words + 1) * sizeof(unsigned));
            rc = zcopy_reduce(add, type, got, srcs, nsrcs, count);
            for (size_t i = 0; i < words; i++)
                same = same && got[i] == want[i];
            ZT_CHECK(rc == ZCOPY_SUCCESS && same && all_poison(got + words, sizeof(unsigned)),
                     "user op x%d nsrcs %d count %zu: rc %d, result %s", per_element, nsrcs,
                     count, rc, same ? "right" : "wrong");

            /* In place: dst is srcs[0]. */
            memcpy(got, srcs[0], words * sizeof(unsigned));
            srcs[0] = got;
            rc = zcopy_reduce(add, type, got, srcs, nsrcs, count);
            same = true;
            for (size_t i = 0; i < words; i++)
                same = same && got[i] == want[i];
            ZT_CHECK(rc == ZCOPY_SUCCESS && same, "user op x%d in place nsrcs %d count %zu: rc %d",
                     per_element, nsrcs, count, rc);

            free(got);
            free(want);
            free(sources);
        }
    }
}

static void check_user_and_refused(void)
{
    MPI_Op add, first;
    MPI_Datatype triple;
    int a[4] = { 1, 2, 3, 4 }, b[4] = { 5, 6, 7, 8 }, out[4];
    const void *srcs[2] = { a, b };

    MPI_Op_create(user_add, 1, &add);
    MPI_Op_create(user_first, 0, &first);
    MPI_Type_contiguous(3, MPI_UNSIGNED, &triple);
    MPI_Type_commit(&triple);

    ZT_CHECK(zcopy_reduce_kernel(add, MPI_UNSIGNED) == NULL, "user op: no kernel");
    ZT_CHECK(zcopy_reduce_supported(add, MPI_UNSIGNED), "commutative user op supported");
    ZT_CHECK(zcopy_reduce_supported(add, triple), "commutative user op on a derived type");
    check_user_op(add, MPI_UNSIGNED, 1);
    check_user_op(add, triple, 3);

    ZT_CHECK(zcopy_reduce_kernel(first, MPI_INT) == NULL, "non-commutative: no kernel");
    ZT_CHECK(!zcopy_reduce_supported(first, MPI_INT), "non-commutative user op refused");
    ZT_CHECK(zcopy_reduce(first, MPI_INT, out, srcs, 2, 4) == ZCOPY_ERR_UNSUPPORTED,
             "zcopy_reduce refuses a non-commutative op");

    /* Predefined ops where MPI defines no reduction: refused, not aborted. */
    ZT_CHECK(!zcopy_reduce_supported(MPI_REPLACE, MPI_INT) &&
             zcopy_reduce_kernel(MPI_REPLACE, MPI_INT) == NULL, "MPI_REPLACE refused");
    ZT_CHECK(!zcopy_reduce_supported(MPI_NO_OP, MPI_INT) &&
             zcopy_reduce_kernel(MPI_NO_OP, MPI_INT) == NULL, "MPI_NO_OP refused");
    ZT_CHECK(!zcopy_reduce_supported(MPI_BAND, MPI_FLOAT) &&
             zcopy_reduce_kernel(MPI_BAND, MPI_FLOAT) == NULL, "MPI_BAND on MPI_FLOAT refused");
    ZT_CHECK(zcopy_reduce(MPI_REPLACE, MPI_INT, out, srcs, 2, 4) == ZCOPY_ERR_UNSUPPORTED,
             "zcopy_reduce refuses MPI_REPLACE");
    ZT_CHECK(zcopy_reduce(MPI_NO_OP, triple, out, srcs, 2, 1) == ZCOPY_ERR_UNSUPPORTED,
             "zcopy_reduce refuses MPI_NO_OP on a derived type");
    ZT_CHECK(zcopy_reduce(MPI_BAND, MPI_FLOAT, out, srcs, 2, 4) == ZCOPY_ERR_UNSUPPORTED,
             "zcopy_reduce refuses MPI_BAND on MPI_FLOAT");
    /* MPI_CHAR is for text in the standard, but Open MPI 4.1 reduces it
     * (the OSU benchmarks' default type): so does zcopy. */
    ZT_CHECK(zcopy_reduce_supported(MPI_SUM, MPI_CHAR) &&
             zcopy_reduce_kernel(MPI_SUM, MPI_CHAR) != NULL, "MPI_SUM on MPI_CHAR taken");
    /* Open MPI rejects predefined ops on derived types. */
    ZT_CHECK(!zcopy_reduce_supported(MPI_SUM, triple) &&
             zcopy_reduce_kernel(MPI_SUM, triple) == NULL, "MPI_SUM on a derived type refused");

    ZT_CHECK(!zcopy_reduce_supported(MPI_OP_NULL, MPI_INT), "MPI_OP_NULL refused");
    ZT_CHECK(!zcopy_reduce_supported(MPI_SUM, MPI_DATATYPE_NULL), "MPI_DATATYPE_NULL refused");
    ZT_CHECK(zcopy_reduce(MPI_SUM, MPI_INT, out, srcs, 0, 4) == ZCOPY_ERR_ARG, "nsrcs 0");
    ZT_CHECK(zcopy_reduce(MPI_SUM, MPI_INT, out, NULL, 2, 4) == ZCOPY_ERR_ARG, "srcs NULL");
    ZT_CHECK(zcopy_reduce(MPI_SUM, MPI_INT, NULL, srcs, 2, 4) == ZCOPY_ERR_ARG, "dst NULL");
    ZT_CHECK(zcopy_reduce(MPI_OP_NULL, MPI_INT, out, srcs, 2, 4) == ZCOPY_ERR_ARG,
             "MPI_OP_NULL");
    ZT_CHECK(zcopy_reduce(MPI_SUM, MPI_INT, out, srcs, 2, 4) == ZCOPY_SUCCESS &&
             out[0] == 6 && out[3] == 12, "a plain MPI_SUM after the refusals");

    MPI_Type_free(&triple);
    MPI_Op_free(&first);
    MPI_Op_free(&add);
}

int main(int argc, char **argv)
{
    /* Open MPI 4.1's AVX op component saturates 8- and 16-bit integer sums
     * instead of wrapping (open-mpi/ompi#8045): the reference comes from its
     * plain C functions. Set before MPI_Init, which reads it. */
    setenv("OMPI_MCA_op", "^avx", 1);
    MPI_Init(&argc, &argv);
    /* A reference call that MPI refuses should fail the test, not abort it
     * (errors outside a communicator land on one of these two). */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);

    check_predefined();
    check_user_and_refused();
    return zt_finish();
}
