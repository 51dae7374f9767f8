/*
 * Planning: which buffers of this rank each collective touches, whether
 * they lie in activated memory, and what the rank publishes at arrival
 * (its arguments and, for the v-collectives, which of its vectors). Only
 * the arguments MPI declares significant on this rank are read, and
 * nothing is written but the plan and this communicator's caches: the
 * control plane of the path taken publishes it.
 */
#include "path.h"

#include "host/host.h"
#include "reduce/reduce.h"
#include "registry/registry.h"

#include <stdlib.h>
#include <string.h>

/* --- datatypes and extents ----------------------------------------------- */

/* Programs reduce with one (op, type) call after call: the answer for a
 * pair with a kernel (predefined op and type: handles that never change)
 * is remembered, anything else asked anew. */
static bool reduce_supported_cached(zcopy_comm_t *zc, MPI_Op op,
                                    MPI_Datatype type)
{
    if (zc->reduce_cache.op == op && zc->reduce_cache.type == type &&
        op != MPI_OP_NULL)
        return true;
    if (zcopy_reduce_kernel(op, type) != NULL) {
        zc->reduce_cache.op = op;
        zc->reduce_cache.type = type;
        return true;
    }
    return zcopy_reduce_supported(op, type);
}

/* Byte extent [lo, hi) covered by a v-layout; false on a negative count
 * or displacement. */
static bool vector_extent(const int *counts, const int *displs, int n,
                          size_t elem, size_t *lo, size_t *hi)
{
    *lo = SIZE_MAX;
    *hi = 0;
    for (int j = 0; j < n; j++) {
        if (displs[j] < 0 || counts[j] < 0)
            return false;
        if (counts[j] == 0)
            continue;
        size_t b = (size_t)displs[j] * elem;
        size_t e = b + (size_t)counts[j] * elem;
        *lo = b < *lo ? b : *lo;
        *hi = e > *hi ? e : *hi;
    }
    if (*hi == 0)
        *lo = 0;
    return true;
}

/* --- planning: this rank's buffers per collective ------------------------ */

static void plan_send(coll_plan_t *p, const void *buf, size_t len)
{
    p->sbuf = buf;
    p->slen = len;
    p->args.sbuf = (uintptr_t)buf;
}

static void plan_recv(coll_plan_t *p, const void *buf, size_t len)
{
    p->rbuf = buf;
    p->rlen = len;
    p->args.rbuf = (uintptr_t)buf;
}

/* Publishes @elems (MPI's ints, in units of @scale bytes) as vector @which. */
static void plan_vector(coll_plan_t *p, int which, const int *elems,
                        size_t scale)
{
    p->vectors[which] = (zcopy_plan_vector_t){ .elems = elems,
                                               .scale = scale };
}

static void plan_reduction(zcopy_comm_t *zc, const zcopy_coll_args_t *a,
                           coll_plan_t *p)
{
    const bool in_place = a->sbuf == MPI_IN_PLACE;
    const bool root = a->type != ZCOPY_COLL_REDUCE || a->root == zc->rank;
    size_t e = p->ssize, total = a->scount, own = a->rcount;

    if (!reduce_supported_cached(zc, a->op, a->stype)) {
        p->args.reason = REASON_OP;
        return;
    }
    if (a->type == ZCOPY_COLL_REDUCE_SCATTER) {
        total = 0;
        for (int j = 0; j < zc->size; j++) {
            if (a->rcounts[j] < 0) {
                p->args.reason = REASON_LAYOUT;
                return;
            }
            total += (size_t)a->rcounts[j];
        }
        own = (size_t)a->rcounts[zc->rank];
    } else if (a->type == ZCOPY_COLL_REDUCE_SCATTER_BLOCK) {
        total = a->rcount * (size_t)zc->size;
    }
    if (in_place && root) {
        p->args.flags |= ZCOPY_PLAN_IN_PLACE;
        plan_send(p, a->rbuf, total * e);
        plan_recv(p, a->rbuf, total * e);
        return;
    }
    plan_send(p, a->sbuf, total * e);
    if (root)
        plan_recv(p, a->rbuf, own * e);
}

static void plan_allgather(const zcopy_comm_t *zc, const zcopy_coll_args_t *a,
                           coll_plan_t *p)
{
    size_t lo = 0, hi, own_off, own_len;
    const int n = zc->size, r = zc->rank;

    if (a->type == ZCOPY_COLL_ALLGATHER) {
        hi = a->rcount * p->rsize * (size_t)n;
        own_off = a->rcount * p->rsize * (size_t)r;
        own_len = a->rcount * p->rsize;
    } else {
        if (!vector_extent(a->rcounts, a->rdispls, n, p->rsize, &lo, &hi)) {
            p->args.reason = REASON_LAYOUT;
            return;
        }
        own_off = (size_t)a->rdispls[r] * p->rsize;
        own_len = (size_t)a->rcounts[r] * p->rsize;
    }
    plan_recv(p, (const uint8_t *)a->rbuf + lo, hi - lo);
    p->args.rbuf = (uintptr_t)a->rbuf;
    if (a->sbuf == MPI_IN_PLACE) {
        p->args.flags |= ZCOPY_PLAN_IN_PLACE;
        plan_send(p, (const uint8_t *)a->rbuf + own_off, own_len);
    } else {
        plan_send(p, a->sbuf, a->scount * p->ssize);
    }
}

static void plan_gather(const zcopy_comm_t *zc, const zcopy_coll_args_t *a,
                        coll_plan_t *p)
{
    const int n = zc->size, r = zc->rank;
    size_t lo = 0, hi;

    if (r != a->root) {
        plan_send(p, a->sbuf, a->scount * p->ssize);
        return;
    }
    if (a->type == ZCOPY_COLL_GATHER) {
        hi = a->rcount * p->rsize * (size_t)n;
    } else {
        if (!vector_extent(a->rcounts, a->rdispls, n, p->rsize, &lo, &hi)) {
            p->args.reason = REASON_LAYOUT;
            return;
        }
        plan_vector(p, 0, a->rdispls, p->rsize);
    }
    plan_recv(p, (const uint8_t *)a->rbuf + lo, hi - lo);
    p->args.rbuf = (uintptr_t)a->rbuf;
    if (a->sbuf == MPI_IN_PLACE)
        p->args.flags |= ZCOPY_PLAN_IN_PLACE;
    else
        plan_send(p, a->sbuf, a->scount * p->ssize);
}

static void plan_scatter(const zcopy_comm_t *zc, const zcopy_coll_args_t *a,
                         coll_plan_t *p)
{
    const int n = zc->size, r = zc->rank;
    size_t lo = 0, hi;

    if (r != a->root) {
        plan_recv(p, a->rbuf, a->rcount * p->rsize);
        return;
    }
    if (a->type == ZCOPY_COLL_SCATTER) {
        hi = a->scount * p->ssize * (size_t)n;
    } else {
        if (!vector_extent(a->scounts, a->sdispls, n, p->ssize, &lo, &hi)) {
            p->args.reason = REASON_LAYOUT;
            return;
        }
        plan_vector(p, 0, a->sdispls, p->ssize);
    }
    plan_send(p, (const uint8_t *)a->sbuf + lo, hi - lo);
    p->args.sbuf = (uintptr_t)a->sbuf;
    if (a->rbuf == MPI_IN_PLACE)
        p->args.flags |= ZCOPY_PLAN_IN_PLACE;
    else
        plan_recv(p, a->rbuf, a->rcount * p->rsize);
}

static void plan_alltoall(const zcopy_comm_t *zc, const zcopy_coll_args_t *a,
                          coll_plan_t *p)
{
    const int n = zc->size;
    const bool in_place = a->sbuf == MPI_IN_PLACE;
    size_t slo = 0, shi, rlo = 0, rhi;

    if (in_place)
        p->args.flags |= ZCOPY_PLAN_IN_PLACE;
    if (a->type == ZCOPY_COLL_ALLTOALL) {
        rhi = a->rcount * p->rsize * (size_t)n;
        plan_recv(p, a->rbuf, rhi);
        if (in_place)
            plan_send(p, a->rbuf, rhi);
        else
            plan_send(p, a->sbuf, a->scount * p->ssize * (size_t)n);
        return;
    }
    if (!vector_extent(a->rcounts, a->rdispls, n, p->rsize, &rlo, &rhi)) {
        p->args.reason = REASON_LAYOUT;
        return;
    }
    plan_vector(p, 1, a->rdispls, p->rsize);
    plan_vector(p, 2, a->rcounts, p->rsize);
    plan_recv(p, (const uint8_t *)a->rbuf + rlo, rhi - rlo);
    p->args.rbuf = (uintptr_t)a->rbuf;
    if (in_place) {
        plan_send(p, (const uint8_t *)a->rbuf + rlo, rhi - rlo);
        p->args.sbuf = (uintptr_t)a->rbuf;
        return;
    }
    if (!vector_extent(a->scounts, a->sdispls, n, p->ssize, &slo, &shi)) {
        p->args.reason = REASON_LAYOUT;
        return;
    }
    plan_vector(p, 0, a->sdispls, p->ssize);
    plan_send(p, (const uint8_t *)a->sbuf + slo, shi - slo);
    p->args.sbuf = (uintptr_t)a->sbuf;
}

/* --- the last plans ------------------------------------------------------- */

/* Programs make the same few collectives on the same buffers loop after
 * loop (a training step's allreduce, bcast and allgather), and planning a
 * small one (the library's answers about its datatypes, the registry's
 * lookup) costs about as much as the rest of its work inside a server. A
 * plan depends only on the call's arguments and on the registry, so the
 * last few are kept with the registry's epoch and reused while both stay.
 * Only calls whose datatypes and op, where planning reads them, are
 * predefined (never freed, so never reused for another layout), and no
 * v-collective, whose counts are arrays. */
#define PLAN_MEMO_ENTRIES 4

typedef struct {
    uint64_t epoch;               /* the registry's; 0: nothing kept */
    zcopy_coll_args_t call;       /* its fixed-size arguments */
    coll_plan_t plan;
} plan_entry_t;

struct zcopy_plan_memo {
    plan_entry_t entry[PLAN_MEMO_ENTRIES];
    unsigned next;                /* the one to replace */
};

/* Which arguments of a call planning reads on this rank: those MPI
 * declares significant there (a program may leave the others unset). */
typedef struct {
    bool send, recv;              /* the buffer (MPI_IN_PLACE or not) */
    bool send_type, recv_type;    /* its count and datatype too */
    bool reduction;               /* the op */
} plan_reads_t;

/* Whether @x and @y are the same call for planning; their type and root
 * first, which decide what else is read (@reads, the same for both). */
static bool plan_same_call(const zcopy_coll_args_t *x,
                           const zcopy_coll_args_t *y,
                           const plan_reads_t *reads)
{
    if (x->type != y->type || x->root != y->root)
        return false;
    if (reads->send && x->sbuf != y->sbuf)
        return false;
    if (reads->recv && x->rbuf != y->rbuf)
        return false;
    if (reads->send_type && (x->scount != y->scount || x->stype != y->stype))
        return false;
    if (reads->recv_type && (x->rcount != y->rcount || x->rtype != y->rtype))
        return false;
    return !reads->reduction || x->op == y->op;
}

static bool plan_recall(const zcopy_comm_t *zc, const zcopy_coll_args_t *a,
                        const plan_reads_t *reads, coll_plan_t *p)
{
    const struct zcopy_plan_memo *m = zc->plan_memo;
    uint64_t epoch;

    if (m == NULL)
        return false;
    epoch = zcopy_registry_epoch();
    for (int i = 0; i < PLAN_MEMO_ENTRIES; i++) {
        const plan_entry_t *e = &m->entry[i];

        if (e->epoch == 0 || e->epoch != epoch ||
            !plan_same_call(&e->call, a, reads))
            continue;
        *p = e->plan;
        return true;
    }
    return false;
}

static bool plan_memorable(const zcopy_coll_args_t *a,
                           const plan_reads_t *reads)
{
    switch (a->type) {
    case ZCOPY_COLL_ALLGATHERV:
    case ZCOPY_COLL_GATHERV:
    case ZCOPY_COLL_SCATTERV:
    case ZCOPY_COLL_ALLTOALLV:
    case ZCOPY_COLL_REDUCE_SCATTER:
        return false;
    default:
        break;
    }
    return (!reads->send_type ||
            zcopy_host.predefined(a->stype,
                                  reads->reduction ? a->op : MPI_OP_NULL)) &&
           (!reads->recv_type || zcopy_host.predefined(a->rtype, MPI_OP_NULL));
}

/* Keeps the plan just made, read with the registry's epoch @epoch: in
 * place of the same call's older plan, or of the oldest kept. */
static void plan_keep(zcopy_comm_t *zc, const zcopy_coll_args_t *a,
                      const plan_reads_t *reads, const coll_plan_t *p,
                      uint64_t epoch)
{
    struct zcopy_plan_memo *m = zc->plan_memo;
    plan_entry_t *e = NULL;

    if (m == NULL)
        m = zc->plan_memo = calloc(1, sizeof(*m));
    if (m == NULL)
        return; /* no memory: plans are made afresh */
    for (int i = 0; i < PLAN_MEMO_ENTRIES && e == NULL; i++)
        if (m->entry[i].epoch != 0 &&
            plan_same_call(&m->entry[i].call, a, reads))
            e = &m->entry[i];
    if (e == NULL)
        e = &m->entry[m->next++ % PLAN_MEMO_ENTRIES];
    *e = (plan_entry_t){ .epoch = epoch, .call = *a, .plan = *p };
}

/* --- planning ------------------------------------------------------------- */

void zcopy_coll_plan(zcopy_comm_t *zc, const zcopy_coll_args_t *a,
                     coll_plan_t *p)
{
    const bool rooted = a->type == ZCOPY_COLL_GATHER ||
                        a->type == ZCOPY_COLL_GATHERV ||
                        a->type == ZCOPY_COLL_SCATTER ||
                        a->type == ZCOPY_COLL_SCATTERV;
    const bool send_significant =
        !rooted || a->type == ZCOPY_COLL_GATHER ||
        a->type == ZCOPY_COLL_GATHERV || a->root == zc->rank;
    const bool recv_significant =
        !rooted || a->type == ZCOPY_COLL_SCATTER ||
        a->type == ZCOPY_COLL_SCATTERV || a->root == zc->rank;
    /* A reduction's datatype is the op's, significant even in place. */
    const bool reduction = a->type == ZCOPY_COLL_ALLREDUCE ||
                           a->type == ZCOPY_COLL_REDUCE ||
                           a->type == ZCOPY_COLL_REDUCE_SCATTER ||
                           a->type == ZCOPY_COLL_REDUCE_SCATTER_BLOCK;
    const plan_reads_t reads = {
        .send = send_significant,
        .recv = recv_significant,
        .send_type = send_significant && (a->sbuf != MPI_IN_PLACE || reduction),
        .recv_type = recv_significant && a->rbuf != MPI_IN_PLACE,
        .reduction = reduction,
    };
    uint64_t epoch;

    memset(p, 0, sizeof(*p));
    if (a->type == ZCOPY_COLL_BARRIER)
        return;
    /* Before any question about datatypes or ops, so that a job which
     * never activates memory pays for its decline only (two stores, SPEC
     * section 4). */
    if (!zcopy_registry_any_activated() &&
        zcopy_coll_surely_has_data(zc, a->type, a->scount, a->rcount,
                                   a->root)) {
        p->args.reason = REASON_NOTHING_ACTIVATED;
        return;
    }
    if (plan_recall(zc, a, &reads, p))
        return;
    /* Read before the registry is asked: a change meanwhile leaves the
     * plan kept with an epoch that has already passed. */
    epoch = zcopy_registry_epoch();
    p->ssize = reads.send_type ? zcopy_host.type_elem_bytes(a->stype) : 1;
    p->rsize = reads.recv_type ? zcopy_host.type_elem_bytes(a->rtype) : 1;
    if (p->ssize == 0 || p->rsize == 0) {
        p->args.reason = REASON_DATATYPE;
        return;
    }
    switch (a->type) {
    case ZCOPY_COLL_ALLREDUCE:
    case ZCOPY_COLL_REDUCE:
    case ZCOPY_COLL_REDUCE_SCATTER:
    case ZCOPY_COLL_REDUCE_SCATTER_BLOCK:
        plan_reduction(zc, a, p);
        break;
    case ZCOPY_COLL_ALLGATHER:
    case ZCOPY_COLL_ALLGATHERV:
        plan_allgather(zc, a, p);
        break;
    case ZCOPY_COLL_BCAST:
        plan_send(p, a->rbuf, a->rcount * p->rsize);
        plan_recv(p, a->rbuf, a->rcount * p->rsize);
        break;
    case ZCOPY_COLL_GATHER:
    case ZCOPY_COLL_GATHERV:
        plan_gather(zc, a, p);
        break;
    case ZCOPY_COLL_SCATTER:
    case ZCOPY_COLL_SCATTERV:
        plan_scatter(zc, a, p);
        break;
    case ZCOPY_COLL_ALLTOALL:
    case ZCOPY_COLL_ALLTOALLV:
        plan_alltoall(zc, a, p);
        break;
    default:
        break;
    }
    if (p->args.reason != REASON_NONE) {
        /* A declined plan names nothing to publish. */
        memset(p->vectors, 0, sizeof(p->vectors));
        return;
    }
    if (!zcopy_registry_covers_cached(p->sbuf, p->slen, &zc->covers_cache))
        p->args.reason = REASON_SEND_BUFFER;
    else if (!zcopy_registry_covers_cached(p->rbuf, p->rlen, &zc->covers_cache))
        p->args.reason = REASON_RECV_BUFFER;
    if (epoch != 0 && plan_memorable(a, &reads))
        plan_keep(zc, a, &reads, p, epoch);
}

size_t zcopy_coll_holding_bytes(const zcopy_comm_t *zc,
                                const zcopy_coll_args_t *a, size_t elem)
{
    size_t displ = 0, own;

    if (a->sbuf != MPI_IN_PLACE)
        return 0;
    switch (a->type) {
    case ZCOPY_COLL_REDUCE_SCATTER:
        for (int j = 0; j < zc->rank; j++)
            displ += (size_t)a->rcounts[j];
        own = (size_t)a->rcounts[zc->rank];
        break;
    case ZCOPY_COLL_REDUCE_SCATTER_BLOCK:
        displ = (size_t)zc->rank * a->rcount;
        own = a->rcount;
        break;
    default:
        return 0;
    }
    return displ > 0 ? own * elem : 0;
}
