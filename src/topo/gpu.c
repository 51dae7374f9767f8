/*
 * GPUs for ZCOPY_MEM_CUDA. One physical GPU shows up in hwloc as one PCI
 * device with zero or more OS devices under it (DRM "card1" and
 * "renderD128"; "cuda0", "nvml0", "opencl0d0" where hwloc's GPU plugins
 * ran, which topo.c turns off but an XML file may carry), so GPUs are
 * counted by PCI device, and an NVIDIA display controller counts even with
 * no OS device (no nvidia-drm).
 *
 * Numbering follows CUDA, since that is what zcopy_mem_prop_t.device means
 * for this kind: the N of "cudaN" where hwloc's CUDA plugin named the GPU
 * (it numbered in CUDA's own order, CUDA_VISIBLE_DEVICES included, and a
 * GPU it did not name was not visible to CUDA); otherwise PCI bus order,
 * which is CUDA's order with CUDA_DEVICE_ORDER=PCI_BUS_ID and no
 * CUDA_VISIBLE_DEVICES.
 */
#include "gpu.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PCI_VENDOR_NVIDIA 0x10de
#define PCI_BASE_CLASS_DISPLAY 0x03 /* VGA and 3D controllers */

static bool is_gpu_osdev(const struct hwloc_obj *obj)
{
    return obj->type == HWLOC_OBJ_OS_DEVICE &&
           (obj->attr->osdev.type == HWLOC_OBJ_OSDEV_GPU ||
            obj->attr->osdev.type == HWLOC_OBJ_OSDEV_COPROC);
}

static bool is_nvidia_gpu(const struct hwloc_obj *pci)
{
    return pci->attr->pcidev.vendor_id == PCI_VENDOR_NVIDIA &&
           pci->attr->pcidev.class_id >> 8 == PCI_BASE_CLASS_DISPLAY;
}

/* The CUDA number hwloc's CUDA plugin gave @pci ("cuda3"), or -1; also the
 * name to show: "cudaN", else the first GPU OS device, else none. */
static int cuda_number(const struct hwloc_obj *pci, const char **name_p)
{
    int number = -1;

    *name_p = NULL;
    for (hwloc_obj_t c = pci->io_first_child; c; c = c->next_sibling) {
        int n, end = 0;

        if (!is_gpu_osdev(c) || c->name == NULL)
            continue;
        if (sscanf(c->name, "cuda%d%n", &n, &end) == 1 &&
            c->name[end] == '\0' && n >= 0) {
            number = n;
            *name_p = c->name;
        } else if (*name_p == NULL) {
            *name_p = c->name;
        }
    }
    return number;
}

/* domain:bus:dev.func as one number that sorts like the bus id. */
static unsigned long pci_bus_key(const struct hwloc_obj *pci)
{
    const struct hwloc_pcidev_attr_s *a = &pci->attr->pcidev;

    return (unsigned long)a->domain << 24 | (unsigned long)a->bus << 16 |
           (unsigned long)a->dev << 8 | a->func;
}

static int pci_bus_order(const void *a, const void *b)
{
    unsigned long x = pci_bus_key(*(hwloc_obj_t const *)a);
    unsigned long y = pci_bus_key(*(hwloc_obj_t const *)b);

    return (x > y) - (x < y);
}

static void gpu_describe(hwloc_topology_t hw, hwloc_obj_t pci, int number,
                         const char *name, zcopy_topo_device_t *d)
{
    const struct hwloc_pcidev_attr_s *a = &pci->attr->pcidev;
    hwloc_obj_t cpu_side = hwloc_get_non_io_ancestor_obj(hw, pci);
    int w;

    d->os_index = number;
    if (name)
        snprintf(d->name, sizeof(d->name), "%s", name);
    else
        snprintf(d->name, sizeof(d->name), "PCI %04x:%04x", a->vendor_id,
                 a->device_id);
    snprintf(d->pci_bus_id, sizeof(d->pci_bus_id), "%04x:%02x:%02x.%x",
             (unsigned)a->domain, a->bus, a->dev, a->func);
    d->locality = cpu_side ? cpu_side->cpuset : NULL;
    w = d->locality ? hwloc_bitmap_weight(d->locality) : 0;
    d->npus = w > 0 ? (unsigned)w : 0;
}

zcopy_status_t zcopy_topo_gpus_collect(hwloc_topology_t hw,
                                       zcopy_topo_device_t **gpus_p,
                                       int *count_p)
{
    hwloc_obj_t pci = NULL, *found = NULL;
    zcopy_topo_device_t *gpus = NULL;
    int nfound = 0, cap = 0, count = 0;
    bool cuda_named = false;
    const char *name;

    while ((pci = hwloc_get_next_pcidev(hw, pci)) != NULL) {
        if (!is_nvidia_gpu(pci))
            continue;
        if (nfound == cap) {
            hwloc_obj_t *bigger = realloc(found, (size_t)(cap ? cap * 2 : 8) *
                                                 sizeof(*found));
            if (bigger == NULL)
                goto err_nomem;
            found = bigger;
            cap = cap ? cap * 2 : 8;
        }
        found[nfound++] = pci;
        cuda_named |= cuda_number(pci, &name) >= 0;
    }
    if (nfound == 0)
        goto out;
    qsort(found, (size_t)nfound, sizeof(*found), pci_bus_order);
    gpus = calloc((size_t)nfound, sizeof(*gpus));
    if (gpus == NULL)
        goto err_nomem;
    for (int i = 0; i < nfound; i++) {
        int number = cuda_number(found[i], &name);

        if (!cuda_named)
            number = i;
        else if (number < 0)
            continue; /* hidden from CUDA in this process */
        gpu_describe(hw, found[i], number, name, &gpus[count++]);
    }
out:
    free(found);
    *gpus_p = gpus;
    *count_p = count;
    return ZCOPY_SUCCESS;

err_nomem:
    free(found);
    return zcopy_error(ZCOPY_ERR_NOMEM, "topology: out of memory");
}
