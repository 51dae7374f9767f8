/*
 * Registration of existing memory with UCX, and its packed remote key.
 *
 * ucp_mem_map without UCP_MEM_MAP_ALLOCATE registers the pages already
 * mapped at the address with every memory domain that can register memory
 * (on 1.13 here: self, tcp, cma; README.md). It keeps no watch on the
 * mapping, so a registration must end before its pages are unmapped.
 */
#include "ucx_int.h"

#include <stdlib.h>

static ucs_memory_type_t memory_type_of(zcopy_mem_kind_t kind)
{
    switch (kind) {
    case ZCOPY_MEM_HOST: return UCS_MEMORY_TYPE_HOST;
    case ZCOPY_MEM_CUDA: return UCS_MEMORY_TYPE_CUDA;
    }
    return UCS_MEMORY_TYPE_UNKNOWN;
}

zcopy_status_t zcopy_ucx_mem_register(void *va, size_t size,
                                      zcopy_mem_kind_t kind,
                                      zcopy_ucx_mem_t **mem_p)
{
    ucp_mem_map_params_t params = {
        .field_mask  = UCP_MEM_MAP_PARAM_FIELD_ADDRESS |
                       UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                       UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE,
        .address     = va,
        .length      = size,
        /* Told, not detected: UCX would otherwise ask each memory-type
         * domain about the address at every registration. */
        .memory_type = memory_type_of(kind),
    };
    zcopy_ucx_mem_t *mem;
    zcopy_status_t st;
    ucs_status_t us;

    if (va == NULL || size == 0 || mem_p == NULL)
        return zcopy_error(ZCOPY_ERR_ARG, "ucx: register: NULL or empty "
                           "argument");
    if (params.memory_type == UCS_MEMORY_TYPE_UNKNOWN)
        return zcopy_error(ZCOPY_ERR_ARG, "ucx: register: unknown memory "
                           "kind %d", (int)kind);
    pthread_mutex_lock(&zcopy_ucx.lock);
    st = zcopy_ucx_init_locked();
    if (st != ZCOPY_SUCCESS)
        goto out;
    if (!(zcopy_ucx.memory_types & UCS_BIT(params.memory_type))) {
        st = zcopy_error(ZCOPY_ERR_UNSUPPORTED, "ucx: register: this UCX "
                         "(%s) has no %s memory support",
                         ucp_get_version_string(),
                         ucs_memory_type_names[params.memory_type]);
        goto out;
    }
    /* Activated blocks never overlap; a registration that does is a
     * bookkeeping bug above, better caught here than as a wrong key. */
    for (mem = zcopy_ucx.mems; mem != NULL; mem = mem->next) {
        if (zcopy_ranges_overlap((uintptr_t)va, size, mem->va, mem->size)) {
            st = zcopy_error(ZCOPY_ERR_OVERLAP, "ucx: register: [%p, +%zu) "
                             "overlaps the registration [%p, +%zu)", va,
                             size, (void *)mem->va, mem->size);
            goto out;
        }
    }

    mem = calloc(1, sizeof(*mem));
    if (mem == NULL) {
        st = zcopy_error(ZCOPY_ERR_NOMEM, "ucx: register: out of memory");
        goto out;
    }
    us = ucp_mem_map(zcopy_ucx.context, &params, &mem->memh);
    if (us != UCS_OK) {
        st = zcopy_ucx_error(us, "ucx: ucp_mem_map of [%p, +%zu)", va, size);
        goto err_free_mem;
    }
    us = ucp_rkey_pack(zcopy_ucx.context, mem->memh, &mem->packed_rkey,
                       &mem->packed_rkey_len);
    if (us != UCS_OK) {
        st = zcopy_ucx_error(us, "ucx: ucp_rkey_pack of [%p, +%zu)", va,
                             size);
        goto err_unmap;
    }
    mem->va = (uintptr_t)va;
    mem->size = size;
    mem->kind = kind;
    mem->next = zcopy_ucx.mems;
    zcopy_ucx.mems = mem;
    zcopy_ucx.nmems++;
    zcopy_log(ZCOPY_LOG_TRACE, "ucx", "registered [%p, +%zu), key of %zu "
              "bytes", va, size, mem->packed_rkey_len);
    *mem_p = mem;
    goto out;

err_unmap:
    ucp_mem_unmap(zcopy_ucx.context, mem->memh);
err_free_mem:
    free(mem);
out:
    pthread_mutex_unlock(&zcopy_ucx.lock);
    return st;
}

void zcopy_ucx_mem_release_locked(zcopy_ucx_mem_t *mem)
{
    zcopy_ucx_mem_t **link = &zcopy_ucx.mems;
    ucs_status_t us;

    while (*link != mem)
        link = &(*link)->next;
    *link = mem->next;
    zcopy_ucx.nmems--;
    ucp_rkey_buffer_release(mem->packed_rkey);
    us = ucp_mem_unmap(zcopy_ucx.context, mem->memh);
    if (us != UCS_OK)
        zcopy_log(ZCOPY_LOG_WARN, "ucx", "ucp_mem_unmap of [%p, +%zu): %s",
                  (void *)mem->va, mem->size, ucs_status_string(us));
    free(mem);
}

void zcopy_ucx_mem_unregister(zcopy_ucx_mem_t *mem)
{
    zcopy_ucx_mem_t *m;

    if (mem == NULL)
        return;
    pthread_mutex_lock(&zcopy_ucx.lock);
    /* Compared, not dereferenced: after zcopy_ucx_cleanup() the handle is
     * gone, and unregistering it then is a harmless no-op. */
    for (m = zcopy_ucx.mems; m != NULL && m != mem; m = m->next)
        ;
    /* A served read's send may still hold a registration after its reader
     * has the data (serve.c): let them finish before any goes. */
    for (unsigned idle = 0; m != NULL && m->serving > 0 &&
                            zcopy_ucx.state == UCX_STATE_LIVE;)
        zcopy_ucx_poll_locked(&idle);
    if (m != NULL)
        zcopy_ucx_mem_release_locked(mem);
    pthread_mutex_unlock(&zcopy_ucx.lock);
}

void zcopy_ucx_mem_packed_rkey(const zcopy_ucx_mem_t *mem,
                               const void **rkey_p, size_t *len_p)
{
    *rkey_p = mem->packed_rkey;
    *len_p = mem->packed_rkey_len;
}
