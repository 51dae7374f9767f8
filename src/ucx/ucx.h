/*
 * UCX layer: one-sided transfers between processes on different servers,
 * directly on activated (registered) memory (SPEC section 6).
 *
 * One UCX context and one worker per process, created on first use. One
 * endpoint per peer process, shared by every communicator and counted by
 * reference. Activated blocks are registered with ucp_mem_map and their
 * packed remote keys travel to the peers (how is the caller's business);
 * a peer unpacks a key once per endpoint and block generation and keeps it
 * until the block's generation is gone or the endpoint closes.
 *
 * Progress. UCX 1.13 emulates put and get on this memory with active
 * messages (README.md in this folder): the *target* of a transfer must call
 * ucp_worker_progress, or the initiator waits forever. So every wait in
 * libzcopy calls zcopy_ucx_progress(), and a rank may block in an MPI call
 * while a peer can still be transferring to or from its memory only if
 * that call progresses the worker too: the coll component registers
 * zcopy_coll_progress with Open MPI's progress loop, which polls the worker
 * through zcopy_ucx_progress_loop() (less often while nothing happens).
 *
 * Threads. The worker is created UCS_THREAD_MODE_SERIALIZED and every call
 * here takes one process-wide mutex: an application at MPI_THREAD_SERIALIZED
 * or FUNNELED may call MPI from a different thread each time (SINGLE would
 * bind the worker to the thread that created it), and at MPI_THREAD_MULTIPLE
 * collectives on different communicators may run at once, so the layer
 * serialises them itself rather than pay for UCX's MULTI mode locking on
 * every call. zcopy_ucx_progress() only try-locks: a thread that finds the
 * worker busy knows its holder is progressing it.
 *
 * Lifetime. zcopy_ucx_cleanup() closes what is left (flushing endpoints,
 * so peers must still progress); a library destructor calls it, without
 * flushing, if nobody did.
 */
#ifndef ZCOPY_UCX_H
#define ZCOPY_UCX_H

#include "base/base.h"

#include <stdatomic.h>

/* Who a peer process is: shared by every communicator that reaches it. The
 * worker address given with it is checked too, so a reused pid on a host
 * never gets the endpoint of the process that had it before. */
typedef struct {
    uint64_t host;                /* the peer's host (zcopy_topo_server_t.id[0]) */
    uint64_t pid;
} zcopy_ucx_peer_key_t;

/* A block of a peer, as the peer described it (va, size and generation
 * from its registry, packed key from zcopy_ucx_mem_packed_rkey()). */
typedef struct {
    uint64_t va;
    uint64_t size;
    uint64_t generation;          /* unique per activation in its owner */
    const void *packed_rkey;
    size_t packed_rkey_len;
} zcopy_ucx_remote_t;

typedef struct zcopy_ucx_ep zcopy_ucx_ep_t;
typedef struct zcopy_ucx_rkey zcopy_ucx_rkey_t;
typedef struct zcopy_ucx_mem zcopy_ucx_mem_t;

/* Completion of a group of non-blocking operations: the caller owns it,
 * starts it at ZCOPY_UCX_COMP_INIT, and must zcopy_ucx_wait() on it (or see
 * zcopy_ucx_test() true) before it goes out of scope, since completions
 * write to it. Fields are read only after the wait. */
typedef struct {
    unsigned pending;             /* requests issued, not completed yet */
    int failure;                  /* ucs_status_t of the first failure, or 0 */
    uint64_t bytes;               /* payload bytes of the gets and puts issued */
    unsigned peak;                /* most requests in flight at once */
} zcopy_ucx_comp_t;
#define ZCOPY_UCX_COMP_INIT { 0, 0, 0, 0 }

/* For leak checks and tests. */
typedef struct {
    bool live;                    /* context and worker exist */
    size_t neps;                  /* endpoints open */
    size_t nrkeys;                /* unpacked remote keys, all endpoints */
    size_t nmems;                 /* registrations */
    uint64_t bytes;               /* bytes moved by gets and puts, ever */
    bool loop_idle;               /* Open MPI's loop polls seldom */
} zcopy_ucx_counts_t;

/* --- context and worker --------------------------------------------------- */

/* Creates the context and worker if not done yet. Every call below that
 * needs them calls it, so calling it is optional. A failure is logged once
 * and remembered: it is not retried (until zcopy_ucx_cleanup()). */
zcopy_status_t zcopy_ucx_init(void);

/* Closes endpoints (flush, then remote keys, then close), unregisters what
 * is still registered, destroys the worker and the context. Handles still
 * held by callers become invalid. Peers must keep progressing until every
 * process has returned from it. */
void zcopy_ucx_cleanup(void);

/* Closes every endpoint, all at once, in flush mode: for the start of
 * MPI_Finalize, while every peer is still there. Closing later, when the
 * communicators go, would flush towards peers that may have exited (UCX
 * then reports an endpoint timeout). Each peer's process must progress
 * (any MPI call, or its own disconnect) until every process has returned.
 * Endpoints stay valid for their holders: one used again reconnects. */
void zcopy_ucx_disconnect(void);

/* Whether this process's UCX could reach a peer over a transport whose
 * get the network does (rc, dc): where no process of a communicator can,
 * every get between them is emulated, which each rank knows without
 * connecting to anyone (zcopy_ucx_ep_rma_native says it per endpoint,
 * once connected). */
bool zcopy_ucx_rma_network(void);

/* This worker's address, for peers' zcopy_ucx_ep_get(); valid until
 * zcopy_ucx_cleanup(). */
zcopy_status_t zcopy_ucx_worker_address(const void **address_p,
                                        size_t *len_p);

/* Set while a worker exists; read without a lock by zcopy_ucx_progress(). */
extern _Atomic bool zcopy_ucx_live;

unsigned zcopy_ucx_progress_worker(void);

/* Progresses the worker once; returns the number of events. A load and a
 * branch when UCX was never used, so spin loops call it unconditionally. */
static inline unsigned zcopy_ucx_progress(void)
{
    /* Relaxed: a stale false only skips one poll, and the worker itself is
     * checked again under the lock. */
    if (!atomic_load_explicit(&zcopy_ucx_live, memory_order_relaxed))
        return 0;
    return zcopy_ucx_progress_worker();
}

/* zcopy_ucx_progress() for Open MPI's progress loop, which runs in every
 * MPI call: polls on every call until 8 polls in a row have found nothing,
 * then at most every 20 us until a poll (this one's or a wait's) finds an
 * event. */
unsigned zcopy_ucx_progress_loop(void);

/* --- endpoints ------------------------------------------------------------ */

/* A reference on the endpoint to the peer @key whose worker address is
 * [@address, +@address_len), created on first use; UCX connects it at its
 * first transfer. */
zcopy_status_t zcopy_ucx_ep_get(const zcopy_ucx_peer_key_t *key,
                                const void *address, size_t address_len,
                                zcopy_ucx_ep_t **ep_p);

/* Whether a get to this peer is done by the network hardware (rc, dc),
 * not emulated by the peer's worker (tcp, and shared memory with or
 * without a cma lane, in UCX 1.13). */
bool zcopy_ucx_ep_rma_native(zcopy_ucx_ep_t *ep);

/* Connects now, where a failure must be known before the first transfer
 * (a peer that would wait for a message never sent). */
zcopy_status_t zcopy_ucx_ep_connect(zcopy_ucx_ep_t *ep);

/* Endpoints of this process that UCX has connected (MPI_T's
 * coll_zcopy_ucx_connections). */
ZCOPY_COMPONENT_API size_t zcopy_ucx_connections(void);

/* Drops a reference. The last one flushes the endpoint, destroys its remote
 * keys and closes it in flush mode, progressing until done: the peer must
 * progress meanwhile if transfers were issued since the last flush. */
void zcopy_ucx_ep_put(zcopy_ucx_ep_t *ep);

/* --- registration --------------------------------------------------------- */

/* Registers existing memory [@va, +@size) of @kind with every UCX memory
 * domain that can (ucp_mem_map without allocation) and packs its key.
 * ZCOPY_ERR_UNSUPPORTED when this UCX has no support for @kind. */
zcopy_status_t zcopy_ucx_mem_register(void *va, size_t size,
                                      zcopy_mem_kind_t kind,
                                      zcopy_ucx_mem_t **mem_p);

/* Unregisters. Call it BEFORE the pages are unmapped or remapped (UCX does
 * not notice a remap under a live registration), once no local transfer
 * using it is pending and no peer will transfer to or from it again (the
 * emulated target side does not check registrations: a late peer access
 * lands on whatever is mapped there). */
void zcopy_ucx_mem_unregister(zcopy_ucx_mem_t *mem);

/* The packed remote key that peers hand to zcopy_ucx_rkey_get(); valid
 * while @mem is registered. */
void zcopy_ucx_mem_packed_rkey(const zcopy_ucx_mem_t *mem,
                               const void **rkey_p, size_t *len_p);

/* --- remote keys ---------------------------------------------------------- */

/* A registered block of a peer as the peer names it in a collective's
 * arrival: where it lies and which activation. Its key is not carried:
 * zcopy_ucx_rkey_fetch() asks the peer for it on first use. */
typedef struct {
    uint64_t va;
    uint64_t size;                /* 0: no block */
    uint64_t generation;          /* unique per registration in its owner */
} zcopy_ucx_block_ref_t;

/* Bytes a fetched packed key may have, and what asking for one sends. */
#define ZCOPY_UCX_RKEY_FETCH_MAX 4096
#define ZCOPY_UCX_KEY_REQUEST_BYTES 32

/* The remote key of @ref's block on @ep: from the endpoint's cache, else
 * asked of the peer (one active message, answered from the peer's progress
 * with the packed key of its registration [va, +size), which exists while
 * the peer is inside the collective that named it), then unpacked and
 * cached as zcopy_ucx_rkey_get() does. *@fetched, if given, says whether
 * the peer was asked (whatever it answered). A block whose key is longer
 * than ZCOPY_UCX_RKEY_FETCH_MAX is never registered for this
 * (zcopy_ucx_blocks_find does not find it), so a fetch fails only if a
 * message does. */
zcopy_status_t zcopy_ucx_rkey_fetch(zcopy_ucx_ep_t *ep,
                                    const zcopy_ucx_block_ref_t *ref,
                                    zcopy_ucx_rkey_t **rkey_p, bool *fetched);

/* The remote key of @remote's block on @ep: unpacked on first use, then
 * cached by generation until forgotten or the endpoint closes. Unpacking a
 * new generation first destroys the cached keys of blocks it overlaps:
 * those blocks are gone, since a peer's live blocks never overlap. A cached
 * generation that comes back with another va or size is ZCOPY_ERR_ARG. */
zcopy_status_t zcopy_ucx_rkey_get(zcopy_ucx_ep_t *ep,
                                  const zcopy_ucx_remote_t *remote,
                                  zcopy_ucx_rkey_t **rkey_p);

/* The block of generation @generation is gone on the peer: flushes @ep if
 * transfers were issued on it since its last flush, then destroys the key.
 * An unknown generation is not an error. */
void zcopy_ucx_rkey_forget(zcopy_ucx_ep_t *ep, uint64_t generation);

/* The same for every cached generation not among @live[0..@nlive). */
void zcopy_ucx_rkey_prune(zcopy_ucx_ep_t *ep, const uint64_t *live,
                          size_t nlive);

/* --- transfers ------------------------------------------------------------ */

/* Non-blocking get of [@remote, +@len) of the peer's block behind @rkey
 * into @local, and put of @local into it. [@remote, +@len) must lie inside
 * that block (ZCOPY_ERR_RANGE). @local_mem, if not NULL, is a registration
 * holding [@local, +@len) (UCX then skips its own lookup). @local must stay
 * untouched until @comp completes; a put's completion only means @local may
 * be reused: the data is at the peer after a flush. */
zcopy_status_t zcopy_ucx_get(zcopy_ucx_ep_t *ep, void *local,
                             const zcopy_ucx_mem_t *local_mem,
                             uint64_t remote, zcopy_ucx_rkey_t *rkey,
                             size_t len, zcopy_ucx_comp_t *comp);
zcopy_status_t zcopy_ucx_put(zcopy_ucx_ep_t *ep, const void *local,
                             const zcopy_ucx_mem_t *local_mem,
                             uint64_t remote, zcopy_ucx_rkey_t *rkey,
                             size_t len, zcopy_ucx_comp_t *comp);

/* A get the target serves with a tagged send (serve.c), for transports on
 * which UCX emulates get: [@remote, +@len) of the block behind @rkey lands
 * in @local when @comp completes, with no flush. The target serves it from
 * its own progress, as the emulated get needs too. */
zcopy_status_t zcopy_ucx_read(zcopy_ucx_ep_t *ep, void *local, uint64_t remote,
                              zcopy_ucx_rkey_t *rkey, size_t len,
                              zcopy_ucx_comp_t *comp);

/* The request half of a read whose answer comes through the job's
 * point-to-point engine (coll_zcopy_ucx_fetch pml, or auto's large
 * reads): asks @ep's peer to send [@remote, +@len) of the block behind
 * @rkey to rank @reader of the communicator whose context id is @cid,
 * with the host's send. The caller
 * has posted the matching receive with the host's hooks (host/host.h);
 * @comp counts only the request message. The peer always answers a request
 * that reaches it, with an empty message where it cannot serve the range;
 * one that fails on the way sets *@lost (which must live until @comp is
 * waited for), and its receive will never be answered. */
zcopy_status_t zcopy_ucx_read_ask(zcopy_ucx_ep_t *ep, uint64_t remote,
                                  zcopy_ucx_rkey_t *rkey, size_t len,
                                  uint32_t cid, int reader, bool *lost,
                                  zcopy_ucx_comp_t *comp);

/* Non-blocking flush: @comp completes once every transfer issued on @ep
 * before it has completed at the peer too (remote completion). */
zcopy_status_t zcopy_ucx_flush_nb(zcopy_ucx_ep_t *ep, zcopy_ucx_comp_t *comp);

/* Blocking flush, progressing the worker. */
zcopy_status_t zcopy_ucx_flush(zcopy_ucx_ep_t *ep);

/* Progresses once; true when nothing in @comp is pending. */
bool zcopy_ucx_test(zcopy_ucx_comp_t *comp);

/* Before issuing a transfer of @need requests (ZCOPY_UCX_GET_REQUESTS,
 * ..._PUT_, ..._READ_): progresses, serving peers as a wait does, until
 * @comp has room for them under @max requests in flight (or none in
 * flight, if they alone exceed it); @max 0 sets no bound. Failures are
 * left for the wait to report. */
#define ZCOPY_UCX_GET_REQUESTS 1
#define ZCOPY_UCX_PUT_REQUESTS 1
#define ZCOPY_UCX_READ_REQUESTS 2  /* the receive and the request message */
void zcopy_ucx_throttle(zcopy_ucx_comp_t *comp, unsigned need, unsigned max);

/* Progresses until nothing in @comp is pending (yielding the processor
 * when nothing happens for a while); then the first failure, if any. */
zcopy_status_t zcopy_ucx_wait(zcopy_ucx_comp_t *comp);

/* --- messages ------------------------------------------------------------ */

/* Tagged messages, for control traffic between servers (the spanning
 * control plane): a send completes once @buf may be reused, a receive
 * once [@buf, +@len) holds the message whose tag is exactly @tag (a
 * longer one fails the receive as truncated). Messages from one sender
 * with one tag are received in the order sent; one that arrives before
 * its receive is posted waits inside UCX. Both count into @comp. */
#define ZCOPY_UCX_TAG_MASK_ALL UINT64_MAX
/* Tags with this bit are the layer's own (served reads): refused here. */
#define ZCOPY_UCX_TAG_RESERVED (UINT64_C(1) << 63)
zcopy_status_t zcopy_ucx_tag_send(zcopy_ucx_ep_t *ep, const void *buf,
                                  size_t len, uint64_t tag,
                                  zcopy_ucx_comp_t *comp);
zcopy_status_t zcopy_ucx_tag_recv(void *buf, size_t len, uint64_t tag,
                                  zcopy_ucx_comp_t *comp);

/* One message in pieces (UCX's iov datatype): sent from, or received
 * into, the pieces in order. The array must outlive the operation. */
typedef struct {
    void *buf;
    size_t len;
} zcopy_ucx_iov_t;

/* Bytes of the @n pieces of @iov together. */
static inline size_t zcopy_ucx_iov_bytes(const zcopy_ucx_iov_t *iov,
                                         size_t n)
{
    size_t len = 0;

    for (size_t i = 0; i < n; i++)
        len += iov[i].len;
    return len;
}

zcopy_status_t zcopy_ucx_tag_sendv(zcopy_ucx_ep_t *ep,
                                   const zcopy_ucx_iov_t *iov, size_t n,
                                   uint64_t tag, zcopy_ucx_comp_t *comp);
zcopy_status_t zcopy_ucx_tag_recvv(const zcopy_ucx_iov_t *iov, size_t n,
                                   uint64_t tag, zcopy_ucx_comp_t *comp);

/* --- activated blocks (blocks.c) ---------------------------------------- */

#define ZCOPY_UCX_MAX_BLOCKS 1024   /* as many as a process may activate */

/* Starts UCX if needed and registers every activated block; from then on
 * zcopy_ucx_blocks_refresh() keeps the registrations equal to the
 * registry's blocks. Collective in spirit only: each process starts on its
 * own. */
zcopy_status_t zcopy_ucx_blocks_start(void);

/* After every change of the registry: registers new blocks, unregisters
 * deactivated ones. Nothing before zcopy_ucx_blocks_start(). */
void zcopy_ucx_blocks_refresh(void);

/* The registered block holding all of [@addr, +@len): false when there is
 * none (not activated, spanning two blocks, not registered). */
bool zcopy_ucx_blocks_find(uintptr_t addr, size_t len,
                           zcopy_ucx_block_ref_t *ref);

void zcopy_ucx_counts(zcopy_ucx_counts_t *counts);

#endif
