/*
 * The path decision, shared by both paths of coll/ (server/: one server's
 * ranks through each other's mappings; span/: ranks on several servers):
 * what a rank publishes at arrival (its plan), why it may not be eligible,
 * and the small-collective rule that carries payloads with the arrival.
 * Planning is a function of the call alone; each path's control plane
 * publishes the plan its own way.
 */
#ifndef ZCOPY_COLL_PATH_H
#define ZCOPY_COLL_PATH_H

#include "coll.h"

/* Why a rank is not eligible (zcopy_coll_reason_text names it). */
typedef enum {
    REASON_NONE,
    REASON_SEND_BUFFER,
    REASON_RECV_BUFFER,
    REASON_DATATYPE,
    REASON_OP,
    REASON_LAYOUT,
    REASON_SPAN_IN_PLACE,         /* in-place alltoall between servers (an
                                     alltoallv's blocks may still ride) */
    REASON_UCX_BLOCK,             /* no UCX-registered block under a buffer */
    REASON_SCRATCH,               /* no landing area or registered scratch */
    REASON_NOTHING_ACTIVATED,     /* this process has no activated memory */
    REASON_COUNT
} coll_reason_t;

extern const char *const zcopy_coll_reason_text[REASON_COUNT];

/* What every rank learns of a rank's call at arrival. */
typedef struct {
    uint32_t reason;              /* REASON_NONE or why this rank is not */
    uint32_t flags;               /* ZCOPY_PLAN_* */
    uint64_t sbuf;                /* effective send buffer (own address) */
    uint64_t rbuf;
} zcopy_plan_args_t;

#define ZCOPY_PLAN_IN_PLACE 0x1u
/* The root of a bcast, gather, scatter or reduce moves (or reduces) every
 * block itself (server path, where ranks outnumber cores: server/run.c). */
#define ZCOPY_PLAN_ROOT_MOVES 0x2u

/* The v-collectives' vectors a rank publishes, in bytes, for its peers'
 * algorithms: a gatherv or scatterv root its displacements as vector 0; an
 * alltoallv rank its send displacements (0, unless in place), receive
 * displacements (1) and receive counts (2). */
#define ZCOPY_PLAN_NVEC 3

typedef struct {
    const int *elems;             /* MPI's ints; NULL: not published */
    size_t scale;                 /* bytes per unit of elems */
} zcopy_plan_vector_t;

/* What this rank publishes at arrival, and the extents it checked. */
typedef struct {
    zcopy_plan_args_t args;
    const void *sbuf;             /* extents to check for activation */
    size_t slen;
    const void *rbuf;
    size_t rlen;
    size_t ssize, rsize;          /* bytes per element of stype, rtype */
    zcopy_plan_vector_t vectors[ZCOPY_PLAN_NVEC];
} coll_plan_t;

/* What a rank reports at a sync of either path: it could not reach a
 * peer's memory and wrote nothing (FAILED), or it failed after writing
 * (BROKEN). */
#define ZCOPY_SYNC_FAILED 0x1u
#define ZCOPY_SYNC_BROKEN 0x2u
#define ZCOPY_SYNC_BITS 2
#define ZCOPY_SYNC_MASK ((1u << ZCOPY_SYNC_BITS) - 1)

/* Whether this rank surely has a non-empty buffer in the call: then, with
 * nothing activated, planning could only decline it (the buffer is not
 * activated, or the datatype has no bytes). False for the v-collectives,
 * whose counts only planning reads, and for a call without data here,
 * which is eligible wherever its buffers are. */
static inline bool zcopy_coll_surely_has_data(const zcopy_comm_t *zc,
                                              zcopy_coll_type_t type,
                                              size_t scount, size_t rcount,
                                              int root)
{
    const bool is_root = root == zc->rank;

    switch (type) {
    case ZCOPY_COLL_ALLREDUCE:
    case ZCOPY_COLL_REDUCE:
    case ZCOPY_COLL_BCAST:
        return scount > 0;
    case ZCOPY_COLL_REDUCE_SCATTER_BLOCK:
    case ZCOPY_COLL_ALLGATHER:
    case ZCOPY_COLL_ALLTOALL:
        return rcount > 0;
    case ZCOPY_COLL_GATHER:
        return is_root ? rcount > 0 : scount > 0;
    case ZCOPY_COLL_SCATTER:
        return is_root ? scount > 0 : rcount > 0;
    default:
        return false;
    }
}

/* Fills @p with this rank's arguments and eligibility for call @a
 * (plan.c). Reads nothing but the call, the registry and @zc's caches. */
void zcopy_coll_plan(zcopy_comm_t *zc, const zcopy_coll_args_t *a,
                     coll_plan_t *p);

/* Counts a fallback with "<collective>: <why>" (coll.c); @why is a
 * constant or lives as long as @zc. */
zcopy_status_t zcopy_coll_fallback(zcopy_comm_t *zc, zcopy_coll_type_t type,
                                   const char *why);


/* Whether a collective's inline payload is one block per rank, of which
 * each rank reads its own (scatter, alltoall, reduce_scatter_block), rather
 * than one whole input that every reader takes. */
static inline bool zcopy_coll_payload_is_blocks(zcopy_coll_type_t type)
{
    return type == ZCOPY_COLL_SCATTER || type == ZCOPY_COLL_ALLTOALL ||
           type == ZCOPY_COLL_REDUCE_SCATTER_BLOCK;
}

/* The bytes of one rank's block in a fixed-size collective (the buffer of
 * allreduce, reduce and bcast; one rank's part of the others), the same on
 * every rank; of allgatherv its largest block, which every rank knows too;
 * SIZE_MAX for the other v-forms and barrier. */
size_t zcopy_coll_block_bytes(const zcopy_comm_t *zc,
                              const zcopy_coll_args_t *a);

/* In-place reduce_scatter and reduce_scatter_block: the bytes of this
 * rank's result (elements of @elem bytes) when the result's place, the
 * front of the buffer, is not where its block of the input lies; else 0.
 * Its block 0 there is rank 0's input until every rank has read it, and
 * its own block must keep the input afterwards, as stock leaves it (MPI
 * only says the result lands at the front; mpi4py's tests expect the rest
 * unchanged): the result waits in zcopy_comm_hold()'s buffer until the sync
 * (plan.c). */
size_t zcopy_coll_holding_bytes(const zcopy_comm_t *zc,
                                const zcopy_coll_args_t *a, size_t elem);

/* The small-collective rule (inline.c): the per-rank payload when the call
 * takes it (at most @limit: the in-server control plane's inline limit, or
 * the spanning path's), else 0. */
size_t zcopy_coll_inline_bytes(const zcopy_comm_t *zc,
                               const zcopy_coll_args_t *a, size_t limit);
/* Its two halves, for either path's arrival to carry: what this rank
 * sends (*len bytes at the result), and the delivery of every rank's. */
const void *zcopy_coll_inline_source(const zcopy_comm_t *zc,
                                     const zcopy_coll_args_t *a,
                                     const coll_plan_t *plan, size_t total,
                                     size_t *len);
zcopy_status_t zcopy_coll_inline_deliver(zcopy_comm_t *zc,
                                         const zcopy_coll_args_t *a,
                                         const uint8_t *const *lines,
                                         size_t total);
/* An alltoallv's payload where a path carries its blocks, whose sizes
 * differ by pair (the spanning path's): a table of n + 1 offsets from the
 * payload's start, where the block for each rank begins and where the
 * last one ends, then the blocks in rank order (so the blocks for a run
 * of consecutive ranks lie together). */
typedef uint32_t zcopy_coll_vpack_offset_t;

/* This rank's blocks, and where each begins, packed at @dst within @room
 * bytes. Returns the bytes written, or 0 where they do not fit. A planned
 * call's (contiguous types, no negative count); in place, from the
 * receive layout, which the delivery overwrites only once every payload
 * has been packed and sent. zcopy_coll_inline_deliver() takes such
 * payloads with @total the room each had. */
size_t zcopy_coll_vpack(const zcopy_comm_t *zc, const zcopy_coll_args_t *a,
                        const coll_plan_t *plan, uint8_t *dst, size_t room);
/* The fewest bytes such a payload of @n ranks has: its table alone. */
size_t zcopy_coll_vpack_min(int n);

/* What zcopy_coll_inline_deliver() will read of the payloads, for a
 * control plane to fetch while it waits for them: @len bytes at @off of
 * rank @from's payload, or of every rank's when @from is -1 (the caller
 * leaves out this rank's own, which it wrote); nothing when @len is 0.
 * @payload: the call's total, what a rank that writes copies in. Kept in
 * step with the delivery by hand: a mismatch costs time, not results. */
typedef struct {
    int from;
    size_t off, len, payload;
} zcopy_coll_inline_reads_t;

zcopy_coll_inline_reads_t zcopy_coll_inline_reads(const zcopy_comm_t *zc,
                                                  const zcopy_coll_args_t *a,
                                                  size_t total);

#endif
