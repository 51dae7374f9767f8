/* Memory files that other processes map. */
#include "base.h"

#include <fcntl.h>

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
