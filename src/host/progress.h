/*
 * The MPI library's progress loop, as seen from the layers below MPI
 * (ipc/, ucx/): run it, or ask to be part of it. Filled in with the other
 * host hooks (host.h) by the coll component; no-ops without one.
 */
#ifndef ZCOPY_HOST_PROGRESS_H
#define ZCOPY_HOST_PROGRESS_H

#include "base/base.h"

typedef struct {
    /* Runs the library's progress engine once; through it, every callback
     * registered there (zcopy's own, once wanted). True when the engine
     * found nothing to do and gave the processor away itself (Open MPI
     * does when ranks outnumber cores), so that a wait does not yield
     * twice per turn. */
    bool (*progress)(void);
    /* libzcopy has work for the library's progress loop from now on (UCX
     * started, or a peer's memory imported): the component hooks zcopy's
     * own progress in. Until then a job pays nothing per progress call. */
    void (*want_progress)(void);
} zcopy_progress_hooks_t;

/* Set once by the component before any communicator exists; the process
 * has one progress loop, hence one global. */
extern zcopy_progress_hooks_t zcopy_progress_hooks;

/* How deep this thread is in calls into the MPI library that zcopy made:
 * progress runs its own waits started, and sends it makes under its UCX
 * layer's lock. Whatever the library calls back meanwhile (a free list of
 * the MPI library growing through the MPI_Alloc_mem pool) runs under locks
 * zcopy may hold, and must not take them again (pool/pool.c). Per thread:
 * under MPI_THREAD_MULTIPLE another thread's pool growth still waits for
 * the lock, as any thread's registration does. */
extern _Thread_local unsigned zcopy_host_progress_depth
    __attribute__((tls_model("initial-exec")));

/* Around any call into the MPI library that zcopy makes under one of its
 * locks (its progress runs; the UCX layer's answers through the
 * point-to-point engine): the depth above. */
static inline void zcopy_host_call_enter(void) { zcopy_host_progress_depth++; }
static inline void zcopy_host_call_leave(void) { zcopy_host_progress_depth--; }

/* Runs the progress engine; true if it yielded the processor. */
static inline bool zcopy_host_progress(void)
{
    bool yielded;

    zcopy_host_call_enter();
    yielded = zcopy_progress_hooks.progress();
    zcopy_host_call_leave();
    return yielded;
}

static inline void zcopy_host_want_progress(void)
{
    zcopy_progress_hooks.want_progress();
}

#endif
