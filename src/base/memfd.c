/* Memory files that other processes map. */
#include "base.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef F_SEAL_FUTURE_WRITE
#define F_SEAL_FUTURE_WRITE 0x0010 /* Linux 5.1 */
#endif

int zcopy_memfd_seal_size(int fd)
{
    return fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
}

int zcopy_memfd_seal_read_only(int fd)
{
    return fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW |
                                      F_SEAL_FUTURE_WRITE | F_SEAL_SEAL);
}

zcopy_status_t zcopy_memfd_segment(const char *name, size_t size, int *fd_p,
                                   uint64_t *ino_p)
{
    struct stat st;
    int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);

    if (fd < 0)
        return zcopy_error(ZCOPY_ERR_SYSTEM, "%s: %s", name, strerror(errno));
    /* Allocate now: ENOMEM here rather than SIGBUS inside a collective.
     * memfds are born 0777; owner-only, as all shared state (SPEC 8). */
    if (fchmod(fd, 0600) != 0 || ftruncate(fd, (off_t)size) != 0 ||
        fallocate(fd, 0, 0, (off_t)size) != 0 ||
        zcopy_memfd_seal_size(fd) != 0 || fstat(fd, &st) != 0) {
        close(fd);
        return zcopy_error(ZCOPY_ERR_NOMEM, "%s: %s", name, strerror(errno));
    }
    *fd_p = fd;
    *ino_p = (uint64_t)st.st_ino;
    return ZCOPY_SUCCESS;
}
