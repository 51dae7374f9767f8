/*
 * The process's UCX context and worker: created on first use, progressed by
 * every wait, destroyed by zcopy_ucx_cleanup() or at exit.
 */
#include "host/progress.h"
#include "ucx_int.h"

#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

zcopy_ucx_state_t zcopy_ucx = { .lock = PTHREAD_MUTEX_INITIALIZER };
_Atomic bool zcopy_ucx_live;

/* Why the first init failed, for every later caller. */
static char init_failure[192];

/* Polls with nothing to do before each further one yields the processor:
 * long enough that a peer's reply on a core of its own arrives while we
 * spin, short enough that an oversubscribed peer gets our core soon. */
#define UCX_SPINS_BEFORE_YIELD 64

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

zcopy_status_t zcopy_ucx_error(ucs_status_t status, const char *fmt, ...)
{
    zcopy_status_t st;
    char what[192];
    va_list ap;

    switch (status) {
    case UCS_ERR_NO_MEMORY:
    case UCS_ERR_NO_RESOURCE:
    case UCS_ERR_EXCEEDS_LIMIT:
        st = ZCOPY_ERR_NOMEM;
        break;
    case UCS_ERR_UNSUPPORTED:
    case UCS_ERR_UNREACHABLE:
    case UCS_ERR_NO_DEVICE:
        st = ZCOPY_ERR_UNSUPPORTED;
        break;
    case UCS_ERR_INVALID_PARAM:
    case UCS_ERR_INVALID_ADDR:
        st = ZCOPY_ERR_ARG;
        break;
    default:
        st = ZCOPY_ERR_SYSTEM;    /* transport or peer failures */
        break;
    }
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    return zcopy_error(st, "%s: %s", what, ucs_status_string(status));
}

bool zcopy_ucx_info_names_rma(zcopy_ucx_print_fn_t print, void *obj,
                              const char *mark, const char *sep, bool unknown)
{
    char rc[16], dc[16], *text = NULL, *line, *save = NULL;
    size_t len = 0;
    bool network = false;
    FILE *f = open_memstream(&text, &len);

    if (f == NULL)
        return unknown;
    print(obj, f);
    fclose(f);
    snprintf(rc, sizeof(rc), "%src_", sep);
    snprintf(dc, sizeof(dc), "%sdc_", sep);
    for (line = text ? strtok_r(text, "\n", &save) : NULL;
         line != NULL && !network; line = strtok_r(NULL, "\n", &save))
        network = strstr(line, mark) != NULL &&
                  (strstr(line, rc) != NULL || strstr(line, dc) != NULL);
    free(text);
    return network;
}

static void ucx_print_context(void *context, FILE *f)
{
    ucp_context_print_info(context, f);
}

/* The context's resources ("resource 3 : md 2 dev 3 flags -- rc_mlx5/...");
 * where they cannot be printed, as if it had one, which only forgoes
 * pushes. */
static bool ucx_has_rma_network(ucp_context_h context)
{
    return zcopy_ucx_info_names_rma(ucx_print_context, context, "resource",
                                    "-- ", true);
}

/* UCX's configuration, with one default of ours: tagged messages go eager
 * at every size (RNDV_THRESH inf) unless the environment says otherwise
 * (a ucx.conf setting is overridden: 1.13 gives no way to tell it apart).
 * Every tagged receive here is posted before its sender is asked to send
 * (served reads) or carries at most a control plane's round, so eager never
 * buffers much; rendezvous would add a round trip through the target's
 * progress to each of them, and on tcp in UCX 1.13 a pipeline of emulated
 * gets: 2x slower from 32 KiB up on the emulated cluster (src/ucx/README.md,
 * "Eager tagged messages"). */
static ucs_status_t ucx_read_config(ucp_config_t **config)
{
    ucs_status_t us = ucp_config_read(NULL, NULL, config);

    if (us != UCS_OK || getenv("UCX_RNDV_THRESH") != NULL)
        return us;
    /* A speed default must not cost the transport: a UCX that refuses
     * the key or the value runs with its own default. */
    if (ucp_config_modify(*config, "RNDV_THRESH", "inf") != UCS_OK)
        zcopy_log(ZCOPY_LOG_WARN, "ucx", "UCX refused RNDV_THRESH=inf; "
                  "tagged messages keep UCX's rendezvous threshold");
    return UCS_OK;
}

zcopy_status_t zcopy_ucx_init_locked(void)
{
    /* RMA for the data, tagged messages for the control plane between
     * servers and for reads served by their target (serve.c), active
     * messages for read requests. The emulation of put/get over active messages is internal
     * to UCX and needs no UCP_FEATURE_AM from us (verified on 1.13.1). */
    ucp_params_t params = {
        .field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_NAME,
        .features   = UCP_FEATURE_RMA | UCP_FEATURE_TAG | UCP_FEATURE_AM,
        .name       = "zcopy",
    };
    ucp_worker_params_t worker_params = {
        .field_mask  = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
        .thread_mode = UCS_THREAD_MODE_SERIALIZED, /* see ucx.h, Threads */
    };
    ucp_context_attr_t attr = { .field_mask = UCP_ATTR_FIELD_MEMORY_TYPES };
    ucp_config_t *config;
    ucs_status_t us;
    zcopy_status_t st;

    if (zcopy_ucx.state == UCX_STATE_LIVE)
        return ZCOPY_SUCCESS;
    if (zcopy_ucx.state == UCX_STATE_FAILED)
        return zcopy_error(zcopy_ucx.init_status, "%s", init_failure);

    us = ucx_read_config(&config);
    if (us != UCS_OK) {
        st = zcopy_ucx_error(us, "ucx: reading its configuration");
        goto err;
    }
    us = ucp_init(&params, config, &zcopy_ucx.context);
    ucp_config_release(config);
    if (us != UCS_OK) {
        st = zcopy_ucx_error(us, "ucx: ucp_init");
        goto err;
    }
    us = ucp_context_query(zcopy_ucx.context, &attr);
    if (us != UCS_OK) {
        st = zcopy_ucx_error(us, "ucx: ucp_context_query");
        goto err_cleanup_context;
    }
    us = ucp_worker_create(zcopy_ucx.context, &worker_params,
                           &zcopy_ucx.worker);
    if (us != UCS_OK) {
        st = zcopy_ucx_error(us, "ucx: ucp_worker_create");
        goto err_cleanup_context;
    }
    us = ucp_worker_get_address(zcopy_ucx.worker, &zcopy_ucx.address,
                                &zcopy_ucx.address_len);
    if (us != UCS_OK) {
        st = zcopy_ucx_error(us, "ucx: ucp_worker_get_address");
        goto err_destroy_worker;
    }
    st = zcopy_ucx_serve_init_locked();
    if (st != ZCOPY_SUCCESS)
        goto err_release_address;
    zcopy_ucx.memory_types = attr.memory_types;
    zcopy_ucx.rma_network = ucx_has_rma_network(zcopy_ucx.context);
    zcopy_ucx.state = UCX_STATE_LIVE;
    atomic_store_explicit(&zcopy_ucx_live, true, memory_order_relaxed);
    /* Peers' emulated gets and puts need this worker even while the rank
     * sits in another MPI call. */
    zcopy_host_want_progress();
    zcopy_log(ZCOPY_LOG_INFO, "ucx",
              "UCX %s: context and worker ready (address of %zu bytes)",
              ucp_get_version_string(), zcopy_ucx.address_len);
    return ZCOPY_SUCCESS;

err_release_address:
    ucp_worker_release_address(zcopy_ucx.worker, zcopy_ucx.address);
    zcopy_ucx.address = NULL;
err_destroy_worker:
    ucp_worker_destroy(zcopy_ucx.worker);
    zcopy_ucx.worker = NULL;
err_cleanup_context:
    ucp_cleanup(zcopy_ucx.context);
    zcopy_ucx.context = NULL;
err:
    /* Decided here, once: later callers get the same answer silently. */
    zcopy_ucx.state = UCX_STATE_FAILED;
    zcopy_ucx.init_status = st;
    snprintf(init_failure, sizeof(init_failure), "%s", zcopy_error_detail());
    zcopy_log(ZCOPY_LOG_WARN, "ucx", "UCX unavailable, no transfers between "
              "servers: %s", init_failure);
    return st;
}

bool zcopy_ucx_rma_network(void)
{
    return zcopy_ucx.state == UCX_STATE_LIVE && zcopy_ucx.rma_network;
}

zcopy_status_t zcopy_ucx_init(void)
{
    zcopy_status_t st;

    pthread_mutex_lock(&zcopy_ucx.lock);
    st = zcopy_ucx_init_locked();
    pthread_mutex_unlock(&zcopy_ucx.lock);
    return st;
}

/* @flush: close endpoints in flush mode (peers progressing). Without it
 * (at exit, when peers may be gone) the endpoints are left to
 * ucp_worker_destroy, which releases them without waiting for anyone. */
static void cleanup_locked(bool flush)
{
    if (zcopy_ucx.state != UCX_STATE_LIVE) {
        zcopy_ucx.state = UCX_STATE_NONE;   /* a failed init may be retried */
        return;
    }
    atomic_store_explicit(&zcopy_ucx_live, false, memory_order_relaxed);
    if (zcopy_ucx.neps > 0 || zcopy_ucx.mems != NULL)
        zcopy_log(ZCOPY_LOG_DEBUG, "ucx", "cleanup: %zu endpoints and %zu "
                  "registrations still in use", zcopy_ucx.neps,
                  zcopy_ucx.nmems);
    while (zcopy_ucx.neps > 0)
        zcopy_ucx_ep_close_locked(zcopy_ucx.eps[zcopy_ucx.neps - 1], flush);
    free(zcopy_ucx.eps);
    zcopy_ucx.eps = NULL;
    zcopy_ucx.cap_eps = 0;
    ucp_worker_release_address(zcopy_ucx.worker, zcopy_ucx.address);
    zcopy_ucx.address = NULL;
    zcopy_ucx.address_len = 0;
    ucp_worker_destroy(zcopy_ucx.worker);
    zcopy_ucx.worker = NULL;
    zcopy_ucx_serve_cleanup_locked();
    /* After the worker: a served read's send may still hold one. */
    while (zcopy_ucx.mems != NULL)
        zcopy_ucx_mem_release_locked(zcopy_ucx.mems);
    ucp_cleanup(zcopy_ucx.context);
    zcopy_ucx.context = NULL;
    zcopy_ucx.state = UCX_STATE_NONE;
}

void zcopy_ucx_cleanup(void)
{
    pthread_mutex_lock(&zcopy_ucx.lock);
    cleanup_locked(true);
    pthread_mutex_unlock(&zcopy_ucx.lock);
}

/* A process that never called zcopy_ucx_cleanup() (MPI_Finalize without
 * it, exit from anywhere) still releases UCX's shared-memory segments.
 * libucp's own destructors run after this one (it is our dependency). */
__attribute__((destructor)) static void ucx_at_exit(void)
{
    if (pthread_mutex_trylock(&zcopy_ucx.lock) != 0)
        return;                   /* exit from inside a call: leave it */
    cleanup_locked(false);
    pthread_mutex_unlock(&zcopy_ucx.lock);
}

zcopy_status_t zcopy_ucx_worker_address(const void **address_p,
                                        size_t *len_p)
{
    zcopy_status_t st;

    if (address_p == NULL || len_p == NULL)
        return zcopy_error(ZCOPY_ERR_ARG, "ucx: worker address: NULL output");
    pthread_mutex_lock(&zcopy_ucx.lock);
    st = zcopy_ucx_init_locked();
    if (st == ZCOPY_SUCCESS) {
        *address_p = zcopy_ucx.address;
        *len_p = zcopy_ucx.address_len;
    }
    pthread_mutex_unlock(&zcopy_ucx.lock);
    return st;
}

unsigned zcopy_ucx_progress_worker(void)
{
    unsigned events = 0;

    /* Busy means another thread is inside the layer, progressing or about
     * to: our spin loop loses nothing by skipping this poll. */
    if (pthread_mutex_trylock(&zcopy_ucx.lock) != 0)
        return 0;
    if (zcopy_ucx.state == UCX_STATE_LIVE)
        events = zcopy_ucx_worker_progress_locked();
    pthread_mutex_unlock(&zcopy_ucx.lock);
    return events;
}

/* Open MPI's progress loop runs once per progress call of every MPI
 * operation, and on tcp a worker poll there is an epoll_wait system call:
 * 1.3 us on the AMD EPYC VM, against 1.6 us for the rest of a stock
 * progress call, which slowed stock's small collectives that zcopy hands
 * over between servers. The loop only serves peers while this process is
 * outside libzcopy's own waits (which poll on every spin), so once
 * LOOP_EMPTY_POLLS_BEFORE_IDLE polls in a row have found nothing it polls
 * at most once per LOOP_IDLE_POLL_NS: a time, not a count of calls, so
 * that a loop whose passes are slow (yielding the processor, or Open MPI's
 * fence at finalize) still polls on every pass. Any poll that finds an
 * event, the waits' included, ends the idle spell. */
#define LOOP_EMPTY_POLLS_BEFORE_IDLE 8
#define LOOP_IDLE_POLL_NS 20000

/* Relaxed loads and stores, not read-modify-writes, for the idle clock:
 * threads that race poll once more or once less, never stop polling. */
unsigned zcopy_ucx_progress_loop(void)
{
    unsigned events = 0, empty;
    uint64_t t;

    if (!atomic_load_explicit(&zcopy_ucx_live, memory_order_relaxed))
        return 0;
    if (atomic_load_explicit(&zcopy_ucx.loop_empty_polls,
                             memory_order_relaxed) >=
        LOOP_EMPTY_POLLS_BEFORE_IDLE) {
        t = zcopy_now_ns();
        if (t < atomic_load_explicit(&zcopy_ucx.loop_next_poll_ns,
                                     memory_order_relaxed))
            return 0;
        atomic_store_explicit(&zcopy_ucx.loop_next_poll_ns,
                              t + LOOP_IDLE_POLL_NS, memory_order_relaxed);
    }
    /* Busy: its holder is progressing the worker; not an empty poll. */
    if (pthread_mutex_trylock(&zcopy_ucx.lock) != 0)
        return 0;
    if (zcopy_ucx.state == UCX_STATE_LIVE) {
        events = zcopy_ucx_worker_progress_locked();
        empty = atomic_load_explicit(&zcopy_ucx.loop_empty_polls,
                                     memory_order_relaxed);
        if (events == 0 && empty < UINT_MAX)
            atomic_store_explicit(&zcopy_ucx.loop_empty_polls, empty + 1,
                                  memory_order_relaxed);
    }
    pthread_mutex_unlock(&zcopy_ucx.lock);
    return events;
}

/* MPI's progress rule holds in UCX waits too: the MPI library's progress
 * engine runs every few idle spins (its own call back into this worker only
 * try-locks, so it is harmless while the caller holds the layer). */
void zcopy_ucx_backoff(unsigned events, unsigned *idle)
{
    if (events > 0) {
        *idle = 0;
        return;
    }
    if (++*idle % 16 == 0)
        zcopy_host_progress();
    if (*idle < UCX_SPINS_BEFORE_YIELD)
        cpu_relax();
    else
        sched_yield();
}

void zcopy_ucx_poll_locked(unsigned *idle)
{
    zcopy_ucx_backoff(zcopy_ucx_worker_progress_locked(), idle);
}

ucs_status_t zcopy_ucx_request_wait_locked(ucs_status_ptr_t request)
{
    ucs_status_t status;
    unsigned idle = 0;

    if (request == NULL)
        return UCS_OK;
    if (UCS_PTR_IS_ERR(request))
        return UCS_PTR_STATUS(request);
    while ((status = ucp_request_check_status(request)) == UCS_INPROGRESS)
        zcopy_ucx_poll_locked(&idle);
    ucp_request_free(request);
    return status;
}

void zcopy_ucx_counts(zcopy_ucx_counts_t *counts)
{
    pthread_mutex_lock(&zcopy_ucx.lock);
    counts->live = zcopy_ucx.state == UCX_STATE_LIVE;
    counts->neps = zcopy_ucx.neps;
    counts->nrkeys = 0;
    for (size_t i = 0; i < zcopy_ucx.neps; i++)
        counts->nrkeys += zcopy_ucx.eps[i]->nrkeys;
    counts->nmems = zcopy_ucx.nmems;
    counts->bytes = atomic_load_explicit(&zcopy_ucx.bytes,
                                         memory_order_relaxed);
    counts->loop_idle = atomic_load_explicit(&zcopy_ucx.loop_empty_polls,
                                             memory_order_relaxed) >=
                        LOOP_EMPTY_POLLS_BEFORE_IDLE;
    pthread_mutex_unlock(&zcopy_ucx.lock);
}
