/*
 * Small collectives: when every rank's payload of a fixed-size collective
 * (or an allgatherv's largest, which every rank knows) is at most the
 * path's inline limit, it travels with the rank's arrival:
 * in its inline record inside a server (coll_zcopy_inline_max, or
 * coll_zcopy_inline_max_yield where waits yield; server/control.h), in its
 * leader's message between servers (coll_zcopy_span_inline_max). That is
 * one step instead of an arrival, loads through the mappings and a
 * departure. It copies the payload, so these calls are counted in
 * inline_calls as well as zcopy_calls and move no ipc_bytes. Between
 * servers an alltoallv's blocks may ride too, packed with their offsets
 * (zcopy_coll_vpack), where every rank's fit (coll/span/span.c).
 */
#include "path.h"

#include "host/host.h"
#include "reduce/reduce.h"

#include <stdint.h>
#include <string.h>

/* allgatherv: its largest block, which every rank knows (recvcounts are
 * significant everywhere); SIZE_MAX for a negative count, which the plan
 * turns down. */
static size_t largest_block(const zcopy_comm_t *zc, const zcopy_coll_args_t *a)
{
    const size_t size = zcopy_host.type_size(a->rtype);
    size_t most = 0;

    for (int j = 0; j < zc->size; j++) {
        if (a->rcounts[j] < 0)
            return SIZE_MAX;
        if ((size_t)a->rcounts[j] * size > most)
            most = (size_t)a->rcounts[j] * size;
    }
    return most;
}

/* Sizes are signature sizes (payload bytes, contiguous or not): what every
 * rank agrees on, since MPI requires matching type signatures. Only
 * arguments MPI declares significant on this rank are read, and they agree
 * across ranks by MPI's rules. */
size_t zcopy_coll_block_bytes(const zcopy_comm_t *zc,
                              const zcopy_coll_args_t *a)
{
    const bool root = a->root == zc->rank;

    switch (a->type) {
    case ZCOPY_COLL_ALLREDUCE:
    case ZCOPY_COLL_REDUCE:
    case ZCOPY_COLL_BCAST:
    case ZCOPY_COLL_REDUCE_SCATTER_BLOCK:
        return a->scount * zcopy_host.type_size(a->stype);
    case ZCOPY_COLL_ALLGATHER:
    case ZCOPY_COLL_ALLTOALL:
        return a->rcount * zcopy_host.type_size(a->rtype);
    case ZCOPY_COLL_ALLGATHERV:
        return largest_block(zc, a);
    case ZCOPY_COLL_GATHER:
        return root ? a->rcount * zcopy_host.type_size(a->rtype)
                    : a->scount * zcopy_host.type_size(a->stype);
    case ZCOPY_COLL_SCATTER:
        return root ? a->scount * zcopy_host.type_size(a->stype)
                    : a->rcount * zcopy_host.type_size(a->rtype);
    default:
        return SIZE_MAX;
    }
}

/* The payload of a collective whose every rank's data is at most @limit
 * bytes travels in the control plane. Returns that size, the same on every
 * rank, or 0 when the collective takes the mapped path; @limit is agreed
 * at set-up. */
size_t zcopy_coll_inline_bytes(const zcopy_comm_t *zc,
                               const zcopy_coll_args_t *a, size_t limit)
{
    const size_t block = zcopy_coll_block_bytes(zc, a);
    size_t total;

    if (block == SIZE_MAX)
        return 0;
    total = zcopy_coll_payload_is_blocks(a->type) ? block * (size_t)zc->size
                                                  : block;
    return total <= limit ? total : 0;
}

/* What this rank puts in its line: its input, or nothing. */
const void *zcopy_coll_inline_source(const zcopy_comm_t *zc,
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
    case ZCOPY_COLL_ALLGATHERV:
        /* Its own block: the largest at most, unless the program broke
         * MPI's matching rule, whose extra bytes nobody reads. */
        *len = plan->slen < total ? plan->slen : total;
        return plan->sbuf;
    default:
        return plan->sbuf; /* the effective input, MPI_IN_PLACE resolved */
    }
}

/* An alltoallv's payload, where the spanning path carries its blocks (its
 * receivers know only the size of their own block from each sender):
 * path.h gives its layout. */
typedef zcopy_coll_vpack_offset_t vpack_offset_t;

size_t zcopy_coll_vpack_min(int n)
{
    return ((size_t)n + 1) * sizeof(vpack_offset_t);
}

/* Bytes of this rank's alltoallv block for @j: in place, the receive
 * layout holds what it sends (MPI's in-place form). */
static size_t vpack_len(const zcopy_coll_args_t *a, const coll_plan_t *plan,
                        int j)
{
    if (a->sbuf == MPI_IN_PLACE)
        return (size_t)a->rcounts[j] * plan->rsize;
    return (size_t)a->scounts[j] * plan->ssize;
}

/* Where that block starts; only for a block with bytes, since an empty
 * one's buffer and displacement may be anything. */
static const uint8_t *vpack_src(const zcopy_coll_args_t *a,
                                const coll_plan_t *plan, int j)
{
    if (a->sbuf == MPI_IN_PLACE)
        return (const uint8_t *)a->rbuf + (size_t)a->rdispls[j] * plan->rsize;
    return (const uint8_t *)a->sbuf + (size_t)a->sdispls[j] * plan->ssize;
}

size_t zcopy_coll_vpack(const zcopy_comm_t *zc, const zcopy_coll_args_t *a,
                        const coll_plan_t *plan, uint8_t *dst, size_t room)
{
    const int n = zc->size;
    const size_t head = zcopy_coll_vpack_min(n);
    vpack_offset_t *offsets = (vpack_offset_t *)(void *)dst;
    size_t at = head;

    if (room > UINT32_MAX || head > room)
        return 0;
    /* Sizes first: blocks that do not fit cost no copy. */
    for (int j = 0; j < n; j++) {
        const size_t len = vpack_len(a, plan, j);

        if (len > room - at)
            return 0;
        at += len;
    }
    at = head;
    for (int j = 0; j < n; j++) {
        const size_t len = vpack_len(a, plan, j);

        offsets[j] = (vpack_offset_t)at;
        if (len > 0)
            memcpy(dst + at, vpack_src(a, plan, j), len);
        at += len;
    }
    offsets[n] = (vpack_offset_t)at;
    return at;
}

/* This rank's block of each alltoallv payload (zcopy_coll_vpack) of at
 * most @room bytes. Contiguous types only (the plan's), so elements are
 * bytes of zcopy_host.type_size() each, as the sender's were. A block
 * longer than the receive count says (a program that broke MPI's matching
 * rule) is cut to it; a table that points outside its payload is
 * skipped. */
static void vpack_deliver(const zcopy_comm_t *zc, const zcopy_coll_args_t *a,
                          const uint8_t *const *lines, size_t room)
{
    const int n = zc->size, r = zc->rank;
    const size_t size = zcopy_host.type_size(a->rtype);

    for (int j = 0; j < n; j++) {
        const vpack_offset_t *offsets =
            (const vpack_offset_t *)(const void *)lines[j];
        const size_t lo = offsets[r], hi = offsets[r + 1];
        const size_t want = (size_t)a->rcounts[j] * size;
        const size_t len = hi - lo < want ? hi - lo : want;

        if (lo > hi || hi > offsets[n] || offsets[n] > room || len == 0)
            continue;
        memcpy((uint8_t *)a->rbuf + (size_t)a->rdispls[j] * size,
               lines[j] + lo, len);
    }
}

/* Delivers the payloads of @lines into this rank's output; what it reads
 * of them, zcopy_coll_inline_reads() says. */
zcopy_status_t zcopy_coll_inline_deliver(zcopy_comm_t *zc,
                                         const zcopy_coll_args_t *a,
                                         const uint8_t *const *lines,
                                         size_t total)
{
    const int n = zc->size, r = zc->rank;
    const size_t block = zcopy_coll_payload_is_blocks(a->type)
                             ? total / (size_t)n : total;
    const void **srcs = zcopy_comm_list(zc, ZCOPY_COMM_LIST_OPERANDS);
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
    case ZCOPY_COLL_ALLGATHERV: {
        /* Contiguous types only (the plan's), so elements are bytes of
         * zcopy_host.type_size() each. */
        const size_t size = zcopy_host.type_size(a->rtype);

        for (int j = 0; j < n; j++)
            if (a->rcounts[j] > 0 && (j != r || a->sbuf != MPI_IN_PLACE))
                memcpy(out + (size_t)a->rdispls[j] * size, lines[j],
                       (size_t)a->rcounts[j] * size);
        return ZCOPY_SUCCESS;
    }
    case ZCOPY_COLL_ALLTOALL:
        for (int j = 0; j < n; j++)
            memcpy(out + block * (size_t)j, lines[j] + block * (size_t)r,
                   block);
        return ZCOPY_SUCCESS;
    case ZCOPY_COLL_ALLTOALLV: /* @total: each payload's room */
        vpack_deliver(zc, a, lines, total);
        return ZCOPY_SUCCESS;
    default:
        return zcopy_error(ZCOPY_ERR_INTERNAL, "no inline form of %s",
                           zcopy_coll_names[a->type]);
    }
}

/* The reads of zcopy_coll_inline_deliver() above: change them together.
 * An alltoallv has none: only the spanning path delivers it, and that
 * fetches nothing ahead. */
zcopy_coll_inline_reads_t zcopy_coll_inline_reads(const zcopy_comm_t *zc,
                                                  const zcopy_coll_args_t *a,
                                                  size_t total)
{
    const int n = zc->size, r = zc->rank;
    const size_t block = zcopy_coll_payload_is_blocks(a->type)
                             ? total / (size_t)n : total;
    const size_t own = block * (size_t)r;
    const bool root = r == a->root;
    zcopy_coll_inline_reads_t reads = { .from = -1, .payload = total };

    switch (a->type) {
    case ZCOPY_COLL_ALLREDUCE:
    case ZCOPY_COLL_ALLGATHER:
    case ZCOPY_COLL_ALLGATHERV: /* at most: a block may be shorter */
        reads.len = total;
        break;
    case ZCOPY_COLL_REDUCE:
    case ZCOPY_COLL_GATHER:
        reads.len = root ? total : 0;
        break;
    case ZCOPY_COLL_REDUCE_SCATTER_BLOCK:
    case ZCOPY_COLL_ALLTOALL:
        reads.off = own;
        reads.len = block;
        break;
    case ZCOPY_COLL_BCAST:
        reads.from = a->root;
        reads.len = root ? 0 : total;
        break;
    case ZCOPY_COLL_SCATTER:
        reads.from = a->root;
        reads.off = own;
        reads.len = root && a->rbuf == MPI_IN_PLACE ? 0 : block;
        break;
    default:
        break;
    }
    return reads;
}
