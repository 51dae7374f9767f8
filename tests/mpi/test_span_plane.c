/*
 * The control plane of a communicator that spans servers scales with the
 * servers, not with the ranks (issue 13): per collective, a rank that does
 * not lead its server sends one record to its server's shared segment,
 * however many servers there are; a leader sends that record and one
 * message to each other server's leader, of its own server's records (with
 * their payloads, for a collective small enough to ride with its arrival).
 *
 * Run on virtual servers (coll_zcopy_virtual_servers=V: consecutive blocks
 * of ranks, the first of each block its leader) or with
 * coll_zcopy_transport=ucx (every rank a server and a leader). Counted
 * with the zcopy statistics: control messages and bytes this rank sent.
 */
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

#define CALLS 50
/* The largest record a rank may send per round in these calls: one
 * arrival, with 8 bytes of payload for the allreduce. */
#define RECORD_MAX 512

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
    unsigned long long record = 0;

    /* Every rank's record is the same size: take a non-leader's, or a
     * leader's share when every rank leads. */
    for (int r = 0; r < l->nranks && record == 0; r++)
        if (r % l->per != 0)
            record = all[r].bytes / CALLS;
    if (record == 0)
        record = all[0].bytes / CALLS / l->ngroups; /* checked below */
    ZT_CHECK(record > 0 && record <= RECORD_MAX, "%s: a record of %llu "
             "bytes, expected 1 to %d", what, record, RECORD_MAX);
    for (int r = 0; r < l->nranks; r++) {
        const bool leader = r % l->per == 0;
        const unsigned long long others = (unsigned long long)l->ngroups - 1;
        const unsigned long long msgs = leader ? 1 + others : 1;
        /* A leader's message to another server carries its server's
         * records: linear in the servers, never in all the ranks. */
        const unsigned long long most =
            record + (leader ? others * (unsigned long long)group_size(l, r) *
                                   RECORD_MAX
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

static void run_fallback(MPI_Comm comm)
{
    MPI_Allreduce(plain_in, plain_out, 2, MPI_INT32_T, MPI_SUM, comm);
}

/* A job that has activated nothing pays the spanning agreement round only
 * now and then (SPEC section 4: no measurable cost): over IDLE_CALLS
 * fallbacks, rounds at calls 0, 2, 5, 10, ... then every 64, so at most
 * IDLE_ROUNDS_MAX rounds where there used to be one per call, barriers
 * (one round each, zcopy's own) in between. Then, after
 * MPIX_Comm_set_memory_range on the same communicator and an activation,
 * the very next call is zero-copy. */
#define IDLE_CALLS 200
#define IDLE_ROUNDS_MAX 10
#define IDLE_BARRIER_EVERY 10

static void check_idle(const layout_t *l, int rank)
{
    MPIX_Zcopy_stats s0, s1;
    unsigned long long rounds;
    int32_t in[2] = { rank, rank }, out[2];
    size_t used = 0;
    zt_arena_t arena;
    int32_t *ain, *aout;
    MPI_Comm idle;

    MPI_Comm_dup(MPI_COMM_WORLD, &idle);
    MPI_Allreduce(in, out, 2, MPI_INT32_T, MPI_SUM, idle); /* set-up */
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
    /* A rank that leads no server sends one record per round. */
    rounds = (s1.ctl_msgs - s0.ctl_msgs) /
                 (rank % l->per == 0 ? (unsigned long long)l->ngroups : 1) -
             IDLE_CALLS / IDLE_BARRIER_EVERY;
    ZT_CHECK(s1.fallback_calls - s0.fallback_calls == IDLE_CALLS &&
                 s1.zcopy_calls - s0.zcopy_calls ==
                     IDLE_CALLS / IDLE_BARRIER_EVERY,
             "idle: %llu fallbacks, %llu zero-copy (the barriers) in %d "
             "calls",
             (unsigned long long)(s1.fallback_calls - s0.fallback_calls),
             (unsigned long long)(s1.zcopy_calls - s0.zcopy_calls),
             IDLE_CALLS);
    ZT_CHECK(rounds >= 1 && rounds <= IDLE_ROUNDS_MAX,
             "idle: %llu agreement rounds besides the barriers' in %d calls "
             "(%llu control messages), expected 1 to %d", rounds, IDLE_CALLS,
             (unsigned long long)(s1.ctl_msgs - s0.ctl_msgs),
             IDLE_ROUNDS_MAX);

    zt_arena_init(&arena, idle, 1 << 16);
    ain = zt_arena_alloc(&arena, &used, sizeof(in));
    aout = zt_arena_alloc(&arena, &used, sizeof(out));
    ain[0] = ain[1] = rank;
    s0 = zt_stats(idle);
    MPI_Allreduce(ain, aout, 2, MPI_INT32_T, MPI_SUM, idle);
    s1 = zt_stats(idle);
    ZT_CHECK(s1.zcopy_calls == s0.zcopy_calls + 1, "the call after "
             "set_memory_range on an idle communicator was not zero-copy: "
             "%s", s1.last_fallback_reason);
    ZT_CHECK(aout[0] == l->nranks * (l->nranks - 1) / 2, "allreduce after "
             "waking: %d, expected %d", aout[0],
             l->nranks * (l->nranks - 1) / 2);
    zt_arena_fini(&arena);
    MPI_Comm_free(&idle);
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
    /* First, while nothing is activated anywhere. */
    check_idle(&l, rank);
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
    ZT_CHECK(tiny_out[0] == nranks * (nranks - 1) / 2 &&
                 tiny_out[1] == tiny_out[0],
             "allreduce: %d %d, expected %d", tiny_out[0], tiny_out[1],
             nranks * (nranks - 1) / 2);
    /* A fallback agrees on its path the same way (its payloads travel
     * too: every rank decides from the arguments alone that they do). */
    measure(MPI_COMM_WORLD, peers, run_fallback, all);
    check(&l, all, "fallback");
    ZT_CHECK(plain_out[0] == nranks * (nranks - 1) / 2,
             "fallback allreduce: %d, expected %d", plain_out[0],
             nranks * (nranks - 1) / 2);

    free(all);
    MPI_Comm_free(&peers);
    zt_arena_fini(&arena);
    return zt_finish();
}
