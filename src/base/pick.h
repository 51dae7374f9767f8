/*
 * Choosing between two ways of doing the same work by timing them as they
 * run: when what the hardware reports cannot be trusted to predict which
 * is faster (a virtual machine shows its two CPUs the whole socket's
 * cache), the work itself is the measurement. Each way is tried a few
 * times, then the faster one is taken, and the other is tried again every
 * ZCOPY_PICK_RECHECK choices, in case the machine's state changed.
 *
 * A way is taken ZCOPY_PICK_RUN times in a row when tried, and the caller
 * says whether a sample followed work done the same way: work can leave
 * costs to whatever runs next (a copy's dirty lines are written back while
 * the next copy runs), so a sample that follows the other way does not
 * count (the first of a run also pays for first touches: page faults,
 * cold mappings), unless none of its run has counted by the run's last,
 * so that work interleaved with the other way's still gets measured. A
 * way's cost is the least of its last ZCOPY_PICK_KEEP samples since its
 * latest run began, the same number for both ways so that neither is
 * favoured by having more: interruptions and preemption only ever make a
 * sample slower, and older samples were taken under other work than the
 * other way's fresh ones. Way 1 must be cheaper by a margin, given at
 * init, for what the timing cannot see of way 0's advantages.
 *
 * A zero-filled zcopy_pick_t is initialised, with no margin. Not
 * thread-safe: callers that share one serialise its use.
 */
#ifndef ZCOPY_BASE_PICK_H
#define ZCOPY_BASE_PICK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ZCOPY_PICK_RUN 3          /* a way tried is taken this many times */
#define ZCOPY_PICK_KEEP (ZCOPY_PICK_RUN - 1) /* samples that set a cost */
#define ZCOPY_PICK_RECHECK 64     /* once settled, a run of the other way
                                     starts every this many choices */

typedef struct {
    double margin;                /* way 1 wins when cheaper by this share */
    uint64_t choices;             /* made since both ways were measured */
    unsigned kept[2];             /* samples per way since its run began */
    unsigned run_way, run_left;   /* the run under way, choices left */
    bool in_run, run_counted;     /* a run's last sample is to come; one
                                     of its samples counted */
    double recent[2][ZCOPY_PICK_KEEP]; /* cost per unit, a ring per way */
} zcopy_pick_t;

/* @margin: the share (0 to 1) by which way 1 must be cheaper to be taken. */
void zcopy_pick_init(zcopy_pick_t *p, double margin);

/* Whether both ways have a sample since their latest run began. */
bool zcopy_pick_settled(const zcopy_pick_t *p);

/* The way (0 or 1) that wins; 0 until settled. @cost (when not NULL)
 * receives both costs, 0 for a way not yet measured. */
unsigned zcopy_pick_best(const zcopy_pick_t *p, double cost[2]);

/* The way to take next: runs of the less measured one until settled, then
 * the best, with a run of the other one every ZCOPY_PICK_RECHECK choices. */
unsigned zcopy_pick_choose(zcopy_pick_t *p);

/* What taking @way cost: @ns nanoseconds for @units of work; @follows:
 * whether the work done just before was done the same way. */
void zcopy_pick_record(zcopy_pick_t *p, unsigned way, bool follows,
                       uint64_t ns, size_t units);

#endif
