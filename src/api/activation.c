#include "api/activation.h"
#include "ipc/ipc.h"
#include "ucx/ucx.h"

#include <stdio.h>

zcopy_status_t zcopy_activation_add(uintptr_t va, size_t size,
                                    zcopy_mem_handle_t handle,
                                    zcopy_owner_t owner)
{
    char cause[256];
    zcopy_status_t st;

    st = zcopy_registry_activate(va, size, handle, owner);
    if (st != ZCOPY_SUCCESS)
        return st;
    st = zcopy_ipc_export_refresh();
    if (st != ZCOPY_SUCCESS) {
        snprintf(cause, sizeof(cause), "%s", zcopy_error_detail());
        zcopy_registry_deactivate(va, owner);
        zcopy_ipc_export_refresh(); /* one block fewer: cannot fail */
        return zcopy_error(st, "%s", cause);
    }
    zcopy_ucx_blocks_refresh(); /* SPEC 6: registered from activation on */
    return ZCOPY_SUCCESS;
}

zcopy_status_t zcopy_activation_remove(uintptr_t va, zcopy_owner_t owner)
{
    zcopy_status_t st = zcopy_registry_deactivate(va, owner);

    if (st != ZCOPY_SUCCESS)
        return st;
    /* Peers drop their import at their next collective; with one block
     * fewer, publishing cannot fail. */
    zcopy_ipc_export_refresh();
    /* Before the pages may be unmapped: UCX does not notice a remap under
     * a live registration. */
    zcopy_ucx_blocks_refresh();
    return ZCOPY_SUCCESS;
}
