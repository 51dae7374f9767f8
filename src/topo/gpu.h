/*
 * GPU discovery, inside the topology layer: the devices that
 * ZCOPY_MEM_CUDA memory can live on, read from a loaded hwloc topology.
 */
#ifndef ZCOPY_TOPO_GPU_H
#define ZCOPY_TOPO_GPU_H

#include "topo.h"

/* NVIDIA GPUs of @hw numbered as CUDA numbers them, in PCI bus order;
 * *@gpus_p is malloc'ed (NULL when there are none) and points into @hw
 * (localities). */
zcopy_status_t zcopy_topo_gpus_collect(hwloc_topology_t hw,
                                       zcopy_topo_device_t **gpus_p,
                                       int *count_p);

#endif
