/*
 * Collectives on communicators that span servers (SPEC section 6), and on
 * every communicator under coll_zcopy_transport=ucx.
 *
 * Ranks fall into groups: the ranks of one server (one rank each under
 * transport=ucx). Inside a group a rank reaches its peers' activated
 * buffers through mappings, as in a server-only communicator; between
 * groups through UCX gets and puts on the same buffers, with the keys of
 * their blocks carried in every call's arrival. The algorithms (algo.c)
 * move each byte between groups once where they can and then spread it
 * inside the group through mappings.
 *
 * Agreement and synchronisation go through the spanning control plane
 * (plane.c): inside a group, lines of a segment the group shares;
 * between groups, tagged UCX messages among the groups' leaders, one per
 * pair of leaders and round. Its waits progress Open MPI's engine and,
 * through it, the UCX worker, so a rank waiting in one still serves the
 * emulated gets and puts of its peers. Only set-up (and alltoallv's
 * displacements, where a rank reads blocks from other servers) use the
 * previous component's collectives.
 */
#ifndef ZCOPY_COLL_SPAN_H
#define ZCOPY_COLL_SPAN_H

#include "coll/path.h"
#include "coll/wait.h"
#include "coll/data.h"
#include "ipc/ipc.h"
#include "reduce/reduce.h"
#include "topo/topo.h"
#include "ucx/ucx.h"

/* A rank's arrival: its arguments and the blocks under its buffers (their
 * keys are fetched by the peers that need them, once per block). */
typedef struct {
    zcopy_plan_args_t args;
    zcopy_ucx_block_ref_t sblock; /* size 0 when the send extent is empty */
    zcopy_ucx_block_ref_t rblock;
    zcopy_ucx_block_ref_t xblock; /* its scratch, when the call uses it */
    uint64_t carried;             /* alltoallv: bytes of its packed blocks
                                     in its payload slot, 0 where they did
                                     not fit (zcopy_coll_vpack) */
} zcopy_span_desc_t;

/* Bytes of an arrival in the control plane's areas: whole cache lines, so
 * that ranks of a group write theirs without sharing a line. */
#define ZCOPY_SPAN_DESC_STRIDE 128
static_assert(sizeof(zcopy_span_desc_t) <= ZCOPY_SPAN_DESC_STRIDE,
              "an arrival fits its place");

/* The payloads of a small collective ride with the arrivals (the latency
 * path: one round, no transfer, no sync). Bytes of payload a plane holds
 * per arrival at most, whatever coll_zcopy_span_inline_max says: an
 * alltoall of twice the parameter's default per rank on up to 8 ranks.
 * Address space: the pages of a server's segment are made only where
 * payloads land. */
#define ZCOPY_SPAN_PAYLOAD_MAX ((size_t)4 << 20)
/* The same bound for the payloads of the other collectives, whose every
 * rank reads every payload or reduces (span.c, span_inline_limit): what
 * the area held before it grew for the others, and what was measured. */
#define ZCOPY_SPAN_PAYLOAD_ALL_MAX ((size_t)1 << 20)

/* Collectives whose every rank reads at most one payload's worth of an
 * arrival and reduces nothing: the root's payload (bcast), a block of it
 * (scatter), a block of each (alltoall). They may carry twice
 * coll_zcopy_span_inline_max (span.c, span_inline_limit; so may allreduce
 * where every server has one rank, within the other collectives' room). */
static inline bool zcopy_span_reads_one_payload(zcopy_coll_type_t type)
{
    return type == ZCOPY_COLL_BCAST || type == ZCOPY_COLL_SCATTER ||
           type == ZCOPY_COLL_ALLTOALL;
}

/* Twice coll_zcopy_span_inline_max: the most a rank's payload may be.
 * Where twice would not fit any area anyway, the parameter itself, which
 * cannot overflow and decides the same (the area binds first). */
static inline size_t zcopy_span_payload_rank_max(void)
{
    const size_t limit = zcopy_config.span_inline_max;

    return limit <= ZCOPY_SPAN_PAYLOAD_MAX ? 2 * limit : limit;
}

/* Which ranks of a collective send a payload with their arrival, and how
 * much each: all of them, or only the root (bcast, scatter); and which
 * read them: all, or only the root (reduce, gather). */
typedef struct {
    size_t len;                   /* bytes per sender; 0: no payload */
    int root;                     /* the only sender, or -1 for all */
    int reader;                   /* the only reader, or -1 for all: the
                                     other servers get the places alone */
    size_t block;                 /* bytes rank r reads of each payload, at
                                     r * block (alltoall,
                                     reduce_scatter_block, scatter: the
                                     payload is a block per rank); 0 when
                                     every rank reads it whole */
    bool varies;                  /* @len is each sender's slot, of which
                                     it fills what its place's `carried`
                                     says (an alltoallv's packed blocks),
                                     and leaders send only that */
} zcopy_span_payload_t;

/* Its UCX has a transport whose get the network does (rc, dc). */
#define ZCOPY_SPAN_HELLO_RMA_NETWORK 1u

/* What every rank tells the others when a spanning communicator is set up. */
typedef struct {
    zcopy_topo_rank_t where;      /* which server */
    zcopy_ipc_id_t ipc;           /* how its group maps its memory */
    uint32_t address_len;         /* of its UCX worker address */
    uint32_t access;              /* zcopy_ipc_access_local() */
    uint32_t plane_id;            /* in the tags of messages to it */
    uint32_t flags;               /* ZCOPY_SPAN_HELLO_* */
    zcopy_cpus_t cpus;            /* its affinity */
} zcopy_span_hello_t;
static_assert(sizeof(zcopy_span_hello_t) == 192,
              "exchanged between processes");

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
    /* The control plane (plane.c). */
    int leader;                   /* this rank's group's first member */
    bool yield;                   /* its group outnumbers its cores */
    uint8_t *plane;               /* the segment the group shares */
    size_t plane_size;
    int plane_fd;                 /* the leader's, until set-up ends */
    uint32_t plane_id;            /* in the tags of messages to this rank */
    uint32_t *group_tag;          /* by group: its leader's plane id */
    bool blocks_split;            /* leaders send each server only the
                                     blocks its ranks read of a blocks
                                     payload: not where rounds go in
                                     steps, nor past 256 pieces per
                                     message (plane.c); the same on every
                                     rank */
    bool packs;                   /* leaders can send payloads that vary
                                     (zcopy_span_payload_t.varies), each
                                     server only its ranks' blocks: not
                                     where rounds go in steps, nor past
                                     256 pieces a message (plane.c); the
                                     same on every rank */
    zcopy_ucx_iov_t *packed;      /* leader, where it packs: the pieces of
                                     its message to each group, a row of
                                     packed_stride each (its places, then
                                     of each member's slot the table and
                                     the blocks of that group's ranks) */
    size_t packed_stride;         /* the most pieces one may need */
    size_t *unpack_at;            /* leader, where it packs: where each
                                     member's packed payload starts in a
                                     part received, and where the last
                                     ends */
    zcopy_ucx_iov_t *pieces;      /* leader, where split: the pieces of its
                                     messages from, then to, each group */
    size_t *piece_at;             /* where each group's start in pieces */
    uint32_t *group_flags;        /* by group: what it reported at a sync */
    uint32_t sync_out;            /* what this group reports (leader) */
    bool settled;                 /* the last arrival was decided inside
                                     this rank's group: it falls back, and
                                     other groups' parts may not be here
                                     (plane.c, plane_settles) */
    bool deferring;               /* leader: that arrival's exchange is in
                                     flight, finished at the next round */
    zcopy_ucx_comp_t deferred;    /* its messages */
    uint64_t rounds;              /* rounds of the plane passed */
    uint64_t arrivals;            /* of them, arrivals */
    uint8_t *area;                /* the last arrival */
    size_t payload_size;          /* bytes for payloads per arrival */
    zcopy_span_payload_t carried; /* what the last arrival carried */
    const uint8_t *own_payload;   /* this rank's payload of the last
                                     arrival where it went from the
                                     caller's buffer, not through the area
                                     (zcopy_span_arrive); else NULL */
    zcopy_ucx_iov_t own_part[2];  /* a lone leader's part sent so: its
                                     place, then that payload (alive until
                                     the send completes) */
    int64_t *sdispls;             /* alltoallv: where each peer's block for
                                     this rank starts in its send buffer
                                     (of the peers it reads: its group's
                                     alone where it pushes the others') */
    int64_t *sdispls_out;         /* this rank's, sent to each peer */
    size_t *block_lo;             /* reduce_scatter: where each rank's block
                                     starts, in elements (once per call) */
    int32_t *flags;               /* by rank: puts to flush before the next
                                     sync */
    uint8_t *landing;             /* remote operands of reductions, sized
                                     before each call (zcopy_span_needs) */
    size_t landing_size;
    zcopy_ucx_mem_t *scratch_mem; /* registered: peers read the partials */
    zcopy_ucx_block_ref_t scratch; /* of hierarchical reductions there */
    bool p2p_lost;                /* a read's request through the point-to-
                                     point engine was lost: auto no longer
                                     takes that engine here */
    bool hosts_shared;            /* some groups are virtual servers of
                                     one host, whose cores they share
                                     (or transport=ucx): the same on
                                     every rank */
    bool gets_emulated;           /* no rank's UCX has a transport whose
                                     get is real: every get between groups
                                     is emulated (agreed at set-up) */
} zcopy_span_t;

/* Collective over the communicator, like zcopy_ctl_create: starts UCX,
 * exchanges worker addresses, makes endpoints to the ranks of other groups
 * (UCX connects each at its first transfer) and maps those of its own. On
 * failure *reason says why, on every rank. */
zcopy_status_t zcopy_span_create(zcopy_comm_t *zc, zcopy_span_t **span_p,
                                 char *reason, size_t reason_len);
void zcopy_span_destroy(zcopy_span_t *span);

/* zcopy_coll_run for a spanning communicator. */
zcopy_status_t zcopy_span_run(zcopy_comm_t *zc, const zcopy_coll_args_t *a);

/* Whether every rank of a collective sends its own block to every other
 * rank, as stock's algorithms send it too: no reduction, no root. */
static inline bool zcopy_span_only_moves(zcopy_coll_type_t type)
{
    switch (type) {
    case ZCOPY_COLL_ALLGATHER:
    case ZCOPY_COLL_ALLGATHERV:
    case ZCOPY_COLL_ALLTOALL:
    case ZCOPY_COLL_ALLTOALLV:
        return true;
    default:
        return false;
    }
}

/* With one rank of the communicator on each server nothing is shared inside
 * a server. An allgather or alltoall whose payloads do not ride with the
 * arrival (@carried: coll_zcopy_span_inline_max; an allgatherv's by its
 * largest block; never said of an alltoallv, whose ranks learn whether all
 * of them carried only from the arrival) then sends the bytes stock's
 * algorithms send, over the same network, plus zcopy's agreement and its
 * reads' requests or pushes' rendezvous: it goes to the previous component,
 * unless coll_zcopy_one_per_server_moves (2 servers of 1 rank over tcp:
 * medians 0.65x-0.90x of tuned's at 1-4 MiB in four sets of interleaved jobs
 * out of five). Carried, one round beats stock's rendezvous (1.02x-2.49x
 * from 8 to 512 KiB in all sets but two; docs/parameters.md). bcast and
 * scatter stay whatever their size: in the jobs where reads from the root
 * run at the faster of their two speeds, bcast beat tuned's sends (4 MiB:
 * 1293-1360 us against 1624-1861), and scatter did at 4 MiB (704-751 against
 * 811-871). A small call's messages are stock's own plus the agreement, and
 * a rooted call's root waits for every arrival where stock's root sends and
 * leaves: calls of fewer than coll_zcopy_one_per_server_min bytes per rank,
 * and barriers, go there too. Returns the reason, NULL where zcopy takes the
 * call. Each rank decides alone: the type, the sizes of fixed forms (and
 * allgatherv's counts) and whether payloads ride agree on every rank, the
 * layout and the parameters are agreed at set-up. */
static inline const char *zcopy_span_hands_over(const zcopy_comm_t *zc,
                                                const zcopy_coll_args_t *a,
                                                bool carried)
{
    const size_t min = zcopy_config.one_per_server_min;

    if (zc->span->ngroups != zc->span->nranks)
        return NULL;
    if (!zcopy_config.one_per_server_moves && !carried &&
        zcopy_span_only_moves(a->type))
        return "one rank per server: stock moves the same bytes";
    if (min > 0 && (a->type == ZCOPY_COLL_BARRIER ||
                    zcopy_coll_block_bytes(zc, a) < min))
        return "small call, one rank per server";
    return NULL;
}

static inline int zcopy_span_group_size(const zcopy_span_t *sp, int g)
{
    return sp->group_start[g + 1] - sp->group_start[g];
}

/* Member @i (mod the group's size) of group @g. */
static inline int zcopy_span_member(const zcopy_span_t *sp, int g, int i)
{
    return sp->members[sp->group_start[g] + i % zcopy_span_group_size(sp, g)];
}

/* --- control plane (plane.c) ---------------------------------------- */

/* Set-up, collective over the communicator once the groups are known
 * (span.c): the leader makes the group's segment, the others map it. A
 * failure is this rank's; the caller agrees on it with the others (a rank
 * returns success when only another rank failed, so that the agreement
 * names that one). */
zcopy_status_t zcopy_span_plane_create(zcopy_comm_t *zc, zcopy_span_t *sp,
                                       const zcopy_span_hello_t *all);
void zcopy_span_plane_destroy(zcopy_span_t *sp);

/* Finishes what the last round left in flight (a leader's exchange of an
 * arrival its group settled alone): before the endpoints and the segment
 * go. */
void zcopy_span_plane_drain(zcopy_span_t *sp);

/* Every member has mapped the segment: the leader stops offering it. */
void zcopy_span_plane_shared(zcopy_span_t *sp);

/* A leader connects to the leaders it sends to in rounds, at set-up: a
 * message that could not be sent would leave its receiver waiting for it
 * forever, so a peer UCX cannot reach must be found while every rank can
 * still agree to fall back. Other endpoints connect at their first
 * transfer, whose failure the call's next sync reports. */
zcopy_status_t zcopy_span_plane_connect(zcopy_span_t *sp);

/* An id for the tags of messages to a new plane of this process, unique
 * among its live planes; ZCOPY_SPAN_PLANE_NO_ID when all are taken. */
#define ZCOPY_SPAN_PLANE_NO_ID UINT32_MAX
uint32_t zcopy_span_plane_new_id(void);

/* This call's arrival: @mine reaches every rank, and every rank's is
 * zcopy_span_desc() until the next arrival; so do the payloads @pl says
 * the ranks send (this rank's @len bytes at @src, when it is a sender),
 * at zcopy_span_payload_at(), on every rank that reads them (all, or
 * the groups of @pl->reader and of the sender). Except where the arrival
 * is settled inside this rank's group (sp->settled): a rank of the group
 * declined, so the call falls back whatever the other groups say, and
 * only this group's places are sure to be there. @src_stays: nothing
 * writes @src until the call ends, and the call's delivery never writes
 * where it reads this rank's payload; then a rank alone in its group
 * sends its payload straight from @src instead of copying it into the
 * area first. */
zcopy_status_t zcopy_span_arrive(zcopy_comm_t *zc, zcopy_span_t *sp,
                                 const zcopy_span_desc_t *mine,
                                 const zcopy_span_payload_t *pl,
                                 const void *src, size_t len, bool src_stays);

/* A synchronisation of every rank: returns what they reported (@flags),
 * or-ed; ZCOPY_SYNC_BROKEN too if messages between servers failed. */
unsigned zcopy_span_plane_sync(zcopy_comm_t *zc, zcopy_span_t *sp,
                               unsigned flags);

/* A synchronisation of the ranks of this rank's group alone, with no
 * message between servers: where no rank of another group reads or
 * writes this group's buffers once this rank's own transfers are done.
 * Every rank of the communicator must know from the call that it is one.
 * Returns what the group's ranks reported, or-ed. */
unsigned zcopy_span_plane_sync_group(zcopy_comm_t *zc, zcopy_span_t *sp,
                                     unsigned flags);

/* An alltoallv's displacements inside a group (zcopy_span_pushes_all):
 * the row of the group's member @index, an int64 per member in group
 * order, the byte where that member's block for each of them starts in
 * its send buffer. A member writes its row before its arrival and its
 * peers read it after; one row per member serves every call, since a
 * member writes the next only after the call's last sync, which waits
 * for every member of the group, and so for its reads (a call whose
 * blocks rode the arrival has no sync, and reads no row). */
int64_t *zcopy_span_group_displs(const zcopy_span_t *sp, int index);

/* Bytes a sender's payload of @len takes in an arrival: whole lines, so
 * that ranks of a server write theirs without sharing one. */
static inline size_t zcopy_span_slot(size_t len)
{
    return zcopy_align_up(len, ZCOPY_CACHE_LINE);
}

/* Where this rank's payload of its next arrival goes, for a caller that
 * writes it there itself (a payload that varies: an alltoallv's packed
 * blocks) and then arrives with no @src. */
uint8_t *zcopy_span_payload_next(zcopy_span_t *sp,
                                 const zcopy_span_payload_t *pl);

/* Whether payloads of @pl fit one arrival of @sp, within @most bytes in
 * all. */
static inline bool zcopy_span_payload_fits(const zcopy_span_t *sp,
                                           const zcopy_span_payload_t *pl,
                                           size_t most)
{
    const size_t senders = pl->root >= 0 ? 1 : (size_t)sp->nranks;
    const size_t room = sp->payload_size < most ? sp->payload_size : most;

    return zcopy_span_slot(pl->len) <= room / senders;
}

/* The last arrival lies in its area group after group, each group's part
 * its ranks' places and then their payloads, so that each leader sends its
 * group's part (or, of a blocks payload, the pieces the receiving server
 * reads: plane.c) in one message. Where group @g's part starts: */
static inline size_t zcopy_span_group_base(const zcopy_span_t *sp, int g)
{
    const zcopy_span_payload_t *pl = &sp->carried;
    const size_t before = (size_t)sp->group_start[g];

    if (pl->len == 0)
        return before * ZCOPY_SPAN_DESC_STRIDE;
    if (pl->root < 0)
        return before * (ZCOPY_SPAN_DESC_STRIDE + zcopy_span_slot(pl->len));
    return before * ZCOPY_SPAN_DESC_STRIDE +
           (g > sp->group[pl->root] ? zcopy_span_slot(pl->len) : 0);
}

/* The bytes of group @g's part. */
static inline size_t zcopy_span_group_bytes(const zcopy_span_t *sp, int g)
{
    const zcopy_span_payload_t *pl = &sp->carried;
    const size_t m = (size_t)zcopy_span_group_size(sp, g);
    size_t payloads = 0;

    if (pl->len > 0 && pl->root < 0)
        payloads = m * zcopy_span_slot(pl->len);
    else if (pl->len > 0 && sp->group[pl->root] == g)
        payloads = zcopy_span_slot(pl->len);
    return m * ZCOPY_SPAN_DESC_STRIDE + payloads;
}

static inline const zcopy_span_desc_t *zcopy_span_desc(const zcopy_span_t *sp,
                                                       int r)
{
    return (const zcopy_span_desc_t *)(sp->area +
                                       zcopy_span_group_base(sp, sp->group[r]) +
                                       (size_t)sp->index[r] *
                                           ZCOPY_SPAN_DESC_STRIDE);
}

/* Where rank @r's payload of the last arrival lies in the area (a
 * sender's); this rank's own may have gone from its buffer instead:
 * read payloads through zcopy_span_payload_at(). */
static inline const uint8_t *zcopy_span_payload_of(const zcopy_span_t *sp,
                                                   int r)
{
    const int g = sp->group[r];
    const size_t m = (size_t)zcopy_span_group_size(sp, g);
    const size_t at = sp->carried.root >= 0
                          ? 0 : (size_t)sp->index[r] *
                                    zcopy_span_slot(sp->carried.len);

    return sp->area + zcopy_span_group_base(sp, g) +
           m * ZCOPY_SPAN_DESC_STRIDE + at;
}

/* Where rank @r's payload of the last arrival can be read: its place in
 * the area, or this rank's own source where it was sent from there. */
static inline const uint8_t *zcopy_span_payload_at(const zcopy_span_t *sp,
                                                   int r)
{
    if (r == sp->rank && sp->own_payload != NULL)
        return sp->own_payload;
    return zcopy_span_payload_of(sp, r);
}

/* A transfer through the job's point-to-point engine, until
 * zcopy_span_complete() has it: the receive of a read answered through it
 * (coll_zcopy_ucx_fetch pml, or auto's large reads), or a pushed block's
 * receive or send (auto's large alltoall blocks). Allocated one by one,
 * since UCX writes @lost until then. */
typedef enum {
    ZCOPY_SPAN_P2P_READ,          /* the receive of a read */
    ZCOPY_SPAN_P2P_PUSH_IN,       /* a pushed block's receive */
    ZCOPY_SPAN_P2P_PUSH_OUT       /* a pushed block's send */
} zcopy_span_p2p_kind_t;

typedef struct zcopy_span_p2p {
    struct zcopy_span_p2p *next;
    void *req;                    /* its receive, or its send */
    size_t len;                   /* bytes it must move */
    int peer;
    zcopy_span_p2p_kind_t kind;
    bool lost;                    /* a read's request never reached @peer */
} zcopy_span_p2p_t;

/* One spanning collective in flight (algo.c). */
typedef struct {
    zcopy_comm_t *zc;
    zcopy_span_t *sp;
    const zcopy_coll_args_t *a;
    int rank, nranks;
    size_t ssize, rsize;
    uint64_t ipc_bytes;           /* moved through mappings */
    uint64_t ucx_bytes;           /* moved by UCX gets and puts */
    uint64_t p2p_bytes;           /* moved by the job's point-to-point engine */
    zcopy_ucx_comp_t comp;        /* gets and puts not yet waited for */
    zcopy_span_p2p_t *p2p;        /* transfers through that engine */
    unsigned p2p_inflight;        /* how many */
    unsigned p2p_peak;            /* the most at once since the last sync */
    bool failed;
} zcopy_span_algo_t;

typedef zcopy_status_t (*zcopy_span_fn_t)(zcopy_span_algo_t *sa);

/* Bytes of landing area and of registered scratch this rank's part of @a
 * will use (elements of @elem bytes). Reserved before the arrival, so that
 * running out of memory is a reason to fall back, not a failure. */
void zcopy_span_needs(const zcopy_span_t *sp, const zcopy_coll_args_t *a,
                      size_t elem, size_t *landing, size_t *scratch);

zcopy_status_t zcopy_span_allreduce(zcopy_span_algo_t *sa);
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

/* Whether blocks of @len bytes between ranks of different groups are
 * pushed rather than read: the sender sends its block through the job's
 * point-to-point engine straight from its buffer into the receiver's,
 * which has posted a receive, with no request first and no copy in
 * between (coll_zcopy_ucx_push_min under coll_zcopy_ucx_fetch auto, where
 * every get between groups is emulated and some group has several
 * ranks; src/ucx/README.md, "Pushed alltoall blocks"). The same answer on both ranks of
 * a pair: @len is the same on both (matching type signatures), the rest
 * is agreed at set-up. */
bool zcopy_span_pushes(const zcopy_span_algo_t *sa, size_t len);

/* Whether an alltoallv pushes every block between groups, whatever its
 * size: where blocks are pushed at all (zcopy_span_pushes but for @len).
 * Then no rank of another group reads this rank's send buffer, so only
 * its group learns its displacements (zcopy_span_group_displs) and, where
 * the groups are hosts of their own, only its group waits for it at the
 * end: the call sends nothing between servers but its arrival and its
 * blocks. The same answer on every rank (agreed at set-up). */
bool zcopy_span_pushes_all(const zcopy_span_t *sp);


/* One step of pushes: receives @rlen bytes of @from's block into @dst and
 * sends @slen bytes of @src to @to (a length of 0: no such part), both
 * ranks of other groups; complete only after zcopy_span_complete() or the
 * next sync. The bound on requests in flight
 * (coll_zcopy_ucx_max_requests) waits before a step, never inside one, so
 * that every rank taking its steps in the same order of distances (at
 * distance d, from the rank d behind and to the rank d ahead; an
 * alltoallv block cut in parts, coll_zcopy_ucx_push_part_max, takes a step
 * per part, cut at the same offsets by both ranks) never waits in a cycle: the lowest step
 * anyone waits for has both its ranks' parts posted. */
void zcopy_span_push(zcopy_span_algo_t *sa, int from, void *dst, size_t rlen,
                     int to, const void *src, size_t slen);

/* Waits for this rank's gets and puts, and flushes its puts to the peers. */
void zcopy_span_complete(zcopy_span_algo_t *sa);

/* A sync of every rank: zcopy_span_complete(), then agreement; true when
 * any rank failed. Every rank passes the same syncs. */
bool zcopy_span_sync(zcopy_span_algo_t *sa);

/* The same among the ranks of this rank's group only
 * (zcopy_span_plane_sync_group): true when one of them failed. */
bool zcopy_span_sync_group(zcopy_span_algo_t *sa);



#endif
