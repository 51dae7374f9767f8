/*
 * Transfers: non-blocking get, put and flush, completed through a
 * caller-owned counter (zcopy_ucx_comp_t), and the waits that progress the
 * worker meanwhile.
 *
 * Each request carries a callback with the counter as its user data; the
 * callback runs inside ucp_worker_progress, which is only ever called with
 * the layer's lock held, so the counter needs no atomics as long as it is
 * read under the lock too (zcopy_ucx_test/wait/throttle).
 */
#include "ucx_int.h"

#include <assert.h>
#include <stddef.h>

static void request_done(void *request, ucs_status_t status, void *user_data)
{
    zcopy_ucx_comp_t *comp = user_data;

    if (status != UCS_OK && comp->failure == 0)
        comp->failure = status;
    comp->pending--;
    ucp_request_free(request);
}

/* Counts @request into @comp: NULL is done already, an error pointer is
 * the failure to report. */
static zcopy_status_t comp_add(zcopy_ucx_comp_t *comp,
                               ucs_status_ptr_t request, const char *what,
                               const zcopy_ucx_ep_t *ep, size_t len)
{
    if (UCS_PTR_IS_ERR(request))
        return zcopy_ucx_error(UCS_PTR_STATUS(request), "ucx: %s of %zu "
                               "bytes with pid %llu", what, len,
                               (unsigned long long)ep->key.pid);
    if (request != NULL)
        zcopy_ucx_comp_issued(comp);
    return ZCOPY_SUCCESS;
}

static zcopy_status_t rma(bool put, zcopy_ucx_ep_t *ep, void *local,
                          const zcopy_ucx_mem_t *local_mem, uint64_t remote,
                          zcopy_ucx_rkey_t *rkey, size_t len,
                          zcopy_ucx_comp_t *comp)
{
    const char *what = put ? "put" : "get";
    ucp_request_param_t param = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                        UCP_OP_ATTR_FIELD_USER_DATA,
        .cb.send      = request_done,
        .user_data    = comp,
    };
    ucs_status_ptr_t request;
    zcopy_status_t st;
    ucp_ep_h handle;

    if (ep == NULL || rkey == NULL || comp == NULL || (local == NULL && len))
        return zcopy_error(ZCOPY_ERR_ARG, "ucx: %s: NULL argument", what);
    if (rkey->ep != ep)
        return zcopy_error(ZCOPY_ERR_ARG, "ucx: %s: the remote key belongs "
                           "to another endpoint", what);
    if (len == 0)
        return ZCOPY_SUCCESS;
    /* The emulated target copies wherever it is told: the bounds are
     * checked here or nowhere. */
    if (!zcopy_range_inside(remote, len, rkey->va, rkey->size))
        return zcopy_error(ZCOPY_ERR_RANGE, "ucx: %s: [%#llx, +%zu) is not "
                           "inside the peer's block [%#llx, +%llu)", what,
                           (unsigned long long)remote, len,
                           (unsigned long long)rkey->va,
                           (unsigned long long)rkey->size);
    if (local_mem != NULL) {
        if (!zcopy_range_inside((uintptr_t)local, len, local_mem->va,
                                local_mem->size))
            return zcopy_error(ZCOPY_ERR_RANGE, "ucx: %s: [%p, +%zu) is not "
                               "inside its registration [%p, +%zu)", what,
                               local, len, (void *)local_mem->va,
                               local_mem->size);
        param.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
        param.memh = local_mem->memh;
    }

    pthread_mutex_lock(&zcopy_ucx.lock);
    st = zcopy_ucx_ep_handle_locked(ep, &handle);
    if (st != ZCOPY_SUCCESS)
        goto out;
    request = put ? ucp_put_nbx(handle, local, len, remote, rkey->handle,
                                &param)
                  : ucp_get_nbx(handle, local, len, remote, rkey->handle,
                                &param);
    st = comp_add(comp, request, what, ep, len);
    if (st == ZCOPY_SUCCESS) {
        ep->issued++;
        comp->bytes += len;
        atomic_fetch_add_explicit(&zcopy_ucx.bytes, len,
                                  memory_order_relaxed);
    }
out:
    pthread_mutex_unlock(&zcopy_ucx.lock);
    return st;
}

zcopy_status_t zcopy_ucx_get(zcopy_ucx_ep_t *ep, void *local,
                             const zcopy_ucx_mem_t *local_mem,
                             uint64_t remote, zcopy_ucx_rkey_t *rkey,
                             size_t len, zcopy_ucx_comp_t *comp)
{
    return rma(false, ep, local, local_mem, remote, rkey, len, comp);
}

zcopy_status_t zcopy_ucx_put(zcopy_ucx_ep_t *ep, const void *local,
                             const zcopy_ucx_mem_t *local_mem,
                             uint64_t remote, zcopy_ucx_rkey_t *rkey,
                             size_t len, zcopy_ucx_comp_t *comp)
{
    /* ucp_put_nbx takes a const buffer; one body serves both directions. */
    return rma(true, ep, (void *)local, local_mem, remote, rkey, len, comp);
}

zcopy_status_t zcopy_ucx_flush_nb(zcopy_ucx_ep_t *ep, zcopy_ucx_comp_t *comp)
{
    ucp_request_param_t param = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                        UCP_OP_ATTR_FIELD_USER_DATA,
        .cb.send      = request_done,
        .user_data    = comp,
    };
    zcopy_status_t st;

    if (ep == NULL || comp == NULL)
        return zcopy_error(ZCOPY_ERR_ARG, "ucx: flush: NULL argument");
    pthread_mutex_lock(&zcopy_ucx.lock);
    if (ep->handle != NULL) /* a closed endpoint has nothing to flush */
        st = comp_add(comp, ucp_ep_flush_nbx(ep->handle, &param), "flush", ep,
                      0);
    else
        st = ZCOPY_SUCCESS;
    pthread_mutex_unlock(&zcopy_ucx.lock);
    return st;
}

zcopy_status_t zcopy_ucx_flush_locked(zcopy_ucx_ep_t *ep)
{
    ucp_request_param_t param = { .op_attr_mask = 0 };
    uint64_t covered = ep->issued;  /* what this flush will have completed */
    ucs_status_t us;

    if (ep->handle == NULL)
        return ZCOPY_SUCCESS;     /* closed: nothing can be outstanding */
    us = zcopy_ucx_request_wait_locked(ucp_ep_flush_nbx(ep->handle, &param));
    if (us != UCS_OK)
        return zcopy_ucx_error(us, "ucx: flushing the endpoint to pid %llu",
                               (unsigned long long)ep->key.pid);
    if (covered > ep->flushed)
        ep->flushed = covered;
    return ZCOPY_SUCCESS;
}

zcopy_status_t zcopy_ucx_flush(zcopy_ucx_ep_t *ep)
{
    zcopy_status_t st;

    if (ep == NULL)
        return zcopy_error(ZCOPY_ERR_ARG, "ucx: flush: NULL endpoint");
    pthread_mutex_lock(&zcopy_ucx.lock);
    st = zcopy_ucx_flush_locked(ep);
    pthread_mutex_unlock(&zcopy_ucx.lock);
    return st;
}

/* --- messages ------------------------------------------------------------ */

static void recv_done(void *request, ucs_status_t status,
                      const ucp_tag_recv_info_t *info, void *user_data)
{
    (void)info;
    request_done(request, status, user_data);
}

/* The checks a tagged message's arguments pass, for @what. */
static zcopy_status_t tag_args_check(const char *what, const void *buf,
                                     size_t len, uint64_t tag,
                                     const zcopy_ucx_comp_t *comp)
{
    if (comp == NULL || (buf == NULL && len))
        return zcopy_error(ZCOPY_ERR_ARG, "ucx: %s: NULL argument", what);
    if (tag & ZCOPY_UCX_TAG_RESERVED)
        return zcopy_error(ZCOPY_ERR_ARG, "ucx: %s: tag %#llx is the layer's "
                           "own", what, (unsigned long long)tag);
    return ZCOPY_SUCCESS;
}

/* zcopy_ucx_iov_t is UCX's iov entry, so that callers need no UCX header. */
static_assert(sizeof(zcopy_ucx_iov_t) == sizeof(ucp_dt_iov_t) &&
                  offsetof(zcopy_ucx_iov_t, buf) ==
                      offsetof(ucp_dt_iov_t, buffer) &&
                  offsetof(zcopy_ucx_iov_t, len) ==
                      offsetof(ucp_dt_iov_t, length),
              "zcopy_ucx_iov_t matches ucp_dt_iov_t");

/* @count bytes at @buf, or (@iov) @count pieces of iov entries. */
static zcopy_status_t tag_send(zcopy_ucx_ep_t *ep, const void *buf,
                               size_t count, bool iov, size_t len,
                               uint64_t tag, zcopy_ucx_comp_t *comp)
{
    ucp_request_param_t param = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                        UCP_OP_ATTR_FIELD_USER_DATA |
                        (iov ? UCP_OP_ATTR_FIELD_DATATYPE : 0),
        .cb.send      = request_done,
        .user_data    = comp,
        .datatype     = iov ? ucp_dt_make_iov() : ucp_dt_make_contig(1),
    };
    zcopy_status_t st;
    ucp_ep_h handle;

    if (ep == NULL)
        return zcopy_error(ZCOPY_ERR_ARG, "ucx: send: NULL endpoint");
    ZCOPY_CHECK(tag_args_check("send", buf, count, tag, comp));
    pthread_mutex_lock(&zcopy_ucx.lock);
    st = zcopy_ucx_ep_handle_locked(ep, &handle);
    if (st == ZCOPY_SUCCESS)
        st = comp_add(comp, ucp_tag_send_nbx(handle, buf, count, tag, &param),
                      "send", ep, len);
    pthread_mutex_unlock(&zcopy_ucx.lock);
    return st;
}

static zcopy_status_t tag_recv(void *buf, size_t count, bool iov, size_t len,
                               uint64_t tag, zcopy_ucx_comp_t *comp)
{
    ucp_request_param_t param = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                        UCP_OP_ATTR_FIELD_USER_DATA |
                        (iov ? UCP_OP_ATTR_FIELD_DATATYPE : 0),
        .cb.recv      = recv_done,
        .user_data    = comp,
        .datatype     = iov ? ucp_dt_make_iov() : ucp_dt_make_contig(1),
    };
    ucs_status_ptr_t request;
    zcopy_status_t st = ZCOPY_SUCCESS;

    ZCOPY_CHECK(tag_args_check("receive", buf, count, tag, comp));
    pthread_mutex_lock(&zcopy_ucx.lock);
    if (zcopy_ucx.state != UCX_STATE_LIVE) {
        pthread_mutex_unlock(&zcopy_ucx.lock);
        return zcopy_error(ZCOPY_ERR_INTERNAL, "ucx: receive: no worker");
    }
    request = ucp_tag_recv_nbx(zcopy_ucx.worker, buf, count, tag,
                               ZCOPY_UCX_TAG_MASK_ALL, &param);
    if (UCS_PTR_IS_ERR(request))
        st = zcopy_ucx_error(UCS_PTR_STATUS(request), "ucx: receive of %zu "
                             "bytes", len);
    else if (request != NULL)
        zcopy_ucx_comp_issued(comp);
    pthread_mutex_unlock(&zcopy_ucx.lock);
    return st;
}

zcopy_status_t zcopy_ucx_tag_send(zcopy_ucx_ep_t *ep, const void *buf,
                                  size_t len, uint64_t tag,
                                  zcopy_ucx_comp_t *comp)
{
    return tag_send(ep, buf, len, false, len, tag, comp);
}

zcopy_status_t zcopy_ucx_tag_recv(void *buf, size_t len, uint64_t tag,
                                  zcopy_ucx_comp_t *comp)
{
    return tag_recv(buf, len, false, len, tag, comp);
}

zcopy_status_t zcopy_ucx_tag_sendv(zcopy_ucx_ep_t *ep,
                                   const zcopy_ucx_iov_t *iov, size_t n,
                                   uint64_t tag, zcopy_ucx_comp_t *comp)
{
    return tag_send(ep, iov, n, true, zcopy_ucx_iov_bytes(iov, n), tag,
                    comp);
}

zcopy_status_t zcopy_ucx_tag_recvv(const zcopy_ucx_iov_t *iov, size_t n,
                                   uint64_t tag, zcopy_ucx_comp_t *comp)
{
    return tag_recv((void *)iov, n, true, zcopy_ucx_iov_bytes(iov, n), tag,
                    comp);
}

/* One poll; whether fewer than @below (>= 1) of @comp's requests are
 * pending. */
static bool comp_poll(zcopy_ucx_comp_t *comp, unsigned below,
                      unsigned *events)
{
    bool done;

    pthread_mutex_lock(&zcopy_ucx.lock);
    *events = zcopy_ucx.state == UCX_STATE_LIVE
                  ? zcopy_ucx_worker_progress_locked() : 0;
    /* Without a worker nothing can complete any more: do not spin. */
    done = comp->pending < below || zcopy_ucx.state != UCX_STATE_LIVE;
    pthread_mutex_unlock(&zcopy_ucx.lock);
    return done;
}

bool zcopy_ucx_test(zcopy_ucx_comp_t *comp)
{
    unsigned events;

    return comp_poll(comp, 1, &events);
}

void zcopy_ucx_throttle(zcopy_ucx_comp_t *comp, unsigned need, unsigned max)
{
    const unsigned below = need < max ? max - need + 1 : 1;
    unsigned events, idle = 0;
    bool room;

    if (max == 0)
        return;
    /* Read under the lock: completions run inside the worker's progress. */
    pthread_mutex_lock(&zcopy_ucx.lock);
    room = comp->pending < below;
    pthread_mutex_unlock(&zcopy_ucx.lock);
    if (room)
        return;
    while (!comp_poll(comp, below, &events))
        zcopy_ucx_backoff(events, &idle);
}

zcopy_status_t zcopy_ucx_wait(zcopy_ucx_comp_t *comp)
{
    unsigned events, idle = 0;

    /* The lock is dropped between polls so that other threads' calls get
     * in; the poll comes first, so even a complete @comp progresses once
     * (a peer may be waiting on us). */
    while (!comp_poll(comp, 1, &events))
        zcopy_ucx_backoff(events, &idle);
    if (comp->pending != 0)
        return zcopy_error(ZCOPY_ERR_INTERNAL, "ucx: wait: %u transfers "
                           "outlived zcopy_ucx_cleanup()", comp->pending);
    if (comp->failure != 0)
        return zcopy_ucx_error((ucs_status_t)comp->failure,
                               "ucx: a transfer failed");
    return ZCOPY_SUCCESS;
}
