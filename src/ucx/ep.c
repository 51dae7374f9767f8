/*
 * Endpoints, one per peer process and shared by every communicator, and the
 * remote keys unpacked on them, one per block generation of that peer.
 *
 * Order at the end of an endpoint, as UCX wants it: flush (no request may
 * still use a key), destroy the keys, close the endpoint.
 */
#include "ucx_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool grow(void **array, size_t *cap, size_t n, size_t elem)
{
    size_t new_cap;
    void *p;

    if (n < *cap)
        return true;
    new_cap = *cap ? *cap * 2 : 8;
    p = realloc(*array, new_cap * elem);
    if (p == NULL)
        return false;
    *array = p;
    *cap = new_cap;
    return true;
}

static bool ep_matches(const zcopy_ucx_ep_t *ep, const zcopy_ucx_peer_key_t *key,
                       const void *address, size_t address_len)
{
    return ep->key.host == key->host && ep->key.pid == key->pid &&
           ep->address_len == address_len &&
           memcmp(ep->address, address, address_len) == 0;
}

/* Whether one of the endpoint's lanes is an InfiniBand or RoCE transport
 * (rc, dc), whose get the network does without the peer's worker. UCX
 * 1.13 has no query for an endpoint's transports, so this reads the lane
 * lines of its printed configuration ("lane[0]: 3:rc_mlx5/mlx5_0:1 ...").
 * Nothing else counts, not even a cma lane between processes of one host:
 * in 1.13 cma carries no get of registered memory (gets go to the rma
 * lanes, sysv and posix there, which emulate them), and a get over it
 * waited for the target's progress (src/ucx/README.md, "cma on one host"). */
static void ep_print(void *handle, FILE *f)
{
    ucp_ep_print_info(handle, f);
}

static bool ep_rma_native(ucp_ep_h handle)
{
    return zcopy_ucx_info_names_rma(ep_print, handle, "lane[", ":", false);
}

static zcopy_status_t ep_connect_locked(zcopy_ucx_ep_t *ep)
{
    ucp_ep_params_t params = {
        .field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS |
                      UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE,
        .address    = ep->address,
        /* No peer failure handling: it would exclude transports that cannot
         * detect a dead peer, and a failed peer ends an MPI job anyway. */
        .err_mode   = UCP_ERR_HANDLING_MODE_NONE,
    };
    ucs_status_t us = ucp_ep_create(zcopy_ucx.worker, &params, &ep->handle);

    if (us != UCS_OK) {
        ep->handle = NULL;
        return zcopy_ucx_error(us, "ucx: endpoint to pid %llu",
                               (unsigned long long)ep->key.pid);
    }
    ep->rma_native = ep_rma_native(ep->handle);
    zcopy_log(ZCOPY_LOG_DEBUG, "ucx", "endpoint to pid %llu: its get is %s",
              (unsigned long long)ep->key.pid,
              ep->rma_native ? "done by the network (rc, dc)"
                             : "emulated by the peer");
    return ZCOPY_SUCCESS;
}

zcopy_status_t zcopy_ucx_ep_handle_locked(zcopy_ucx_ep_t *ep, ucp_ep_h *handle_p)
{
    /* Not connected yet (endpoints connect at their first transfer), or
     * closed by zcopy_ucx_disconnect(): a communicator that outlived it
     * (a collective from a later finalize callback) connects again. */
    if (ep->handle == NULL)
        ZCOPY_CHECK(ep_connect_locked(ep));
    *handle_p = ep->handle;
    return ZCOPY_SUCCESS;
}

zcopy_status_t zcopy_ucx_ep_get(const zcopy_ucx_peer_key_t *key,
                                const void *address, size_t address_len,
                                zcopy_ucx_ep_t **ep_p)
{
    zcopy_ucx_ep_t *ep;
    zcopy_status_t st;

    if (key == NULL || address == NULL || address_len == 0 || ep_p == NULL)
        return zcopy_error(ZCOPY_ERR_ARG, "ucx: endpoint: NULL or empty "
                           "argument");
    pthread_mutex_lock(&zcopy_ucx.lock);
    st = zcopy_ucx_init_locked();
    if (st != ZCOPY_SUCCESS)
        goto out;
    for (size_t i = 0; i < zcopy_ucx.neps; i++) {
        if (ep_matches(zcopy_ucx.eps[i], key, address, address_len)) {
            zcopy_ucx.eps[i]->refs++;
            *ep_p = zcopy_ucx.eps[i];
            goto out;
        }
    }

    if (!grow((void **)&zcopy_ucx.eps, &zcopy_ucx.cap_eps, zcopy_ucx.neps,
              sizeof(*zcopy_ucx.eps))) {
        st = zcopy_error(ZCOPY_ERR_NOMEM, "ucx: endpoint: out of memory");
        goto out;
    }
    ep = calloc(1, sizeof(*ep));
    if (ep == NULL) {
        st = zcopy_error(ZCOPY_ERR_NOMEM, "ucx: endpoint: out of memory");
        goto out;
    }
    ep->address = malloc(address_len);
    if (ep->address == NULL) {
        st = zcopy_error(ZCOPY_ERR_NOMEM, "ucx: endpoint: out of memory");
        goto err_free_ep;
    }
    memcpy(ep->address, address, address_len);
    ep->address_len = address_len;
    ep->key = *key;
    /* Not connected yet: a communicator that spans servers names every
     * rank of the other servers at set-up, but a rank talks to few of
     * them (its leader's peers, the ranks its algorithms read from), and
     * each connection holds sockets or queue pairs and buffers on both
     * sides. Its first transfer connects it (zcopy_ucx_ep_handle_locked). */
    ep->refs = 1;
    zcopy_ucx.eps[zcopy_ucx.neps++] = ep;
    zcopy_log(ZCOPY_LOG_TRACE, "ucx", "endpoint to pid %llu on host %#llx",
              (unsigned long long)key->pid, (unsigned long long)key->host);
    *ep_p = ep;
    goto out;

err_free_ep:
    free(ep);
out:
    pthread_mutex_unlock(&zcopy_ucx.lock);
    return st;
}

/* Flushes on the way to destroying keys or the endpoint: nobody is left to
 * hear about a failure but the log, and the teardown goes on regardless. */
static void flush_or_warn_locked(zcopy_ucx_ep_t *ep)
{
    if (zcopy_ucx_flush_locked(ep) != ZCOPY_SUCCESS)
        zcopy_log(ZCOPY_LOG_WARN, "ucx", "%s", zcopy_error_detail());
}

static void rkey_destroy_at_locked(zcopy_ucx_ep_t *ep, size_t i)
{
    zcopy_ucx_rkey_t *rkey = ep->rkeys[i];

    ucp_rkey_destroy(rkey->handle);
    free(rkey);
    ep->rkeys[i] = ep->rkeys[--ep->nrkeys];
}

static void rkeys_destroy_all_locked(zcopy_ucx_ep_t *ep)
{
    while (ep->nrkeys > 0)
        rkey_destroy_at_locked(ep, ep->nrkeys - 1);
}

static const ucp_request_param_t close_in_flush_mode = {
    .op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
    .flags = 0,
};

void zcopy_ucx_ep_close_locked(zcopy_ucx_ep_t *ep, bool flush)
{
    ucs_status_t us;
    size_t i;

    if (flush && ep->handle != NULL && ep->issued != ep->flushed)
        flush_or_warn_locked(ep);
    rkeys_destroy_all_locked(ep);
    free(ep->rkeys);
    if (flush && ep->handle != NULL) {
        us = zcopy_ucx_request_wait_locked(
            ucp_ep_close_nbx(ep->handle, &close_in_flush_mode));
        if (us != UCS_OK)
            zcopy_log(ZCOPY_LOG_WARN, "ucx", "closing the endpoint to pid "
                      "%llu: %s", (unsigned long long)ep->key.pid,
                      ucs_status_string(us));
    }
    for (i = 0; zcopy_ucx.eps[i] != ep; i++)
        ;
    zcopy_ucx.eps[i] = zcopy_ucx.eps[--zcopy_ucx.neps];
    free(ep->address);
    free(ep);
}

/* Waits for every close request of @reqs (NULL entries are done). */
static void closes_wait_locked(ucs_status_ptr_t *reqs, uint64_t *pids, size_t n)
{
    unsigned idle = 0;
    size_t pending;

    do {
        pending = 0;
        for (size_t i = 0; i < n; i++) {
            ucs_status_t us;

            if (reqs[i] == NULL)
                continue;
            us = ucp_request_check_status(reqs[i]);
            if (us == UCS_INPROGRESS) {
                pending++;
                continue;
            }
            ucp_request_free(reqs[i]);
            reqs[i] = NULL;
            if (us != UCS_OK)
                zcopy_log(ZCOPY_LOG_WARN, "ucx", "closing the endpoint to "
                          "pid %llu: %s", (unsigned long long)pids[i],
                          ucs_status_string(us));
        }
        if (pending > 0)
            zcopy_ucx_poll_locked(&idle);
    } while (pending > 0);
}

/* All endpoints close at once, each close overlapping the others' round
 * trips; a flush of the whole worker first, so that no request still uses
 * a key when the keys go. */
void zcopy_ucx_disconnect(void)
{
    ucp_request_param_t flush_param = { .op_attr_mask = 0 };
    ucs_status_ptr_t *reqs = NULL;
    uint64_t *pids = NULL;
    size_t n = 0;
    ucs_status_t us;

    pthread_mutex_lock(&zcopy_ucx.lock);
    if (zcopy_ucx.state != UCX_STATE_LIVE || zcopy_ucx.neps == 0)
        goto out;
    reqs = calloc(zcopy_ucx.neps, sizeof(*reqs));
    pids = calloc(zcopy_ucx.neps, sizeof(*pids));
    if (reqs == NULL || pids == NULL)
        goto out;          /* each endpoint then closes with its last user */
    us = zcopy_ucx_request_wait_locked(
        ucp_worker_flush_nbx(zcopy_ucx.worker, &flush_param));
    if (us != UCS_OK)
        zcopy_log(ZCOPY_LOG_WARN, "ucx", "flushing the worker before "
                  "closing its endpoints: %s", ucs_status_string(us));
    for (size_t i = 0; i < zcopy_ucx.neps; i++) {
        zcopy_ucx_ep_t *ep = zcopy_ucx.eps[i];

        ep->flushed = ep->issued;
        rkeys_destroy_all_locked(ep);
        if (ep->handle == NULL)
            continue;
        reqs[n] = ucp_ep_close_nbx(ep->handle, &close_in_flush_mode);
        pids[n] = ep->key.pid;
        ep->handle = NULL;
        if (UCS_PTR_IS_ERR(reqs[n])) {
            zcopy_log(ZCOPY_LOG_WARN, "ucx", "closing the endpoint to pid "
                      "%llu: %s", (unsigned long long)pids[n],
                      ucs_status_string(UCS_PTR_STATUS(reqs[n])));
            reqs[n] = NULL;
        }
        n++;
    }
    closes_wait_locked(reqs, pids, n);
    zcopy_log(ZCOPY_LOG_DEBUG, "ucx", "disconnected %zu endpoints", n);
out:
    free(reqs);
    free(pids);
    pthread_mutex_unlock(&zcopy_ucx.lock);
}

void zcopy_ucx_ep_put(zcopy_ucx_ep_t *ep)
{
    if (ep == NULL)
        return;
    pthread_mutex_lock(&zcopy_ucx.lock);
    if (--ep->refs == 0)
        zcopy_ucx_ep_close_locked(ep, true);
    pthread_mutex_unlock(&zcopy_ucx.lock);
}

/* --- remote keys ---------------------------------------------------------- */

/* Keys cached per endpoint, fetched from the peer on a miss (arrivals name
 * blocks without their keys). A bound keeps the blocks a peer activated at
 * ever new addresses (whose keys no new generation overlaps) from piling
 * up, and keeps each lookup short; an evicted key that is needed again is
 * fetched again. A collective uses a few keys per peer, so evicting the
 * least recently used never takes one in use. */
#define ZCOPY_UCX_RKEYS_PER_EP 64

static void rkeys_drop_locked(zcopy_ucx_ep_t *ep, const uint64_t *live,
                              size_t nlive, const uint64_t *only);

/* A peer's live blocks never overlap, so a cached key whose block overlaps
 * a new generation's belongs to a block the peer has deactivated (often
 * one re-activated at the same address): it is destroyed here, before the
 * new key exists, and can never be used again. */
static void retire_overlaps_locked(zcopy_ucx_ep_t *ep,
                                   const zcopy_ucx_remote_t *remote)
{
    for (size_t i = 0; i < ep->nrkeys; i++) {
        const zcopy_ucx_rkey_t *old = ep->rkeys[i];
        uint64_t gen = old->generation;

        if (!zcopy_ranges_overlap(old->va, old->size, remote->va,
                                  remote->size))
            continue;
        zcopy_log(ZCOPY_LOG_TRACE, "ucx", "pid %llu: key of generation %llu "
                  "retired by generation %llu",
                  (unsigned long long)ep->key.pid, (unsigned long long)gen,
                  (unsigned long long)remote->generation);
        rkeys_drop_locked(ep, NULL, 0, &gen);
        i = (size_t)-1; /* the array was reordered: start again */
    }
}

static void evict_oldest_locked(zcopy_ucx_ep_t *ep)
{
    size_t oldest = 0;
    uint64_t gen;

    for (size_t i = 1; i < ep->nrkeys; i++)
        if (ep->rkeys[i]->used < ep->rkeys[oldest]->used)
            oldest = i;
    gen = ep->rkeys[oldest]->generation;
    zcopy_log(ZCOPY_LOG_TRACE, "ucx", "pid %llu: key of generation %llu "
              "evicted (%d keys cached)", (unsigned long long)ep->key.pid,
              (unsigned long long)gen, ZCOPY_UCX_RKEYS_PER_EP);
    rkeys_drop_locked(ep, NULL, 0, &gen);
}

/* The cached key of generation @generation, which must still be
 * [@va, +@size): true when cached (*@st says whether it matched). */
static bool rkey_cached_locked(zcopy_ucx_ep_t *ep, uint64_t generation,
                               uint64_t va, uint64_t size,
                               zcopy_ucx_rkey_t **rkey_p, zcopy_status_t *st)
{
    for (size_t i = 0; i < ep->nrkeys; i++) {
        zcopy_ucx_rkey_t *rkey = ep->rkeys[i];

        if (rkey->generation != generation)
            continue;
        rkey->used = ++ep->rkey_clock;
        if (rkey->va != va || rkey->size != size) {
            *st = zcopy_error(ZCOPY_ERR_ARG, "ucx: remote key: generation "
                              "%llu of pid %llu was [%#llx, +%llu), now "
                              "[%#llx, +%llu)", (unsigned long long)generation,
                              (unsigned long long)ep->key.pid,
                              (unsigned long long)rkey->va,
                              (unsigned long long)rkey->size,
                              (unsigned long long)va, (unsigned long long)size);
        } else {
            *rkey_p = rkey;
            *st = ZCOPY_SUCCESS;
        }
        return true;
    }
    return false;
}

zcopy_status_t zcopy_ucx_rkey_get(zcopy_ucx_ep_t *ep,
                                  const zcopy_ucx_remote_t *remote,
                                  zcopy_ucx_rkey_t **rkey_p)
{
    zcopy_ucx_rkey_t *rkey;
    zcopy_status_t st = ZCOPY_SUCCESS;
    ucs_status_t us;
    ucp_ep_h handle;

    if (ep == NULL || remote == NULL || rkey_p == NULL ||
        remote->packed_rkey == NULL || remote->packed_rkey_len == 0 ||
        remote->size == 0)
        return zcopy_error(ZCOPY_ERR_ARG, "ucx: remote key: NULL or empty "
                           "argument");
    pthread_mutex_lock(&zcopy_ucx.lock);
    if (rkey_cached_locked(ep, remote->generation, remote->va, remote->size,
                           rkey_p, &st))
        goto out;

    retire_overlaps_locked(ep, remote);
    if (ep->nrkeys >= ZCOPY_UCX_RKEYS_PER_EP)
        evict_oldest_locked(ep);
    if (!grow((void **)&ep->rkeys, &ep->cap_rkeys, ep->nrkeys,
              sizeof(*ep->rkeys))) {
        st = zcopy_error(ZCOPY_ERR_NOMEM, "ucx: remote key: out of memory");
        goto out;
    }
    st = zcopy_ucx_ep_handle_locked(ep, &handle);
    if (st != ZCOPY_SUCCESS)
        goto out;
    rkey = calloc(1, sizeof(*rkey));
    if (rkey == NULL) {
        st = zcopy_error(ZCOPY_ERR_NOMEM, "ucx: remote key: out of memory");
        goto out;
    }
    /* UCX reads the packed key without being told its length; ours comes
     * from the peer's own ucp_rkey_pack, which is what makes this safe. */
    us = ucp_ep_rkey_unpack(handle, remote->packed_rkey, &rkey->handle);
    if (us != UCS_OK) {
        st = zcopy_ucx_error(us, "ucx: unpacking the key of generation %llu "
                             "of pid %llu",
                             (unsigned long long)remote->generation,
                             (unsigned long long)ep->key.pid);
        free(rkey);
        goto out;
    }
    rkey->ep = ep;
    rkey->generation = remote->generation;
    rkey->va = remote->va;
    rkey->size = remote->size;
    rkey->used = ++ep->rkey_clock;
    ep->rkeys[ep->nrkeys++] = rkey;
    *rkey_p = rkey;
out:
    pthread_mutex_unlock(&zcopy_ucx.lock);
    return st;
}

zcopy_status_t zcopy_ucx_rkey_fetch(zcopy_ucx_ep_t *ep,
                                    const zcopy_ucx_block_ref_t *ref,
                                    zcopy_ucx_rkey_t **rkey_p, bool *fetched)
{
    zcopy_ucx_comp_t comp = ZCOPY_UCX_COMP_INIT;
    zcopy_status_t st, waited;
    zcopy_ucx_remote_t remote;
    uint8_t *packed;
    size_t len;
    bool cached;

    if (fetched != NULL)
        *fetched = false;
    if (ep == NULL || ref == NULL || rkey_p == NULL || ref->size == 0)
        return zcopy_error(ZCOPY_ERR_ARG, "ucx: remote key: NULL or empty "
                           "argument");
    pthread_mutex_lock(&zcopy_ucx.lock);
    cached = rkey_cached_locked(ep, ref->generation, ref->va, ref->size,
                                rkey_p, &st);
    pthread_mutex_unlock(&zcopy_ucx.lock);
    if (cached)
        return st;
    packed = malloc(ZCOPY_UCX_RKEY_FETCH_MAX);
    if (packed == NULL)
        return zcopy_error(ZCOPY_ERR_NOMEM, "ucx: remote key: out of memory");
    st = zcopy_ucx_key_ask(ep, ref->va, ref->size, packed,
                           ZCOPY_UCX_RKEY_FETCH_MAX, &len, &comp);
    if (fetched != NULL)
        *fetched = st == ZCOPY_SUCCESS; /* asked, answered or not */
    /* Whatever was posted completes before its buffer goes. */
    waited = zcopy_ucx_wait(&comp);
    if (st == ZCOPY_SUCCESS && waited != ZCOPY_SUCCESS)
        st = zcopy_error(waited, "ucx: the key of [%#llx, +%llu) from pid "
                         "%llu: %s", (unsigned long long)ref->va,
                         (unsigned long long)ref->size,
                         (unsigned long long)ep->key.pid, zcopy_error_detail());
    if (st == ZCOPY_SUCCESS) {
        remote = (zcopy_ucx_remote_t){ .va = ref->va, .size = ref->size,
                                       .generation = ref->generation,
                                       .packed_rkey = packed,
                                       .packed_rkey_len = len };
        st = zcopy_ucx_rkey_get(ep, &remote, rkey_p);
    }
    free(packed);
    return st;
}

static bool generation_live(uint64_t generation, const uint64_t *live,
                            size_t nlive)
{
    for (size_t i = 0; i < nlive; i++)
        if (live[i] == generation)
            return true;
    return false;
}

/* Destroys the key of generation *@only or, when @only is NULL, every key
 * whose generation is not in @live; first flushes @ep once if transfers
 * were issued on it since its last flush, so that no request still uses
 * a key being destroyed. */
static void rkeys_drop_locked(zcopy_ucx_ep_t *ep, const uint64_t *live,
                              size_t nlive, const uint64_t *only)
{
    bool flushed = ep->issued == ep->flushed;
    size_t i = 0;

    while (i < ep->nrkeys) {
        uint64_t gen = ep->rkeys[i]->generation;
        bool drop = only ? gen == *only : !generation_live(gen, live, nlive);

        if (!drop) {
            i++;
            continue;
        }
        if (!flushed) {
            flush_or_warn_locked(ep);
            flushed = true;
        }
        rkey_destroy_at_locked(ep, i);  /* moves the last key to i */
    }
}

void zcopy_ucx_rkey_forget(zcopy_ucx_ep_t *ep, uint64_t generation)
{
    if (ep == NULL)
        return;
    pthread_mutex_lock(&zcopy_ucx.lock);
    rkeys_drop_locked(ep, NULL, 0, &generation);
    pthread_mutex_unlock(&zcopy_ucx.lock);
}

void zcopy_ucx_rkey_prune(zcopy_ucx_ep_t *ep, const uint64_t *live,
                          size_t nlive)
{
    if (ep == NULL || (live == NULL && nlive > 0))
        return;
    pthread_mutex_lock(&zcopy_ucx.lock);
    rkeys_drop_locked(ep, live, nlive, NULL);
    pthread_mutex_unlock(&zcopy_ucx.lock);
}

bool zcopy_ucx_ep_rma_native(zcopy_ucx_ep_t *ep)
{
    ucp_ep_h handle;
    bool native;

    /* Known once connected; connecting here costs nothing that the
     * transfer which asks would not pay. A connection that fails answers
     * "emulated", and that transfer then fails on it. */
    pthread_mutex_lock(&zcopy_ucx.lock);
    native = zcopy_ucx_ep_handle_locked(ep, &handle) == ZCOPY_SUCCESS &&
             ep->rma_native;
    pthread_mutex_unlock(&zcopy_ucx.lock);
    return native;
}

zcopy_status_t zcopy_ucx_ep_connect(zcopy_ucx_ep_t *ep)
{
    ucp_ep_h handle;
    zcopy_status_t st;

    pthread_mutex_lock(&zcopy_ucx.lock);
    st = zcopy_ucx_ep_handle_locked(ep, &handle);
    pthread_mutex_unlock(&zcopy_ucx.lock);
    return st;
}

ZCOPY_COMPONENT_API size_t zcopy_ucx_connections(void)
{
    size_t n = 0;

    pthread_mutex_lock(&zcopy_ucx.lock);
    for (size_t i = 0; i < zcopy_ucx.neps; i++)
        n += zcopy_ucx.eps[i]->handle != NULL;
    pthread_mutex_unlock(&zcopy_ucx.lock);
    return n;
}
