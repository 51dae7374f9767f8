/*
 * The control plane of a spanning communicator: how its ranks learn each
 * other's arrivals and pass its syncs, in rounds, without the previous
 * component.
 *
 * A round has a number, the same on every rank. Inside a group (the ranks
 * of one server) it goes through a segment the group shares, which its
 * leader (the group's first member) made at set-up:
 *   line 0        the leader's: the last round it completed, and a sync's
 *                 result, or-ed over every rank
 *   lines 1..g    one per member, in group order: the last round it
 *                 entered, and what it reported at a sync
 *   then          two areas by parity of the arrival, group after group:
 *                 each group's part a place of ZCOPY_SPAN_DESC_STRIDE
 *                 bytes per member, then (for a small collective) a slot
 *                 per member with its payload, or the root's alone
 *                 (zcopy_span_group_base)
 *   last          a row per member of its alltoallv displacements for
 *                 the other members (zcopy_span_group_displs), which
 *                 never leave the group
 * A member writes its arrival (and payload) into its place and enters the
 * round (a leader alone in its group sends its payload from its own
 * buffer instead: plane_sends_from_source); the leader waits for every
 * member, sends its group's part (or, at a sync, the group's or-ed
 * report) to every other group's leader in
 * one tagged UCX message each (of payloads that are a block per rank,
 * where blocks are split, only the blocks of that group's ranks:
 * plane_split_blocks, plane_blocks; of payloads only a root reads, none
 * to the other groups: plane_places_only; of payloads that vary by
 * rank, of each member's filled slot its table and the blocks of that
 * group's ranks, which the receiving leader spreads back to their places
 * in the slots: plane_packed, plane_unpack), receives
 * theirs straight into their parts, and completes the round; members wait
 * for that. So a rank that
 * is not a leader sends one record per round whatever the number of
 * servers, and a leader one message per other server. From
 * coll_zcopy_span_dissemination_min servers on, leaders pass a round in
 * ceil(log2 S) steps of one message instead: an arrival's parts by
 * Bruck's allgather (plane_gather), a sync's reports by dissemination
 * (plane_disseminate).
 *
 * A group sync (zcopy_span_plane_sync_group) is a round whose leader
 * sends and receives nothing: it ends a collective in which no rank of
 * another group touches this group's buffers any more once this group's
 * own transfers have completed (an alltoall or alltoallv whose every
 * block between servers is pushed). Every rank knows from the call alone that it is one,
 * so round numbers stay the same everywhere; a leader may then begin the
 * next arrival while another group is still in the collective, and its
 * message waits for that group's leader as any early message does.
 *
 * An arrival that a rank of the group declined is settled by the group
 * alone
 * (plane_settles): the leader posts its messages as above and completes
 * the round for its members at once, and the other groups' parts land
 * while the ranks run the fallback; the leader waits for them at its next
 * round, before it posts anything else (plane_settle), or before the
 * connections or the segment go (zcopy_span_plane_drain).
 *
 * Why the areas can be reused by parity: a member writes arrival k only
 * after round k - 1 completed, which needed every member of its group to
 * have entered k - 1, so every reader of arrival k - 2 is done with it;
 * the leader receives into the areas of k only after its members entered
 * k, and a remote leader can send k + 2 only after it completed k + 1,
 * which needed this group's part of k + 1 (sent by this group's leader,
 * or forwarded in steps from it), i.e. after its members left k; and a
 * settled arrival's messages all land before its leader completes the
 * next round. Messages of later rounds that arrive early wait inside UCX,
 * matched by their tag:
 *   bit  63      clear (set on the replies of served reads, ucx/serve.c)
 *   bits 62..44  the receiving leader's plane id (unique in its process)
 *   bits 43..28  the sending group
 *   bits 27..0   the round, modulo 2^28
 */
#include "span.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define PLANE_ID_BITS 19
#define PLANE_GROUP_BITS 16
#define PLANE_ROUND_BITS 28
#define PLANE_MAX_GROUPS (1 << PLANE_GROUP_BITS)

/* What a member reports at an arrival: it declined the collective. What
 * the leader adds: the group settled the arrival alone (plane_settles). */
#define PLANE_DECLINED (1u << 8)
#define PLANE_SETTLED (1u << 10)

/* Pieces of a leader's message that carries only the blocks its receivers
 * read (plane_blocks): the places, then a piece per sender and run of
 * consecutive ranks of the receiving server; 1 + g pieces between servers
 * of consecutive ranks, 1 + g h where ranks alternate between servers
 * (an alltoallv's packed blocks, plane_packed: a piece more per sender,
 * for its table). Beyond this many in one message, whole parts go
 * (plane_split_blocks), and no alltoallv rides (plane_packs). */
#define PLANE_PIECES_MAX 256

typedef struct {
    _Atomic uint64_t round;       /* the last round completed (leader) or
                                     entered (member) */
    uint32_t flags;               /* a sync's report */
    uint32_t failed;              /* leader: messages between servers failed */
    uint8_t pad[ZCOPY_CACHE_LINE - 16];
} plane_line_t;
static_assert(sizeof(plane_line_t) == ZCOPY_CACHE_LINE, "one line each");

/* Plane ids in use in this process, a bit each. Process-wide: a tag must
 * tell this process's live planes apart, whatever communicator they belong
 * to (one UCX worker serves them all), and a communicator may outlive any
 * number of others made and freed after it. */
#define PLANE_IDS (1u << PLANE_ID_BITS)
static _Atomic uint64_t plane_ids_live[PLANE_IDS / 64];
static _Atomic uint32_t plane_ids_next;

uint32_t zcopy_span_plane_new_id(void)
{
    for (uint32_t tries = 0; tries < PLANE_IDS; tries++) {
        uint32_t id = atomic_fetch_add_explicit(&plane_ids_next, 1,
                                                memory_order_relaxed) %
                      PLANE_IDS;
        uint64_t bit = UINT64_C(1) << (id % 64);

        if (!(atomic_fetch_or_explicit(&plane_ids_live[id / 64], bit,
                                       memory_order_relaxed) & bit))
            return id;
    }
    return ZCOPY_SPAN_PLANE_NO_ID;
}

static void plane_id_free(uint32_t id)
{
    if (id < PLANE_IDS)
        atomic_fetch_and_explicit(&plane_ids_live[id / 64],
                                  ~(UINT64_C(1) << (id % 64)),
                                  memory_order_relaxed);
}

/* The leader of group @h: its first member. */
static int plane_leader_of(const zcopy_span_t *sp, int h)
{
    return sp->members[sp->group_start[h]];
}

/* Whether the leaders pass a round in ceil(log2 S) steps (an arrival by
 * plane_gather, a sync by plane_disseminate): from
 * coll_zcopy_span_dissemination_min servers on (agreed at set-up, so every
 * leader decides alike). One step of S - 1 messages costs a leader a send
 * and a receive per other server; the steps cost a latency each, in a
 * row, which pays only once S - 1 messages take longer than that. */
static bool plane_disseminates(const zcopy_span_t *sp)
{
    return zcopy_config.span_dissemination_min > 0 &&
           sp->ngroups >= zcopy_config.span_dissemination_min;
}

static plane_line_t *plane_line(const zcopy_span_t *sp, int line)
{
    return (plane_line_t *)(sp->plane + (size_t)line * ZCOPY_CACHE_LINE);
}

static size_t plane_lines(const zcopy_span_t *sp)
{
    return 1 + (size_t)zcopy_span_group_size(sp, sp->group[sp->rank]);
}

static size_t plane_area_size(const zcopy_span_t *sp)
{
    return (size_t)sp->nranks * ZCOPY_SPAN_DESC_STRIDE + sp->payload_size;
}

/* Bytes of one displacement row: an int64 per member of the group, in
 * whole lines, so that members write theirs without sharing a line. */
static size_t plane_displs_row(const zcopy_span_t *sp)
{
    const size_t m = (size_t)zcopy_span_group_size(sp, sp->group[sp->rank]);

    return zcopy_align_up(m * sizeof(int64_t), ZCOPY_CACHE_LINE);
}

static size_t plane_displs_size(const zcopy_span_t *sp)
{
    return (size_t)zcopy_span_group_size(sp, sp->group[sp->rank]) *
           plane_displs_row(sp);
}

int64_t *zcopy_span_group_displs(const zcopy_span_t *sp, int index)
{
    uint8_t *rows = sp->plane + plane_lines(sp) * ZCOPY_CACHE_LINE +
                    2 * plane_area_size(sp);

    return (int64_t *)(void *)(rows + (size_t)index * plane_displs_row(sp));
}

static uint8_t *plane_area(const zcopy_span_t *sp, uint64_t arrival)
{
    return sp->plane + plane_lines(sp) * ZCOPY_CACHE_LINE +
           (arrival & 1) * plane_area_size(sp);
}

/* The tag of a message to @to_group's leader. */
static uint64_t plane_tag(const zcopy_span_t *sp, int to_group, int from_group,
                          uint64_t round)
{
    return (uint64_t)(sp->group_tag[to_group] & ((1u << PLANE_ID_BITS) - 1))
               << (PLANE_GROUP_BITS + PLANE_ROUND_BITS) |
           (uint64_t)from_group << PLANE_ROUND_BITS |
           (round & ((UINT64_C(1) << PLANE_ROUND_BITS) - 1));
}

/* Bytes of payload area: the most a rank's payload may be (that of an
 * alltoall: zcopy_span_payload_rank_max) for every rank, within
 * ZCOPY_SPAN_PAYLOAD_MAX; whole lines. The same on every rank (the
 * parameter is agreed at set-up). */
static size_t plane_payload_size(int nranks)
{
    const size_t each = zcopy_span_payload_rank_max();
    const size_t n = (size_t)nranks;

    if (each > ZCOPY_SPAN_PAYLOAD_MAX / n)
        return ZCOPY_SPAN_PAYLOAD_MAX;
    return zcopy_align_up(each * n, ZCOPY_CACHE_LINE);
}

/* The run of consecutive ranks among group @g's members (in rank order)
 * that starts at its member @k: its first and last rank. Returns the
 * member after it. */
static int plane_run(const zcopy_span_t *sp, int g, int k, int *first,
                     int *last)
{
    const int m = zcopy_span_group_size(sp, g);

    *first = *last = zcopy_span_member(sp, g, k);
    while (k + 1 < m && zcopy_span_member(sp, g, k + 1) == *last + 1) {
        k++;
        (*last)++;
    }
    return k + 1;
}

/* The same run found from its end, member @k: returns the member before
 * it (-1 after the first run). */
static int plane_run_back(const zcopy_span_t *sp, int g, int k, int *first,
                          int *last)
{
    *first = *last = zcopy_span_member(sp, g, k);
    while (k > 0 && zcopy_span_member(sp, g, k - 1) == *first - 1) {
        k--;
        (*first)--;
    }
    return k - 1;
}

/* Runs of consecutive ranks among group @g's members. */
static int plane_runs(const zcopy_span_t *sp, int g)
{
    int runs = 0, first, last;

    for (int k = 0; k < zcopy_span_group_size(sp, g);
         k = plane_run(sp, g, k, &first, &last))
        runs++;
    return runs;
}

/* The most runs of any group. */
static int plane_most_runs(const zcopy_span_t *sp)
{
    int most = 0;

    for (int g = 0; g < sp->ngroups; g++)
        if (plane_runs(sp, g) > most)
            most = plane_runs(sp, g);
    return most;
}

/* Pieces of a message from group @from to group @to when it carries only
 * blocks: the places, and a piece per sender and run of @to. */
static size_t plane_blocks_pieces(const zcopy_span_t *sp, int from, int to)
{
    return 1 + (size_t)zcopy_span_group_size(sp, from) *
                   (size_t)plane_runs(sp, to);
}

/* Whether leaders send other servers only the blocks their ranks read
 * (plane_exchange): not when rounds go in steps, which forward whole
 * parts, nor when a message would need more than PLANE_PIECES_MAX pieces.
 * From the groups and an agreed parameter: the same on every rank, which
 * decides with it how large such payloads may ride the arrival. */
static bool plane_split_blocks(const zcopy_span_t *sp)
{
    if (sp->ngroups < 2 || plane_disseminates(sp))
        return false;
    /* At most the largest group's senders times the most runs. */
    return 1 + (size_t)sp->max_group * (size_t)plane_most_runs(sp) <=
           PLANE_PIECES_MAX;
}

/* Whether leaders send payloads that vary (an alltoallv's packed blocks),
 * each other server of each member's payload only its table and the
 * blocks of that server's ranks (plane_packed): a piece for the places,
 * one per member for its table and one per member and run of the
 * receiving server. Not when rounds go in steps, which forward whole
 * parts from the area, nor when a message would need more than
 * PLANE_PIECES_MAX pieces (then no such payload rides: span.c). The same
 * on every rank. */
static bool plane_packs(const zcopy_span_t *sp)
{
    return sp->ngroups > 1 && !plane_disseminates(sp) &&
           1 + (size_t)sp->max_group * (1 + (size_t)plane_most_runs(sp)) <=
               PLANE_PIECES_MAX;
}

/* Leader: where the pieces of its message from (then to) each group start
 * in sp->pieces (piece_at[h], piece_at[ngroups + h]); returns how many in
 * all. */
static size_t plane_place_pieces(zcopy_span_t *sp)
{
    const int me = sp->group[sp->rank];
    size_t at = 0;

    for (int i = 0; i < 2 * sp->ngroups; i++) {
        const int h = i % sp->ngroups;

        sp->piece_at[i] = at;
        if (h != me)
            at += i < sp->ngroups ? plane_blocks_pieces(sp, h, me)
                                  : plane_blocks_pieces(sp, me, h);
    }
    sp->piece_at[2 * sp->ngroups] = at;
    return at;
}

/* --- set-up ---------------------------------------------------------------- */

typedef struct {
    int32_t fd;                   /* the leader's segment, for its members */
    int32_t reserved;
    uint64_t ino;
} plane_offer_t;

zcopy_status_t zcopy_span_plane_create(zcopy_comm_t *zc, zcopy_span_t *sp,
                                       const zcopy_span_hello_t *all)
{
    const int g = sp->group[sp->rank];
    const int gsize = zcopy_span_group_size(sp, g);
    const zcopy_cpus_t **cpus;
    plane_offer_t mine = { .fd = -1 }, *offers;
    zcopy_comm_vote_t vote;
    zcopy_status_t st = ZCOPY_SUCCESS;
    int fd = -1;
    void *p;

    sp->plane_fd = -1;
    sp->leader = plane_leader_of(sp, g);
    sp->group_tag = calloc((size_t)sp->ngroups, sizeof(uint32_t));
    sp->group_flags = calloc((size_t)sp->ngroups, sizeof(uint32_t));
    sp->blocks_split = plane_split_blocks(sp);
    sp->packs = plane_packs(sp);
    if (sp->packs && sp->rank == sp->leader) {
        sp->packed_stride = 1 + (size_t)gsize *
                                    (1 + (size_t)plane_most_runs(sp));
        sp->packed = calloc(sp->packed_stride * (size_t)sp->ngroups,
                            sizeof(*sp->packed));
        sp->unpack_at = calloc((size_t)sp->max_group + 1,
                               sizeof(*sp->unpack_at));
    }
    if (sp->blocks_split && sp->rank == sp->leader) {
        sp->piece_at = calloc(2 * (size_t)sp->ngroups + 1,
                              sizeof(*sp->piece_at));
        if (sp->piece_at != NULL)
            sp->pieces = calloc(plane_place_pieces(sp), sizeof(*sp->pieces));
    }
    cpus = calloc((size_t)gsize, sizeof(*cpus));
    offers = calloc((size_t)sp->nranks, sizeof(*offers));
    if (!sp->group_tag || !sp->group_flags || !cpus || !offers ||
        (sp->blocks_split && sp->rank == sp->leader && sp->pieces == NULL) ||
        (sp->packs && sp->rank == sp->leader &&
         (sp->packed == NULL || sp->unpack_at == NULL)))
        st = zcopy_error(ZCOPY_ERR_NOMEM, "control plane: out of memory");
    else if (sp->plane_id == ZCOPY_SPAN_PLANE_NO_ID)
        st = zcopy_error(ZCOPY_ERR_UNSUPPORTED, "control plane: every id in "
                         "use");
    else if (sp->ngroups > PLANE_MAX_GROUPS)
        st = zcopy_error(ZCOPY_ERR_UNSUPPORTED, "more than %d servers",
                         PLANE_MAX_GROUPS);
    if (st == ZCOPY_SUCCESS) {
        for (int h = 0; h < sp->ngroups; h++)
            sp->group_tag[h] = all[plane_leader_of(sp, h)].plane_id;
        for (int i = 0; i < gsize; i++)
            cpus[i] = &all[sp->members[sp->group_start[g] + i]].cpus;
        sp->yield = zcopy_wait_yields(cpus, gsize, sp->index[sp->rank]);
        sp->payload_size = plane_payload_size(sp->nranks);
        sp->plane_size = plane_lines(sp) * ZCOPY_CACHE_LINE +
                         2 * plane_area_size(sp) + plane_displs_size(sp);
    }
    if (st == ZCOPY_SUCCESS && sp->rank == sp->leader) {
        st = zcopy_memfd_segment("zcopy-span-plane", sp->plane_size,
                                 &sp->plane_fd, &mine.ino);
        mine.fd = sp->plane_fd;
        if (st == ZCOPY_SUCCESS) /* to the members, if over sockets */
            zcopy_ipc_fdpass_offer(sp->plane_fd, mine.ino);
    }
    /* Every rank takes part, whatever failed: the others wait for it. The
     * offers travel only once every rank has made its part and has room
     * for them. */
    if (zcopy_comm_vote(zc, st, 0, &vote) != MPI_SUCCESS ||
        (vote.rank < 0 && zc->ops.allgather(&mine, offers, sizeof(mine),
                                            zc->ops.ctx) != MPI_SUCCESS)) {
        st = zcopy_error(ZCOPY_ERR_INTERNAL, "control plane: exchange failed");
        goto out;
    }
    /* Another rank's failure: this rank's part went well, and the
     * caller's agreement, which every rank reaches from here, names that
     * rank. */
    if (st != ZCOPY_SUCCESS || vote.rank >= 0)
        goto out;
    fd = sp->plane_fd;
    if (sp->rank != sp->leader) {
        st = zcopy_ipc_fetch_fd(&all[sp->leader].ipc, offers[sp->leader].fd,
                                offers[sp->leader].ino, &fd);
        if (st != ZCOPY_SUCCESS)
            goto out;
    }
    p = mmap(NULL, sp->plane_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (fd != sp->plane_fd)
        close(fd);
    if (p == MAP_FAILED) {
        st = zcopy_error(errno == ENOMEM ? ZCOPY_ERR_NOMEM : ZCOPY_ERR_SYSTEM,
                         "mapping the control plane: %s", strerror(errno));
        goto out;
    }
    sp->plane = p;
    sp->area = plane_area(sp, 0);
out:
    free(offers);
    free(cpus);
    return st;
}

zcopy_status_t zcopy_span_plane_connect(zcopy_span_t *sp)
{
    const int me = sp->group[sp->rank], ngroups = sp->ngroups;

    if (sp->rank != sp->leader)
        return ZCOPY_SUCCESS;
    if (!plane_disseminates(sp)) {
        for (int h = 0; h < ngroups; h++)
            if (h != me)
                ZCOPY_CHECK(zcopy_ucx_ep_connect(
                    sp->eps[plane_leader_of(sp, h)]));
        return ZCOPY_SUCCESS;
    }
    /* Gathers send d groups back, disseminations d groups on. */
    for (int d = 1; d < ngroups; d *= 2) {
        ZCOPY_CHECK(zcopy_ucx_ep_connect(
            sp->eps[plane_leader_of(sp, (me - d + ngroups) % ngroups)]));
        ZCOPY_CHECK(zcopy_ucx_ep_connect(
            sp->eps[plane_leader_of(sp, (me + d) % ngroups)]));
    }
    return ZCOPY_SUCCESS;
}

void zcopy_span_plane_shared(zcopy_span_t *sp)
{
    if (sp->plane_fd < 0)
        return;
    zcopy_ipc_fdpass_withdraw(sp->plane_fd);
    close(sp->plane_fd); /* the mappings keep the segment */
    sp->plane_fd = -1;
}

void zcopy_span_plane_destroy(zcopy_span_t *sp)
{
    zcopy_span_plane_shared(sp);
    plane_id_free(sp->plane_id);
    sp->plane_id = ZCOPY_SPAN_PLANE_NO_ID;
    if (sp->plane != NULL)
        munmap(sp->plane, sp->plane_size);
    sp->plane = NULL;
    free(sp->group_tag);
    free(sp->group_flags);
    free(sp->pieces);
    free(sp->piece_at);
    free(sp->packed);
    free(sp->unpack_at);
    sp->packed = NULL;
    sp->unpack_at = NULL;
    sp->group_tag = NULL;
    sp->group_flags = NULL;
    sp->pieces = NULL;
    sp->piece_at = NULL;
}

/* --- rounds ------------------------------------------------------------------ */

static void plane_count(zcopy_comm_t *zc, uint64_t msgs, uint64_t bytes)
{
    zc->stats.ctl_msgs += msgs;
    zc->stats.ctl_bytes += bytes;
}

/* Bytes of group @h's places in an arrival: they come first in its part. */
static size_t plane_places_bytes(const zcopy_span_t *sp, int h)
{
    return (size_t)zcopy_span_group_size(sp, h) * ZCOPY_SPAN_DESC_STRIDE;
}

/* Leader: what group @h sends in this round (its part of the arrival, or
 * at a sync its report), and so where that lands here. */
static void plane_buffers(zcopy_span_t *sp, bool arrival, int h,
                          uint8_t **buf, size_t *len)
{
    const int g = sp->group[sp->rank];

    if (!arrival) {
        *buf = (uint8_t *)(h == sp->group[sp->rank] ? &sp->sync_out
                                                    : &sp->group_flags[h]);
        *len = sizeof(uint32_t);
        return;
    }
    *buf = sp->area + zcopy_span_group_base(sp, h);
    *len = zcopy_span_group_bytes(sp, h);
    /* A call that a rank of this group declined falls back on every rank:
     * its payloads would go unread. The places come first. */
    if (h == g && (sp->sync_out & PLANE_DECLINED))
        *len = plane_places_bytes(sp, h);
}

/* Leader: the pieces of group @from's part of an arrival that group
 * @to's ranks read, into @iov (room for plane_blocks_pieces()): its
 * places, then, of each payload its ranks sent, the blocks of @to's ranks.
 * Returns how many, or 0 when the whole part goes: blocks not split here,
 * payloads read whole, or none from @from. Sender and receiver find the
 * same pieces: the groups and the arrival's payload are the same on every
 * rank. */
static size_t plane_blocks(const zcopy_span_t *sp, int from, int to,
                           zcopy_ucx_iov_t *iov)
{
    const zcopy_span_payload_t *pl = &sp->carried;
    const int senders = zcopy_span_group_size(sp, from);
    const int readers = zcopy_span_group_size(sp, to);
    size_t n = 0;

    if (!sp->blocks_split || pl->len == 0 || pl->block == 0 ||
        (pl->root >= 0 && sp->group[pl->root] != from))
        return 0;
    iov[n++] = (zcopy_ucx_iov_t){
        .buf = sp->area + zcopy_span_group_base(sp, from),
        .len = plane_places_bytes(sp, from) };
    for (int i = 0; i < senders; i++) {
        const int s = zcopy_span_member(sp, from, i);
        uint8_t *payload = (uint8_t *)zcopy_span_payload_at(sp, s);

        if (pl->root >= 0 && s != pl->root)
            continue;
        for (int k = 0, first, last; k < readers;) {
            k = plane_run(sp, to, k, &first, &last);
            iov[n++] = (zcopy_ucx_iov_t){
                .buf = payload + pl->block * (size_t)first,
                .len = pl->block * (size_t)(last - first + 1) };
        }
    }
    return n;
}

/* Leader: the pieces reserved for its message to (@out) or from group @h;
 * NULL where blocks are not split. */
static zcopy_ucx_iov_t *plane_pieces(const zcopy_span_t *sp, int h, bool out)
{
    if (sp->pieces == NULL)
        return NULL;
    return sp->pieces + sp->piece_at[(size_t)out * (size_t)sp->ngroups +
                                     (size_t)h];
}

/* Leader: whether its message of an arrival to group @h carries its
 * group's places alone: its payloads are read by one rank (the root of a
 * reduce or gather), not of @h. The receive, posted for the whole part,
 * takes the shorter message in its first bytes. */
static bool plane_places_only(const zcopy_span_t *sp, int h)
{
    const int reader = sp->carried.reader;

    return sp->carried.len > 0 && reader >= 0 && sp->group[reader] != h;
}

/* Whether every member of group @h filled its slot of an arrival whose
 * payloads vary, within the slot: else the call cannot ride the arrival
 * (span.c), and its leader sends the places alone. From the places, the
 * same answer for the leader that sends and those that receive. */
static bool plane_all_filled(const zcopy_span_t *sp, int h)
{
    for (int i = 0; i < zcopy_span_group_size(sp, h); i++) {
        const zcopy_span_desc_t *d =
            zcopy_span_desc(sp, zcopy_span_member(sp, h, i));

        if (d->args.reason != REASON_NONE || d->carried == 0 ||
            d->carried > sp->carried.len)
            return false;
    }
    return true;
}

/* Offset @j of the table of offsets at @table (zcopy_coll_vpack), read
 * byte by byte: in a packed part received, a member's table follows the
 * previous member's blocks, unpadded. */
static size_t plane_offset(const uint8_t *table, int j)
{
    zcopy_coll_vpack_offset_t offset;

    memcpy(&offset, table + (size_t)j * sizeof(offset), sizeof(offset));
    return offset;
}

/* Leader: its row of sp->packed for its message to group @h. */
static zcopy_ucx_iov_t *plane_packed_row(const zcopy_span_t *sp, int h)
{
    return sp->packed + (size_t)h * sp->packed_stride;
}

/* Leader: its group's part of an arrival whose payloads vary, for group
 * @h, packed into its row of sp->packed: its places, then of each
 * member's slot its table and the blocks of @h's ranks, a piece per run
 * (the places alone where a member did not fill its slot). Returns how
 * many pieces, or 0 where the payloads do not vary. The receiver spreads
 * them back (plane_unpack). */
static size_t plane_packed(zcopy_span_t *sp, int h)
{
    const int g = sp->group[sp->rank], m = zcopy_span_group_size(sp, g);
    const size_t head = zcopy_coll_vpack_min(sp->nranks);
    zcopy_ucx_iov_t *iov = plane_packed_row(sp, h);
    size_t n = 0;

    if (!sp->carried.varies)
        return 0;
    iov[n++] = (zcopy_ucx_iov_t){
        .buf = sp->area + zcopy_span_group_base(sp, g),
        .len = plane_places_bytes(sp, g) };
    if (!plane_all_filled(sp, g))
        return n;
    for (int i = 0; i < m; i++) {
        uint8_t *payload =
            (uint8_t *)zcopy_span_payload_of(sp, zcopy_span_member(sp, g, i));

        iov[n++] = (zcopy_ucx_iov_t){ .buf = payload, .len = head };
        for (int k = 0, first, last; k < zcopy_span_group_size(sp, h);) {
            size_t lo, hi;

            k = plane_run(sp, h, k, &first, &last);
            lo = plane_offset(payload, first);
            hi = plane_offset(payload, last + 1);
            if (hi > lo)
                iov[n++] = (zcopy_ucx_iov_t){ .buf = payload + lo,
                                              .len = hi - lo };
        }
    }
    return n;
}

/* Leader: where each member of group @h begins in its packed part (its
 * table, then this group's runs of blocks) and where the last ends, into
 * sp->unpack_at; false where a table would lie past the part's @room or
 * says what no packed payload says (runs out of order, or past what the
 * member filled). Tables from zcopy_coll_vpack always pass. */
static bool plane_unpack_places(const zcopy_span_t *sp, int h,
                                const uint8_t *packed, size_t room)
{
    const int me = sp->group[sp->rank];
    const size_t head = zcopy_coll_vpack_min(sp->nranks);
    size_t at = 0;

    for (int i = 0; i < zcopy_span_group_size(sp, h); i++) {
        const size_t filled =
            zcopy_span_desc(sp, zcopy_span_member(sp, h, i))->carried;
        size_t end = head;

        sp->unpack_at[i] = at;
        if (at + head > room)
            return false;
        for (int k = 0, first, last; k < zcopy_span_group_size(sp, me);) {
            size_t lo, hi;

            k = plane_run(sp, me, k, &first, &last);
            lo = plane_offset(packed + sp->unpack_at[i], first);
            hi = plane_offset(packed + sp->unpack_at[i], last + 1);
            if (lo < end || hi < lo || hi > filled)
                return false;
            at += hi - lo;
            end = hi;
        }
        at += head;
    }
    sp->unpack_at[zcopy_span_group_size(sp, h)] = at;
    return at <= room;
}

/* Leader: spreads group @h's packed part (plane_packed), which landed at
 * the start of its payloads in the area, to the members' slots, last
 * piece first: with runs in order and within what each member filled
 * (plane_unpack_places), every piece lands at or above where it came, and
 * above every piece not yet moved; a member's table moves last, once its
 * runs, found through it, have. A part that came as places alone is left
 * as it is: the call does not ride. False where the part cannot be taken
 * apart. */
static bool plane_unpack(const zcopy_span_t *sp, int h)
{
    const int me = sp->group[sp->rank], m = zcopy_span_group_size(sp, h);
    const size_t head = zcopy_coll_vpack_min(sp->nranks);
    const uint8_t *packed = sp->area + zcopy_span_group_base(sp, h) +
                            plane_places_bytes(sp, h);
    const size_t room = (size_t)m * zcopy_span_slot(sp->carried.len);

    if (!plane_all_filled(sp, h))
        return true;
    /* Never from zcopy_coll_vpack's tables. Every rank decides from the
     * places alone that the call rides, so this group's ranks are told
     * the round failed rather than read what is left in the slots. */
    if (!plane_unpack_places(sp, h, packed, room))
        return false;
    for (int i = m - 1; i >= 0; i--) {
        uint8_t *slot =
            (uint8_t *)zcopy_span_payload_of(sp, zcopy_span_member(sp, h, i));
        const uint8_t *from = packed + sp->unpack_at[i];
        size_t at = sp->unpack_at[i + 1] - sp->unpack_at[i];

        for (int k = zcopy_span_group_size(sp, me) - 1, first, last; k >= 0;) {
            size_t lo, len;

            k = plane_run_back(sp, me, k, &first, &last);
            lo = plane_offset(from, first);
            len = plane_offset(from, last + 1) - lo;
            at -= len;
            if (len > 0)
                memmove(slot + lo, from + at, len);
        }
        memmove(slot, from, head);
    }
    return true;
}

/* Leader: every other group's packed part of this arrival, once it has
 * landed; false where one could not be taken (plane_unpack). */
static bool plane_unpack_all(const zcopy_span_t *sp)
{
    bool ok = true;

    for (int h = 0; h < sp->ngroups; h++)
        if (h != sp->group[sp->rank])
            ok &= plane_unpack(sp, h);
    return ok;
}

/* Leader: posts the exchange with the other groups' leaders, counted in
 * @comp; false when a message could not be posted. An arrival whose
 * payloads are blocks sends each group only its ranks' blocks
 * (plane_blocks): n / h times fewer payload bytes than the whole part to
 * a group of h of the n ranks; one whose payloads only a root reads sends
 * the other groups its places (plane_places_only). A group with a rank
 * that declined sends its places alone (plane_buffers), which fill the
 * first piece of the receive. */
static bool plane_exchange_post(zcopy_comm_t *zc, zcopy_span_t *sp,
                                bool arrival, uint64_t round,
                                zcopy_ucx_comp_t *comp)
{
    const int me = sp->group[sp->rank];
    const bool declined = sp->sync_out & PLANE_DECLINED;
    zcopy_ucx_iov_t *iov;
    bool ok = true;
    uint8_t *buf;
    size_t len, whole, places, n, packed;

    /* Everything is posted even after a failure: a leader left without
     * its message would wait for it forever. */
    for (int h = 0; h < sp->ngroups; h++) {
        if (h == me)
            continue;
        iov = plane_pieces(sp, h, false);
        n = arrival ? plane_blocks(sp, h, me, iov) : 0;
        plane_buffers(sp, arrival, h, &buf, &len);
        ok &= (n > 0 ? zcopy_ucx_tag_recvv(iov, n, plane_tag(sp, me, h, round),
                                           comp)
                     : zcopy_ucx_tag_recv(buf, len, plane_tag(sp, me, h, round),
                                          comp)) == ZCOPY_SUCCESS;
    }
    plane_buffers(sp, arrival, me, &buf, &whole);
    places = plane_places_bytes(sp, me);
    for (int h = 0; h < sp->ngroups; h++) {
        const bool places_only = arrival && plane_places_only(sp, h);
        bool sent;

        if (h == me)
            continue;
        iov = plane_pieces(sp, h, true);
        n = arrival && !declined ? plane_blocks(sp, me, h, iov) : 0;
        packed = arrival && !declined ? plane_packed(sp, h) : 0;
        if (n == 0 && packed > 0) {
            iov = plane_packed_row(sp, h);
            n = packed;
        } else if (n == 0 && arrival && !declined && !places_only &&
                   sp->own_payload != NULL) {
            iov = sp->own_part;
            n = 2;
        }
        len = n > 0 ? zcopy_ucx_iov_bytes(iov, n)
                    : places_only ? places : whole;
        sent = (n > 0 ? zcopy_ucx_tag_sendv(sp->eps[plane_leader_of(sp, h)],
                                            iov, n,
                                            plane_tag(sp, h, me, round), comp)
                      : zcopy_ucx_tag_send(sp->eps[plane_leader_of(sp, h)],
                                           buf, len,
                                           plane_tag(sp, h, me, round),
                                           comp)) == ZCOPY_SUCCESS;
        if (sent)
            plane_count(zc, 1, len);
        ok &= sent;
    }
    return ok;
}

/* Leader: says that its messages of a round between servers failed. */
static void plane_log_failure(const zcopy_span_t *sp)
{
    zcopy_log(ZCOPY_LOG_ERROR, "coll", "rank %d: control messages between "
              "servers failed: %s", sp->rank, zcopy_error_detail());
}

/* Leader: waits for what plane_exchange_post() posted in @comp, whatever
 * failed (the buffers must outlive the messages; without a worker,
 * finalized under us, nothing completes); false when anything failed. */
static bool plane_exchange_wait(const zcopy_span_t *sp, bool posted,
                                zcopy_ucx_comp_t *comp, zcopy_wait_t *w)
{
    const int next = plane_leader_of(sp, (sp->group[sp->rank] + 1) %
                                             sp->ngroups);

    while (!zcopy_ucx_test(comp))
        zcopy_wait_relax_polled(w, next);
    if (!posted || comp->failure != 0 || comp->pending != 0) {
        plane_log_failure(sp);
        return false;
    }
    return true;
}

/* Leader: the exchange with the other groups' leaders, whole; false when a
 * message failed. */
static bool plane_exchange(zcopy_comm_t *zc, zcopy_span_t *sp, bool arrival,
                           uint64_t round, zcopy_wait_t *w)
{
    zcopy_ucx_comp_t comp = ZCOPY_UCX_COMP_INIT;
    const bool posted = plane_exchange_post(zc, sp, arrival, round, &comp);

    return plane_exchange_wait(sp, posted, &comp, w);
}

/* Leader: finishes the exchange of an arrival its group settled alone
 * (plane_round), if one is in flight; false when it failed. Before the
 * next round posts its receives (they reuse sp->pieces), so that the last
 * ones of the settled arrival land before its area is reused, two
 * arrivals on. A message that could not be posted failed the settled
 * round already: only what completes badly counts here. */
static bool plane_settle(zcopy_span_t *sp, zcopy_wait_t *w)
{
    bool ok;

    if (!sp->deferring)
        return true;
    ok = plane_exchange_wait(sp, true, &sp->deferred, w);
    sp->deferring = false;
    sp->deferred = (zcopy_ucx_comp_t)ZCOPY_UCX_COMP_INIT;
    return ok;
}

void zcopy_span_plane_drain(zcopy_span_t *sp)
{
    if (!sp->deferring)
        return;
    /* UCX's progress alone: this runs inside MPI_Comm_free or at the start
     * of MPI_Finalize, maybe from Open MPI's progress loop (a request's
     * completion that frees its communicator), where running that loop
     * again, or anything that takes a lock the caller holds, could
     * deadlock. The messages need nothing else. */
    if (zcopy_ucx_wait(&sp->deferred) != ZCOPY_SUCCESS)
        plane_log_failure(sp);
    sp->deferring = false;
    sp->deferred = (zcopy_ucx_comp_t)ZCOPY_UCX_COMP_INIT;
}

/* Whether an arrival that a leader's group reported with @any is decided
 * by the group alone: one of its ranks declined, so every rank falls
 * back. Then the leader sends its part and lets its members go
 * without waiting for the other groups' parts, which it receives at its
 * next round: a rank whose buffers are not activated pays a stock call
 * and a message, not a round trip between servers before it. Not where
 * rounds go in steps, in which leaders forward each other's parts. */
static bool plane_settles(const zcopy_span_t *sp, unsigned any)
{
    return (any & PLANE_DECLINED) && sp->ngroups > 1 && !plane_disseminates(sp);
}

/* Leader: one step of a round passed in steps: @out to the leader of
 * group @to, @in from the leader of group @from, both posted whatever
 * failed before (a leader left without its message would wait for it
 * forever); false when either failed. Each step of a round has a sender
 * of its own (its distance), so the tags (round, sender) tell steps
 * apart. */
static bool plane_step(zcopy_comm_t *zc, zcopy_span_t *sp, uint64_t round,
                       int to, const zcopy_ucx_iov_t *out, size_t nout,
                       int from, const zcopy_ucx_iov_t *in, size_t nin,
                       zcopy_wait_t *w)
{
    const int me = sp->group[sp->rank];
    zcopy_ucx_comp_t comp = ZCOPY_UCX_COMP_INIT;
    const size_t bytes = zcopy_ucx_iov_bytes(out, nout);
    bool ok, sent;

    ok = zcopy_ucx_tag_recvv(in, nin, plane_tag(sp, me, from, round),
                             &comp) == ZCOPY_SUCCESS;
    sent = zcopy_ucx_tag_sendv(sp->eps[plane_leader_of(sp, to)], out, nout,
                               plane_tag(sp, to, me, round),
                               &comp) == ZCOPY_SUCCESS;
    if (sent)
        plane_count(zc, 1, bytes);
    while (!zcopy_ucx_test(&comp))
        zcopy_wait_relax_polled(w, plane_leader_of(sp, from));
    return ok && sent && comp.failure == 0 && comp.pending == 0;
}

/* Leader: a sync's reports, or-ed over every group, in ceil(log2 S) steps:
 * at the step of distance d this leader sends what it has or-ed so far to
 * the leader d groups on and or-s in what the leader d groups back sends.
 * After the step of distance d it holds the reports of the 2d groups up
 * to itself, so after the last every report; or-ing one twice (S no power
 * of two) changes nothing. False when a step failed here; a failed step
 * puts ZCOPY_SYNC_BROKEN into what goes downstream, so the leaders that
 * would miss reports through it learn that the sync broke. */
static bool plane_disseminate(zcopy_comm_t *zc, zcopy_span_t *sp,
                              uint64_t round, unsigned *any, zcopy_wait_t *w)
{
    const int me = sp->group[sp->rank], ngroups = sp->ngroups;
    bool ok = true;

    for (int d = 1; d < ngroups; d *= 2) {
        uint32_t out = *any | (ok ? 0 : ZCOPY_SYNC_BROKEN), in = 0;
        const zcopy_ucx_iov_t out_iov = { &out, sizeof(out) };
        const zcopy_ucx_iov_t in_iov = { &in, sizeof(in) };

        ok &= plane_step(zc, sp, round, (me + d) % ngroups, &out_iov, 1,
                         (me - d + ngroups) % ngroups, &in_iov, 1, w);
        *any |= in;
    }
    return ok;
}

/* Leader: the parts of groups first, first + 1, ... (@count of them, mod
 * S) of the current arrival's area, as at most two pieces: the parts lie
 * in group order, so a range that wraps past the last group is two. */
static size_t plane_parts(const zcopy_span_t *sp, int first, int count,
                          zcopy_ucx_iov_t iov[2])
{
    const int ngroups = sp->ngroups, last = first + count - 1;
    const int end = last < ngroups ? last : ngroups - 1;
    size_t n = 0;

    iov[n++] = (zcopy_ucx_iov_t){
        .buf = sp->area + zcopy_span_group_base(sp, first),
        .len = zcopy_span_group_base(sp, end) +
               zcopy_span_group_bytes(sp, end) -
               zcopy_span_group_base(sp, first) };
    if (last >= ngroups)
        iov[n++] = (zcopy_ucx_iov_t){
            .buf = sp->area,
            .len = zcopy_span_group_base(sp, last - ngroups) +
                   zcopy_span_group_bytes(sp, last - ngroups) };
    return n;
}

/* Leader: an arrival's parts gathered from every group in ceil(log2 S)
 * steps (Bruck's allgather): before the step of distance d this leader
 * holds the parts of groups me .. me + d - 1; it sends the first
 * min(d, S - d) of them to the leader d groups back and receives as many
 * from the leader d groups on, the parts that follow its own. The same
 * bytes as one message to every other leader, in log2 S messages. Parts
 * land in place in the area, whole (a declined group's payload slots
 * travel too: the call falls back and nobody reads them). Each message
 * starts with a word that says whether its parts are whole: a leader that
 * missed some forwards what it has and says so, and every leader
 * downstream then knows its parts are not all this round's. */
static bool plane_gather(zcopy_comm_t *zc, zcopy_span_t *sp, uint64_t round,
                         zcopy_wait_t *w)
{
    const int me = sp->group[sp->rank], ngroups = sp->ngroups;
    bool ok = true;

    for (int d = 1; d < ngroups; d *= 2) {
        const int count = d < ngroups - d ? d : ngroups - d;
        const int to = (me - d + ngroups) % ngroups, from = (me + d) % ngroups;
        uint32_t broken_out = !ok, broken_in = 0;
        zcopy_ucx_iov_t out[3] = { { &broken_out, sizeof(broken_out) } };
        zcopy_ucx_iov_t in[3] = { { &broken_in, sizeof(broken_in) } };
        const size_t nout = 1 + plane_parts(sp, me, count, out + 1);
        const size_t nin = 1 + plane_parts(sp, from, count, in + 1);

        ok &= plane_step(zc, sp, round, to, out, nout, from, in, nin, w);
        ok &= broken_in == 0;
    }
    return ok;
}

/* What a round passes. */
typedef enum {
    PLANE_ARRIVAL,                /* every rank's arrival, to every rank */
    PLANE_SYNC,                   /* every rank's report, or-ed */
    PLANE_GROUP_SYNC              /* the reports of this rank's group alone:
                                     no message between servers */
} plane_round_kind_t;

/* One round: this rank enters it with @flags; returns the round's flags
 * (a sync's reports, or-ed), with ZCOPY_SYNC_BROKEN when the leaders'
 * messages failed. */
static unsigned plane_round(zcopy_comm_t *zc, zcopy_span_t *sp,
                            plane_round_kind_t kind, unsigned flags)
{
    const bool arrival = kind == PLANE_ARRIVAL;
    const uint64_t round = ++sp->rounds;
    const int g = sp->group[sp->rank];
    const int gsize = zcopy_span_group_size(sp, g);
    plane_line_t *top = plane_line(sp, 0);
    plane_line_t *own = plane_line(sp, 1 + sp->index[sp->rank]);
    const char *what = arrival ? "the arrival of a collective between servers"
                               : "a step of a collective between servers";
    unsigned any = flags;
    bool settled_before;
    zcopy_wait_t w;

    zcopy_wait_init(&w, sp->yield, sp->rank, what, zc->calls);
    own->flags = flags;
    /* Release: the leader that sees the round sees the arrival too. */
    atomic_store_explicit(&own->round, round, memory_order_release);
    plane_count(zc, 1, arrival ? sizeof(zcopy_span_desc_t) : sizeof(flags));
    if (sp->rank != sp->leader) {
        while (atomic_load_explicit(&top->round, memory_order_acquire) < round)
            zcopy_wait_relax(&w, sp->leader);
        return top->flags | (top->failed ? ZCOPY_SYNC_BROKEN : 0);
    }
    settled_before = plane_settle(sp, &w);
    for (int i = 1; i < gsize; i++) {
        const plane_line_t *line = plane_line(sp, 1 + i);

        while (atomic_load_explicit(&line->round, memory_order_acquire) <
               round)
            zcopy_wait_relax(&w, sp->members[sp->group_start[g] + i]);
        any |= line->flags;
    }
    sp->sync_out = any;
    if (kind == PLANE_GROUP_SYNC) {
        top->failed = !settled_before;
    } else if (arrival && plane_settles(sp, any)) {
        const bool posted = plane_exchange_post(zc, sp, true, round,
                                                &sp->deferred);

        sp->deferring = true;
        top->failed = !settled_before || !posted;
        if (!posted)
            plane_log_failure(sp);
        any |= PLANE_SETTLED;
    } else if (sp->ngroups > 1 && plane_disseminates(sp)) {
        top->failed = !settled_before ||
                      (arrival ? !plane_gather(zc, sp, round, &w)
                               : !plane_disseminate(zc, sp, round, &any, &w));
        if (top->failed)
            plane_log_failure(sp);
    } else {
        top->failed = !settled_before ||
                      (sp->ngroups > 1 && !plane_exchange(zc, sp, arrival,
                                                          round, &w));
        for (int h = 0; h < sp->ngroups && !arrival; h++)
            any |= h == g ? 0 : sp->group_flags[h];
        if (arrival && sp->carried.varies && !top->failed &&
            !plane_unpack_all(sp)) {
            zcopy_log(ZCOPY_LOG_ERROR, "coll", "rank %d: a server's packed "
                      "payloads did not match their tables", sp->rank);
            top->failed = true;
        }
    }
    top->flags = any;
    /* Release: members that see the round see the received arrivals. */
    atomic_store_explicit(&top->round, round, memory_order_release);
    return any | (top->failed ? ZCOPY_SYNC_BROKEN : 0);
}

/* Whether this rank's payload can leave from its caller's buffer: it
 * leads a group of its own, so nobody reads the payload in the area, and
 * it sends its part itself, one message to each other leader (whole, or
 * the pieces each reads: plane_blocks), never forwarded by later steps
 * (which send from the area). Saves a copy of the payload per call; the
 * payload's bytes still count as its record's, whatever the layout. */
static bool plane_sends_from_source(const zcopy_span_t *sp)
{
    return zcopy_span_group_size(sp, sp->group[sp->rank]) == 1 &&
           !plane_disseminates(sp);
}

/* The part this lone leader sends: its place in the area, then @len
 * bytes at @src. A message shorter than the part's room in the area
 * (the payload's slot is rounded up to a line) fills its start. */
static void plane_send_from(zcopy_span_t *sp, const void *src, size_t len)
{
    sp->own_payload = src;
    sp->own_part[0] = (zcopy_ucx_iov_t){
        .buf = (void *)zcopy_span_desc(sp, sp->rank),
        .len = ZCOPY_SPAN_DESC_STRIDE };
    sp->own_part[1] = (zcopy_ucx_iov_t){ .buf = (void *)src, .len = len };
}

uint8_t *zcopy_span_payload_next(zcopy_span_t *sp,
                                 const zcopy_span_payload_t *pl)
{
    /* What the arrival sets again, alike: nothing reads the area of the
     * last arrival once its call has ended. */
    sp->area = plane_area(sp, sp->arrivals + 1);
    sp->carried = *pl;
    return (uint8_t *)zcopy_span_payload_of(sp, sp->rank);
}

zcopy_status_t zcopy_span_arrive(zcopy_comm_t *zc, zcopy_span_t *sp,
                                 const zcopy_span_desc_t *mine,
                                 const zcopy_span_payload_t *pl,
                                 const void *src, size_t len, bool src_stays)
{
    unsigned flags = 0, any;

    sp->area = plane_area(sp, ++sp->arrivals);
    sp->carried = *pl;
    memcpy((void *)zcopy_span_desc(sp, sp->rank), mine, sizeof(*mine));
    if (mine->args.reason != REASON_NONE)
        flags |= PLANE_DECLINED;
    sp->own_payload = NULL;
    if (pl->varies) /* written by the caller (zcopy_span_payload_next) */
        plane_count(zc, 0, mine->carried);
    if (len > 0 && pl->len > 0 && (pl->root < 0 || pl->root == sp->rank)) {
        len = len < pl->len ? len : pl->len;
        if (src_stays && plane_sends_from_source(sp))
            plane_send_from(sp, src, len);
        else
            memcpy((void *)zcopy_span_payload_of(sp, sp->rank), src, len);
        plane_count(zc, 0, len);
    }
    any = plane_round(zc, sp, PLANE_ARRIVAL, flags);
    sp->settled = any & PLANE_SETTLED;
    return any & ZCOPY_SYNC_BROKEN
               ? zcopy_error(ZCOPY_ERR_INTERNAL, "control messages between "
                             "servers failed")
               : ZCOPY_SUCCESS;
}

unsigned zcopy_span_plane_sync(zcopy_comm_t *zc, zcopy_span_t *sp,
                               unsigned flags)
{
    return plane_round(zc, sp, PLANE_SYNC, flags & ZCOPY_SYNC_MASK);
}

unsigned zcopy_span_plane_sync_group(zcopy_comm_t *zc, zcopy_span_t *sp,
                                     unsigned flags)
{
    return plane_round(zc, sp, PLANE_GROUP_SYNC, flags & ZCOPY_SYNC_MASK);
}
