/* Turning libzcopy statuses into MPI error codes at the API edge. */
#ifndef ZCOPY_API_ERRORS_H
#define ZCOPY_API_ERRORS_H

#include "base/base.h"

#include <mpi.h>

/* Standard MPI error class for a libzcopy status. */
int zcopy_mpi_error_class(zcopy_status_t status);

/* An MPI error code of the right class whose MPI_Error_string is
 * "<call>: <detail>", raised through @comm's error handler (MPI_COMM_WORLD's
 * when @comm is MPI_COMM_NULL). Returns the code for the caller to return. */
int zcopy_mpi_raise(MPI_Comm comm, int error_class, const char *call,
                    const char *detail);

#endif
