/*
 * Control plane of one communicator: a shared segment with one slot per
 * rank, through which the ranks agree on each collective's path and learn
 * each other's buffer addresses, and the synchronisation steps of the
 * zero-copy algorithms.
 *
 * Every collective has a number k, the same on every rank. A rank that is
 * not eligible for k says so and leaves at once for the fallback: it stores
 * its reason and then its arrival, and waits for nobody, so a job that
 * never activates memory pays two stores to lines nobody else reads (and,
 * where ranks outnumber cores, a fence and a look at its bell). An
 * eligible rank writes a record tagged k (its arguments, or an inline
 * payload), then its arrival, and waits for every peer's record or
 * arrival: a peer that arrived at k without a record tagged k was not
 * eligible, and then every rank falls back.
 *
 * Slot layout (one writer per slot, read by every rank of the comm):
 *   line 0    records by parity: arguments of collective k in rec[k % 2]
 *   line 1    sync: (number of syncs passed << 2) | what it reported
 *   line 2    arrive: the number of the last collective this rank entered
 *   line 3    reasons: (k << 8 | reason) of the collectives declined,
 *             in reasons[k % ZCOPY_CTL_REASONS]; read only to word a
 *             fallback, so a rank running far ahead may overwrite one
 *   then      two inline records, by parity, of inline_stride bytes each:
 *             the tag and the first 48 bytes of payload in the first line,
 *             the rest after, as many lines as rank 0 chose at set-up
 *             (zcopy_ctl_inline_limit: at most 17 where it expects waits
 *             to spin)
 *   then      vectors (counts, displacements) of the v-collectives, by
 *             parity like the records
 * and after every slot, one bell per rank (zcopy_ctl_bell_t).
 *
 * Records (and vectors) of parity k % 2 are rewritten only by an eligible
 * rank at k + 2, after it saw every peer arrive at k + 1: by then every
 * peer has finished collective k and its reading of them. Ineligible ranks
 * never write them, so they may run ahead freely.
 *
 * Syncs come only after a collective's arrivals, so a rank stores its next
 * sync word only once every peer has entered the next collective, that is,
 * has read this one's words. That is what lets a one-sided sync leave
 * its leader (zcopy_ctl_sync_from), or every rank but its leader
 * (zcopy_ctl_sync_to), free at once.
 */
#ifndef ZCOPY_COLL_CONTROL_H
#define ZCOPY_COLL_CONTROL_H

#include "coll/path.h"
#include "ipc/ipc.h"

#include <assert.h>
#include <stdatomic.h>

/* An eligible rank's arguments for collective seq (written last). */
typedef struct {
    _Atomic uint64_t seq;
    zcopy_plan_args_t args;
} zcopy_ctl_record_t;

/* A small collective's payload in the control plane: the tag (which says
 * eligible) shares the first line with the first 48 bytes, so the tiniest
 * calls cost one cache-line transfer; peers read the lines after it once
 * they see the tag. */
typedef struct {
    _Atomic uint64_t seq;         /* number of the collective (written last) */
    uint8_t pad[8];
    uint8_t data[];               /* the communicator's inline capacity */
} zcopy_ctl_inline_t;

/* Payload an inline record holds while waits spin: 1 KiB and the rest of
 * the tag's line (17 lines). Where ranks outnumber cores each step of a
 * collective waits for the scheduler to run every peer, which costs more
 * than copying tens of KiB: the records of such a communicator are as
 * large as coll_zcopy_inline_max_yield asks, up to the second bound. */
#define ZCOPY_CTL_INLINE_MAX (17 * ZCOPY_CACHE_LINE - sizeof(zcopy_ctl_inline_t))
#define ZCOPY_CTL_INLINE_YIELD_MAX ((size_t)256 << 10)

#define ZCOPY_CTL_REASONS 8       /* declined collectives remembered */

typedef struct {
    zcopy_ctl_record_t rec[2];
    _Atomic uint64_t sync;
    uint8_t pad1[ZCOPY_CACHE_LINE - 8];
    _Atomic uint64_t arrive;
    uint8_t pad2[ZCOPY_CACHE_LINE - 8];
    _Atomic uint64_t reasons[ZCOPY_CTL_REASONS];
    /* Then the inline records [2] of inline_stride bytes, by parity like
     * rec, and the vectors [2][ZCOPY_PLAN_NVEC][nranks], in bytes. */
    uint8_t tail[];
} zcopy_ctl_slot_t;
static_assert(sizeof(zcopy_ctl_record_t) * 2 == ZCOPY_CACHE_LINE,
              "both records share line 0");
static_assert(sizeof(zcopy_ctl_slot_t) == 4 * ZCOPY_CACHE_LINE,
              "slot header is whole cache lines, shared between processes");

/* What zcopy_ctl_reason() answers when a peer's reason was overwritten. */
#define ZCOPY_CTL_REASON_UNKNOWN 0xffu

/* Where some rank's waits yield (the communicator is crowded), a rank
 * whose waits would yield and sleep (zcopy_wait_sleeps: its CPUs have two
 * ranks or more each, or coll_zcopy_sleep 1) sleeps, once it has waited a
 * few turns for a peer, on that peer's bell instead of yielding; a rank
 * that stores what a peer may wait for (an arrival, a record, a sync)
 * rings its own bell when someone sleeps on it. The kernel then runs the
 * ranks that can go on at once, where a yield leaves them to their turn in
 * the scheduler's queue, and wakes no rank whose peer has not moved. One
 * line per rank, after the slots. */
typedef struct {
    _Atomic uint32_t ring;        /* futex word: bumped at every ring */
    _Atomic uint32_t sleepers;    /* ranks asleep, or about to be */
    uint8_t pad[ZCOPY_CACHE_LINE - 2 * sizeof(uint32_t)];
} zcopy_ctl_bell_t;
static_assert(sizeof(zcopy_ctl_bell_t) == ZCOPY_CACHE_LINE,
              "a bell is a line of its own, shared between processes");
static_assert(sizeof(_Atomic uint32_t) == sizeof(uint32_t),
              "the ring is the kernel's futex word");

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
    size_t inline_stride;         /* bytes per inline record */
    size_t inline_limit;          /* payload bytes per rank that take the
                                     inline path: the same on every rank */
    uint64_t seq;                 /* collectives entered on this comm */
    uint64_t arrived;             /* every peer is known to have entered
                                     this collective */
    uint64_t syncs;               /* syncs passed in the current lifetime */
    bool yield;                   /* more local ranks than cores */
    bool sleeps;                  /* zcopy_wait_sleeps: waits that would
                                     yield sleep on a bell */
    bool crowded;                 /* some rank's waits yield: the same on
                                     every rank (agreed at set-up) */
    bool rooted_hand_over;        /* some rank's waits yield where small
                                     rooted calls do better under stock
                                     (agreed too): server.h */
    zcopy_ctl_bell_t *bells;      /* by rank, in the segment where
                                     crowded; else NULL: nobody sleeps */
    uint64_t sent_msgs;           /* records published for peers */
    uint64_t sent_bytes;
    zcopy_ipc_peer_t **peers;     /* by rank; NULL for this rank */
    zcopy_ctl_cache_t (*cache)[2];/* last two translations per rank */
    unsigned *cache_next;
    const uint8_t **hints;        /* per rank: peer data read last time */
} zcopy_ctl_t;

/* Bytes per rank of the exchange zcopy_ctl_create() makes. */
size_t zcopy_ctl_hello_bytes(void);

/* Collective over the communicator (through its service ops): builds the
 * segment and imports every peer, exchanging into @hellos (the caller's,
 * zcopy_ctl_hello_bytes() per rank, allocated on every rank before the
 * call, as the communicator's lists: zcopy_comm_lists_alloc()). On failure, *reason says why, identically on every rank, and
 * zero-copy stays off for the communicator; *spans is set when that is
 * because its ranks are on several servers. */
zcopy_status_t zcopy_ctl_create(zcopy_comm_t *zc, void *hellos,
                                zcopy_ctl_t **ctl_p, bool *spans,
                                char *reason, size_t reason_len);
void zcopy_ctl_destroy(zcopy_ctl_t *ctl);

static inline zcopy_ctl_slot_t *zcopy_ctl_slot(const zcopy_ctl_t *ctl, int rank)
{
    return (zcopy_ctl_slot_t *)(ctl->segment + (size_t)rank * ctl->stride);
}

/* @rank's inline record for collective @seq. */
static inline zcopy_ctl_inline_t *
zcopy_ctl_inline(const zcopy_ctl_t *ctl, int rank, uint64_t seq)
{
    return (zcopy_ctl_inline_t *)(zcopy_ctl_slot(ctl, rank)->tail +
                                  (seq & 1) * ctl->inline_stride);
}

/* Payload bytes per rank up to which small collectives take the inline
 * path where waits spin, or where some rank's yield: the parameters
 * (agreed at set-up) within what a record may hold. */
size_t zcopy_ctl_inline_limit(bool yields);

/* Vector @which of @rank's slot for collective @seq. */
static inline int64_t *zcopy_ctl_vector(const zcopy_ctl_t *ctl, int rank,
                                        uint64_t seq, int which)
{
    int64_t *vectors = (int64_t *)(zcopy_ctl_slot(ctl, rank)->tail +
                                   2 * ctl->inline_stride);

    return vectors +
           ((seq & 1) * ZCOPY_PLAN_NVEC + (size_t)which) * (size_t)ctl->nranks;
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

void zcopy_ctl_bell_ring(zcopy_ctl_bell_t *bell);

/* After a store a peer may wait for: wakes the sleepers, if any. The fence
 * orders the store before the look at the count, as a sleeper counts
 * itself before its last look at the stores: one of the two sees the
 * other's. */
static inline void zcopy_ctl_ring(const zcopy_ctl_t *ctl)
{
    zcopy_ctl_bell_t *bell;

    if (ctl->bells == NULL)
        return;
    bell = &ctl->bells[ctl->rank];
    atomic_thread_fence(memory_order_seq_cst);
    if (atomic_load_explicit(&bell->sleepers, memory_order_relaxed) > 0)
        zcopy_ctl_bell_ring(bell);
}

/* Enters the next collective without being eligible: records @reason and
 * the arrival, and returns at once. Inline: it is all that a process with
 * nothing activated does per collective. */
static inline void zcopy_ctl_decline(zcopy_ctl_t *ctl, uint32_t reason)
{
    zcopy_ctl_slot_t *own = zcopy_ctl_slot(ctl, ctl->rank);
    const uint64_t seq = ++ctl->seq;

    ctl->sent_msgs++;
    ctl->sent_bytes += 2 * sizeof(uint64_t);
    /* Release: a peer that sees the arrival also sees the reason. */
    atomic_store_explicit(&own->reasons[seq % ZCOPY_CTL_REASONS],
                          seq << 8 | (reason & 0xffu), memory_order_release);
    atomic_store_explicit(&own->arrive, seq, memory_order_release);
    zcopy_ctl_ring(ctl);
}

/* Enters the next collective as eligible, with this rank's arguments and
 * the vectors its plan names; returns its number. Claims it first (peers
 * may still read the records and vectors of two collectives before).
 * Peers may read all of them from then on. */
uint64_t zcopy_ctl_publish(zcopy_ctl_t *ctl, const coll_plan_t *plan);

/* Waits until every peer has entered collective @seq; returns the first
 * rank that was not eligible for it, or -1 when all were. */
int zcopy_ctl_wait_arrivals(zcopy_ctl_t *ctl, uint64_t seq, const char *what);

/* The inline variant: as eligible, publishes @len bytes of payload and
 * waits for every peer, fetching what @reads names of their payloads
 * meanwhile; returns the first rank that was not eligible, or -1 (then
 * zcopy_ctl_inline holds every rank's payload). */
int zcopy_ctl_inline_exchange(zcopy_ctl_t *ctl, const void *data, size_t len,
                              const zcopy_coll_inline_reads_t *reads,
                              const char *what);

/* Why @rank declined collective @seq: its reason, or
 * ZCOPY_CTL_REASON_UNKNOWN when it has since declined too many others. */
uint32_t zcopy_ctl_reason(const zcopy_ctl_t *ctl, int rank, uint64_t seq);

static inline const zcopy_plan_args_t *zcopy_ctl_args(const zcopy_ctl_t *ctl,
                                                     int rank, uint64_t seq)
{
    return &zcopy_ctl_slot(ctl, rank)->rec[seq & 1].args;
}

/* A full synchronisation of the comm. Every rank passes the same syncs in
 * the same order; returns what the ranks reported, or-ed together. */
unsigned zcopy_ctl_sync_flags(zcopy_ctl_t *ctl, unsigned flags);

/* The same, true when any rank reported anything. */
static inline bool zcopy_ctl_sync(zcopy_ctl_t *ctl, bool failed)
{
    return zcopy_ctl_sync_flags(ctl, failed ? ZCOPY_SYNC_FAILED : 0) != 0;
}

/* A sync after a step in which only @leader touched peers' buffers, so
 * that only it can have failed: every rank counts it as a full sync, but
 * the leader waits for nobody and the others for the leader alone (where
 * ranks outnumber cores, one scheduler round fewer). Returns what the
 * leader reported. */
unsigned zcopy_ctl_sync_from(zcopy_ctl_t *ctl, int leader, unsigned flags);

/* The mirror image: a sync after a step in which every rank touched only
 * @leader's buffers and its own, so that a failure concerns the rank that
 * had it and the leader alone. Every rank counts it as a full sync; the
 * others store their word and leave at once, and the leader waits for
 * every word, as a root that owns the buffers the others read or write
 * must. Returns what this rank reported, or at the leader what every
 * rank did. Where ranks outnumber cores, no rank is then left waiting
 * for a turn of the CPU after the last store it needs: the leader is the
 * last to leave, and it yields while it waits. */
unsigned zcopy_ctl_sync_to(zcopy_ctl_t *ctl, int leader, unsigned flags);

/* What @rank reported, or (zcopy_ctl_failed_at_sync) whether it reported
 * FAILED, at the sync this rank passed last, a full one or, at its
 * leader, one to it (after a one-sided sync, other peers may not have
 * stored their word yet): the same answer on every rank that may ask
 * until the next collective's first sync, which no rank can pass before
 * every rank has left this one. */
static inline unsigned zcopy_ctl_flags_at_sync(const zcopy_ctl_t *ctl,
                                               int rank)
{
    return (unsigned)(atomic_load_explicit(&zcopy_ctl_slot(ctl, rank)->sync,
                                           memory_order_acquire) &
                      ZCOPY_SYNC_MASK);
}

static inline bool zcopy_ctl_failed_at_sync(const zcopy_ctl_t *ctl, int rank)
{
    return zcopy_ctl_flags_at_sync(ctl, rank) & ZCOPY_SYNC_FAILED;
}

/* This process's address of [addr, addr + len) of @rank's memory. */
zcopy_status_t zcopy_ctl_map(zcopy_ctl_t *ctl, int rank, uintptr_t addr,
                             size_t len, uint8_t **local_p);

#endif
