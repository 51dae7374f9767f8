/*
 * From MPI handles to a reduction kernel, and the MPI library's own
 * reduction for everything without one (user ops, Fortran types).
 */
#include "reduce/reduce_kernels.h"

#include "host/host.h"

#include <limits.h>
#include <string.h>

/* Open MPI's handles are addresses of its predefined objects: address
 * constants, so they can fill a static table, but not a switch. A linear
 * scan over a few hundred bytes costs less than a cache miss and runs once
 * per collective. */
typedef struct {
    MPI_Op handle;
    zcopy_reduce_op_id_t id;
} reduce_op_entry_t;

typedef struct {
    MPI_Datatype handle;
    zcopy_reduce_kind_t kind;
} reduce_type_entry_t;

static const reduce_op_entry_t reduce_ops[] = {
    { MPI_SUM, ZCOPY_REDUCE_OP_SUM },       { MPI_MAX, ZCOPY_REDUCE_OP_MAX },
    { MPI_MIN, ZCOPY_REDUCE_OP_MIN },       { MPI_PROD, ZCOPY_REDUCE_OP_PROD },
    { MPI_LAND, ZCOPY_REDUCE_OP_LAND },     { MPI_LOR, ZCOPY_REDUCE_OP_LOR },
    { MPI_LXOR, ZCOPY_REDUCE_OP_LXOR },     { MPI_BAND, ZCOPY_REDUCE_OP_BAND },
    { MPI_BOR, ZCOPY_REDUCE_OP_BOR },       { MPI_BXOR, ZCOPY_REDUCE_OP_BXOR },
    { MPI_MAXLOC, ZCOPY_REDUCE_OP_MAXLOC }, { MPI_MINLOC, ZCOPY_REDUCE_OP_MINLOC },
    { MPI_REPLACE, ZCOPY_REDUCE_OP_REPLACE }, { MPI_NO_OP, ZCOPY_REDUCE_OP_NO_OP },
};

/* C integer types map onto fixed-width kinds by their size on this ABI. */
#define SIGNED_KIND(_ctype)                                                      \
    (sizeof(_ctype) == 1   ? ZCOPY_REDUCE_KIND_INT8                              \
     : sizeof(_ctype) == 2 ? ZCOPY_REDUCE_KIND_INT16                             \
     : sizeof(_ctype) == 4 ? ZCOPY_REDUCE_KIND_INT32                             \
                           : ZCOPY_REDUCE_KIND_INT64)
#define UNSIGNED_KIND(_ctype)                                                    \
    (sizeof(_ctype) == 1   ? ZCOPY_REDUCE_KIND_UINT8                             \
     : sizeof(_ctype) == 2 ? ZCOPY_REDUCE_KIND_UINT16                            \
     : sizeof(_ctype) == 4 ? ZCOPY_REDUCE_KIND_UINT32                            \
                           : ZCOPY_REDUCE_KIND_UINT64)
#define HAS_INTEGER_KIND(_ctype)                                                 \
    (sizeof(_ctype) == 1 || sizeof(_ctype) == 2 || sizeof(_ctype) == 4 ||        \
     sizeof(_ctype) == 8)
_Static_assert(HAS_INTEGER_KIND(short) && HAS_INTEGER_KIND(int) &&
               HAS_INTEGER_KIND(long) && HAS_INTEGER_KIND(long long) &&
               HAS_INTEGER_KIND(MPI_Aint) && HAS_INTEGER_KIND(MPI_Offset) &&
               HAS_INTEGER_KIND(MPI_Count),
               "an MPI integer type has no fixed-width kernel");
_Static_assert(sizeof(_Bool) == 1, "MPI_C_BOOL kernels assume a one-byte _Bool");

/* Every handle listed on its own: Open MPI gives MPI_INT and MPI_INT32_T
 * (and others with one meaning) distinct handles. The most common types
 * come first because the scan stops at the first match. */
static const reduce_type_entry_t reduce_types[] = {
    { MPI_DOUBLE, ZCOPY_REDUCE_KIND_DOUBLE },
    { MPI_FLOAT, ZCOPY_REDUCE_KIND_FLOAT },
    { MPI_INT, SIGNED_KIND(int) },
    { MPI_LONG, SIGNED_KIND(long) },
    { MPI_UNSIGNED, UNSIGNED_KIND(unsigned) },
    { MPI_UNSIGNED_LONG, UNSIGNED_KIND(unsigned long) },
    { MPI_LONG_LONG_INT, SIGNED_KIND(long long) },
    { MPI_LONG_LONG, SIGNED_KIND(long long) },
    { MPI_UNSIGNED_LONG_LONG, UNSIGNED_KIND(unsigned long long) },
    { MPI_INT32_T, ZCOPY_REDUCE_KIND_INT32 },
    { MPI_INT64_T, ZCOPY_REDUCE_KIND_INT64 },
    { MPI_UINT32_T, ZCOPY_REDUCE_KIND_UINT32 },
    { MPI_UINT64_T, ZCOPY_REDUCE_KIND_UINT64 },
    { MPI_BYTE, ZCOPY_REDUCE_KIND_UINT8 },
    { MPI_CHAR, CHAR_MIN < 0 ? ZCOPY_REDUCE_KIND_INT8 : ZCOPY_REDUCE_KIND_UINT8 },
    { MPI_CXX_BOOL, ZCOPY_REDUCE_KIND_BOOL },
    { MPI_C_BOOL, ZCOPY_REDUCE_KIND_BOOL },
    { MPI_2INT, ZCOPY_REDUCE_KIND_2INT },
    { MPI_DOUBLE_INT, ZCOPY_REDUCE_KIND_DOUBLE_INT },
    { MPI_FLOAT_INT, ZCOPY_REDUCE_KIND_FLOAT_INT },
    { MPI_LONG_INT, ZCOPY_REDUCE_KIND_LONG_INT },
    { MPI_SHORT_INT, ZCOPY_REDUCE_KIND_SHORT_INT },
    { MPI_LONG_DOUBLE_INT, ZCOPY_REDUCE_KIND_LONG_DOUBLE_INT },
    { MPI_SHORT, SIGNED_KIND(short) },
    { MPI_UNSIGNED_SHORT, UNSIGNED_KIND(unsigned short) },
    { MPI_SIGNED_CHAR, ZCOPY_REDUCE_KIND_INT8 },
    { MPI_UNSIGNED_CHAR, ZCOPY_REDUCE_KIND_UINT8 },
    { MPI_INT8_T, ZCOPY_REDUCE_KIND_INT8 },
    { MPI_INT16_T, ZCOPY_REDUCE_KIND_INT16 },
    { MPI_UINT8_T, ZCOPY_REDUCE_KIND_UINT8 },
    { MPI_UINT16_T, ZCOPY_REDUCE_KIND_UINT16 },
    { MPI_AINT, SIGNED_KIND(MPI_Aint) },
    { MPI_OFFSET, SIGNED_KIND(MPI_Offset) },
    { MPI_COUNT, SIGNED_KIND(MPI_Count) },
    { MPI_LONG_DOUBLE, ZCOPY_REDUCE_KIND_LONG_DOUBLE },
    { MPI_C_FLOAT_COMPLEX, ZCOPY_REDUCE_KIND_FLOAT_COMPLEX },
    { MPI_C_COMPLEX, ZCOPY_REDUCE_KIND_FLOAT_COMPLEX },
    { MPI_C_DOUBLE_COMPLEX, ZCOPY_REDUCE_KIND_DOUBLE_COMPLEX },
    { MPI_C_LONG_DOUBLE_COMPLEX, ZCOPY_REDUCE_KIND_LONG_DOUBLE_COMPLEX },
    /* std::complex<T> is laid out as T[2], as T _Complex is. */
    { MPI_CXX_FLOAT_COMPLEX, ZCOPY_REDUCE_KIND_FLOAT_COMPLEX },
    { MPI_CXX_DOUBLE_COMPLEX, ZCOPY_REDUCE_KIND_DOUBLE_COMPLEX },
    { MPI_CXX_LONG_DOUBLE_COMPLEX, ZCOPY_REDUCE_KIND_LONG_DOUBLE_COMPLEX },
};

#define ARRAY_LENGTH(_a) (sizeof(_a) / sizeof((_a)[0]))

/* -1 for a user op (or MPI_OP_NULL). */
static int reduce_op_id(MPI_Op op)
{
    for (size_t i = 0; i < ARRAY_LENGTH(reduce_ops); i++)
        if (reduce_ops[i].handle == op)
            return (int)reduce_ops[i].id;
    return -1;
}

/* -1 for anything but the predefined C types above. */
static int reduce_type_kind(MPI_Datatype type)
{
    if (type == MPI_DATATYPE_NULL)
        return -1;
    for (size_t i = 0; i < ARRAY_LENGTH(reduce_types); i++)
        if (reduce_types[i].handle == type)
            return (int)reduce_types[i].kind;
    return -1;
}

zcopy_reduce_fn_t zcopy_reduce_kernel(MPI_Op op, MPI_Datatype type)
{
    const int op_id = reduce_op_id(op);
    const int kind = op_id < 0 ? -1 : reduce_type_kind(type);

    return kind < 0 ? NULL : zcopy_reduce_kernel_table[op_id][kind];
}

bool zcopy_reduce_supported(MPI_Op op, MPI_Datatype type)
{
    const int op_id = op == MPI_OP_NULL ? -2 : reduce_op_id(op);

    if (op_id == -2 || type == MPI_DATATYPE_NULL)
        return false;
    if (op_id == ZCOPY_REDUCE_OP_REPLACE || op_id == ZCOPY_REDUCE_OP_NO_OP)
        return false;
    /* A type of the table takes a predefined op exactly where it has a
     * kernel: the table encodes which ops apply to it. */
    if (op_id >= 0 && reduce_type_kind(type) >= 0)
        return zcopy_reduce_kernel(op, type) != NULL;
    /* Anything else the library reduces itself (a Fortran type, a user
     * op), on a contiguous type. */
    return zcopy_host.type_elem_bytes(type) != 0 &&
           zcopy_host.op_reduces(op, type);
}

/* For count > 0. The library's reduction computes inout = in op inout, so
 * folding the sources into dst gives srcs[n-1] op (... op srcs[0]): the
 * same order on every rank, and the promised result only when op is
 * commutative, which zcopy_reduce_supported() requires of a user op. */
static zcopy_status_t reduce_with_host(MPI_Op op, MPI_Datatype type, void *dst,
                                       const void *const *srcs, int nsrcs,
                                       size_t count)
{
    const size_t elem = zcopy_host.type_elem_bytes(type);

    if (elem == 0)
        return zcopy_error(ZCOPY_ERR_UNSUPPORTED,
                           "reduce: the datatype is not contiguous");
    if (dst != srcs[0])
        memcpy(dst, srcs[0], count * elem);
    for (int k = 1; k < nsrcs; k++)
        zcopy_host.reduce_local(op, type, srcs[k], dst, count);
    return ZCOPY_SUCCESS;
}

zcopy_status_t zcopy_reduce(MPI_Op op, MPI_Datatype type, void *dst,
                            const void *const *srcs, int nsrcs, size_t count)
{
    int op_id, kind;

    if (op == MPI_OP_NULL || type == MPI_DATATYPE_NULL || srcs == NULL || nsrcs < 1 ||
        (count > 0 && dst == NULL))
        return zcopy_error(ZCOPY_ERR_ARG, "reduce: invalid op, type or buffers "
                           "(nsrcs %d, count %zu)", nsrcs, count);
    if (count == 0)
        return ZCOPY_SUCCESS;

    op_id = reduce_op_id(op);
    kind = reduce_type_kind(type);
    if (op_id >= 0 && kind >= 0) {
        const zcopy_reduce_fn_t kernel = zcopy_reduce_kernel_table[op_id][kind];

        /* No kernel means MPI does not define the op on this type (MPI_BAND
         * on MPI_FLOAT): refuse here, because MPI_Reduce_local would raise
         * it on MPI_COMM_WORLD, whose handler usually aborts the job. */
        if (kernel == NULL)
            return zcopy_error(ZCOPY_ERR_UNSUPPORTED,
                               "reduce: the predefined op does not apply to this datatype");
        kernel(dst, srcs, nsrcs, count);
        return ZCOPY_SUCCESS;
    }
    if (op_id == ZCOPY_REDUCE_OP_REPLACE || op_id == ZCOPY_REDUCE_OP_NO_OP)
        return zcopy_error(ZCOPY_ERR_UNSUPPORTED,
                           "reduce: MPI_REPLACE and MPI_NO_OP are not reductions");
    if (!zcopy_reduce_supported(op, type))
        return zcopy_error(ZCOPY_ERR_UNSUPPORTED,
                           "reduce: the op is not commutative or not defined "
                           "on this contiguous type");
    return reduce_with_host(op, type, dst, srcs, nsrcs, count);
}
