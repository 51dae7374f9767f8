/*
 * Reduction kernels: combine the contributions of several ranks, read in
 * place through mappings of their buffers, into one destination.
 *
 * The order of evaluation is part of the contract: every rank that reduces
 * the same slice from the same sources in the same order gets bitwise the
 * same result, which is what lets an allreduce split the work by slices and
 * still hand identical results to every rank (SPEC section 4).
 */
#ifndef ZCOPY_REDUCE_H
#define ZCOPY_REDUCE_H

#include "base/base.h"
#include <mpi.h>

/* dst[i] = srcs[0][i] op srcs[1][i] op ... op srcs[nsrcs-1][i], i < count,
 * evaluated left to right in that order (so every rank computing the same
 * slice from the same sources gets bitwise the same result). dst may alias
 * srcs[0] (in place) but no other source; nsrcs >= 1 (nsrcs == 1 is a
 * copy). */
typedef void (*zcopy_reduce_fn_t)(void *dst, const void *const *srcs, int nsrcs, size_t count);

/* The kernel for a predefined op on a predefined type, or NULL when there is
 * none (user ops, ops that do not apply to the type, derived types). */
zcopy_reduce_fn_t zcopy_reduce_kernel(MPI_Op op, MPI_Datatype type);

/* Any commutative op on any contiguous type: the kernel when there is one,
 * else MPI_Reduce_local over the sources (dst = srcs[0] copy, then
 * MPI_Reduce_local(srcs[i], dst) for i = 1..n-1; do not use that path when
 * dst aliases a source other than srcs[0]). Returns ZCOPY_SUCCESS or a
 * negative ZCOPY_ERR_*. count is in elements of type. */
zcopy_status_t zcopy_reduce(MPI_Op op, MPI_Datatype type, void *dst,
                            const void *const *srcs, int nsrcs, size_t count);

/* True when zcopy can reduce with this op and type: predefined op valid for
 * the type, or a commutative user op (MPI_Op_commutative). */
bool zcopy_reduce_supported(MPI_Op op, MPI_Datatype type);

#endif /* ZCOPY_REDUCE_H */
