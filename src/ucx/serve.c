/*
 * Reads served by their target with a tagged send: the fetch engine for
 * transports whose get UCX emulates (tcp in UCX 1.13, README.md). The
 * reader posts a tagged receive straight into its destination and asks the
 * target, in one active message, to send it [va, +len) of a registration;
 * the target sends from the registered pages (zero-copy on the wire
 * protocols that have it), and the reader's receive completes with the
 * data: no flush, and a bulk protocol instead of the emulated get's
 * active-message fragments (measured 3.4x faster at 16 MiB over tcp).
 *
 * The target serves from its progress calls: the active message's
 * callback only queues the request (or, when it cannot, refuses it at
 * once), and every progress of the worker in this layer ends by sending
 * what is queued, in order, on the endpoint UCX hands the
 * callback for replies (the queue is drained before the lock is dropped,
 * so no endpoint can close in between). A range outside every registration
 * is refused: answered with an empty message, which fails the reader's
 * receive.
 *
 * A read may also ask for its answer through the job's point-to-point
 * engine (the host's hooks: coll_zcopy_ucx_fetch pml, or auto's large
 * reads): the request names the communicator and the reader's rank in
 * it, and the target sends
 * with the host's send, whose completion it checks in the same progress
 * calls; a refusal is an empty message there too. Those answers share one
 * tag, so the reader's receives from a target match them in the order it
 * asked: the requests of one reader travel on one endpoint as eager
 * active messages of one lane, which UCX delivers in order, and the
 * target answers each, in arrival order, exactly once.
 *
 * The same request asks for the packed remote key of a registration,
 * which a peer fetches the first time it meets a block (ep.c): arrivals
 * name blocks without their keys.
 */
#include "ucx_int.h"

#include "host/host.h"
#include "host/progress.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

/* Tags of replies: the bit zcopy_ucx_tag_send/_recv refuse. */
#define SERVE_TAG_BIT ZCOPY_UCX_TAG_RESERVED

typedef enum {
    SERVE_READ,                   /* [va, +len) of a registration */
    SERVE_KEY,                    /* the packed key of registration [va, +len) */
    SERVE_READ_P2P                /* a read answered through the host's
                                     point-to-point engine: tag is the
                                     communicator's id << 32 | the reader's
                                     rank in it */
} serve_what_t;

typedef struct {
    uint64_t va;
    uint64_t len;
    uint64_t tag;
    uint32_t what;                /* serve_what_t */
    uint32_t reserved;
} serve_request_t;
static_assert(sizeof(serve_request_t) == ZCOPY_UCX_KEY_REQUEST_BYTES,
              "what a key request costs, as the counters say");

typedef struct {
    serve_request_t q;
    ucp_ep_h reply_ep;
} serve_queued_t;

/* A reader's receive: what it expects, for the completion to check. */
typedef struct {
    zcopy_ucx_comp_t *comp;
    uint64_t len;                 /* exactly this many bytes, or */
    size_t *got;                  /* if not NULL: up to len, any but none */
} serve_recv_t;

/* Room for one more request in the queue. */
static bool serve_queue_reserve(void)
{
    return zcopy_array_reserve(&zcopy_ucx.serve_queue, &zcopy_ucx.serve_cap,
                               zcopy_ucx.serve_queued, sizeof(serve_queued_t));
}

static void serve_sent(void *request, ucs_status_t status, void *user_data);
static void serve_p2p_refuse(const serve_request_t *q);

/* The empty answer: the reader's receive fails instead of waiting. */
static void serve_refuse(ucp_ep_h reply_ep, uint64_t tag)
{
    ucp_request_param_t param = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                        UCP_OP_ATTR_FIELD_USER_DATA,
        .cb.send      = serve_sent,
        .user_data    = NULL,
    };
    ucs_status_ptr_t request = ucp_tag_send_nbx(reply_ep, NULL, 0, tag, &param);

    if (UCS_PTR_IS_ERR(request))
        zcopy_log(ZCOPY_LOG_ERROR, "ucx", "refusing a read: %s; its reader "
                  "will wait", ucs_status_string(UCS_PTR_STATUS(request)));
}

/* Called by UCX inside ucp_worker_progress, with the layer's lock held. */
static ucs_status_t serve_request_arrived(void *arg, const void *header,
                                         size_t header_length, void *data,
                                         size_t length,
                                         const ucp_am_recv_param_t *param)
{
    serve_queued_t *e;

    (void)arg;
    (void)data;
    (void)length;
    if (header_length != sizeof(serve_request_t) ||
        !(param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP))
        return UCS_OK;            /* not a request of ours: dropped */
    if (!serve_queue_reserve()) {
        const serve_request_t *q = header;

        zcopy_log(ZCOPY_LOG_ERROR, "ucx", "out of memory queueing a read "
                  "request: refused");
        /* Ahead of queued answers to the same reader, perhaps: then it
         * fails a receive of another read, which still fails the
         * collective, and every receive still gets one answer. */
        if (q->what == SERVE_READ_P2P)
            serve_p2p_refuse(q);
        else
            serve_refuse(param->reply_ep, q->tag);
        return UCS_OK;
    }
    e = &((serve_queued_t *)zcopy_ucx.serve_queue)[zcopy_ucx.serve_queued++];
    memcpy(&e->q, header, sizeof(e->q));
    e->reply_ep = param->reply_ep;
    return UCS_OK;
}

zcopy_status_t zcopy_ucx_serve_init_locked(void)
{
    ucp_am_handler_param_t param = {
        .field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID |
                      UCP_AM_HANDLER_PARAM_FIELD_CB |
                      UCP_AM_HANDLER_PARAM_FIELD_ARG,
        .id = ZCOPY_UCX_AM_READ,
        .cb = serve_request_arrived,
        .arg = NULL,
    };
    ucs_status_t us = ucp_worker_set_am_recv_handler(zcopy_ucx.worker, &param);

    return us == UCS_OK ? ZCOPY_SUCCESS
                        : zcopy_ucx_error(us, "ucx: read request handler");
}

/* @user_data: the registration sent from, NULL for a refusal. */
static void serve_sent(void *request, ucs_status_t status, void *user_data)
{
    zcopy_ucx_mem_t *m = user_data;

    if (status != UCS_OK)
        zcopy_log(ZCOPY_LOG_ERROR, "ucx", "serving a read or key failed: %s",
                  ucs_status_string(status));
    if (m != NULL)
        m->serving--;
    ucp_request_free(request);
}

static zcopy_ucx_mem_t *serve_registration(uint64_t va, uint64_t len)
{
    for (zcopy_ucx_mem_t *m = zcopy_ucx.mems; m != NULL; m = m->next)
        if (zcopy_range_inside(va, len, m->va, m->size))
            return m;
    return NULL;
}

static zcopy_ucx_mem_t *serve_registration_exactly(uint64_t va, uint64_t len)
{
    for (zcopy_ucx_mem_t *m = zcopy_ucx.mems; m != NULL; m = m->next)
        if (m->va == va && m->size == len)
            return m;
    return NULL;
}

/* Answers @e with [@buf, +@len) of registration @m (its pages, with
 * @from_pages, else the packed key it holds), counted in its serving until
 * the send is done, so that it cannot be unregistered meanwhile. */
static void serve_send_locked(const serve_queued_t *e, zcopy_ucx_mem_t *m,
                              const void *buf, size_t len, bool from_pages)
{
    ucp_request_param_t param = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                        UCP_OP_ATTR_FIELD_USER_DATA |
                        (from_pages ? UCP_OP_ATTR_FIELD_MEMH : 0),
        .cb.send      = serve_sent,
        .user_data    = m,
        .memh         = from_pages ? m->memh : NULL,
    };
    ucs_status_ptr_t request = ucp_tag_send_nbx(e->reply_ep, buf, len,
                                                e->q.tag, &param);

    if (UCS_PTR_IS_ERR(request)) {
        zcopy_log(ZCOPY_LOG_ERROR, "ucx", "serving a %s: %s: refused",
                  from_pages ? "read" : "key",
                  ucs_status_string(UCS_PTR_STATUS(request)));
        serve_refuse(e->reply_ep, e->q.tag);
    } else if (request != NULL) {
        m->serving++;
    }
}

/* A send of the host's answering a read, and the registration it holds. */
typedef struct {
    void *req;
    zcopy_ucx_mem_t *mem;
} serve_p2p_t;

/* The host's send, called under the layer's lock and perhaps from inside
 * Open MPI's progress loop: what it calls back (a free list growing
 * through the MPI_Alloc_mem pool) must not register memory, which would
 * take the lock again (host/progress.h). @req NULL: freed at once. */
static int serve_p2p_send(uint32_t cid, int reader, const void *buf,
                          size_t len, void **req)
{
    int rc;

    /* Every process of a job that reads so has the hooks: the component
     * installs them before any communicator exists. */
    if (zcopy_host.p2p_isend == NULL) {
        zcopy_log(ZCOPY_LOG_ERROR, "ucx", "a read asked for an answer "
                  "through a point-to-point engine this process lacks");
        return -1;
    }
    zcopy_host_call_enter();
    rc = zcopy_host.p2p_isend(cid, reader, ZCOPY_HOST_P2P_READ, buf, len,
                              req);
    zcopy_host_call_leave();
    return rc;
}

/* The empty answer, which fails the read: nothing to hold, so nothing to
 * track. The reader's receive matches the answers of one target in the
 * order they are sent, so every request that arrives gets exactly one. */
static void serve_p2p_refuse(const serve_request_t *q)
{
    const int reader = (int)(uint32_t)q->tag;
    int rc = serve_p2p_send((uint32_t)(q->tag >> 32), reader, NULL, 0, NULL);

    if (rc != 0)
        zcopy_log(ZCOPY_LOG_ERROR, "ucx", "refusing rank %d's read through "
                  "the point-to-point engine failed (error %d): its reader "
                  "will wait", reader, rc);
}

/* Answers a point-to-point read with its range of @m, held until the send
 * completes; refuses it where that cannot be done. */
static void serve_p2p_locked(const serve_request_t *q, zcopy_ucx_mem_t *m)
{
    const int reader = (int)(uint32_t)q->tag;
    serve_p2p_t *sends;
    void *req;
    int rc;

    if (!zcopy_array_reserve(&zcopy_ucx.p2p_sends, &zcopy_ucx.p2p_cap,
                             zcopy_ucx.p2p_sending, sizeof(serve_p2p_t))) {
        zcopy_log(ZCOPY_LOG_ERROR, "ucx", "out of memory serving rank %d's "
                  "read: refused", reader);
        serve_p2p_refuse(q);
        return;
    }
    rc = serve_p2p_send((uint32_t)(q->tag >> 32), reader,
                        (const void *)(uintptr_t)q->va, q->len, &req);
    if (rc != 0) {
        zcopy_log(ZCOPY_LOG_ERROR, "ucx", "answering rank %d's read through "
                  "the point-to-point engine failed (error %d): refused",
                  reader, rc);
        serve_p2p_refuse(q);
        return;
    }
    sends = zcopy_ucx.p2p_sends;
    sends[zcopy_ucx.p2p_sending++] = (serve_p2p_t){ .req = req, .mem = m };
    m->serving++;
}

/* Retires the point-to-point answers that have completed. */
static void serve_p2p_poll_locked(void)
{
    serve_p2p_t *sends = zcopy_ucx.p2p_sends;
    size_t kept = 0, len;
    bool failed, done;

    for (size_t i = 0; i < zcopy_ucx.p2p_sending; i++) {
        zcopy_host_call_enter();
        done = zcopy_host.p2p_done(sends[i].req, &len, &failed);
        zcopy_host_call_leave();
        if (!done) {
            sends[kept++] = sends[i];
            continue;
        }
        if (failed)
            zcopy_log(ZCOPY_LOG_ERROR, "ucx", "a point-to-point answer to a "
                      "read failed");
        sends[i].mem->serving--;
    }
    zcopy_ucx.p2p_sending = kept;
}

static void serve_one_locked(const serve_queued_t *e)
{
    const serve_request_t *q = &e->q;
    zcopy_ucx_mem_t *m;
    const char *why;

    switch (q->what) {
    case SERVE_READ:
        m = serve_registration(q->va, q->len);
        if (m != NULL) {
            serve_send_locked(e, m, (void *)(uintptr_t)q->va, q->len, true);
            return;
        }
        why = "no registration holds it";
        break;
    case SERVE_READ_P2P:
        m = serve_registration(q->va, q->len);
        if (m != NULL) {
            serve_p2p_locked(q, m);
            return;
        }
        zcopy_log(ZCOPY_LOG_ERROR, "ucx", "a peer's read of [%#llx, +%llu) "
                  "refused: no registration holds it",
                  (unsigned long long)q->va, (unsigned long long)q->len);
        serve_p2p_refuse(q);
        return;
    case SERVE_KEY:
        m = serve_registration_exactly(q->va, q->len);
        if (m != NULL && m->packed_rkey_len <= ZCOPY_UCX_RKEY_FETCH_MAX) {
            serve_send_locked(e, m, m->packed_rkey, m->packed_rkey_len,
                              false);
            return;
        }
        why = m == NULL ? "its key was asked, but it is no registration"
                        : "its key is too long to fetch";
        break;
    default:
        why = "an unknown request";
        break;
    }
    zcopy_log(ZCOPY_LOG_ERROR, "ucx", "a peer's request for [%#llx, +%llu) "
              "refused: %s", (unsigned long long)q->va,
              (unsigned long long)q->len, why);
    serve_refuse(e->reply_ep, q->tag);
}

void zcopy_ucx_serve_locked(void)
{
    /* Each send may progress the worker and queue more: take them in
     * order until none is left. */
    for (size_t i = 0; i < zcopy_ucx.serve_queued; i++) {
        serve_queued_t e = ((serve_queued_t *)zcopy_ucx.serve_queue)[i];

        serve_one_locked(&e);
    }
    zcopy_ucx.serve_queued = 0;
}

unsigned zcopy_ucx_worker_progress_locked(void)
{
    unsigned events = ucp_worker_progress(zcopy_ucx.worker);

    if (zcopy_ucx.serve_queued > 0)
        zcopy_ucx_serve_locked();
    if (zcopy_ucx.p2p_sending > 0)
        serve_p2p_poll_locked();
    /* Work found by any caller wakes Open MPI's loop's polls too
     * (zcopy_ucx_progress_loop): peers are talking to us. */
    if (events > 0 || zcopy_ucx.serve_queued > 0)
        atomic_store_explicit(&zcopy_ucx.loop_empty_polls, 0,
                              memory_order_relaxed);
    return events;
}

void zcopy_ucx_serve_cleanup_locked(void)
{
    free(zcopy_ucx.serve_queue);
    zcopy_ucx.serve_queue = NULL;
    zcopy_ucx.serve_cap = zcopy_ucx.serve_queued = 0;
    /* Answers still sending belong to the host's engine now: forgotten,
     * not freed (Open MPI releases its requests at its finalize). */
    if (zcopy_ucx.p2p_sending > 0)
        zcopy_log(ZCOPY_LOG_WARN, "ucx", "%zu point-to-point answers still "
                  "sending at cleanup", zcopy_ucx.p2p_sending);
    free(zcopy_ucx.p2p_sends);
    zcopy_ucx.p2p_sends = NULL;
    zcopy_ucx.p2p_cap = zcopy_ucx.p2p_sending = 0;
}

/* --- the reader's side -------------------------------------------------- */

static void read_arrived(void *request, ucs_status_t status,
                         const ucp_tag_recv_info_t *info, void *user_data)
{
    serve_recv_t *r = user_data;
    zcopy_ucx_comp_t *comp = r->comp;

    if (r->got != NULL && status == UCS_OK && info->length > 0)
        *r->got = info->length;
    else if (status == UCS_OK && (r->got != NULL || info->length != r->len))
        status = UCS_ERR_INVALID_ADDR; /* refused by the target */
    if (status != UCS_OK && comp->failure == 0)
        comp->failure = status;
    comp->pending--;
    free(r);
    ucp_request_free(request);
}

/* A request in flight: UCX 1.13 reads its header until the send
 * completes, so it lives here until then. */
typedef struct {
    zcopy_ucx_comp_t *comp;
    void *recv;                   /* its reply's receive, NULL if done */
    bool *lost;                   /* set if it fails; NULL if nobody asks */
    serve_request_t q;
} serve_send_t;

static void request_sent(void *request, ucs_status_t status, void *user_data)
{
    serve_send_t *sd = user_data;
    zcopy_ucx_comp_t *comp = sd->comp;

    if (status != UCS_OK && comp->failure == 0)
        comp->failure = status;
    /* A request that never left: nobody answers its receive. */
    if (status != UCS_OK && sd->recv != NULL)
        ucp_request_cancel(zcopy_ucx.worker, sd->recv);
    if (status != UCS_OK && sd->lost != NULL)
        *sd->lost = true;
    comp->pending--;
    free(sd);
    ucp_request_free(request);
}

/* Sends request @q (its tag set here) to @ep's peer and posts the receive
 * of its answer into [@buf, +@cap): exactly @cap bytes, or with @got any
 * nonzero number up to @cap, stored there. Both count into @comp. A read
 * answered through the host's engine posts no receive here, and has the
 * request's failure on the way reported in *@lost. */
static zcopy_status_t serve_ask(zcopy_ucx_ep_t *ep, serve_request_t q,
                                void *buf, size_t cap, size_t *got,
                                bool *lost, zcopy_ucx_comp_t *comp)
{
    ucp_request_param_t rparam = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                        UCP_OP_ATTR_FIELD_USER_DATA,
        .cb.recv      = read_arrived,
    };
    ucp_request_param_t sparam = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                        UCP_OP_ATTR_FIELD_USER_DATA |
                        UCP_OP_ATTR_FIELD_FLAGS,
        .cb.send      = request_sent,
        .flags        = UCP_AM_SEND_FLAG_EAGER | UCP_AM_SEND_FLAG_REPLY,
    };
    ucs_status_ptr_t request, recv;
    serve_send_t *sd;
    serve_recv_t *r;
    zcopy_status_t st;
    ucp_ep_h handle;

    r = malloc(sizeof(*r));
    sd = malloc(sizeof(*sd));
    if (r == NULL || sd == NULL) {
        free(r);
        free(sd);
        return zcopy_error(ZCOPY_ERR_NOMEM, "ucx: request: out of memory");
    }
    *r = (serve_recv_t){ .comp = comp, .len = cap, .got = got };
    *sd = (serve_send_t){ .comp = comp, .lost = lost, .q = q };
    rparam.user_data = r;
    sparam.user_data = sd;

    pthread_mutex_lock(&zcopy_ucx.lock);
    st = zcopy_ucx.state == UCX_STATE_LIVE
             ? zcopy_ucx_ep_handle_locked(ep, &handle)
             : zcopy_error(ZCOPY_ERR_INTERNAL, "ucx: request: no worker");
    if (st != ZCOPY_SUCCESS)
        goto out;
    /* An answer through the host's engine has its receive there, posted
     * by the caller, and its tag names the communicator and the reader. */
    recv = NULL;
    if (q.what != SERVE_READ_P2P) {
        sd->q.tag = SERVE_TAG_BIT | ++zcopy_ucx.read_tags;
        recv = ucp_tag_recv_nbx(zcopy_ucx.worker, buf, cap, sd->q.tag,
                                ZCOPY_UCX_TAG_MASK_ALL, &rparam);
    }
    if (UCS_PTR_IS_ERR(recv)) {
        st = zcopy_ucx_error(UCS_PTR_STATUS(recv), "ucx: receiving %zu "
                             "bytes from pid %llu", cap,
                             (unsigned long long)ep->key.pid);
        goto out;
    }
    if (recv != NULL) {
        r = NULL;                 /* the receive owns it now */
        zcopy_ucx_comp_issued(comp);
    }
    sd->recv = recv;
    request = ucp_am_send_nbx(handle, ZCOPY_UCX_AM_READ, &sd->q,
                              sizeof(sd->q), NULL, 0, &sparam);
    if (UCS_PTR_IS_ERR(request)) {
        /* Nobody will answer: the receive completes as cancelled. */
        st = zcopy_ucx_error(UCS_PTR_STATUS(request), "ucx: request to "
                             "pid %llu", (unsigned long long)ep->key.pid);
        if (recv != NULL)
            ucp_request_cancel(zcopy_ucx.worker, recv);
        goto out;
    }
    if (request != NULL) {
        sd = NULL;                /* the send owns it now */
        zcopy_ucx_comp_issued(comp);
    }
out:
    pthread_mutex_unlock(&zcopy_ucx.lock);
    free(r);
    free(sd);
    return st;
}

zcopy_status_t zcopy_ucx_read(zcopy_ucx_ep_t *ep, void *local, uint64_t remote,
                              zcopy_ucx_rkey_t *rkey, size_t len,
                              zcopy_ucx_comp_t *comp)
{
    const serve_request_t q = { .va = remote, .len = len, .what = SERVE_READ };
    zcopy_status_t st;

    if (ep == NULL || rkey == NULL || comp == NULL || (local == NULL && len))
        return zcopy_error(ZCOPY_ERR_ARG, "ucx: read: NULL argument");
    if (len == 0)
        return ZCOPY_SUCCESS;
    /* Checked here too: a refused request costs a round trip and a log. */
    if (rkey->ep != ep || !zcopy_range_inside(remote, len, rkey->va, rkey->size))
        return zcopy_error(ZCOPY_ERR_RANGE, "ucx: read: [%#llx, +%zu) is not "
                           "inside the peer's block", (unsigned long long)remote,
                           len);
    st = serve_ask(ep, q, local, len, NULL, NULL, comp);
    if (st != ZCOPY_SUCCESS)
        return st;
    comp->bytes += len;
    atomic_fetch_add_explicit(&zcopy_ucx.bytes, len, memory_order_relaxed);
    return ZCOPY_SUCCESS;
}

zcopy_status_t zcopy_ucx_read_ask(zcopy_ucx_ep_t *ep, uint64_t remote,
                                  zcopy_ucx_rkey_t *rkey, size_t len,
                                  uint32_t cid, int reader, bool *lost,
                                  zcopy_ucx_comp_t *comp)
{
    const serve_request_t q = { .va = remote, .len = len,
                                .tag = (uint64_t)cid << 32 | (uint32_t)reader,
                                .what = SERVE_READ_P2P };

    if (ep == NULL || rkey == NULL || comp == NULL || lost == NULL ||
        reader < 0)
        return zcopy_error(ZCOPY_ERR_ARG, "ucx: read: bad argument");
    if (rkey->ep != ep || !zcopy_range_inside(remote, len, rkey->va, rkey->size))
        return zcopy_error(ZCOPY_ERR_RANGE, "ucx: read: [%#llx, +%zu) is not "
                           "inside the peer's block", (unsigned long long)remote,
                           len);
    *lost = false;
    return serve_ask(ep, q, NULL, 0, NULL, lost, comp);
}

zcopy_status_t zcopy_ucx_key_ask(zcopy_ucx_ep_t *ep, uint64_t va,
                                 uint64_t size, void *buf, size_t cap,
                                 size_t *len_p, zcopy_ucx_comp_t *comp)
{
    const serve_request_t q = { .va = va, .len = size, .what = SERVE_KEY };

    *len_p = 0;
    return serve_ask(ep, q, buf, cap, len_p, NULL, comp);
}
