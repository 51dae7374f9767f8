/*
 * Security (issue 7, 4; SPEC section 8). Every rank sets up zero-copy on
 * WORLD (an activated block, peers imported) and checks that everything
 * zcopy shares is an anonymous memfd of mode 0600 (nothing for group or
 * others even through a /proc link), and that the process holds no file
 * in /dev/shm, /tmp or /run but Open MPI's own: zcopy names nothing.
 *
 * Rank 0 then starts rel_outsider (argv[1]) beside the job, against
 * itself, with a clean environment:
 *   1. a process outside any job: refused, said and logged (ZCOPY_VERBOSE=1);
 *   2. a process of another job (its own PMIX_NAMESPACE): refused alike;
 *   3. the control: claiming this job's namespace it gets in and reads the
 *      block, which shows that 1 and 2 are refused by the job check;
 *   4. as user nobody (setpriv): no fd, no /proc link, no file it can open,
 *      even claiming this job's namespace.
 * Part 4 needs root and setpriv; without them it is reported skipped.
 *
 * jobcheck.sh checks from outside that the job leaves no file in /dev/shm
 * or /tmp: it creates none.
 */
#define _GNU_SOURCE
#include "relutil.h"
#include "testutil.h"

#include <errno.h>
#include <spawn.h>
#include <sys/wait.h>

#define PATTERN_BYTES 8192 /* start of the block: the outsiders read it */
#define COUNT 1024

extern char **environ;

static int rank, nranks;

/* --- 4c: what zcopy shares has no name and mode 0600 ------------------- */

static void check_mode(const char *what, const char *path)
{
    struct stat st;

    if (!ZT_CHECK(stat(path, &st) == 0, "stat(%s) failed", path))
        return;
    ZT_CHECK((st.st_mode & 077) == 0, "%s (%s) has mode %04o: group or "
             "others have access", what, path, (unsigned)(st.st_mode & 07777));
}

/* Every descriptor and mapping of zcopy's: own memory, own export table,
 * control segments, peers' tables and blocks imported. */
static void shared_state_is_private(void)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[4096], path[320], link[256];
    DIR *d = opendir("/proc/self/fd");
    int memfds = 0, mappings = 0;
    struct dirent *e;
    struct stat st;

    while (d && (e = readdir(d)) != NULL) {
        ssize_t len;

        snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
        len = readlink(path, link, sizeof(link) - 1);
        if (e->d_name[0] == '.' || len < 0)
            continue;
        link[len] = '\0';
        ZT_CHECK(!rel_in_shared_dir(link) || rel_open_mpi_file(link),
                 "fd %s is a shared file, and not Open MPI's: %s", e->d_name,
                 link);
        if (strncmp(link, "/memfd:zcopy", 12) != 0)
            continue;
        memfds++;
        check_mode(link, path);
    }
    if (d)
        closedir(d);
    while (f && fgets(line, sizeof(line), f)) {
        const char *file = strchr(line, '/');
        unsigned long lo, hi;

        ZT_CHECK(!file || !rel_in_shared_dir(file) || rel_open_mpi_file(file),
                 "a mapping of a shared file, and not Open MPI's: %s", line);
        if (!file || strncmp(file, "/memfd:zcopy", 12) != 0 ||
            sscanf(line, "%lx-%lx", &lo, &hi) != 2)
            continue;
        mappings++;
        /* map_files: the mapped file itself, which a process with
         * CAP_SYS_ADMIN or CAP_CHECKPOINT_RESTORE may open. Only such a
         * process may follow those links, even its own: run as an
         * ordinary user, the test checks the modes of the descriptors
         * alone, and no outsider of that user can follow the links
         * either. */
        snprintf(path, sizeof(path), "/proc/self/map_files/%lx-%lx", lo, hi);
        if (geteuid() != 0 && stat(path, &st) != 0 && errno == EPERM)
            continue;
        line[strcspn(line, "\n")] = '\0';
        check_mode(strchr(line, '/'), path);
    }
    if (f)
        fclose(f);
    /* Own block + table, then the segment and each peer's table and block. */
    ZT_CHECK(memfds >= 2 && mappings >= 1 + 2 * nranks,
             "only %d zcopy fds and %d zcopy mappings looked at", memfds,
             mappings);
}

/* --- rank 0 starts the outsiders ---------------------------------------- */

/* Runs @argv with exactly @env; true when it exits 0. */
static bool run(char *const argv[], char *const env[])
{
    pid_t pid;
    int status;

    fflush(stdout);
    fflush(stderr);
    if (posix_spawn(&pid, argv[0], NULL, NULL, argv, env) != 0) {
        fprintf(stderr, "cannot start %s\n", argv[0]);
        return false;
    }
    /* The outsider may ask this rank's socket: keep MPI progressing, as
     * any rank inside an MPI call would. */
    while (waitpid(pid, &status, WNOHANG) == 0) {
        int flag;

        MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag,
                   MPI_STATUS_IGNORE);
        usleep(100);
    }
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

/* Under coll_zcopy_peer_access=socket the outsiders ask this rank's
 * socket too (ZCOPY_PEER_ACCESS=2), and this rank logs each refusal. */
static bool sockets(void)
{
    const char *v = getenv("OMPI_MCA_coll_zcopy_peer_access");

    return v && strcmp(v, "socket") == 0;
}

static void outsiders(const char *outsider, char *block)
{
    char *peer_access = sockets() ? "ZCOPY_PEER_ACCESS=2"
                                  : "ZCOPY_PEER_ACCESS=0";
    const char *ns = getenv("PMIX_NAMESPACE");
    char pid[16], fd[16], ino[24], va[24], len[24], job_ns[256];
    char *memfds[64], names[64][12], path[300], link[256];
    char **argv;
    uint64_t table_ino = 0;
    int table_fd = rel_find_fd(REL_EXPORT, &table_ino), n = 0;
    const char *priv = getenv("REL_JOBCHECK_NS");
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;

    if (!ZT_CHECK(table_fd >= 0 && ns != NULL, "no export table fd (%d) or "
                  "no PMIX_NAMESPACE", table_fd))
        return;
    snprintf(pid, sizeof(pid), "%d", (int)getpid());
    snprintf(fd, sizeof(fd), "%d", table_fd);
    snprintf(ino, sizeof(ino), "%llu", (unsigned long long)table_ino);
    snprintf(va, sizeof(va), "%p", (void *)block);
    snprintf(len, sizeof(len), "%d", PATTERN_BYTES);
    snprintf(job_ns, sizeof(job_ns), "PMIX_NAMESPACE=%s", ns);

    {
        char *env_none[] = { "ZCOPY_VERBOSE=1", "PATH=/usr/bin:/bin",
                             peer_access, NULL };
        char *env_other[] = { "ZCOPY_VERBOSE=1", "PATH=/usr/bin:/bin",
                              "PMIX_NAMESPACE=rel-another-job", peer_access,
                              NULL };
        char *env_job[] = { "PATH=/usr/bin:/bin", job_ns, peer_access, NULL };
        char *refused[] = { (char *)outsider, "refused", pid, fd, ino, NULL };
        char *accepted[] = { (char *)outsider, "accepted", pid, fd, ino, va,
                             len, NULL };

        ZT_CHECK(run(refused, env_none), "a process outside any job was not "
                 "refused as it should be");
        ZT_CHECK(run(refused, env_other), "a process of another job was not "
                 "refused as it should be");
        ZT_CHECK(run(accepted, env_job), "control: a process claiming this "
                 "job was not let in; the refusals above prove nothing");
    }

    /* Another user: every memfd of zcopy's that this rank has open. */
    while (d && n < 64 && (e = readdir(d)) != NULL) {
        ssize_t l;

        snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
        l = readlink(path, link, sizeof(link) - 1);
        if (e->d_name[0] == '.' || l < 0)
            continue;
        link[l] = '\0';
        if (strncmp(link, "/memfd:zcopy", 12) == 0) {
            snprintf(names[n], sizeof(names[n]), "%d", atoi(e->d_name));
            memfds[n] = names[n];
            n++;
        }
    }
    if (d)
        closedir(d);
    if (geteuid() != 0 || access("/usr/bin/setpriv", X_OK) != 0) {
        printf("rank 0: SKIPPED the other-user part: needs root and "
               "/usr/bin/setpriv\n");
        return;
    }
    argv = calloc((size_t)n + 16, sizeof(*argv));
    {
        char *head[] = { "/usr/bin/setpriv", "--reuid=nobody",
                         "--regid=nogroup", "--clear-groups", (char *)outsider,
                         "other-user", pid, fd, ino, va, len,
                         priv && strcmp(priv, "private") == 0 ? "private"
                                                              : "shared" };
        char *env_job[] = { "ZCOPY_VERBOSE=1", "PATH=/usr/bin:/bin", job_ns,
                            peer_access, NULL };
        size_t k = sizeof(head) / sizeof(head[0]);

        memcpy(argv, head, sizeof(head));
        for (int i = 0; i < n; i++)
            argv[k + (size_t)i] = memfds[i];
        ZT_CHECK(run(argv, env_job), "a process of another user got at "
                 "something of the job's (see its output)");
    }
    free(argv);
}

/* Over sockets, this rank (the owner) must have refused and logged each
 * outsider's request itself (run under coll_zcopy_verbose 10). */
static void outsiders_logged(const char *outsider, char *block)
{
    const char *text;

    if (!sockets()) {
        outsiders(outsider, block);
        return;
    }
    zt_stderr_capture();
    outsiders(outsider, block);
    text = zt_stderr_release();
    ZT_CHECK(strstr(text, "refused: not of this MPI job") != NULL,
             "the owner did not log refusing another job's request");
    if (geteuid() == 0 && access("/usr/bin/setpriv", X_OK) == 0)
        ZT_CHECK(strstr(text, "refused: another user") != NULL,
                 "the owner did not log refusing another user's request");
}

int main(int argc, char **argv)
{
    MPIX_Zcopy_stats s0, s1;
    zt_arena_t arena;
    int *send, *recv, bad = 0;
    MPI_Comm quiet;
    MPI_Info info;
    char *res;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    rel_announce_job(rank);
    MPI_Info_create(&info);
    MPI_Info_set(info, MPIX_ZCOPY_INFO_KEY, "false");
    MPI_Comm_dup_with_info(MPI_COMM_WORLD, info, &quiet);
    MPI_Info_free(&info);

    zt_arena_init(&arena, MPI_COMM_WORLD,
                  PATTERN_BYTES + (size_t)(nranks + 1) * COUNT * sizeof(int));
    res = arena.base;
    for (size_t i = 0; i < PATTERN_BYTES; i++)
        res[i] = (char)(i * 7 + 3);

    /* Zero-copy set up and every peer's block imported. */
    send = (int *)(res + PATTERN_BYTES);
    recv = send + COUNT;
    for (int i = 0; i < COUNT; i++)
        send[i] = rank * COUNT + i;
    s0 = zt_stats(MPI_COMM_WORLD);
    MPI_Allgather(send, COUNT, MPI_INT, recv, COUNT, MPI_INT, MPI_COMM_WORLD);
    s1 = zt_stats(MPI_COMM_WORLD);
    for (int i = 0; i < nranks * COUNT; i++)
        bad += recv[i] != i;
    ZT_CHECK(bad == 0 && s1.zcopy_calls == s0.zcopy_calls + 1,
             "allgather: %d wrong, %s", bad,
             s1.zcopy_calls == s0.zcopy_calls + 1 ? "zero-copy"
                                                  : s1.last_fallback_reason);

    shared_state_is_private();
    if (rank == 0 && ZT_CHECK(argc > 1, "usage: test_security OUTSIDER"))
        outsiders_logged(argv[1], res);
    MPI_Barrier(quiet); /* the others stay alive and mapped meanwhile */

    zt_arena_fini(&arena);
    MPI_Comm_free(&quiet);
    return zt_finish();
}
