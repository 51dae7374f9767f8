/* Memory files that other processes map. */
#include "base.h"

#include <fcntl.h>

int zcopy_memfd_seal_size(int fd)
{
    return fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
}
