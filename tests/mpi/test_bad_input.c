/*
 * Bad input to the zcopy_mem_* and MPIX calls. Each case makes one bad call
 * on a fresh fixture and checks that
 *   - it fails with the exact ZCOPY_ERR_* code (zcopy_mem_* calls) or the
 *     expected MPI error class (MPIX calls),
 *   - the message (zcopy_mem_last_error / MPI_Error_string) names the cause,
 *   - nothing changed: activation state, data and handles are as before,
 *     the valid version of the call then succeeds, and the fixture tears
 *     down step by step exactly as it was built.
 * Every rank runs every case; MPI_COMM_WORLD returns errors.
 */
#define _GNU_SOURCE
#include "testutil.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

static const zcopy_mem_prop_t host_prop = { .kind = ZCOPY_MEM_HOST,
                                            .device = -1 };
static size_t gran;          /* host granularity: the unit of every size */
static int my_rank, world_size;
static const char *current;  /* name of the running case, for messages */

static void require(bool ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "[rank %d] %s: fixture step failed: %s (%s)\n",
                my_rank, current, what, zcopy_mem_last_error());
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
}

static bool ok_mem(int rc, const char *what)
{
    return ZT_CHECK(rc == ZCOPY_SUCCESS, "%s: %s failed: %s (%s)", current,
                    what, zcopy_strerror(rc), zcopy_mem_last_error());
}

static void mpi_message(int code, char *msg)
{
    int len = 0;

    if (MPI_Error_string(code, msg, &len) != MPI_SUCCESS)
        len = 0;
    msg[len] = '\0';
}

static bool ok_mpi(int rc, const char *what)
{
    char msg[MPI_MAX_ERROR_STRING] = "";

    if (rc != MPI_SUCCESS)
        mpi_message(rc, msg);
    return ZT_CHECK(rc == MPI_SUCCESS, "%s: %s failed: %s", current, what,
                    msg);
}

/* --- fixture ------------------------------------------------------------- */

/* Built afresh for every case, g being the granularity:
 *   res      8g reservation, set as a memory range on comm
 *     [0, 2g)   ha mapped and activated ("block")
 *     [2g, 4g)  hb mapped, not activated ("mapped")
 *     [4g, 8g)  nothing mapped ("hole")
 *   spare    4g reservation: no range, nothing mapped
 *   foreign  4g PROT_NONE mmap made without zcopy
 *   hc       1g handle, not mapped
 * [0, 4g) of res holds a per-rank byte pattern. */
typedef struct {
    MPI_Comm comm;
    char *res, *spare, *foreign;
    zcopy_mem_handle_t ha, hb, hc;
} fixture_t;

static unsigned char pattern(size_t i)
{
    return (unsigned char)(i * 7 + (size_t)my_rank * 13 + 1);
}

static void fill(char *base, size_t from, size_t to)
{
    for (size_t i = from; i < to; i++)
        base[i] = (char)pattern(i);
}

static bool intact(const char *base, size_t from, size_t to)
{
    for (size_t i = from; i < to; i++)
        if ((unsigned char)base[i] != pattern(i))
            return false;
    return true;
}

static void fixture_setup(fixture_t *fx)
{
    void *p;

    fx->comm = MPI_COMM_WORLD;
    /* foreign is asked for right after spare, before res exists: then res
     * never follows spare closely, and a range running past spare's end
     * straddles it instead of overlapping res's set range. */
    require(zcopy_mem_reserve(&p, 4 * gran, 0, NULL, 0) == 0,
            "reserve spare");
    fx->spare = p;
    p = mmap(fx->spare + 4 * gran, 4 * gran, PROT_NONE,
             MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    require(p != MAP_FAILED, "mmap foreign");
    fx->foreign = p;
    require(zcopy_mem_reserve(&p, 8 * gran, 0, NULL, 0) == 0, "reserve res");
    fx->res = p;
    require(MPIX_Comm_set_memory_range(fx->comm, fx->res, 8 * gran, 0, 0) ==
                MPI_SUCCESS, "set range on res");
    require(zcopy_mem_create(&fx->ha, 2 * gran, &host_prop, 0) == 0,
            "create ha");
    require(zcopy_mem_create(&fx->hb, 2 * gran, &host_prop, 0) == 0,
            "create hb");
    require(zcopy_mem_create(&fx->hc, gran, &host_prop, 0) == 0, "create hc");
    require(zcopy_mem_map(fx->res, 2 * gran, 0, fx->ha, 0) == 0, "map ha");
    require(zcopy_mem_map(fx->res + 2 * gran, 2 * gran, 0, fx->hb, 0) == 0,
            "map hb");
    fill(fx->res, 0, 4 * gran);
    require(MPIX_Comm_activate_memory(fx->comm, fx->res, 2 * gran, 0, fx->ha,
                                      0) == MPI_SUCCESS, "activate ha");
}

/* Each step must succeed, which also proves the fixture was still whole:
 * the block still activated, the range still set, the mappings in place. */
static void fixture_teardown(fixture_t *fx)
{
    ok_mpi(MPIX_Comm_deactivate_memory(fx->comm, fx->res),
           "teardown: deactivate ha");
    ok_mem(zcopy_mem_unmap(fx->res), "teardown: unmap ha");
    ok_mem(zcopy_mem_unmap(fx->res + 2 * gran), "teardown: unmap hb");
    ok_mem(zcopy_mem_free(fx->ha), "teardown: free ha");
    ok_mem(zcopy_mem_free(fx->hb), "teardown: free hb");
    ok_mem(zcopy_mem_free(fx->hc), "teardown: free hc");
    ok_mpi(MPIX_Comm_unset_memory_range(fx->comm, fx->res),
           "teardown: unset range on res");
    ok_mem(zcopy_mem_release(fx->res), "teardown: release res");
    ok_mem(zcopy_mem_release(fx->spare), "teardown: release spare");
    ZT_CHECK(munmap(fx->foreign, 4 * gran) == 0, "%s: munmap foreign",
             current);
}

/* What a failed call must leave as it was. */
typedef struct {
    int block, mapped, hole, spare;  /* MPIX_Zcopy_query */
    size_t size_a, size_b, size_c;   /* zcopy_mem_get_size, 0 if not live */
    bool data;                       /* pattern in [0, 4g) of res */
} state_t;

static int query(const fixture_t *fx, const void *buf, size_t size)
{
    int activated = -1;

    if (MPIX_Zcopy_query(fx->comm, buf, size, &activated) != MPI_SUCCESS)
        return -1;
    return activated;
}

static size_t handle_size(zcopy_mem_handle_t h)
{
    size_t size = 0;

    return zcopy_mem_get_size(h, &size) == ZCOPY_SUCCESS ? size : 0;
}

static state_t snapshot(const fixture_t *fx)
{
    return (state_t){
        .block = query(fx, fx->res, 2 * gran),
        .mapped = query(fx, fx->res + 2 * gran, 2 * gran),
        .hole = query(fx, fx->res + 4 * gran, 4 * gran),
        .spare = query(fx, fx->spare, 4 * gran),
        .size_a = handle_size(fx->ha),
        .size_b = handle_size(fx->hb),
        .size_c = handle_size(fx->hc),
        .data = intact(fx->res, 0, 4 * gran),
    };
}

static void check_unchanged(const state_t *a, const state_t *b)
{
    ZT_CHECK(a->block == b->block && a->mapped == b->mapped &&
                 a->hole == b->hole && a->spare == b->spare,
             "%s: activation changed: block %d->%d, mapped %d->%d, "
             "hole %d->%d, spare %d->%d", current, a->block, b->block,
             a->mapped, b->mapped, a->hole, b->hole, a->spare, b->spare);
    ZT_CHECK(a->size_a == b->size_a && a->size_b == b->size_b &&
                 a->size_c == b->size_c,
             "%s: a handle changed: sizes %zu/%zu/%zu -> %zu/%zu/%zu",
             current, a->size_a, a->size_b, a->size_c, b->size_a, b->size_b,
             b->size_c);
    ZT_CHECK(b->data, "%s: data in the mappings changed", current);
}

/* The rank that passes the bad range in the one-rank-bad collective case. */
static int bad_rank(void) { return world_size - 1; }

/* --- reserve / release --------------------------------------------------- */

/* A failed reserve or create must not write its output. */
static char sentinel;

static int reserve_with(size_t size, size_t alignment)
{
    void *p = &sentinel;
    int rc = zcopy_mem_reserve(&p, size, alignment, NULL, 0);

    ZT_CHECK(p == &sentinel, "%s: failed reserve wrote its output", current);
    return rc;
}

static int reserve_size_zero(fixture_t *fx) { return reserve_with(0, 0); }

static int reserve_size_unaligned(fixture_t *fx)
{
    return reserve_with(gran + 1, 0);
}

static int reserve_alignment_unaligned(fixture_t *fx)
{
    return reserve_with(gran, gran / 2);
}

static int release_unknown(fixture_t *fx)
{
    return zcopy_mem_release(fx->foreign);
}

static int release_inside(fixture_t *fx)
{
    return zcopy_mem_release(fx->spare + gran);
}

static int release_mapped(fixture_t *fx) { return zcopy_mem_release(fx->res); }

static void reserve_valid(fixture_t *fx)
{
    void *p = NULL;

    if (ok_mem(zcopy_mem_reserve(&p, 2 * gran, 2 * gran, NULL, 0),
               "valid reserve"))
        ok_mem(zcopy_mem_release(p), "valid release");
}

/* --- create / free ------------------------------------------------------- */

static int create_with(size_t size, const zcopy_mem_prop_t *prop)
{
    zcopy_mem_handle_t h = (zcopy_mem_handle_t)&sentinel;
    int rc = zcopy_mem_create(&h, size, prop, 0);

    ZT_CHECK(h == (zcopy_mem_handle_t)&sentinel,
             "%s: failed create wrote its output", current);
    return rc;
}

static int create_size_zero(fixture_t *fx)
{
    return create_with(0, &host_prop);
}

static int create_unknown_kind(fixture_t *fx)
{
    const zcopy_mem_prop_t prop = { .kind = (zcopy_mem_kind_t)7,
                                    .device = -1 };
    return create_with(gran, &prop);
}

static int create_cuda(fixture_t *fx)
{
    const zcopy_mem_prop_t prop = { .kind = ZCOPY_MEM_CUDA, .device = 0 };
    return create_with(gran, &prop);
}

/* The CUDA case is about a machine without a driver. */
static bool cuda_driver_present(void)
{
    void *lib = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);

    if (lib != NULL)
        dlclose(lib);
    return lib != NULL;
}

static int free_mapped(fixture_t *fx) { return zcopy_mem_free(fx->hb); }

static void create_valid(fixture_t *fx)
{
    zcopy_mem_handle_t h;

    if (ok_mem(zcopy_mem_create(&h, gran, &host_prop, 0), "valid create"))
        ok_mem(zcopy_mem_free(h), "valid free");
}

/* Free hb the valid way (unmapped first), then rebuild it for teardown. */
static void free_after_unmap(fixture_t *fx)
{
    char *b = fx->res + 2 * gran;

    ok_mem(zcopy_mem_unmap(b), "unmap hb");
    ok_mem(zcopy_mem_free(fx->hb), "free hb once unmapped");
    require(zcopy_mem_create(&fx->hb, 2 * gran, &host_prop, 0) == 0,
            "recreate hb");
    require(zcopy_mem_map(b, 2 * gran, 0, fx->hb, 0) == 0, "remap hb");
    fill(fx->res, 2 * gran, 4 * gran);
}

/* --- map / unmap --------------------------------------------------------- */

static int map_outside(fixture_t *fx)
{
    return zcopy_mem_map(fx->foreign, gran, 0, fx->hc, 0);
}

static int map_straddle(fixture_t *fx)
{
    return zcopy_mem_map(fx->spare + 3 * gran, 2 * gran, 0, fx->hb, 0);
}

static int map_overlap(fixture_t *fx)
{
    return zcopy_mem_map(fx->res + gran, 2 * gran, 0, fx->hb, 0);
}

static int map_too_large(fixture_t *fx)
{
    return zcopy_mem_map(fx->res + 4 * gran, 2 * gran, 0, fx->hc, 0);
}

static int map_unaligned(fixture_t *fx)
{
    return zcopy_mem_map(fx->res + 4 * gran + 64, gran, 0, fx->hc, 0);
}

static int unmap_not_start(fixture_t *fx)
{
    return zcopy_mem_unmap(fx->res + 3 * gran);
}

static int unmap_activated(fixture_t *fx) { return zcopy_mem_unmap(fx->res); }

/* hb mapped a second time, flush with spare's end, shows hb's data. */
static void map_valid(fixture_t *fx)
{
    char *at = fx->spare + 2 * gran;

    if (!ok_mem(zcopy_mem_map(at, 2 * gran, 0, fx->hb, 0), "valid map"))
        return;
    ZT_CHECK(memcmp(at, fx->res + 2 * gran, 2 * gran) == 0,
             "%s: second mapping of hb does not show its data", current);
    ok_mem(zcopy_mem_unmap(at), "valid unmap");
}

/* The memfd keeps the data while hb is unmapped. */
static void unmap_remap_hb(fixture_t *fx)
{
    char *b = fx->res + 2 * gran;

    ok_mem(zcopy_mem_unmap(b), "unmap hb at its start");
    require(zcopy_mem_map(b, 2 * gran, 0, fx->hb, 0) == 0, "remap hb");
    ZT_CHECK(intact(fx->res, 2 * gran, 4 * gran),
             "%s: hb lost its data across unmap/map", current);
}

static void unmap_after_deactivate(fixture_t *fx)
{
    ok_mpi(MPIX_Comm_deactivate_memory(fx->comm, fx->res), "deactivate ha");
    ok_mem(zcopy_mem_unmap(fx->res), "unmap ha once deactivated");
    require(zcopy_mem_map(fx->res, 2 * gran, 0, fx->ha, 0) == 0, "remap ha");
    require(MPIX_Comm_activate_memory(fx->comm, fx->res, 2 * gran, 0, fx->ha,
                                      0) == MPI_SUCCESS, "reactivate ha");
}

/* --- set memory range (collective) --------------------------------------- */

static int set_range(fixture_t *fx, void *base, size_t size)
{
    return MPIX_Comm_set_memory_range(fx->comm, base, size, 0, 0);
}

static int set_null_base(fixture_t *fx) { return set_range(fx, NULL, gran); }

static int set_size_zero(fixture_t *fx)
{
    return set_range(fx, fx->spare, 0);
}

static int set_not_reservation(fixture_t *fx)
{
    return set_range(fx, fx->foreign, 4 * gran);
}

static int set_straddle(fixture_t *fx)
{
    return set_range(fx, fx->spare + 2 * gran, 4 * gran);
}

static int set_overlap(fixture_t *fx)
{
    return set_range(fx, fx->res + 4 * gran, 4 * gran);
}

static int set_alignment(fixture_t *fx)
{
    return MPIX_Comm_set_memory_range(fx->comm, fx->spare, 4 * gran, gran, 0);
}

static int set_flags(fixture_t *fx)
{
    return MPIX_Comm_set_memory_range(fx->comm, fx->spare, 4 * gran, 0, 1);
}

static int set_comm_null(fixture_t *fx)
{
    return MPIX_Comm_set_memory_range(MPI_COMM_NULL, fx->spare, 4 * gran, 0,
                                      0);
}

static int set_one_rank_bad(fixture_t *fx)
{
    if (my_rank == bad_rank())
        return set_range(fx, fx->foreign, 4 * gran);
    return set_range(fx, fx->spare, 4 * gran);
}

/* After the one-rank-bad case this also proves that no rank kept spare set. */
static void set_unset_spare(fixture_t *fx)
{
    if (ok_mpi(set_range(fx, fx->spare, 4 * gran), "valid set range"))
        ok_mpi(MPIX_Comm_unset_memory_range(fx->comm, fx->spare),
               "valid unset range");
}

/* --- activate (local) ---------------------------------------------------- */

static int activate(fixture_t *fx, void *va, size_t size,
                    zcopy_mem_handle_t h)
{
    return MPIX_Comm_activate_memory(fx->comm, va, size, 0, h, 0);
}

static int activate_outside(fixture_t *fx)
{
    return activate(fx, fx->spare, 2 * gran, fx->hb);
}

static int activate_straddle(fixture_t *fx)
{
    return activate(fx, fx->res + 6 * gran, 4 * gran, fx->hb);
}

static int activate_overlap(fixture_t *fx)
{
    return activate(fx, fx->res + gran, 2 * gran, fx->hb);
}

static int activate_offset(fixture_t *fx)
{
    return MPIX_Comm_activate_memory(fx->comm, fx->res + 2 * gran, 2 * gran,
                                     gran, fx->hb, 0);
}

static int activate_flags(fixture_t *fx)
{
    return MPIX_Comm_activate_memory(fx->comm, fx->res + 2 * gran, 2 * gran,
                                     0, fx->hb, 1);
}

static int activate_null_handle(fixture_t *fx)
{
    return activate(fx, fx->res + 2 * gran, 2 * gran, NULL);
}

static int activate_wrong_handle(fixture_t *fx)
{
    return activate(fx, fx->res + 2 * gran, 2 * gran, fx->ha);
}

static int activate_part_of_mapping(fixture_t *fx)
{
    return activate(fx, fx->res + 2 * gran, gran, fx->hb);
}

static int activate_unmapped(fixture_t *fx)
{
    return activate(fx, fx->res + 4 * gran, gran, fx->hc);
}

static int activate_size_zero(fixture_t *fx)
{
    return activate(fx, fx->res + 2 * gran, 0, fx->hb);
}

static int activate_comm_null(fixture_t *fx)
{
    return MPIX_Comm_activate_memory(MPI_COMM_NULL, fx->res + 2 * gran,
                                     2 * gran, 0, fx->hb, 0);
}

/* hb next to ha: the two blocks then cover [0, 4g) together. */
static void activate_valid(fixture_t *fx)
{
    if (!ok_mpi(activate(fx, fx->res + 2 * gran, 2 * gran, fx->hb),
                "valid activate"))
        return;
    ZT_CHECK(query(fx, fx->res, 4 * gran) == 1,
             "%s: adjacent blocks do not cover [0, 4g)", current);
    ok_mpi(MPIX_Comm_deactivate_memory(fx->comm, fx->res + 2 * gran),
           "valid deactivate");
}

/* --- deactivate (local) -------------------------------------------------- */

static int deactivate_inside(fixture_t *fx)
{
    return MPIX_Comm_deactivate_memory(fx->comm, fx->res + gran);
}

static int deactivate_unknown(fixture_t *fx)
{
    return MPIX_Comm_deactivate_memory(fx->comm, fx->res + 2 * gran);
}

static void deactivate_ha(fixture_t *fx)
{
    require(MPIX_Comm_deactivate_memory(fx->comm, fx->res) == MPI_SUCCESS,
            "first deactivate of ha");
}

static int deactivate_again(fixture_t *fx)
{
    return MPIX_Comm_deactivate_memory(fx->comm, fx->res);
}

static void reactivate_ha(fixture_t *fx)
{
    ok_mpi(activate(fx, fx->res, 2 * gran, fx->ha), "activate ha again");
}

static void deactivate_valid(fixture_t *fx)
{
    if (ok_mpi(MPIX_Comm_deactivate_memory(fx->comm, fx->res),
               "valid deactivate"))
        reactivate_ha(fx);
}

/* --- unset memory range (collective) ------------------------------------- */

static int unset_busy(fixture_t *fx)
{
    return MPIX_Comm_unset_memory_range(fx->comm, fx->res);
}

static int unset_unknown(fixture_t *fx)
{
    return MPIX_Comm_unset_memory_range(fx->comm, fx->spare);
}

static int unset_not_base(fixture_t *fx)
{
    return MPIX_Comm_unset_memory_range(fx->comm, fx->res + gran);
}

static void unset_after_deactivate(fixture_t *fx)
{
    ok_mpi(MPIX_Comm_deactivate_memory(fx->comm, fx->res), "deactivate ha");
    ok_mpi(MPIX_Comm_unset_memory_range(fx->comm, fx->res),
           "unset range once empty");
    require(set_range(fx, fx->res, 8 * gran) == MPI_SUCCESS, "set res again");
    require(activate(fx, fx->res, 2 * gran, fx->ha) == MPI_SUCCESS,
            "reactivate ha");
}

/* --- query and statistics (local) --------------------------------------- */

static int query_null_result(fixture_t *fx)
{
    return MPIX_Zcopy_query(fx->comm, fx->res, 2 * gran, NULL);
}

static int stats_null(fixture_t *fx)
{
    return MPIX_Zcopy_get_stats(fx->comm, NULL);
}

static void query_valid(fixture_t *fx)
{
    ZT_CHECK(query(fx, fx->res, 2 * gran) == 1, "%s: valid query", current);
}

static void stats_valid(fixture_t *fx)
{
    MPIX_Zcopy_stats stats;

    ok_mpi(MPIX_Zcopy_get_stats(fx->comm, &stats), "valid get_stats");
}

/* --- the table ----------------------------------------------------------- */

typedef struct {
    const char *name;
    int (*bad)(fixture_t *fx);   /* makes the bad call, returns its result */
    int zcopy_err;               /* zcopy_mem_* case: the exact code */
    int mpi_class;               /* MPIX case: the error class */
    const char *msg;             /* expected in the message */
    const char *peer_msg;        /* one-rank-bad case: on the other ranks */
    void (*arrange)(fixture_t *fx);  /* before the bad call */
    void (*good)(fixture_t *fx);     /* the valid call, fixture restored */
    bool (*skip)(void);              /* true where the case does not apply */
} bad_case_t;

static char one_bad_peer_msg[64];  /* names bad_rank(); set in main */

static const bad_case_t cases[] = {
    { "reserve: size 0", reserve_size_zero, .zcopy_err = ZCOPY_ERR_ARG,
      .msg = "size is 0", .good = reserve_valid },
    { "reserve: size not a multiple of the granularity",
      reserve_size_unaligned, .zcopy_err = ZCOPY_ERR_RANGE,
      .msg = "not a multiple of the granularity", .good = reserve_valid },
    { "reserve: alignment not a multiple of the granularity",
      reserve_alignment_unaligned, .zcopy_err = ZCOPY_ERR_RANGE,
      .msg = "alignment", .good = reserve_valid },
    { "release: unknown address", release_unknown,
      .zcopy_err = ZCOPY_ERR_NOT_FOUND, .msg = "is not a reservation",
      .good = reserve_valid },
    { "release: inside a reservation, not its start", release_inside,
      .zcopy_err = ZCOPY_ERR_NOT_FOUND, .msg = "but not its start",
      .good = reserve_valid },
    /* teardown releases res once its mappings are gone */
    { "release: mappings remain", release_mapped,
      .zcopy_err = ZCOPY_ERR_BUSY, .msg = "still holds 2 mapping(s)" },

    { "create: size 0", create_size_zero, .zcopy_err = ZCOPY_ERR_ARG,
      .msg = "size is 0", .good = create_valid },
    { "create: unknown kind", create_unknown_kind, .zcopy_err = ZCOPY_ERR_ARG,
      .msg = "unknown memory kind 7", .good = create_valid },
    { "create: CUDA without a driver", create_cuda,
      .zcopy_err = ZCOPY_ERR_UNSUPPORTED, .msg = "no CUDA driver",
      .good = create_valid, .skip = cuda_driver_present },
    { "free: still mapped", free_mapped, .zcopy_err = ZCOPY_ERR_BUSY,
      .msg = "still mapped 1 time(s)", .good = free_after_unmap },

    { "map: outside any reservation", map_outside,
      .zcopy_err = ZCOPY_ERR_NOT_FOUND, .msg = "not inside any reservation",
      .good = map_valid },
    { "map: straddles a reservation's end", map_straddle,
      .zcopy_err = ZCOPY_ERR_RANGE, .msg = "straddles the end of reservation",
      .good = map_valid },
    { "map: overlaps a mapping", map_overlap, .zcopy_err = ZCOPY_ERR_OVERLAP,
      .msg = "overlaps mapping", .good = map_valid },
    { "map: larger than the handle", map_too_large,
      .zcopy_err = ZCOPY_ERR_RANGE, .msg = "exceeds the handle",
      .good = map_valid },
    { "map: unaligned address", map_unaligned, .zcopy_err = ZCOPY_ERR_RANGE,
      .msg = "not a multiple of the granularity", .good = map_valid },
    { "unmap: not a mapping's start", unmap_not_start,
      .zcopy_err = ZCOPY_ERR_NOT_FOUND, .msg = "but not its start",
      .good = unmap_remap_hb },
    { "unmap: activated mapping", unmap_activated,
      .zcopy_err = ZCOPY_ERR_BUSY, .msg = "is activated",
      .good = unmap_after_deactivate },

    { "set range: NULL base", set_null_base, .mpi_class = MPI_ERR_ARG,
      .msg = "base is NULL", .good = set_unset_spare },
    { "set range: size 0", set_size_zero, .mpi_class = MPI_ERR_ARG,
      .msg = "size is 0", .good = set_unset_spare },
    { "set range: not a reservation", set_not_reservation,
      .mpi_class = MPI_ERR_ARG,
      .msg = "not inside a reservation made with zcopy_mem_reserve",
      .good = set_unset_spare },
    { "set range: straddles a reservation's end", set_straddle,
      .mpi_class = MPI_ERR_ARG, .msg = "straddles the end of reservation",
      .good = set_unset_spare },
    { "set range: overlaps a set range", set_overlap,
      .mpi_class = MPI_ERR_ARG, .msg = "overlaps the set range",
      .good = set_unset_spare },
    { "set range: alignment not 0", set_alignment, .mpi_class = MPI_ERR_ARG,
      .msg = "alignment", .good = set_unset_spare },
    { "set range: flags not 0", set_flags, .mpi_class = MPI_ERR_ARG,
      .msg = "flags (0x1)", .good = set_unset_spare },
    { "set range: MPI_COMM_NULL", set_comm_null, .mpi_class = MPI_ERR_COMM,
      .msg = "MPI_COMM_NULL", .good = set_unset_spare },
    { "set range: one rank bad", set_one_rank_bad, .mpi_class = MPI_ERR_ARG,
      .msg = "not inside a reservation", .peer_msg = one_bad_peer_msg,
      .good = set_unset_spare },

    { "activate: outside every set range", activate_outside,
      .mpi_class = MPI_ERR_ARG, .msg = "outside every set memory range",
      .good = activate_valid },
    { "activate: straddles a range's end", activate_straddle,
      .mpi_class = MPI_ERR_ARG, .msg = "straddles the end of the set range",
      .good = activate_valid },
    { "activate: overlaps an activated block", activate_overlap,
      .mpi_class = MPI_ERR_ARG, .msg = "overlaps the activated block",
      .good = activate_valid },
    { "activate: offset not 0", activate_offset, .mpi_class = MPI_ERR_ARG,
      .msg = "offset", .good = activate_valid },
    { "activate: flags not 0", activate_flags, .mpi_class = MPI_ERR_ARG,
      .msg = "flags (0x1)", .good = activate_valid },
    { "activate: NULL handle", activate_null_handle, .mpi_class = MPI_ERR_ARG,
      .msg = "handle is NULL", .good = activate_valid },
    { "activate: handle not mapped there", activate_wrong_handle,
      .mpi_class = MPI_ERR_ARG, .msg = "is not exactly mapped to handle",
      .good = activate_valid },
    { "activate: part of a mapping", activate_part_of_mapping,
      .mpi_class = MPI_ERR_ARG, .msg = "is not exactly mapped to handle",
      .good = activate_valid },
    { "activate: nothing mapped", activate_unmapped, .mpi_class = MPI_ERR_ARG,
      .msg = "no mapping starts at", .good = activate_valid },
    { "activate: size 0", activate_size_zero, .mpi_class = MPI_ERR_ARG,
      .msg = "size is 0", .good = activate_valid },
    { "activate: MPI_COMM_NULL", activate_comm_null,
      .mpi_class = MPI_ERR_COMM, .msg = "MPI_COMM_NULL",
      .good = activate_valid },

    { "deactivate: inside a block, not its start", deactivate_inside,
      .mpi_class = MPI_ERR_ARG, .msg = "but not its start",
      .good = deactivate_valid },
    { "deactivate: unknown address", deactivate_unknown,
      .mpi_class = MPI_ERR_ARG, .msg = "is not an activated block",
      .good = deactivate_valid },
    { "deactivate: twice", deactivate_again, .mpi_class = MPI_ERR_ARG,
      .msg = "is not an activated block", .arrange = deactivate_ha,
      .good = reactivate_ha },

    { "unset range: blocks activated inside", unset_busy,
      .mpi_class = MPI_ERR_ARG, .msg = "still holds 1 activated block",
      .good = unset_after_deactivate },
    { "unset range: unknown base", unset_unknown, .mpi_class = MPI_ERR_ARG,
      .msg = "is not a set range", .good = set_unset_spare },
    { "unset range: inside a range, not its base", unset_not_base,
      .mpi_class = MPI_ERR_ARG, .msg = "but not its base",
      .good = set_unset_spare },

    { "query: NULL result pointer", query_null_result,
      .mpi_class = MPI_ERR_ARG, .msg = "activated pointer is NULL",
      .good = query_valid },
    { "get_stats: NULL stats", stats_null, .mpi_class = MPI_ERR_ARG,
      .msg = "stats is NULL", .good = stats_valid },
};

/* --- running a case ------------------------------------------------------ */

static void check_error(const bad_case_t *c, int rc, const char *msg)
{
    const char *want = c->msg;
    char got_class[MPI_MAX_ERROR_STRING], want_class[MPI_MAX_ERROR_STRING];
    int cls = MPI_SUCCESS;

    if (c->peer_msg != NULL && my_rank != bad_rank())
        want = c->peer_msg;
    if (c->mpi_class != MPI_SUCCESS) {
        if (rc != MPI_SUCCESS && MPI_Error_class(rc, &cls) != MPI_SUCCESS)
            cls = -1;
        mpi_message(cls, got_class);
        mpi_message(c->mpi_class, want_class);
        ZT_CHECK(rc != MPI_SUCCESS && cls == c->mpi_class,
                 "%s: error class \"%s\", expected \"%s\"", c->name,
                 got_class, want_class);
    } else {
        ZT_CHECK(rc == c->zcopy_err, "%s: returned \"%s\", expected \"%s\"",
                 c->name, zcopy_strerror(rc), zcopy_strerror(c->zcopy_err));
    }
    ZT_CHECK(strstr(msg, want) != NULL,
             "%s: message \"%s\" does not contain \"%s\"", c->name, msg,
             want);
}

/* Agreed by all ranks: the cases are collective through their fixture. */
static bool skipped(const bad_case_t *c)
{
    int mine = c->skip != NULL && c->skip(), any = 0;

    MPI_Allreduce(&mine, &any, 1, MPI_INT, MPI_LOR, MPI_COMM_WORLD);
    if (any && my_rank == 0)
        printf("skipped: %s (does not apply on this machine)\n", c->name);
    return any;
}

static void run_case(const bad_case_t *c)
{
    char msg[MPI_MAX_ERROR_STRING];
    state_t before, after;
    fixture_t fx;
    int rc;

    current = c->name;
    if (skipped(c))
        return;
    fixture_setup(&fx);
    if (c->arrange != NULL)
        c->arrange(&fx);
    before = snapshot(&fx);
    rc = c->bad(&fx);
    if (c->mpi_class != MPI_SUCCESS)
        mpi_message(rc, msg);
    else
        snprintf(msg, sizeof(msg), "%s", zcopy_mem_last_error());
    check_error(c, rc, msg);
    after = snapshot(&fx);
    check_unchanged(&before, &after);
    if (c->good != NULL)
        c->good(&fx);
    fixture_teardown(&fx);
}

/* --- error handlers ------------------------------------------------------ */

static struct {
    int calls, code;
    MPI_Comm comm;
} handled;

static void record_error(MPI_Comm *comm, int *code, ...)
{
    handled.calls++;
    handled.code = *code;
    handled.comm = *comm;
}

/* A failing MPIX call goes through the handler of the communicator it was
 * given, with the code it returns; a succeeding one does not. */
static void check_handler_of_dup(void)
{
    MPI_Errhandler eh;
    MPI_Comm dup;
    fixture_t fx;
    int rc;

    current = "error handler of a dup'd communicator";
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    MPI_Comm_create_errhandler(record_error, &eh);
    MPI_Comm_set_errhandler(dup, eh);
    fixture_setup(&fx);

    handled.calls = 0;
    rc = MPIX_Comm_activate_memory(dup, fx.spare, 2 * gran, 0, fx.hb, 0);
    ZT_CHECK(rc != MPI_SUCCESS, "%s: bad activate succeeded", current);
    ZT_CHECK(handled.calls == 1, "%s: handler called %d times, expected 1",
             current, handled.calls);
    ZT_CHECK(handled.code == rc, "%s: handler got code %d, call returned %d",
             current, handled.code, rc);
    ZT_CHECK(handled.comm == dup, "%s: handler got another communicator",
             current);

    handled.calls = 0;
    if (ok_mpi(MPIX_Comm_activate_memory(dup, fx.res + 2 * gran, 2 * gran, 0,
                                         fx.hb, 0), "valid activate on dup"))
        ok_mpi(MPIX_Comm_deactivate_memory(dup, fx.res + 2 * gran),
               "valid deactivate on dup");
    ZT_CHECK(handled.calls == 0, "%s: handler called on success", current);

    fixture_teardown(&fx);
    MPI_Comm_free(&dup);
    MPI_Errhandler_free(&eh);
}

/* MPI_COMM_NULL has no handler of its own: MPI_COMM_WORLD's is used. */
static void check_handler_of_comm_null(void)
{
    MPI_Errhandler eh;
    int rc, cls = MPI_SUCCESS;

    current = "MPI_COMM_NULL goes to MPI_COMM_WORLD's handler";
    MPI_Comm_create_errhandler(record_error, &eh);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, eh);
    handled.calls = 0;
    rc = MPIX_Comm_set_memory_range(MPI_COMM_NULL, NULL, 0, 0, 0);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Errhandler_free(&eh);

    if (rc != MPI_SUCCESS)
        MPI_Error_class(rc, &cls);
    ZT_CHECK(cls == MPI_ERR_COMM, "%s: error class %d, expected MPI_ERR_COMM",
             current, cls);
    ZT_CHECK(handled.calls == 1 && handled.code == rc &&
                 handled.comm == MPI_COMM_WORLD,
             "%s: handler called %d times with code %d (returned %d)",
             current, handled.calls, handled.code, rc);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &my_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world_size);
    current = "granularity";
    require(zcopy_mem_granularity(&host_prop, &gran) == ZCOPY_SUCCESS,
            "host granularity");
    snprintf(one_bad_peer_msg, sizeof(one_bad_peer_msg),
             "rank %d rejected its range", bad_rank());

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        run_case(&cases[i]);
    check_handler_of_dup();
    check_handler_of_comm_null();
    return zt_finish();
}
