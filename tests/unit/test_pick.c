/*
 * Unit test of the timed choice between two ways (src/base/pick.h), fed
 * with synthetic timings: which way it takes while measuring, that it then
 * takes the faster one and tries the other in runs, that a sample which
 * follows the other way (or starts a run) never counts, that stale samples
 * of a way go when its next run begins, and that it changes its mind when
 * the costs change.
 */
#include "unit.h"

#include "base/pick.h"

/* Takes @choices choices, each costing what @cost says for its way (ns
 * per 1,000 units); returns how many took way 1. */
static unsigned run_choices(zcopy_pick_t *p, unsigned choices,
                            const uint64_t cost[2])
{
    unsigned ones = 0;

    for (unsigned i = 0; i < choices; i++) {
        const unsigned way = zcopy_pick_choose(p);

        ones += way;
        zcopy_pick_record(p, way, cost[way], 1000);
    }
    return ones;
}

static void test_exploration(void)
{
    const uint64_t cost[2] = { 3000, 2000 };
    unsigned ways[2 * ZCOPY_PICK_RUN];
    zcopy_pick_t p;

    zcopy_pick_init(&p);
    CHECK(!zcopy_pick_settled(&p) && zcopy_pick_best(&p, NULL) == 0);
    /* A run of way 0, then one of way 1. */
    for (unsigned i = 0; i < 2 * ZCOPY_PICK_RUN; i++) {
        ways[i] = zcopy_pick_choose(&p);
        zcopy_pick_record(&p, ways[i], cost[ways[i]], 1000);
    }
    for (unsigned i = 0; i < ZCOPY_PICK_RUN; i++)
        CHECK(ways[i] == 0 && ways[ZCOPY_PICK_RUN + i] == 1);
    CHECK(zcopy_pick_settled(&p));
    CHECK(zcopy_pick_best(&p, NULL) == 1);
}

static void test_exploit_and_recheck(void)
{
    enum { CHOICES = 4 * (ZCOPY_PICK_RECHECK + ZCOPY_PICK_RUN) };
    const uint64_t cost[2] = { 3000, 2000 };
    unsigned runs = 0, len = 0, zeros = 0;
    double c[2];
    zcopy_pick_t p;

    zcopy_pick_init(&p);
    run_choices(&p, 2 * ZCOPY_PICK_RUN, cost);
    /* Way 1 is faster: way 0 only in runs, one per RECHECK choices of
     * way 1. */
    for (unsigned i = 0; i < CHOICES; i++) {
        const unsigned way = zcopy_pick_choose(&p);

        zcopy_pick_record(&p, way, cost[way], 1000);
        if (way == 0) {
            zeros++;
            len++;
            continue;
        }
        if (len > 0) {
            CHECK(len == ZCOPY_PICK_RUN);
            runs++;
        }
        len = 0;
    }
    CHECK(runs >= 3 && runs <= 4);
    CHECK(zeros <= 4 * ZCOPY_PICK_RUN);
    CHECK(zcopy_pick_best(&p, c) == 1);
    CHECK(c[0] == 3.0 && c[1] == 2.0);
}

/* The first sample of a run pays for the other way's leftovers: however
 * slow, it must not count. */
static void test_first_of_run_dropped(void)
{
    zcopy_pick_t p;
    double c[2];

    zcopy_pick_init(&p);
    for (unsigned i = 0; i < 2 * ZCOPY_PICK_RUN; i++) {
        const unsigned way = zcopy_pick_choose(&p);
        const bool first = i % ZCOPY_PICK_RUN == 0;

        /* Way 0 is slower, but its samples after the first are not. */
        zcopy_pick_record(&p, way, first ? 1000000 : way ? 2000 : 1000,
                          1000);
    }
    CHECK(zcopy_pick_best(&p, c) == 0);
    CHECK(c[0] == 1.0 && c[1] == 2.0);
}

/* Costs change (another collective, other load): the slower way's old
 * samples must not outlive its next run, and the choice follows. */
static void test_change(void)
{
    const uint64_t before[2] = { 3000, 2000 }, after[2] = { 3000, 5000 };
    zcopy_pick_t p;
    double c[2];

    zcopy_pick_init(&p);
    run_choices(&p, 4 * ZCOPY_PICK_RECHECK, before);
    CHECK(zcopy_pick_best(&p, NULL) == 1);
    run_choices(&p, 2 * ZCOPY_PICK_RECHECK, after);
    CHECK(zcopy_pick_best(&p, c) == 0);
    CHECK(c[0] == 3.0 && c[1] == 5.0);
    /* And back: way 1 is rechecked in runs and wins again. */
    run_choices(&p, 2 * ZCOPY_PICK_RECHECK, before);
    CHECK(zcopy_pick_best(&p, c) == 1);
    CHECK(c[1] == 2.0);
}

/* The least of the recent samples: a preempted copy (slow) does not move
 * the cost. */
static void test_outlier(void)
{
    zcopy_pick_t p;
    double c[2];

    zcopy_pick_init(&p);
    run_choices(&p, 2 * ZCOPY_PICK_RUN, (const uint64_t[2]){ 3000, 2000 });
    zcopy_pick_record(&p, 1, 900000, 1000);
    CHECK(zcopy_pick_best(&p, c) == 1 && c[1] == 2.0);
    /* Zero units: nothing to divide by, nothing counted. */
    zcopy_pick_record(&p, 1, 5, 0);
    CHECK(zcopy_pick_best(&p, c) == 1 && c[1] == 2.0);
}

int main(void)
{
    test_exploration();
    test_exploit_and_recheck();
    test_first_of_run_dropped();
    test_change();
    test_outlier();
    return unit_finish();
}
