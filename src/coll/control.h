/*
 * Control plane of one communicator: a shared segment with one slot per
 * rank, through which the ranks agree on each collective's path and learn
 * each other's buffer addresses, and the synchronisation steps of the
 * zero-copy algorithms.
 *
 * Slot layout (one writer per slot, read by every rank of the comm):
 *   line 0  arrive: number of the last collective this rank entered, and
 *           that collective's arguments, double-buffered by parity. A rank
 *           rewrites args[k % 2] only in collective k, after it has seen
 *           every peer arrive at k - 1, i.e. after every peer finished
 *           reading args[k % 2] of collective k - 2.
 *   line 1  sync: (number of syncs passed << 1) | failed.
 *   then    vectors (counts, displacements) of the v-collectives, also
 *           double-buffered, for the peers that need another rank's.
 */
#ifndef ZCOPY_COLL_CONTROL_H
#define ZCOPY_COLL_CONTROL_H

#include "comm/comm.h"
#include "ipc/ipc.h"

#include <assert.h>
#include <stdatomic.h>

typedef struct {
    uint32_t reason;              /* ZCOPY_ELIGIBLE or why this rank is not */
    uint32_t flags;               /* ZCOPY_CTL_IN_PLACE */
    uint64_t sbuf;                /* effective send buffer (own address) */
    uint64_t rbuf;
} zcopy_ctl_args_t;

#define ZCOPY_CTL_INLINE_MAX 48   /* payload bytes that fit a line */

/* A tiny collective in one line: flag, eligibility and payload travel in
 * a single cache-line transfer. */
typedef struct {
    _Atomic uint64_t seq;         /* number of the inline collective */
    uint32_t reason;
    uint32_t flags;
    uint8_t data[ZCOPY_CTL_INLINE_MAX];
} zcopy_ctl_inline_t;
static_assert(sizeof(zcopy_ctl_inline_t) == ZCOPY_CACHE_LINE, "one line");

typedef struct {
    _Atomic uint64_t arrive;
    zcopy_ctl_args_t args[2];
    uint8_t pad0[ZCOPY_CACHE_LINE - 8 - 2 * sizeof(zcopy_ctl_args_t)];
    _Atomic uint64_t sync;
    uint8_t pad1[ZCOPY_CACHE_LINE - 8];
    zcopy_ctl_inline_t inl[2];    /* by parity, like args */
    int64_t vectors[];            /* [2][ZCOPY_CTL_NVEC][nranks], in bytes */
} zcopy_ctl_slot_t;
static_assert(sizeof(zcopy_ctl_slot_t) == 4 * ZCOPY_CACHE_LINE,
              "slot header is four cache lines, shared between processes");

#define ZCOPY_CTL_IN_PLACE 0x1u

#define ZCOPY_CTL_NVEC 3          /* vectors a rank may publish per call */
#define ZCOPY_CTL_MAX_RANKS 1024  /* larger communicators fall back */

typedef struct {
    uint64_t table_version;
    uintptr_t addr;
    size_t len;
    uint8_t *local;
} zcopy_ctl_cache_t;

typedef struct zcopy_ctl {
    int rank, nranks;
    uint8_t *segment;
    size_t segment_size;
    size_t stride;                /* bytes per slot */
    uint64_t seq;                 /* collectives entered on this comm */
    uint64_t inline_seq;          /* inline collectives entered */
    uint64_t syncs;               /* syncs passed in the current lifetime */
    bool yield;                   /* more local ranks than cores */
    zcopy_ipc_peer_t **peers;     /* by rank; NULL for this rank */
    zcopy_ctl_cache_t (*cache)[2];/* last two translations per rank */
    unsigned *cache_next;
    const uint8_t **hints;        /* per rank: peer data read last time */
} zcopy_ctl_t;

/* Collective over the communicator (through its service ops): builds the
 * segment and imports every peer. On failure, *reason says why, identically
 * on every rank, and zero-copy stays off for the communicator; *spans is
 * set when that is because its ranks are on several servers. */
zcopy_status_t zcopy_ctl_create(zcopy_comm_t *zc, zcopy_ctl_t **ctl_p,
                                bool *spans, char *reason, size_t reason_len);
void zcopy_ctl_destroy(zcopy_ctl_t *ctl);

static inline zcopy_ctl_slot_t *zcopy_ctl_slot(const zcopy_ctl_t *ctl, int rank)
{
    return (zcopy_ctl_slot_t *)(ctl->segment + (size_t)rank * ctl->stride);
}

/* Vector @which of @rank's slot for collective @seq. */
static inline int64_t *zcopy_ctl_vector(const zcopy_ctl_t *ctl, int rank,
                                        uint64_t seq, int which)
{
    return zcopy_ctl_slot(ctl, rank)->vectors +
           ((seq & 1) * ZCOPY_CTL_NVEC + (size_t)which) * (size_t)ctl->nranks;
}

/* Small collectives read the same peer buffers call after call: asking for
 * those lines before waiting for the peers overlaps their transfer with the
 * arrival. A prefetch never faults, so a stale hint costs nothing. */
static inline void zcopy_ctl_prefetch_hints(const zcopy_ctl_t *ctl)
{
    for (int r = 0; r < ctl->nranks; r++)
        if (ctl->hints[r] != NULL)
            __builtin_prefetch(ctl->hints[r], 0, 3);
}

/* Enters the next collective with this rank's arguments; returns its
 * number. Peers may read the arguments from then on. */
uint64_t zcopy_ctl_publish(zcopy_ctl_t *ctl, const zcopy_ctl_args_t *args);
/* Waits until every peer has entered collective @seq. */
void zcopy_ctl_wait_arrivals(const zcopy_ctl_t *ctl, uint64_t seq);

/* The inline variant: publishes @len bytes of payload with the arrival and
 * waits for every peer's; returns the inline collective's number. */
uint64_t zcopy_ctl_inline_exchange(zcopy_ctl_t *ctl, uint32_t reason,
                                   const void *data, size_t len);

static inline const zcopy_ctl_inline_t *
zcopy_ctl_inline(const zcopy_ctl_t *ctl, int rank, uint64_t seq)
{
    return &zcopy_ctl_slot(ctl, rank)->inl[seq & 1];
}

static inline const zcopy_ctl_args_t *zcopy_ctl_args(const zcopy_ctl_t *ctl,
                                                     int rank, uint64_t seq)
{
    return &zcopy_ctl_slot(ctl, rank)->args[seq & 1];
}

/* A full synchronisation of the comm. Every rank passes the same syncs in
 * the same order; returns true when any rank reported failure. */
bool zcopy_ctl_sync(zcopy_ctl_t *ctl, bool failed);

/* This process's address of [addr, addr + len) of @rank's memory. */
zcopy_status_t zcopy_ctl_map(zcopy_ctl_t *ctl, int rank, uintptr_t addr,
                             size_t len, uint8_t **local_p);

#endif
