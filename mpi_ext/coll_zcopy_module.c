/*
 * Module: per-communicator selection, the saved fallbacks, and the
 * intercepted collectives.
 */
#include "coll_zcopy.h"

#include <strings.h>

#include "opal/util/info.h"
#include "opal/util/output.h"

#include "coll/coll.h"

/* Falls back: the previous component may build its algorithm from other
 * collectives on the same communicator (tuned's reduce_scatter is a reduce
 * and a scatterv); those go straight to it too, uncounted, as part of the
 * one fallback. */
#define ZCOPY_CALL_PREV(_m, _name, ...)                                      \
    do {                                                                     \
        int _rc;                                                             \
        zcopy_internal_enter();                                              \
        _rc = (_m)->prev._name(__VA_ARGS__, (_m)->prev._name##_module);      \
        zcopy_internal_leave();                                              \
        return _rc;                                                          \
    } while (0)

/* --- service collectives for libzcopy's own setup ------------------------ */

static int zcopy_svc_allgather(const void *sbuf, void *rbuf, size_t bytes,
                               void *ctx)
{
    mca_coll_zcopy_module_t *m = ctx;

    ZCOPY_CALL_PREV(m, allgather, sbuf, (int)bytes, MPI_BYTE, rbuf, (int)bytes,
                             MPI_BYTE, m->comm);
}

static int zcopy_svc_bcast(void *buf, size_t bytes, int root, void *ctx)
{
    mca_coll_zcopy_module_t *m = ctx;

    ZCOPY_CALL_PREV(m, bcast, buf, (int)bytes, MPI_BYTE, root, m->comm);
}

static int zcopy_svc_alltoall(const void *sbuf, void *rbuf, size_t bytes,
                              void *ctx)
{
    mca_coll_zcopy_module_t *m = ctx;

    ZCOPY_CALL_PREV(m, alltoall, sbuf, (int)bytes, MPI_BYTE, rbuf, (int)bytes,
                             MPI_BYTE, m->comm);
}

static int zcopy_svc_barrier(void *ctx)
{
    mca_coll_zcopy_module_t *m = ctx;

    ZCOPY_CALL_PREV(m, barrier, m->comm);
}

static int zcopy_svc_allreduce(void *buf, size_t count, MPI_Datatype type,
                               MPI_Op op, void *ctx)
{
    mca_coll_zcopy_module_t *m = ctx;

    ZCOPY_CALL_PREV(m, allreduce, MPI_IN_PLACE, buf, (int)count, type, op,
                    m->comm);
}

static int zcopy_svc_reduce(const void *sbuf, void *rbuf, size_t count,
                            MPI_Datatype type, MPI_Op op, int root, void *ctx)
{
    mca_coll_zcopy_module_t *m = ctx;

    ZCOPY_CALL_PREV(m, reduce, sbuf, rbuf, (int)count, type, op, root,
                    m->comm);
}

/* --- routing ------------------------------------------------------------- */

/* OMPI_SUCCESS when libzcopy ran the collective, ZCOPY_FALLBACK when every
 * rank hands it to the previous component, an OMPI error otherwise. */
static int zcopy_route(mca_coll_zcopy_module_t *m, const zcopy_coll_args_t *a)
{
    zcopy_status_t st;

    if (zcopy_internal_active())
        return ZCOPY_FALLBACK;
    st = zcopy_coll_run(m->zcomm, a);
    if (st == ZCOPY_SUCCESS || st == ZCOPY_FALLBACK)
        return st;
    opal_output(0, "coll/zcopy: %s failed on rank %d: %s (%s)",
                zcopy_coll_names[a->type], ompi_comm_rank(m->comm),
                zcopy_strerror(st), zcopy_error_detail());
    return OMPI_ERROR;
}

#define ZCOPY_ROUTE(_m, ...)                                                 \
    do {                                                                     \
        zcopy_coll_args_t _args = { __VA_ARGS__ };                           \
        int _rc = zcopy_route((_m), &_args);                                 \
        if (_rc != ZCOPY_FALLBACK)                                           \
            return _rc;                                                      \
    } while (0)

#define ZCOPY_MODULE(_module) ((mca_coll_zcopy_module_t *)(_module))

/* A process with nothing activated declines a call with data in it before
 * the call is even described: this is all that a job which never activates
 * memory pays per collective. */
static inline bool zcopy_declines_idle(const mca_coll_zcopy_module_t *m,
                                       zcopy_coll_type_t type, int scount,
                                       struct ompi_datatype_t *stype,
                                       int rcount,
                                       struct ompi_datatype_t *rtype, int root)
{
    return !zcopy_internal_active() &&
           zcopy_coll_decline_idle(m->zcomm, type, (size_t)scount, stype,
                                   (size_t)rcount, rtype, root);
}

static int coll_zcopy_allreduce(const void *sbuf, void *rbuf, int count,
                           struct ompi_datatype_t *dtype, struct ompi_op_t *op,
                           ompi_communicator_t *comm,
                           mca_coll_base_module_t *module)
{
    mca_coll_zcopy_module_t *m = ZCOPY_MODULE(module);

    if (!zcopy_declines_idle(m, ZCOPY_COLL_ALLREDUCE, count, dtype, count,
                             dtype, -1))
        ZCOPY_ROUTE(m, .type = ZCOPY_COLL_ALLREDUCE, .sbuf = sbuf,
                    .scount = count, .stype = dtype, .rbuf = rbuf,
                    .rcount = count, .rtype = dtype, .op = op);
    ZCOPY_CALL_PREV(m, allreduce, sbuf, rbuf, count, dtype, op, comm);
}

static int coll_zcopy_reduce(const void *sbuf, void *rbuf, int count,
                        struct ompi_datatype_t *dtype, struct ompi_op_t *op, int root,
                        ompi_communicator_t *comm,
                        mca_coll_base_module_t *module)
{
    mca_coll_zcopy_module_t *m = ZCOPY_MODULE(module);

    if (!zcopy_declines_idle(m, ZCOPY_COLL_REDUCE, count, dtype, count, dtype,
                             root))
        ZCOPY_ROUTE(m, .type = ZCOPY_COLL_REDUCE, .sbuf = sbuf, .scount = count,
                    .stype = dtype, .rbuf = rbuf, .rcount = count,
                    .rtype = dtype, .op = op, .root = root);
    ZCOPY_CALL_PREV(m, reduce, sbuf, rbuf, count, dtype, op, root, comm);
}

static int coll_zcopy_reduce_scatter(const void *sbuf, void *rbuf,
                                const int *rcounts, struct ompi_datatype_t *dtype,
                                struct ompi_op_t *op, ompi_communicator_t *comm,
                                mca_coll_base_module_t *module)
{
    mca_coll_zcopy_module_t *m = ZCOPY_MODULE(module);

    ZCOPY_ROUTE(m, .type = ZCOPY_COLL_REDUCE_SCATTER, .sbuf = sbuf,
                .stype = dtype, .rbuf = rbuf, .rtype = dtype,
                .rcounts = rcounts, .op = op);
    ZCOPY_CALL_PREV(m, reduce_scatter, sbuf, rbuf, rcounts, dtype, op, comm);
}

static int coll_zcopy_reduce_scatter_block(const void *sbuf, void *rbuf,
                                      int rcount, struct ompi_datatype_t *dtype,
                                      struct ompi_op_t *op,
                                      ompi_communicator_t *comm,
                                      mca_coll_base_module_t *module)
{
    mca_coll_zcopy_module_t *m = ZCOPY_MODULE(module);

    if (!zcopy_declines_idle(m, ZCOPY_COLL_REDUCE_SCATTER_BLOCK, rcount, dtype,
                             rcount, dtype, -1))
        ZCOPY_ROUTE(m, .type = ZCOPY_COLL_REDUCE_SCATTER_BLOCK, .sbuf = sbuf,
                    .scount = rcount, .stype = dtype, .rbuf = rbuf,
                    .rcount = rcount, .rtype = dtype, .op = op);
    ZCOPY_CALL_PREV(m, reduce_scatter_block, sbuf, rbuf, rcount, dtype, op, comm);
}

static int coll_zcopy_allgather(const void *sbuf, int scount,
                           struct ompi_datatype_t *stype, void *rbuf, int rcount,
                           struct ompi_datatype_t *rtype, ompi_communicator_t *comm,
                           mca_coll_base_module_t *module)
{
    mca_coll_zcopy_module_t *m = ZCOPY_MODULE(module);

    if (!zcopy_declines_idle(m, ZCOPY_COLL_ALLGATHER, scount, stype, rcount,
                             rtype, -1))
        ZCOPY_ROUTE(m, .type = ZCOPY_COLL_ALLGATHER, .sbuf = sbuf,
                    .scount = scount, .stype = stype, .rbuf = rbuf,
                    .rcount = rcount, .rtype = rtype);
    ZCOPY_CALL_PREV(m, allgather, sbuf, scount, stype, rbuf, rcount, rtype, comm);
}

static int coll_zcopy_allgatherv(const void *sbuf, int scount,
                            struct ompi_datatype_t *stype, void *rbuf,
                            const int *rcounts, const int *displs,
                            struct ompi_datatype_t *rtype, ompi_communicator_t *comm,
                            mca_coll_base_module_t *module)
{
    mca_coll_zcopy_module_t *m = ZCOPY_MODULE(module);

    ZCOPY_ROUTE(m, .type = ZCOPY_COLL_ALLGATHERV, .sbuf = sbuf,
                .scount = scount, .stype = stype, .rbuf = rbuf,
                .rtype = rtype, .rcounts = rcounts, .rdispls = displs);
    ZCOPY_CALL_PREV(m, allgatherv, sbuf, scount, stype, rbuf, rcounts, displs,
                              rtype, comm);
}

static int coll_zcopy_bcast(void *buf, int count, struct ompi_datatype_t *dtype, int root,
                       ompi_communicator_t *comm,
                       mca_coll_base_module_t *module)
{
    mca_coll_zcopy_module_t *m = ZCOPY_MODULE(module);

    if (!zcopy_declines_idle(m, ZCOPY_COLL_BCAST, count, dtype, count, dtype,
                             root))
        ZCOPY_ROUTE(m, .type = ZCOPY_COLL_BCAST, .sbuf = buf, .scount = count,
                    .stype = dtype, .rbuf = buf, .rcount = count,
                    .rtype = dtype, .root = root);
    ZCOPY_CALL_PREV(m, bcast, buf, count, dtype, root, comm);
}

static int coll_zcopy_gather(const void *sbuf, int scount, struct ompi_datatype_t *stype,
                        void *rbuf, int rcount, struct ompi_datatype_t *rtype,
                        int root, ompi_communicator_t *comm,
                        mca_coll_base_module_t *module)
{
    mca_coll_zcopy_module_t *m = ZCOPY_MODULE(module);

    if (!zcopy_declines_idle(m, ZCOPY_COLL_GATHER, scount, stype, rcount,
                             rtype, root))
        ZCOPY_ROUTE(m, .type = ZCOPY_COLL_GATHER, .sbuf = sbuf,
                    .scount = scount, .stype = stype, .rbuf = rbuf,
                    .rcount = rcount, .rtype = rtype, .root = root);
    ZCOPY_CALL_PREV(m, gather, sbuf, scount, stype, rbuf, rcount, rtype, root,
                          comm);
}

static int coll_zcopy_gatherv(const void *sbuf, int scount, struct ompi_datatype_t *stype,
                         void *rbuf, const int *rcounts, const int *displs,
                         struct ompi_datatype_t *rtype, int root,
                         ompi_communicator_t *comm,
                         mca_coll_base_module_t *module)
{
    mca_coll_zcopy_module_t *m = ZCOPY_MODULE(module);

    ZCOPY_ROUTE(m, .type = ZCOPY_COLL_GATHERV, .sbuf = sbuf, .scount = scount,
                .stype = stype, .rbuf = rbuf, .rtype = rtype,
                .rcounts = rcounts, .rdispls = displs, .root = root);
    ZCOPY_CALL_PREV(m, gatherv, sbuf, scount, stype, rbuf, rcounts, displs, rtype,
                           root, comm);
}

static int coll_zcopy_scatter(const void *sbuf, int scount, struct ompi_datatype_t *stype,
                         void *rbuf, int rcount, struct ompi_datatype_t *rtype,
                         int root, ompi_communicator_t *comm,
                         mca_coll_base_module_t *module)
{
    mca_coll_zcopy_module_t *m = ZCOPY_MODULE(module);

    if (!zcopy_declines_idle(m, ZCOPY_COLL_SCATTER, scount, stype, rcount,
                             rtype, root))
        ZCOPY_ROUTE(m, .type = ZCOPY_COLL_SCATTER, .sbuf = sbuf,
                    .scount = scount, .stype = stype, .rbuf = rbuf,
                    .rcount = rcount, .rtype = rtype, .root = root);
    ZCOPY_CALL_PREV(m, scatter, sbuf, scount, stype, rbuf, rcount, rtype, root,
                           comm);
}

static int coll_zcopy_scatterv(const void *sbuf, const int *scounts,
                          const int *displs, struct ompi_datatype_t *stype,
                          void *rbuf, int rcount, struct ompi_datatype_t *rtype,
                          int root, ompi_communicator_t *comm,
                          mca_coll_base_module_t *module)
{
    mca_coll_zcopy_module_t *m = ZCOPY_MODULE(module);

    ZCOPY_ROUTE(m, .type = ZCOPY_COLL_SCATTERV, .sbuf = sbuf, .stype = stype,
                .scounts = scounts, .sdispls = displs, .rbuf = rbuf,
                .rcount = rcount, .rtype = rtype, .root = root);
    ZCOPY_CALL_PREV(m, scatterv, sbuf, scounts, displs, stype, rbuf, rcount, rtype,
                            root, comm);
}

static int coll_zcopy_alltoall(const void *sbuf, int scount, struct ompi_datatype_t *stype,
                          void *rbuf, int rcount, struct ompi_datatype_t *rtype,
                          ompi_communicator_t *comm,
                          mca_coll_base_module_t *module)
{
    mca_coll_zcopy_module_t *m = ZCOPY_MODULE(module);

    if (!zcopy_declines_idle(m, ZCOPY_COLL_ALLTOALL, scount, stype, rcount,
                             rtype, -1))
        ZCOPY_ROUTE(m, .type = ZCOPY_COLL_ALLTOALL, .sbuf = sbuf,
                    .scount = scount, .stype = stype, .rbuf = rbuf,
                    .rcount = rcount, .rtype = rtype);
    ZCOPY_CALL_PREV(m, alltoall, sbuf, scount, stype, rbuf, rcount, rtype, comm);
}

static int coll_zcopy_alltoallv(const void *sbuf, const int *scounts,
                           const int *sdispls, struct ompi_datatype_t *stype,
                           void *rbuf, const int *rcounts, const int *rdispls,
                           struct ompi_datatype_t *rtype, ompi_communicator_t *comm,
                           mca_coll_base_module_t *module)
{
    mca_coll_zcopy_module_t *m = ZCOPY_MODULE(module);

    ZCOPY_ROUTE(m, .type = ZCOPY_COLL_ALLTOALLV, .sbuf = sbuf, .stype = stype,
                .scounts = scounts, .sdispls = sdispls, .rbuf = rbuf,
                .rtype = rtype, .rcounts = rcounts, .rdispls = rdispls);
    ZCOPY_CALL_PREV(m, alltoallv, sbuf, scounts, sdispls, stype, rbuf, rcounts,
                             rdispls, rtype, comm);
}

static int coll_zcopy_barrier(ompi_communicator_t *comm,
                         mca_coll_base_module_t *module)
{
    mca_coll_zcopy_module_t *m = ZCOPY_MODULE(module);

    ZCOPY_ROUTE(m, .type = ZCOPY_COLL_BARRIER);
    ZCOPY_CALL_PREV(m, barrier, comm);
}

/* --- enable / disable ---------------------------------------------------- */

/* Saves what the framework installed before us (lower priorities are enabled
 * first) and holds a reference on each module for as long as we may call it.
 * Fails when any function is missing: then zcopy stays off this comm. */
static int zcopy_module_enable(mca_coll_base_module_t *module,
                               ompi_communicator_t *comm)
{
    mca_coll_zcopy_module_t *m = ZCOPY_MODULE(module);
    zcopy_comm_ops_t ops = { .allgather = zcopy_svc_allgather,
                             .bcast = zcopy_svc_bcast,
                             .alltoall = zcopy_svc_alltoall,
                             .barrier = zcopy_svc_barrier,
                             .allreduce = zcopy_svc_allreduce,
                             .reduce = zcopy_svc_reduce, .ctx = m };

#define ZCOPY_SAVE(_name)                                                    \
    do {                                                                     \
        if (comm->c_coll->coll_##_name == NULL ||                            \
            comm->c_coll->coll_##_name##_module == NULL) {                   \
            zcopy_log(ZCOPY_LOG_INFO, "component", "no previous " #_name     \
                      " on %s; disabled there", comm->c_name);               \
            return OMPI_ERROR;                                               \
        }                                                                    \
        m->prev._name = comm->c_coll->coll_##_name;                          \
        m->prev._name##_module = comm->c_coll->coll_##_name##_module;        \
        OBJ_RETAIN(m->prev._name##_module);                                  \
    } while (0);

    ZCOPY_COLLECTIVES(ZCOPY_SAVE)
#undef ZCOPY_SAVE

    mca_coll_zcopy_finalize_hook();
    m->comm = comm;
    if (zcopy_comm_create(comm, ompi_comm_rank(comm), ompi_comm_size(comm),
                          &ops, &m->zcomm) != ZCOPY_SUCCESS)
        return OMPI_ERR_OUT_OF_RESOURCE;
    m->zcomm->name = comm->c_name;
    /* Opting out is agreed at the first collective like every setting
     * that changes the path: a rank that alone opted out would otherwise
     * skip the set-up its peers wait in. */
    m->zcomm->opted_out = m->opted_out;
    zcopy_log(ZCOPY_LOG_DEBUG, "component", "enabled on %s (%d ranks)",
              comm->c_name, ompi_comm_size(comm));
    return OMPI_SUCCESS;
}

/* Called once per slot the module owns: nothing to do per call, the
 * destructor releases everything when the last reference goes. */
static int zcopy_module_disable(mca_coll_base_module_t *module,
                                ompi_communicator_t *comm)
{
    (void)module;
    (void)comm;
    return OMPI_SUCCESS;
}

static void zcopy_module_construct(mca_coll_zcopy_module_t *m)
{
    memset(&m->prev, 0, sizeof(m->prev));
    m->comm = NULL;
    m->zcomm = NULL;
    m->opted_out = false;
}

static void zcopy_module_destruct(mca_coll_zcopy_module_t *m)
{
    zcopy_comm_destroy(m->zcomm);
#define ZCOPY_RELEASE(_name)                                                 \
    if (m->prev._name##_module != NULL)                                      \
        OBJ_RELEASE(m->prev._name##_module);
    ZCOPY_COLLECTIVES(ZCOPY_RELEASE)
#undef ZCOPY_RELEASE
}

OBJ_CLASS_INSTANCE(mca_coll_zcopy_module_t, mca_coll_base_module_t,
                   zcopy_module_construct, zcopy_module_destruct);

/* --- query --------------------------------------------------------------- */

/* The info key mpix_zcopy=false (also 0/no/off) opts a communicator out. */
static bool zcopy_comm_opted_out(ompi_communicator_t *comm)
{
    char value[16];
    int flag = 0;

    if (comm->super.s_info == NULL)
        return false;
    if (opal_info_get(comm->super.s_info, "mpix_zcopy", sizeof(value) - 1,
                      value, &flag) != OPAL_SUCCESS || !flag)
        return false;
    return strcasecmp(value, "false") == 0 || strcmp(value, "0") == 0 ||
           strcasecmp(value, "no") == 0 || strcasecmp(value, "off") == 0;
}

mca_coll_base_module_t *mca_coll_zcopy_comm_query(ompi_communicator_t *comm,
                                                  int *priority)
{
    mca_coll_zcopy_module_t *m;

    if (OMPI_COMM_IS_INTER(comm) || ompi_comm_size(comm) < 2 ||
        mca_coll_zcopy_component.priority <= 0)
        return NULL;
    m = OBJ_NEW(mca_coll_zcopy_module_t);
    if (m == NULL)
        return NULL;
    /* An opted-out communicator still gets a module, one that only
     * forwards: its collectives must release peers' freed pages too (SPEC
     * section 3), and it counts nothing and sets nothing up. */
    m->opted_out = zcopy_comm_opted_out(comm);
    if (m->opted_out)
        zcopy_log(ZCOPY_LOG_INFO, "component", "%s opted out (mpix_zcopy)",
                  comm->c_name);
    *priority = mca_coll_zcopy_component.priority;
    m->super.coll_module_enable = zcopy_module_enable;
    m->super.coll_module_disable = zcopy_module_disable;
    m->super.coll_allreduce = coll_zcopy_allreduce;
    m->super.coll_reduce = coll_zcopy_reduce;
    m->super.coll_reduce_scatter = coll_zcopy_reduce_scatter;
    m->super.coll_reduce_scatter_block = coll_zcopy_reduce_scatter_block;
    m->super.coll_allgather = coll_zcopy_allgather;
    m->super.coll_allgatherv = coll_zcopy_allgatherv;
    m->super.coll_bcast = coll_zcopy_bcast;
    m->super.coll_gather = coll_zcopy_gather;
    m->super.coll_gatherv = coll_zcopy_gatherv;
    m->super.coll_scatter = coll_zcopy_scatter;
    m->super.coll_scatterv = coll_zcopy_scatterv;
    m->super.coll_alltoall = coll_zcopy_alltoall;
    m->super.coll_alltoallv = coll_zcopy_alltoallv;
    m->super.coll_barrier = coll_zcopy_barrier;
    return &m->super;
}
