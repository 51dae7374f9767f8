/*
 * The in-server path of coll/: communicators whose ranks share a server.
 */
#ifndef ZCOPY_COLL_SERVER_H
#define ZCOPY_COLL_SERVER_H

#include "coll/server/control.h"

/* One collective on @zc, whose control plane is built (zc->ctl): as
 * zcopy_coll_run. */
zcopy_status_t zcopy_server_run(zcopy_comm_t *zc, const zcopy_coll_args_t *a);

/* Whether the call @a goes to the previous component on every rank without
 * a step (coll_zcopy_rooted_yield_min), whatever its buffers: then a rank
 * that cannot take it must not decline it through the control plane
 * either. zcopy_server_hand_over counts it. */
bool zcopy_server_hands_over(const zcopy_comm_t *zc,
                             const zcopy_coll_args_t *a);
zcopy_status_t zcopy_server_hand_over(zcopy_comm_t *zc,
                                      zcopy_coll_type_t type);

#endif
