/*
 * The statistics as MPI_T performance variables (SPEC section 3): every
 * counter is found by name, binds to a communicator, and moves exactly as
 * MPIX_Zcopy_get_stats says.
 */
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

static const char *const names[] = {
    "coll_zcopy_zcopy_calls", "coll_zcopy_fallback_calls",
    "coll_zcopy_ipc_bytes", "coll_zcopy_ucx_bytes", "coll_zcopy_inline_calls",
    "coll_zcopy_ctl_msgs", "coll_zcopy_ctl_bytes",
};
#define NPVARS (sizeof(names) / sizeof(names[0]))

typedef struct {
    MPI_T_pvar_session session;
    MPI_T_pvar_handle handle[NPVARS];
} pvars_t;

static bool pvars_open(pvars_t *p, MPI_Comm comm)
{
    bool ok = true;

    MPI_T_pvar_session_create(&p->session);
    for (size_t i = 0; i < NPVARS; i++) {
        int index = -1, count = 0;
        int rc = MPI_T_pvar_get_index(names[i], MPI_T_PVAR_CLASS_COUNTER,
                                      &index);
        ok &= ZT_CHECK(rc == MPI_SUCCESS, "pvar %s not found (%d)", names[i],
                       rc);
        if (rc != MPI_SUCCESS)
            continue;
        rc = MPI_T_pvar_handle_alloc(p->session, index, &comm, &p->handle[i],
                                     &count);
        ok &= ZT_CHECK(rc == MPI_SUCCESS && count == 1,
                       "pvar %s: handle_alloc rc %d count %d", names[i], rc,
                       count);
    }
    return ok;
}

static void pvars_read(pvars_t *p, unsigned long long v[NPVARS])
{
    for (size_t i = 0; i < NPVARS; i++)
        MPI_T_pvar_read(p->session, p->handle[i], &v[i]);
}

static void pvars_close(pvars_t *p)
{
    for (size_t i = 0; i < NPVARS; i++)
        MPI_T_pvar_handle_free(p->session, &p->handle[i]);
    MPI_T_pvar_session_free(&p->session);
}

static void check_against_stats(const unsigned long long d[NPVARS],
                                 const MPIX_Zcopy_stats *s0,
                                 const MPIX_Zcopy_stats *s1, const char *what)
{
    const unsigned long long want[NPVARS] = {
        s1->zcopy_calls - s0->zcopy_calls,
        s1->fallback_calls - s0->fallback_calls,
        s1->ipc_bytes - s0->ipc_bytes,
        s1->ucx_bytes - s0->ucx_bytes,
        s1->inline_calls - s0->inline_calls,
        s1->ctl_msgs - s0->ctl_msgs,
        s1->ctl_bytes - s0->ctl_bytes,
    };

    for (size_t i = 0; i < NPVARS; i++)
        ZT_CHECK(d[i] == want[i], "%s: %s moved by %llu, stats by %llu", what,
                 names[i], d[i], want[i]);
}

int main(int argc, char **argv)
{
    const size_t count = 1 << 16;
    unsigned long long v0[NPVARS], v1[NPVARS], d[NPVARS];
    MPIX_Zcopy_stats s0, s1;
    int provided, rank;
    size_t used = 0;
    zt_arena_t arena;
    int32_t *in, *out, *plain;
    pvars_t p;

    MPI_Init(&argc, &argv);
    MPI_T_init_thread(MPI_THREAD_SINGLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    zt_arena_init(&arena, MPI_COMM_WORLD, 4 * count * sizeof(int32_t));
    in = zt_arena_alloc(&arena, &used, count * sizeof(int32_t));
    out = zt_arena_alloc(&arena, &used, count * sizeof(int32_t));
    plain = calloc(count, sizeof(int32_t));
    for (size_t i = 0; i < count; i++)
        in[i] = (int32_t)(rank + i);

    if (pvars_open(&p, MPI_COMM_WORLD)) {
        /* A zero-copy call that moves data, a tiny inline one, a fallback. */
        pvars_read(&p, v0);
        s0 = zt_stats(MPI_COMM_WORLD);
        MPI_Allreduce(in, out, (int)count, MPI_INT32_T, MPI_SUM, MPI_COMM_WORLD);
        MPI_Allreduce(in, out, 1, MPI_INT32_T, MPI_SUM, MPI_COMM_WORLD);
        MPI_Allreduce(plain, plain, 0, MPI_INT32_T, MPI_SUM, MPI_COMM_WORLD);
        MPI_Bcast(plain, (int)count, MPI_INT32_T, 0, MPI_COMM_WORLD);
        s1 = zt_stats(MPI_COMM_WORLD);
        pvars_read(&p, v1);
        for (size_t i = 0; i < NPVARS; i++)
            d[i] = v1[i] - v0[i];
        check_against_stats(d, &s0, &s1, "WORLD");
        ZT_CHECK(d[0] == 2 && d[4] == 1 && d[1] == 1 && d[2] > 0,
                 "expected 2 zero-copy (1 inline) and 1 fallback, got "
                 "%llu (%llu inline) and %llu", d[0], d[4], d[1]);
        /* Inside a server, whatever the number of ranks: the large call
         * publishes its arguments (a 32-byte record and the arrival word)
         * and one sync word; the tiny one an inline record (tag, arrival
         * and 4 bytes); the fallback a decline (reason and arrival); the
         * empty call, which Open MPI answers itself, nothing. */
        ZT_CHECK(d[5] == 4 && d[6] == (32 + 8 + 8) + (16 + 4) + 16,
                 "control: %llu messages and %llu bytes, expected 4 and %d",
                 d[5], d[6], (32 + 8 + 8) + (16 + 4) + 16);

        /* An alltoallv publishes its three vectors of n displacements and
         * counts with the record, and passes one sync. */
        {
            int nranks, *counts, *displs;
            const int each = 4;
            size_t want;

            MPI_Comm_size(MPI_COMM_WORLD, &nranks);
            counts = malloc((size_t)nranks * sizeof(int));
            displs = malloc((size_t)nranks * sizeof(int));
            for (int j = 0; j < nranks; j++) {
                counts[j] = each;
                displs[j] = j * each;
            }
            s0 = zt_stats(MPI_COMM_WORLD);
            MPI_Alltoallv(in, counts, displs, MPI_INT32_T, out, counts,
                          displs, MPI_INT32_T, MPI_COMM_WORLD);
            s1 = zt_stats(MPI_COMM_WORLD);
            want = 32 + 8 + 3 * (size_t)nranks * 8 + 8;
            ZT_CHECK(s1.zcopy_calls - s0.zcopy_calls == 1 &&
                         s1.ctl_msgs - s0.ctl_msgs == 2 &&
                         s1.ctl_bytes - s0.ctl_bytes == want,
                     "alltoallv: zcopy +%llu, control +%llu messages +%llu "
                     "bytes, expected 1, 2 and %zu",
                     (unsigned long long)(s1.zcopy_calls - s0.zcopy_calls),
                     (unsigned long long)(s1.ctl_msgs - s0.ctl_msgs),
                     (unsigned long long)(s1.ctl_bytes - s0.ctl_bytes), want);
            free(counts);
            free(displs);
        }
        pvars_close(&p);
    }
    free(plain);
    zt_arena_fini(&arena);
    MPI_T_finalize();
    return zt_finish();
}
