/*
 * Peer mapping: how processes of one server map each other's activated
 * memory (the host-memory analogue of cuMemExportToShareableHandle/import).
 *
 * Mechanism. Each process keeps an export table: a memfd page it alone
 * writes, listing its activated blocks (address, size, generation, the
 * memfd number and inode of the pages). A peer fetches the table's fd and
 * each block's fd with pidfd_getfd(2), which the kernel allows only to a
 * process with ptrace rights over the owner (same user, no Yama veto, no
 * seccomp filter refusing it), or, where that is refused, asks the owner
 * to send it over a UNIX socket (fdpass.c); it verifies every fetched fd
 * by inode before mapping it, so a recycled fd number can never map the
 * wrong pages.
 *
 * Mirrors. For every range of a peer, the importer reserves a mirror of the
 * same size; a block is mapped at mirror + (va - range base), so adjacent
 * blocks stay adjacent and one buffer may span several.
 *
 * Generations. A deactivated block leaves the owner's table; the owner bumps
 * the table's sequence number, and every importer compares it at each
 * collective (zcopy_ipc_sweep) and unmaps what is gone, so no peer keeps
 * freed pages alive past its next collective.
 */
#ifndef ZCOPY_IPC_H
#define ZCOPY_IPC_H

#include "base/base.h"

#include <stdatomic.h>
#include <sys/types.h>

#define ZCOPY_IPC_MAX_BLOCKS 1024

typedef struct zcopy_ipc_peer zcopy_ipc_peer_t;

/* What a process tells its peers so they can reach its table. */
typedef struct {
    int32_t pid;
    int32_t table_fd;
    uint64_t table_ino;
} zcopy_ipc_id_t;

/* Identity of this process's MPI job (Open MPI's PMIx namespace), or 0
 * outside mpirun. Imports are served only between processes of one job. */
uint64_t zcopy_ipc_job_id(void);

/* Creates this process's export table (once) and returns how to reach it. */
zcopy_status_t zcopy_ipc_local_id(zcopy_ipc_id_t *id);

/* Rewrites the export table from the registry; called after every change
 * of the registry. Fails with ZCOPY_ERR_NOMEM beyond ZCOPY_IPC_MAX_BLOCKS. */
zcopy_status_t zcopy_ipc_export_refresh(void);

/* A reference on the peer behind @id (imported on first use, then shared
 * by every communicator). */
zcopy_status_t zcopy_ipc_peer_get(const zcopy_ipc_id_t *id,
                                  zcopy_ipc_peer_t **peer_p);
void zcopy_ipc_peer_put(zcopy_ipc_peer_t *peer);

/* This process's address of the peer's [addr, addr + len), importing the
 * blocks under it when needed. len == 0 gives NULL. */
zcopy_status_t zcopy_ipc_peer_map(zcopy_ipc_peer_t *peer, uintptr_t addr,
                                  size_t len, void **local_p);

/* The version of the peer's table: unchanged means every address that
 * zcopy_ipc_peer_map gave for this peer is still valid. */
uint64_t zcopy_ipc_peer_version(const zcopy_ipc_peer_t *peer);

/* Imports of all peers together (peer.c): while there are none, a peer's
 * change has nothing to release here, and a sweep reads no peer's table
 * (one line and one page per peer, at every collective of a job that
 * never maps a peer). */
extern _Atomic size_t zcopy_ipc_imports_live;

void zcopy_ipc_sweep_imports(void);

/* Unmaps every import whose block its owner has deactivated. Cheap when
 * nothing changed: one load per known peer, and inline one load in all
 * while nothing is imported. */
static inline void zcopy_ipc_sweep(void)
{
    if (atomic_load_explicit(&zcopy_ipc_imports_live,
                             memory_order_relaxed) != 0)
        zcopy_ipc_sweep_imports();
}
/* The same from a progress callback: skips (false) when another caller
 * holds the peers, so it never waits and never re-enters. */
bool zcopy_ipc_sweep_try(void);

/* --- peer access: how descriptors are fetched (access.c, fdpass.c) ---- */

/* coll_zcopy_peer_access: the values of zcopy_config.peer_access. */
typedef enum {
    ZCOPY_IPC_ACCESS_AUTO = 0,
    ZCOPY_IPC_ACCESS_PIDFD = 1,   /* pidfd_getfd(2): needs ptrace rights */
    ZCOPY_IPC_ACCESS_SOCKET = 2   /* the owner sends it over a UNIX socket */
} zcopy_ipc_access_t;

/* What this process can use: the parameter, or else whether pidfd_getfd
 * of @probe_fd (one of our descriptors) works and Yama allows siblings. */
zcopy_ipc_access_t zcopy_ipc_access_local(int probe_fd);

/* Applies a server's choice (the most restrictive of its ranks' local
 * answers) to this process: with sockets, it serves from now on. This
 * process itself keeps fetching the way it can (its local answer). */
zcopy_status_t zcopy_ipc_access_use(zcopy_ipc_access_t access,
                                    uint64_t table_ino);

/* How this process fetches: its local answer (pidfd_getfd before any
 * set-up probed, unless the parameter says otherwise). */
zcopy_ipc_access_t zcopy_ipc_access_current(void);
const char *zcopy_ipc_access_name(zcopy_ipc_access_t access);

/* Fetches fd @remote_fd of process @owner (through @pidfd, an open pidfd
 * of it, or its socket) and checks it is inode @ino. */
zcopy_status_t zcopy_ipc_fetch(const zcopy_ipc_id_t *owner, int pidfd,
                               int remote_fd, uint64_t ino, int *fd_p);

/* The same without a pidfd at hand. */
zcopy_status_t zcopy_ipc_fetch_fd(const zcopy_ipc_id_t *owner, int remote_fd,
                                  uint64_t ino, int *fd_p);

/* Owner side of the socket path: listen (once), offer a descriptor that is
 * not in the export table (a control segment during its set-up) and
 * withdraw it, and answer waiting requests (at most every few tens of
 * microseconds unless @now; never blocks). */
zcopy_status_t zcopy_ipc_fdpass_listen(uint64_t table_ino);
bool zcopy_ipc_fdpass_serving(void);
void zcopy_ipc_fdpass_offer(int fd, uint64_t ino);
void zcopy_ipc_fdpass_withdraw(int fd);
void zcopy_ipc_fdpass_serve(bool now);

/* Importer side: asks @owner's socket for its fd @remote_fd (inode @ino),
 * serving and progressing meanwhile; fails after a bounded time. */
zcopy_status_t zcopy_ipc_fdpass_fetch(const zcopy_ipc_id_t *owner,
                                      int remote_fd, uint64_t ino, int *fd_p);

/* Whether fd @fd (inode @ino) is this process's export table or one of
 * the blocks it lists: what the socket path may hand out. */
bool zcopy_ipc_export_offers(int fd, uint64_t ino);

/* Counts for leak checks: known peers, live imported blocks. */
void zcopy_ipc_counts(size_t *npeers, size_t *nimports);

#endif
