/*
 * Activation as peers see it: the registry's step, then its publication
 * (the export table for peers in the server, UCX registrations for peers
 * across servers). The MPIX calls and the MPI_Alloc_mem pool both activate
 * through here, so the two can never publish differently.
 */
#ifndef ZCOPY_API_ACTIVATION_H
#define ZCOPY_API_ACTIVATION_H

#include "registry/registry.h"

/* A failure changes nothing: a block that cannot be published (the export
 * table is full) is deactivated again before the error returns. */
zcopy_status_t zcopy_activation_add(uintptr_t va, size_t size,
                                    zcopy_mem_handle_t handle,
                                    zcopy_owner_t owner);

/* After it returns no peer reads or writes the block again, and UCX holds
 * no registration of it, so the caller may unmap the pages. */
zcopy_status_t zcopy_activation_remove(uintptr_t va, zcopy_owner_t owner);

#endif
