/*
 * zcopy device memory: virtual ranges and physical memory as separate objects,
 * in the manner of CUDA's and Ascend ACL's virtual memory management.
 *
 *   zcopy_mem_reserve  -> a PROT_NONE virtual range
 *   zcopy_mem_create   -> physical memory (ZCOPY_MEM_HOST: a memfd)
 *   zcopy_mem_map      -> places physical memory inside a reservation
 *   zcopy_mem_export / zcopy_mem_import -> a shareable handle (an fd)
 *
 * Every function returns ZCOPY_SUCCESS (0) or a negative ZCOPY_ERR_* code.
 * A failed call changes nothing; zcopy_mem_last_error() describes the cause.
 */
#ifndef ZCOPY_MEM_H
#define ZCOPY_MEM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum {
    ZCOPY_SUCCESS         = 0,
    ZCOPY_ERR_ARG         = -1,  /* invalid argument (NULL, zero, bad flags) */
    ZCOPY_ERR_NOMEM       = -2,  /* out of memory or address space */
    ZCOPY_ERR_RANGE       = -3,  /* out of range, misaligned, straddles an end */
    ZCOPY_ERR_OVERLAP     = -4,  /* overlaps an existing object */
    ZCOPY_ERR_NOT_FOUND   = -5,  /* no such reservation, mapping, handle, block */
    ZCOPY_ERR_BUSY        = -6,  /* object still in use */
    ZCOPY_ERR_UNSUPPORTED = -7,  /* memory kind or feature not available here */
    ZCOPY_ERR_SYSTEM      = -8,  /* an operating system call failed */
    ZCOPY_ERR_INTERNAL    = -9   /* a bug or a broken invariant */
};

typedef enum {
    ZCOPY_MEM_HOST = 0,   /* memfd-backed host memory, on every Linux machine */
    ZCOPY_MEM_CUDA = 1    /* CUDA VMM memory (driver loaded at run time) */
} zcopy_mem_kind_t;

/* zcopy_mem_prop_t.flags */
#define ZCOPY_MEM_HUGE 0x1u  /* host: back with 2 MiB huge pages (hugetlbfs) */

typedef struct {
    zcopy_mem_kind_t kind;
    int device;      /* host: NUMA node to place pages on, or -1 for any */
    unsigned flags;  /* ZCOPY_MEM_HUGE */
} zcopy_mem_prop_t;

typedef struct zcopy_mem_handle *zcopy_mem_handle_t;

/* Smallest size and alignment that create and map accept for @prop. */
int zcopy_mem_granularity(const zcopy_mem_prop_t *prop, size_t *granularity);

/* Reserve @size bytes of address space (no access) aligned to @alignment
 * (0: the granularity). @hint is a preferred address or NULL; @flags: 0. */
int zcopy_mem_reserve(void **va, size_t size, size_t alignment, void *hint,
                      uint64_t flags);
/* Release a whole reservation; ZCOPY_ERR_BUSY while mappings remain in it. */
int zcopy_mem_release(void *va);

/* Allocate @size bytes of physical memory, all of it now: ZCOPY_ERR_NOMEM
 * where the machine, or this process's memory cgroup, has not that much
 * left (ZCOPY_MEM_HOST asks before a large create, rather than leave the
 * kernel's OOM killer to end some process); @flags: 0. */
int zcopy_mem_create(zcopy_mem_handle_t *handle, size_t size,
                     const zcopy_mem_prop_t *prop, uint64_t flags);
/* Free physical memory; ZCOPY_ERR_BUSY while it is mapped anywhere here. */
int zcopy_mem_free(zcopy_mem_handle_t handle);

/* Map [@offset, @offset + @size) of @handle at @va, inside one reservation,
 * overlapping no other mapping. @flags: 0. */
int zcopy_mem_map(void *va, size_t size, size_t offset,
                  zcopy_mem_handle_t handle, uint64_t flags);
/* Unmap the mapping that starts at @va; the range returns to the reservation. */
int zcopy_mem_unmap(void *va);

/* A new file descriptor that another process can import (close it when done). */
int zcopy_mem_export(zcopy_mem_handle_t handle, int *fd);
/* A handle to the memory behind @fd (the fd is duplicated, not taken). */
int zcopy_mem_import(int fd, zcopy_mem_handle_t *handle);

/* Size in bytes of the physical memory behind @handle. */
int zcopy_mem_get_size(zcopy_mem_handle_t handle, size_t *size);

/* Name of an error code ("ZCOPY_ERR_BUSY: object still in use"). */
const char *zcopy_strerror(int err);
/* Precise cause of the last failure in this thread ("" if none). */
const char *zcopy_mem_last_error(void);

#ifdef __cplusplus
}
#endif

#endif /* ZCOPY_MEM_H */
