/*
 * Unit test of the device memory layer, ZCOPY_MEM_HOST (SPEC section 2):
 * every rule is checked with its exact ZCOPY_ERR_* code and the cause that
 * zcopy_mem_last_error() gives, and every failed call is followed by proof
 * that it changed nothing. Only the public header is used, except for the
 * layout of a handle (to build a fake one that is safe to pass around).
 */
#include "unit.h"

#include "mem/mem.h"

#include <errno.h>
#include <sys/mman.h>
#include <sys/wait.h>

#define MiB ((size_t)1 << 20)

static size_t page;  /* the host granularity, set in main */

static const zcopy_mem_prop_t host = { .kind = ZCOPY_MEM_HOST, .device = -1 };

/* --- small helpers --------------------------------------------------------- */

static void *reserve(size_t size)
{
    void *va = NULL;

    CHECK_OK(zcopy_mem_reserve(&va, size, 0, NULL, 0));
    return va;
}

static zcopy_mem_handle_t create(size_t size)
{
    zcopy_mem_handle_t h = NULL;

    CHECK_OK(zcopy_mem_create(&h, size, &host, 0));
    return h;
}

static char *at(void *base, size_t pages)
{
    return (char *)base + pages * page;
}

/* An address that is page aligned and mapped, but by nobody in zcopy. */
static void *foreign_pages(size_t size)
{
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

    CHECK(p != MAP_FAILED);
    return p == MAP_FAILED ? NULL : p;
}

/* --- error names ------------------------------------------------------------- */

static void test_strerror(void)
{
    static const struct { int code; const char *name; } codes[] = {
        { ZCOPY_SUCCESS, "ZCOPY_SUCCESS" },
        { ZCOPY_ERR_ARG, "ZCOPY_ERR_ARG" },
        { ZCOPY_ERR_NOMEM, "ZCOPY_ERR_NOMEM" },
        { ZCOPY_ERR_RANGE, "ZCOPY_ERR_RANGE" },
        { ZCOPY_ERR_OVERLAP, "ZCOPY_ERR_OVERLAP" },
        { ZCOPY_ERR_NOT_FOUND, "ZCOPY_ERR_NOT_FOUND" },
        { ZCOPY_ERR_BUSY, "ZCOPY_ERR_BUSY" },
        { ZCOPY_ERR_UNSUPPORTED, "ZCOPY_ERR_UNSUPPORTED" },
        { ZCOPY_ERR_SYSTEM, "ZCOPY_ERR_SYSTEM" },
        { ZCOPY_ERR_INTERNAL, "ZCOPY_ERR_INTERNAL" },
    };
    const size_t n = sizeof(codes) / sizeof(codes[0]);

    for (size_t i = 0; i < n; i++) {
        const char *s = zcopy_strerror(codes[i].code);
        size_t len = strlen(codes[i].name);

        /* The name, then a separator: "ZCOPY_ERR_ARG" must not be taken
         * for a prefix of some other name. */
        CHECK(s != NULL && strncmp(s, codes[i].name, len) == 0 &&
              s[len] == ':');
    }
    /* Codes outside the list get a text of their own, not a wrong name. */
    static const int bogus[] = { -100, -10, 1, 42 };
    for (size_t b = 0; b < sizeof(bogus) / sizeof(bogus[0]); b++) {
        const char *s = zcopy_strerror(bogus[b]);

        CHECK(s != NULL && s[0] != '\0');
        for (size_t i = 0; i < n && s; i++)
            CHECK(strcmp(s, zcopy_strerror(codes[i].code)) != 0);
    }
}

/* --- granularity ----------------------------------------------------------- */

static void test_granularity(void)
{
    zcopy_mem_prop_t p = host;
    size_t g = 12345;

    CHECK_ERR(zcopy_mem_granularity(NULL, &g), ZCOPY_ERR_ARG, "NULL");
    CHECK_ERR(zcopy_mem_granularity(&p, NULL), ZCOPY_ERR_ARG, "NULL");

    CHECK_OK(zcopy_mem_granularity(&host, &g));
    CHECK(g == page);

    p.flags = ZCOPY_MEM_HUGE;
    CHECK_OK(zcopy_mem_granularity(&p, &g));
    CHECK(g == 2 * MiB);

    /* Failures leave the output alone. */
    g = 12345;
    p = host;
    p.kind = ZCOPY_MEM_CUDA;
    CHECK_ERR(zcopy_mem_granularity(&p, &g), ZCOPY_ERR_UNSUPPORTED, "CUDA");
    p.kind = (zcopy_mem_kind_t)7;
    CHECK_ERR(zcopy_mem_granularity(&p, &g), ZCOPY_ERR_ARG,
              "unknown memory kind 7");
    p = host;
    p.flags = 0x2;
    CHECK_ERR(zcopy_mem_granularity(&p, &g), ZCOPY_ERR_ARG, "flags");
    p = host;
    p.device = 999;
    CHECK_ERR(zcopy_mem_granularity(&p, &g), ZCOPY_ERR_ARG,
              "NUMA node 999 does not exist");
    p.device = -2;
    CHECK_ERR(zcopy_mem_granularity(&p, &g), ZCOPY_ERR_ARG, "NUMA node -2");
    CHECK(g == 12345);

    /* Node 0 exists on every Linux machine with NUMA support in sysfs. */
    p.device = 0;
    if (access("/sys/devices/system/node/node0", F_OK) == 0) {
        CHECK_OK(zcopy_mem_granularity(&p, &g));
        CHECK(g == page);
    }
}

/* --- reservations ---------------------------------------------------------- */

static void test_reserve_rejects(void)
{
    void *sentinel = (void *)(uintptr_t)0x1234, *va = sentinel;
    long maps = unit_maps_lines();

    CHECK_ERR(zcopy_mem_reserve(NULL, page, 0, NULL, 0), ZCOPY_ERR_ARG, "NULL");
    CHECK_ERR(zcopy_mem_reserve(&va, 0, 0, NULL, 0), ZCOPY_ERR_ARG, "size is 0");
    CHECK_ERR(zcopy_mem_reserve(&va, page + 1, 0, NULL, 0), ZCOPY_ERR_RANGE,
              "not a multiple of the granularity");
    CHECK_ERR(zcopy_mem_reserve(&va, page / 2, 0, NULL, 0), ZCOPY_ERR_RANGE,
              "not a multiple of the granularity");
    CHECK_ERR(zcopy_mem_reserve(&va, page, 3 * page, NULL, 0), ZCOPY_ERR_RANGE,
              "power-of-two multiple");
    CHECK_ERR(zcopy_mem_reserve(&va, page, page / 2, NULL, 0), ZCOPY_ERR_RANGE,
              "power-of-two multiple");
    CHECK_ERR(zcopy_mem_reserve(&va, page, 3, NULL, 0), ZCOPY_ERR_RANGE,
              "power-of-two multiple");
    CHECK_ERR(zcopy_mem_reserve(&va, page, 0, NULL, 1), ZCOPY_ERR_ARG,
              "flags 0x1 must be 0");
    CHECK_ERR(zcopy_mem_reserve(&va, SIZE_MAX - page + 1, 0, NULL, 0),
              ZCOPY_ERR_RANGE, "too large");

    /* Nothing reserved, nothing written. */
    CHECK(va == sentinel);
    CHECK(maps > 0 && unit_maps_lines() == maps);
}

static void test_reserve_alignment(void)
{
    void *warm = NULL;
    long maps;

    /* The first reservation allocates the bookkeeping, and under ASan that
     * maps a new allocator region: count the lines after it. */
    CHECK_OK(zcopy_mem_reserve(&warm, page, 0, NULL, 0));
    CHECK_OK(zcopy_mem_release(warm));
    maps = unit_maps_lines();

    /* mmap alone gives page alignment: a 2 MiB alignment is luck unless
     * the reservation trims it, so try several sizes. */
    for (size_t pages = 1; pages <= 1024; pages *= 4) {
        void *va = NULL;

        CHECK_OK(zcopy_mem_reserve(&va, pages * page, 2 * MiB, NULL, 0));
        CHECK(va != NULL && (uintptr_t)va % (2 * MiB) == 0);
        CHECK(unit_range_reserved(va, pages * page));
        CHECK_OK(zcopy_mem_release(va));
    }
    /* The trimmed ends were given back too: no line of maps is left. */
    CHECK(unit_maps_lines() == maps);

    for (size_t align = page; align <= 64 * page; align *= 2) {
        void *va = NULL;

        CHECK_OK(zcopy_mem_reserve(&va, 3 * page, align, NULL, 0));
        CHECK((uintptr_t)va % align == 0);
        CHECK_OK(zcopy_mem_release(va));
    }
    CHECK(unit_maps_lines() == maps);
}

static void test_release(void)
{
    void *va = reserve(4 * page), *stray = foreign_pages(page);
    zcopy_mem_handle_t h = create(page);

    CHECK_ERR(zcopy_mem_release(NULL), ZCOPY_ERR_NOT_FOUND, "not a reservation");
    CHECK_ERR(zcopy_mem_release(stray), ZCOPY_ERR_NOT_FOUND,
              "not a reservation");
    CHECK_ERR(zcopy_mem_release(at(va, 1)), ZCOPY_ERR_NOT_FOUND,
              "not its start");
    CHECK(unit_range_reserved(va, 4 * page));

    CHECK_OK(zcopy_mem_map(at(va, 2), page, 0, h, 0));
    unit_fill(at(va, 2), page, 1);
    CHECK_ERR(zcopy_mem_release(va), ZCOPY_ERR_BUSY, "still holds 1 mapping");
    /* The BUSY release touched nothing: the mapping and its data remain. */
    CHECK(unit_has_pattern(at(va, 2), page, 1));
    CHECK(unit_range_mapped(at(va, 2), page));
    CHECK(unit_range_reserved(va, 2 * page));

    CHECK_OK(zcopy_mem_unmap(at(va, 2)));
    CHECK_OK(zcopy_mem_release(va));
    CHECK_ERR(zcopy_mem_release(va), ZCOPY_ERR_NOT_FOUND, "not a reservation");
    CHECK_OK(zcopy_mem_free(h));
    munmap(stray, page);
}

/* Reservations are kept sorted; many at once, released out of order. */
static void test_many_reservations(void)
{
    enum { N = 40 };
    void *va[N];
    zcopy_mem_handle_t h = create(page);

    for (int i = 0; i < N; i++)
        va[i] = reserve((size_t)(1 + i % 3) * page);
    for (int i = 0; i < N; i++)
        CHECK_OK(zcopy_mem_map(va[(i * 7) % N], page, 0, h, 0));
    /* Every mapping is of the same page: a write shows in all of them. */
    unit_fill(va[0], page, 9);
    for (int i = 0; i < N; i++)
        CHECK(unit_has_pattern(va[i], page, 9));
    for (int i = 0; i < N; i++) {
        CHECK_ERR(zcopy_mem_release(va[i]), ZCOPY_ERR_BUSY, "mapping");
        CHECK_ERR(zcopy_mem_free(h), ZCOPY_ERR_BUSY, "still mapped");
    }
    for (int i = 0; i < N; i++)
        CHECK_OK(zcopy_mem_unmap(va[(i * 13) % N]));
    for (int i = 0; i < N; i++)
        CHECK_OK(zcopy_mem_release(va[(i * 11) % N]));
    CHECK_OK(zcopy_mem_free(h));
}

/* --- physical memory --------------------------------------------------------- */

static void test_create_rejects(void)
{
    zcopy_mem_handle_t sentinel = (zcopy_mem_handle_t)(uintptr_t)0x1234;
    zcopy_mem_handle_t h = sentinel;
    zcopy_mem_prop_t p = host;
    int fds = proc_count_fds();

    CHECK_ERR(zcopy_mem_create(NULL, page, &host, 0), ZCOPY_ERR_ARG, "NULL");
    CHECK_ERR(zcopy_mem_create(&h, page, NULL, 0), ZCOPY_ERR_ARG, "NULL");
    CHECK_ERR(zcopy_mem_create(&h, 0, &host, 0), ZCOPY_ERR_ARG, "size is 0");
    CHECK_ERR(zcopy_mem_create(&h, page + 1, &host, 0), ZCOPY_ERR_RANGE,
              "not a multiple of the granularity");
    CHECK_ERR(zcopy_mem_create(&h, page, &host, 1), ZCOPY_ERR_ARG,
              "flags 0x1 must be 0");
    p.kind = (zcopy_mem_kind_t)7;
    CHECK_ERR(zcopy_mem_create(&h, page, &p, 0), ZCOPY_ERR_ARG,
              "unknown memory kind 7");
    p.kind = ZCOPY_MEM_CUDA;
    CHECK_ERR(zcopy_mem_create(&h, page, &p, 0), ZCOPY_ERR_UNSUPPORTED, "CUDA");
    p = host;
    p.device = 999;
    CHECK_ERR(zcopy_mem_create(&h, page, &p, 0), ZCOPY_ERR_ARG,
              "NUMA node 999 does not exist");
    /* The granularity follows the properties: one small page is not a
     * multiple of a huge page. */
    p = host;
    p.flags = ZCOPY_MEM_HUGE;
    CHECK_ERR(zcopy_mem_create(&h, page, &p, 0), ZCOPY_ERR_RANGE,
              "granularity 2097152");

    CHECK(h == sentinel);
    CHECK(proc_count_fds() == fds);
    CHECK(unit_maps_count("memfd:zcopy") == 0);
}

/* Under tests/confined's launcher (ZCOPY_TEST_CONFINED set), as in a
 * container without CAP_SYS_NICE, set_mempolicy is refused: placement on a
 * node is UNSUPPORTED, said so, and nothing is created; device -1 (every
 * other test here) keeps working. */
static void test_create_node0(void)
{
    zcopy_mem_prop_t p = host;
    zcopy_mem_handle_t h = NULL;
    size_t size = 0;
    void *va;

    if (access("/sys/devices/system/node/node0", F_OK) != 0)
        return;
    p.device = 0;
    if (getenv("ZCOPY_TEST_CONFINED") != NULL) {
        CHECK_ERR(zcopy_mem_create(&h, 4 * page, &p, 0),
                  ZCOPY_ERR_UNSUPPORTED, "set_mempolicy is refused");
        CHECK(h == NULL);
        return;
    }
    CHECK_OK(zcopy_mem_create(&h, 4 * page, &p, 0));
    if (h == NULL)
        return;
    CHECK_OK(zcopy_mem_get_size(h, &size));
    CHECK(size == 4 * page);
    va = reserve(4 * page);
    CHECK_OK(zcopy_mem_map(va, 4 * page, 0, h, 0));
    unit_fill(va, 4 * page, 3);
    CHECK(unit_has_pattern(va, 4 * page, 3));
    CHECK_OK(zcopy_mem_unmap(va));
    CHECK_OK(zcopy_mem_release(va));
    CHECK_OK(zcopy_mem_free(h));
}

/* Peers receive the memfd: they must not be able to shrink it (the owner
 * would take SIGBUS on its own pages), grow it, or add seals. */
static void test_create_sealed(void)
{
    zcopy_mem_handle_t h = create(4 * page);

    if (h == NULL)
        return;
    CHECK(ftruncate(h->fd, (off_t)page) != 0 && errno == EPERM);
    CHECK(ftruncate(h->fd, (off_t)(8 * page)) != 0 && errno == EPERM);
    CHECK(fcntl(h->fd, F_ADD_SEALS, F_SEAL_WRITE) != 0 && errno == EPERM);
    CHECK_OK(zcopy_mem_free(h));
}

/* Bytes of /proc/meminfo's @key, or 0. */
static size_t meminfo_bytes(const char *key)
{
    FILE *f = fopen("/proc/meminfo", "r");
    unsigned long long kb = 0;
    char line[256];

    if (f == NULL)
        return 0;
    while (fgets(line, sizeof(line), f) != NULL)
        if (strncmp(line, key, strlen(key)) == 0 &&
            sscanf(line + strlen(key), " %llu", &kb) == 1)
            break;
    fclose(f);
    return (size_t)kb << 10;
}

/* More memory than the machine has, RAM and swap: NOMEM, said so, and
 * nothing created, rather than the kernel's OOM killer ending this
 * process in the middle of the fallocate (which it did before the create
 * asked what was left). Then a create of a few steps (mem_host.c) that
 * fits: whole, its last page as usable as its first. */
static void test_create_beyond_memory(void)
{
    const size_t ram = meminfo_bytes("MemTotal:");
    const size_t big = (ram + meminfo_bytes("SwapTotal:") + 1024 * MiB) /
                       page * page;
    zcopy_mem_handle_t sentinel = (zcopy_mem_handle_t)(uintptr_t)0x1234;
    zcopy_mem_handle_t h = sentinel;
    int fds = proc_count_fds();
    size_t steps = 2 * 256 * MiB + page, size = 0;
    char *va;

    CHECK(ram > 0);
    /* Where nothing tells what is left, the create would meet the killer:
     * not a test to run there. */
    if (ram == 0 || zcopy_memory_left(-1) == SIZE_MAX)
        return;
    CHECK_ERR(zcopy_mem_create(&h, big, &host, 0), ZCOPY_ERR_NOMEM,
              "out of memory");
    CHECK(h == sentinel);
    CHECK(proc_count_fds() == fds);
    CHECK(unit_maps_count("memfd:zcopy") == 0);
    if (zcopy_memory_left(-1) < 4 * steps)
        return; /* a small machine or cgroup: not the place for it */
    h = create(steps);
    if (h == NULL)
        return;
    CHECK_OK(zcopy_mem_get_size(h, &size));
    CHECK(size == steps);
    va = reserve(steps);
    CHECK_OK(zcopy_mem_map(va, steps, 0, h, 0));
    unit_fill(va, page, 5);
    unit_fill(va + steps - page, page, 6);
    CHECK(unit_has_pattern(va, page, 5));
    CHECK(unit_has_pattern(va + steps - page, page, 6));
    CHECK_OK(zcopy_mem_unmap(va));
    CHECK_OK(zcopy_mem_release(va));
    CHECK_OK(zcopy_mem_free(h));
}

/* Huge pages exist only where the administrator set some aside: elsewhere
 * create reports it (UNSUPPORTED without hugetlbfs, NOMEM or SYSTEM with an
 * empty pool) and leaves nothing behind. */
static void test_create_huge(void)
{
    zcopy_mem_prop_t p = host;
    zcopy_mem_handle_t h = NULL;
    int fds = proc_count_fds(), st;
    void *va = NULL;

    p.flags = ZCOPY_MEM_HUGE;
    st = zcopy_mem_create(&h, 2 * MiB, &p, 0);
    CHECK(st == ZCOPY_SUCCESS || st == ZCOPY_ERR_UNSUPPORTED ||
          st == ZCOPY_ERR_NOMEM || st == ZCOPY_ERR_SYSTEM);
    if (st != ZCOPY_SUCCESS) {
        CHECK(strlen(zcopy_mem_last_error()) > 0);
        CHECK(proc_count_fds() == fds);
        return;
    }
    CHECK_OK(zcopy_mem_reserve(&va, 4 * MiB, 2 * MiB, NULL, 0));
    /* A small-page boundary is not a huge-page boundary. */
    CHECK_ERR(zcopy_mem_map((char *)va + page, 2 * MiB, 0, h, 0),
              ZCOPY_ERR_RANGE, "granularity");
    CHECK_OK(zcopy_mem_map(va, 2 * MiB, 0, h, 0));
    unit_fill(va, 2 * MiB, 4);
    CHECK(unit_has_pattern(va, 2 * MiB, 4));
    CHECK_OK(zcopy_mem_unmap(va));
    CHECK_OK(zcopy_mem_release(va));
    CHECK_OK(zcopy_mem_free(h));
    CHECK(proc_count_fds() == fds);
}

static void test_free(void)
{
    /* Shaped like a handle, so that an implementation that trusted it would
     * misbehave visibly rather than close fd 0. */
    struct zcopy_mem_handle fake = { .fd = -1, .size = 4096 };
    zcopy_mem_handle_t h = create(2 * page);
    void *va = reserve(2 * page);
    size_t size = 0;

    CHECK_ERR(zcopy_mem_free(NULL), ZCOPY_ERR_ARG, "NULL");
    CHECK_ERR(zcopy_mem_free(&fake), ZCOPY_ERR_NOT_FOUND, "not a live handle");

    CHECK_OK(zcopy_mem_map(va, 2 * page, 0, h, 0));
    unit_fill(va, 2 * page, 5);
    CHECK_ERR(zcopy_mem_free(h), ZCOPY_ERR_BUSY, "still mapped 1 time");
    /* Still alive: the data is there and the handle still maps. */
    CHECK(unit_has_pattern(va, 2 * page, 5));
    CHECK_OK(zcopy_mem_get_size(h, &size));
    CHECK(size == 2 * page);

    CHECK_OK(zcopy_mem_unmap(va));
    CHECK_OK(zcopy_mem_free(h));
    /* The pointer is stale now; the layer recognises it by value only. */
    CHECK_ERR(zcopy_mem_free(h), ZCOPY_ERR_NOT_FOUND, "not a live handle");
    CHECK_ERR(zcopy_mem_get_size(h, &size), ZCOPY_ERR_NOT_FOUND,
              "not a live handle");
    CHECK_ERR(zcopy_mem_map(va, page, 0, h, 0), ZCOPY_ERR_NOT_FOUND,
              "not a live handle");
    CHECK(unit_range_reserved(va, 2 * page));
    CHECK_OK(zcopy_mem_release(va));
}

/* --- mappings ---------------------------------------------------------------- */

/* A reservation of 8 pages and a handle of 4, with pages [0, 2) mapped to
 * the handle's [0, 2) and filled; each failed map below must leave exactly
 * this behind. */
typedef struct {
    void *va;
    zcopy_mem_handle_t h;
} map_fixture_t;

static map_fixture_t map_setup(void)
{
    map_fixture_t f = { reserve(8 * page), create(4 * page) };

    CHECK_OK(zcopy_mem_map(f.va, 2 * page, 0, f.h, 0));
    unit_fill(f.va, 2 * page, 6);
    return f;
}

static void map_unchanged(const map_fixture_t *f)
{
    CHECK(unit_has_pattern(f->va, 2 * page, 6));
    CHECK(unit_range_mapped(f->va, 2 * page));
    CHECK(unit_range_reserved(at(f->va, 2), 6 * page));
}

static void map_teardown(map_fixture_t *f)
{
    CHECK_OK(zcopy_mem_unmap(f->va));
    CHECK_OK(zcopy_mem_free(f->h));
    CHECK_OK(zcopy_mem_release(f->va));
}

static void test_map_rejects(void)
{
    map_fixture_t f = map_setup();
    void *stray = foreign_pages(2 * page);
    int fds = proc_count_fds();

    CHECK_ERR(zcopy_mem_map(stray, page, 0, f.h, 0), ZCOPY_ERR_NOT_FOUND,
              "not inside any reservation");
    CHECK_ERR(zcopy_mem_map(at(f.va, 6), 4 * page, 0, f.h, 0), ZCOPY_ERR_RANGE,
              "straddles the end of reservation");
    CHECK_ERR(zcopy_mem_map(at(f.va, 7), 2 * page, 0, f.h, 0), ZCOPY_ERR_RANGE,
              "straddles the end of reservation");

    /* Overlaps: the same range, the tail, a range that swallows it. */
    CHECK_ERR(zcopy_mem_map(f.va, 2 * page, 0, f.h, 0), ZCOPY_ERR_OVERLAP,
              "overlaps mapping");
    CHECK_ERR(zcopy_mem_map(at(f.va, 1), 2 * page, 0, f.h, 0),
              ZCOPY_ERR_OVERLAP, "overlaps mapping");
    CHECK_ERR(zcopy_mem_map(f.va, 4 * page, 0, f.h, 0), ZCOPY_ERR_OVERLAP,
              "overlaps mapping");

    CHECK_ERR(zcopy_mem_map(at(f.va, 2), 5 * page, 0, f.h, 0), ZCOPY_ERR_RANGE,
              "exceeds the handle");
    CHECK_ERR(zcopy_mem_map(at(f.va, 2), 3 * page, 2 * page, f.h, 0),
              ZCOPY_ERR_RANGE, "exceeds the handle");
    CHECK_ERR(zcopy_mem_map(at(f.va, 2), page, 4 * page, f.h, 0),
              ZCOPY_ERR_RANGE, "exceeds the handle");
    CHECK_ERR(zcopy_mem_map(at(f.va, 2), page, SIZE_MAX - page + 1, f.h, 0),
              ZCOPY_ERR_RANGE, "exceeds the handle");

    CHECK_ERR(zcopy_mem_map(at(f.va, 2) + 1, page, 0, f.h, 0), ZCOPY_ERR_RANGE,
              "not a multiple of the granularity");
    CHECK_ERR(zcopy_mem_map(at(f.va, 2), page + 1, 0, f.h, 0), ZCOPY_ERR_RANGE,
              "not a multiple of the granularity");
    CHECK_ERR(zcopy_mem_map(at(f.va, 2), page, 1, f.h, 0), ZCOPY_ERR_RANGE,
              "not a multiple of the granularity");

    CHECK_ERR(zcopy_mem_map(at(f.va, 2), page, 0, f.h, 1), ZCOPY_ERR_ARG,
              "flags 0x1 must be 0");
    CHECK_ERR(zcopy_mem_map(at(f.va, 2), 0, 0, f.h, 0), ZCOPY_ERR_ARG,
              "size is 0");
    CHECK_ERR(zcopy_mem_map(at(f.va, 2), page, 0, NULL, 0), ZCOPY_ERR_ARG,
              "handle is NULL");

    /* None of it left a trace: same data, same holes, same fds, and the
     * holes still take a valid mapping. */
    map_unchanged(&f);
    CHECK(proc_count_fds() == fds);
    CHECK_OK(zcopy_mem_map(at(f.va, 2), 4 * page, 0, f.h, 0));
    CHECK(unit_has_pattern(at(f.va, 2), 2 * page, 6));
    CHECK_OK(zcopy_mem_unmap(at(f.va, 2)));
    CHECK_OK(zcopy_mem_map(at(f.va, 6), 2 * page, 2 * page, f.h, 0));
    CHECK_OK(zcopy_mem_unmap(at(f.va, 6)));
    map_unchanged(&f);

    map_teardown(&f);
    munmap(stray, 2 * page);
}

/* Adjacent mappings do not overlap, on either side. */
static void test_map_adjacent(void)
{
    map_fixture_t f = map_setup();

    CHECK_OK(zcopy_mem_map(at(f.va, 4), 2 * page, 2 * page, f.h, 0));
    CHECK_OK(zcopy_mem_map(at(f.va, 2), 2 * page, 2 * page, f.h, 0));
    CHECK_OK(zcopy_mem_map(at(f.va, 6), 2 * page, 0, f.h, 0));
    CHECK(unit_range_mapped(f.va, 8 * page));
    /* Mapping 4 (handle page 0) shows what mapping 1 wrote. */
    CHECK(unit_has_pattern(at(f.va, 6), 2 * page, 6));
    /* Mappings 2 and 3 share handle pages [2, 4). */
    unit_fill(at(f.va, 2), 2 * page, 8);
    CHECK(unit_has_pattern(at(f.va, 4), 2 * page, 8));
    CHECK_ERR(zcopy_mem_map(at(f.va, 3), page, 0, f.h, 0), ZCOPY_ERR_OVERLAP,
              "overlaps mapping");
    CHECK_OK(zcopy_mem_unmap(at(f.va, 4)));
    CHECK_OK(zcopy_mem_unmap(at(f.va, 6)));
    CHECK_OK(zcopy_mem_unmap(at(f.va, 2)));
    map_unchanged(&f);
    map_teardown(&f);
}

static void test_unmap(void)
{
    map_fixture_t f = map_setup();

    CHECK_ERR(zcopy_mem_unmap(at(f.va, 1)), ZCOPY_ERR_NOT_FOUND,
              "not its start");
    CHECK_ERR(zcopy_mem_unmap(at(f.va, 2)), ZCOPY_ERR_NOT_FOUND,
              "not a mapping");
    CHECK_ERR(zcopy_mem_unmap(at(f.va, 7)), ZCOPY_ERR_NOT_FOUND,
              "not a mapping");
    CHECK_ERR(zcopy_mem_unmap(NULL), ZCOPY_ERR_NOT_FOUND, "not a mapping");
    map_unchanged(&f);

    /* Unmap puts the reservation back: PROT_NONE, not a hole another mmap
     * could take, and a map at the same address works again. The pages
     * belong to the handle, so they come back with their data. */
    CHECK_OK(zcopy_mem_unmap(f.va));
    CHECK(unit_range_reserved(f.va, 8 * page));
    CHECK_ERR(zcopy_mem_unmap(f.va), ZCOPY_ERR_NOT_FOUND, "not a mapping");
    CHECK_OK(zcopy_mem_map(f.va, 2 * page, 0, f.h, 0));
    map_unchanged(&f);
    map_teardown(&f);
}

/* Two mappings of one handle are two views of the same bytes. */
static void test_two_views(void)
{
    zcopy_mem_handle_t h = create(4 * page);
    void *a = reserve(4 * page), *b = reserve(8 * page);
    unsigned char *pa = a, *pb;

    CHECK_OK(zcopy_mem_map(a, 4 * page, 0, h, 0));
    CHECK_OK(zcopy_mem_map(at(b, 3), 4 * page, 0, h, 0));
    pb = (unsigned char *)at(b, 3);
    CHECK(a != (void *)pb);
    unit_fill(a, 4 * page, 10);
    CHECK(unit_has_pattern(pb, 4 * page, 10));
    CHECK(memcmp(pa, pb, 4 * page) == 0);
    pb[4 * page - 1] ^= 0xff;
    CHECK(pa[4 * page - 1] == pb[4 * page - 1]);

    /* And a partial view at an offset sees the handle's later pages. */
    CHECK_ERR(zcopy_mem_unmap(b), ZCOPY_ERR_NOT_FOUND, "not a mapping");
    CHECK_OK(zcopy_mem_map(b, 2 * page, 2 * page, h, 0));
    CHECK(memcmp(b, pa + 2 * page, 2 * page) == 0);

    CHECK_OK(zcopy_mem_unmap(b));
    CHECK_OK(zcopy_mem_unmap(at(b, 3)));
    CHECK_OK(zcopy_mem_unmap(a));
    CHECK_OK(zcopy_mem_free(h));
    CHECK_OK(zcopy_mem_release(a));
    CHECK_OK(zcopy_mem_release(b));
}

/* --- shareable handles ------------------------------------------------------- */

/* The child of the fork: imports the parent's memory, maps it into its own
 * reservation, checks the parent's bytes and writes its own. Its checks
 * count in its copy of the counters; the exit status carries the verdict. */
static void import_child(int fd, size_t size)
{
    unsigned long failed_before = unit_failed, passed_before = unit_passed;
    zcopy_mem_handle_t h = NULL;
    size_t got = 0;
    void *va;

    CHECK_OK(zcopy_mem_import(fd, &h));
    CHECK_OK(zcopy_mem_get_size(h, &got));
    CHECK(got == size);
    va = reserve(size);
    CHECK_OK(zcopy_mem_map(va, size, 0, h, 0));
    CHECK(unit_has_pattern(va, size, 11));
    unit_fill(va, size, 12);
    CHECK_OK(zcopy_mem_unmap(va));
    CHECK_OK(zcopy_mem_free(h));
    CHECK_OK(zcopy_mem_release(va));

    /* The child holds copies of all the parent's fds; close them so that
     * a checker that reports open fds at exit (valgrind --track-fds) has
     * nothing to say about this process. */
    for (int i = 3; i < 1024; i++)
        close(i);
    fflush(stdout);
    fflush(stderr);
    _exit(unit_failed == failed_before && unit_passed > passed_before ? 0 : 1);
}

static void test_export_import_fork(void)
{
    const size_t size = 3 * page;
    int fd = -1, status = -1, fds = proc_count_fds();
    zcopy_mem_handle_t h = create(size), h2 = NULL;
    void *va = reserve(size), *va2 = reserve(size);
    pid_t pid;

    CHECK(proc_count_fds() == fds + 1);
    CHECK_OK(zcopy_mem_map(va, size, 0, h, 0));
    unit_fill(va, size, 11);
    CHECK_OK(zcopy_mem_export(h, &fd));
    CHECK(fd >= 0);
    CHECK(proc_count_fds() == fds + 2);

    fflush(stdout);
    fflush(stderr);
    pid = fork();
    CHECK(pid >= 0);
    if (pid == 0)
        import_child(fd, size);
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK(unit_has_pattern(va, size, 12));

    /* Importing in the same process gives a second, independent handle to
     * the same pages; the import duplicates the fd rather than taking it. */
    CHECK_OK(zcopy_mem_import(fd, &h2));
    CHECK(h2 != h);
    CHECK(fcntl(fd, F_GETFD) >= 0);
    CHECK_OK(zcopy_mem_map(va2, size, 0, h2, 0));
    CHECK(unit_has_pattern(va2, size, 12));
    CHECK_OK(zcopy_mem_unmap(va2));
    CHECK_OK(zcopy_mem_free(h2));

    CHECK(close(fd) == 0);
    CHECK_OK(zcopy_mem_unmap(va));
    CHECK_OK(zcopy_mem_free(h));
    CHECK_OK(zcopy_mem_release(va));
    CHECK_OK(zcopy_mem_release(va2));
    CHECK(proc_count_fds() == fds);
}

static void test_export_rejects(void)
{
    zcopy_mem_handle_t h = create(page);
    int fd = -7;

    CHECK_ERR(zcopy_mem_export(NULL, &fd), ZCOPY_ERR_ARG, "NULL");
    CHECK_ERR(zcopy_mem_export(h, NULL), ZCOPY_ERR_ARG, "NULL");
    CHECK_OK(zcopy_mem_free(h));
    CHECK_ERR(zcopy_mem_export(h, &fd), ZCOPY_ERR_NOT_FOUND,
              "not a live handle");
    CHECK(fd == -7);
}

static void test_import_rejects(void)
{
    zcopy_mem_handle_t sentinel = (zcopy_mem_handle_t)(uintptr_t)0x1234;
    zcopy_mem_handle_t h = sentinel;
    int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
    int pipefd[2] = { -1, -1 }, empty, closed, fds;

    CHECK(devnull >= 0);
    CHECK(pipe(pipefd) == 0);
    /* A memfd, but an empty one: there is no memory behind it. */
    empty = memfd_create("zcopy-test-empty", MFD_CLOEXEC);
    CHECK(empty >= 0);
    closed = dup(devnull);
    close(closed);
    fds = proc_count_fds();

    CHECK_ERR(zcopy_mem_import(devnull, NULL), ZCOPY_ERR_ARG, "NULL");
    CHECK_ERR(zcopy_mem_import(-1, &h), ZCOPY_ERR_ARG, "not an open file");
    CHECK_ERR(zcopy_mem_import(closed, &h), ZCOPY_ERR_ARG, "not an open file");
    CHECK_ERR(zcopy_mem_import(devnull, &h), ZCOPY_ERR_ARG,
              "not exported zcopy memory");
    CHECK_ERR(zcopy_mem_import(pipefd[0], &h), ZCOPY_ERR_ARG,
              "not exported zcopy memory");
    CHECK_ERR(zcopy_mem_import(pipefd[1], &h), ZCOPY_ERR_ARG,
              "not exported zcopy memory");
    CHECK_ERR(zcopy_mem_import(empty, &h), ZCOPY_ERR_ARG, "holds no memory");
    CHECK(h == sentinel);
    CHECK(proc_count_fds() == fds);

    close(devnull);
    close(pipefd[0]);
    close(pipefd[1]);
    close(empty);
}

/* --- leaks ------------------------------------------------------------------- */

static void one_cycle(void *va, size_t size, unsigned seed)
{
    zcopy_mem_handle_t h = NULL;

    CHECK_OK(zcopy_mem_create(&h, size, &host, 0));
    CHECK_OK(zcopy_mem_map(va, size, 0, h, 0));
    unit_fill(va, size, seed);
    CHECK(unit_has_pattern(va, size, seed));
    CHECK_OK(zcopy_mem_unmap(va));
    CHECK_OK(zcopy_mem_free(h));
}

static void test_fd_hygiene(void)
{
    void *va = reserve(2 * page);
    zcopy_mem_handle_t h = NULL;
    int fds = proc_count_fds(), fd = -1;

    /* The memfd is the only fd a handle holds, and free closes it. */
    CHECK_OK(zcopy_mem_create(&h, 2 * page, &host, 0));
    CHECK(proc_count_fds() == fds + 1);
    CHECK_OK(zcopy_mem_map(va, 2 * page, 0, h, 0));
    CHECK_OK(zcopy_mem_unmap(va));
    CHECK_OK(zcopy_mem_export(h, &fd));
    CHECK(proc_count_fds() == fds + 2);
    CHECK_OK(zcopy_mem_free(h));
    /* The exported fd is the caller's: it outlives the handle. */
    CHECK(proc_count_fds() == fds + 1);
    CHECK(close(fd) == 0);
    CHECK(proc_count_fds() == fds);

    one_cycle(va, 2 * page, 13);
    CHECK(proc_count_fds() == fds);
    CHECK(unit_range_reserved(va, 2 * page));
    CHECK_OK(zcopy_mem_release(va));
}

static void test_many_cycles(void)
{
    const size_t size = 4 * page;
    void *va = reserve(size);
    unsigned long failed = unit_failed;
    int fds;
    long maps;

    /* Warm up: the allocator may map its arenas on first use. */
    for (unsigned i = 0; i < 8; i++)
        one_cycle(va, size, i);
    fds = proc_count_fds();
    maps = unit_maps_lines();
    for (unsigned i = 0; i < 1000 && unit_failed == failed; i++)
        one_cycle(va, size, i);

    CHECK(proc_count_fds() == fds);
    CHECK(unit_maps_count("memfd:zcopy") == 0);
    CHECK(unit_range_reserved(va, size));
    /* A leak per cycle would show as ~1000 lines. A few lines of slack for
     * the C library's and the sanitizers' own allocator, which may map new
     * arenas while handles come and go. */
    CHECK(maps > 0 && unit_maps_lines() <= maps + 4);
    CHECK_OK(zcopy_mem_release(va));
}

int main(void)
{
    page = (size_t)sysconf(_SC_PAGESIZE);

    test_strerror();
    test_granularity();
    test_reserve_rejects();
    test_reserve_alignment();
    test_release();
    test_many_reservations();
    test_create_rejects();
    test_create_node0();
    test_create_sealed();
    test_create_beyond_memory();
    test_create_huge();
    test_free();
    test_map_rejects();
    test_map_adjacent();
    test_unmap();
    test_two_views();
    test_export_import_fork();
    test_export_rejects();
    test_import_rejects();
    test_fd_hygiene();
    test_many_cycles();

    /* Everything this test made was given back. */
    CHECK(unit_maps_count("memfd:zcopy") == 0);
    return unit_finish();
}
