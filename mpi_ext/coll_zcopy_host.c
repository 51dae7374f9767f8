/*
 * The host hooks of libzcopy (src/host/host.h), answered from Open MPI's
 * own objects: a datatype's layout from its description, an op's
 * properties and reduction from the op itself, progress from the progress
 * engine. None of these goes through the public interface, so none fires an
 * error handler or shows in a PMPI tool.
 */
#include "coll_zcopy.h"

#include "ompi/communicator/communicator.h"
#include "ompi/datatype/ompi_datatype.h"
#include "ompi/mca/coll/base/coll_tags.h"
#include "ompi/mca/pml/pml.h"
#include "ompi/op/op.h"
#include "ompi/request/request.h"
#include "opal/runtime/opal_progress.h"

#include "host/host.h"

#include <limits.h>
#include <stdlib.h>

/* The tags of zcopy's transfers through the PML: blocking collectives'
 * that zcopy never takes, which no other message on the communicator can
 * carry meanwhile (one blocking collective at a time runs on a
 * communicator, and a finished one has matched all of its messages, but
 * for the answer to a read whose request was reported lost and arrived
 * all the same: coll_zcopy_ucx_fetch auto then stops reading through this
 * engine on the communicator, and pushes have a tag of their own; and a
 * block repaired inside a server (a rooted call's, an in-place alltoall
 * pair's), or pushed between servers by an alltoall(v) whose last sync
 * stays inside each server, whose eager send may still be unmatched when its
 * rank leaves: its receive names its source and is posted before its
 * rank leaves the call, and MPI keeps the messages of one source and tag
 * in order, so a following MPI_Exscan's message cannot overtake it). Not
 * a tag of a collective that zcopy runs through the previous component in
 * the middle of its own (alltoallv's displacements go through its
 * alltoall where blocks between servers are read). */
#define ZCOPY_P2P_READ_TAG MCA_COLL_BASE_TAG_ALLTOALLW
#define ZCOPY_P2P_PUSH_TAG MCA_COLL_BASE_TAG_EXSCAN

static int host_p2p_tag(zcopy_host_p2p_t kind)
{
    return kind == ZCOPY_HOST_P2P_PUSH ? ZCOPY_P2P_PUSH_TAG
                                       : ZCOPY_P2P_READ_TAG;
}

_Static_assert(sizeof(MPI_Fint) == sizeof(int),
               "compat/fint_2_int.h converts MPI_Fint by identity");

/* One block in signature order starting at the buffer: Open MPI's
 * contiguity for two elements (so elements also tile without gaps), and no
 * lower bound to skip. A permuted, duplicated or holed typemap is never
 * contiguous there, whatever its bounds. */
static size_t host_type_elem_bytes(MPI_Datatype type)
{
    const opal_datatype_t *d;

    if (type == MPI_DATATYPE_NULL)
        return 0;
    d = &((ompi_datatype_t *)type)->super;
    if (d->size == 0 || d->lb != 0 || d->true_lb != 0 ||
        !opal_datatype_is_contiguous_memory_layout(d, 2))
        return 0;
    return d->size;
}

static size_t host_type_size(MPI_Datatype type)
{
    if (type == MPI_DATATYPE_NULL)
        return 0;
    return ((ompi_datatype_t *)type)->super.size;
}

static bool host_op_reduces(MPI_Op op, MPI_Datatype type)
{
    ompi_op_t *o = (ompi_op_t *)op;
    char *msg = NULL;
    bool valid;

    if (op == MPI_OP_NULL || type == MPI_DATATYPE_NULL ||
        !ompi_op_is_commute(o))
        return false;
    if (!ompi_op_is_intrinsic(o))
        return true;
    /* The table Open MPI's own MPI_Reduce_local checks against. */
    valid = ompi_op_is_valid(o, (ompi_datatype_t *)type, &msg, "zcopy");
    free(msg);
    return valid;
}

static void host_reduce_local(MPI_Op op, MPI_Datatype type, const void *in,
                              void *inout, size_t count)
{
    /* The op only reads @in: its interface is older than const. */
    ompi_op_reduce((ompi_op_t *)op, (void *)(uintptr_t)in, inout, count,
                   (ompi_datatype_t *)type);
}

static bool host_predefined(MPI_Datatype type, MPI_Op op)
{
    return type != MPI_DATATYPE_NULL &&
           ompi_datatype_is_predefined((ompi_datatype_t *)type) &&
           (op == MPI_OP_NULL || ompi_op_is_intrinsic((ompi_op_t *)op));
}

/* opal_progress yields when it found nothing to do, if told to when idle
 * (Open MPI does when ranks outnumber slots); it does not say whether it
 * found anything, so a busy turn counts as yielded: the next is idle. */
static bool host_progress(void)
{
    opal_progress();
    return opal_progress_yield_when_idle;
}

static uint32_t host_comm_cid(MPI_Comm comm)
{
    return ompi_comm_get_cid((ompi_communicator_t *)comm);
}

/* The communicator @cid names in this process: the same on every member. */
static ompi_communicator_t *host_p2p_comm(uint32_t cid, int peer, size_t len)
{
    ompi_communicator_t *comm = ompi_comm_lookup(cid);

    if (comm == NULL || peer < 0 || peer >= ompi_comm_size(comm) ||
        len > INT_MAX)
        return NULL;
    return comm;
}

static int host_p2p_isend(uint32_t cid, int peer, zcopy_host_p2p_t kind,
                          const void *buf, size_t len, void **req)
{
    ompi_communicator_t *comm = host_p2p_comm(cid, peer, len);
    ompi_request_t *r = NULL;
    int rc;

    if (comm == NULL)
        return MPI_ERR_ARG;
    /* The PML only reads a send buffer: its interface is older than const. */
    rc = MCA_PML_CALL(isend((void *)(uintptr_t)buf, (int)len,
                            &ompi_mpi_byte.dt, peer, host_p2p_tag(kind),
                            MCA_PML_BASE_SEND_STANDARD, comm, &r));
    /* A request the engine failed to start is not the caller's to wait
     * for: it may never complete. */
    if (req != NULL)
        *req = rc == OMPI_SUCCESS ? r : NULL;
    else if (rc == OMPI_SUCCESS)
        rc = ompi_request_free(&r);
    return rc;
}

static int host_p2p_irecv(uint32_t cid, int peer, zcopy_host_p2p_t kind,
                          void *buf, size_t len, void **req)
{
    ompi_communicator_t *comm = host_p2p_comm(cid, peer, len);
    ompi_request_t *r = NULL;
    int rc;

    if (comm == NULL)
        return MPI_ERR_ARG;
    rc = MCA_PML_CALL(irecv(buf, (int)len, &ompi_mpi_byte.dt, peer,
                            host_p2p_tag(kind), comm, &r));
    *req = rc == OMPI_SUCCESS ? r : NULL;
    return rc;
}

static bool host_p2p_done(void *req, size_t *len, bool *failed)
{
    ompi_request_t *r = req;

    if (!REQUEST_COMPLETE(r))
        return false;
    *failed = r->req_status.MPI_ERROR != MPI_SUCCESS;
    *len = r->req_status._ucount;
    ompi_request_free(&r);
    return true;
}

static void host_p2p_cancel(void *req)
{
    ompi_request_t *r = req;

    ompi_request_cancel(r);
    ompi_request_wait(&r, MPI_STATUS_IGNORE);
}

void mca_coll_zcopy_install_host(void)
{
    static const zcopy_host_t hooks = {
        .type_elem_bytes = host_type_elem_bytes,
        .type_size = host_type_size,
        .op_reduces = host_op_reduces,
        .reduce_local = host_reduce_local,
        .predefined = host_predefined,
        .comm_cid = host_comm_cid,
        .p2p_isend = host_p2p_isend,
        .p2p_irecv = host_p2p_irecv,
        .p2p_done = host_p2p_done,
        .p2p_cancel = host_p2p_cancel,
        .loop = { .progress = host_progress,
                  .want_progress = mca_coll_zcopy_want_progress },
    };

    zcopy_host_set(&hooks);
}
