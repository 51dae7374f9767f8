/*
 * Choosing between two ways of doing the same work by timing them as they
 * run: when what the hardware reports cannot be trusted to predict which
 * is faster (a virtual machine shows its two CPUs the whole socket's
 * cache), the work itself is the measurement. Each way is tried a few
 * times, then the faster one is taken, and the other is tried again every
 * ZCOPY_PICK_RECHECK choices, in case the machine's state changed.
 *
 * A way is taken ZCOPY_PICK_RUN times in a row when tried, and a sample
 * counts only when the previous one was of the same way: work can leave
 * costs to whatever runs next (a copy's dirty lines are written back while
 * the next copy runs), and the first of a run would pay the other way's.
 * It also pays for first touches (page faults, cold mappings). A way's
 * cost is the least of its samples since its latest run began, the last
 * ZCOPY_PICK_KEEP at most (time per unit of work): interruptions and
 * preemption only ever make a sample slower, and older samples were taken
 * under other work (another collective, other peers' load) than the
 * other way's fresh ones.
 *
 * Not thread-safe: callers that share one serialise its use.
 */
#ifndef ZCOPY_BASE_PICK_H
#define ZCOPY_BASE_PICK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ZCOPY_PICK_KEEP 4         /* samples per way that set its cost */
#define ZCOPY_PICK_RUN 3          /* a way tried is taken this many times */
#define ZCOPY_PICK_RECHECK 64     /* once settled, a run of the other way
                                     starts every this many choices */

typedef struct {
    uint64_t choices;             /* made since both ways were measured */
    unsigned kept[2];             /* samples per way since its run began */
    unsigned last;                /* way of the previous sample, 2: none */
    unsigned run_way, run_left;   /* the run under way */
    double recent[2][ZCOPY_PICK_KEEP]; /* cost per unit, a ring per way */
} zcopy_pick_t;

void zcopy_pick_init(zcopy_pick_t *p);

/* Whether both ways have been measured (a run each) to compare them. */
bool zcopy_pick_settled(const zcopy_pick_t *p);

/* The way (0 or 1) with the lower cost; 0 until settled. @cost (when not
 * NULL) receives both costs, 0 for a way not yet measured. */
unsigned zcopy_pick_best(const zcopy_pick_t *p, double cost[2]);

/* The way to take next: runs of the less measured one until settled, then
 * the best, with a run of the other one every ZCOPY_PICK_RECHECK choices. */
unsigned zcopy_pick_choose(zcopy_pick_t *p);

/* What taking @way cost: @ns nanoseconds for @units of work (> 0). */
void zcopy_pick_record(zcopy_pick_t *p, unsigned way, uint64_t ns,
                       size_t units);

#endif
