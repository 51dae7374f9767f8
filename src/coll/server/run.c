/*
 * The in-server path: every rank of the communicator shares one server and
 * maps its peers' activated memory. A call plans, publishes its plan in the
 * control plane (control.c) or, when small, its payload (inline.c's rule),
 * waits for every peer's arrival, and then runs the collective's algorithm
 * (reduction.c, movement.c, alltoall.c) through the mappings. Where some
 * rank's waits yield without sleeping, or yield where ranks are three
 * times the cores or more, small rooted calls go to the previous
 * component instead (zcopy_server_hands_over).
 */
#include "server.h"
#include "algo.h"

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

/* A fallback because @rank declined collective @seq, with its reason when
 * its slot still holds it. */
static zcopy_status_t server_fallback_peer(zcopy_comm_t *zc,
                                           zcopy_coll_type_t type, int rank,
                                           uint64_t seq)
{
    const uint32_t reason = zcopy_ctl_reason(zc->ctl, rank, seq);

    /* The code comes from another process: checked before it indexes. The
     * text leaves the rank out, so that ranks record the same one whenever
     * those that declined did so for one reason (and the decliner's slot
     * still holds it: one that ran 8 collectives ahead has overwritten it,
     * and then this rank records "a rank was not eligible"). */
    zcopy_log(ZCOPY_LOG_DEBUG, "coll", "rank %d: %s falls back, rank %d "
              "declined (reason %u)", zc->rank, zcopy_coll_names[type], rank,
              reason);
    return zcopy_coll_fallback(zc, type, reason < REASON_COUNT &&
                                                 reason != REASON_NONE
                                             ? zcopy_coll_reason_text[reason]
                                             : "a rank was not eligible");
}

/* A call whose payloads ride the inline records (inline.c's rule). */
static zcopy_status_t server_run_inline(zcopy_comm_t *zc,
                                        const zcopy_coll_args_t *a,
                                        const coll_plan_t *plan, size_t total)
{
    const uint8_t **lines = zcopy_comm_list(zc, ZCOPY_COMM_LIST_INPUTS);
    const zcopy_coll_inline_reads_t reads =
        zcopy_coll_inline_reads(zc, a, total);
    const void *src;
    uint64_t seq;
    size_t len;
    int bad;

    src = zcopy_coll_inline_source(zc, a, plan, total, &len);
    bad = zcopy_ctl_inline_exchange(zc->ctl, src, len, &reads,
                                    zcopy_coll_names[a->type]);
    seq = zc->ctl->seq;
    if (bad >= 0)
        return server_fallback_peer(zc, a->type, bad, seq);
    for (int r = 0; r < zc->size; r++)
        lines[r] = zcopy_ctl_inline(zc->ctl, r, seq)->data;
    ZCOPY_CHECK(zcopy_coll_inline_deliver(zc, a, lines, total));
    zc->stats.zcopy_calls++;
    zc->stats.inline_calls++;
    return ZCOPY_SUCCESS;
}

/* Where ranks outnumber cores, a step that waits for every rank lasts
 * until the scheduler has run them all. The root of a bcast, gather or
 * reduce that moves at most coll_zcopy_root_moves_max bytes to or from its
 * peers then moves (or reduces) every block itself (movement.c,
 * reduction.c), so that the others wait for it alone and it waits for
 * nobody: the departure no longer waits for every rank. Only the root
 * knows every block's size (the v-forms), so it decides, and its record
 * tells the others.
 *
 * Not a scatter's root: since each other rank leaves once it has pulled
 * its block (zcopy_ctl_sync_to), the root's moves save it nothing, and
 * they make the others wait for the root, which may have gone on to
 * compute on its core-mate's CPU (a root refilling its send buffer, as
 * any in-place scatter does): at np 4 on 2 cores, medians of 7
 * interleaved jobs, scatter of 64 and 256 KiB in place 58 and 158 us with
 * the root's moves, 39 and 29 without (stock 51 and 36); at np 3 46 and
 * 148 against 14 and 20; out of place level. */
static void server_plan_root_moves(const zcopy_comm_t *zc,
                                   const zcopy_coll_args_t *a,
                                   coll_plan_t *plan)
{
    const size_t peers = (size_t)zc->size - 1;
    size_t moved;

    switch (a->type) {
    case ZCOPY_COLL_BCAST:
        moved = plan->rlen * peers;
        break;
    case ZCOPY_COLL_REDUCE: /* the root reads every other input */
        moved = plan->slen * peers;
        break;
    case ZCOPY_COLL_GATHER:
    case ZCOPY_COLL_GATHERV:
        moved = plan->rlen;
        break;
    default:
        return;
    }
    if (a->root == zc->rank && zc->ctl->crowded &&
        moved <= zcopy_config.root_moves_max)
        plan->args.flags |= ZCOPY_PLAN_ROOT_MOVES;
}

zcopy_status_t zcopy_server_hand_over(zcopy_comm_t *zc, zcopy_coll_type_t type)
{
    return zcopy_coll_fallback(zc, type, "small rooted call, waits yield");
}

zcopy_status_t zcopy_server_run(zcopy_comm_t *zc, const zcopy_coll_args_t *a)
{
    zcopy_algo_t al = { .zc = zc, .ctl = zc->ctl, .a = a, .rank = zc->rank,
                        .nranks = zc->size, .copies.kind = a->type };
    size_t inline_total;
    coll_plan_t plan;
    zcopy_status_t st;
    int bad;

    if (zcopy_server_hands_over(zc, a))
        return zcopy_server_hand_over(zc, a->type);
    zcopy_coll_plan(zc, a, &plan);
    if (plan.args.reason != REASON_NONE) {
        /* Not eligible: say so and leave, waiting for nobody. */
        zcopy_ctl_decline(zc->ctl, plan.args.reason);
        return zcopy_coll_fallback(zc, a->type,
                                   zcopy_coll_reason_text[plan.args.reason]);
    }
    inline_total = zcopy_coll_inline_bytes(zc, a, zc->ctl->inline_limit);
    if (inline_total > 0)
        return server_run_inline(zc, a, &plan, inline_total);
    if (!zcopy_comm_hold(zc, zcopy_coll_holding_bytes(zc, a, plan.ssize))) {
        zcopy_ctl_decline(zc->ctl, REASON_SCRATCH);
        return zcopy_coll_fallback(zc, a->type,
                                   zcopy_coll_reason_text[REASON_SCRATCH]);
    }
    al.ssize = plan.ssize;
    al.rsize = plan.rsize;
    server_plan_root_moves(zc, a, &plan);
    al.seq = zcopy_ctl_publish(zc->ctl, &plan);
    /* While the arrival travels: fetch the peer data the last call read. */
    zcopy_ctl_prefetch_hints(zc->ctl);
    bad = zcopy_ctl_wait_arrivals(zc->ctl, al.seq, zcopy_coll_names[a->type]);
    if (bad >= 0)
        return server_fallback_peer(zc, a->type, bad, al.seq);
    if (a->type == ZCOPY_COLL_BARRIER) {
        zc->stats.zcopy_calls++;
        return ZCOPY_SUCCESS; /* arrival was the barrier */
    }
    /* A rank that could not reach a peer's memory: the algorithm either
     * left every input intact for the fallback (every rank learnt of it
     * at the same sync), or finished the call through the previous
     * component itself (in place, where inputs are already overwritten),
     * or moved the blocks it could not reach as messages between the two
     * ranks concerned (repair.c). */
    st = algorithms[a->type](&al);
    zcopy_copy_call_end(&al.copies);
    if (st == ZCOPY_SUCCESS || st == ZCOPY_REPAIRED)
        zc->stats.ipc_bytes += al.ipc_bytes;
    if (st == ZCOPY_SUCCESS) {
        zc->stats.zcopy_calls++;
        return ZCOPY_SUCCESS;
    }
    if (st == ZCOPY_FALLBACK || st == ZCOPY_REPAIRED) {
        zcopy_coll_fallback(zc, a->type, "a peer's memory could not be mapped");
        return st == ZCOPY_REPAIRED ? ZCOPY_SUCCESS : ZCOPY_FALLBACK;
    }
    return st;
}
