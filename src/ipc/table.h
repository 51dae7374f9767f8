/*
 * The export table: the layout one process writes and its peers read. It
 * crosses process boundaries, so its size is fixed and checked.
 */
#ifndef ZCOPY_IPC_TABLE_H
#define ZCOPY_IPC_TABLE_H

#include "ipc.h"

#include <assert.h>
#include <stdatomic.h>

#define ZCOPY_IPC_TABLE_MAGIC 0x7a636f70795f7462ull /* "zcopy_tb" */

typedef struct {
    uint64_t va;                  /* owner's address of the block */
    uint64_t size;
    uint64_t generation;          /* unique per activation in the owner */
    uint64_t range_base;          /* owner's set range holding the block */
    uint64_t range_size;
    uint64_t offset;              /* offset of the block in its memfd */
    uint64_t ino;                 /* inode of the memfd, to verify a fetch */
    int32_t fd;                   /* memfd number in the owner */
    uint32_t reserved;
} zcopy_ipc_entry_t;
static_assert(sizeof(zcopy_ipc_entry_t) == 64, "one entry per cache line");

typedef struct {
    uint64_t magic;
    /* Seqlock: odd while the owner rewrites the entries. Readers retry
     * until they see the same even value before and after copying. */
    _Atomic uint64_t seq;
    uint32_t nblocks;
    uint32_t reserved;
    uint64_t job;                 /* zcopy_ipc_job_id() of the owner */
    uint8_t pad[ZCOPY_CACHE_LINE - 32];
    zcopy_ipc_entry_t entries[ZCOPY_IPC_MAX_BLOCKS];
} zcopy_ipc_table_t;
static_assert(sizeof(zcopy_ipc_table_t) ==
                  ZCOPY_CACHE_LINE * (1 + ZCOPY_IPC_MAX_BLOCKS),
              "table layout is shared between processes");

#endif
