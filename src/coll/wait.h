/*
 * Waiting for peers inside a collective: spin while every rank has a core,
 * give the core away when ranks outnumber cores, and keep the MPI
 * library's progress engine running either way (MPI's progress rule; and,
 * through that engine, zcopy's UCX worker, which a peer's emulated get or
 * put may need). Used by the control plane of a server (server/control.c) and by
 * that of a spanning communicator (span/plane.c).
 */
#ifndef ZCOPY_COLL_WAIT_H
#define ZCOPY_COLL_WAIT_H

#include "base/base.h"
#include "host/progress.h"

#include <sched.h>
#include <time.h>

/* CPUs 0 to 1023, as many as glibc's cpu_set_t holds by default. */
#define ZCOPY_CPU_WORDS 16

/* The CPUs a process may run on, as exchanged at set-up; all zero if it
 * could not tell. */
typedef struct {
    uint64_t words[ZCOPY_CPU_WORDS];
} zcopy_cpus_t;

void zcopy_cpus_of_self(zcopy_cpus_t *cpus);

/* How many CPUs the @n processes of @cpus may run on together; 0 if one
 * of them could not tell. */
int zcopy_cpus_shared(const zcopy_cpus_t *const *cpus, int n);

/* Whether the @n ranks of one server whose CPUs are @cpus (@self among
 * them) outnumber the cores they share: then waits yield. */
bool zcopy_wait_yields(const zcopy_cpus_t *const *cpus, int n, int self);

/* Whether they are at least twice the cores: then a wait that would yield
 * sleeps instead, where the path can be woken (server/control.c);
 * coll_zcopy_sleep 1 or 2 decides it instead. */
bool zcopy_wait_sleeps(const zcopy_cpus_t *const *cpus, int n, int self);

/* Whether, where this rank's waits yield, small rooted calls go to the
 * previous component (coll/server/server.h): where its waits do not sleep,
 * or where the ranks are three times the cores or more. */
bool zcopy_wait_hands_over(const zcopy_cpus_t *const *cpus, int n, int self);

/* A wait in progress: which collective, and since when, so that a peer that
 * never arrives is reported once (the wait itself goes on, as MPI's does). */
typedef struct {
    bool yield;                   /* ranks outnumber cores */
    int rank;                     /* the waiting rank, for the report */
    const char *what;
    uint64_t seq;
    unsigned spins;
    bool reported;
    struct timespec since;
} zcopy_wait_t;

/* Spins between two runs of the MPI library's progress engine: a few
 * hundred nanoseconds, longer than a tiny collective's arrival takes, so
 * the latency of a call whose peers are already there pays nothing. */
#define ZCOPY_WAIT_SPINS_PER_PROGRESS 16
/* The same for a wait whose every turn has polled UCX's worker first (a
 * turn of an engine itself, 0.3-1 us on tcp): Open MPI's engine then runs
 * every 40-130 us, and a message that lands during its run
 * (an epoll on tcp) waits for it less often. Measured on the emulated
 * cluster (2 servers of 1 rank): an 8 B allreduce or bcast 9.5 us against
 * 10.4 us with the in-server spacing. */
#define ZCOPY_WAIT_POLLS_PER_PROGRESS 128
/* Turns a wait spins before it yields where ranks outnumber cores (or,
 * inside one server, sleeps: server/control.c). */
#define ZCOPY_WAIT_SPINS_BEFORE_YIELD 8
/* Spins between two looks at the clock for the stuck-peer report. */
#define ZCOPY_WAIT_SPINS_PER_CLOCK 4096

static inline void zcopy_wait_init(zcopy_wait_t *w, bool yield, int rank,
                                   const char *what, uint64_t seq)
{
    *w = (zcopy_wait_t){ .yield = yield, .rank = rank, .what = what,
                         .seq = seq };
}

/* Reports once, after coll_zcopy_wait_report seconds, that @peer is
 * awaited. */
void zcopy_wait_check_clock(zcopy_wait_t *w, int peer);

static inline void zcopy_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* One turn of a wait for @peer. The engine runs every @progress_every
 * spins; when ranks outnumber cores, the core goes away every turn, or the
 * rank waited for cannot run: once, by the engine's own yield when it has
 * one (measured at np 4 on 2 cores: 10 us per tiny collective, against
 * 19 us yielding twice). */
static inline void zcopy_wait_turn(zcopy_wait_t *w, int peer,
                                   unsigned progress_every)
{
    const unsigned n = ++w->spins;
    const bool yielding = w->yield && n > ZCOPY_WAIT_SPINS_BEFORE_YIELD;
    bool yielded = false;

    if (yielding || n % progress_every == 0)
        yielded = zcopy_host_progress();
    if (n % ZCOPY_WAIT_SPINS_PER_CLOCK == 0 || (yielding && n % 64 == 0))
        zcopy_wait_check_clock(w, peer);
    /* The engine says it yielded when it would have, idle; a busy one did
     * not, so every eighth turn yields here regardless. */
    if (yielded && n % 8 != 0)
        return;
    if (yielding || n % 4096 == 0)
        sched_yield();
    else
        zcopy_cpu_relax();
}

/* A turn of a wait that sleeps instead of yielding (a server's control
 * plane, server/control.c): the engine every turn, since a sleep lasts
 * longer than a yield, and the clock for the stuck-peer report. */
static inline void zcopy_wait_tend(zcopy_wait_t *w, int peer)
{
    w->spins++;
    zcopy_host_progress();
    zcopy_wait_check_clock(w, peer);
}

static inline void zcopy_wait_relax(zcopy_wait_t *w, int peer)
{
    zcopy_wait_turn(w, peer, ZCOPY_WAIT_SPINS_PER_PROGRESS);
}

/* A turn of a wait that has just polled UCX's worker itself. */
static inline void zcopy_wait_relax_polled(zcopy_wait_t *w, int peer)
{
    zcopy_wait_turn(w, peer, ZCOPY_WAIT_POLLS_PER_PROGRESS);
}

#endif
