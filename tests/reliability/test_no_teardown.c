/*
 * Lifecycle without teardown (issue 7, 1a). A program that never undoes
 * what it set up must still end cleanly: ranges stay set, blocks stay
 * activated (and imported by peers), derived communicators are freed with
 * all of that in place, and MPI_Finalize runs with WORLD's zero-copy state
 * and a split_type communicator still alive.
 *
 * This program checks what a rank can see of itself: the collectives run
 * zero-copy and right on every communicator, the frees leave WORLD working
 * and zero-copy, and every object zcopy holds is an anonymous memfd (no
 * path in any filesystem). jobcheck.sh checks the rest from outside: exit
 * status 0, no process left, nothing left in /dev/shm or /tmp.
 */
#define _GNU_SOURCE
#include "relutil.h"
#include "testutil.h"

#define COUNT 20000 /* ints: above the small-message threshold */

static int rank, nranks;

static int val(int salt, int r, int i) { return salt * 1000 + r * 100000 + i % 977; }

/* Allreduce, allgather and bcast on activated buffers of @comm: right
 * results and all three zero-copy. */
static void collectives(MPI_Comm comm, const char *name, int *mem, int salt)
{
    int me, n, *ar_s = mem, *ar_r = mem + COUNT, *bc = mem + 2 * COUNT;
    int *ag_s = mem + 3 * COUNT, *ag_r = mem + 4 * COUNT, bad = 0;
    MPIX_Zcopy_stats s0 = zt_stats(comm), s1;

    MPI_Comm_rank(comm, &me);
    MPI_Comm_size(comm, &n);
    for (int i = 0; i < COUNT; i++) {
        ar_s[i] = val(salt, me, i);
        bc[i] = me == 0 ? val(salt + 1, 0, i) : 0;
    }
    for (int i = 0; i < 64; i++)
        ag_s[i] = val(salt + 2, me, i);
    ZT_CHECK(MPI_Allreduce(ar_s, ar_r, COUNT, MPI_INT, MPI_SUM, comm) ==
                 MPI_SUCCESS, "%s: allreduce failed", name);
    ZT_CHECK(MPI_Bcast(bc, COUNT, MPI_INT, 0, comm) == MPI_SUCCESS,
             "%s: bcast failed", name);
    ZT_CHECK(MPI_Allgather(ag_s, 64, MPI_INT, ag_r, 64, MPI_INT, comm) ==
                 MPI_SUCCESS, "%s: allgather failed", name);
    for (int i = 0; i < COUNT; i++) {
        int sum = 0;
        for (int r = 0; r < n; r++)
            sum += val(salt, r, i);
        bad += ar_r[i] != sum || bc[i] != val(salt + 1, 0, i);
    }
    for (int i = 0; i < 64 * n; i++)
        bad += ag_r[i] != val(salt + 2, i / 64, i % 64);
    ZT_CHECK(bad == 0, "%s: %d wrong elements", name, bad);
    s1 = zt_stats(comm);
    ZT_CHECK(s1.zcopy_calls - s0.zcopy_calls == 3 &&
                 s1.fallback_calls == s0.fallback_calls,
             "%s: %llu of 3 collectives zero-copy (last fallback: %s)", name,
             (unsigned long long)(s1.zcopy_calls - s0.zcopy_calls),
             s1.last_fallback_reason);
}

/* Everything zcopy holds is a memfd, and the process holds no file in
 * /dev/shm, /tmp or /run but Open MPI's own: nothing of zcopy's has a
 * name there (or anywhere). */
static void only_memfds(void)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[4096], path[300], link[256];
    int named = 0, memfds = 0;
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;

    while (f && fgets(line, sizeof(line), f)) {
        const char *file = strchr(line, '/');

        if (file && rel_in_shared_dir(file) && !rel_open_mpi_file(file)) {
            named++;
            ZT_CHECK(false, "a mapping of a shared file: %s", line);
        }
    }
    if (f)
        fclose(f);
    while (d && (e = readdir(d)) != NULL) {
        ssize_t len;

        snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
        len = readlink(path, link, sizeof(link) - 1);
        if (e->d_name[0] == '.' || len < 0)
            continue;
        link[len] = '\0';
        if (strncmp(link, "/memfd:zcopy", 12) == 0) {
            memfds++;
        } else if (rel_in_shared_dir(link) && !rel_open_mpi_file(link)) {
            named++;
            ZT_CHECK(false, "fd %s is a shared file: %s", e->d_name, link);
        }
    }
    if (d)
        closedir(d);
    ZT_CHECK(named == 0 && memfds >= 2,
             "%d shared files not Open MPI's, %d zcopy memfds (expected >= "
             "2: the handle and the export table)", named, memfds);
}

int main(int argc, char **argv)
{
    const zcopy_mem_prop_t host = { .kind = ZCOPY_MEM_HOST, .device = -1 };
    MPI_Comm dup, split, shared;
    zcopy_mem_handle_t h, spare;
    size_t gran, bytes;
    char *res;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    rel_announce_job(rank);

    /* One range; one activated block for the collectives, and a second
     * handle mapped but never activated, so that both kinds are left. */
    zcopy_mem_granularity(&host, &gran);
    bytes = ((size_t)(4 + nranks) * COUNT * sizeof(int) + gran - 1) / gran * gran;
    if (zcopy_mem_reserve((void **)&res, 2 * bytes, 0, NULL, 0) ||
        MPIX_Comm_set_memory_range(MPI_COMM_WORLD, res, 2 * bytes, 0, 0) ||
        zcopy_mem_create(&h, bytes, &host, 0) ||
        zcopy_mem_map(res, bytes, 0, h, 0) ||
        MPIX_Comm_activate_memory(MPI_COMM_WORLD, res, bytes, 0, h, 0) ||
        zcopy_mem_create(&spare, bytes, &host, 0) ||
        zcopy_mem_map(res + bytes, bytes, 0, spare, 0)) {
        fprintf(stderr, "[rank %d] setup failed: %s\n", rank,
                zcopy_mem_last_error());
        MPI_Abort(MPI_COMM_WORLD, 2);
    }

    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    MPI_Comm_split(MPI_COMM_WORLD, 0, nranks - rank, &split); /* reversed */
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank,
                        MPI_INFO_NULL, &shared);
    collectives(MPI_COMM_WORLD, "WORLD", (int *)res, 1);
    collectives(dup, "dup", (int *)res, 2);
    collectives(split, "reversed split", (int *)res, 3);
    collectives(shared, "split_type shared", (int *)res, 4);
    only_memfds();

    /* Freed with everything activated: peers' imports stay owned by the
     * communicators still alive. */
    MPI_Comm_free(&dup);
    MPI_Comm_free(&split);
    collectives(MPI_COMM_WORLD, "WORLD after the frees", (int *)res, 5);
    collectives(shared, "split_type after the frees", (int *)res, 6);

    /* No deactivate, unmap, free, unset or release; `shared` not freed. */
    return zt_finish();
}
