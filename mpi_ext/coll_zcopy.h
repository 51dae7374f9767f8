/*
 * coll/zcopy: the Open MPI 4.1 collective component. It holds no algorithm:
 * every intercepted collective goes to libzcopy, which either runs it
 * zero-copy or answers "fall back", and then it goes to the component that
 * was selected before zcopy. This is the only part of the project that
 * includes Open MPI internal headers.
 */
#ifndef MCA_COLL_ZCOPY_H
#define MCA_COLL_ZCOPY_H

#include "ompi_config.h"

#include "mpi.h"
#include "ompi/communicator/communicator.h"
#include "ompi/mca/coll/coll.h"

#include "comm/comm.h"

BEGIN_C_DECLS

typedef struct {
    mca_coll_base_component_2_0_0_t super;
    int priority;                 /* coll_zcopy_priority */
    int verbose;                  /* coll_zcopy_verbose */
    int virtual_servers;          /* coll_zcopy_virtual_servers */
    unsigned long small_msg;      /* coll_zcopy_small_msg */
    unsigned long inline_max;     /* coll_zcopy_inline_max */
    unsigned long inline_max_yield; /* coll_zcopy_inline_max_yield */
    unsigned long root_moves_max; /* coll_zcopy_root_moves_max */
    unsigned long rooted_yield_min; /* coll_zcopy_rooted_yield_min */
    unsigned long one_per_server_min; /* coll_zcopy_one_per_server_min */
    bool one_per_server_moves;    /* coll_zcopy_one_per_server_moves */
    int ucx_fetch;                /* coll_zcopy_ucx_fetch */
    int ucx_max_requests;         /* coll_zcopy_ucx_max_requests */
    unsigned long ucx_p2p_min;    /* coll_zcopy_ucx_p2p_min, bytes */
    unsigned long ucx_push_min;   /* coll_zcopy_ucx_push_min, bytes */
    unsigned long ucx_push_part_max; /* coll_zcopy_ucx_push_part_max */
    unsigned long span_inline_max; /* coll_zcopy_span_inline_max */
    int span_dissemination_min;   /* coll_zcopy_span_dissemination_min */
    int yield;                    /* coll_zcopy_yield */
    int sleep;                    /* coll_zcopy_sleep */
    int transport;                /* coll_zcopy_transport (zcopy_transport_t) */
    int wait_report;              /* coll_zcopy_wait_report, seconds */
    int peer_access;              /* coll_zcopy_peer_access (zcopy_ipc_access_t) */
    unsigned long streaming_min;  /* coll_zcopy_streaming_min, bytes */
} mca_coll_zcopy_component_t;

OMPI_MODULE_DECLSPEC extern mca_coll_zcopy_component_t mca_coll_zcopy_component;

/* The collectives coll/zcopy intercepts (SPEC section 4). */
#define ZCOPY_COLLECTIVES(X)                                                 \
    X(allreduce) X(reduce) X(reduce_scatter) X(reduce_scatter_block)         \
    X(allgather) X(allgatherv) X(bcast) X(gather) X(gatherv) X(scatter)      \
    X(scatterv) X(alltoall) X(alltoallv) X(barrier)

/* The functions and modules that were in comm->c_coll before zcopy was
 * enabled: every fallback goes there. */
typedef struct {
#define ZCOPY_PREV_FIELD(_name)                                              \
    mca_coll_base_module_##_name##_fn_t _name;                               \
    mca_coll_base_module_t *_name##_module;
    ZCOPY_COLLECTIVES(ZCOPY_PREV_FIELD)
#undef ZCOPY_PREV_FIELD
} mca_coll_zcopy_prev_t;

typedef struct {
    mca_coll_base_module_t super;
    ompi_communicator_t *comm;
    mca_coll_zcopy_prev_t prev;
    zcopy_comm_t *zcomm;          /* libzcopy's state */
    bool opted_out;               /* info key mpix_zcopy=false */
} mca_coll_zcopy_module_t;

OBJ_CLASS_DECLARATION(mca_coll_zcopy_module_t);

mca_coll_base_module_t *mca_coll_zcopy_comm_query(ompi_communicator_t *comm,
                                                  int *priority);

/* Hands libzcopy the hooks it needs from Open MPI (coll_zcopy_host.c). */
void mca_coll_zcopy_install_host(void);
/* Puts zcopy's progress callback into Open MPI's loop, once. */
void mca_coll_zcopy_want_progress(void);

/* Sets up, once per process, the call at the start of MPI_Finalize that
 * closes connections between servers while every peer is still there. */
void mca_coll_zcopy_finalize_hook(void);

/* MPI_T performance variables (coll_zcopy_component.c). */
int mca_coll_zcopy_register_pvars(void);

END_C_DECLS

#endif
