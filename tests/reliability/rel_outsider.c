/*
 * A process beside an MPI job, not part of it (issue 7, 4a and 4b). It is
 * built from zcopy's own sources (base, mem, registry, topo, ipc), so it
 * tries exactly what a rank would do to import a peer, with whatever
 * identity it is started with. test_security's rank 0 starts it with a
 * clean environment, as a plain program would be, and learns nothing from
 * the job but what it is given on the command line: the target rank's
 * {pid, table fd, table inode} (what /proc/<pid>/fd shows anyone with
 * access to it) and the address of an activated block.
 *
 *   rel_outsider refused  PID FD INO
 *       zcopy_ipc_peer_get is refused with ZCOPY_ERR_UNSUPPORTED, the
 *       detail says "not part of this MPI job", and with ZCOPY_VERBOSE >= 1
 *       the refusal is logged on stderr.
 *   rel_outsider accepted PID FD INO VA LEN
 *       the control: claiming the job's namespace, the same process gets
 *       in and reads the block (byte i is (i * 7 + 3) & 0xff). The job
 *       check keeps apart jobs that do not try to deceive each other; a
 *       process of the same user with ptrace rights over a rank can read
 *       its memory anyway (SPEC section 8).
 *   rel_outsider other-user PID FD INO VA LEN private|shared MEMFD...
 *       run as another user: pidfd_getfd fails with EPERM, so no import
 *       (even claiming the job); none of the rank's memfds opens through
 *       /proc/PID/fd or /proc/PID/map_files, nor /proc/PID/mem; there is
 *       no zcopy file in /dev/shm, /tmp or /run, and no file of the job in
 *       /dev/shm (nor /tmp when it is the job's own, "private") that this
 *       user can open.
 *
 * Exit status: 0 when every check holds, 1 otherwise.
 */
#include "ipc/ipc.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stddef.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

static int failed;

#define EXPECT(_cond, ...)                                                   \
    do {                                                                     \
        if (_cond) {                                                         \
            printf("outsider: ok: ");                                        \
        } else {                                                             \
            printf("outsider: FAILED: ");                                    \
            failed++;                                                        \
        }                                                                    \
        printf(__VA_ARGS__);                                                 \
        putchar('\n');                                                       \
    } while (0)

/* ZCOPY_PEER_ACCESS=2: descriptors over the owner's socket. */
static bool sockets(void)
{
    return zcopy_ipc_access_current() == ZCOPY_IPC_ACCESS_SOCKET;
}

static zcopy_ipc_id_t parse_id(char **argv)
{
    return (zcopy_ipc_id_t){ .pid = atoi(argv[0]), .table_fd = atoi(argv[1]),
                             .table_ino = strtoull(argv[2], NULL, 10) };
}

/* zcopy_ipc_peer_get with this process's stderr captured in @log. */
static zcopy_status_t peer_get_logged(const zcopy_ipc_id_t *id,
                                      zcopy_ipc_peer_t **peer, char *log,
                                      size_t log_len)
{
    int pipefd[2], saved = dup(STDERR_FILENO);
    zcopy_status_t st;
    ssize_t n;

    log[0] = '\0';
    if (saved < 0 || pipe2(pipefd, O_NONBLOCK) != 0)
        return zcopy_ipc_peer_get(id, peer);
    fflush(stderr);
    dup2(pipefd[1], STDERR_FILENO);
    st = zcopy_ipc_peer_get(id, peer);
    fflush(stderr);
    dup2(saved, STDERR_FILENO);
    close(saved);
    close(pipefd[1]);
    n = read(pipefd[0], log, log_len - 1);
    log[n > 0 ? n : 0] = '\0';
    close(pipefd[0]);
    fputs(log, stderr); /* still shown in the test's output */
    return st;
}

static void refused(char **argv)
{
    zcopy_ipc_id_t id = parse_id(argv);
    zcopy_ipc_peer_t *peer = NULL;
    char log[1024];
    zcopy_status_t st = peer_get_logged(&id, &peer, log, sizeof(log));
    const char *job = getenv("PMIX_NAMESPACE");

    /* Over sockets the owner refuses, and the importer is told so. */
    const char *why = sockets() ? "refused a descriptor request"
                                : "not part of this MPI job";

    printf("outsider: as a process %s, %s\n",
           job ? "of another job" : "outside any job",
           zcopy_ipc_access_name(zcopy_ipc_access_current()));
    EXPECT(st == ZCOPY_ERR_UNSUPPORTED,
           "zcopy_ipc_peer_get of pid %d: %s (%s)", id.pid,
           zcopy_strerror(st), zcopy_error_detail());
    EXPECT(strstr(zcopy_error_detail(), why) != NULL,
           "the refusal says why: \"%s\"", zcopy_error_detail());
    if (zcopy_config.verbose >= ZCOPY_LOG_WARN)
        EXPECT(strstr(log, why) != NULL && strstr(log, "[zcopy:") != NULL,
               "ZCOPY_VERBOSE=%d: the refusal is logged on stderr",
               zcopy_config.verbose);
    else
        EXPECT(log[0] == '\0', "ZCOPY_VERBOSE=0: nothing logged");
    if (st == ZCOPY_SUCCESS)
        zcopy_ipc_peer_put(peer);
}

/* Byte i of the rank's block, as test_security fills it. */
static bool block_ok(const uint8_t *p, size_t len)
{
    for (size_t i = 0; i < len; i++)
        if (p[i] != (uint8_t)(i * 7 + 3))
            return false;
    return true;
}

/* The export table, once fetched, cannot be mapped writable: a peer must
 * not rewrite what its owner publishes. */
static void table_read_only(const zcopy_ipc_id_t *id)
{
    zcopy_status_t st;
    void *p;
    int fd;

    st = zcopy_ipc_fetch_fd(id, id->table_fd, id->table_ino, &fd);
    EXPECT(st == ZCOPY_SUCCESS, "control: the export table fetched: %s",
           zcopy_strerror(st));
    if (st != ZCOPY_SUCCESS)
        return;
    p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    EXPECT(p == MAP_FAILED && errno == EPERM,
           "a writable mapping of the export table is refused: %s",
           p == MAP_FAILED ? strerror(errno) : "it was mapped");
    if (p != MAP_FAILED)
        munmap(p, 4096);
    close(fd);
}

static void accepted(char **argv)
{
    zcopy_ipc_id_t id = parse_id(argv);
    uintptr_t va = (uintptr_t)strtoull(argv[3], NULL, 0);
    size_t len = strtoull(argv[4], NULL, 0);
    zcopy_ipc_peer_t *peer = NULL;
    zcopy_status_t st = zcopy_ipc_peer_get(&id, &peer);
    void *local = NULL;

    EXPECT(st == ZCOPY_SUCCESS, "control: claiming the job's namespace, "
           "zcopy_ipc_peer_get of pid %d: %s (%s)", id.pid,
           zcopy_strerror(st), zcopy_error_detail());
    if (st != ZCOPY_SUCCESS)
        return;
    st = zcopy_ipc_peer_map(peer, va, len, &local);
    EXPECT(st == ZCOPY_SUCCESS && block_ok(local, len),
           "control: the block at %#lx read through zcopy_ipc_peer_map: %s",
           (unsigned long)va, zcopy_strerror(st));
    zcopy_ipc_peer_put(peer);
    table_read_only(&id);
}

/* --- another user -------------------------------------------------------- */

/* The owner's socket, asked directly for the export table with a request
 * as the job's own ranks send it: the owner must refuse another user. */
static void raw_socket_request(const zcopy_ipc_id_t *id)
{
    struct {
        uint64_t magic, job, ino;
        int32_t fd, reserved;
    } req = { 0x7a636f70795f6664ull, zcopy_ipc_job_id(), id->table_ino,
              id->table_fd, 0 };
    struct sockaddr_un addr = { .sun_family = AF_UNIX };
    union {
        struct cmsghdr align;
        char buf[CMSG_SPACE(sizeof(int))];
    } control;
    char reply[64];
    struct iovec iov = { .iov_base = reply, .iov_len = sizeof(reply) };
    struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1,
                          .msg_control = control.buf,
                          .msg_controllen = sizeof(control.buf) };
    int len = snprintf(addr.sun_path + 1, sizeof(addr.sun_path) - 1,
                       "zcopy.%d.%llx", id->pid,
                       (unsigned long long)id->table_ino);
    int sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    struct timeval tv = { .tv_sec = 20 };
    ssize_t n = -1;

    if (sock >= 0 && setsockopt(sock, SOL_SOCKET, SO_RCVTIMEO, &tv,
                                sizeof(tv)) == 0 &&
        connect(sock, (struct sockaddr *)&addr,
                (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 +
                            len)) == 0) {
        /* The owner may refuse (and close) before the request is sent:
         * the send may fail, the refusal is there to read all the same. */
        (void)send(sock, &req, sizeof(req), MSG_NOSIGNAL);
        n = recvmsg(sock, &msg, 0);
        /* A request that came as the owner closed resets the connection
         * once; the refusal is still queued behind the error. */
        if (n < 0 && errno == ECONNRESET)
            n = recvmsg(sock, &msg, 0);
    }
    const bool got_fd = n >= 0 && CMSG_FIRSTHDR(&msg) != NULL;

    EXPECT(n > 0 && !got_fd, "a request straight to the owner's socket: %s",
           n < 0 ? "no answer" : got_fd ? "got a descriptor"
                                        : "refused, no descriptor");
    if (got_fd) {
        int fd;

        memcpy(&fd, CMSG_DATA(CMSG_FIRSTHDR(&msg)), sizeof(fd));
        close(fd);
    }
    if (sock >= 0)
        close(sock);
}

static bool private_dirs;         /* /tmp is the job's own (jobcheck.sh) */
static unsigned scanned;

static int scan_entry(const char *path, const struct stat *st, int type,
                      struct FTW *ftw)
{
    const char *name = path + ftw->base;
    bool own = strncmp(path, "/dev/shm", 8) == 0 ||
               (private_dirs && strncmp(path, "/tmp", 4) == 0);
    int fd;

    (void)st;
    scanned++;
    /* zcopy names nothing: its memfds have no path. */
    if (strstr(name, "zcopy") && (own || strncmp(path, "/run", 4) == 0))
        EXPECT(false, "a zcopy file: %s", path);
    if (type != FTW_F || !own)
        return 0;
    fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd >= 0) {
        EXPECT(false, "%s, a file of the job, opens for another user", path);
        close(fd);
    }
    return 0;
}

static void open_fails(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    int err = errno;

    EXPECT(fd < 0 && (err == EACCES || err == EPERM), "open(%s): %s", path,
           fd < 0 ? strerror(err) : "opened");
    if (fd >= 0)
        close(fd);
}

static void other_user(int argc, char **argv)
{
    zcopy_ipc_id_t id = parse_id(argv);
    zcopy_ipc_peer_t *peer = NULL;
    char path[128];
    zcopy_status_t st;
    int pidfd, fd, err;

    private_dirs = strcmp(argv[5], "private") == 0;
    printf("outsider: as uid %d gid %d, %s /tmp\n", (int)getuid(),
           (int)getgid(), private_dirs ? "the job's own" : "a shared");
    EXPECT(getuid() != 0 && geteuid() != 0, "not root");

    /* The import path: the kernel refuses the fd, whatever the job id. */
    pidfd = (int)syscall(SYS_pidfd_open, id.pid, 0);
    fd = pidfd < 0 ? -1 : (int)syscall(SYS_pidfd_getfd, pidfd, id.table_fd, 0);
    err = errno;
    EXPECT(fd < 0 && err == EPERM, "pidfd_getfd of the export table: %s",
           fd < 0 ? strerror(err) : "got it");
    if (fd >= 0)
        close(fd);
    if (pidfd >= 0)
        close(pidfd);
    st = zcopy_ipc_peer_get(&id, &peer);
    EXPECT(st == ZCOPY_ERR_UNSUPPORTED, "zcopy_ipc_peer_get, claiming the "
           "job's namespace: %s (%s)", zcopy_strerror(st),
           zcopy_error_detail());
    if (st == ZCOPY_SUCCESS)
        zcopy_ipc_peer_put(peer);
    if (sockets())
        raw_socket_request(&id);

    /* The rank's memfds by their /proc links, its mappings, its memory. */
    for (int i = 6; i < argc; i++) {
        snprintf(path, sizeof(path), "/proc/%d/fd/%s", id.pid, argv[i]);
        open_fails(path);
    }
    snprintf(path, sizeof(path), "/proc/%d/map_files/%llx-%llx", id.pid,
             strtoull(argv[3], NULL, 0),
             strtoull(argv[3], NULL, 0) + strtoull(argv[4], NULL, 0));
    open_fails(path);
    snprintf(path, sizeof(path), "/proc/%d/mem", id.pid);
    open_fails(path);

    /* Shared state with a name: there is none. */
    nftw("/dev/shm", scan_entry, 16, FTW_PHYS);
    nftw("/tmp", scan_entry, 16, FTW_PHYS);
    nftw("/run", scan_entry, 16, FTW_PHYS);
    printf("outsider: %u entries of /dev/shm, /tmp and /run looked at\n",
           scanned);
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc == 5 && strcmp(argv[1], "refused") == 0)
        refused(argv + 2);
    else if (argc == 7 && strcmp(argv[1], "accepted") == 0)
        accepted(argv + 2);
    else if (argc >= 8 && strcmp(argv[1], "other-user") == 0)
        other_user(argc - 2, argv + 2);
    else {
        fprintf(stderr, "usage: see the comment at the top of %s\n",
                __FILE__);
        return 2;
    }
    return failed != 0;
}
