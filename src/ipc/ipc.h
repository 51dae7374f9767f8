/*
 * Peer mapping: how processes of one server map each other's activated
 * memory (the host-memory analogue of cuMemExportToShareableHandle/import).
 *
 * Mechanism. Each process keeps an export table: a memfd page it alone
 * writes, listing its activated blocks (address, size, generation, the
 * memfd number and inode of the pages). A peer fetches the table's fd and
 * each block's fd with pidfd_getfd(2), which the kernel allows only to a
 * process with ptrace rights over the owner (same user, no Yama veto), and
 * verifies every fetched fd by inode before mapping it, so a recycled fd
 * number can never map the wrong pages.
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

/* Unmaps every import whose block its owner has deactivated. Cheap when
 * nothing changed: one load per known peer. */
void zcopy_ipc_sweep(void);
/* The same from a progress callback: skips (false) when another caller
 * holds the peers, so it never waits and never re-enters. */
bool zcopy_ipc_sweep_try(void);

/* Fetches fd @remote_fd of process @pid and checks it is inode @ino. */
zcopy_status_t zcopy_ipc_fetch_fd(pid_t pid, int remote_fd, uint64_t ino,
                                  int *fd_p);

/* Counts for leak checks: known peers, live imported blocks. */
void zcopy_ipc_counts(size_t *npeers, size_t *nimports);

#endif
