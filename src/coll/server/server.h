/*
 * The in-server path of coll/: communicators whose ranks share a server.
 */
#ifndef ZCOPY_COLL_SERVER_H
#define ZCOPY_COLL_SERVER_H

#include "coll/server/control.h"

/* One collective on @zc, whose control plane is built (zc->ctl): as
 * zcopy_coll_run. */
zcopy_status_t zcopy_server_run(zcopy_comm_t *zc, const zcopy_coll_args_t *a);

/* Where waits yield, a small bcast, reduce, gather or scatter lasts a
 * scheduler round under zcopy: the ranks agree before any data moves, so
 * the root waits for every rank's arrival and every other rank for the
 * root's. Under stock, the ranks that send leave once they have sent (the
 * root of a bcast or scatter, the others of a gather or reduce) and a
 * receiver waits for its senders alone, so a call can end on most ranks
 * before a rank that was off its core runs again (np 3 on 2 cores: 0.2-0.6
 * us against zcopy's 12). Such calls go to the previous component on every
 * rank where some rank's waits yield and zcopy_wait_hands_over() says so:
 * not where every core has two ranks, whose waits sleep on a bell until
 * the rank that stores wakes them, which makes zcopy's own call as fast as
 * handing it over, or faster. Each rank decides alone, with no step: a
 * block's size is the same on every rank (matching type signatures), and
 * the limit and the hand-over are agreed at set-up. The v-forms stay: only
 * their root knows the sizes. */
static inline bool zcopy_server_hands_over(const zcopy_comm_t *zc,
                                           const zcopy_coll_args_t *a)
{
    if (!zc->ctl->rooted_hand_over)
        return false;
    switch (a->type) {
    case ZCOPY_COLL_BCAST:
    case ZCOPY_COLL_REDUCE:
    case ZCOPY_COLL_GATHER:
    case ZCOPY_COLL_SCATTER:
        return zcopy_coll_block_bytes(zc, a) < zcopy_config.rooted_yield_min;
    default:
        return false;
    }
}

/* Counts a call handed over by the rule above; a rank that cannot take the
 * call must not decline it through the control plane either, since its
 * peers hand it over without a step. */
zcopy_status_t zcopy_server_hand_over(zcopy_comm_t *zc,
                                      zcopy_coll_type_t type);

#endif
