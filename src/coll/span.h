/*
 * Collectives on communicators that span servers (SPEC section 6), and on
 * every communicator under coll_zcopy_transport=ucx.
 *
 * Ranks fall into groups: the ranks of one server (one rank each under
 * transport=ucx). Inside a group a rank reaches its peers' activated
 * buffers through mappings, as in a server-only communicator; between
 * groups through UCX gets and puts on the same buffers, with the keys of
 * their blocks carried in every call's arrival. The algorithms (span_algo.c)
 * move each byte between groups once where they can and then spread it
 * inside the group through mappings.
 *
 * Agreement and synchronisation go through the previous component's
 * collectives on the communicator itself (the service ops): small, blocking,
 * and safe because Open MPI's progress loop progresses the UCX worker while
 * they wait (the component registers zcopy_coll_progress with it), so a
 * rank waiting in one still serves the emulated gets and puts of its peers.
 */
#ifndef ZCOPY_COLL_SPAN_H
#define ZCOPY_COLL_SPAN_H

#include "path.h"
#include "ucx/ucx.h"

/* Payload bytes per rank an arrival between servers carries: every rank
 * sends its arrival to every other, so it stays one cache line's worth. */
#define ZCOPY_SPAN_INLINE_MAX 48

/* A rank's arrival: its arguments and the blocks under its buffers, or,
 * for a tiny collective, its payload itself. */
typedef struct {
    zcopy_ctl_args_t args;
    zcopy_ucx_block_desc_t sblock; /* size 0 when the send extent is empty */
    zcopy_ucx_block_desc_t rblock;
    zcopy_ucx_block_desc_t xblock; /* its scratch, when the call uses it */
    uint8_t inl[ZCOPY_SPAN_INLINE_MAX];
} zcopy_span_desc_t;

typedef struct zcopy_span {
    int rank, nranks;
    int ngroups;
    int *group;                   /* by rank: its group, 0 .. ngroups - 1 */
    int *index;                   /* by rank: its place in its group */
    int *group_start;             /* members of group g: */
    int *members;                 /* members[group_start[g] .. [g + 1]) */
    int max_group;                /* largest group's size */
    zcopy_ipc_peer_t **peers;     /* by rank: in this rank's group, else NULL */
    zcopy_ucx_ep_t **eps;         /* by rank: in another group, else NULL */
    zcopy_span_desc_t *descs;     /* this call's arrivals, by rank */
    int64_t *sdispls;             /* alltoallv: where each peer's block for
                                     this rank starts in its send buffer */
    int64_t *sdispls_out;         /* this rank's, sent to each peer */
    size_t *block_lo;             /* reduce_scatter: where each rank's block
                                     starts, in elements (once per call) */
    int32_t *flags;               /* by rank: puts to flush, then the syncs'
                                     failure flags */
    uint8_t *landing;             /* remote operands of reductions, sized
                                     before each call (zcopy_span_needs) */
    size_t landing_size;
    zcopy_ucx_mem_t *scratch_mem; /* registered: peers read the partials */
    zcopy_ucx_block_desc_t scratch; /* of hierarchical reductions there */
} zcopy_span_t;

/* Collective over the communicator, like zcopy_ctl_create: starts UCX,
 * exchanges worker addresses, connects to the ranks of other groups and
 * maps those of its own. On failure *reason says why, on every rank. */
zcopy_status_t zcopy_span_create(zcopy_comm_t *zc, zcopy_span_t **span_p,
                                 char *reason, size_t reason_len);
void zcopy_span_destroy(zcopy_span_t *span);

/* zcopy_coll_run for a spanning communicator. */
zcopy_status_t zcopy_span_run(zcopy_comm_t *zc, const zcopy_coll_args_t *a);

static inline int zcopy_span_group_size(const zcopy_span_t *sp, int g)
{
    return sp->group_start[g + 1] - sp->group_start[g];
}

/* Member @i (mod the group's size) of group @g. */
static inline int zcopy_span_member(const zcopy_span_t *sp, int g, int i)
{
    return sp->members[sp->group_start[g] + i % zcopy_span_group_size(sp, g)];
}

/* One spanning collective in flight (span_algo.c). */
typedef struct {
    zcopy_comm_t *zc;
    zcopy_span_t *sp;
    const zcopy_coll_args_t *a;
    int rank, nranks;
    size_t ssize, rsize;
    uint64_t ipc_bytes;           /* moved through mappings */
    uint64_t ucx_bytes;           /* moved by UCX gets and puts */
    zcopy_ucx_comp_t comp;        /* gets and puts not yet waited for */
    bool failed;
} zcopy_span_algo_t;

typedef zcopy_status_t (*zcopy_span_fn_t)(zcopy_span_algo_t *sa);

zcopy_status_t zcopy_span_allreduce(zcopy_span_algo_t *sa);

/* Bytes of landing area and of registered scratch this rank's part of @a
 * will use (elements of @elem bytes). Reserved before the arrival, so that
 * running out of memory is a reason to fall back, not a failure. */
void zcopy_span_needs(const zcopy_span_t *sp, const zcopy_coll_args_t *a,
                      size_t elem, size_t *landing, size_t *scratch);
zcopy_status_t zcopy_span_reduce(zcopy_span_algo_t *sa);
zcopy_status_t zcopy_span_reduce_scatter(zcopy_span_algo_t *sa);
zcopy_status_t zcopy_span_allgather(zcopy_span_algo_t *sa);
zcopy_status_t zcopy_span_bcast(zcopy_span_algo_t *sa);
zcopy_status_t zcopy_span_gather(zcopy_span_algo_t *sa);
zcopy_status_t zcopy_span_scatter(zcopy_span_algo_t *sa);
zcopy_status_t zcopy_span_alltoall(zcopy_span_algo_t *sa);

/* --- reaching peers' buffers (span.c) ------------------------------------ */

/* This process's address of @r's [addr, +len): @r's own when @r is this
 * rank, a mapping when it is in this rank's group. NULL, and the call
 * marked failed, otherwise. */
uint8_t *zcopy_span_map(zcopy_span_algo_t *sa, int r, uint64_t addr,
                        size_t len);

/* Copies @r's [addr, +len) to @dst (get) or @src to it (put): through the
 * mapping inside the group, at once; through UCX from another group,
 * complete only after zcopy_span_complete() or the next sync. */
void zcopy_span_get(zcopy_span_algo_t *sa, int r, uint64_t addr, size_t len,
                    void *dst);
void zcopy_span_put(zcopy_span_algo_t *sa, int r, uint64_t addr, size_t len,
                    const void *src);

/* Waits for this rank's gets and puts, and flushes its puts to the peers. */
void zcopy_span_complete(zcopy_span_algo_t *sa);

/* A sync of every rank: zcopy_span_complete(), then agreement; true when
 * any rank failed. Every rank passes the same syncs. */
bool zcopy_span_sync(zcopy_span_algo_t *sa);



#endif
