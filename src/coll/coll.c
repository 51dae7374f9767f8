/*
 * The path decision for every collective. A rank is eligible when each of
 * its buffers lies wholly in activated memory, the datatypes are contiguous
 * and the op can be reduced; the ranks agree on it when they arrive, before
 * any data moves, and then all run zero-copy or all fall back.
 */
#include "algo.h"

#include "registry/registry.h"

#include <stdio.h>

ZCOPY_COMPONENT_API const char *const zcopy_coll_names[ZCOPY_COLL_COUNT] = {
    [ZCOPY_COLL_ALLREDUCE] = "allreduce",
    [ZCOPY_COLL_REDUCE] = "reduce",
    [ZCOPY_COLL_REDUCE_SCATTER] = "reduce_scatter",
    [ZCOPY_COLL_REDUCE_SCATTER_BLOCK] = "reduce_scatter_block",
    [ZCOPY_COLL_ALLGATHER] = "allgather",
    [ZCOPY_COLL_ALLGATHERV] = "allgatherv",
    [ZCOPY_COLL_BCAST] = "bcast",
    [ZCOPY_COLL_GATHER] = "gather",
    [ZCOPY_COLL_GATHERV] = "gatherv",
    [ZCOPY_COLL_SCATTER] = "scatter",
    [ZCOPY_COLL_SCATTERV] = "scatterv",
    [ZCOPY_COLL_ALLTOALL] = "alltoall",
    [ZCOPY_COLL_ALLTOALLV] = "alltoallv",
    [ZCOPY_COLL_BARRIER] = "barrier",
};

/* Why a rank is not eligible; the same text reaches every rank's stats. */
typedef enum {
    REASON_NONE,
    REASON_SEND_BUFFER,
    REASON_RECV_BUFFER,
    REASON_DATATYPE,
    REASON_OP,
    REASON_LAYOUT,
    REASON_COUNT
} coll_reason_t;

static const char *const reason_text[REASON_COUNT] = {
    [REASON_NONE] = "eligible",
    [REASON_SEND_BUFFER] = "send buffer not activated",
    [REASON_RECV_BUFFER] = "recv buffer not activated",
    [REASON_DATATYPE] = "non-contiguous datatype",
    [REASON_OP] = "op not supported",
    [REASON_LAYOUT] = "negative displacement",
};

static const zcopy_algo_fn_t algorithms[ZCOPY_COLL_COUNT] = {
    [ZCOPY_COLL_ALLREDUCE] = zcopy_algo_allreduce,
    [ZCOPY_COLL_REDUCE] = zcopy_algo_reduce,
    [ZCOPY_COLL_REDUCE_SCATTER] = zcopy_algo_reduce_scatter,
    [ZCOPY_COLL_REDUCE_SCATTER_BLOCK] = zcopy_algo_reduce_scatter,
    [ZCOPY_COLL_ALLGATHER] = zcopy_algo_allgather,
    [ZCOPY_COLL_ALLGATHERV] = zcopy_algo_allgather,
    [ZCOPY_COLL_BCAST] = zcopy_algo_bcast,
    [ZCOPY_COLL_GATHER] = zcopy_algo_gather,
    [ZCOPY_COLL_GATHERV] = zcopy_algo_gather,
    [ZCOPY_COLL_SCATTER] = zcopy_algo_scatter,
    [ZCOPY_COLL_SCATTERV] = zcopy_algo_scatter,
    [ZCOPY_COLL_ALLTOALL] = zcopy_algo_alltoall,
    [ZCOPY_COLL_ALLTOALLV] = zcopy_algo_alltoall,
};

/* What this rank publishes at arrival. */
typedef struct {
    zcopy_ctl_args_t args;
    const void *sbuf;             /* extents to check for activation */
    size_t slen;
    const void *rbuf;
    size_t rlen;
} coll_plan_t;

/* --- datatypes and extents ----------------------------------------------- */

/* Bytes per element of a contiguous datatype, 0 if it is not contiguous. */
static size_t type_size_query(MPI_Datatype type)
{
    MPI_Aint lb, extent, true_lb, true_extent;
    int size;

    if (type == MPI_DATATYPE_NULL || MPI_Type_size(type, &size) != MPI_SUCCESS)
        return 0;
    MPI_Type_get_extent(type, &lb, &extent);
    MPI_Type_get_true_extent(type, &true_lb, &true_extent);
    if (lb != 0 || true_lb != 0 || extent != size || true_extent != size)
        return 0;
    return (size_t)size;
}

/* Predefined types never change, so their sizes are remembered per comm;
 * a derived type's handle may be freed and reused, so it is asked anew. */
static size_t type_size(zcopy_comm_t *zc, MPI_Datatype type)
{
    int nints, naddrs, ntypes, combiner;
    unsigned slot = (unsigned)(((uintptr_t)type >> 4) % ZCOPY_TYPE_CACHE);
    size_t size;

    if (zc->type_cache[slot].type == type && type != MPI_DATATYPE_NULL)
        return zc->type_cache[slot].size;
    size = type_size_query(type);
    if (size && MPI_Type_get_envelope(type, &nints, &naddrs, &ntypes,
                                      &combiner) == MPI_SUCCESS &&
        combiner == MPI_COMBINER_NAMED) {
        zc->type_cache[slot].type = type;
        zc->type_cache[slot].size = size;
    }
    return size;
}

/* Byte extent [lo, hi) covered by a v-layout; false on a negative
 * displacement. Also fills @bytes_out (displacements in bytes) if given. */
static bool vector_extent(const int *counts, const int *displs, int n,
                          size_t elem, size_t *lo, size_t *hi,
                          int64_t *bytes_out)
{
    *lo = SIZE_MAX;
    *hi = 0;
    for (int j = 0; j < n; j++) {
        if (displs[j] < 0 || counts[j] < 0)
            return false;
        if (bytes_out)
            bytes_out[j] = (int64_t)displs[j] * (int64_t)elem;
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

static void plan_reduction(const zcopy_comm_t *zc, const zcopy_coll_args_t *a,
                           zcopy_algo_t *al, coll_plan_t *p)
{
    const bool in_place = a->sbuf == MPI_IN_PLACE;
    const bool root = a->type != ZCOPY_COLL_REDUCE || a->root == zc->rank;
    size_t e = al->ssize, total = a->scount, own = a->rcount;

    if (!zcopy_reduce_supported(a->op, a->stype)) {
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
        p->args.flags |= ZCOPY_CTL_IN_PLACE;
        plan_send(p, a->rbuf, total * e);
        plan_recv(p, a->rbuf, total * e);
        return;
    }
    plan_send(p, a->sbuf, total * e);
    if (root)
        plan_recv(p, a->rbuf, own * e);
}

static void plan_allgather(const zcopy_comm_t *zc, const zcopy_coll_args_t *a,
                           zcopy_algo_t *al, coll_plan_t *p)
{
    size_t lo = 0, hi, own_off, own_len;
    const int n = zc->size, r = zc->rank;

    if (a->type == ZCOPY_COLL_ALLGATHER) {
        hi = a->rcount * al->rsize * (size_t)n;
        own_off = a->rcount * al->rsize * (size_t)r;
        own_len = a->rcount * al->rsize;
    } else {
        if (!vector_extent(a->rcounts, a->rdispls, n, al->rsize, &lo, &hi,
                           NULL)) {
            p->args.reason = REASON_LAYOUT;
            return;
        }
        own_off = (size_t)a->rdispls[r] * al->rsize;
        own_len = (size_t)a->rcounts[r] * al->rsize;
    }
    plan_recv(p, (const uint8_t *)a->rbuf + lo, hi - lo);
    p->args.rbuf = (uintptr_t)a->rbuf;
    if (a->sbuf == MPI_IN_PLACE) {
        p->args.flags |= ZCOPY_CTL_IN_PLACE;
        plan_send(p, (const uint8_t *)a->rbuf + own_off, own_len);
    } else {
        plan_send(p, a->sbuf, a->scount * al->ssize);
    }
}

static void plan_gather(const zcopy_comm_t *zc, const zcopy_coll_args_t *a,
                        zcopy_ctl_t *ctl, zcopy_algo_t *al, coll_plan_t *p)
{
    const int n = zc->size, r = zc->rank;
    size_t lo = 0, hi;

    if (r != a->root) {
        plan_send(p, a->sbuf, a->scount * al->ssize);
        return;
    }
    if (a->type == ZCOPY_COLL_GATHER) {
        hi = a->rcount * al->rsize * (size_t)n;
    } else {
        int64_t *displs = zcopy_ctl_vector(ctl, r, ctl->seq + 1, 0);
        if (!vector_extent(a->rcounts, a->rdispls, n, al->rsize, &lo, &hi,
                           displs)) {
            p->args.reason = REASON_LAYOUT;
            return;
        }
    }
    plan_recv(p, (const uint8_t *)a->rbuf + lo, hi - lo);
    p->args.rbuf = (uintptr_t)a->rbuf;
    if (a->sbuf == MPI_IN_PLACE)
        p->args.flags |= ZCOPY_CTL_IN_PLACE;
    else
        plan_send(p, a->sbuf, a->scount * al->ssize);
}

static void plan_scatter(const zcopy_comm_t *zc, const zcopy_coll_args_t *a,
                         zcopy_ctl_t *ctl, zcopy_algo_t *al, coll_plan_t *p)
{
    const int n = zc->size, r = zc->rank;
    size_t lo = 0, hi;

    if (r != a->root) {
        plan_recv(p, a->rbuf, a->rcount * al->rsize);
        return;
    }
    if (a->type == ZCOPY_COLL_SCATTER) {
        hi = a->scount * al->ssize * (size_t)n;
    } else {
        int64_t *displs = zcopy_ctl_vector(ctl, r, ctl->seq + 1, 0);
        if (!vector_extent(a->scounts, a->sdispls, n, al->ssize, &lo, &hi,
                           displs)) {
            p->args.reason = REASON_LAYOUT;
            return;
        }
    }
    plan_send(p, (const uint8_t *)a->sbuf + lo, hi - lo);
    p->args.sbuf = (uintptr_t)a->sbuf;
    if (a->rbuf == MPI_IN_PLACE)
        p->args.flags |= ZCOPY_CTL_IN_PLACE;
    else
        plan_recv(p, a->rbuf, a->rcount * al->rsize);
}

static void plan_alltoall(const zcopy_comm_t *zc, const zcopy_coll_args_t *a,
                          zcopy_ctl_t *ctl, zcopy_algo_t *al, coll_plan_t *p)
{
    const int n = zc->size, r = zc->rank;
    const bool in_place = a->sbuf == MPI_IN_PLACE;
    size_t slo = 0, shi, rlo = 0, rhi;
    uint64_t next = ctl->seq + 1;

    if (in_place)
        p->args.flags |= ZCOPY_CTL_IN_PLACE;
    if (a->type == ZCOPY_COLL_ALLTOALL) {
        rhi = a->rcount * al->rsize * (size_t)n;
        plan_recv(p, a->rbuf, rhi);
        if (in_place)
            plan_send(p, a->rbuf, rhi);
        else
            plan_send(p, a->sbuf, a->scount * al->ssize * (size_t)n);
        return;
    }
    if (!vector_extent(a->rcounts, a->rdispls, n, al->rsize, &rlo, &rhi,
                       zcopy_ctl_vector(ctl, r, next, 1))) {
        p->args.reason = REASON_LAYOUT;
        return;
    }
    for (int j = 0; j < n; j++)
        zcopy_ctl_vector(ctl, r, next, 2)[j] = (int64_t)a->rcounts[j] *
                                               (int64_t)al->rsize;
    plan_recv(p, (const uint8_t *)a->rbuf + rlo, rhi - rlo);
    p->args.rbuf = (uintptr_t)a->rbuf;
    if (in_place) {
        plan_send(p, (const uint8_t *)a->rbuf + rlo, rhi - rlo);
        p->args.sbuf = (uintptr_t)a->rbuf;
        return;
    }
    if (!vector_extent(a->scounts, a->sdispls, n, al->ssize, &slo, &shi,
                       zcopy_ctl_vector(ctl, r, next, 0))) {
        p->args.reason = REASON_LAYOUT;
        return;
    }
    plan_send(p, (const uint8_t *)a->sbuf + slo, shi - slo);
    p->args.sbuf = (uintptr_t)a->sbuf;
}

/* Fills @p with this rank's arguments and eligibility. */
static void coll_plan(zcopy_comm_t *zc, const zcopy_coll_args_t *a,
                      zcopy_algo_t *al, coll_plan_t *p)
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

    memset(p, 0, sizeof(*p));
    if (a->type == ZCOPY_COLL_BARRIER)
        return;
    al->ssize = send_significant && a->sbuf != MPI_IN_PLACE ? type_size(zc, a->stype) : 1;
    al->rsize = recv_significant && a->rbuf != MPI_IN_PLACE ? type_size(zc, a->rtype) : 1;
    if (al->ssize == 0 || al->rsize == 0) {
        p->args.reason = REASON_DATATYPE;
        return;
    }
    switch (a->type) {
    case ZCOPY_COLL_ALLREDUCE:
    case ZCOPY_COLL_REDUCE:
    case ZCOPY_COLL_REDUCE_SCATTER:
    case ZCOPY_COLL_REDUCE_SCATTER_BLOCK:
        al->ssize = type_size(zc, a->stype);
        if (al->ssize == 0) {
            p->args.reason = REASON_DATATYPE;
            return;
        }
        plan_reduction(zc, a, al, p);
        break;
    case ZCOPY_COLL_ALLGATHER:
    case ZCOPY_COLL_ALLGATHERV:
        plan_allgather(zc, a, al, p);
        break;
    case ZCOPY_COLL_BCAST:
        plan_send(p, a->rbuf, a->rcount * al->rsize);
        plan_recv(p, a->rbuf, a->rcount * al->rsize);
        break;
    case ZCOPY_COLL_GATHER:
    case ZCOPY_COLL_GATHERV:
        plan_gather(zc, a, al->ctl, al, p);
        break;
    case ZCOPY_COLL_SCATTER:
    case ZCOPY_COLL_SCATTERV:
        plan_scatter(zc, a, al->ctl, al, p);
        break;
    case ZCOPY_COLL_ALLTOALL:
    case ZCOPY_COLL_ALLTOALLV:
        plan_alltoall(zc, a, al->ctl, al, p);
        break;
    default:
        break;
    }
    if (p->args.reason != REASON_NONE)
        return;
    if (!zcopy_registry_covers_cached(p->sbuf, p->slen, &zc->covers_cache))
        p->args.reason = REASON_SEND_BUFFER;
    else if (!zcopy_registry_covers_cached(p->rbuf, p->rlen, &zc->covers_cache))
        p->args.reason = REASON_RECV_BUFFER;
}

/* --- running ------------------------------------------------------------- */

static zcopy_status_t coll_fallback(zcopy_comm_t *zc, zcopy_coll_type_t type,
                                    const char *why)
{
    char reason[sizeof(zc->stats.last_fallback_reason) + 32];

    snprintf(reason, sizeof(reason), "%s: %s", zcopy_coll_names[type], why);
    zcopy_comm_count_fallback(zc, reason);
    return ZCOPY_FALLBACK;
}

/* Lazy and collective: every rank reaches its first collective on the comm
 * in the same order, so every rank sets up together, through the previous
 * component's collectives. Never retried after a failure. */
static zcopy_status_t coll_setup(zcopy_comm_t *zc)
{
    zcopy_status_t st;

    st = zcopy_ctl_create(zc, &zc->ctl, zc->disabled_reason,
                          sizeof(zc->disabled_reason));
    zc->state = st == ZCOPY_SUCCESS ? ZCOPY_COMM_READY : ZCOPY_COMM_DISABLED;
    zcopy_log(ZCOPY_LOG_INFO, "coll", "rank %d of %d: zero-copy %s%s%s",
              zc->rank, zc->size, st == ZCOPY_SUCCESS ? "on" : "off",
              st == ZCOPY_SUCCESS ? "" : ": ", zc->disabled_reason);
    return st;
}

static int first_ineligible(const zcopy_algo_t *al)
{
    for (int r = 0; r < al->nranks; r++)
        if (zcopy_algo_args(al, r)->reason != REASON_NONE)
            return r;
    return -1;
}

/* --- tiny collectives: the payload rides in the control line ------------ */

/* Bytes of payload in @type, contiguous or not: the part of a collective's
 * size every rank agrees on, since MPI requires matching type signatures. */
static size_t signature_size(zcopy_comm_t *zc, MPI_Datatype type)
{
    size_t size = type_size(zc, type);
    int bytes;

    if (size == 0 && type != MPI_DATATYPE_NULL &&
        MPI_Type_size(type, &bytes) == MPI_SUCCESS)
        size = (size_t)bytes;
    return size;
}

/* The payload of a collective whose every rank's data fits a control line
 * (at most ZCOPY_CTL_INLINE_MAX bytes) travels in it: one cache-line
 * transfer per peer instead of an arrival, loads through the mappings and
 * a departure. Returns that size, the same on every rank, or 0 when the
 * collective takes the mapped path. Only arguments MPI declares significant
 * on this rank are read, and they agree across ranks by MPI's rules. */
static size_t coll_inline_bytes(zcopy_comm_t *zc, const zcopy_coll_args_t *a)
{
    const bool root = a->root == zc->rank;
    const size_t n = (size_t)zc->size;
    size_t total;

    switch (a->type) {
    case ZCOPY_COLL_ALLREDUCE:
    case ZCOPY_COLL_REDUCE:
    case ZCOPY_COLL_BCAST:
        total = a->scount * signature_size(zc, a->stype);
        break;
    case ZCOPY_COLL_REDUCE_SCATTER_BLOCK:
        total = n * a->scount * signature_size(zc, a->stype);
        break;
    case ZCOPY_COLL_ALLGATHER:
        total = a->rcount * signature_size(zc, a->rtype);
        break;
    case ZCOPY_COLL_GATHER:
        total = root ? a->rcount * signature_size(zc, a->rtype)
                     : a->scount * signature_size(zc, a->stype);
        break;
    case ZCOPY_COLL_SCATTER:
        total = n * (root ? a->scount * signature_size(zc, a->stype)
                          : a->rcount * signature_size(zc, a->rtype));
        break;
    case ZCOPY_COLL_ALLTOALL:
        total = n * a->rcount * signature_size(zc, a->rtype);
        break;
    default:
        return 0;
    }
    return total <= ZCOPY_CTL_INLINE_MAX ? total : 0;
}

/* What this rank puts in its line: its input, or nothing. */
static const void *inline_source(const zcopy_comm_t *zc,
                                 const zcopy_coll_args_t *a,
                                 const coll_plan_t *plan, size_t total,
                                 size_t *len)
{
    const bool root = a->root == zc->rank;

    *len = total;
    switch (a->type) {
    case ZCOPY_COLL_BCAST:
    case ZCOPY_COLL_SCATTER:
        *len = root ? total : 0;
        return root ? (a->type == ZCOPY_COLL_BCAST ? a->rbuf : a->sbuf) : NULL;
    case ZCOPY_COLL_GATHER:
        if (root && a->sbuf == MPI_IN_PLACE)
            return (const uint8_t *)a->rbuf + total * (size_t)zc->rank;
        return a->sbuf;
    default:
        return plan->sbuf; /* the effective input, MPI_IN_PLACE resolved */
    }
}

/* Delivers the payloads of @lines into this rank's output. */
static zcopy_status_t inline_deliver(zcopy_comm_t *zc, const zcopy_coll_args_t *a,
                                     const uint8_t *const *lines, size_t total)
{
    const int n = zc->size, r = zc->rank;
    const size_t block = a->type == ZCOPY_COLL_SCATTER ||
                                 a->type == ZCOPY_COLL_ALLTOALL ||
                                 a->type == ZCOPY_COLL_REDUCE_SCATTER_BLOCK
                             ? total / (size_t)n : total;
    const void *srcs[ZCOPY_CTL_MAX_RANKS];
    uint8_t *out = a->rbuf;

    switch (a->type) {
    case ZCOPY_COLL_ALLREDUCE:
    case ZCOPY_COLL_REDUCE:
        if (a->type == ZCOPY_COLL_REDUCE && r != a->root)
            return ZCOPY_SUCCESS;
        /* Sources in rank order, the same on every rank. */
        return zcopy_reduce(a->op, a->stype, out, (const void *const *)lines,
                            n, a->scount);
    case ZCOPY_COLL_REDUCE_SCATTER_BLOCK:
        for (int j = 0; j < n; j++)
            srcs[j] = lines[j] + block * (size_t)r;
        return zcopy_reduce(a->op, a->stype, out, srcs, n, a->scount);
    case ZCOPY_COLL_BCAST:
        if (r != a->root)
            memcpy(out, lines[a->root], total);
        return ZCOPY_SUCCESS;
    case ZCOPY_COLL_SCATTER:
        if (r != a->root || a->rbuf != MPI_IN_PLACE)
            memcpy(out, lines[a->root] + block * (size_t)r, block);
        return ZCOPY_SUCCESS;
    case ZCOPY_COLL_GATHER:
    case ZCOPY_COLL_ALLGATHER:
        if (a->type == ZCOPY_COLL_GATHER && r != a->root)
            return ZCOPY_SUCCESS;
        for (int j = 0; j < n; j++)
            if (j != r || a->sbuf != MPI_IN_PLACE)
                memcpy(out + block * (size_t)j, lines[j], block);
        return ZCOPY_SUCCESS;
    case ZCOPY_COLL_ALLTOALL:
        for (int j = 0; j < n; j++)
            memcpy(out + block * (size_t)j, lines[j] + block * (size_t)r, block);
        return ZCOPY_SUCCESS;
    default:
        return zcopy_error(ZCOPY_ERR_INTERNAL, "no inline form of %s",
                           zcopy_coll_names[a->type]);
    }
}

static zcopy_status_t coll_run_inline(zcopy_comm_t *zc,
                                      const zcopy_coll_args_t *a,
                                      const coll_plan_t *plan, size_t total)
{
    const uint8_t *lines[ZCOPY_CTL_MAX_RANKS];
    const bool eligible = plan->args.reason == REASON_NONE;
    const void *src;
    char why[64];
    uint64_t seq;
    size_t len;

    src = inline_source(zc, a, plan, total, &len);
    seq = zcopy_ctl_inline_exchange(zc->ctl, plan->args.reason,
                                    eligible ? src : NULL, eligible ? len : 0);
    for (int r = 0; r < zc->size; r++) {
        const zcopy_ctl_inline_t *line = zcopy_ctl_inline(zc->ctl, r, seq);
        if (line->reason != REASON_NONE) {
            snprintf(why, sizeof(why), "rank %d %s", r,
                     reason_text[line->reason]);
            return coll_fallback(zc, a->type, why);
        }
        lines[r] = line->data;
    }
    ZCOPY_CHECK(inline_deliver(zc, a, lines, total));
    zc->stats.zcopy_calls++;
    zc->stats.inline_calls++;
    return ZCOPY_SUCCESS;
}

ZCOPY_COMPONENT_API zcopy_status_t zcopy_coll_run(zcopy_comm_t *zc,
                                                  const zcopy_coll_args_t *a)
{
    zcopy_algo_t al = { .zc = zc, .a = a, .rank = zc->rank,
                        .nranks = zc->size };
    size_t inline_total;
    coll_plan_t plan;
    char why[64];
    int bad;

    /* Peers' deactivated blocks are unmapped at every collective, on any
     * communicator (SPEC section 3), and before any peer memory is touched. */
    zcopy_ipc_sweep();
    if (zc->state == ZCOPY_COMM_NEW)
        coll_setup(zc);
    if (zc->state != ZCOPY_COMM_READY)
        return coll_fallback(zc, a->type, zc->disabled_reason);

    al.ctl = zc->ctl;
    coll_plan(zc, a, &al, &plan);
    inline_total = coll_inline_bytes(zc, a);
    if (inline_total > 0)
        return coll_run_inline(zc, a, &plan, inline_total);
    al.seq = zcopy_ctl_publish(zc->ctl, &plan.args);
    /* While the arrival travels: fetch the peer data the last call read. */
    zcopy_ctl_prefetch_hints(zc->ctl);
    zcopy_ctl_wait_arrivals(zc->ctl, al.seq);

    bad = first_ineligible(&al);
    if (bad >= 0) {
        snprintf(why, sizeof(why), "rank %d %s", bad,
                 reason_text[zcopy_algo_args(&al, bad)->reason]);
        return coll_fallback(zc, a->type, why);
    }
    zc->stats.zcopy_calls++;
    if (a->type == ZCOPY_COLL_BARRIER)
        return ZCOPY_SUCCESS; /* arrival was the barrier */
    if (algorithms[a->type](&al) != ZCOPY_SUCCESS)
        return zcopy_error(ZCOPY_ERR_INTERNAL,
                           "%s: a rank could not reach a peer's memory; the "
                           "results are undefined", zcopy_coll_names[a->type]);
    zc->stats.ipc_bytes += al.ipc_bytes;
    return ZCOPY_SUCCESS;
}
