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
typedef struct {
    uint32_t opted_out;           /* info key mpix_zcopy */
    uint32_t transport;           /* coll_zcopy_transport */
    uint32_t virtual_servers;     /* coll_zcopy_virtual_servers */
    uint32_t span_dissemination_min; /* coll_zcopy_span_dissemination_min */
    uint64_t small_msg;           /* coll_zcopy_small_msg */
    uint64_t inline_max;          /* coll_zcopy_inline_max */
    uint64_t inline_max_yield;    /* coll_zcopy_inline_max_yield */
    uint64_t span_inline_max;     /* coll_zcopy_span_inline_max */
    uint64_t rooted_yield_min;    /* coll_zcopy_rooted_yield_min */
    uint64_t one_per_server_min;  /* coll_zcopy_one_per_server_min */
} coll_settings_t;

static const char *const setting_names[] = {
    NULL, "info key mpix_zcopy", "coll_zcopy_transport",
    "coll_zcopy_virtual_servers", "coll_zcopy_small_msg",
    "coll_zcopy_inline_max", "coll_zcopy_span_inline_max",
    "coll_zcopy_inline_max_yield", "coll_zcopy_span_dissemination_min",
    "coll_zcopy_rooted_yield_min", "coll_zcopy_one_per_server_min",
};

/* 0 when @mine matches rank 0's settings, else which one differs first. */
static int32_t settings_differ(const coll_settings_t *mine,
                               const coll_settings_t *root)
{
    if (mine->opted_out != root->opted_out)
        return 1;
    if (mine->transport != root->transport)
        return 2;
    if (mine->virtual_servers != root->virtual_servers)
        return 3;
    if (mine->small_msg != root->small_msg)
        return 4;
    if (mine->inline_max != root->inline_max)
        return 5;
    if (mine->span_inline_max != root->span_inline_max)
        return 6;
    if (mine->inline_max_yield != root->inline_max_yield)
        return 7;
    if (mine->span_dissemination_min != root->span_dissemination_min)
        return 8;
    if (mine->rooted_yield_min != root->rooted_yield_min)
        return 9;
    return mine->one_per_server_min != root->one_per_server_min ? 10 : 0;
}

/* True when every rank has the same settings (and then zc->state says
 * whether the comm opted out); false, with the comm disabled on every rank
 * for the same reason, when not. Allocates nothing, so that no rank can
 * drop out of the exchange. */
static bool coll_agree_settings(zcopy_comm_t *zc)
{
    const coll_settings_t mine = {
        .opted_out = zc->opted_out,
        .transport = (uint32_t)zcopy_config.transport,
        .virtual_servers = (uint32_t)zcopy_config.virtual_servers,
        .small_msg = zcopy_config.small_msg,
        /* As the limits they give: values above a record's capacity, or
         * a yield limit below the other, act alike. */
        .inline_max = zcopy_ctl_inline_limit(false),
        .inline_max_yield = zcopy_ctl_inline_limit(true),
        .span_inline_max = zcopy_config.span_inline_max,
        .span_dissemination_min =
            (uint32_t)zcopy_config.span_dissemination_min,
        .rooted_yield_min = zcopy_config.rooted_yield_min,
        .one_per_server_min = zcopy_config.one_per_server_min,
    };
    coll_settings_t root = mine;
    zcopy_comm_vote_t vote;
    int32_t differ, worst;

    /* A rank whose bcast failed says so in its own vote, so that every
     * rank stops here, not only those that saw the failure. */
    differ = zc->ops.bcast(&root, sizeof(root), 0, zc->ops.ctx) != MPI_SUCCESS
                 ? -1 : settings_differ(&mine, &root);
    if (zcopy_comm_vote(zc, differ, false, &vote) != MPI_SUCCESS)
        worst = -1;
    else
        worst = vote.value >= -1 &&
                        vote.value < (int32_t)(sizeof(setting_names) /
                                               sizeof(setting_names[0]))
                    ? vote.value : -1;
    if (worst != 0) {
        snprintf(zc->disabled_reason, sizeof(zc->disabled_reason), "%s",
                 worst < 0 ? "settings exchange failed"
                           : setting_names[worst]);
        if (worst > 0)
            strncat(zc->disabled_reason, " differs between ranks",
                    sizeof(zc->disabled_reason) -
                        strlen(zc->disabled_reason) - 1);
        zcopy_log(ZCOPY_LOG_WARN, "coll", "rank %d: %s: zero-copy stays off "
                  "on this communicator", zc->rank, zc->disabled_reason);
        zc->state = ZCOPY_COMM_DISABLED;
        return false;
    }
    if (mine.opted_out)
        zc->state = ZCOPY_COMM_OPTED_OUT;
    return true;
}

/* Lazy and collective: every rank reaches its first collective on the comm
 * in the same order, so every rank sets up together, through the previous
 * component's collectives. Retried only after running out of memory. */
static zcopy_status_t coll_setup(zcopy_comm_t *zc)
{
    bool spans = zcopy_config.transport == ZCOPY_TRANSPORT_UCX;
    zcopy_status_t st = ZCOPY_ERR_UNSUPPORTED;

    if (!coll_agree_settings(zc) || zc->state == ZCOPY_COMM_OPTED_OUT)
        return ZCOPY_ERR_UNSUPPORTED;
    if (!spans)
        st = zcopy_ctl_create(zc, &zc->ctl, &spans, zc->disabled_reason,
                              sizeof(zc->disabled_reason));
    /* Every rank saw the same servers, so every rank takes this branch. */
    if (spans && zcopy_config.transport != ZCOPY_TRANSPORT_IPC)
        st = zcopy_span_create(zc, &zc->span, zc->disabled_reason,
                               sizeof(zc->disabled_reason));
    zc->state = st == ZCOPY_SUCCESS ? ZCOPY_COMM_READY : ZCOPY_COMM_DISABLED;
    if (st == ZCOPY_SUCCESS)
        zc->disabled_reason[0] = '\0';
    /* Out of memory passes: every rank of a server saw the same status,
     * agreed in zcopy_ctl_create, and counts collectives alike, so all
     * try again together, after twice as many collectives each time. */
    if (st == ZCOPY_ERR_NOMEM && !spans) {
        zc->state = ZCOPY_COMM_RETRY;
        zc->retry_at = zc->calls + (UINT64_C(1) << (zc->setups < 20
                                                        ? zc->setups : 20));
    }
    zc->setups++;
    zcopy_log(ZCOPY_LOG_INFO, "coll", "rank %d of %d: zero-copy %s%s%s",
              zc->rank, zc->size, st == ZCOPY_SUCCESS ? "on" : "off",
              st != ZCOPY_SUCCESS ? ": " : zc->span ? " (across servers)" : "",
              zc->disabled_reason);
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
    zcopy_span_wake(zc);
}

ZCOPY_COMPONENT_API bool zcopy_coll_decline_idle(zcopy_comm_t *zc,
                                                 zcopy_coll_type_t type,
                                                 size_t scount,
                                                 MPI_Datatype stype,
                                                 size_t rcount,
                                                 MPI_Datatype rtype, int root)
{
    zcopy_coll_args_t a;

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
    if (zc->state == ZCOPY_COMM_RETRY && zc->calls >= zc->retry_at)
        zc->state = ZCOPY_COMM_NEW;
    if (zc->state == ZCOPY_COMM_NEW)
        coll_setup(zc);
    if (zc->state == ZCOPY_COMM_OPTED_OUT)
        return ZCOPY_FALLBACK; /* forwarded, uncounted */
    if (zc->state != ZCOPY_COMM_READY)
        return zcopy_coll_fallback(zc, a->type, zc->disabled_reason);
    if (zc->span != NULL)
        return zcopy_span_run(zc, a);
    return zcopy_server_run(zc, a);
}
