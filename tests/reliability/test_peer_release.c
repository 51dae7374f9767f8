/*
 * A peer is let go with the last communicator that connected to it
 * (issue 7, 1c). Peers are per process and shared by every communicator
 * (src/ipc: one pidfd, one mapping of the peer's export table and one
 * import of each of its blocks, whatever the number of communicators), so
 * freeing one of two communicators over the same pair must keep them, and
 * freeing the last must drop all of them, on both sides, with the blocks
 * still activated everywhere. test_remap covers the other way out (the
 * owner deactivates and frees); this is the MPI_Comm_free way.
 *
 * The communicators under test must be the only ones holding peers, so
 * nothing zcopy is enabled on runs a collective before the end: they are
 * made from `quiet`, a dup of WORLD that opted out of zcopy, which also
 * orders the steps (making a communicator runs collectives on its parent:
 * made from WORLD, they would set WORLD up). A split does not inherit the
 * info key, so zcopy is on in every split:
 *
 *   pair   = split of quiet into {0,1}, {2,3}, ... (an odd last rank alone)
 *   pair2  = dup of pair
 *   all    = split of quiet, every rank
 *
 * What is seen from /proc/self: pidfds (one per peer in use), mappings of
 * device memory (own block + one per imported block of a peer), control
 * segments (one per communicator), and mappings of export tables: own +
 * one per peer in use, and at most one per peer ever used, since a peer
 * no communicator uses goes dormant with its table still mapped (src/ipc/
 * peer.c: the lock-free check at every collective may still read it).
 */
#define _GNU_SOURCE
#include "relutil.h"
#include "testutil.h"

#include <sys/syscall.h>

#define COUNT 4096

static int rank, nranks;
static MPI_Comm quiet;            /* ordering only: zcopy is off on it */

typedef struct {
    int pidfds, tables, blocks, ctls;
} held_t;

static held_t held(void)
{
    return (held_t){ .pidfds = rel_count_fd_links("anon_inode:[pidfd]"),
                     .tables = proc_count_maps(REL_EXPORT),
                     .blocks = proc_count_maps(REL_MEM),
                     .ctls = proc_count_maps(REL_CTL) };
}

/* Where descriptors come over the owners' sockets (pidfd_getfd refused,
 * as under tests/confined, or forced), a peer in use holds no pidfd. */
static bool peers_hold_pidfds(void)
{
    const char *forced = getenv("OMPI_MCA_coll_zcopy_peer_access");
    int pidfd, fd;

    FILE *yama = fopen("/proc/sys/kernel/yama/ptrace_scope", "r");
    int scope = 0;

    if (yama) {
        if (fscanf(yama, "%d", &scope) != 1)
            scope = 0;
        fclose(yama);
    }
    if ((forced && strcmp(forced, "socket") == 0) || scope > 0)
        return false;
    pidfd = (int)syscall(SYS_pidfd_open, getpid(), 0);
    fd = pidfd < 0 ? -1 : (int)syscall(SYS_pidfd_getfd, pidfd, 0, 0);
    if (fd >= 0)
        close(fd);
    if (pidfd >= 0)
        close(pidfd);
    return fd >= 0;
}

/* Checks what this rank holds once every rank has reached this point:
 * @peers in use, @seen ever used, @ctls communicators set up. Before any
 * communicator set up, there is no export table at all. */
static void expect(const char *when, int peers, int seen, int ctls)
{
    int tables_min = seen ? 1 + peers : 0, tables_max = seen ? 1 + seen : 0;
    held_t h;

    MPI_Barrier(quiet);
    h = held();
    ZT_CHECK(h.pidfds == (peers_hold_pidfds() ? peers : 0) &&
                 h.blocks == 1 + peers && h.ctls == ctls &&
                 h.tables >= tables_min && h.tables <= tables_max,
             "%s: %d pidfds, %d device-memory mappings, %d control segments, "
             "%d export tables; expected %d, %d, %d, %d to %d", when,
             h.pidfds, h.blocks, h.ctls, h.tables,
             peers_hold_pidfds() ? peers : 0, 1 + peers, ctls, tables_min,
             tables_max);
}

/* An allgather that reads every peer's block: each is imported. */
static void import_all(MPI_Comm comm, int *send, int *recv, const char *name)
{
    MPIX_Zcopy_stats s0 = zt_stats(comm), s1;
    int me, n, bad = 0;

    MPI_Comm_rank(comm, &me);
    MPI_Comm_size(comm, &n);
    for (int i = 0; i < COUNT; i++)
        send[i] = me * COUNT + i;
    ZT_CHECK(MPI_Allgather(send, COUNT, MPI_INT, recv, COUNT, MPI_INT,
                           comm) == MPI_SUCCESS, "%s: allgather failed", name);
    for (int i = 0; i < n * COUNT; i++)
        bad += recv[i] != i;
    s1 = zt_stats(comm);
    ZT_CHECK(bad == 0, "%s: allgather wrong at %d elements", name, bad);
    if (n > 1)
        ZT_CHECK(s1.zcopy_calls == s0.zcopy_calls + 1,
                 "%s: allgather not zero-copy (%s)", name,
                 s1.last_fallback_reason);
}

int main(int argc, char **argv)
{
    MPI_Comm pair, pair2, all;
    zt_arena_t arena;
    int partner, pair_size, *send, *recv;
    MPI_Info info;
    char *res;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Info_create(&info);
    MPI_Info_set(info, MPIX_ZCOPY_INFO_KEY, "false");
    MPI_Comm_dup_with_info(MPI_COMM_WORLD, info, &quiet);
    MPI_Info_free(&info);

    zt_arena_init(&arena, MPI_COMM_WORLD,
                  (size_t)(nranks + 1) * COUNT * sizeof(int));
    res = arena.base;
    send = (int *)res;
    recv = send + COUNT;
    /* No communicator has set up zero-copy yet: no table, no peer. */
    expect("start", 0, 0, 0);
    ZT_CHECK(proc_count_maps(REL_EXPORT) == 0, "an export table before any "
             "communicator set up zero-copy");

    MPI_Comm_split(quiet, rank / 2, rank, &pair);
    MPI_Comm_set_errhandler(pair, MPI_ERRORS_RETURN);
    MPI_Comm_size(pair, &pair_size);
    partner = pair_size - 1; /* 1, or 0 for a rank alone */
    MPI_Comm_dup(pair, &pair2);
    import_all(pair, send, recv, "pair");
    import_all(pair2, send, recv, "pair's dup");
    /* The partner once, for both communicators. */
    expect("pair and its dup", partner, partner, 2 * partner);

    /* One of the two freed: the partner is still referenced. */
    MPI_Comm_free(&pair);
    expect("pair freed, its dup alive", partner, partner, partner);

    /* The last one: pidfd, table and imports of the partner all go, on
     * both sides, although every block is still activated. */
    MPI_Comm_free(&pair2);
    expect("both freed", 0, partner, 0);

    /* The same with every rank a peer, then gone again. */
    MPI_Comm_split(quiet, 0, rank, &all);
    MPI_Comm_set_errhandler(all, MPI_ERRORS_RETURN);
    import_all(all, send, recv, "every rank");
    expect("every rank", nranks - 1, nranks - 1, 1);
    MPI_Comm_free(&all);
    expect("every rank freed", 0, nranks - 1, 0);

    MPI_Comm_free(&quiet);
    return zt_finish();
}
