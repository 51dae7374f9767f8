/*
 * MPI error codes with precise messages. MPI offers dynamic error codes
 * inside a standard class (MPI_Add_error_code) whose string can be rewritten
 * (MPI_Add_error_string), so each class has a small ring of codes: a failure
 * takes the next one and writes its message into it. A user reads the
 * message right after the failing call; ZCOPY_ERROR_RING later failures of
 * the same class would have to happen in between for it to be rewritten.
 */
#include "errors.h"

#include <pthread.h>
#include <stdio.h>

#define ZCOPY_ERROR_RING 16

enum { CLASS_ARG, CLASS_NO_MEM, CLASS_UNSUPPORTED, CLASS_COMM, CLASS_OTHER,
       CLASS_COUNT };

/* Error codes are process-wide MPI objects; the ring is their cache. */
static struct {
    pthread_mutex_t lock;
    int codes[CLASS_COUNT][ZCOPY_ERROR_RING];
    unsigned next[CLASS_COUNT];
} ring = { .lock = PTHREAD_MUTEX_INITIALIZER };

int zcopy_mpi_error_class(zcopy_status_t status)
{
    switch (status) {
    case ZCOPY_ERR_NOMEM:       return MPI_ERR_NO_MEM;
    case ZCOPY_ERR_UNSUPPORTED: return MPI_ERR_UNSUPPORTED_OPERATION;
    case ZCOPY_ERR_SYSTEM:
    case ZCOPY_ERR_INTERNAL:    return MPI_ERR_OTHER;
    default:                    return MPI_ERR_ARG;
    }
}

static int class_slot(int error_class)
{
    switch (error_class) {
    case MPI_ERR_ARG:                   return CLASS_ARG;
    case MPI_ERR_NO_MEM:                return CLASS_NO_MEM;
    case MPI_ERR_UNSUPPORTED_OPERATION: return CLASS_UNSUPPORTED;
    case MPI_ERR_COMM:                  return CLASS_COMM;
    default:                            return CLASS_OTHER;
    }
}

int zcopy_mpi_raise(MPI_Comm comm, int error_class, const char *call,
                    const char *detail)
{
    char msg[MPI_MAX_ERROR_STRING];
    int slot = class_slot(error_class), code, *entry;

    snprintf(msg, sizeof(msg), "%s: %s", call, detail);
    pthread_mutex_lock(&ring.lock);
    entry = &ring.codes[slot][ring.next[slot]++ % ZCOPY_ERROR_RING];
    /* Code 0 is MPI_SUCCESS, never a dynamic code: it marks a free entry. */
    if (*entry == 0 && MPI_Add_error_code(error_class, entry) != MPI_SUCCESS)
        *entry = 0;
    code = *entry ? *entry : error_class;
    if (*entry)
        MPI_Add_error_string(code, msg);
    pthread_mutex_unlock(&ring.lock);
    zcopy_log(ZCOPY_LOG_DEBUG, "api", "%s", msg);
    MPI_Comm_call_errhandler(comm == MPI_COMM_NULL ? MPI_COMM_WORLD : comm,
                             code);
    return code;
}
