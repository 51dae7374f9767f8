/* Defaults of the progress hooks: without a component there are no
 * collectives, hence no waits and no loop to join. */
#include "host/progress.h"

static bool no_progress(void)
{
    return false;
}

static void no_want_progress(void)
{
}

zcopy_progress_hooks_t zcopy_progress_hooks = {
    .progress = no_progress,
    .want_progress = no_want_progress,
};

/* Per thread: a progress run belongs to the thread whose wait started it. */
_Thread_local unsigned zcopy_host_progress_depth
    __attribute__((tls_model("initial-exec")));
