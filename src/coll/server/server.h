/*
 * The in-server path of coll/: communicators whose ranks share a server.
 */
#ifndef ZCOPY_COLL_SERVER_H
#define ZCOPY_COLL_SERVER_H

#include "coll/server/control.h"

/* One collective on @zc, whose control plane is built (zc->ctl): as
 * zcopy_coll_run. */
zcopy_status_t zcopy_server_run(zcopy_comm_t *zc, const zcopy_coll_args_t *a);

#endif
