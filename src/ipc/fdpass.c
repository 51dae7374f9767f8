/*
 * Descriptor passing over UNIX-domain sockets: how a peer gets a memfd of
 * this process where pidfd_getfd(2) is refused (containers' default seccomp
 * profiles, Yama ptrace_scope 1). The owner hands the fd over SCM_RIGHTS.
 *
 * Names. A serving process listens on an abstract socket named after its
 * pid and its export table's inode: nothing in the file system, so nothing
 * to clean up, and the name goes with the process even after SIGKILL. The
 * name is not a secret; the checks below are what protect.
 *
 * Who is served. A connection is answered only if the kernel says its
 * process runs as our user (SO_PEERCRED), its request names our MPI job
 * (the PMIx namespace's hash: another job of the same user cannot pass by
 * accident), and the fd it asks for is one this process offers (its export
 * table, an activated block in it, or a control segment being set up) and
 * still is the inode asked for. Anything else is refused and, at verbose
 * 10, logged. The importer checks in turn that the listener is the process
 * it meant (pid and user), so a squatted name gets nothing from it.
 *
 * Serving without a thread. Requests are answered from Open MPI's progress
 * loop (zcopy_coll_progress), from zcopy's own waits and from an importer's
 * wait, so a rank inside any MPI call serves, and two ranks fetching from
 * each other at once both progress. Between two looks at the socket at
 * least FDPASS_POLL_NS pass: the progress loop runs after every MPI call,
 * and an accept each time would cost every call a system call.
 */
#include "table.h"

#include "host/progress.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define FDPASS_MAGIC 0x7a636f70795f6664ull    /* "zcopy_fd" */
#define FDPASS_POLL_NS 50000ull               /* between two accepts */
#define FDPASS_POLL_CALLS 32u                 /* progress calls per clock */
#define FDPASS_PENDING_NS 2000000000ull       /* a silent connection goes */
#define FDPASS_MAX_PENDING 64
#define FDPASS_MAX_OFFERS 16

/* A fetch that gets no answer in this time fails (and the collective falls
 * back): a peer that stopped serving must not hang the job. A rank serves
 * from any MPI call, so only a peer outside MPI for this long, or gone,
 * reaches it. */
#define FDPASS_TIMEOUT_NS 30000000000ull

typedef struct {
    uint64_t magic;
    uint64_t job;                 /* zcopy_ipc_job_id() of the importer */
    uint64_t ino;                 /* inode of the fd asked for */
    int32_t fd;                   /* its number in the owner */
    int32_t reserved;
} fdpass_request_t;

typedef struct {
    uint64_t magic;
    int32_t status;               /* zcopy_status_t; an fd comes with 0 */
    int32_t reserved;
} fdpass_reply_t;

typedef struct {
    int fd;
    uint64_t since_ns;
} fdpass_pending_t;

/* One listener per process, as there is one export table; the lock is
 * only ever try-locked by serving, so a progress call never waits. */
static struct {
    pthread_mutex_t lock;
    _Atomic int listen_fd;        /* -1 until this process serves */
    _Atomic uint64_t next_poll_ns;
    _Atomic unsigned calls;       /* progress calls, for the clock's sake */
    fdpass_pending_t pending[FDPASS_MAX_PENDING];
    int npending;
    struct {
        int fd;
        uint64_t ino;
    } offers[FDPASS_MAX_OFFERS];  /* besides the export table's */
    int noffers;
} server = { .lock = PTHREAD_MUTEX_INITIALIZER, .listen_fd = -1 };

static socklen_t fdpass_name(struct sockaddr_un *addr, pid_t pid, uint64_t ino)
{
    int len;

    memset(addr, 0, sizeof(*addr));
    addr->sun_family = AF_UNIX;
    /* sun_path[0] = '\0': the abstract namespace. */
    len = snprintf(addr->sun_path + 1, sizeof(addr->sun_path) - 1,
                   "zcopy.%d.%llx", (int)pid, (unsigned long long)ino);
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + len);
}

/* --- owner ---------------------------------------------------------------- */

zcopy_status_t zcopy_ipc_fdpass_listen(uint64_t table_ino)
{
    struct sockaddr_un addr;
    socklen_t len = fdpass_name(&addr, getpid(), table_ino);
    zcopy_status_t st = ZCOPY_SUCCESS;
    int fd;

    pthread_mutex_lock(&server.lock);
    if (atomic_load(&server.listen_fd) >= 0)
        goto out;
    fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0 || bind(fd, (struct sockaddr *)&addr, len) != 0 ||
        listen(fd, FDPASS_MAX_PENDING) != 0) {
        st = zcopy_error(ZCOPY_ERR_SYSTEM, "descriptor socket: %s",
                         strerror(errno));
        if (fd >= 0)
            close(fd);
        goto out;
    }
    atomic_store(&server.listen_fd, fd);
    zcopy_log(ZCOPY_LOG_TRACE, "ipc", "serving descriptors on @%s",
              addr.sun_path + 1);
out:
    pthread_mutex_unlock(&server.lock);
    /* Requests are answered from Open MPI's progress loop too. */
    if (st == ZCOPY_SUCCESS)
        zcopy_host_want_progress();
    return st;
}

bool zcopy_ipc_fdpass_serving(void)
{
    return atomic_load_explicit(&server.listen_fd, memory_order_relaxed) >= 0;
}

void zcopy_ipc_fdpass_offer(int fd, uint64_t ino)
{
    pthread_mutex_lock(&server.lock);
    if (server.noffers < FDPASS_MAX_OFFERS) {
        server.offers[server.noffers].fd = fd;
        server.offers[server.noffers].ino = ino;
        server.noffers++;
    } else {
        zcopy_log(ZCOPY_LOG_WARN, "ipc", "more than %d control segments set "
                  "up at once: fd %d is not offered to peers",
                  FDPASS_MAX_OFFERS, fd);
    }
    pthread_mutex_unlock(&server.lock);
}

void zcopy_ipc_fdpass_withdraw(int fd)
{
    pthread_mutex_lock(&server.lock);
    for (int i = 0; i < server.noffers; i++) {
        if (server.offers[i].fd == fd) {
            server.offers[i] = server.offers[--server.noffers];
            break;
        }
    }
    pthread_mutex_unlock(&server.lock);
}

static bool offered_locked(int fd, uint64_t ino)
{
    for (int i = 0; i < server.noffers; i++)
        if (server.offers[i].fd == fd && server.offers[i].ino == ino)
            return true;
    return zcopy_ipc_export_offers(fd, ino);
}

static void refuse_locked(int conn, const char *why, const struct ucred *cred)
{
    fdpass_reply_t reply = { .magic = FDPASS_MAGIC,
                             .status = ZCOPY_ERR_UNSUPPORTED };

    zcopy_log(ZCOPY_LOG_INFO, "ipc", "descriptor request from pid %d (uid "
              "%u) refused: %s", cred ? (int)cred->pid : -1,
              cred ? (unsigned)cred->uid : 0u, why);
    (void)send(conn, &reply, sizeof(reply), MSG_DONTWAIT | MSG_NOSIGNAL);
}

/* Answers the request waiting on @conn; false if none has come yet. */
static bool answer_locked(int conn)
{
    /* Zeroed: the space is longer than the header and descriptor it holds,
     * and all of it goes to the importer. */
    union {
        struct cmsghdr align;
        char buf[CMSG_SPACE(sizeof(int))];
    } control = { .buf = { 0 } };
    fdpass_reply_t reply = { .magic = FDPASS_MAGIC };
    struct iovec iov = { .iov_base = &reply, .iov_len = sizeof(reply) };
    struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1 };
    fdpass_request_t req;
    struct ucred cred;
    socklen_t cred_len = sizeof(cred);
    struct stat st;
    ssize_t n;

    /* MSG_TRUNC: the length of the whole message, so that a longer one
     * cannot pass for a request. */
    n = recv(conn, &req, sizeof(req), MSG_DONTWAIT | MSG_TRUNC);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        return false;
    /* Its user was checked when it was accepted (same_user_locked); the
     * credentials name it in the log. */
    if (getsockopt(conn, SOL_SOCKET, SO_PEERCRED, &cred, &cred_len) != 0) {
        refuse_locked(conn, "no credentials", NULL);
        return true;
    }
    if (n != (ssize_t)sizeof(req) || req.magic != FDPASS_MAGIC) {
        refuse_locked(conn, "not a zcopy request", &cred);
        return true;
    }
    if (req.job == 0 || req.job != zcopy_ipc_job_id()) {
        refuse_locked(conn, "not of this MPI job", &cred);
        return true;
    }
    if (!offered_locked(req.fd, req.ino) || fstat(req.fd, &st) != 0 ||
        (uint64_t)st.st_ino != req.ino) {
        refuse_locked(conn, "not a descriptor this process offers", &cred);
        return true;
    }
    msg.msg_control = control.buf;
    msg.msg_controllen = sizeof(control.buf);
    CMSG_FIRSTHDR(&msg)->cmsg_level = SOL_SOCKET;
    CMSG_FIRSTHDR(&msg)->cmsg_type = SCM_RIGHTS;
    CMSG_FIRSTHDR(&msg)->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(CMSG_FIRSTHDR(&msg)), &req.fd, sizeof(int));
    reply.status = ZCOPY_SUCCESS;
    /* A send that fails leaves the importer an end of file: it asks again. */
    (void)sendmsg(conn, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
    return true;
}

/* Another user's connection is refused as soon as it is accepted: it
 * never holds a pending slot. */
static bool same_user_locked(int conn)
{
    char drain[sizeof(fdpass_request_t)];
    struct ucred cred;
    socklen_t cred_len = sizeof(cred);

    if (getsockopt(conn, SOL_SOCKET, SO_PEERCRED, &cred, &cred_len) == 0 &&
        cred.uid == geteuid())
        return true;
    refuse_locked(conn, "another user", cred_len == sizeof(cred) ? &cred
                                                                 : NULL);
    /* Closing with its request unread would reset the connection, and the
     * refusal would never be read. */
    while (recv(conn, drain, sizeof(drain), MSG_DONTWAIT) > 0)
        ;
    return false;
}

static void serve_locked(int listen_fd)
{
    const uint64_t now = zcopy_now_ns();
    int conn, accepted = 0;

    /* Earlier connections whose request had not come yet. */
    for (int i = 0; i < server.npending;) {
        fdpass_pending_t *p = &server.pending[i];

        if (answer_locked(p->fd) || now - p->since_ns > FDPASS_PENDING_NS) {
            close(p->fd);
            *p = server.pending[--server.npending];
            continue;
        }
        i++;
    }
    /* A bounded number per call: a flood of connections must not keep
     * this rank inside its MPI call. */
    while (accepted++ < FDPASS_MAX_PENDING &&
           (conn = accept4(listen_fd, NULL, NULL,
                           SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
        if (!same_user_locked(conn) || answer_locked(conn))
            close(conn);
        else if (server.npending < FDPASS_MAX_PENDING)
            server.pending[server.npending++] =
                (fdpass_pending_t){ .fd = conn, .since_ns = now };
        else
            close(conn); /* its importer connects again */
    }
}

void zcopy_ipc_fdpass_serve(bool now)
{
    int fd = atomic_load_explicit(&server.listen_fd, memory_order_relaxed);
    uint64_t t;

    if (fd < 0)
        return;
    if (!now) {
        /* Reading the clock costs about 34 ns on a KVM guest, more than
         * the rest of a progress call: only every FDPASS_POLL_CALLS-th
         * call looks at it. Relaxed load and store, not an increment:
         * threads that race lose a count, never a request. */
        unsigned calls = atomic_load_explicit(&server.calls,
                                              memory_order_relaxed);

        atomic_store_explicit(&server.calls, calls + 1, memory_order_relaxed);
        if (calls % FDPASS_POLL_CALLS != 0)
            return;
        t = zcopy_now_ns();
        if (t < atomic_load_explicit(&server.next_poll_ns,
                                     memory_order_relaxed))
            return;
        atomic_store_explicit(&server.next_poll_ns, t + FDPASS_POLL_NS,
                              memory_order_relaxed);
    }
    if (pthread_mutex_trylock(&server.lock) != 0)
        return;                   /* another thread is serving */
    serve_locked(fd);
    pthread_mutex_unlock(&server.lock);
}

/* --- importer -------------------------------------------------------------- */

/* Waiting for a peer that serves from its progress loop: serve our own
 * peers meanwhile and run the MPI library's engine, yielding the core. */
static void fetch_pause(unsigned *spins)
{
    zcopy_ipc_fdpass_serve(true);
    zcopy_host_progress();
    if (++*spins > 64)
        sched_yield();
}

static zcopy_status_t fetch_connect(int sock, pid_t pid, uint64_t table_ino,
                                    uint64_t deadline)
{
    struct sockaddr_un addr;
    socklen_t len = fdpass_name(&addr, pid, table_ino);
    unsigned spins = 0;
    struct ucred cred = { .pid = -1, .uid = (uid_t)-1 };
    socklen_t cred_len = sizeof(cred);

    /* Every owner serves before any rank fetches (the set-up agrees on
     * it), so a refused connection is final; a full backlog is not. */
    while (connect(sock, (struct sockaddr *)&addr, len) != 0) {
        if (errno == ECONNREFUSED || errno == ENOENT)
            return zcopy_error(ZCOPY_ERR_UNSUPPORTED, "process %d does not "
                               "serve descriptors", (int)pid);
        if (errno != EAGAIN)
            return zcopy_error(ZCOPY_ERR_SYSTEM, "connecting to process %d "
                               "for a descriptor: %s", (int)pid,
                               strerror(errno));
        if (zcopy_now_ns() > deadline)
            return zcopy_error(ZCOPY_ERR_UNSUPPORTED, "process %d does not "
                               "serve descriptors (no answer in %llu s)",
                               (int)pid, FDPASS_TIMEOUT_NS / 1000000000ull);
        fetch_pause(&spins);
    }
    if (getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &cred, &cred_len) != 0 ||
        cred.pid != pid || cred.uid != geteuid())
        return zcopy_error(ZCOPY_ERR_UNSUPPORTED, "the descriptor socket of "
                           "process %d belongs to pid %d, uid %u: not "
                           "trusted", (int)pid, (int)cred.pid,
                           (unsigned)cred.uid);
    return ZCOPY_SUCCESS;
}

/* Takes every descriptor a reply carried: exactly one in one SCM_RIGHTS
 * message is the answer; anything more, or anything else, is closed. */
static int reply_fd(struct msghdr *msg)
{
    int fd = -1, count = 0;

    for (struct cmsghdr *c = CMSG_FIRSTHDR(msg); c; c = CMSG_NXTHDR(msg, c)) {
        size_t n;

        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS ||
            c->cmsg_len < CMSG_LEN(0))
            continue;
        n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < n; i++) {
            int got;

            memcpy(&got, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
            if (count++ == 0)
                fd = got;
            else
                close(got);
        }
    }
    if (count > 1 && fd >= 0) {
        close(fd);
        fd = -1;
    }
    return fd;
}

/* The owner's answer: ZCOPY_SUCCESS with *fd_p, ZCOPY_ERR_BUSY when the
 * connection ended without one (the owner dropped it: ask again), or an
 * error. */
static zcopy_status_t fetch_reply(int sock, pid_t pid, uint64_t deadline,
                                  int *fd_p)
{
    union {
        struct cmsghdr align;
        char buf[CMSG_SPACE(sizeof(int))];
    } control;
    fdpass_reply_t reply;
    struct iovec iov = { .iov_base = &reply, .iov_len = sizeof(reply) };
    struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1 };
    zcopy_status_t st;
    bool eof_once = false;
    unsigned spins = 0;
    ssize_t n;
    int fd;

    /* The owner sends and closes at once. A non-blocking read on a
     * SEQPACKET socket that finds its queue empty and then the peer gone
     * says end of file, though the reply may have come in between (Linux
     * checks the queue, then the shutdown): an end of file is believed
     * only when a second read says it again. */
    for (;;) {
        /* A read sets the control length to what it received: reset. */
        msg.msg_control = control.buf;
        msg.msg_controllen = sizeof(control.buf);
        n = recvmsg(sock, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
        if (n > 0)
            break;
        if (n == 0 && !eof_once) {
            eof_once = true;
            continue;
        }
        if (n == 0 || errno == ECONNRESET)
            return ZCOPY_ERR_BUSY;
        if (errno != EAGAIN && errno != EWOULDBLOCK)
            return zcopy_error(ZCOPY_ERR_SYSTEM, "descriptor from process "
                               "%d: %s", (int)pid, strerror(errno));
        if (zcopy_now_ns() > deadline)
            return zcopy_error(ZCOPY_ERR_UNSUPPORTED, "process %d did not "
                               "answer a descriptor request in %llu s",
                               (int)pid, FDPASS_TIMEOUT_NS / 1000000000ull);
        fetch_pause(&spins);
    }
    fd = reply_fd(&msg);
    if (n != (ssize_t)sizeof(reply) || reply.magic != FDPASS_MAGIC ||
        reply.status != ZCOPY_SUCCESS || fd < 0 ||
        (msg.msg_flags & MSG_CTRUNC)) {
        if (fd >= 0)
            close(fd);
        st = zcopy_error(ZCOPY_ERR_UNSUPPORTED, "process %d refused a "
                         "descriptor request (not of its MPI job, or not a "
                         "descriptor it offers)", (int)pid);
        zcopy_log(ZCOPY_LOG_WARN, "ipc", "%s", zcopy_error_detail());
        return st;
    }
    *fd_p = fd;
    return ZCOPY_SUCCESS;
}

/* One connection, one request, one answer. */
static zcopy_status_t fetch_once(const zcopy_ipc_id_t *owner,
                                 const fdpass_request_t *req,
                                 uint64_t deadline, int *fd_p)
{
    zcopy_status_t st;
    int sock;

    sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (sock < 0)
        return zcopy_error(ZCOPY_ERR_SYSTEM, "descriptor socket: %s",
                           strerror(errno));
    st = fetch_connect(sock, owner->pid, owner->table_ino, deadline);
    if (st == ZCOPY_SUCCESS &&
        send(sock, req, sizeof(*req), MSG_NOSIGNAL) != (ssize_t)sizeof(*req))
        st = errno == EPIPE || errno == ECONNRESET
                 ? ZCOPY_ERR_BUSY
                 : zcopy_error(ZCOPY_ERR_SYSTEM, "descriptor request to "
                               "process %d: %s", (int)owner->pid,
                               strerror(errno));
    if (st == ZCOPY_SUCCESS)
        st = fetch_reply(sock, owner->pid, deadline, fd_p);
    close(sock);
    return st;
}

zcopy_status_t zcopy_ipc_fdpass_fetch(const zcopy_ipc_id_t *owner,
                                      int remote_fd, uint64_t ino, int *fd_p)
{
    const fdpass_request_t req = { .magic = FDPASS_MAGIC,
                                   .job = zcopy_ipc_job_id(), .ino = ino,
                                   .fd = remote_fd };
    const uint64_t deadline = zcopy_now_ns() + FDPASS_TIMEOUT_NS;
    unsigned spins = 0;
    zcopy_status_t st;

    /* An owner that dropped the connection unanswered (its pending slots
     * full, or our request late) is asked again, until the deadline. */
    while ((st = fetch_once(owner, &req, deadline, fd_p)) == ZCOPY_ERR_BUSY) {
        if (zcopy_now_ns() > deadline)
            return zcopy_error(ZCOPY_ERR_UNSUPPORTED, "process %d did not "
                               "answer a descriptor request in %llu s",
                               (int)owner->pid,
                               FDPASS_TIMEOUT_NS / 1000000000ull);
        fetch_pause(&spins);
    }
    return st;
}
