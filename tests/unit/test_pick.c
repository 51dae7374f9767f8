/*
 * Unit test of the timed choice between two ways (src/base/pick.h), fed
 * with synthetic timings: which way it takes while measuring, that it then
 * takes the faster one and tries the other in runs, that a sample which
 * follows the other way never counts unless its run would have none, that
 * a way's old samples go when its next run begins, the margin way 1 must
 * win by, and that it changes its mind when the costs change.
 */
#include "unit.h"

#include "base/pick.h"

/* The caller's side: the way of the previous piece of work (2: none). */
static unsigned last_way = 2;

static void take(zcopy_pick_t *p, unsigned way, uint64_t ns)
{
    zcopy_pick_record(p, way, way == last_way, ns, 1000);
    last_way = way;
}

/* Takes @choices choices, each costing what @cost says for its way (ns
 * per 1,000 units); returns how many took way 1. */
static unsigned run_choices(zcopy_pick_t *p, unsigned choices,
                            const uint64_t cost[2])
{
    unsigned ones = 0;

    for (unsigned i = 0; i < choices; i++) {
        const unsigned way = zcopy_pick_choose(p);

        ones += way;
        take(p, way, cost[way]);
    }
    return ones;
}

static void fresh(zcopy_pick_t *p, double margin)
{
    zcopy_pick_init(p, margin);
    last_way = 2;
}

static void test_exploration(void)
{
    const uint64_t cost[2] = { 3000, 2000 };
    unsigned ways[2 * ZCOPY_PICK_RUN];
    zcopy_pick_t p;

    fresh(&p, 0);
    CHECK(!zcopy_pick_settled(&p) && zcopy_pick_best(&p, NULL) == 0);
    /* A run of way 0, then one of way 1; not settled before way 1 has a
     * sample that follows its own. */
    for (unsigned i = 0; i < 2 * ZCOPY_PICK_RUN; i++) {
        ways[i] = zcopy_pick_choose(&p);
        take(&p, ways[i], cost[ways[i]]);
        if (i <= ZCOPY_PICK_RUN)
            CHECK(!zcopy_pick_settled(&p));
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

    fresh(&p, 0);
    run_choices(&p, 2 * ZCOPY_PICK_RUN, cost);
    /* Way 1 is faster: way 0 only in runs, one per RECHECK choices of
     * way 1. */
    for (unsigned i = 0; i < CHOICES; i++) {
        const unsigned way = zcopy_pick_choose(&p);

        take(&p, way, cost[way]);
        if (way == 0) {
            /* Way 0's old samples went as its run began, and the first of
             * the run did not count: nothing to compare with yet. */
            if (len == 0)
                CHECK(!zcopy_pick_settled(&p));
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

/* The first sample of a run follows the other way and pays for its
 * leftovers: however fast or slow, it must not count. */
static void test_first_of_run_dropped(void)
{
    zcopy_pick_t p;
    double c[2];

    fresh(&p, 0);
    for (unsigned i = 0; i < 2 * ZCOPY_PICK_RUN; i++) {
        const unsigned way = zcopy_pick_choose(&p);
        const bool first = i % ZCOPY_PICK_RUN == 0;

        take(&p, way, first ? 1 : way ? 2000 : 3000);
    }
    CHECK(zcopy_pick_best(&p, c) == 1);
    CHECK(c[0] == 3.0 && c[1] == 2.0);
}

/* Work interleaved with the other way's (another caller's): a run whose
 * samples all follow the other way still counts its last one. */
static void test_interleaved_run_counts_last(void)
{
    zcopy_pick_t p;
    double c[2];

    fresh(&p, 0);
    for (unsigned i = 0; i < 2 * ZCOPY_PICK_RUN; i++) {
        const unsigned way = zcopy_pick_choose(&p);

        zcopy_pick_record(&p, way, false, way ? 2000 : 3000, 1000);
    }
    CHECK(zcopy_pick_settled(&p));
    CHECK(zcopy_pick_best(&p, c) == 1 && c[0] == 3.0 && c[1] == 2.0);
    /* But only when none of the run counted. */
    fresh(&p, 0);
    for (unsigned i = 0; i < 2 * ZCOPY_PICK_RUN; i++) {
        const unsigned way = zcopy_pick_choose(&p);
        const unsigned at = i % ZCOPY_PICK_RUN;

        zcopy_pick_record(&p, way, at == 1, at == 1 ? 3000 : 100, 1000);
    }
    CHECK(zcopy_pick_best(&p, c) == 0 && c[0] == 3.0 && c[1] == 3.0);
}

/* A way's samples from before its latest run must go: here way 1's old
 * cheap ones would otherwise hide that it became dear, when its recheck
 * run is interleaved with other work and counts one sample only. */
static void test_old_samples_go(void)
{
    zcopy_pick_t p;
    double c[2];

    fresh(&p, 0);
    run_choices(&p, 2 * ZCOPY_PICK_RECHECK, (const uint64_t[2]){ 3000, 1000 });
    CHECK(zcopy_pick_best(&p, c) == 1 && c[1] == 1.0);
    run_choices(&p, 2 * ZCOPY_PICK_RECHECK, (const uint64_t[2]){ 200, 1000 });
    CHECK(zcopy_pick_best(&p, c) == 0 && c[0] == 0.2 && c[1] == 1.0);
    /* Up to the end of way 1's next run, whose samples all follow other
     * work. */
    for (bool seen = false;;) {
        const unsigned way = zcopy_pick_choose(&p);

        if (seen && way == 0)
            break;
        seen = seen || way == 1;
        zcopy_pick_record(&p, way, way == 0, way ? 5000 : 200, 1000);
    }
    CHECK(zcopy_pick_best(&p, c) == 0 && c[1] == 5.0);
}

/* Costs change (another collective, other load), and the choice follows,
 * both ways. */
static void test_change(void)
{
    const uint64_t before[2] = { 3000, 2000 }, after[2] = { 3000, 5000 };
    zcopy_pick_t p;
    double c[2];

    fresh(&p, 0);
    run_choices(&p, 4 * ZCOPY_PICK_RECHECK, before);
    CHECK(zcopy_pick_best(&p, NULL) == 1);
    run_choices(&p, 2 * ZCOPY_PICK_RECHECK, after);
    CHECK(zcopy_pick_best(&p, c) == 0);
    CHECK(c[0] == 3.0 && c[1] == 5.0);
    run_choices(&p, 2 * ZCOPY_PICK_RECHECK, before);
    CHECK(zcopy_pick_best(&p, c) == 1);
    CHECK(c[1] == 2.0);
}

/* Way 1 must win by the margin: 5% cheaper is not enough for 10%. */
static void test_margin(void)
{
    zcopy_pick_t p;

    fresh(&p, 0.10);
    run_choices(&p, 2 * ZCOPY_PICK_RECHECK, (const uint64_t[2]){ 2000, 1900 });
    CHECK(zcopy_pick_best(&p, NULL) == 0);
    fresh(&p, 0.10);
    run_choices(&p, 2 * ZCOPY_PICK_RECHECK, (const uint64_t[2]){ 2000, 1700 });
    CHECK(zcopy_pick_best(&p, NULL) == 1);
}

/* The least of the recent samples: a preempted piece of work (slow) does
 * not move the cost; zero units count nothing. */
static void test_outlier(void)
{
    zcopy_pick_t p;
    double c[2];

    fresh(&p, 0);
    run_choices(&p, 2 * ZCOPY_PICK_RUN, (const uint64_t[2]){ 3000, 2000 });
    take(&p, 1, 900000);
    CHECK(zcopy_pick_best(&p, c) == 1 && c[1] == 2.0);
    zcopy_pick_record(&p, 1, true, 5, 0);
    CHECK(zcopy_pick_best(&p, c) == 1 && c[1] == 2.0);
}

int main(void)
{
    test_exploration();
    test_exploit_and_recheck();
    test_first_of_run_dropped();
    test_interleaved_run_counts_last();
    test_old_samples_go();
    test_change();
    test_margin();
    test_outlier();
    return unit_finish();
}
