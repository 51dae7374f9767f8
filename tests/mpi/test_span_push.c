/*
 * An alltoall whose every block between servers is pushed through the
 * job's point-to-point engine (coll_zcopy_ucx_push_min) ends with a sync of
 * each server's ranks alone where the servers are hosts of their own: no
 * rank of another server touches this server's buffers once its pushes
 * are done, so no control message crosses servers after the arrival. Where
 * the servers are virtual servers of one host, which share its cores, the
 * sync still spans every rank (coll/span/algo.c says why).
 *
 *   test_span_push apart    every server a host (the emulated cluster):
 *                           a leader sends one message per other server
 *                           per call, for the arrival
 *   test_span_push shared   virtual servers (coll_zcopy_virtual_servers):
 *                           a leader sends two per other server per call
 *
 * Run with coll_zcopy_span_inline_max=0 and coll_zcopy_ucx_push_min=4096,
 * so that blocks of 4 KiB and more are pushed. Every call's results are
 * checked on every rank, and its statistics say that it was zero-copy,
 * that every block from another server came as a push, and how many
 * control messages this rank sent. Where some host has an InfiniBand or
 * RoCE device, UCX may get for real and zcopy reads instead of pushing:
 * then nothing is pushed and the sync spans the servers.
 *
 * Alltoallv's blocks between servers are all pushed, down to blocks of 3
 * ints, so their displacements stay inside each server too: a rank sends
 * no message through the previous component.
 *
 *   test_span_push apart|shared carry
 *                           with coll_zcopy_span_inline_max at its default
 *                           instead: alltoallvs whose every rank's blocks
 *                           fit its slot of the arrival (twice that within
 *                           the area over the ranks, 512 KiB on 4, packed
 *                           with their offsets) ride it, one round
 *                           and no push, and every third call one rank
 *                           sends a block too large for its slot, so that
 *                           the others' carried blocks go unused and every
 *                           block between servers is pushed as above (no
 *                           alltoall runs: its blocks would ride too);
 *                           and an alltoallv in place, which rides the
 *                           same way or, in a big call, falls back
 *
 * Each alltoall(v) is followed at once by an allreduce, so that a server
 * that leaves the alltoall early sends its next arrival while another is
 * still inside: in turn on activated memory (a zero-copy arrival) and on
 * the stack (every rank declines, and each server settles the arrival
 * alone, plane.c).
 */
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

#define CALLS 12
/* Ints of the block that makes its sender's blocks too large for its slot
 * of the arrival (512 KiB under the default coll_zcopy_span_inline_max,
 * where leaders send each server only its ranks' blocks, as on every
 * layout this test runs). */
#define V_BIG 140000

static int rank, nranks;
static bool pushes;             /* no host has an RDMA device */
static bool carry;              /* small alltoallvs ride the arrival */

/* This rank's server: how many ranks it has, whether this rank leads it
 * (its lowest rank), and how many servers there are; and by rank, the
 * lowest rank of its server. */
typedef struct {
    int size;
    bool leader;
    int count;
    int *lowest;
} server_t;

static server_t server_of(bool apart)
{
    server_t s;
    int leaders, mine;

    if (apart) {
        MPI_Comm host;
        int local;

        MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank,
                            MPI_INFO_NULL, &host);
        MPI_Comm_size(host, &s.size);
        MPI_Comm_rank(host, &local);
        s.leader = local == 0;
        MPI_Allreduce(&rank, &mine, 1, MPI_INT, MPI_MIN, host);
        MPI_Comm_free(&host);
    } else { /* consecutive blocks of ranks, as zcopy splits a host */
        const int v = zt_cvar_int("coll_zcopy_virtual_servers", 1);
        const int per = (nranks + v - 1) / v;
        const int first = rank / per * per;

        s.size = first + per <= nranks ? per : nranks - first;
        s.leader = rank == first;
        mine = first;
    }
    s.lowest = malloc((size_t)nranks * sizeof(int));
    zt_require(s.lowest != NULL, "out of memory");
    MPI_Allgather(&mine, 1, MPI_INT, s.lowest, 1, MPI_INT, MPI_COMM_WORLD);
    leaders = s.leader;
    MPI_Allreduce(&leaders, &s.count, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    return s;
}

/* The element @i of the block rank @from sends rank @to in call @call. */
static int value(int from, int to, int i, int call)
{
    return zt_value(from * nranks + to, i, call);
}

/* One zero-copy call of @what (call @call) between the statistics @b and
 * @a, riding the arrival (@inlined) or through transfers. */
static void expect_one_call(const char *what, int call,
                            const MPIX_Zcopy_stats *b,
                            const MPIX_Zcopy_stats *a, bool inlined)
{
    ZT_CHECK(a->zcopy_calls - b->zcopy_calls == 1 &&
                 a->fallback_calls == b->fallback_calls &&
                 a->inline_calls - b->inline_calls == (inlined ? 1u : 0u),
             "%s %d: rank %d: not one zero-copy call %s (zcopy %llu, "
             "fallback %llu, inline %llu; %s)", what, call, rank,
             inlined ? "riding the arrival" : "through transfers",
             (unsigned long long)(a->zcopy_calls - b->zcopy_calls),
             (unsigned long long)(a->fallback_calls - b->fallback_calls),
             (unsigned long long)(a->inline_calls - b->inline_calls),
             a->last_fallback_reason);
}

static void run_alltoall(const server_t *s, bool apart, int *send, int *recv,
                         int ints, int call)
{
    const unsigned long long block = (unsigned long long)ints * sizeof(int);
    const unsigned long long others = (unsigned long long)s->count - 1;
    unsigned long long want_msgs, msgs, p2p;
    MPIX_Zcopy_stats b, a;
    long bad = -1;

    for (int to = 0; to < nranks; to++)
        for (int i = 0; i < ints; i++)
            send[to * ints + i] = value(rank, to, i, call);
    for (int i = 0; i < ints * nranks; i++)
        recv[i] = -1;
    b = zt_stats(MPI_COMM_WORLD);
    MPI_Alltoall(send, ints, MPI_INT, recv, ints, MPI_INT, MPI_COMM_WORLD);
    a = zt_stats(MPI_COMM_WORLD);
    for (int from = 0; from < nranks && bad < 0; from++) {
        ZT_FIND_BAD(bad, recv + from * ints, (size_t)ints,
                    value(from, rank, (int)i, call));
        ZT_CHECK(bad < 0, "call %d: rank %d, element %ld of the block from "
                 "rank %d is %d", call, rank, bad, from,
                 bad < 0 ? 0 : recv[from * ints + bad]);
    }
    expect_one_call("alltoall", call, &b, &a, false);
    p2p = a.p2p_bytes - b.p2p_bytes;
    ZT_CHECK(p2p == (pushes ? block * (unsigned long long)(nranks - s->size)
                            : 0),
             "call %d: rank %d received %llu bytes as pushes, expected %s "
             "(a block of %llu from each of the %d ranks of other servers)",
             call, rank, p2p, pushes ? "all" : "none: a host has RDMA", block,
             nranks - s->size);
    /* A record per round (the arrival, the sync); a leader's messages to
     * the other leaders: the arrival's, and the sync's where it spans. */
    want_msgs = 2 + (s->leader ? others * (apart && pushes ? 1 : 2) : 0);
    msgs = a.ctl_msgs - b.ctl_msgs;
    ZT_CHECK(msgs == want_msgs, "call %d: rank %d (%s) sent %llu control "
             "messages, expected %llu (%s)", call, rank,
             s->leader ? "a leader" : "not a leader", msgs, want_msgs,
             apart ? "servers apart: the last sync stays inside each"
                   : "servers on one host: the last sync spans them");
}

/* Whether one rank's blocks of alltoallv call @call are too large to ride
 * the arrival, in carry mode: every third call's. */
static bool v_big_call(int call)
{
    return carry && call % 3 == 2;
}

/* Ints in the alltoallv block rank @from sends rank @to in call @call:
 * none, 3 (below coll_zcopy_ucx_push_min), 1024 or 1500, by pair; in a
 * big call, V_BIG from one rank (in turn) to the next. */
static int v_ints(int from, int to, int call)
{
    static const int sizes[] = { 0, 3, 1024, 1500 };

    if (v_big_call(call) && from == call / 3 % nranks &&
        to == (from + 1) % nranks)
        return V_BIG;
    return sizes[(from * 7 + to * 3 + call) % 4];
}

#define V_SEND_GAP 5 /* ints between send blocks, which go in reverse */
#define V_RECV_GAP 3 /* ints after each received block, left as they were */

/* The blocks an alltoallv (@what) of call @call left in @buf: each
 * rank's at its displacement, and the V_RECV_GAP ints after it as they
 * were (-1). */
static void check_received(const char *what, int call, const int *buf,
                           const int *counts, const int *displs)
{
    for (int from = 0; from < nranks; from++) {
        const int *got = buf + displs[from];
        long bad;

        ZT_FIND_BAD(bad, got, (size_t)counts[from],
                    value(from, rank, (int)i, call));
        ZT_CHECK(bad < 0, "%s %d: rank %d, element %ld of the %d from rank "
                 "%d is %d", what, call, rank, bad, counts[from], from,
                 bad < 0 ? 0 : got[bad]);
        ZT_FIND_BAD(bad, got + counts[from], (size_t)V_RECV_GAP, -1);
        ZT_CHECK(bad < 0, "%s %d: rank %d: the gap after rank %d's block "
                 "was written", what, call, rank, from);
    }
}

/* Bytes rank @from's blocks of alltoallv call @call fill in its slot: a
 * table of n + 1 four-byte offsets, then the blocks. */
static unsigned long long v_filled(int from, int call)
{
    unsigned long long bytes = 4ull * (unsigned long long)(nranks + 1);

    for (int to = 0; to < nranks; to++)
        bytes += (unsigned long long)v_ints(from, to, call) * sizeof(int);
    return bytes;
}

/* Carry mode: an alltoallv whose every rank's blocks rode its arrival:
 * one zero-copy call, inline, nothing pushed or read, and one round
 * (this rank's record, and a leader's message to each other server).
 * The control bytes: a rank's record and its filled bytes; a leader's
 * messages, its server's places and, of what its members filled, at
 * least their tables and the blocks for that server's ranks and at most
 * all of it, never their whole slots (at most 512 bytes of record and
 * place a rank, far below a slot of 512 KiB). */
static void run_alltoallv_carried(const server_t *s, int call,
                                  const MPIX_Zcopy_stats *b,
                                  const MPIX_Zcopy_stats *a)
{
    const unsigned long long others = (unsigned long long)s->count - 1;
    const unsigned long long want_msgs = 1 + (s->leader ? others : 0);
    const unsigned long long msgs = a->ctl_msgs - b->ctl_msgs;
    const unsigned long long bytes = a->ctl_bytes - b->ctl_bytes;
    unsigned long long least = v_filled(rank, call), most = least + 512;

    for (int r = 0; r < nranks && s->leader; r++) {
        if (s->lowest[r] != s->lowest[rank])
            continue;
        most += others * (v_filled(r, call) + 512);
        for (int t = 0; t < nranks; t++)
            if (s->lowest[t] != s->lowest[rank])
                least += (unsigned long long)v_ints(r, t, call) *
                         sizeof(int);
        least += others * 4ull * (unsigned long long)(nranks + 1);
    }
    ZT_CHECK(bytes >= least && bytes <= most, "alltoallv %d: rank %d (%s) "
             "sent %llu control bytes, expected %llu to %llu (the filled "
             "bytes of %s)", call, rank,
             s->leader ? "a leader" : "not a leader", bytes, least, most,
             s->leader ? "its server's ranks, to each other server"
                       : "its slot");

    expect_one_call("alltoallv", call, b, a, true);
    ZT_CHECK(a->p2p_bytes == b->p2p_bytes && a->ucx_bytes == b->ucx_bytes &&
                 a->ipc_bytes == b->ipc_bytes,
             "alltoallv %d: rank %d: carried blocks, yet %llu bytes pushed "
             "or read, %llu through UCX, %llu through mappings", call, rank,
             (unsigned long long)(a->p2p_bytes - b->p2p_bytes),
             (unsigned long long)(a->ucx_bytes - b->ucx_bytes),
             (unsigned long long)(a->ipc_bytes - b->ipc_bytes));
    ZT_CHECK(msgs == want_msgs, "alltoallv %d: rank %d (%s) sent %llu "
             "control messages, expected %llu (the arrival alone)", call,
             rank, s->leader ? "a leader" : "not a leader", msgs, want_msgs);
}

/* An alltoallv whose blocks between servers are pushed whatever their
 * size, down to 3 ints: no rank reads a block of another server, so its
 * displacements stay inside its server (no message through the previous
 * component) and, servers apart, so does the last sync. With @zcopy
 * false some rank's buffers are not activated (all ranks', or one
 * server's): it declines and the call falls back on every rank; the next
 * zero-copy one must not see this one's displacements or payloads. */
static void run_alltoallv(const server_t *s, bool apart, int *send, int *recv,
                          int call, bool zcopy)
{
    const unsigned long long others = (unsigned long long)s->count - 1;
    int scounts[nranks], sdispls[nranks], rcounts[nranks], rdispls[nranks];
    const bool carried = carry && !v_big_call(call);
    unsigned long long want_p2p = 0, want_msgs, msgs, p2p;
    MPIX_Zcopy_stats b, a;
    int at = 0;

    for (int to = nranks - 1; to >= 0; to--) {
        scounts[to] = v_ints(rank, to, call);
        sdispls[to] = at;
        for (int i = 0; i < scounts[to]; i++)
            send[at + i] = value(rank, to, i, call);
        at += scounts[to] + V_SEND_GAP;
    }
    at = 0;
    for (int from = 0; from < nranks; from++) {
        rcounts[from] = v_ints(from, rank, call);
        rdispls[from] = at;
        at += rcounts[from] + V_RECV_GAP;
    }
    for (int i = 0; i < at; i++)
        recv[i] = -1;
    b = zt_stats(MPI_COMM_WORLD);
    MPI_Alltoallv(send, scounts, sdispls, MPI_INT, recv, rcounts, rdispls,
                  MPI_INT, MPI_COMM_WORLD);
    a = zt_stats(MPI_COMM_WORLD);
    check_received("alltoallv", call, recv, rcounts, rdispls);
    for (int from = 0; from < nranks; from++)
        if (s->lowest[from] != s->lowest[rank])
            want_p2p += (unsigned long long)rcounts[from] * sizeof(int);
    if (!zcopy) {
        ZT_CHECK(a.fallback_calls - b.fallback_calls == 1 &&
                     a.zcopy_calls == b.zcopy_calls,
                 "alltoallv %d on plain memory: rank %d: not one fallback "
                 "(zcopy %llu, fallback %llu)", call, rank,
                 (unsigned long long)(a.zcopy_calls - b.zcopy_calls),
                 (unsigned long long)(a.fallback_calls - b.fallback_calls));
        return;
    }
    if (carried) {
        run_alltoallv_carried(s, call, &b, &a);
        return;
    }
    expect_one_call("alltoallv", call, &b, &a, false);
    p2p = a.p2p_bytes - b.p2p_bytes;
    ZT_CHECK(p2p == (pushes ? want_p2p : 0),
             "alltoallv %d: rank %d received %llu bytes as pushes, expected "
             "%llu (%s)", call, rank, p2p, pushes ? want_p2p : 0,
             pushes ? "every block from another server, small ones too"
                    : "none: a host has RDMA");
    /* As the alltoall's; without pushes, the displacements go to every
     * other rank through the previous component. */
    want_msgs = 2 + (s->leader ? others * (apart && pushes ? 1 : 2) : 0) +
                (pushes ? 0 : (unsigned long long)nranks - 1);
    msgs = a.ctl_msgs - b.ctl_msgs;
    ZT_CHECK(msgs == want_msgs, "alltoallv %d: rank %d (%s) sent %llu "
             "control messages, expected %llu", call, rank,
             s->leader ? "a leader" : "not a leader", msgs, want_msgs);
}

/* Ints rank @from sends rank @to in in-place alltoallv call @call (what
 * each sends the other, as MPI's in-place form needs): 0, 3, 1024 or
 * 1500 by pair, and V_BIG between ranks 0 and 1 in a big call. */
static int v_sym_ints(int from, int to, int call)
{
    static const int sizes[] = { 0, 3, 1024, 1500 };

    if (v_big_call(call) && from + to == 1)
        return V_BIG;
    return sizes[(from + to + call) % 4];
}

/* Carry mode: an alltoallv in place, whose blocks ride the arrival where
 * every rank's fit its slot (one zero-copy call, inline), and which falls
 * back on every rank, "in place across servers", where one rank's do not
 * (a big call): between servers a swap in place needs a copy, which only
 * the slots give. */
static void run_alltoallv_in_place(int *buf, int call)
{
    int counts[nranks], displs[nranks];
    MPIX_Zcopy_stats b, a;
    int at = 0;

    for (int j = 0; j < nranks; j++) {
        counts[j] = v_sym_ints(rank, j, call);
        displs[j] = at;
        for (int i = 0; i < counts[j]; i++)
            buf[at + i] = value(rank, j, i, call);
        at += counts[j] + V_RECV_GAP;
        for (int i = 0; i < V_RECV_GAP; i++)
            buf[at - V_RECV_GAP + i] = -1;
    }
    b = zt_stats(MPI_COMM_WORLD);
    MPI_Alltoallv(MPI_IN_PLACE, NULL, NULL, MPI_DATATYPE_NULL, buf, counts,
                  displs, MPI_INT, MPI_COMM_WORLD);
    a = zt_stats(MPI_COMM_WORLD);
    check_received("alltoallv in place", call, buf, counts, displs);
    if (v_big_call(call)) {
        ZT_CHECK(a.fallback_calls - b.fallback_calls == 1 &&
                     a.zcopy_calls == b.zcopy_calls &&
                     strstr(a.last_fallback_reason, "in place across") != NULL,
                 "alltoallv in place %d: rank %d: not one fallback \"in "
                 "place across servers\" (zcopy %llu, fallback %llu; %s)",
                 call, rank,
                 (unsigned long long)(a.zcopy_calls - b.zcopy_calls),
                 (unsigned long long)(a.fallback_calls - b.fallback_calls),
                 a.last_fallback_reason);
        return;
    }
    expect_one_call("alltoallv in place", call, &b, &a, true);
}

/* Right after the alltoall: the sum of every rank's (rank + call), in
 * @buf (two ints). */
static void run_allreduce(int *buf, int call)
{
    const int want = nranks * (nranks - 1) / 2 + nranks * call;

    buf[0] = rank + call;
    buf[1] = -1;
    MPI_Allreduce(&buf[0], &buf[1], 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    ZT_CHECK(buf[1] == want, "call %d: rank %d: allreduce after the "
             "alltoall gave %d, expected %d", call, rank, buf[1], want);
}

int main(int argc, char **argv)
{
    const int most = 2048;
    size_t bytes;
    zt_arena_t arena;
    server_t s;
    size_t cursor = 0;
    int *send, *recv, *pair, stack[2], *plain_send, *plain_recv;
    bool apart;
    int rdma, any_rdma;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    zt_require((argc == 2 || (argc == 3 && !strcmp(argv[2], "carry"))) &&
                   (!strcmp(argv[1], "apart") || !strcmp(argv[1], "shared")),
               "usage: test_span_push apart|shared [carry]");
    apart = !strcmp(argv[1], "apart");
    carry = argc == 3;
    zt_require(zt_cvar_ulong("coll_zcopy_ucx_push_min", 0) == 4096 &&
                   zt_cvar_ulong("coll_zcopy_span_inline_max", 1) ==
                       (carry ? 262144 : 0),
               carry ? "run with coll_zcopy_ucx_push_min=4096 and "
                       "coll_zcopy_span_inline_max at its default, 262144"
                     : "run with coll_zcopy_ucx_push_min=4096 and "
                       "coll_zcopy_span_inline_max=0");
    s = server_of(apart);
    rdma = zt_host_has_rdma();
    MPI_Allreduce(&rdma, &any_rdma, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    pushes = !any_rdma;
    zt_require(s.count > 1 && s.count < nranks,
               "needs several servers, one of several ranks");
    /* Each buffer: the most ints a rank sends or receives in a call (with
     * the gaps), V_BIG among them in carry mode. */
    bytes = ((size_t)most * (size_t)nranks + (carry ? V_BIG : 0)) *
            sizeof(int);
    zt_arena_init(&arena, MPI_COMM_WORLD, 2 * bytes + 8192);
    send = zt_arena_alloc(&arena, &cursor, bytes);
    recv = zt_arena_alloc(&arena, &cursor, bytes);
    pair = zt_arena_alloc(&arena, &cursor, 2 * sizeof(int));
    plain_send = malloc(bytes);
    plain_recv = malloc(bytes);
    zt_require(plain_send != NULL && plain_recv != NULL, "out of memory");
    /* Blocks of 4, 6 and 8 KiB in turn: every one pushed. */
    for (int call = 0; call < CALLS; call++) {
        if (!carry) {
            run_alltoall(&s, apart, send, recv, 1024 + 512 * (call % 3),
                         call);
            run_allreduce(call % 2 ? stack : pair, call);
        }
        run_alltoallv(&s, apart, send, recv, call, true);
        run_allreduce(call % 2 ? pair : stack, call);
        if (carry)
            run_alltoallv_in_place(recv, call);
        if (call % 3 == 1)
            run_alltoallv(&s, apart, plain_send, plain_recv, call + 1, false);
        /* Rank 0's server alone declines (its ranks' buffers are not
         * activated): it settles the arrival by itself while the others
         * send it their parts, packed in carry mode. */
        if (call % 3 == 0) {
            const bool mine = s.lowest[rank] == 0;

            run_alltoallv(&s, apart, mine ? plain_send : send,
                          mine ? plain_recv : recv, call + 1, false);
        }
    }
    zt_arena_fini(&arena);
    free(s.lowest);
    free(plain_send);
    free(plain_recv);
    return zt_finish();
}
