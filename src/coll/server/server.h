/*
 * The in-server path of coll/: communicators whose ranks share a server.
 */
#ifndef ZCOPY_COLL_SERVER_H
#define ZCOPY_COLL_SERVER_H

#include "coll/server/control.h"

/* One collective on @zc, whose control plane is built (zc->ctl): as
 * zcopy_coll_run. */
zcopy_status_t zcopy_server_run(zcopy_comm_t *zc, const zcopy_coll_args_t *a);

/* Whether zcopy_server_run may hand a call of @type to the previous
 * component whatever its buffers (coll_zcopy_rooted_yield_min): then no
 * rank may decline it through the control plane before asking. */
bool zcopy_server_may_hand_over(const zcopy_comm_t *zc,
                                zcopy_coll_type_t type);

#endif
