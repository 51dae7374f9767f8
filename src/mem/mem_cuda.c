/*
 * ZCOPY_MEM_CUDA: the CUDA driver is opened at run time so that libzcopy has
 * no link-time dependency on CUDA. Until the CUDA backend lands, a machine
 * with a driver is told so plainly instead of being given host memory.
 */
#include "mem.h"

#include <dlfcn.h>

zcopy_status_t zcopy_mem_cuda_probe(void)
{
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);

    if (lib == NULL)
        return zcopy_error(ZCOPY_ERR_UNSUPPORTED,
                           "ZCOPY_MEM_CUDA: no CUDA driver on this machine "
                           "(libcuda.so.1 cannot be loaded)");
    dlclose(lib);
    return zcopy_error(ZCOPY_ERR_UNSUPPORTED,
                       "ZCOPY_MEM_CUDA: a CUDA driver is present but this "
                       "build has no CUDA backend yet");
}
