/* Per-communicator state: creation, lookup by MPI handle, statistics. */
#include "comm.h"

#include "coll/server/control.h"
#include "coll/span/span.h"
#include "ipc/ipc.h"

#include <pthread.h>
#include <stdio.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* MPIX_Zcopy_get_stats(comm) must find the state the component created for
 * comm; the public MPI handle is the only key both sides have. */
static struct {
    pthread_mutex_t lock;
    zcopy_comm_t *head;
} comms = { .lock = PTHREAD_MUTEX_INITIALIZER };

/* Per thread because an internal MPI call belongs to the thread making it.
 * Initial-exec, and read by the component inline (comm.h): one load from
 * the thread pointer on every collective, where the default model calls
 * __tls_get_addr (libzcopy is loaded with the program or with the MPI
 * component, early enough for static TLS). */
ZCOPY_COMPONENT_API _Thread_local int zcopy_internal_depth
    __attribute__((tls_model("initial-exec")));

ZCOPY_COMPONENT_API zcopy_status_t zcopy_comm_create(MPI_Comm handle, int rank, int size,
                                 const zcopy_comm_ops_t *ops,
                                 zcopy_comm_t **zc_p)
{
    zcopy_comm_t *zc = calloc(1, sizeof(*zc));

    if (zc == NULL)
        return zcopy_error(ZCOPY_ERR_NOMEM, "communicator state: out of memory");
    zc->handle = handle;
    zc->rank = rank;
    zc->size = size;
    zc->ops = *ops;
    pthread_mutex_lock(&comms.lock);
    zc->next = comms.head;
    comms.head = zc;
    pthread_mutex_unlock(&comms.lock);
    *zc_p = zc;
    return ZCOPY_SUCCESS;
}

ZCOPY_COMPONENT_API void zcopy_comm_destroy(zcopy_comm_t *zc)
{
    zcopy_comm_t **pp;

    if (zc == NULL)
        return;
    pthread_mutex_lock(&comms.lock);
    for (pp = &comms.head; *pp && *pp != zc; pp = &(*pp)->next)
        ;
    if (*pp)
        *pp = zc->next;
    pthread_mutex_unlock(&comms.lock);
    zcopy_ctl_destroy(zc->ctl);
    zcopy_span_destroy(zc->span);
    /* SPEC 3: no peer's freed pages outlive this MPI_Comm_free either. */
    zcopy_ipc_sweep();
    free(zc->plan_memo);
    free(zc->lists);
    free(zc->holding);
    free(zc);
}

bool zcopy_comm_hold(zcopy_comm_t *zc, size_t len)
{
    void *p;

    if (len <= zc->holding_len)
        return true;
    /* Lines of its own, like the buffers it stands in for. */
    p = aligned_alloc(ZCOPY_CACHE_LINE,
                      (len + ZCOPY_CACHE_LINE - 1) & ~(size_t)(ZCOPY_CACHE_LINE - 1));
    if (p == NULL)
        return false;
    free(zc->holding);
    zc->holding = p;
    zc->holding_len = len;
    return true;
}

zcopy_status_t zcopy_comm_lists_alloc(zcopy_comm_t *zc)
{
    if (zc->lists == NULL)
        zc->lists = calloc((size_t)ZCOPY_COMM_LISTS * (size_t)zc->size,
                           sizeof(void *));
    return zc->lists != NULL ? ZCOPY_SUCCESS : ZCOPY_ERR_NOMEM;
}

int zcopy_comm_vote(zcopy_comm_t *zc, int32_t value, unsigned flags,
                    zcopy_comm_vote_t *vote)
{
    /* Minima of: the rank and value of a rank that has one (ranks with
     * none count as INT64_MAX), so the first such rank wins; and of each
     * flag negated, which is the flags' OR. */
    int64_t v[1 + ZCOPY_COMM_VOTE_FLAGS] = {
        value == 0 ? INT64_MAX
                   : (int64_t)zc->rank << 32 | (int64_t)(uint32_t)value,
    };
    int rc;

    assert(flags >> ZCOPY_COMM_VOTE_FLAGS == 0);
    for (int f = 0; f < ZCOPY_COMM_VOTE_FLAGS; f++)
        v[1 + f] = (flags & (1u << f)) != 0 ? -1 : 0;
    rc = zc->ops.allreduce(v, 1 + ZCOPY_COMM_VOTE_FLAGS, MPI_INT64_T, MPI_MIN,
                           zc->ops.ctx);
    if (rc != MPI_SUCCESS)
        return rc;
    vote->rank = v[0] == INT64_MAX ? -1 : (int)(v[0] >> 32);
    vote->value = v[0] == INT64_MAX ? 0 : (int32_t)(uint32_t)v[0];
    vote->any = 0;
    for (int f = 0; f < ZCOPY_COMM_VOTE_FLAGS; f++)
        if (v[1 + f] != 0)
            vote->any |= 1u << f;
    return MPI_SUCCESS;
}

ZCOPY_COMPONENT_API zcopy_comm_t *zcopy_comm_lookup(MPI_Comm handle)
{
    zcopy_comm_t *zc;

    pthread_mutex_lock(&comms.lock);
    for (zc = comms.head; zc && zc->handle != handle; zc = zc->next)
        ;
    pthread_mutex_unlock(&comms.lock);
    return zc;
}

void zcopy_comm_drain_all(void)
{
    pthread_mutex_lock(&comms.lock);
    for (zcopy_comm_t *zc = comms.head; zc; zc = zc->next)
        if (zc->span != NULL)
            zcopy_span_plane_drain(zc->span);
    pthread_mutex_unlock(&comms.lock);
}

void zcopy_comm_count_fallback(zcopy_comm_t *zc, const char *coll,
                               const char *why)
{
    zc->stats.fallback_calls++;
    zc->fallback_coll = coll;
    zc->fallback_why = why;
    zcopy_log(ZCOPY_LOG_DEBUG, "coll", "rank %d: fallback: %s: %s", zc->rank,
              coll, why);
}

ZCOPY_COMPONENT_API void zcopy_comm_get_stats(const zcopy_comm_t *zc,
                                              MPIX_Zcopy_stats *stats)
{
    *stats = zc->stats;           /* its inline_max stays 0 */
    if (zc->ctl != NULL) {
        stats->ctl_msgs += zc->ctl->sent_msgs;
        stats->ctl_bytes += zc->ctl->sent_bytes;
        stats->inline_max = zc->ctl->inline_limit;
    } else if (zc->span != NULL) {
        stats->inline_max = zcopy_config.span_inline_max;
    }
    if (zc->fallback_coll != NULL)
        snprintf(stats->last_fallback_reason,
                 sizeof(stats->last_fallback_reason), "%s: %s",
                 zc->fallback_coll, zc->fallback_why);
}
