/*
 * Per-communicator state of libzcopy. The coll component creates one for
 * every communicator it is enabled on and hands over a small table of
 * service collectives (ops) that never re-enter zcopy: libzcopy uses them
 * for its own setup, so it needs no Open MPI internals.
 */
#ifndef ZCOPY_COMM_H
#define ZCOPY_COMM_H

#include "base/base.h"
#include "registry/registry.h"

#include <assert.h>
#include <mpi.h>
#include <mpix_zcopy.h>

typedef struct {
    /* Gathers @bytes from every rank into @rbuf, in rank order. */
    int (*allgather)(const void *sbuf, void *rbuf, size_t bytes, void *ctx);
    /* Sends @bytes to every rank and receives @bytes from every rank, in
     * rank order. */
    int (*alltoall)(const void *sbuf, void *rbuf, size_t bytes, void *ctx);
    int (*bcast)(void *buf, size_t bytes, int root, void *ctx);
    int (*barrier)(void *ctx);
    /* The reductions of the application's own call, on part of its
     * buffers, to finish a zero-copy call a rank could not complete: an
     * in-place allreduce of @count elements at @buf, and a reduce (@sbuf
     * MPI_IN_PLACE at the root for in place). */
    int (*allreduce)(void *buf, size_t count, MPI_Datatype type, MPI_Op op,
                     void *ctx);
    int (*reduce)(const void *sbuf, void *rbuf, size_t count,
                  MPI_Datatype type, MPI_Op op, int root, void *ctx);
    void *ctx;
} zcopy_comm_ops_t;

struct zcopy_ctl;
struct zcopy_span;

typedef enum {
    ZCOPY_COMM_NEW,               /* set up at its first collective */
    ZCOPY_COMM_READY,             /* zero-copy possible */
    ZCOPY_COMM_DISABLED,          /* always falls back, see disabled_reason */
    ZCOPY_COMM_OPTED_OUT,         /* info key mpix_zcopy=false on every rank:
                                     forwards, counts nothing */
    ZCOPY_COMM_RETRY,             /* set-up ran out of memory: falls back
                                     until collective retry_at, then sets up
                                     again */
    ZCOPY_COMM_IDLE               /* no rank had ever set a memory range at
                                     set-up: falls back until collective
                                     retry_at, a barrier that asks once
                                     some rank has set one, or a
                                     MPIX_Comm_set_memory_range on it, then
                                     sets up (coll.c, coll_idle) */
} zcopy_comm_state_t;

typedef struct zcopy_comm {
    MPI_Comm handle;
    int rank;
    int size;
    zcopy_comm_ops_t ops;
    zcopy_comm_state_t state;
    struct zcopy_ctl *ctl;        /* control plane, once READY in a server */
    struct zcopy_span *span;      /* or this, once READY across servers */
    const char *name;             /* for logs; set by the component */
    uint64_t calls;               /* collectives entered, the same count on
                                     every rank */
    uint64_t retry_at;            /* RETRY, IDLE: set up again there */
    uint64_t idle_barriers;       /* IDLE: barriers since the last other
                                     collective libzcopy saw, for which
                                     of them ask (coll.c) */
    unsigned setups;              /* set-ups tried */
    bool opted_out;               /* this rank's info key mpix_zcopy */
    char disabled_reason[64];
    zcopy_covers_cache_t covers_cache; /* buffers found activated */
    struct {
        MPI_Op op;
        MPI_Datatype type;
    } reduce_cache;               /* a pair with a kernel (plan.c) */
    struct zcopy_plan_memo *plan_memo; /* the last plans (plan.c); freed
                                     with the comm */
    void *lists;                  /* ZCOPY_COMM_LISTS pointers per rank, for
                                     one call at a time (zcopy_comm_list) */
    void *holding;                /* zcopy_comm_hold(): one call's */
    size_t holding_len;
    MPIX_Zcopy_stats stats;       /* MPI allows one collective at a time per
                                     communicator, so plain counters do */
    /* The last fallback's reason, put into words only when asked for:
     * formatting it on every call would cost a job that never activates
     * memory more than deciding to fall back. */
    const char *fallback_coll, *fallback_why;
    struct zcopy_comm *next;      /* in the process's list, for lookup */
} zcopy_comm_t;

zcopy_status_t zcopy_comm_create(MPI_Comm handle, int rank, int size,
                                 const zcopy_comm_ops_t *ops,
                                 zcopy_comm_t **zc_p);
void zcopy_comm_destroy(zcopy_comm_t *zc);

/* Lists of a pointer per rank that a call's algorithm fills and reads
 * before it returns: each rank's input, each rank's output, the operands
 * of one reduction step. On the heap and sized by the communicator, so
 * that no size of communicator is refused; one call at a time per
 * communicator (MPI's rule) makes one set enough. */
typedef enum {
    ZCOPY_COMM_LIST_INPUTS,
    ZCOPY_COMM_LIST_OUTPUTS,
    ZCOPY_COMM_LIST_OPERANDS,
    ZCOPY_COMM_LISTS
} zcopy_comm_list_t;

/* Allocates the lists once (set-up); ZCOPY_ERR_NOMEM when it cannot. */
zcopy_status_t zcopy_comm_lists_alloc(zcopy_comm_t *zc);

static inline void *zcopy_comm_list(const zcopy_comm_t *zc,
                                    zcopy_comm_list_t which)
{
    assert(zc->lists != NULL); /* a call only runs after set-up */
    return (void **)zc->lists + (size_t)which * (size_t)zc->size;
}

/* The outcome of an agreement among every rank of a communicator. */
typedef struct {
    int rank;                     /* the first rank whose value was not 0,
                                     or -1 */
    int32_t value;                /* its value */
    unsigned any;                 /* the flags some rank set */
} zcopy_comm_vote_t;

/* Flags one agreement carries: bits 0 to ZCOPY_COMM_VOTE_FLAGS - 1. */
#define ZCOPY_COMM_VOTE_FLAGS 2

/* Every rank learns the first rank (in rank order) whose @value is not 0,
 * that value, and which of the @flags some rank set: one allreduce
 * through the service ops, with no memory of its own, so that a rank that
 * ran out of memory still takes part (the others would wait for it
 * forever). The same answer on every rank; an MPI error code when the
 * service call failed, and then @vote says nothing. */
int zcopy_comm_vote(zcopy_comm_t *zc, int32_t value, unsigned flags,
                    zcopy_comm_vote_t *vote);

/* Makes the communicator's holding buffer at least @len bytes (false when
 * out of memory): where an in-place reduce_scatter's result waits, in one
 * call at a time, until the peers have read the inputs it is to
 * overwrite. Kept from call to call (grown, never shrunk) and freed with
 * the communicator; zc->holding is its address. */
bool zcopy_comm_hold(zcopy_comm_t *zc, size_t len);

/* The zcopy state of @handle, or NULL where the component is not enabled. */
zcopy_comm_t *zcopy_comm_lookup(MPI_Comm handle);

/* Lets every spanning communicator finish the control messages its last
 * round left in flight (zcopy_span_plane_drain, which progresses UCX
 * alone: nothing it runs takes the list's lock), while the connections
 * between servers are still open. */
void zcopy_comm_drain_all(void);

/* Counts a fallback of collective @coll because of @why: both constants,
 * or strings that live as long as @zc. */
void zcopy_comm_count_fallback(zcopy_comm_t *zc, const char *coll,
                               const char *why);

/* The counters, the last fallback's reason put into words. */
ZCOPY_COMPONENT_API void zcopy_comm_get_stats(const zcopy_comm_t *zc,
                                              MPIX_Zcopy_stats *stats);

/* libzcopy's own MPI calls (e.g. the agreement inside
 * MPIX_Comm_set_memory_range) run inside enter/leave: the component passes
 * them straight to the previous component and counts nothing. */
extern _Thread_local int zcopy_internal_depth
    __attribute__((tls_model("initial-exec")));

static inline void zcopy_internal_enter(void) { zcopy_internal_depth++; }
static inline void zcopy_internal_leave(void) { zcopy_internal_depth--; }
static inline bool zcopy_internal_active(void)
{
    return zcopy_internal_depth > 0;
}

#endif
