/*
 * Reductions whose element is larger than the kernels' 32 KiB step (a
 * contiguous derived type with a commutative user op): every reduction
 * must still advance, run zero-copy and be right.
 */
#include "testutil.h"

#include <stdlib.h>

#define ELEM_INTS 16384 /* 64 KiB per element */

static void add_ints(void *in, void *inout, int *len, MPI_Datatype *type)
{
    int elems;

    MPI_Type_size(*type, &elems);
    elems = elems / (int)sizeof(int) * *len;
    for (int i = 0; i < elems; i++)
        ((int *)inout)[i] += ((const int *)in)[i];
}

int main(int argc, char **argv)
{
    const int count = 3;
    const size_t bytes = (size_t)count * ELEM_INTS * sizeof(int);
    MPIX_Zcopy_stats s0, s1;
    MPI_Datatype big;
    int rank, size, bad;
    size_t used = 0;
    zt_arena_t arena;
    int *in, *out;
    MPI_Op op;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Type_contiguous(ELEM_INTS, MPI_INT, &big);
    MPI_Type_commit(&big);
    MPI_Op_create(add_ints, 1, &op);
    zt_arena_init(&arena, MPI_COMM_WORLD, 2 * bytes * (size_t)size + 4096);
    in = zt_arena_alloc(&arena, &used, bytes * (size_t)size);
    out = zt_arena_alloc(&arena, &used, bytes * (size_t)size);
    for (size_t i = 0; i < (size_t)count * ELEM_INTS * (size_t)size; i++)
        in[i] = rank + (int)(i % 7);

    s0 = zt_stats(MPI_COMM_WORLD);
    MPI_Allreduce(in, out, count, big, op, MPI_COMM_WORLD);
    bad = 0;
    for (size_t i = 0; i < (size_t)count * ELEM_INTS; i++)
        bad += out[i] != size * (size - 1) / 2 + size * (int)(i % 7);
    ZT_CHECK(bad == 0, "allreduce: %d wrong ints", bad);

    MPI_Reduce_scatter_block(in, out, 1, big, op, MPI_COMM_WORLD);
    bad = 0;
    for (size_t i = 0; i < ELEM_INTS; i++) {
        size_t at = (size_t)rank * ELEM_INTS + i;
        bad += out[i] != size * (size - 1) / 2 + size * (int)(at % 7);
    }
    ZT_CHECK(bad == 0, "reduce_scatter_block: %d wrong ints", bad);

    MPI_Reduce(in, out, count, big, op, size - 1, MPI_COMM_WORLD);
    s1 = zt_stats(MPI_COMM_WORLD);
    ZT_CHECK(s1.zcopy_calls - s0.zcopy_calls == 3 &&
                 s1.fallback_calls == s0.fallback_calls,
             "expected 3 zero-copy calls, got %llu (fallbacks %llu: %s)",
             (unsigned long long)(s1.zcopy_calls - s0.zcopy_calls),
             (unsigned long long)(s1.fallback_calls - s0.fallback_calls),
             s1.last_fallback_reason);

    zt_arena_fini(&arena);
    MPI_Op_free(&op);
    MPI_Type_free(&big);
    return zt_finish();
}
