/*
 * Every collective enters here. A communicator is set up at its first
 * collective (the settings that change paths agreed, then the control
 * plane of its path built) and then each call goes down one of two paths:
 * server/ when all its ranks share a server, span/ when they do not. On
 * both, a rank is eligible when each of its buffers lies wholly in
 * activated memory, the datatypes are contiguous and the op can be reduced
 * (plan.c); the ranks agree on it when they arrive, before any data moves,
 * and then all run zero-copy or all fall back. (Where waits yield, small
 * rooted calls go to the previous component by a rule that every rank
 * applies alone: server/run.c.)
 */
#include "path.h"
#include "server/server.h"
#include "span/span.h"
#include "ucx/ucx.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

ZCOPY_COMPONENT_API const char *const zcopy_coll_names[ZCOPY_COLL_COUNT] = {
    [ZCOPY_COLL_ALLREDUCE] = "allreduce",
    [ZCOPY_COLL_REDUCE] = "reduce",
    [ZCOPY_COLL_REDUCE_SCATTER] = "reduce_scatter",
    [ZCOPY_COLL_REDUCE_SCATTER_BLOCK] = "reduce_scatter_block",
    [ZCOPY_COLL_ALLGATHER] = "allgather",
    [ZCOPY_COLL_ALLGATHERV] = "allgatherv",
    [ZCOPY_COLL_BCAST] = "bcast",
    [ZCOPY_COLL_GATHER] = "gather",
    [ZCOPY_COLL_GATHERV] = "gatherv",
    [ZCOPY_COLL_SCATTER] = "scatter",
    [ZCOPY_COLL_SCATTERV] = "scatterv",
    [ZCOPY_COLL_ALLTOALL] = "alltoall",
    [ZCOPY_COLL_ALLTOALLV] = "alltoallv",
    [ZCOPY_COLL_BARRIER] = "barrier",
};

/* Why a rank is not eligible; the same text reaches every rank's stats. */
const char *const zcopy_coll_reason_text[REASON_COUNT] = {
    [REASON_NONE] = "eligible",
    [REASON_SEND_BUFFER] = "send buffer not activated",
    [REASON_RECV_BUFFER] = "recv buffer not activated",
    [REASON_DATATYPE] = "non-contiguous datatype",
    [REASON_OP] = "op not supported",
    [REASON_LAYOUT] = "negative displacement",
    [REASON_SPAN_IN_PLACE] = "in place across servers",
    [REASON_UCX_BLOCK] = "buffer not inside one UCX-registered block",
    [REASON_SCRATCH] = "no memory for landing or scratch",
    [REASON_NOTHING_ACTIVATED] = "no memory activated on this rank",
};

/* --- running ------------------------------------------------------------- */

zcopy_status_t zcopy_coll_fallback(zcopy_comm_t *zc, zcopy_coll_type_t type,
                                   const char *why)
{
    zcopy_comm_count_fallback(zc, zcopy_coll_names[type], why);
    return ZCOPY_FALLBACK;
}

/* What changes the path or the number of steps of a collective: if ranks
 * disagreed on any of it, they would wait for each other in different
 * steps. Agreed once, at set-up, never trusted. */
enum {
    SETTING_OPTED_OUT,            /* info key mpix_zcopy */
    SETTING_TRANSPORT,
    SETTING_VIRTUAL_SERVERS,
    SETTING_SMALL_MSG,
    SETTING_INLINE_MAX,
    SETTING_SPAN_INLINE_MAX,
    SETTING_INLINE_MAX_YIELD,
    SETTING_SPAN_DISSEMINATION_MIN,
    SETTING_ROOTED_YIELD_MIN,
    SETTING_ONE_PER_SERVER_MIN,
    SETTING_ONE_PER_SERVER_MOVES,
    SETTING_UCX_FETCH,
    SETTING_UCX_PUSH_MIN,
    SETTING_UCX_PUSH_PART_MAX,
    SETTINGS
};

/* An idle communicator's next agreement is at most this many calls
 * away: it falls back without any exchange 63 times at most (coll_idle). */
#define COLL_IDLE_SKIP_MAX 64u
/* A string of its own, not disabled_reason: the statistics keep the last
 * fallback's reason by address, and a later set-up may rewrite that. */
static const char coll_idle_reason[] =
    "no rank had set a memory range at set-up";

static const char *const setting_names[SETTINGS] = {
    [SETTING_OPTED_OUT] = "info key mpix_zcopy",
    [SETTING_TRANSPORT] = "coll_zcopy_transport",
    [SETTING_VIRTUAL_SERVERS] = "coll_zcopy_virtual_servers",
    [SETTING_SMALL_MSG] = "coll_zcopy_small_msg",
    [SETTING_INLINE_MAX] = "coll_zcopy_inline_max",
    [SETTING_SPAN_INLINE_MAX] = "coll_zcopy_span_inline_max",
    [SETTING_INLINE_MAX_YIELD] = "coll_zcopy_inline_max_yield",
    [SETTING_SPAN_DISSEMINATION_MIN] = "coll_zcopy_span_dissemination_min",
    [SETTING_ROOTED_YIELD_MIN] = "coll_zcopy_rooted_yield_min",
    [SETTING_ONE_PER_SERVER_MIN] = "coll_zcopy_one_per_server_min",
    [SETTING_ONE_PER_SERVER_MOVES] = "coll_zcopy_one_per_server_moves",
    [SETTING_UCX_FETCH] = "coll_zcopy_ucx_fetch",
    [SETTING_UCX_PUSH_MIN] = "coll_zcopy_ucx_push_min",
    [SETTING_UCX_PUSH_PART_MAX] = "coll_zcopy_ucx_push_part_max",
};

static void settings_of_self(const zcopy_comm_t *zc, int64_t *v)
{
    v[SETTING_OPTED_OUT] = zc->opted_out;
    v[SETTING_TRANSPORT] = zcopy_config.transport;
    v[SETTING_VIRTUAL_SERVERS] = zcopy_config.virtual_servers;
    v[SETTING_SMALL_MSG] = (int64_t)zcopy_config.small_msg;
    /* As the limits they give: values above a record's capacity, or a
     * yield limit below the other, act alike. */
    v[SETTING_INLINE_MAX] = (int64_t)zcopy_ctl_inline_limit(false);
    v[SETTING_SPAN_INLINE_MAX] = (int64_t)zcopy_config.span_inline_max;
    v[SETTING_INLINE_MAX_YIELD] = (int64_t)zcopy_ctl_inline_limit(true);
    v[SETTING_SPAN_DISSEMINATION_MIN] = zcopy_config.span_dissemination_min;
    v[SETTING_ROOTED_YIELD_MIN] = (int64_t)zcopy_config.rooted_yield_min;
    v[SETTING_ONE_PER_SERVER_MIN] = (int64_t)zcopy_config.one_per_server_min;
    v[SETTING_ONE_PER_SERVER_MOVES] = zcopy_config.one_per_server_moves;
    /* A sender and its receiver must agree whether a block is pushed. */
    v[SETTING_UCX_FETCH] = zcopy_config.ucx_fetch;
    v[SETTING_UCX_PUSH_MIN] = (int64_t)zcopy_config.ucx_push_min;
    /* And where a large block's parts are cut. */
    v[SETTING_UCX_PUSH_PART_MAX] = (int64_t)zcopy_config.ucx_push_part_max;
}

/* ZCOPY_SUCCESS when every rank has the same settings and could allocate
 * what the set-up needs (@prepared); ZCOPY_ERR_UNSUPPORTED when a setting
 * differs (whatever else happened: a rank whose own settings say it
 * spans servers must not retry where another does), else
 * ZCOPY_ERR_NOMEM when a rank could not allocate; zc->disabled_reason
 * says why, the same on every rank. *@used: whether any rank has ever set
 * a memory range. One minimum over the ranks answers all of it: each
 * setting's least value, and its greatest (the least of its complement),
 * the first rank that could not allocate, and whether all are unused.
 * Allocates nothing, so that no rank can drop out of the exchange. */
static zcopy_status_t coll_agree_settings(zcopy_comm_t *zc,
                                          zcopy_status_t prepared, bool *used)
{
    int64_t v[2 * SETTINGS + 2];
    int worst = -1;

    settings_of_self(zc, v);
    for (int i = 0; i < SETTINGS; i++)
        v[SETTINGS + i] = ~v[i];
    v[2 * SETTINGS] = prepared == ZCOPY_SUCCESS ? INT64_MAX : zc->rank;
    v[2 * SETTINGS + 1] = !zcopy_registry_ever_used();
    *used = true;
    if (zc->ops.allreduce(v, 2 * SETTINGS + 2, MPI_INT64_T, MPI_MIN,
                          zc->ops.ctx) != MPI_SUCCESS) {
        snprintf(zc->disabled_reason, sizeof(zc->disabled_reason),
                 "settings exchange failed");
        goto disabled;
    }
    for (int i = 0; i < SETTINGS && worst < 0; i++)
        if (v[i] != ~v[SETTINGS + i])
            worst = i;
    if (worst >= 0) {
        snprintf(zc->disabled_reason, sizeof(zc->disabled_reason),
                 "%s differs between ranks", setting_names[worst]);
        goto disabled;
    }
    if (v[2 * SETTINGS] != INT64_MAX) {
        snprintf(zc->disabled_reason, sizeof(zc->disabled_reason),
                 "setup: out of memory on rank %d", (int)v[2 * SETTINGS]);
        return ZCOPY_ERR_NOMEM;
    }
    *used = v[2 * SETTINGS + 1] == 0;
    return ZCOPY_SUCCESS;

disabled:
    zcopy_log(ZCOPY_LOG_WARN, "coll", "rank %d: %s: zero-copy stays off "
              "on this communicator", zc->rank, zc->disabled_reason);
    return ZCOPY_ERR_UNSUPPORTED;
}

/* No rank had ever set a memory range (a job that does not use zcopy):
 * the set-up is put off, and the next calls fall back without any
 * exchange, as many as were made before this agreement less one, and 63
 * at most (0, 1, 3, 7 ... where nothing else ends the skips), so that such
 * a job pays one allreduce of the previous component per communicator,
 * and then one in that many calls (SPEC section 4). Every rank read the
 * same agreement and counts calls alike, so every rank skips the same
 * calls. Why "never set a range" and not "nothing activated": a rank
 * cannot tell the others when it leaves the idle state, so the skip must
 * end before any rank may become eligible, and activation needs a range.
 * A range set for the first time while a skip runs (the process's first
 * MPIX_Comm_set_memory_range on another communicator, or its first
 * MPI_Alloc_mem from the pool) is used late: by as many calls as were
 * made before the skip at most, and 63. MPIX_Comm_set_memory_range on
 * the communicator ends the skip, and so does a barrier that asks
 * (coll_idle_barrier_asks) once some rank has set a range
 * (coll_idle_barrier_ends_skip); a barrier that finds none starts the
 * skip again from its own call. */
static void coll_idle(zcopy_comm_t *zc)
{
    const uint64_t skip = zc->calls < COLL_IDLE_SKIP_MAX ? zc->calls
                                                          : COLL_IDLE_SKIP_MAX;

    zc->retry_at = zc->calls + skip;
    zc->state = ZCOPY_COMM_IDLE;
    zcopy_log(ZCOPY_LOG_DEBUG, "coll", "rank %d: no rank has set a memory "
              "range: set-up put off for %llu calls", zc->rank,
              (unsigned long long)skip - 1);
}

/* Which barriers of a skip ask coll_idle_barrier_ends_skip's question: of
 * a run of barriers with no other collective that reaches libzcopy between
 * them, the 1st, 2nd, 4th ... 64th; the others go straight to the
 * previous component's barrier, and past the 64th the skip's end asks
 * (every 64 calls). Asking costs an allreduce where stock runs a barrier:
 * osu_barrier in a job that never sets a range, np 2 on the AMD EPYC VM,
 * took 0.27 us when every barrier asked against tuned's 0.19 (0.70x). A
 * range set during such a run is used at its next barrier that asks, or
 * at the skip's end. Every rank counts the same calls, so every rank asks
 * at the same barriers. */
static bool coll_idle_barrier_asks(zcopy_comm_t *zc)
{
    const uint64_t k = ++zc->idle_barriers;

    return k <= COLL_IDLE_SKIP_MAX && (k & (k - 1)) == 0;
}

/* Whether a barrier during a skip (coll_idle) ends it: one minimum over
 * the ranks of "never set a range", which is the barrier where it does
 * not. The whole agreement (coll_setup) reduces 2 * SETTINGS + 2 words
 * and allocates the hellos first: run at every barrier of a job that
 * never sets a range, it made those barriers 1.45x slower than stock's
 * (osu_barrier, np 2, AMD EPYC VM, 2026-12-06: 0.68 against 0.47 us; 0.52
 * with this question). A failed exchange ends the skip, so that the
 * set-up's own exchange reports it (as there, every rank is assumed to
 * see the failure). */
static bool coll_idle_barrier_ends_skip(zcopy_comm_t *zc)
{
    int unused = !zcopy_registry_ever_used();

    if (zc->ops.allreduce(&unused, 1, MPI_INT, MPI_MIN, zc->ops.ctx) !=
        MPI_SUCCESS)
        return true;
    return unused == 0;
}

/* Lazy and collective: every rank reaches its first collective on the comm
 * in the same order, so every rank sets up together, through the previous
 * component's collectives. Tried again after running out of memory, and
 * while no rank has set a memory range (coll_idle). */
static zcopy_status_t coll_setup(zcopy_comm_t *zc)
{
    bool spans = zcopy_config.transport == ZCOPY_TRANSPORT_UCX, used;
    zcopy_status_t prepared = ZCOPY_SUCCESS, st;
    char why[sizeof(zc->disabled_reason)] = "";
    void *hellos = NULL;

    /* What the control plane needs, allocated before the agreement so
     * that it covers that too; nothing for a communicator that opted out
     * (opting out is agreed there as well). */
    if (!zc->opted_out)
        prepared = zcopy_comm_lists_alloc(zc);
    if (!zc->opted_out && !spans && prepared == ZCOPY_SUCCESS) {
        hellos = calloc((size_t)zc->size, zcopy_ctl_hello_bytes());
        prepared = hellos != NULL ? ZCOPY_SUCCESS : ZCOPY_ERR_NOMEM;
    }
    st = coll_agree_settings(zc, prepared, &used);
    if (st == ZCOPY_SUCCESS && zc->opted_out) {
        zc->state = ZCOPY_COMM_OPTED_OUT;
        return ZCOPY_ERR_UNSUPPORTED;
    }
    if (st == ZCOPY_ERR_UNSUPPORTED) {
        zc->state = ZCOPY_COMM_DISABLED;
        free(hellos);
        return st;
    }
    if (st == ZCOPY_SUCCESS && !used) {
        free(hellos);
        coll_idle(zc);
        return ZCOPY_ERR_UNSUPPORTED;
    }
    if (st == ZCOPY_SUCCESS && !spans)
        st = zcopy_ctl_create(zc, hellos, &zc->ctl, &spans, why,
                              sizeof(why));
    free(hellos);
    /* Every rank saw the same servers, so every rank takes this branch. */
    if (st != ZCOPY_ERR_NOMEM && spans &&
        zcopy_config.transport != ZCOPY_TRANSPORT_IPC)
        st = zcopy_span_create(zc, &zc->span, why, sizeof(why));
    /* disabled_reason changes only on failure (the control plane writes
     * "spans servers" before the spanning path succeeds): the statistics
     * may point at it as the reason of the fallbacks before this set-up. */
    if (st != ZCOPY_SUCCESS && why[0] != '\0')
        memcpy(zc->disabled_reason, why, sizeof(why));
    zc->state = st == ZCOPY_SUCCESS ? ZCOPY_COMM_READY : ZCOPY_COMM_DISABLED;
    /* Out of memory passes: every rank saw the same status, agreed above
     * or in zcopy_ctl_create, and counts collectives alike, so all try
     * again together, after twice as many collectives each time. */
    if (st == ZCOPY_ERR_NOMEM && !spans) {
        zc->state = ZCOPY_COMM_RETRY;
        zc->retry_at = zc->calls + (UINT64_C(1) << (zc->setups < 20
                                                        ? zc->setups : 20));
    }
    zc->setups++;
    zcopy_log(ZCOPY_LOG_INFO, "coll", "rank %d of %d: zero-copy %s%s%s",
              zc->rank, zc->size, st == ZCOPY_SUCCESS ? "on" : "off",
              st != ZCOPY_SUCCESS ? ": " : zc->span ? " (across servers)" : "",
              st != ZCOPY_SUCCESS ? zc->disabled_reason : "");
    return st;
}

ZCOPY_COMPONENT_API int zcopy_coll_progress(void)
{
    zcopy_ipc_sweep_try();
    zcopy_ipc_fdpass_serve(false);
    return (int)zcopy_ucx_progress_loop();
}

ZCOPY_COMPONENT_API void zcopy_coll_disconnect(void)
{
    /* A receive still posted would wait for a message whose connection
     * is about to close. */
    zcopy_comm_drain_all();
    zcopy_ucx_disconnect();
}

void zcopy_coll_range_set(zcopy_comm_t *zc)
{
    /* Collective on @zc: every rank ends its skip at the same call. */
    if (zc->state == ZCOPY_COMM_IDLE)
        zc->state = ZCOPY_COMM_NEW;
    zc->idle_barriers = 0;
}

ZCOPY_COMPONENT_API bool zcopy_coll_decline_idle(zcopy_comm_t *zc,
                                                 zcopy_coll_type_t type,
                                                 size_t scount,
                                                 MPI_Datatype stype,
                                                 size_t rcount,
                                                 MPI_Datatype rtype, int root)
{
    zcopy_coll_args_t a;

    /* Inside an idle communicator's skip, what zcopy_coll_run would do:
     * a job that has set no memory range pays this per call. */
    if (zc->state == ZCOPY_COMM_IDLE && zc->calls + 1 < zc->retry_at) {
        zcopy_ipc_sweep();
        zc->calls++;
        zc->idle_barriers = 0;
        zcopy_coll_fallback(zc, type, coll_idle_reason);
        return true;
    }
    if (zc->state != ZCOPY_COMM_READY || zc->span != NULL ||
        zcopy_registry_any_activated() ||
        !zcopy_coll_surely_has_data(zc, type, scount, rcount, root))
        return false;
    /* What zcopy_coll_run would have done before its own decline. */
    zcopy_ipc_sweep();
    zc->calls++;
    /* The others hand such a call over without a step: no decline. */
    a = (zcopy_coll_args_t){ .type = type, .scount = scount, .stype = stype,
                             .rcount = rcount, .rtype = rtype, .root = root };
    if (zcopy_server_hands_over(zc, &a)) {
        zcopy_server_hand_over(zc, type);
        return true;
    }
    zcopy_ctl_decline(zc->ctl, REASON_NOTHING_ACTIVATED);
    zcopy_coll_fallback(zc, type,
                        zcopy_coll_reason_text[REASON_NOTHING_ACTIVATED]);
    return true;
}

ZCOPY_COMPONENT_API zcopy_status_t zcopy_coll_run(zcopy_comm_t *zc,
                                                  const zcopy_coll_args_t *a)
{
    /* Peers' deactivated blocks are unmapped at every collective, on any
     * communicator (SPEC section 3), and before any peer memory is touched. */
    zcopy_ipc_sweep();
    zc->calls++;
    if (a->type != ZCOPY_COLL_BARRIER)
        zc->idle_barriers = 0;
    if (zc->state == ZCOPY_COMM_RETRY && zc->calls >= zc->retry_at)
        zc->state = ZCOPY_COMM_NEW;
    if (zc->state == ZCOPY_COMM_IDLE && a->type == ZCOPY_COLL_BARRIER &&
        zc->calls < zc->retry_at) {
        /* Not asking: the previous component runs this barrier. */
        if (!coll_idle_barrier_asks(zc))
            return zcopy_coll_fallback(zc, a->type, coll_idle_reason);
        if (!coll_idle_barrier_ends_skip(zc)) {
            /* The probe's minimum needed every rank's word: it was the
             * barrier, which the previous component need not run again. */
            coll_idle(zc);
            zcopy_coll_fallback(zc, a->type, coll_idle_reason);
            return ZCOPY_SUCCESS;
        }
    }
    if (zc->state == ZCOPY_COMM_IDLE &&
        (zc->calls >= zc->retry_at || a->type == ZCOPY_COLL_BARRIER))
        zc->state = ZCOPY_COMM_NEW;
    if (zc->state == ZCOPY_COMM_NEW &&
        coll_setup(zc) == ZCOPY_ERR_UNSUPPORTED &&
        zc->state == ZCOPY_COMM_IDLE && a->type == ZCOPY_COLL_BARRIER) {
        /* As above: the agreement was the barrier. */
        zcopy_coll_fallback(zc, a->type, coll_idle_reason);
        return ZCOPY_SUCCESS;
    }
    if (zc->state == ZCOPY_COMM_OPTED_OUT)
        return ZCOPY_FALLBACK; /* forwarded, uncounted */
    if (zc->state == ZCOPY_COMM_IDLE)
        return zcopy_coll_fallback(zc, a->type, coll_idle_reason);
    if (zc->state != ZCOPY_COMM_READY)
        return zcopy_coll_fallback(zc, a->type, zc->disabled_reason);
    if (zc->span != NULL)
        return zcopy_span_run(zc, a);
    return zcopy_server_run(zc, a);
}
