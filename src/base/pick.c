/* The faster of two ways, by timing them (pick.h). */
#include "pick.h"

#include <string.h>

void zcopy_pick_init(zcopy_pick_t *p, double margin)
{
    memset(p, 0, sizeof(*p));
    p->margin = margin;
}

bool zcopy_pick_settled(const zcopy_pick_t *p)
{
    return p->kept[0] > 0 && p->kept[1] > 0;
}

static double pick_cost(const zcopy_pick_t *p, unsigned way)
{
    const unsigned n = p->kept[way] < ZCOPY_PICK_KEEP ? p->kept[way]
                                                      : ZCOPY_PICK_KEEP;
    double least = 0;

    for (unsigned i = 0; i < n; i++)
        if (i == 0 || p->recent[way][i] < least)
            least = p->recent[way][i];
    return least;
}

unsigned zcopy_pick_best(const zcopy_pick_t *p, double cost[2])
{
    const double c0 = pick_cost(p, 0), c1 = pick_cost(p, 1);

    if (cost != NULL) {
        cost[0] = c0;
        cost[1] = c1;
    }
    return zcopy_pick_settled(p) && c1 < c0 * (1 - p->margin) ? 1 : 0;
}

/* Older samples of the way go: they were taken under other work. */
static unsigned pick_start_run(zcopy_pick_t *p, unsigned way)
{
    p->run_way = way;
    p->run_left = ZCOPY_PICK_RUN - 1;
    p->in_run = true;
    p->run_counted = false;
    p->kept[way] = 0;
    return way;
}

unsigned zcopy_pick_choose(zcopy_pick_t *p)
{
    unsigned best;

    if (p->run_left > 0) {
        p->run_left--;
        return p->run_way;
    }
    if (!zcopy_pick_settled(p))
        return pick_start_run(p, p->kept[1] < p->kept[0] ? 1 : 0);
    best = zcopy_pick_best(p, NULL);
    if (++p->choices % ZCOPY_PICK_RECHECK == 0)
        return pick_start_run(p, !best);
    return best;
}

void zcopy_pick_record(zcopy_pick_t *p, unsigned way, bool follows,
                       uint64_t ns, size_t units)
{
    const bool last_of_run = p->in_run && p->run_left == 0 &&
                             (way != 0) == p->run_way;
    bool counts = follows;

    way = way != 0;
    if (last_of_run) {
        counts = follows || !p->run_counted;
        p->in_run = false;
    }
    if (!counts || units == 0)
        return;
    if (p->in_run || last_of_run)
        p->run_counted = true;
    p->recent[way][p->kept[way]++ % ZCOPY_PICK_KEEP] =
        (double)ns / (double)units;
}
