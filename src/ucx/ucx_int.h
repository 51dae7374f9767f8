/*
 * UCX layer, shared between its files: the process's state and the helpers
 * that run with its lock held (named *_locked).
 */
#ifndef ZCOPY_UCX_INT_H
#define ZCOPY_UCX_INT_H

#include "ucx.h"

#include <pthread.h>
#include <stdio.h>
#include <ucp/api/ucp.h>

struct zcopy_ucx_rkey {
    zcopy_ucx_ep_t *ep;           /* the endpoint it was unpacked on */
    uint64_t generation;
    uint64_t va;                  /* the peer's block, for range checks */
    uint64_t size;
    uint64_t used;                /* the endpoint's clock at its last use */
    ucp_rkey_h handle;
};

struct zcopy_ucx_ep {
    zcopy_ucx_peer_key_t key;
    void *address;                /* the peer's worker address (a copy) */
    size_t address_len;
    unsigned refs;
    ucp_ep_h handle;
    zcopy_ucx_rkey_t **rkeys;     /* pointers, so handles survive growth */
    size_t nrkeys, cap_rkeys;     /* at most ZCOPY_UCX_RKEYS_PER_EP */
    uint64_t rkey_clock;          /* counts key lookups, for eviction */
    /* Transfers issued on the endpoint, and how many of them a completed
     * flush covers: equal means no request can still use a remote key. */
    uint64_t issued;
    uint64_t flushed;
    bool rma_native;              /* its get needs no help from the peer */
};

struct zcopy_ucx_mem {
    uintptr_t va;
    size_t size;
    zcopy_mem_kind_t kind;
    ucp_mem_h memh;
    void *packed_rkey;            /* from ucp_rkey_pack */
    size_t packed_rkey_len;
    size_t serving;               /* served reads still sending from it */
    struct zcopy_ucx_mem *next;
};

typedef enum {
    UCX_STATE_NONE,               /* not tried yet */
    UCX_STATE_LIVE,
    UCX_STATE_FAILED              /* tried, failed; not retried */
} ucx_state_t;

/* Whether a line of what @print writes of @obj (ucp_*_print_info) that
 * holds @mark names an rc or dc transport right after @sep; @unknown when
 * nothing could be printed. */
typedef void (*zcopy_ucx_print_fn_t)(void *obj, FILE *f);
bool zcopy_ucx_info_names_rma(zcopy_ucx_print_fn_t print, void *obj,
                              const char *mark, const char *sep, bool unknown);

/* One per process: the context and worker are per process by design (one
 * worker serves every communicator; see ucx.h for the lock). */
typedef struct {
    pthread_mutex_t lock;
    ucx_state_t state;
    zcopy_status_t init_status;   /* why it failed, when FAILED */
    ucp_context_h context;
    ucp_worker_h worker;
    uint64_t memory_types;        /* UCS_MEMORY_TYPE_* bits UCX supports */
    bool rma_network;             /* it has an rc or dc transport */
    ucp_address_t *address;
    size_t address_len;
    zcopy_ucx_ep_t **eps;
    size_t neps, cap_eps;
    zcopy_ucx_mem_t *mems;
    size_t nmems;
    /* Reads served by tagged sends (serve.c). */
    void *serve_queue;            /* requests arrived, not yet served */
    size_t serve_cap, serve_queued;
    uint64_t read_tags;           /* this process's reads, for their tags */
    /* Reads served through the job's point-to-point engine (serve.c):
     * sends in flight, each holding its registration's serving. */
    void *p2p_sends;
    size_t p2p_cap, p2p_sending;
    _Atomic uint64_t bytes;       /* counts outlive the lock in _counts */
    /* How Open MPI's progress loop polls (zcopy_ucx_progress_loop):
     * written under the lock, read without it. */
    _Atomic unsigned loop_empty_polls;  /* in a row; any event clears it */
    _Atomic uint64_t loop_next_poll_ns; /* once idle, no poll before */
} zcopy_ucx_state_t;

extern zcopy_ucx_state_t zcopy_ucx;

/* Records a failed UCX call as a zcopy error with UCX's reason. */
zcopy_status_t zcopy_ucx_error(ucs_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

zcopy_status_t zcopy_ucx_init_locked(void);

/* The active message that asks a peer to send part of a registration. */
#define ZCOPY_UCX_AM_READ 0x5a

/* serve.c: the request handler, set once the worker exists; one progress
 * of the worker that then serves what arrived (every progress in this
 * layer goes through it); the queue's end. */
zcopy_status_t zcopy_ucx_serve_init_locked(void);
unsigned zcopy_ucx_worker_progress_locked(void);
void zcopy_ucx_serve_locked(void);
void zcopy_ucx_serve_cleanup_locked(void);

/* Asks @ep's peer for the packed key of its registration [@va, +@size):
 * it lands in [@buf, +@cap), *@len_p bytes, when @comp completes (serve.c;
 * a refusal fails @comp). */
zcopy_status_t zcopy_ucx_key_ask(zcopy_ucx_ep_t *ep, uint64_t va,
                                 uint64_t size, void *buf, size_t cap,
                                 size_t *len_p, zcopy_ucx_comp_t *comp);

/* Counts one more request in flight on @comp (under the lock, as its
 * completions run). */
static inline void zcopy_ucx_comp_issued(zcopy_ucx_comp_t *comp)
{
    if (++comp->pending > comp->peak)
        comp->peak = comp->pending;
}

/* After a poll that found @events: nothing (again) means a pause that
 * grows into yielding the processor, since the peer we wait for may need
 * our core; @idle counts the empty polls in a row. */
void zcopy_ucx_backoff(unsigned events, unsigned *idle);

/* One progress call, then zcopy_ucx_backoff(). */
void zcopy_ucx_poll_locked(unsigned *idle);

/* Waits for @request (a ucp *_nbx result without a callback) and frees it;
 * progresses the worker throughout. */
ucs_status_t zcopy_ucx_request_wait_locked(ucs_status_ptr_t request);

zcopy_status_t zcopy_ucx_flush_locked(zcopy_ucx_ep_t *ep);

/* Closes @ep whatever its references; with @flush (peers progressing),
 * flushes and closes in flush mode, else leaves it to the worker's end. */
void zcopy_ucx_ep_close_locked(zcopy_ucx_ep_t *ep, bool flush);

/* @ep's UCX endpoint, connected again if zcopy_ucx_disconnect() closed it. */
zcopy_status_t zcopy_ucx_ep_handle_locked(zcopy_ucx_ep_t *ep,
                                          ucp_ep_h *handle_p);

/* Unregisters and frees @mem (it must be on the list). */
void zcopy_ucx_mem_release_locked(zcopy_ucx_mem_t *mem);

#endif
