/*
 * How this process gets its peers' descriptors: pidfd_getfd(2) where the
 * kernel allows it (one system call, no help from the owner), else the
 * owner hands them over its UNIX socket (fdpass.c). Every rank says at the
 * set-up of a communicator what it can do itself; it fetches that way, and
 * if any rank of its server needs sockets, every rank there serves over
 * its own from then on (a process never stops serving once it started).
 */
#include "table.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Whether a set-up has applied a choice yet (for the one log line). */
static _Atomic int access_in_use;

/* Yama's ptrace_scope 1 to 3 refuse ptrace-class access between sibling
 * processes, which MPI ranks are; absent means no Yama. */
static bool yama_refuses_siblings(void)
{
    FILE *f = fopen("/proc/sys/kernel/yama/ptrace_scope", "r");
    int scope = 0;

    if (f == NULL)
        return false;
    if (fscanf(f, "%d", &scope) != 1)
        scope = 0;
    fclose(f);
    return scope > 0;
}

/* pidfd_getfd of one of our own descriptors: a seccomp filter (Docker's
 * default profile) refuses it for every target, so refusing us tells. */
static bool pidfd_getfd_works(int probe_fd)
{
    int pidfd = (int)syscall(SYS_pidfd_open, getpid(), 0);
    int fd;

    if (pidfd < 0)
        return false;
    fd = (int)syscall(SYS_pidfd_getfd, pidfd, probe_fd, 0);
    close(pidfd);
    if (fd < 0)
        return false;
    close(fd);
    return true;
}

/* The local answer, once probed (0 until then): it cannot change in a
 * process. */
static _Atomic int probed;

/* What zcopy_config.peer_access asks, valid or not: anything but the three
 * values counts as sockets, the choice that works everywhere. */
static int configured(void)
{
    int a = zcopy_config.peer_access;

    return a >= ZCOPY_IPC_ACCESS_AUTO && a <= ZCOPY_IPC_ACCESS_SOCKET
               ? a : ZCOPY_IPC_ACCESS_SOCKET;
}

zcopy_ipc_access_t zcopy_ipc_access_local(int probe_fd)
{
    int a = configured();

    if (a != ZCOPY_IPC_ACCESS_AUTO)
        return (zcopy_ipc_access_t)a;
    a = atomic_load(&probed);
    if (a == 0) {
        a = !yama_refuses_siblings() && pidfd_getfd_works(probe_fd)
                ? ZCOPY_IPC_ACCESS_PIDFD
                : ZCOPY_IPC_ACCESS_SOCKET;
        atomic_store(&probed, a);
    }
    return (zcopy_ipc_access_t)a;
}

/* A process fetches the way it can itself; it serves over its socket as
 * soon as one rank of a server it shares cannot use pidfd_getfd. So every
 * owner that such a rank imports from is serving, whatever the others do. */
zcopy_status_t zcopy_ipc_access_use(zcopy_ipc_access_t access,
                                    uint64_t table_ino)
{
    const zcopy_ipc_access_t mine = zcopy_ipc_access_current();

    if (atomic_exchange(&access_in_use, 1) == 0)
        zcopy_log(ZCOPY_LOG_INFO, "ipc", "peer access: %s",
                  mine == ZCOPY_IPC_ACCESS_PIDFD
                      ? "pidfd_getfd"
                  : configured() == ZCOPY_IPC_ACCESS_SOCKET
                      ? "descriptors over UNIX sockets (coll_zcopy_peer_access)"
                  : yama_refuses_siblings()
                      ? "descriptors over UNIX sockets (Yama ptrace_scope "
                        "refuses pidfd_getfd between ranks)"
                      : "descriptors over UNIX sockets (pidfd_getfd is "
                        "refused on this server)");
    if (access != ZCOPY_IPC_ACCESS_SOCKET)
        return ZCOPY_SUCCESS;
    if (mine == ZCOPY_IPC_ACCESS_PIDFD && !zcopy_ipc_fdpass_serving())
        zcopy_log(ZCOPY_LOG_INFO, "ipc", "serving descriptors over a UNIX "
                  "socket too, for ranks of this server that cannot use "
                  "pidfd_getfd");
    return zcopy_ipc_fdpass_listen(table_ino);
}

zcopy_ipc_access_t zcopy_ipc_access_current(void)
{
    int a = atomic_load_explicit(&probed, memory_order_relaxed);

    if (configured() != ZCOPY_IPC_ACCESS_AUTO)
        return (zcopy_ipc_access_t)configured();
    /* Before any set-up probed (a tool using this layer alone). */
    return a ? (zcopy_ipc_access_t)a : ZCOPY_IPC_ACCESS_PIDFD;
}

const char *zcopy_ipc_access_name(zcopy_ipc_access_t access)
{
    return access == ZCOPY_IPC_ACCESS_SOCKET ? "unix sockets" : "pidfd_getfd";
}

/* The pidfd_getfd path: fetches fd @remote_fd of @pidfd's process and
 * checks it is inode @ino. */
static zcopy_status_t fetch_by_pidfd(int pidfd, pid_t pid, int remote_fd,
                                     int *fd_p)
{
    int fd = pidfd >= 0 ? (int)syscall(SYS_pidfd_getfd, pidfd, remote_fd, 0)
                        : -1;

    if (fd < 0)
        return zcopy_error(errno == EPERM ? ZCOPY_ERR_UNSUPPORTED
                                          : ZCOPY_ERR_SYSTEM,
                           "cannot fetch fd %d of process %d: %s", remote_fd,
                           (int)pid, strerror(errno));
    *fd_p = fd;
    return ZCOPY_SUCCESS;
}

zcopy_status_t zcopy_ipc_fetch(const zcopy_ipc_id_t *owner, int pidfd,
                               int remote_fd, uint64_t ino, int *fd_p)
{
    struct stat st;
    int fd;

    if (zcopy_ipc_access_current() == ZCOPY_IPC_ACCESS_SOCKET)
        ZCOPY_CHECK(zcopy_ipc_fdpass_fetch(owner, remote_fd, ino, &fd));
    else
        ZCOPY_CHECK(fetch_by_pidfd(pidfd, owner->pid, remote_fd, &fd));
    /* A recycled fd number must never map the wrong pages. */
    if (fstat(fd, &st) != 0 || (uint64_t)st.st_ino != ino) {
        close(fd);
        return zcopy_error(ZCOPY_ERR_NOT_FOUND,
                           "fd %d of process %d is no longer the memory it "
                           "published", remote_fd, (int)owner->pid);
    }
    *fd_p = fd;
    return ZCOPY_SUCCESS;
}
