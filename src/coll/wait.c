/*
 * Waits: who shares which cores, and the report of a peer that does not
 * arrive. See wait.h.
 */
#include "wait.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void zcopy_cpus_of_self(zcopy_cpus_t *cpus)
{
    cpu_set_t set;

    memset(cpus, 0, sizeof(*cpus));
    if (sched_getaffinity(0, sizeof(set), &set) != 0)
        return;
    for (int c = 0; c < ZCOPY_CPU_WORDS * 64 && c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &set))
            cpus->words[c / 64] |= UINT64_C(1) << (c % 64);
}

int zcopy_cpus_shared(const zcopy_cpus_t *const *cpus, int n)
{
    uint64_t any[ZCOPY_CPU_WORDS] = { 0 };
    int count = 0;

    for (int r = 0; r < n; r++) {
        uint64_t mine = 0;

        for (int w = 0; w < ZCOPY_CPU_WORDS; w++) {
            any[w] |= cpus[r]->words[w];
            mine |= cpus[r]->words[w];
        }
        if (mine == 0)
            return 0;
    }
    for (int w = 0; w < ZCOPY_CPU_WORDS; w++)
        count += __builtin_popcountll(any[w]);
    return count;
}

/* glibc's sysconf reads sysfs on every call: a tenth of a communicator's
 * set-up. Taken once per process (racing threads store the same count). */
static long online_cpus(void)
{
    static _Atomic long cached;
    long n = atomic_load_explicit(&cached, memory_order_relaxed);

    if (n <= 0) {
        n = sysconf(_SC_NPROCESSORS_ONLN);
        atomic_store_explicit(&cached, n, memory_order_relaxed);
    }
    return n;
}

/* Ranks against the CPUs they run on, in two views:
 * - these ranks against the CPUs they may run on together, which sees
 *   ranks that a cpuset or taskset confines to fewer CPUs than ranks (two
 *   to a core, say); no CPUs when a rank could not tell;
 * - the job's ranks on this host against the CPUs one process may use; a
 *   process bound to one core says nothing here (mpirun binds each rank to
 *   a core of its own when they fit), so only a set of several counts. */
typedef struct {
    int ranks, cpus;              /* the first view */
    long host_ranks, host_cpus;   /* the second */
} wait_crowding_t;

static wait_crowding_t wait_crowding(const zcopy_cpus_t *const *cpus, int n,
                                     int self)
{
    const char *local_size = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    const int local = local_size ? atoi(local_size) : n;
    wait_crowding_t c = { .ranks = n, .cpus = zcopy_cpus_shared(cpus, n),
                          .host_ranks = local > n ? local : n,
                          .host_cpus = online_cpus() };
    int mine = 0;

    for (int w = 0; w < ZCOPY_CPU_WORDS; w++)
        mine += __builtin_popcountll(cpus[self]->words[w]);
    if (mine > 1 && mine < c.host_cpus)
        c.host_cpus = mine;
    return c;
}

/* Ranks outnumber cores in either view. */
bool zcopy_wait_yields(const zcopy_cpus_t *const *cpus, int n, int self)
{
    wait_crowding_t c;

    if (zcopy_config.yield_mode)
        return zcopy_config.yield_mode == 1;
    c = wait_crowding(cpus, n, self);
    return (c.cpus > 0 && c.ranks > c.cpus) || c.host_ranks > c.host_cpus;
}

/* Every core has @times ranks or more in either view. */
static bool wait_ranks_per_cpu(const zcopy_cpus_t *const *cpus, int n,
                               int self, int times)
{
    const wait_crowding_t c = wait_crowding(cpus, n, self);

    return (c.cpus > 0 && c.ranks >= times * c.cpus) ||
           c.host_ranks >= times * c.host_cpus;
}

/* Every core has two ranks or more: measured on a 2-core VM, sleeping
 * made small calls 1.1-1.3x faster at np 4 and 0.7x as fast at np 3,
 * where a CPU often has the waiter alone and waking it (an interrupt to
 * an idle CPU) costs more than its polling did. */
bool zcopy_wait_sleeps(const zcopy_cpus_t *const *cpus, int n, int self)
{
    if (zcopy_config.sleep_mode)
        return zcopy_config.sleep_mode == 1;
    return wait_ranks_per_cpu(cpus, n, self, 2);
}

/* Sleeping waits wake the rank that can go on at once, which makes
 * zcopy's small rooted calls as fast as a hand-over where every core has
 * two ranks (np 4 on the 2-core AMD EPYC VM, medians of 11 interleaved
 * jobs: reduce of 8 bytes 20.8 us against 24.2 handed over, gather of 64 bytes
 * per rank 22.5 against 28.6, bcast and scatter level), but not from
 * three (np 6: reduce 49.5 against 34.2, gather 48.7 against 35.2): each
 * call of zcopy's waits until the scheduler has run every rank, where
 * stock's senders leave once they have sent. */
bool zcopy_wait_hands_over(const zcopy_cpus_t *const *cpus, int n, int self)
{
    return !zcopy_wait_sleeps(cpus, n, self) ||
           wait_ranks_per_cpu(cpus, n, self, 3);
}

void zcopy_wait_check_clock(zcopy_wait_t *w, int peer)
{
    struct timespec now;
    double waited;

    clock_gettime(CLOCK_MONOTONIC, &now);
    if (w->since.tv_sec == 0 && w->since.tv_nsec == 0) {
        w->since = now;
        return;
    }
    waited = (double)(now.tv_sec - w->since.tv_sec) +
             (double)(now.tv_nsec - w->since.tv_nsec) * 1e-9;
    if (w->reported || zcopy_config.wait_report_s <= 0 ||
        waited < (double)zcopy_config.wait_report_s)
        return;
    w->reported = true;
    zcopy_log(ZCOPY_LOG_WARN, "coll", "rank %d has waited %.0f s for rank %d "
              "in %s (collective %llu on this communicator); still waiting",
              w->rank, waited, peer, w->what ? w->what : "a collective",
              (unsigned long long)w->seq);
}
