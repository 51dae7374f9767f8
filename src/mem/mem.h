/*
 * Memory layer, internal side: the bookkeeping the registry builds on.
 * The public calls live in include/zcopy/mem.h.
 *
 * Reservations and mappings are kept in address order. A pin marks an object
 * that a higher layer relies on (a set range pins its reservation, an
 * activated block pins its mapping): pinned objects refuse release/unmap with
 * ZCOPY_ERR_BUSY, so the registry never sees memory vanish under it.
 */
#ifndef ZCOPY_MEM_INTERNAL_H
#define ZCOPY_MEM_INTERNAL_H

#include "base/base.h"

#include <sys/types.h>

struct zcopy_mem_handle {
    zcopy_mem_kind_t kind;
    int fd;                       /* memfd holding the physical pages */
    size_t size;
    size_t granularity;
    int device;                   /* NUMA node the pages were placed on, or -1 */
    unsigned map_count;           /* live mappings in this process */
    bool imported;                /* came from zcopy_mem_import */
    ino_t ino;                    /* identity a peer can verify after import */
    struct zcopy_mem_handle *next;
};

/* What an activated block needs to know about the mapping under it. */
typedef struct {
    int fd;                       /* the handle's memfd (owned by the handle) */
    size_t offset;                /* offset of the mapping inside the handle */
    ino_t ino;
    zcopy_mem_kind_t kind;
} zcopy_mem_mapping_info_t;

/* [va, va + size) lies in one reservation: pin it. */
zcopy_status_t zcopy_mem_reservation_pin(uintptr_t va, size_t size);
void zcopy_mem_reservation_unpin(uintptr_t va);

/* [va, va + size) is exactly one mapping of @handle: pin it. */
zcopy_status_t zcopy_mem_mapping_pin(uintptr_t va, size_t size,
                                     zcopy_mem_handle_t handle,
                                     zcopy_mem_mapping_info_t *info);
void zcopy_mem_mapping_unpin(uintptr_t va);

/* Host backend (mem_host.c). */
zcopy_status_t zcopy_mem_host_create(struct zcopy_mem_handle *h, size_t size,
                                     const zcopy_mem_prop_t *prop);
size_t zcopy_mem_host_granularity(unsigned flags);
/* Whether pages can be placed on NUMA node @node (-1: anywhere); the cause
 * in the error detail if not. */
zcopy_status_t zcopy_mem_host_check_node(int node);

/* CUDA backend (mem_cuda.c): the driver is loaded at run time. */
zcopy_status_t zcopy_mem_cuda_probe(void);

#endif
