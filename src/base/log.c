/* Logging and process-wide parameters. */
#include "base.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

ZCOPY_COMPONENT_API zcopy_config_t zcopy_config = {
    .verbose = 0,
    .virtual_servers = 1,
    .small_msg = 16384,
    .inline_max = 1024,
    .inline_max_yield = 8192,
    .root_moves_max = 262144,
    .rooted_yield_min = 256,
    .one_per_server_min = 2048,
    .one_per_server_moves = false,
    .span_inline_max = 262144,
    .span_dissemination_min = 64,
    .wait_report_s = 60,
    .yield_mode = 0,
    .sleep_mode = 0,
    .transport = ZCOPY_TRANSPORT_AUTO,
    .ucx_p2p_min = 4194304,
    .ucx_push_min = 262144,
    .ucx_push_part_max = (size_t)1 << 30,
    .ucx_max_requests = 128,
};

static int env_int(const char *name, int dflt)
{
    const char *v = getenv(name);
    return v && *v ? atoi(v) : dflt;
}

/* Library users without the component (unit tests, tools) tune through the
 * environment; the component overrides these from its MCA parameters. */
__attribute__((constructor)) void zcopy_config_from_env(void)
{
    zcopy_config.verbose = env_int("ZCOPY_VERBOSE", zcopy_config.verbose);
    zcopy_config.peer_access = env_int("ZCOPY_PEER_ACCESS",
                                       zcopy_config.peer_access);
}

ZCOPY_COMPONENT_API void zcopy_log_emit(int level, const char *subsys, const char *file, int line,
                    const char *fmt, ...)
{
    char msg[512];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (level <= ZCOPY_LOG_WARN)
        fprintf(stderr, "[zcopy:%d] %s %s: %s\n", (int)getpid(), subsys,
                level == ZCOPY_LOG_ERROR ? "error" : "warning", msg);
    else if (level <= ZCOPY_LOG_INFO) /* for users: no source positions */
        fprintf(stderr, "[zcopy:%d] %s: %s\n", (int)getpid(), subsys, msg);
    else
        fprintf(stderr, "[zcopy:%d] %s: %s (%s:%d)\n", (int)getpid(), subsys,
                msg, file, line);
}
