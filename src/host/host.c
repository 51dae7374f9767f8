/*
 * Defaults for the host hooks, used only where no component installed its
 * own (libzcopy's tests outside Open MPI's coll framework).
 */
#include "host/host.h"

#include <limits.h>

static size_t default_type_size(MPI_Datatype type)
{
    int size = 0;

    if (type == MPI_DATATYPE_NULL || MPI_Type_size(type, &size) != MPI_SUCCESS)
        return 0;
    return size > 0 ? (size_t)size : 0;
}

/* Without the library's description, bounds and extents are all there is
 * (they cannot tell a permuted typemap from a contiguous one: the component
 * answers from Open MPI's own). */
static size_t default_type_elem_bytes(MPI_Datatype type)
{
    MPI_Aint lb, extent, true_lb, true_extent;
    const size_t size = default_type_size(type);

    if (size == 0 || MPI_Type_get_extent(type, &lb, &extent) != MPI_SUCCESS ||
        MPI_Type_get_true_extent(type, &true_lb, &true_extent) != MPI_SUCCESS)
        return 0;
    if (lb != 0 || true_lb != 0 || (size_t)extent != size ||
        (size_t)true_extent != size)
        return 0;
    return size;
}

/* Only user ops: which predefined op applies to which type is the
 * library's own table, which the public interface does not show. */
static bool default_op_reduces(MPI_Op op, MPI_Datatype type)
{
    int commutative = 0;

    (void)type;
    if (op == MPI_OP_NULL || MPI_Op_commutative(op, &commutative) !=
                                 MPI_SUCCESS)
        return false;
    return commutative && op != MPI_SUM && op != MPI_PROD && op != MPI_MAX &&
           op != MPI_MIN && op != MPI_LAND && op != MPI_LOR &&
           op != MPI_LXOR && op != MPI_BAND && op != MPI_BOR &&
           op != MPI_BXOR && op != MPI_MAXLOC && op != MPI_MINLOC &&
           op != MPI_REPLACE && op != MPI_NO_OP;
}

static void default_reduce_local(MPI_Op op, MPI_Datatype type, const void *in,
                                 void *inout, size_t count)
{
    MPI_Aint lb, extent;

    MPI_Type_get_extent(type, &lb, &extent);
    for (size_t done = 0; done < count;) {
        const size_t piece = count - done < INT_MAX ? count - done : INT_MAX;
        const size_t at = done * (size_t)extent;

        MPI_Reduce_local((const char *)in + at, (char *)inout + at, (int)piece,
                         type, op);
        done += piece;
    }
}

/* The public interface cannot tell; nothing is cached then. */
static bool default_predefined(MPI_Datatype type, MPI_Op op)
{
    (void)type;
    (void)op;
    return false;
}

/* No point-to-point hooks: libzcopy's own tests read between servers
 * through UCX alone. */
zcopy_host_t zcopy_host = {
    .type_elem_bytes = default_type_elem_bytes,
    .type_size = default_type_size,
    .op_reduces = default_op_reduces,
    .reduce_local = default_reduce_local,
    .predefined = default_predefined,
};

ZCOPY_COMPONENT_API void zcopy_host_set(const zcopy_host_t *host)
{
#define HOST_TAKE(_hook)                                                     \
    if (host->_hook != NULL)                                                 \
        zcopy_host._hook = host->_hook;
    HOST_TAKE(type_elem_bytes)
    HOST_TAKE(type_size)
    HOST_TAKE(op_reduces)
    HOST_TAKE(reduce_local)
    HOST_TAKE(predefined)
    HOST_TAKE(comm_cid)
    HOST_TAKE(p2p_isend)
    HOST_TAKE(p2p_irecv)
    HOST_TAKE(p2p_done)
    HOST_TAKE(p2p_cancel)
#undef HOST_TAKE
    if (host->loop.progress != NULL)
        zcopy_progress_hooks.progress = host->loop.progress;
    if (host->loop.want_progress != NULL)
        zcopy_progress_hooks.want_progress = host->loop.want_progress;
}
