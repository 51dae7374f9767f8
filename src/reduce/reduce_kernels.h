/*
 * The kernel table behind zcopy_reduce_kernel(), private to src/reduce/.
 * reduce.c turns MPI handles into the two indices; reduce_kernels.c holds
 * the generated kernels. Indices rather than handles because Open MPI's
 * handles are addresses, which no switch or array can be indexed by.
 */
#ifndef ZCOPY_REDUCE_KERNELS_H
#define ZCOPY_REDUCE_KERNELS_H

#include "reduce/reduce.h"

typedef enum {
    ZCOPY_REDUCE_OP_SUM,
    ZCOPY_REDUCE_OP_PROD,
    ZCOPY_REDUCE_OP_MAX,
    ZCOPY_REDUCE_OP_MIN,
    ZCOPY_REDUCE_OP_LAND,
    ZCOPY_REDUCE_OP_LOR,
    ZCOPY_REDUCE_OP_LXOR,
    ZCOPY_REDUCE_OP_BAND,
    ZCOPY_REDUCE_OP_BOR,
    ZCOPY_REDUCE_OP_BXOR,
    ZCOPY_REDUCE_OP_MAXLOC,
    ZCOPY_REDUCE_OP_MINLOC,
    /* Predefined, but only meaningful for one-sided accumulate: their rows
     * stay empty. Listed so that they are never mistaken for user ops, which
     * MPI_Op_commutative would call commutative. */
    ZCOPY_REDUCE_OP_REPLACE,
    ZCOPY_REDUCE_OP_NO_OP,
    ZCOPY_REDUCE_OP_COUNT
} zcopy_reduce_op_id_t;

/* How an element is stored, not what MPI calls it: MPI_INT and MPI_INT32_T
 * share ZCOPY_REDUCE_KIND_INT32; MPI_BYTE and MPI_CHAR reduce as the 8-bit
 * integers Open MPI 4.1 takes them for. */
typedef enum {
    ZCOPY_REDUCE_KIND_INT8,
    ZCOPY_REDUCE_KIND_UINT8,
    ZCOPY_REDUCE_KIND_INT16,
    ZCOPY_REDUCE_KIND_UINT16,
    ZCOPY_REDUCE_KIND_INT32,
    ZCOPY_REDUCE_KIND_UINT32,
    ZCOPY_REDUCE_KIND_INT64,
    ZCOPY_REDUCE_KIND_UINT64,
    ZCOPY_REDUCE_KIND_BOOL,
    ZCOPY_REDUCE_KIND_FLOAT,
    ZCOPY_REDUCE_KIND_DOUBLE,
    ZCOPY_REDUCE_KIND_LONG_DOUBLE,
    ZCOPY_REDUCE_KIND_FLOAT_COMPLEX,
    ZCOPY_REDUCE_KIND_DOUBLE_COMPLEX,
    ZCOPY_REDUCE_KIND_LONG_DOUBLE_COMPLEX,
    ZCOPY_REDUCE_KIND_FLOAT_INT,       /* MPI_FLOAT_INT and the other pairs */
    ZCOPY_REDUCE_KIND_DOUBLE_INT,
    ZCOPY_REDUCE_KIND_LONG_INT,
    ZCOPY_REDUCE_KIND_2INT,
    ZCOPY_REDUCE_KIND_SHORT_INT,
    ZCOPY_REDUCE_KIND_LONG_DOUBLE_INT,
    ZCOPY_REDUCE_KIND_COUNT
} zcopy_reduce_kind_t;

/* NULL where the op does not apply to the kind (MPI-4.0 section 6.9.2,
 * with Open MPI 4.1's extensions). */
extern const zcopy_reduce_fn_t
    zcopy_reduce_kernel_table[ZCOPY_REDUCE_OP_COUNT][ZCOPY_REDUCE_KIND_COUNT];

#endif /* ZCOPY_REDUCE_KERNELS_H */
