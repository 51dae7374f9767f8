/*
 * ZCOPY_MEM_HOST: physical memory is a memfd. Backing store is allocated at
 * create time (fallocate), so a machine out of memory fails here with
 * ZCOPY_ERR_NOMEM rather than with SIGBUS at first touch in a collective,
 * or with the kernel's OOM killer during the fallocate (host_fallocate).
 */
#include "mem.h"

#include "topo/topo.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <linux/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define ZCOPY_HUGE_PAGE_SIZE (2ul << 20)

#ifndef MPOL_DEFAULT
#define MPOL_DEFAULT 0
#define MPOL_BIND 2
#endif

size_t zcopy_mem_host_granularity(unsigned flags)
{
    if (flags & ZCOPY_MEM_HUGE)
        return ZCOPY_HUGE_PAGE_SIZE;
    return (size_t)sysconf(_SC_PAGESIZE);
}

/* Where set_mempolicy can place pages. */
static bool kernel_has_node(int node)
{
    char path[64];

    snprintf(path, sizeof(path), "/sys/devices/system/node/node%d", node);
    return access(path, F_OK) == 0;
}

/* A node must be one that zcopy lists (the hwloc topology, see
 * zcopy_topo_devices) and one the kernel can place pages on. The two
 * differ under HWLOC_SYNTHETIC or HWLOC_XMLFILE, and where a cgroup keeps
 * nodes from this process (hwloc then leaves them out). A listed node the
 * kernel lacks is a valid request this machine cannot serve: UNSUPPORTED,
 * so that a caller trying each listed node can tell it from a bad number. */
zcopy_status_t zcopy_mem_host_check_node(int node)
{
    bool in_kernel, in_topology;

    if (node == -1)
        return ZCOPY_SUCCESS;
    in_kernel = node >= 0 && kernel_has_node(node);
    in_topology = zcopy_topo_numa_node_exists(node);
    if (in_topology && in_kernel)
        return ZCOPY_SUCCESS;
    if (in_topology)
        return zcopy_error(ZCOPY_ERR_UNSUPPORTED,
                           "NUMA node %d exists in the hwloc topology "
                           "(HWLOC_SYNTHETIC or HWLOC_XMLFILE) but not in "
                           "this kernel: pages cannot be placed on it", node);
    if (in_kernel && zcopy_topo_init() != ZCOPY_SUCCESS)
        return ZCOPY_SUCCESS; /* no topology to ask: the kernel decides */
    if (in_kernel)
        return zcopy_error(ZCOPY_ERR_ARG,
                           "NUMA node %d is not in this process's hwloc "
                           "topology (not allowed to it, or left out of "
                           "HWLOC_SYNTHETIC or HWLOC_XMLFILE)", node);
    return zcopy_error(ZCOPY_ERR_ARG,
                       "NUMA node %d does not exist on this machine", node);
}

/* A fallocate of shared memory beyond what is free does not fail: the
 * kernel's OOM killer ends a process instead, this one or another (a
 * create of 26 GiB on a VM of 23 GiB killed the creating process). So a
 * create above HOST_FALLOCATE_STEP goes in steps of that size, each only
 * while what is left (zcopy_memory_left: the machine, the NUMA node the
 * pages are bound to, the memory cgroups) would keep HOST_MEMORY_RESERVE
 * after the rest of the create: an allocation elsewhere in between can
 * take at most a step's worth before this one notices and stops, and
 * then frees what it took. Smaller creates go at once, unasked: asking
 * reads half a dozen files (0.1 ms on the AMD EPYC VM, 3x a 64 KiB
 * create, 6% of a 4 MiB one), and one such create can overdraw the
 * reserve by little; so a machine that runs out step by step in 4 MiB
 * pool blocks still meets the killer. Huge pages come from their own
 * pool, whose exhaustion fallocate reports (ENOSPC). Two large creates
 * racing for the last memory may both fail where one alone would fit. */
#define HOST_FALLOCATE_STEP ((size_t)256 << 20)
#define HOST_MEMORY_RESERVE ((size_t)128 << 20)

/* ENOMEM where the rest of the create would not leave the reserve. */
static int host_fallocate(int fd, size_t size, int node, bool huge)
{
    size_t done = 0;

    if (huge || size <= HOST_FALLOCATE_STEP)
        return fallocate(fd, 0, 0, (off_t)size);
    while (done < size) {
        const size_t step = size - done < HOST_FALLOCATE_STEP
                                ? size - done : HOST_FALLOCATE_STEP;
        const size_t left = zcopy_memory_left(node);

        if (left != SIZE_MAX && (left < HOST_MEMORY_RESERVE ||
                                 size - done > left - HOST_MEMORY_RESERVE)) {
            errno = ENOMEM;
            return -1;
        }
        if (fallocate(fd, 0, (off_t)done, (off_t)step) != 0)
            return -1;
        done += step;
    }
    return 0;
}

/* Allocates the pages of @fd on NUMA node @node by binding this thread's
 * policy for the duration of the fallocate (the policy is per thread, so no
 * other thread is affected), then restoring the previous policy. */
static int host_fallocate_on_node(int fd, size_t size, int node, bool huge)
{
    unsigned long old_mask[16] = {0}, mask[16] = {0};
    int old_mode = MPOL_DEFAULT, rc, saved;
    const unsigned long maxnode = sizeof(mask) * 8;

    if (node < 0)
        return host_fallocate(fd, size, node, huge);
    if ((unsigned long)node >= maxnode) {
        errno = EINVAL;
        return -1;
    }
    if (syscall(SYS_get_mempolicy, &old_mode, old_mask, maxnode, NULL, 0) != 0)
        return -1;
    mask[node / 64] = 1ul << (node % 64);
    if (syscall(SYS_set_mempolicy, MPOL_BIND, mask, maxnode) != 0)
        return -1;
    rc = host_fallocate(fd, size, node, huge);
    saved = errno;
    syscall(SYS_set_mempolicy, old_mode, old_mask, maxnode);
    errno = saved;
    return rc;
}

zcopy_status_t zcopy_mem_host_create(struct zcopy_mem_handle *h, size_t size,
                                     const zcopy_mem_prop_t *prop)
{
    unsigned mfd_flags = MFD_CLOEXEC | MFD_ALLOW_SEALING;
    struct stat st;
    int fd;

    if (prop->flags & ZCOPY_MEM_HUGE)
        mfd_flags |= MFD_HUGETLB | MAP_HUGE_2MB;
    fd = memfd_create("zcopy", mfd_flags);
    if (fd < 0) {
        if (errno == EINVAL && (prop->flags & ZCOPY_MEM_HUGE))
            return zcopy_error(ZCOPY_ERR_UNSUPPORTED,
                               "huge pages are not available on this kernel");
        return zcopy_error(ZCOPY_ERR_SYSTEM, "memfd_create failed: %s",
                           strerror(errno));
    }
    /* memfds are born 0777; owner-only, as all shared state (SPEC 8). */
    if (fchmod(fd, 0600) != 0) {
        int err = errno;
        close(fd);
        return zcopy_error(ZCOPY_ERR_SYSTEM, "fchmod of memfd failed: %s",
                           strerror(err));
    }
    if (ftruncate(fd, (off_t)size) != 0 ||
        host_fallocate_on_node(fd, size, prop->device,
                               prop->flags & ZCOPY_MEM_HUGE) != 0) {
        int err = errno;
        close(fd);
        if (err == ENOMEM || err == ENOSPC)
            return zcopy_error(ZCOPY_ERR_NOMEM,
                               "cannot allocate %zu bytes (NUMA node %d): "
                               "out of memory", size, prop->device);
        /* A container without CAP_SYS_NICE (Docker's default seccomp
         * profile) refuses memory policies: no placement here, but
         * device -1 still works. */
        if (err == EPERM && prop->device >= 0)
            return zcopy_error(ZCOPY_ERR_UNSUPPORTED,
                               "cannot place memory on NUMA node %d: "
                               "set_mempolicy is refused here (a container "
                               "without CAP_SYS_NICE?); use device -1",
                               prop->device);
        return zcopy_error(ZCOPY_ERR_SYSTEM,
                           "allocating %zu bytes of memfd failed: %s", size,
                           strerror(err));
    }
    if (zcopy_memfd_seal_size(fd) != 0) {
        int err = errno;
        close(fd);
        return zcopy_error(ZCOPY_ERR_SYSTEM, "sealing the memfd failed: %s",
                           strerror(err));
    }
    if (fstat(fd, &st) != 0) {
        int err = errno;
        close(fd);
        return zcopy_error(ZCOPY_ERR_SYSTEM, "fstat of memfd failed: %s",
                           strerror(err));
    }
    h->fd = fd;
    h->ino = st.st_ino;
    return ZCOPY_SUCCESS;
}
