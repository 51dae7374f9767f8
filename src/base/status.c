/* Error names and the per-thread description of the last failure. */
#include "base.h"

#include <stdio.h>
#include <string.h>

/* Thread-local because each thread's failing call owns its description;
 * read back by the same thread right after the call returns. */
static _Thread_local char error_detail[256];

ZCOPY_COMPONENT_API zcopy_status_t zcopy_error(zcopy_status_t status,
                                               const char *fmt, ...)
{
    char detail[sizeof(error_detail)];
    va_list ap;

    /* Format aside first: callers may pass the current detail as an
     * argument to prefix it. */
    va_start(ap, fmt);
    vsnprintf(detail, sizeof(detail), fmt, ap);
    va_end(ap);
    memcpy(error_detail, detail, sizeof(error_detail));
    zcopy_log(ZCOPY_LOG_DEBUG, "error", "%s: %s", zcopy_strerror(status),
              error_detail);
    return status;
}

ZCOPY_COMPONENT_API const char *zcopy_error_detail(void) { return error_detail; }

void zcopy_error_clear(void) { error_detail[0] = '\0'; }

ZCOPY_EXPORT const char *zcopy_mem_last_error(void) { return error_detail; }

ZCOPY_EXPORT const char *zcopy_strerror(int err)
{
    switch (err) {
    case ZCOPY_SUCCESS:         return "ZCOPY_SUCCESS: success";
    case ZCOPY_ERR_ARG:         return "ZCOPY_ERR_ARG: invalid argument";
    case ZCOPY_ERR_NOMEM:       return "ZCOPY_ERR_NOMEM: out of memory";
    case ZCOPY_ERR_RANGE:       return "ZCOPY_ERR_RANGE: out of range or misaligned";
    case ZCOPY_ERR_OVERLAP:     return "ZCOPY_ERR_OVERLAP: overlaps an existing object";
    case ZCOPY_ERR_NOT_FOUND:   return "ZCOPY_ERR_NOT_FOUND: no such object";
    case ZCOPY_ERR_BUSY:        return "ZCOPY_ERR_BUSY: object still in use";
    case ZCOPY_ERR_UNSUPPORTED: return "ZCOPY_ERR_UNSUPPORTED: not supported here";
    case ZCOPY_ERR_SYSTEM:      return "ZCOPY_ERR_SYSTEM: operating system call failed";
    case ZCOPY_ERR_INTERNAL:    return "ZCOPY_ERR_INTERNAL: internal error";
    default:                    return "ZCOPY_ERR_?: unknown error code";
    }
}
