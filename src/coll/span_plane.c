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
 *   then          two areas by parity of the arrival, each with a place
 *                 of ZCOPY_SPAN_DESC_STRIDE bytes for every rank of the
 *                 communicator, group after group (zcopy_span_t.pos)
 * A member writes its arrival into its place and enters the round; the
 * leader waits for every member, sends its group's places (or, at a sync,
 * the group's or-ed report) to every other group's leader in one tagged
 * UCX message each, receives theirs straight into their places, and
 * completes the round; members wait for that. So a rank that is not a
 * leader sends one record per round whatever the number of servers, and
 * a leader one message per other server.
 *
 * Why the areas can be reused by parity: a member writes arrival k only
 * after round k - 1 completed, which needed every member of its group to
 * have entered k - 1, so every reader of arrival k - 2 is done with it;
 * the leader receives into the areas of k only after its members entered
 * k, and a remote leader can send k + 2 only after this group's leader
 * sent k + 1, i.e. after its members left k. Messages of later rounds
 * that arrive early wait inside UCX, matched by their tag:
 *   bits 63..44  the receiving leader's plane id (unique in its process)
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

#define PLANE_ID_BITS 20
#define PLANE_GROUP_BITS 16
#define PLANE_ROUND_BITS 28
#define PLANE_MAX_GROUPS (1 << PLANE_GROUP_BITS)

typedef struct {
    _Atomic uint64_t round;       /* the last round completed (leader) or
                                     entered (member) */
    uint32_t flags;               /* a sync's report */
    uint32_t failed;              /* leader: messages between servers failed */
    uint8_t pad[ZCOPY_CACHE_LINE - 16];
} plane_line_t;
static_assert(sizeof(plane_line_t) == ZCOPY_CACHE_LINE, "one line each");

uint32_t zcopy_span_plane_new_id(void)
{
    /* Process-wide: a tag must tell this process's planes apart, whatever
     * communicator they belong to (one UCX worker serves them all). Ids
     * come back after 2^20 planes, long after the first is gone. */
    static _Atomic uint32_t next;

    return atomic_fetch_add_explicit(&next, 1, memory_order_relaxed) &
           ((1u << PLANE_ID_BITS) - 1);
}

static plane_line_t *plane_line(const zcopy_span_t *sp, int line)
{
    return (plane_line_t *)(sp->plane + (size_t)line * ZCOPY_CACHE_LINE);
}

static size_t plane_lines(const zcopy_span_t *sp)
{
    return 1 + (size_t)zcopy_span_group_size(sp, sp->group[sp->rank]);
}

static uint8_t *plane_area(const zcopy_span_t *sp, uint64_t arrival)
{
    return sp->plane + plane_lines(sp) * ZCOPY_CACHE_LINE +
           (arrival & 1) * (size_t)sp->nranks * ZCOPY_SPAN_DESC_STRIDE;
}

static uint64_t plane_tag(const zcopy_span_t *sp, int to_group, int from_group,
                          uint64_t round)
{
    return (uint64_t)sp->group_tag[to_group]
               << (PLANE_GROUP_BITS + PLANE_ROUND_BITS) |
           (uint64_t)from_group << PLANE_ROUND_BITS |
           (round & ((UINT64_C(1) << PLANE_ROUND_BITS) - 1));
}

/* --- set-up ---------------------------------------------------------------- */

typedef struct {
    int32_t fd;                   /* the leader's segment, for its members */
    int32_t status;
    uint64_t ino;
} plane_offer_t;

zcopy_status_t zcopy_span_plane_create(zcopy_comm_t *zc, zcopy_span_t *sp,
                                       const zcopy_span_hello_t *all)
{
    const int g = sp->group[sp->rank];
    const int gsize = zcopy_span_group_size(sp, g);
    const zcopy_cpus_t **cpus;
    plane_offer_t mine = { .fd = -1 }, *offers;
    zcopy_status_t st = ZCOPY_SUCCESS;
    int fd = -1;
    void *p;

    sp->plane_fd = -1;
    sp->leader = sp->members[sp->group_start[g]];
    sp->pos = calloc((size_t)sp->nranks, sizeof(int));
    sp->group_tag = calloc((size_t)sp->ngroups, sizeof(uint32_t));
    sp->group_flags = calloc((size_t)sp->ngroups, sizeof(uint32_t));
    offers = calloc((size_t)sp->nranks, sizeof(*offers));
    cpus = calloc((size_t)gsize, sizeof(*cpus));
    if (!sp->pos || !sp->group_tag || !sp->group_flags || !offers || !cpus)
        st = zcopy_error(ZCOPY_ERR_NOMEM, "control plane: out of memory");
    else if (sp->ngroups > PLANE_MAX_GROUPS)
        st = zcopy_error(ZCOPY_ERR_UNSUPPORTED, "more than %d servers",
                         PLANE_MAX_GROUPS);
    if (st == ZCOPY_SUCCESS) {
        for (int r = 0; r < sp->nranks; r++)
            sp->pos[r] = sp->group_start[sp->group[r]] + sp->index[r];
        for (int h = 0; h < sp->ngroups; h++)
            sp->group_tag[h] = all[sp->members[sp->group_start[h]]].plane_id;
        for (int i = 0; i < gsize; i++)
            cpus[i] = &all[sp->members[sp->group_start[g] + i]].cpus;
        sp->yield = zcopy_wait_yields(cpus, gsize, sp->index[sp->rank]);
        sp->plane_size = plane_lines(sp) * ZCOPY_CACHE_LINE +
                         2 * (size_t)sp->nranks * ZCOPY_SPAN_DESC_STRIDE;
    }
    if (st == ZCOPY_SUCCESS && sp->rank == sp->leader) {
        st = zcopy_memfd_segment("zcopy-span-plane", sp->plane_size,
                                 &sp->plane_fd, &mine.ino);
        mine.fd = sp->plane_fd;
        if (st == ZCOPY_SUCCESS) /* to the members, if over sockets */
            zcopy_ipc_fdpass_offer(sp->plane_fd, mine.ino);
    }
    mine.status = st;
    /* Every rank takes part, whatever failed: the others wait for it. */
    if (zc->ops.allgather(&mine, offers, sizeof(mine), zc->ops.ctx) !=
        MPI_SUCCESS) {
        st = zcopy_error(ZCOPY_ERR_INTERNAL, "control plane: exchange failed");
        goto out;
    }
    if (st != ZCOPY_SUCCESS)
        goto out;
    if (offers[sp->leader].status != ZCOPY_SUCCESS) {
        st = zcopy_error(ZCOPY_ERR_INTERNAL, "control plane: the leader, rank "
                         "%d, could not make the segment", sp->leader);
        goto out;
    }
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

void zcopy_span_plane_destroy(zcopy_span_t *sp)
{
    if (sp->plane_fd >= 0) {
        zcopy_ipc_fdpass_withdraw(sp->plane_fd);
        close(sp->plane_fd);
        sp->plane_fd = -1;
    }
    if (sp->plane != NULL)
        munmap(sp->plane, sp->plane_size);
    sp->plane = NULL;
    free(sp->pos);
    free(sp->group_tag);
    free(sp->group_flags);
    sp->pos = NULL;
    sp->group_tag = NULL;
    sp->group_flags = NULL;
}

/* --- rounds ------------------------------------------------------------------ */

static void plane_count(zcopy_comm_t *zc, uint64_t msgs, uint64_t bytes)
{
    zc->stats.ctl_msgs += msgs;
    zc->stats.ctl_bytes += bytes;
}

/* Leader: what its group sends in this round, and where each other
 * group's message lands. */
static void plane_buffers(zcopy_span_t *sp, bool arrival, int h,
                          uint8_t **buf, size_t *len)
{
    if (!arrival) {
        *buf = (uint8_t *)(h == sp->group[sp->rank] ? &sp->sync_out
                                                    : &sp->group_flags[h]);
        *len = sizeof(uint32_t);
        return;
    }
    *buf = (uint8_t *)sp->area +
           (size_t)sp->group_start[h] * ZCOPY_SPAN_DESC_STRIDE;
    *len = (size_t)zcopy_span_group_size(sp, h) * ZCOPY_SPAN_DESC_STRIDE;
}

/* Leader: the exchange with the other groups' leaders; false when a
 * message failed. */
static bool plane_exchange(zcopy_comm_t *zc, zcopy_span_t *sp, bool arrival,
                           uint64_t round, zcopy_wait_t *w)
{
    const int me = sp->group[sp->rank];
    zcopy_ucx_comp_t comp = ZCOPY_UCX_COMP_INIT;
    bool ok = true;
    uint8_t *buf;
    size_t len;

    for (int h = 0; h < sp->ngroups && ok; h++) {
        if (h == me)
            continue;
        plane_buffers(sp, arrival, h, &buf, &len);
        ok = zcopy_ucx_tag_recv(buf, len, plane_tag(sp, me, h, round),
                                &comp) == ZCOPY_SUCCESS;
    }
    plane_buffers(sp, arrival, me, &buf, &len);
    for (int h = 0; h < sp->ngroups && ok; h++) {
        const int to = sp->members[sp->group_start[h]];

        if (h == me)
            continue;
        ok = zcopy_ucx_tag_send(sp->eps[to], buf, len,
                                plane_tag(sp, h, me, round),
                                &comp) == ZCOPY_SUCCESS;
        plane_count(zc, 1, len);
    }
    /* Whatever failed, what was posted completes before the buffers go. */
    while (!zcopy_ucx_test(&comp))
        zcopy_wait_relax(w, sp->members[sp->group_start[(me + 1) %
                                                        sp->ngroups]]);
    if (!ok || comp.failure != 0) {
        zcopy_log(ZCOPY_LOG_ERROR, "coll", "rank %d: control messages between "
                  "servers failed: %s", sp->rank, zcopy_error_detail());
        return false;
    }
    return true;
}

/* One round: this rank enters it with @flags; returns the round's flags
 * (a sync's reports, or-ed), with ZCOPY_CTL_SYNC_BROKEN when the leaders'
 * messages failed. */
static unsigned plane_round(zcopy_comm_t *zc, zcopy_span_t *sp, bool arrival,
                            unsigned flags)
{
    const uint64_t round = ++sp->rounds;
    const int g = sp->group[sp->rank];
    const int gsize = zcopy_span_group_size(sp, g);
    plane_line_t *top = plane_line(sp, 0);
    plane_line_t *own = plane_line(sp, 1 + sp->index[sp->rank]);
    const char *what = arrival ? "the arrival of a collective between servers"
                               : "a step of a collective between servers";
    unsigned any = flags;
    zcopy_wait_t w;

    zcopy_wait_init(&w, sp->yield, sp->rank, what, zc->calls);
    own->flags = flags;
    /* Release: the leader that sees the round sees the arrival too. */
    atomic_store_explicit(&own->round, round, memory_order_release);
    plane_count(zc, 1, arrival ? sizeof(zcopy_span_desc_t) : sizeof(flags));
    if (sp->rank != sp->leader) {
        while (atomic_load_explicit(&top->round, memory_order_acquire) < round)
            zcopy_wait_relax(&w, sp->leader);
        return top->flags | (top->failed ? ZCOPY_CTL_SYNC_BROKEN : 0);
    }
    for (int i = 1; i < gsize; i++) {
        const plane_line_t *line = plane_line(sp, 1 + i);

        while (atomic_load_explicit(&line->round, memory_order_acquire) <
               round)
            zcopy_wait_relax(&w, sp->members[sp->group_start[g] + i]);
        any |= line->flags;
    }
    sp->sync_out = any;
    top->failed = sp->ngroups > 1 && !plane_exchange(zc, sp, arrival, round,
                                                     &w);
    for (int h = 0; h < sp->ngroups && !arrival; h++)
        any |= h == g ? 0 : sp->group_flags[h];
    top->flags = any;
    /* Release: members that see the round see the received arrivals. */
    atomic_store_explicit(&top->round, round, memory_order_release);
    return any | (top->failed ? ZCOPY_CTL_SYNC_BROKEN : 0);
}

zcopy_status_t zcopy_span_arrive(zcopy_comm_t *zc, zcopy_span_t *sp,
                                 const zcopy_span_desc_t *mine)
{
    uint8_t *area = plane_area(sp, ++sp->arrivals);

    memcpy(area + (size_t)sp->pos[sp->rank] * ZCOPY_SPAN_DESC_STRIDE, mine,
           sizeof(*mine));
    sp->area = area;
    return plane_round(zc, sp, true, 0) & ZCOPY_CTL_SYNC_BROKEN
               ? zcopy_error(ZCOPY_ERR_INTERNAL, "control messages between "
                             "servers failed")
               : ZCOPY_SUCCESS;
}

unsigned zcopy_span_plane_sync(zcopy_comm_t *zc, zcopy_span_t *sp,
                               unsigned flags)
{
    return plane_round(zc, sp, false, flags & ZCOPY_CTL_SYNC_MASK);
}
