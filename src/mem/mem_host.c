/*
 * ZCOPY_MEM_HOST: physical memory is a memfd. Backing store is allocated at
 * create time (fallocate), so a machine out of memory fails here with
 * ZCOPY_ERR_NOMEM rather than with SIGBUS at first touch in a collective.
 */
#include "mem.h"

#include <errno.h>
#include <fcntl.h>
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

bool zcopy_mem_host_node_exists(int node)
{
    char path[64];

    snprintf(path, sizeof(path), "/sys/devices/system/node/node%d", node);
    return access(path, F_OK) == 0;
}

/* Allocates the pages of @fd on NUMA node @node by binding this thread's
 * policy for the duration of the fallocate (the policy is per thread, so no
 * other thread is affected), then restoring the previous policy. */
static int host_fallocate_on_node(int fd, size_t size, int node)
{
    unsigned long old_mask[16] = {0}, mask[16] = {0};
    int old_mode = MPOL_DEFAULT, rc, saved;
    const unsigned long maxnode = sizeof(mask) * 8;

    if (node < 0)
        return fallocate(fd, 0, 0, (off_t)size);
    if ((unsigned long)node >= maxnode) {
        errno = EINVAL;
        return -1;
    }
    if (syscall(SYS_get_mempolicy, &old_mode, old_mask, maxnode, NULL, 0) != 0)
        return -1;
    mask[node / 64] = 1ul << (node % 64);
    if (syscall(SYS_set_mempolicy, MPOL_BIND, mask, maxnode) != 0)
        return -1;
    rc = fallocate(fd, 0, 0, (off_t)size);
    saved = errno;
    syscall(SYS_set_mempolicy, old_mode, old_mask, maxnode);
    errno = saved;
    return rc;
}

zcopy_status_t zcopy_mem_host_create(struct zcopy_mem_handle *h, size_t size,
                                     const zcopy_mem_prop_t *prop)
{
    unsigned mfd_flags = MFD_CLOEXEC;
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
    if (ftruncate(fd, (off_t)size) != 0 ||
        host_fallocate_on_node(fd, size, prop->device) != 0) {
        int err = errno;
        close(fd);
        if (err == ENOMEM || err == ENOSPC)
            return zcopy_error(ZCOPY_ERR_NOMEM,
                               "cannot allocate %zu bytes (NUMA node %d)",
                               size, prop->device);
        return zcopy_error(ZCOPY_ERR_SYSTEM,
                           "allocating %zu bytes of memfd failed: %s", size,
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
