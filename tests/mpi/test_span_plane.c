/*
 * The control plane of a communicator that spans servers scales with the
 * servers, not with the ranks (issue 13): per collective, a rank that does
 * not lead its server sends one record to its server's shared segment,
 * however many servers there are; a leader sends that record and one
 * message to each other server's leader, of its own server's records (with
 * their payloads, for a collective small enough to ride with its arrival;
 * of alltoall and scatter payloads, only the blocks of that server's
 * ranks; of gather and reduce payloads, only to the root's server).
 *
 * Run on virtual servers (coll_zcopy_virtual_servers=V: consecutive blocks
 * of ranks, the first of each block its leader) or with
 * coll_zcopy_transport=ucx (every rank a server and a leader). Counted
 * with the zcopy statistics: control messages and bytes this rank sent.
 */
#define _POSIX_C_SOURCE 200809L /* nanosleep */
#include "testutil.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CALLS 50
/* The largest record a rank may send per round in these calls: one
 * arrival, with 8 bytes of payload for the allreduce. An arrival names
 * the blocks under its buffers without their keys (two cache lines in
 * all), so it stays this small whatever the keys of the transport. */
#define RECORD_MAX 128
/* What a leader's message to another server carries per rank of its own
 * at most: the rank's place (a record's cache lines) and payload slot. */
#define SHARE_MAX 256

typedef struct {
    unsigned long long msgs, bytes;
} sent_t;

typedef struct {
    int nranks, per, ngroups;
} layout_t;

static layout_t layout_of(int nranks)
{
    int v = zt_cvar_int("coll_zcopy_virtual_servers", 1);
    const int ucx = zt_cvar_int("coll_zcopy_transport", 0);
    layout_t l = { .nranks = nranks };

    /* transport=ucx (the enum's value 2, "ucx"): one rank per group. */
    if (ucx == 2 || v <= 1 || v > nranks)
        v = nranks;
    l.per = (nranks + v - 1) / v;
    l.ngroups = (nranks + l.per - 1) / l.per;
    return l;
}

static int group_size(const layout_t *l, int r)
{
    int first = r / l->per * l->per;

    return first + l->per <= l->nranks ? l->per : l->nranks - first;
}

/* Whether leaders pass rounds in steps: from
 * coll_zcopy_span_dissemination_min servers on (0: never). */
static bool in_steps(const layout_t *l)
{
    const int from = zt_cvar_int("coll_zcopy_span_dissemination_min", 64);

    return from != 0 && l->ngroups >= from;
}

/* Messages a leader sends to other leaders per round: one to each, or one
 * per step of ceil(log2 servers) (an arrival's gather, a sync's
 * dissemination). */
static int leader_steps(const layout_t *l)
{
    int steps = 0;

    if (!in_steps(l))
        return l->ngroups - 1;
    for (int d = 1; d < l->ngroups; d *= 2)
        steps++;
    return steps;
}

/* What each rank sent on @comm during @calls calls of @run, gathered on
 * @peers (a communicator whose own counters do not matter). */
static void measure(MPI_Comm comm, MPI_Comm peers, void (*run)(MPI_Comm),
                    sent_t *all)
{
    MPIX_Zcopy_stats s0, s1;
    sent_t mine;

    s0 = zt_stats(comm);
    for (int i = 0; i < CALLS; i++)
        run(comm);
    s1 = zt_stats(comm);
    ZT_CHECK(s1.zcopy_calls - s0.zcopy_calls +
                     s1.fallback_calls - s0.fallback_calls == CALLS,
             "%llu zero-copy calls and %llu fallbacks, expected %d in all",
             (unsigned long long)(s1.zcopy_calls - s0.zcopy_calls),
             (unsigned long long)(s1.fallback_calls - s0.fallback_calls),
             CALLS);
    mine.msgs = s1.ctl_msgs - s0.ctl_msgs;
    mine.bytes = s1.ctl_bytes - s0.ctl_bytes;
    MPI_Allgather(&mine, 2, MPI_UNSIGNED_LONG_LONG, all, 2,
                  MPI_UNSIGNED_LONG_LONG, peers);
}

static void check(const layout_t *l, const sent_t *all, const char *what)
{
    unsigned long long record = 0, record_max = RECORD_MAX;

    /* Every rank's record is the same size: take a non-leader's, or a
     * leader's share when every rank leads. */
    for (int r = 0; r < l->nranks && record == 0; r++)
        if (r % l->per != 0)
            record = all[r].bytes / CALLS;
    if (record == 0) { /* checked below */
        record = all[0].bytes / CALLS / l->ngroups;
        record_max = SHARE_MAX;
    }
    ZT_CHECK(record > 0 && record <= record_max, "%s: a record of %llu "
             "bytes, expected 1 to %llu", what, record, record_max);
    for (int r = 0; r < l->nranks; r++) {
        const bool leader = r % l->per == 0;
        const unsigned long long others = (unsigned long long)l->ngroups - 1;
        const unsigned long long msgs =
            leader ? 1 + (unsigned long long)leader_steps(l) : 1;
        /* A leader's message to another server carries its server's
         * records: linear in the servers, never in all the ranks. */
        const unsigned long long most =
            record + (leader ? others * (unsigned long long)group_size(l, r) *
                                   SHARE_MAX
                             : 0);

        ZT_CHECK(all[r].msgs == CALLS * msgs, "%s: rank %d (%s) sent %llu "
                 "control messages in %d calls, expected %llu per call", what,
                 r, leader ? "a leader" : "not a leader", all[r].msgs, CALLS,
                 msgs);
        if (leader)
            ZT_CHECK(all[r].bytes <= CALLS * most &&
                         all[r].bytes >= CALLS * record,
                     "%s: leader rank %d sent %llu control bytes in %d calls, "
                     "expected %llu to %llu per call", what, r, all[r].bytes,
                     CALLS, record, most);
        else
            ZT_CHECK(all[r].bytes == CALLS * record, "%s: rank %d sent %llu "
                     "control bytes in %d calls, expected %llu per call (as "
                     "every rank that does not lead)", what, r, all[r].bytes,
                     CALLS, record);
    }
}

/* UCX endpoints this process has connected (MPI_T, a level bound to
 * nothing): a connection opens at its first transfer, so a rank holds
 * those to the peers it talks to, not one to every rank of the other
 * servers. */
static unsigned long long ucx_connections(void)
{
    unsigned long long value = 0;
    MPI_T_pvar_session session;
    MPI_T_pvar_handle handle;
    int index, count, provided;

    MPI_T_init_thread(MPI_THREAD_SINGLE, &provided);
    MPI_T_pvar_session_create(&session);
    if (ZT_CHECK(MPI_T_pvar_get_index("coll_zcopy_ucx_connections",
                                      MPI_T_PVAR_CLASS_LEVEL, &index) ==
                     MPI_SUCCESS, "no MPI_T variable "
                     "coll_zcopy_ucx_connections") &&
        ZT_CHECK(MPI_T_pvar_handle_alloc(session, index, NULL, &handle,
                                         &count) == MPI_SUCCESS && count == 1,
                 "coll_zcopy_ucx_connections: no handle")) {
        MPI_T_pvar_read(session, handle, &value);
        MPI_T_pvar_handle_free(session, &handle);
    }
    MPI_T_pvar_session_free(&session);
    MPI_T_finalize();
    return value;
}

/* The leaders a leader sends to in rounds, which it connects to at
 * set-up: every other one, or, passing rounds in steps, those d servers
 * back (gathers) and d servers on (disseminations), d = 1, 2, 4 ... */
static int leader_partners(const layout_t *l, int rank)
{
    const int me = rank / l->per, s = l->ngroups;
    int partners = 0;

    if (!in_steps(l))
        return s - 1;
    for (int h = 0; h < s; h++) {
        bool partner = false;

        for (int d = 1; d < s && h != me; d *= 2)
            partner |= h == (me - d + s) % s || h == (me + d) % s;
        partners += partner;
    }
    return partners;
}

/* After calls whose payloads rode the arrival: only the leaders sent
 * between servers, to the leaders they connected to at set-up. */
static void check_connections_inline(const layout_t *l, int rank)
{
    const bool leader = rank % l->per == 0;
    const unsigned long long expected =
        leader ? (unsigned long long)leader_partners(l, rank) : 0;
    const unsigned long long got = ucx_connections();

    ZT_CHECK(got == expected, "rank %d (%s) after small calls: %llu UCX "
             "connections, expected %llu", rank,
             leader ? "a leader" : "leads no server", got, expected);
}

/* After large allreduces, which read between servers: a rank connected to
 * the ranks it reads from, at most one per other server (the members that
 * match it), whatever the ranks of those servers. */
static void check_connections_read(const layout_t *l, int rank)
{
    const unsigned long long got = ucx_connections();

    ZT_CHECK(got >= 1 && got <= (unsigned long long)l->ngroups - 1,
             "rank %d after large allreduces: %llu UCX connections, "
             "expected 1 to %d (one per other server)", rank, got,
             l->ngroups - 1);
}

static void run_barrier(MPI_Comm comm)
{
    MPI_Barrier(comm);
}

static int32_t *tiny_in, *tiny_out;

static void run_tiny_allreduce(MPI_Comm comm)
{
    MPI_Allreduce(tiny_in, tiny_out, 2, MPI_INT32_T, MPI_SUM, comm);
}

static int32_t plain_in[2], plain_out[2];

/* An alltoall small enough to ride its arrival, BLOCK bytes per pair of
 * ranks: rank r reads only block r of each payload, so a leader's message
 * to another server carries its server's places (a record's cache lines
 * each) and, of each payload of its server, the blocks of that server's
 * ranks: never the whole payloads, which would be a factor of the number
 * of servers more. (Leaders that pass rounds in steps forward whole parts,
 * as the gather needs.) */
#define A2A_BLOCK 64
#define PLACE 128
static int32_t *a2a_in, *a2a_out;

static void run_small_alltoall(MPI_Comm comm)
{
    MPI_Alltoall(a2a_in, A2A_BLOCK / 4, MPI_INT32_T, a2a_out, A2A_BLOCK / 4,
                 MPI_INT32_T, comm);
}

/* The same for a scatter from rank 0, whose payload is the root's alone:
 * its leader sends each server its places and the blocks of that
 * server's ranks; every other leader its places. */
static void run_small_scatter(MPI_Comm comm)
{
    MPI_Scatter(a2a_in, A2A_BLOCK / 4, MPI_INT32_T, a2a_out, A2A_BLOCK / 4,
                MPI_INT32_T, 0, comm);
}

/* A gather of A2A_BLOCK bytes per rank, to the last rank and to rank 0
 * (a leader): only the root reads the payloads, so a leader
 * sends the root's server its places and its ranks' payloads, and every
 * other server its places alone. */
static int gather_root;

static void run_small_gather(MPI_Comm comm)
{
    MPI_Gather(a2a_in, A2A_BLOCK / 4, MPI_INT32_T, a2a_out, A2A_BLOCK / 4,
               MPI_INT32_T, gather_root, comm);
}

/* measure() on WORLD for a call whose payloads must ride the arrival,
 * in steps too, where check_blocks() counts messages only: a call that
 * fell back would pass that count. */
static void measure_inline(const layout_t *l, MPI_Comm peers,
                           void (*run)(MPI_Comm), sent_t *all)
{
    const MPIX_Zcopy_stats s0 = zt_stats(MPI_COMM_WORLD);
    MPIX_Zcopy_stats s1;

    measure(MPI_COMM_WORLD, peers, run, all);
    s1 = zt_stats(MPI_COMM_WORLD);
    ZT_CHECK(s1.inline_calls - s0.inline_calls == CALLS,
             "%d servers of %d: %llu of %d calls rode the arrival",
             l->ngroups, l->per,
             (unsigned long long)(s1.inline_calls - s0.inline_calls), CALLS);
}

/* A call that rode its arrival: one record per call from every rank, and
 * from a leader one message more per step. */
static void check_inline_msgs(const layout_t *l, const sent_t *all, int rank,
                              const char *what)
{
    const unsigned long long per_call =
        rank % l->per == 0 ? 1 + (unsigned long long)leader_steps(l) : 1;

    ZT_CHECK(all[rank].msgs == CALLS * per_call, "%s: rank %d sent %llu "
             "control messages in %d calls, expected %llu per call", what,
             rank, all[rank].msgs, CALLS, per_call);
}

/* @root: the scatter's, or -1 for the alltoall. */
static void check_blocks(const layout_t *l, const sent_t *all, int rank,
                         int root)
{
    /* The record of rank 1, which leads no server here and is no root. */
    const unsigned long long record = all[1].bytes / CALLS;
    const int me = rank / l->per;
    const unsigned long long mine = (unsigned long long)group_size(l, rank);
    const bool sends = root < 0 || root / l->per == me;
    /* Payloads this server sends: each rank's, or the root's. */
    const unsigned long long senders = root < 0 ? mine : sends;
    unsigned long long expected = record;

    if (root == rank) /* its record holds the payload, rank 1's does not */
        expected += (unsigned long long)l->nranks * A2A_BLOCK;
    for (int h = 0; h < l->ngroups; h++)
        if (h != me)
            expected += mine * PLACE +
                        senders * (unsigned long long)group_size(l, h * l->per) *
                            A2A_BLOCK;
    check_inline_msgs(l, all, rank, root < 0 ? "alltoall" : "scatter");
    if (rank % l->per == 0 && !in_steps(l))
        ZT_CHECK(all[rank].bytes == CALLS * expected,
                 "%s of %d bytes per rank: leader rank %d sent %llu control "
                 "bytes per call, expected %llu (its record, then to each "
                 "other server its places and the blocks of that server's "
                 "ranks)", root < 0 ? "alltoall" : "scatter", A2A_BLOCK,
                 rank, all[rank].bytes / CALLS, expected);
    for (int from = 0; from < (root < 0 ? l->nranks : 1); from++)
        for (int j = 0; j < A2A_BLOCK / 4; j++) {
            const int src = root < 0 ? from : root;
            const int32_t want = src * 10000 + rank * 100 + j;

            ZT_CHECK(a2a_out[from * (A2A_BLOCK / 4) + j] == want,
                     "%s: element %d from rank %d is %d, expected %d",
                     root < 0 ? "alltoall" : "scatter", j, src,
                     a2a_out[from * (A2A_BLOCK / 4) + j], want);
        }
}

static void check_gather(const layout_t *l, const sent_t *all, int rank)
{
    /* Every rank's record holds its payload: rank 1's, which leads no
     * server here. */
    const unsigned long long record = all[1].bytes / CALLS;
    const int me = rank / l->per, root_server = gather_root / l->per;
    const unsigned long long mine = (unsigned long long)group_size(l, rank);
    unsigned long long expected = record;

    for (int h = 0; h < l->ngroups; h++)
        if (h != me)
            expected += mine * PLACE + (h == root_server ? mine * A2A_BLOCK
                                                         : 0);
    check_inline_msgs(l, all, rank, "gather");
    if (rank % l->per == 0 && !in_steps(l))
        ZT_CHECK(all[rank].bytes == CALLS * expected,
                 "gather of %d bytes per rank to rank %d: leader rank %d "
                 "sent %llu control bytes per call, expected %llu (its "
                 "record, then its places and payloads to the root's "
                 "server, its places alone to the others)", A2A_BLOCK,
                 gather_root, rank, all[rank].bytes / CALLS, expected);
    for (int from = 0; from < l->nranks && rank == gather_root; from++)
        for (int j = 0; j < A2A_BLOCK / 4; j++)
            ZT_CHECK(a2a_out[from * (A2A_BLOCK / 4) + j] ==
                         from * 10000 + j,
                     "gather: element %d from rank %d is %d, expected %d", j,
                     from, a2a_out[from * (A2A_BLOCK / 4) + j],
                     from * 10000 + j);
}

static void run_fallback(MPI_Comm comm)
{
    MPI_Allreduce(plain_in, plain_out, 2, MPI_INT32_T, MPI_SUM, comm);
}

/* An alltoallv on plain memory falls back after the arrival like any
 * call: the displacements zero-copy would exchange are not (they went
 * through the previous component before the arrival, a message to every
 * other rank, until 2026-12-03). */
static int32_t *plain_a2a_in, *plain_a2a_out;
static int *a2av_counts, *a2av_displs;

static void run_fallback_alltoallv(MPI_Comm comm)
{
    MPI_Alltoallv(plain_a2a_in, a2av_counts, a2av_displs, MPI_INT32_T,
                  plain_a2a_out, a2av_counts, a2av_displs, MPI_INT32_T, comm);
}

/* A job that has set no memory range anywhere pays no spanning set-up and
 * no arrival round (SPEC section 4: no measurable cost): over IDLE_CALLS
 * allreduces, with a barrier every IDLE_BARRIER_EVERY, every call falls
 * back for "no rank had set a memory range" and not one control message
 * leaves the rank (the set-up agreement goes through the previous
 * component, now and then: coll.c, coll_idle). Then, after
 * MPIX_Comm_set_memory_range on the same communicator and an activation,
 * the very next call is zero-copy; or, with @wake_elsewhere, after the
 * process's first range is set and activated on MPI_COMM_SELF, the first
 * call after a barrier on the idle communicator is. */
#define IDLE_CALLS 200
#define IDLE_BARRIER_EVERY 10

static void check_idle(const layout_t *l, int rank, bool wake_elsewhere)
{
    const int calls = IDLE_CALLS + IDLE_CALLS / IDLE_BARRIER_EVERY;
    MPIX_Zcopy_stats s0, s1;
    int32_t in[2] = { rank, rank }, out[2];
    size_t used = 0;
    zt_arena_t arena;
    int32_t *ain, *aout;
    MPI_Comm idle;

    MPI_Comm_dup(MPI_COMM_WORLD, &idle);
    s0 = zt_stats(idle);
    for (int i = 0; i < IDLE_CALLS; i++) {
        out[0] = out[1] = -1;
        MPI_Allreduce(in, out, 2, MPI_INT32_T, MPI_SUM, idle);
        if (i % IDLE_BARRIER_EVERY == 0)
            MPI_Barrier(idle);
        ZT_CHECK(out[0] == l->nranks * (l->nranks - 1) / 2 &&
                     out[1] == out[0],
                 "idle allreduce %d: %d %d, expected %d", i, out[0], out[1],
                 l->nranks * (l->nranks - 1) / 2);
    }
    s1 = zt_stats(idle);
    ZT_CHECK(s1.fallback_calls - s0.fallback_calls == (uint64_t)calls &&
                 s1.zcopy_calls == s0.zcopy_calls,
             "idle: %llu fallbacks, %llu zero-copy in %d calls",
             (unsigned long long)(s1.fallback_calls - s0.fallback_calls),
             (unsigned long long)(s1.zcopy_calls - s0.zcopy_calls), calls);
    ZT_CHECK(strstr(s1.last_fallback_reason, "memory range") != NULL,
             "idle: fell back for \"%s\"", s1.last_fallback_reason);
    ZT_CHECK(s1.ctl_msgs == s0.ctl_msgs && s1.ctl_bytes == s0.ctl_bytes,
             "idle: %llu control messages (%llu bytes) sent in %d calls, "
             "expected none",
             (unsigned long long)(s1.ctl_msgs - s0.ctl_msgs),
             (unsigned long long)(s1.ctl_bytes - s0.ctl_bytes), calls);

    zt_arena_init(&arena, wake_elsewhere ? MPI_COMM_SELF : idle, 1 << 16);
    ain = zt_arena_alloc(&arena, &used, sizeof(in));
    aout = zt_arena_alloc(&arena, &used, sizeof(out));
    ain[0] = ain[1] = rank;
    if (wake_elsewhere)
        MPI_Barrier(idle);
    s0 = zt_stats(idle);
    MPI_Allreduce(ain, aout, 2, MPI_INT32_T, MPI_SUM, idle);
    s1 = zt_stats(idle);
    ZT_CHECK(s1.zcopy_calls == s0.zcopy_calls + 1, "the call after %s on "
             "an idle communicator was not zero-copy: %s",
             wake_elsewhere ? "a range set elsewhere and a barrier"
                            : "set_memory_range",
             s1.last_fallback_reason);
    ZT_CHECK(aout[0] == l->nranks * (l->nranks - 1) / 2, "allreduce after "
             "waking: %d, expected %d", aout[0],
             l->nranks * (l->nranks - 1) / 2);
    zt_arena_fini(&arena);
    MPI_Comm_free(&idle);
}

/* A process that has set a range (here on MPI_COMM_SELF, not activated
 * yet) is never idle: after many calls on another communicator that fall
 * back because no buffer is activated, the first call on memory it then
 * activates is zero-copy. (A skip as for a process that never used zcopy
 * would make it fall back until the skip ran out.) */
static void check_range_first(const layout_t *l, int rank)
{
    const zcopy_mem_prop_t prop = { .kind = ZCOPY_MEM_HOST, .device = -1 };
    int32_t in[2] = { rank, rank }, out[2], *ain, *aout;
    zcopy_mem_handle_t handle;
    MPIX_Zcopy_stats s0, s1;
    size_t gran, size;
    MPI_Comm comm;
    void *base;

    ZT_CHECK(zcopy_mem_granularity(&prop, &gran) == ZCOPY_SUCCESS,
             "granularity: %s", zcopy_mem_last_error());
    size = gran;
    ZT_CHECK(zcopy_mem_reserve(&base, size, 0, NULL, 0) == ZCOPY_SUCCESS,
             "reserve: %s", zcopy_mem_last_error());
    ZT_CHECK(MPIX_Comm_set_memory_range(MPI_COMM_SELF, base, size, 0, 0) ==
                 MPI_SUCCESS, "set_memory_range on MPI_COMM_SELF failed");
    MPI_Comm_dup(MPI_COMM_WORLD, &comm);
    for (int i = 0; i < IDLE_CALLS; i++)
        MPI_Allreduce(in, out, 2, MPI_INT32_T, MPI_SUM, comm);
    ZT_CHECK(zcopy_mem_create(&handle, size, &prop, 0) == ZCOPY_SUCCESS &&
                 zcopy_mem_map(base, size, 0, handle, 0) == ZCOPY_SUCCESS &&
                 MPIX_Comm_activate_memory(MPI_COMM_SELF, base, size, 0,
                                           handle, 0) == MPI_SUCCESS,
             "activation: %s", zcopy_mem_last_error());
    ain = base;
    aout = ain + 16;
    ain[0] = ain[1] = rank;
    s0 = zt_stats(comm);
    MPI_Allreduce(ain, aout, 2, MPI_INT32_T, MPI_SUM, comm);
    s1 = zt_stats(comm);
    ZT_CHECK(s1.zcopy_calls == s0.zcopy_calls + 1, "range set, %d calls on "
             "plain buffers, then an activation: the next call was not "
             "zero-copy: %s", IDLE_CALLS, s1.last_fallback_reason);
    ZT_CHECK(aout[0] == l->nranks * (l->nranks - 1) / 2, "allreduce after "
             "the activation: %d, expected %d", aout[0],
             l->nranks * (l->nranks - 1) / 2);
    MPI_Comm_free(&comm);
    ZT_CHECK(MPIX_Comm_deactivate_memory(MPI_COMM_SELF, base) ==
                     MPI_SUCCESS &&
                 zcopy_mem_unmap(base) == ZCOPY_SUCCESS &&
                 zcopy_mem_free(handle) == ZCOPY_SUCCESS &&
                 MPIX_Comm_unset_memory_range(MPI_COMM_SELF, base) ==
                     MPI_SUCCESS &&
                 zcopy_mem_release(base) == ZCOPY_SUCCESS,
             "teardown: %s", zcopy_mem_last_error());
}

/* A call that falls back because a rank of this server declined it, in
 * a process that has set a range (so not an idle communicator), is
 * decided inside the server: its ranks go on to the previous component
 * without waiting for the ranks of other servers, whose messages of the
 * round arrive meanwhile. So the root of a bcast on plain memory leaves
 * as soon as stock's bcast lets it, though every rank of the other
 * servers comes LATE_S later. Until 2026-12-03 it waited for the last of
 * them in the agreement round. (Its next call on the communicator would
 * wait for them, taking in their messages first.) Leaders that pass rounds
 * in steps forward each other's parts and still wait. */
#define LATE_S 1.0

static void check_decline_waits_for_nobody(const layout_t *l, int rank)
{
    int32_t v[2] = { rank == 0 ? 42 : -1, rank == 0 ? 43 : -1 };
    MPIX_Zcopy_stats s0, s1;
    double took;

    s0 = zt_stats(MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank >= l->per) { /* not on rank 0's server */
        const struct timespec late = { .tv_sec = (time_t)LATE_S,
                                       .tv_nsec = 0 };
        nanosleep(&late, NULL);
    }
    took = MPI_Wtime();
    MPI_Bcast(v, 2, MPI_INT32_T, 0, MPI_COMM_WORLD);
    took = MPI_Wtime() - took;
    s1 = zt_stats(MPI_COMM_WORLD);
    ZT_CHECK(v[0] == 42 && v[1] == 43, "bcast on plain memory: %d %d, "
             "expected 42 43", v[0], v[1]);
    ZT_CHECK(s1.fallback_calls == s0.fallback_calls + 1, "bcast on plain "
             "memory did not fall back");
    if (rank == 0 && !in_steps(l))
        ZT_CHECK(took < LATE_S / 2, "the root of a bcast on plain memory "
                 "took %.3f s: it waited for the ranks of the other servers, "
                 "which came %.1f s late", took, LATE_S);
    MPI_Barrier(MPI_COMM_WORLD);
}

/* Keys travel once per peer and block, not per call: over calls of an
 * allreduce too large to ride with its arrival, which reads peers' blocks
 * between servers, a rank that leads no server sends per call one arrival
 * of @arrival bytes and 4 bytes per further round (its syncs), and any
 * key it asks a peer for is one message of 32 bytes more. Counted from
 * the second call: the first fetches the keys. */
#define BIG_COUNT (256 << 10) /* 1 MiB of ints: above every inline limit */
#define BIG_CALLS 10
#define BIG_SYNCS 3 /* of such an allreduce on servers of several ranks */


static void check_keys_once(const layout_t *l, int rank, size_t arrival)
{
    unsigned long long msgs, bytes, fetched;
    MPIX_Zcopy_stats s0, s1;
    size_t used = 0;
    zt_arena_t big;
    int32_t *in, *out;

    zt_arena_init(&big, MPI_COMM_WORLD, 2 * BIG_COUNT * sizeof(int32_t));
    in = zt_arena_alloc(&big, &used, BIG_COUNT * sizeof(int32_t));
    out = zt_arena_alloc(&big, &used, BIG_COUNT * sizeof(int32_t));
    for (int i = 0; i < BIG_COUNT; i++)
        in[i] = rank + i;
    MPI_Allreduce(in, out, BIG_COUNT, MPI_INT32_T, MPI_SUM, MPI_COMM_WORLD);
    s0 = zt_stats(MPI_COMM_WORLD);
    for (int c = 0; c < BIG_CALLS; c++)
        MPI_Allreduce(in, out, BIG_COUNT, MPI_INT32_T, MPI_SUM,
                      MPI_COMM_WORLD);
    s1 = zt_stats(MPI_COMM_WORLD);
    ZT_CHECK(s1.zcopy_calls - s0.zcopy_calls == BIG_CALLS &&
                 s1.inline_calls == s0.inline_calls,
             "%d allreduces of %d ints: %llu zero-copy, %llu inline (%s)",
             BIG_CALLS, BIG_COUNT,
             (unsigned long long)(s1.zcopy_calls - s0.zcopy_calls),
             (unsigned long long)(s1.inline_calls - s0.inline_calls),
             s1.last_fallback_reason);
    ZT_CHECK(out[BIG_COUNT - 1] == l->nranks * (l->nranks - 1) / 2 +
                                       l->nranks * (BIG_COUNT - 1),
             "allreduce of %d ints: %d at the end", BIG_COUNT,
             out[BIG_COUNT - 1]);
    msgs = s1.ctl_msgs - s0.ctl_msgs;
    bytes = s1.ctl_bytes - s0.ctl_bytes;
    if (rank % l->per == 0) {
        /* A leader per round (the arrival, then three syncs: partials
         * made, slices reduced, done): its record and one message per
         * step. */
        const unsigned long long expected =
            BIG_CALLS * (1 + BIG_SYNCS) * (1 + (unsigned long long)leader_steps(l));

        ZT_CHECK(msgs == expected, "leader rank %d: %llu control messages "
                 "in %d allreduces after the first, expected %llu (%d "
                 "servers, %d leaders' steps per round)", rank, msgs,
                 BIG_CALLS, expected, l->ngroups, leader_steps(l));
    }
    if (rank % l->per != 0 && msgs >= BIG_CALLS) {
        /* bytes = calls * arrival + 4 * (msgs - calls - keys) + 32 * keys */
        fetched = (bytes - BIG_CALLS * arrival - 4 * (msgs - BIG_CALLS)) / 28;
        ZT_CHECK(bytes >= BIG_CALLS * arrival + 4 * (msgs - BIG_CALLS) &&
                     fetched == 0,
                 "rank %d: %llu control messages and %llu bytes in %d "
                 "allreduces after the first: %llu keys asked again",
                 rank, msgs, bytes, BIG_CALLS, fetched);
    }
    zt_arena_fini(&big);
}

/* Run with coll_zcopy_span_inline_max 0, so that every call moves its
 * data by UCX transfers: what an allreduce of a vector of LANDING_BYTES
 * brings in through UCX per rank stays below twice the vector, whatever
 * the number of servers: the hierarchical reduction brings in partials of
 * the rank's own slice and then the other servers' slices,
 * 2 (servers - 1) / ranks of the vector (a half at 2 servers of 2, 7/8 at
 * 8 of 2). Each rank fetching every other rank's vector would bring in
 * (ranks - ranks of its server) vectors: 2 at 2 servers of 2, 14 at 8. */
#define LANDING_BYTES 8192

static void check_allreduce_landing(const layout_t *l, int rank)
{
    const size_t count = LANDING_BYTES / sizeof(int32_t);
    const long long expect = (long long)l->nranks * (l->nranks - 1) / 2;
    MPIX_Zcopy_stats s0, s1;
    unsigned long long per_call;
    size_t used = 0, wrong = 0;
    zt_arena_t arena;
    int32_t *in, *out;

    zt_arena_init(&arena, MPI_COMM_WORLD, 1 << 16);
    in = zt_arena_alloc(&arena, &used, LANDING_BYTES);
    out = zt_arena_alloc(&arena, &used, LANDING_BYTES);
    for (size_t i = 0; i < count; i++)
        in[i] = rank + (int32_t)i;
    MPI_Allreduce(in, out, (int)count, MPI_INT32_T, MPI_SUM, MPI_COMM_WORLD);
    s0 = zt_stats(MPI_COMM_WORLD);
    for (int c = 0; c < CALLS; c++)
        MPI_Allreduce(in, out, (int)count, MPI_INT32_T, MPI_SUM,
                      MPI_COMM_WORLD);
    s1 = zt_stats(MPI_COMM_WORLD);
    for (size_t i = 0; i < count; i++)
        wrong += out[i] != expect + (long long)l->nranks * (long long)i;
    per_call = (s1.ucx_bytes - s0.ucx_bytes) / CALLS;
    ZT_CHECK(wrong == 0, "allreduce of %d bytes: %zu elements wrong",
             LANDING_BYTES, wrong);
    ZT_CHECK(s1.zcopy_calls - s0.zcopy_calls == CALLS &&
                 s1.inline_calls == s0.inline_calls,
             "allreduce of %d bytes: every call zero-copy, none inline",
             LANDING_BYTES);
    ZT_CHECK(per_call < 2 * LANDING_BYTES, "rank %d brought in %llu bytes "
             "through UCX per allreduce of %d bytes on %d servers (less "
             "than %d expected)", rank, per_call, LANDING_BYTES, l->ngroups,
             2 * LANDING_BYTES);
    if (rank == 0)
        printf("allreduce of %d bytes on %d servers: %llu bytes through UCX "
               "per call on rank 0\n", LANDING_BYTES, l->ngroups, per_call);
    zt_arena_fini(&arena);
}

int main(int argc, char **argv)
{
    int rank, nranks;
    size_t used = 0;
    zt_arena_t arena;
    layout_t l;
    sent_t *all;
    MPI_Comm peers;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    MPI_Comm_dup(MPI_COMM_WORLD, &peers);
    l = layout_of(nranks);
    if (argc > 1 && strcmp(argv[1], "landing") == 0) {
        check_allreduce_landing(&l, rank);
        MPI_Comm_free(&peers);
        return zt_finish();
    }
    /* First, while no range was ever set anywhere. */
    check_idle(&l, rank, argc > 1 && strcmp(argv[1], "wake=elsewhere") == 0);
    check_range_first(&l, rank);
    zt_arena_init(&arena, MPI_COMM_WORLD, 1 << 16);
    tiny_in = zt_arena_alloc(&arena, &used, 2 * sizeof(int32_t));
    tiny_out = zt_arena_alloc(&arena, &used, 2 * sizeof(int32_t));
    tiny_in[0] = tiny_in[1] = rank;
    plain_in[0] = plain_in[1] = rank;
    all = calloc((size_t)nranks, sizeof(*all));
    if (rank == 0)
        printf("test_span_plane: %d ranks, %d servers of up to %d\n", nranks,
               l.ngroups, l.per);
    ZT_CHECK(l.ngroups > 1, "the communicator must span servers");

    /* Set-up happens at the first collective: not counted below. */
    MPI_Barrier(MPI_COMM_WORLD);
    measure(MPI_COMM_WORLD, peers, run_barrier, all);
    check(&l, all, "barrier");
    measure(MPI_COMM_WORLD, peers, run_tiny_allreduce, all);
    check(&l, all, "8-byte allreduce");
    check_connections_inline(&l, rank);
    if (l.per > 1) { /* the record of a rank that leads no server, less the
                        allreduce's 8 bytes of payload */
        check_keys_once(&l, rank, all[1].bytes / CALLS - 2 * sizeof(int32_t));
        check_connections_read(&l, rank);
    }
    if (l.per > 1) {
        a2a_in = zt_arena_alloc(&arena, &used,
                                (size_t)nranks * A2A_BLOCK);
        a2a_out = zt_arena_alloc(&arena, &used,
                                 (size_t)nranks * A2A_BLOCK);
        for (int to = 0; to < nranks; to++)
            for (int j = 0; j < A2A_BLOCK / 4; j++)
                a2a_in[to * (A2A_BLOCK / 4) + j] = rank * 10000 + to * 100 + j;
        measure_inline(&l, peers, run_small_alltoall, all);
        check_blocks(&l, all, rank, -1);
        measure_inline(&l, peers, run_small_scatter, all);
        check_blocks(&l, all, rank, 0);
        gather_root = nranks - 1;
        measure_inline(&l, peers, run_small_gather, all);
        check_gather(&l, all, rank);
        gather_root = 0;
        measure_inline(&l, peers, run_small_gather, all);
        check_gather(&l, all, rank);
    }
    ZT_CHECK(tiny_out[0] == nranks * (nranks - 1) / 2 &&
                 tiny_out[1] == tiny_out[0],
             "allreduce: %d %d, expected %d", tiny_out[0], tiny_out[1],
             nranks * (nranks - 1) / 2);
    /* A fallback agrees on its path the same way (its payloads travel
     * too: every rank decides from the arguments alone that they do). */
    measure(MPI_COMM_WORLD, peers, run_fallback, all);
    check(&l, all, "fallback");
    plain_a2a_in = malloc((size_t)nranks * sizeof(int32_t));
    plain_a2a_out = malloc((size_t)nranks * sizeof(int32_t));
    a2av_counts = malloc((size_t)nranks * sizeof(int));
    a2av_displs = malloc((size_t)nranks * sizeof(int));
    zt_require(plain_a2a_in && plain_a2a_out && a2av_counts && a2av_displs,
               "malloc");
    for (int j = 0; j < nranks; j++) {
        plain_a2a_in[j] = rank * 1000 + j;
        a2av_counts[j] = 1;
        a2av_displs[j] = j;
    }
    measure(MPI_COMM_WORLD, peers, run_fallback_alltoallv, all);
    check(&l, all, "fallback alltoallv");
    for (int j = 0; j < nranks; j++)
        ZT_CHECK(plain_a2a_out[j] == j * 1000 + rank, "fallback alltoallv: "
                 "%d from rank %d, expected %d", plain_a2a_out[j], j,
                 j * 1000 + rank);
    free(plain_a2a_in);
    free(plain_a2a_out);
    free(a2av_counts);
    free(a2av_displs);
    ZT_CHECK(plain_out[0] == nranks * (nranks - 1) / 2,
             "fallback allreduce: %d, expected %d", plain_out[0],
             nranks * (nranks - 1) / 2);
    check_decline_waits_for_nobody(&l, rank);

    free(all);
    MPI_Comm_free(&peers);
    zt_arena_fini(&arena);
    return zt_finish();
}
