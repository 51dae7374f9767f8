/*
 * What libzcopy needs from the MPI library it runs inside: its progress
 * engine, the facts of a datatype, and the reduction of pairs zcopy has no
 * kernel for. The coll component fills this in from Open MPI's own
 * description (mpi_ext/), so that libzcopy never calls a public, profiled
 * MPI function on the application's objects: those fire error handlers
 * (Open MPI raises MPI_ERR_INTERN on datatypes it built itself) and show up
 * in PMPI tools (SPEC section 4).
 *
 * Without the component (libzcopy's own tests) the defaults ask the public
 * interface instead.
 */
#ifndef ZCOPY_HOST_H
#define ZCOPY_HOST_H

#include "host/progress.h"

#include <mpi.h>

/* The two kinds of transfers through the job's point-to-point engine,
 * each under a tag of its own: the answers to reads (whose request may be
 * reported lost and yet arrive, its answer then unmatched on the
 * communicator) must never match a pushed block's receive. */
typedef enum {
    ZCOPY_HOST_P2P_READ,          /* the answer to a read (ucx/serve.c) */
    ZCOPY_HOST_P2P_PUSH           /* a pushed alltoall(v) block between
                                     servers, or inside one a block a rank
                                     could not move through the mappings
                                     (coll/server/repair.c) */
} zcopy_host_p2p_t;

typedef struct {
    /* Bytes per element when @type is one block of memory in signature
     * order starting at the buffer (so count elements are count * size
     * bytes from it), else 0. */
    size_t (*type_elem_bytes)(MPI_Datatype type);
    /* Bytes of payload per element (the signature size), contiguous or not. */
    size_t (*type_size)(MPI_Datatype type);
    /* True when the library reduces @type with @op and the result does not
     * depend on the order of the operands: a predefined op defined on the
     * type, or a user op created commutative. */
    bool (*op_reduces)(MPI_Op op, MPI_Datatype type);
    /* inout[i] = in[i] op inout[i], i < count, with the library's own
     * implementation of @op on @type. */
    void (*reduce_local)(MPI_Op op, MPI_Datatype type, const void *in,
                         void *inout, size_t count);
    /* True when @type, and @op unless it is MPI_OP_NULL, are predefined:
     * handles that are never freed, so that a cache may key on them (a
     * freed user handle may come back naming another layout). */
    bool (*predefined)(MPI_Datatype type, MPI_Op op);
    zcopy_progress_hooks_t loop;  /* progress.h */
    /* The job's point-to-point engine, one of the ways the spanning
     * collectives move data between servers (coll_zcopy_ucx_fetch pml,
     * and auto's large reads and pushes), and the way a call inside a
     * server repairs a block (coll/server/repair.c): @len bytes to or
     * from rank @peer of the communicator whose context id is @cid, under
     * a tag of the component's. 0 and a request, or the engine's own
     * nonzero error code. A send given no @req is freed at once and
     * completes on its own (as MPI_Request_free lets it). NULL
     * where there is none (the defaults). */
    uint32_t (*comm_cid)(MPI_Comm comm);
    int (*p2p_isend)(uint32_t cid, int peer, zcopy_host_p2p_t kind,
                     const void *buf, size_t len, void **req);
    int (*p2p_irecv)(uint32_t cid, int peer, zcopy_host_p2p_t kind,
                     void *buf, size_t len, void **req);
    /* True once @req has completed, which it checks without progressing
     * anything (its callers may be inside the progress loop); the request
     * is then freed, *@len says the bytes it moved and *@failed whether it
     * failed. */
    bool (*p2p_done)(void *req, size_t *len, bool *failed);
    /* Cancels @req, waits until it is gone and frees it. */
    void (*p2p_cancel)(void *req);
} zcopy_host_t;

/* Set once by the component, before any communicator exists, and read by
 * every layer: the process has one MPI library, hence one global. */
extern zcopy_host_t zcopy_host;

/* Replaces every hook @host sets (a NULL one keeps its default). */
void zcopy_host_set(const zcopy_host_t *host);

#endif
