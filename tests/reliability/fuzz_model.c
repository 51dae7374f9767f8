/*
 * The model behind the random drivers; see fuzz_model.h. The rules below
 * are SPEC sections 2 and 3 written as predicates over the model, one per
 * rule, each naming the code it stands for; they are deliberately not a
 * copy of zcopy's checking order.
 */
#include "fuzz_model.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *const op_names[FZ_NOPS] = {
    "reserve", "release", "create", "free", "map", "unmap", "export",
    "import", "get_size", "granularity", "set_range", "unset_range",
    "activate", "deactivate", "covers", "close_export",
};

#define TIB ((size_t)1 << 40)

/* --- randomness and failure ---------------------------------------------- */

uint64_t fz_rand(fz_model_t *m)
{
    /* xorshift64*: plenty for choosing calls, and reproducible by seed. */
    m->rng ^= m->rng >> 12;
    m->rng ^= m->rng << 25;
    m->rng ^= m->rng >> 27;
    return m->rng * 0x2545f4914f6cdd1dull;
}

static bool chance(fz_model_t *m, unsigned percent) { return fz_below(m, 100) < percent; }

/* What the model holds, and the calls that led there. */
static void dump(const fz_model_t *m)
{
    fprintf(stderr, "fuzz: the calls before:\n");
    for (unsigned long k = m->step > 8 ? m->step - 8 : 0; k < m->step; k++)
        if (m->history[k % 8][0])
            fprintf(stderr, "fuzz:   %s\n", m->history[k % 8]);
    fprintf(stderr, "fuzz: the model:\n");
    for (int i = 0; i < m->nresv; i++)
        fprintf(stderr, "fuzz:   reservation [%#" PRIxPTR ", %#" PRIxPTR ")\n",
                m->resv[i].va, m->resv[i].va + m->resv[i].size);
    for (int i = 0; i < m->nmaps; i++)
        fprintf(stderr, "fuzz:   mapping [%#" PRIxPTR ", %#" PRIxPTR ") of %p "
                "at %zu\n", m->maps[i].va, m->maps[i].va + m->maps[i].size,
                (void *)m->maps[i].h, m->maps[i].offset);
    for (int i = 0; i < m->nranges; i++)
        fprintf(stderr, "fuzz:   range [%#" PRIxPTR ", %#" PRIxPTR ")\n",
                m->ranges[i].base, m->ranges[i].base + m->ranges[i].size);
    for (int i = 0; i < m->nblocks; i++)
        fprintf(stderr, "fuzz:   block [%#" PRIxPTR ", %#" PRIxPTR ")\n",
                m->blocks[i].va, m->blocks[i].va + m->blocks[i].size);
}

void fz_fail(fz_model_t *m, const char *fmt, ...)
{
    va_list ap;

    fprintf(stderr, "fuzz: step %lu: %s\nfuzz: ", m->step, m->desc);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\nfuzz: last error: \"%s\"\n", zcopy_mem_last_error());
    dump(m);
    fflush(stderr);
    m->be.abort(m->be.ctx);
    abort(); /* the backend's abort does not return */
}

static void describe(fz_model_t *m, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void describe(fz_model_t *m, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(m->desc, sizeof(m->desc), fmt, ap);
    va_end(ap);
}

static void codes_text(fz_codes_t c, char *buf, size_t len)
{
    size_t at = 0;

    buf[0] = '\0';
    for (int k = 0; k < 16 && at < len; k++)
        if (c & (1u << k))
            at += (size_t)snprintf(buf + at, len - at, "%s%s", at ? " | " : "",
                                   k == 0 ? "SUCCESS" : zcopy_strerror(-k));
}

bool fz_verify(fz_model_t *m, fz_codes_t allowed, fz_codes_t got)
{
    char want[400], have[400];

    codes_text(allowed, want, sizeof(want));
    codes_text(got, have, sizeof(have));
    if (got == 0 || (got & ~FZ_DOCUMENTED) != 0)
        fz_fail(m, "returned %s, not a documented ZCOPY_ERR_* code", have);
    if ((got & allowed) == 0)
        fz_fail(m, "returned %s; the rules allow %s", have, want);
    /* (Through MPI, INTERNAL and SYSTEM are one class, MPI_ERR_OTHER.) */
    if (got == FZ_CODE(ZCOPY_ERR_INTERNAL))
        fz_fail(m, "ZCOPY_ERR_INTERNAL: a broken invariant");
    for (int k = 0; k < 16; k++)
        if (got == (1u << k))
            m->codes[k]++;
    m->last_ok = got == FZ_OK;
    return got == FZ_OK;
}

/* --- looking things up in the model -------------------------------------- */

static uintptr_t end_of(uintptr_t a, size_t len)
{
    return a + len < a ? UINTPTR_MAX : a + len; /* saturating */
}

static bool overlaps(uintptr_t a, size_t alen, uintptr_t b, size_t blen)
{
    return alen && blen && a < end_of(b, blen) && b < end_of(a, alen);
}

static bool inside(uintptr_t a, size_t alen, uintptr_t b, size_t blen)
{
    return a >= b && alen <= blen && a - b <= blen - alen;
}

static int find_resv(const fz_model_t *m, uintptr_t va, bool exact)
{
    for (int i = 0; i < m->nresv; i++)
        if (exact ? m->resv[i].va == va
                  : va - m->resv[i].va < m->resv[i].size)
            return i;
    return -1;
}

static int find_map(const fz_model_t *m, uintptr_t va, bool exact)
{
    for (int i = 0; i < m->nmaps; i++)
        if (exact ? m->maps[i].va == va : va - m->maps[i].va < m->maps[i].size)
            return i;
    return -1;
}

static int find_range(const fz_model_t *m, uintptr_t va, bool exact)
{
    for (int i = 0; i < m->nranges; i++)
        if (exact ? m->ranges[i].base == va
                  : va - m->ranges[i].base < m->ranges[i].size)
            return i;
    return -1;
}

static int find_block(const fz_model_t *m, uintptr_t va, bool exact)
{
    for (int i = 0; i < m->nblocks; i++)
        if (exact ? m->blocks[i].va == va : va - m->blocks[i].va < m->blocks[i].size)
            return i;
    return -1;
}

static int find_handle(const fz_model_t *m, zcopy_mem_handle_t h)
{
    for (int i = 0; h != NULL && i < m->nhandles; i++)
        if (m->handles[i].h == h)
            return i;
    return -1;
}

static int maps_of_handle(const fz_model_t *m, zcopy_mem_handle_t h)
{
    int n = 0;

    for (int i = 0; i < m->nmaps; i++)
        n += m->maps[i].h == h;
    return n;
}

static int maps_in(const fz_model_t *m, const fz_resv_t *r)
{
    int n = 0;

    for (int i = 0; i < m->nmaps; i++)
        n += inside(m->maps[i].va, m->maps[i].size, r->va, r->size);
    return n;
}

static int ranges_in(const fz_model_t *m, const fz_resv_t *r)
{
    int n = 0;

    for (int i = 0; i < m->nranges; i++)
        n += inside(m->ranges[i].base, m->ranges[i].size, r->va, r->size);
    return n;
}

static int blocks_in(const fz_model_t *m, const fz_range_t *r)
{
    int n = 0;

    for (int i = 0; i < m->nblocks; i++)
        n += m->blocks[i].range_base == r->base;
    return n;
}

bool fz_covers(const fz_model_t *m, uintptr_t buf, size_t len)
{
    uintptr_t at = buf, end = buf + len;
    int b;

    if (len == 0)
        return true;
    if (end < buf)
        return false;
    b = find_block(m, at, false);
    while (b >= 0) {
        uintptr_t bend = m->blocks[b].va + m->blocks[b].size;
        int next;

        if (bend >= end)
            return true;
        next = find_block(m, bend, true);
        if (next < 0 || m->blocks[next].range_base != m->blocks[b].range_base)
            return false;
        b = next;
    }
    return false;
}

/* --- removing from the model --------------------------------------------- */

#define REMOVE(_array, _n, _i) ((_array)[_i] = (_array)[--(_n)])

static void forget_freed(fz_model_t *m, zcopy_mem_handle_t h)
{
    for (int i = 0; i < m->nfreed; i++)
        if (m->freed[i] == h)
            REMOVE(m->freed, m->nfreed, i--);
}

/* --- drawing arguments --------------------------------------------------- */

/* Somewhere interesting: inside, at the edges of and around the objects. */
static uintptr_t pick_va(fz_model_t *m)
{
    static char heap_page[1 << 16] __attribute__((aligned(1 << 16)));
    unsigned r = fz_below(m, 100);

    if (r < 35 && m->nresv) {
        const fz_resv_t *v = &m->resv[fz_below(m, (unsigned)m->nresv)];
        return v->va + (fz_rand(m) % (v->size / m->page)) * m->page;
    }
    if (r < 50 && m->nmaps)
        return m->maps[fz_below(m, (unsigned)m->nmaps)].va;
    if (r < 62 && m->nblocks)
        return m->blocks[fz_below(m, (unsigned)m->nblocks)].va;
    if (r < 68 && m->nranges)
        return m->ranges[fz_below(m, (unsigned)m->nranges)].base;
    if (r < 74 && m->nresv)
        return m->resv[fz_below(m, (unsigned)m->nresv)].va;
    if (r < 80 && m->nresv) {
        const fz_resv_t *v = &m->resv[fz_below(m, (unsigned)m->nresv)];
        return v->va + fz_rand(m) % v->size; /* mostly unaligned */
    }
    if (r < 86 && m->nresv) {
        const fz_resv_t *v = &m->resv[fz_below(m, (unsigned)m->nresv)];
        return chance(m, 50) ? v->va - m->page : v->va + v->size;
    }
    if (r < 89)
        return 0;
    if (r < 92)
        return UINTPTR_MAX - m->page + 1; /* anything from here wraps */
    if (r < 95)
        return (uintptr_t)heap_page; /* ordinary memory, not zcopy's */
    return (uintptr_t)0x10000 + (fz_rand(m) % 64) * m->page;
}

/* A size for something at @va: exact, to the end, past it, 0, odd, huge. */
static size_t pick_size(fz_model_t *m, uintptr_t va)
{
    unsigned r = fz_below(m, 100);
    int i;

    if (r < 30)
        return (1 + fz_below(m, 8)) * m->page;
    if (r < 50) {
        if ((i = find_map(m, va, false)) >= 0)
            return m->maps[i].va + m->maps[i].size - va;
        if ((i = find_block(m, va, false)) >= 0)
            return m->blocks[i].va + m->blocks[i].size - va;
        if ((i = find_resv(m, va, false)) >= 0)
            return m->resv[i].va + m->resv[i].size - va;
        return m->page;
    }
    if (r < 58 && (i = find_resv(m, va, false)) >= 0)
        return m->resv[i].va + m->resv[i].size - va + m->page; /* past */
    if (r < 66 && (i = find_range(m, va, false)) >= 0)
        return m->ranges[i].base + m->ranges[i].size - va;
    if (r < 71)
        return 0;
    if (r < 78)
        return fz_below(m, 8) * m->page + 1 + fz_below(m, (unsigned)m->page - 1);
    if (r < 82) {
        static const size_t huge[] = { SIZE_MAX, SIZE_MAX / 2 + 1,
                                       (size_t)1 << 62 };
        return huge[fz_below(m, 3)] & ~(m->page - 1);
    }
    if (r < 90 && m->nhandles)
        return m->handles[fz_below(m, (unsigned)m->nhandles)].size;
    return (1 + fz_below(m, 64)) * m->page;
}

static zcopy_mem_handle_t pick_handle(fz_model_t *m)
{
    static char bogus[64];
    unsigned r = fz_below(m, 100);

    if (r < 75 && m->nhandles)
        return m->handles[fz_below(m, (unsigned)m->nhandles)].h;
    if (r < 85 && m->nfreed)
        return m->freed[fz_below(m, (unsigned)m->nfreed)];
    if (r < 93)
        return NULL;
    return (zcopy_mem_handle_t)(void *)bogus; /* never a handle */
}

/* Properties, valid or not, with the granularity and outcome they imply. */
typedef struct {
    zcopy_mem_prop_t prop;
    bool null;
    fz_codes_t bad;               /* rules the properties break */
    bool maybe;                   /* huge pages: the machine decides */
    size_t gran;
} fz_prop_t;

static fz_prop_t pick_prop(fz_model_t *m)
{
    fz_prop_t p = { .prop = { .kind = ZCOPY_MEM_HOST, .device = -1 },
                    .gran = m->page };
    unsigned r = fz_below(m, 100);

    if (r < 3) {
        p.null = true;
        p.bad = FZ_CODE(ZCOPY_ERR_ARG);
    } else if (r < 6) {
        p.prop.kind = ZCOPY_MEM_CUDA; /* fz_init saw it is unavailable */
        p.bad = FZ_CODE(ZCOPY_ERR_UNSUPPORTED);
    } else if (r < 8) {
        p.prop.kind = (zcopy_mem_kind_t)7;
        p.bad = FZ_CODE(ZCOPY_ERR_ARG);
    } else if (r < 11) {
        p.prop.flags = 0x100;
        p.bad = FZ_CODE(ZCOPY_ERR_ARG);
    } else if (r < 14) {
        p.prop.flags = ZCOPY_MEM_HUGE;
        p.gran = m->huge;
        p.maybe = true;
    } else if (r < 17) {
        p.prop.device = 0;
        if (!m->node0)
            p.bad = FZ_CODE(ZCOPY_ERR_ARG) | FZ_CODE(ZCOPY_ERR_UNSUPPORTED);
    } else if (r < 20) {
        p.prop.device = chance(m, 50) ? 4096 : -2;
        p.bad = FZ_CODE(ZCOPY_ERR_ARG);
    }
    return p;
}

/* --- the calls ----------------------------------------------------------- */

/* The outcome the rules allow: the codes of the broken rules, or success
 * (with @maybe, the codes the machine may answer instead). */
static fz_codes_t outcome(fz_codes_t broken, fz_codes_t maybe)
{
    return broken ? broken : FZ_OK | maybe;
}

static uint64_t ino_of_fd(int fd)
{
    struct stat st;

    return fstat(fd, &st) == 0 ? (uint64_t)st.st_ino : 0;
}

static void op_reserve(fz_model_t *m)
{
    static const size_t aligns[] = { 0, 0, 0, 0, 4096, 65536, 2u << 20,
                                     1u << 30, 3 * 4096, 2048,
                                     SIZE_MAX / 2 + 1 };
    bool null_out = chance(m, 2);
    size_t size = chance(m, 80) ? (1 + fz_below(m, 64)) * m->page
                                : pick_size(m, 0);
    size_t alignment = aligns[fz_below(m, sizeof(aligns) / sizeof(aligns[0]))];
    uint64_t flags = chance(m, 3) ? 1 : 0;
    void *hint = chance(m, 10) ? (void *)pick_va(m) : NULL;
    fz_codes_t broken = 0, maybe = 0, got;
    void *va = NULL;
    int rc;

    if (chance(m, 2))
        size = TIB; /* address space only: fine, or not on this machine */
    if (null_out || flags)
        broken |= FZ_CODE(ZCOPY_ERR_ARG);
    if (size == 0)
        broken |= FZ_CODE(ZCOPY_ERR_ARG);
    if (size % m->page || size > SIZE_MAX / 2 || alignment > SIZE_MAX / 2 ||
        (alignment && (alignment % m->page || (alignment & (alignment - 1)))))
        broken |= FZ_CODE(ZCOPY_ERR_RANGE);
    if (!broken && size + alignment > TIB / 2)
        maybe = FZ_CODE(ZCOPY_ERR_NOMEM);
    if (!broken && m->nresv == FZ_MAX_RESV)
        return;
    describe(m, "zcopy_mem_reserve(%s, %zu, alignment %zu, hint %p, flags "
             "%" PRIu64 ")", null_out ? "NULL" : "&va", size, alignment, hint,
             flags);
    rc = zcopy_mem_reserve(null_out ? NULL : &va, size, alignment, hint, flags);
    got = fz_code(rc);
    if (!fz_verify(m, outcome(broken, maybe), got))
        return;
    if ((uintptr_t)va % (alignment ? alignment : m->page))
        fz_fail(m, "returned %p, not aligned", va);
    for (int i = 0; i < m->nresv; i++)
        if (overlaps((uintptr_t)va, size, m->resv[i].va, m->resv[i].size))
            fz_fail(m, "returned %p, overlapping reservation %#" PRIxPTR, va,
                    m->resv[i].va);
    m->resv[m->nresv++] = (fz_resv_t){ .va = (uintptr_t)va, .size = size };
}

/* Half the time the start of an existing object, so that the calls that
 * undo things get to succeed as often as those that make them. */
#define PICK_START(_m, _array, _n, _field)                                   \
    ((_n) && chance((_m), 50) ? (_array)[fz_below((_m), (unsigned)(_n))]._field \
                              : pick_va(_m))

static void op_release(fz_model_t *m)
{
    uintptr_t va = PICK_START(m, m->resv, m->nresv, va);
    int i = find_resv(m, va, true);
    fz_codes_t broken = 0;

    if (i < 0)
        broken |= FZ_CODE(ZCOPY_ERR_NOT_FOUND);
    else if (maps_in(m, &m->resv[i]) || ranges_in(m, &m->resv[i]))
        broken |= FZ_CODE(ZCOPY_ERR_BUSY);
    describe(m, "zcopy_mem_release(%#" PRIxPTR ")", va);
    if (fz_verify(m, outcome(broken, 0),
                  fz_code(zcopy_mem_release((void *)va))))
        REMOVE(m->resv, m->nresv, i);
}

/* A new live handle into the model, its identity learnt by export. */
static void add_handle(fz_model_t *m, zcopy_mem_handle_t h, size_t size,
                       size_t gran)
{
    size_t got_size = 0;
    int fd = -1;

    if (zcopy_mem_export(h, &fd) != ZCOPY_SUCCESS)
        fz_fail(m, "export of the new handle %p failed", (void *)h);
    if (zcopy_mem_get_size(h, &got_size) != ZCOPY_SUCCESS || got_size != size)
        fz_fail(m, "the new handle holds %zu bytes, not %zu", got_size, size);
    forget_freed(m, h);
    m->handles[m->nhandles++] = (fz_handle_t){ .h = h, .size = size,
                                               .gran = gran,
                                               .ino = ino_of_fd(fd) };
    close(fd);
}

static void op_create(fz_model_t *m)
{
    fz_prop_t p = pick_prop(m);
    bool null_out = chance(m, 2);
    uint64_t flags = chance(m, 3) ? 2 : 0;
    size_t size;
    fz_codes_t broken = p.bad, maybe = 0;
    zcopy_mem_handle_t h = NULL;
    int rc;

    /* Small: the pages are really allocated. Absurd sizes fail before. */
    if (p.gran == m->huge)
        size = chance(m, 80) ? m->huge : m->page;
    else if (chance(m, 85))
        size = (1 + fz_below(m, 16)) * m->page;
    else if (chance(m, 40))
        size = 0;
    else if (chance(m, 50))
        size = m->page + 1 + fz_below(m, 100);
    else
        size = SIZE_MAX & ~(m->huge - 1);
    if (null_out || flags || size == 0)
        broken |= FZ_CODE(ZCOPY_ERR_ARG);
    if (!p.null && size % p.gran)
        broken |= FZ_CODE(ZCOPY_ERR_RANGE);
    if (size > SIZE_MAX / 2) /* more than any machine has */
        broken |= FZ_CODE(ZCOPY_ERR_NOMEM) | FZ_CODE(ZCOPY_ERR_RANGE);
    if (!broken && p.maybe)
        maybe = FZ_CODE(ZCOPY_ERR_NOMEM) | FZ_CODE(ZCOPY_ERR_UNSUPPORTED);
    if (!broken && m->nhandles == FZ_MAX_HANDLES)
        return;
    describe(m, "zcopy_mem_create(%s, %zu, %s{kind %d, device %d, flags %#x}, "
             "flags %" PRIu64 ")", null_out ? "NULL" : "&h", size,
             p.null ? "NULL " : "", (int)p.prop.kind, p.prop.device,
             p.prop.flags, flags);
    rc = zcopy_mem_create(null_out ? NULL : &h, size, p.null ? NULL : &p.prop,
                          flags);
    if (fz_verify(m, outcome(broken, maybe), fz_code(rc)))
        add_handle(m, h, size, p.gran);
}

static void op_free(fz_model_t *m)
{
    zcopy_mem_handle_t h = pick_handle(m);
    int i = find_handle(m, h);
    fz_codes_t broken = 0;
    int rc;

    if (h == NULL)
        broken |= FZ_CODE(ZCOPY_ERR_ARG);
    else if (i < 0)
        broken |= FZ_CODE(ZCOPY_ERR_NOT_FOUND);
    else if (maps_of_handle(m, h))
        broken |= FZ_CODE(ZCOPY_ERR_BUSY);
    describe(m, "zcopy_mem_free(%p)", (void *)h);
    rc = zcopy_mem_free(h);
    if (!fz_verify(m, outcome(broken, 0), fz_code(rc)))
        return;
    REMOVE(m->handles, m->nhandles, i);
    if (m->nfreed < FZ_MAX_FREED)
        m->freed[m->nfreed++] = h;
}

static void op_map(fz_model_t *m)
{
    zcopy_mem_handle_t h = pick_handle(m);
    int hi = find_handle(m, h), r;
    uintptr_t va = pick_va(m);
    size_t size = chance(m, 30) && hi >= 0 ? m->handles[hi].size
                                           : pick_size(m, va);
    size_t offset = 0;
    uint64_t flags = chance(m, 3) ? 4 : 0;
    fz_codes_t broken = 0;
    int rc;

    /* Often a whole handle placed in a set range, ready to be activated. */
    if (hi >= 0 && m->nranges && chance(m, 40)) {
        const fz_range_t *rg = &m->ranges[fz_below(m, (unsigned)m->nranges)];
        size = m->handles[hi].size;
        va = rg->base + fz_below(m, (unsigned)(rg->size / m->page)) * m->page;
        va -= va % m->handles[hi].gran;
    } else if (hi >= 0 && chance(m, 30)) {
        offset = chance(m, 80)
                     ? fz_below(m, (unsigned)(m->handles[hi].size / m->page + 1)) *
                           m->page
                     : m->page / 2;
    }
    if (flags || h == NULL || size == 0)
        broken |= FZ_CODE(ZCOPY_ERR_ARG);
    if (h != NULL && hi < 0)
        broken |= FZ_CODE(ZCOPY_ERR_NOT_FOUND);
    if (hi >= 0) {
        const fz_handle_t *hd = &m->handles[hi];
        if (va % hd->gran || size % hd->gran || offset % hd->gran ||
            offset > hd->size || size > hd->size - offset)
            broken |= FZ_CODE(ZCOPY_ERR_RANGE);
    }
    r = find_resv(m, va, false);
    if (r < 0)
        broken |= FZ_CODE(ZCOPY_ERR_NOT_FOUND);
    else if (!inside(va, size, m->resv[r].va, m->resv[r].size))
        broken |= FZ_CODE(ZCOPY_ERR_RANGE);
    for (int i = 0; i < m->nmaps; i++)
        if (overlaps(va, size, m->maps[i].va, m->maps[i].size))
            broken |= FZ_CODE(ZCOPY_ERR_OVERLAP);
    if (!broken && m->nmaps == FZ_MAX_MAPS)
        return;
    describe(m, "zcopy_mem_map(%#" PRIxPTR ", %zu, offset %zu, %p, flags %"
             PRIu64 ")", va, size, offset, (void *)h, flags);
    rc = zcopy_mem_map((void *)va, size, offset, h, flags);
    if (fz_verify(m, outcome(broken, 0), fz_code(rc)))
        m->maps[m->nmaps++] = (fz_map_t){ .va = va, .size = size,
                                          .offset = offset, .h = h };
}

static void op_unmap(fz_model_t *m)
{
    uintptr_t va = PICK_START(m, m->maps, m->nmaps, va);
    int i = find_map(m, va, true);
    fz_codes_t broken = 0;
    int rc;

    if (i < 0)
        broken |= FZ_CODE(ZCOPY_ERR_NOT_FOUND);
    else if (find_block(m, va, true) >= 0)
        broken |= FZ_CODE(ZCOPY_ERR_BUSY);
    describe(m, "zcopy_mem_unmap(%#" PRIxPTR ")", va);
    rc = zcopy_mem_unmap((void *)va);
    if (fz_verify(m, outcome(broken, 0), fz_code(rc)))
        REMOVE(m->maps, m->nmaps, i);
}

static void op_export(fz_model_t *m)
{
    zcopy_mem_handle_t h = pick_handle(m);
    int hi = find_handle(m, h), fd = -1, rc;
    bool null_out = chance(m, 5);
    fz_codes_t broken = 0;

    if (h == NULL || null_out)
        broken |= FZ_CODE(ZCOPY_ERR_ARG);
    else if (hi < 0)
        broken |= FZ_CODE(ZCOPY_ERR_NOT_FOUND);
    describe(m, "zcopy_mem_export(%p, %s)", (void *)h, null_out ? "NULL" : "&fd");
    rc = zcopy_mem_export(h, null_out ? NULL : &fd);
    if (!fz_verify(m, outcome(broken, 0), fz_code(rc)))
        return;
    if (ino_of_fd(fd) != m->handles[hi].ino)
        fz_fail(m, "exported fd %d is not the handle's memory", fd);
    if (m->nexports == FZ_MAX_EXPORTS) {
        close(fd);
        return;
    }
    m->exports[m->nexports++] = (fz_export_t){
        .fd = fd, .ino = m->handles[hi].ino, .size = m->handles[hi].size,
        .gran = m->handles[hi].gran };
}

static void op_import(fz_model_t *m)
{
    bool null_out = chance(m, 3);
    unsigned r = fz_below(m, 100);
    fz_codes_t broken = 0;
    zcopy_mem_handle_t h = NULL;
    size_t size = m->page, gran = m->page;
    const char *what;
    int fd, rc;

    if (r < 50 && m->nexports) {
        const fz_export_t *e = &m->exports[fz_below(m, (unsigned)m->nexports)];
        fd = e->fd;
        size = e->size;
        gran = e->gran;
        what = "an exported handle";
    } else if (r < 60) {
        fd = m->fd_plain;
        what = "a memfd of one page, not zcopy's";
    } else {
        static const char *const names[] = {
            "a pipe", "a regular file", "a memfd of 100 bytes",
            "an empty memfd", "a closed fd", "-1" };
        const int fds[] = { m->fd_pipe, m->fd_file, m->fd_odd, m->fd_empty,
                            m->fd_closed, -1 };
        unsigned k = fz_below(m, 6);
        fd = fds[k];
        what = names[k];
        broken |= FZ_CODE(ZCOPY_ERR_ARG);
    }
    if (null_out)
        broken |= FZ_CODE(ZCOPY_ERR_ARG);
    if (!broken && m->nhandles == FZ_MAX_HANDLES)
        return;
    describe(m, "zcopy_mem_import(%d: %s, %s)", fd, what,
             null_out ? "NULL" : "&h");
    rc = zcopy_mem_import(fd, null_out ? NULL : &h);
    if (!fz_verify(m, outcome(broken, 0), fz_code(rc)))
        return;
    add_handle(m, h, size, gran);
    /* Imported memory is the exporter's: same inode. */
    if (m->handles[m->nhandles - 1].ino != ino_of_fd(fd))
        fz_fail(m, "the imported handle is not the memory behind fd %d", fd);
}

static void op_get_size(fz_model_t *m)
{
    zcopy_mem_handle_t h = pick_handle(m);
    int hi = find_handle(m, h), rc;
    bool null_out = chance(m, 5);
    fz_codes_t broken = 0;
    size_t size = 0;

    if (h == NULL || null_out)
        broken |= FZ_CODE(ZCOPY_ERR_ARG);
    else if (hi < 0)
        broken |= FZ_CODE(ZCOPY_ERR_NOT_FOUND);
    describe(m, "zcopy_mem_get_size(%p, %s)", (void *)h,
             null_out ? "NULL" : "&size");
    rc = zcopy_mem_get_size(h, null_out ? NULL : &size);
    if (fz_verify(m, outcome(broken, 0), fz_code(rc)) &&
        size != m->handles[hi].size)
        fz_fail(m, "size %zu, expected %zu", size, m->handles[hi].size);
}

static void op_granularity(fz_model_t *m)
{
    fz_prop_t p = pick_prop(m);
    bool null_out = chance(m, 5);
    fz_codes_t broken = p.bad;
    size_t gran = 0;
    int rc;

    if (null_out)
        broken |= FZ_CODE(ZCOPY_ERR_ARG);
    describe(m, "zcopy_mem_granularity(%s{kind %d, device %d, flags %#x}, %s)",
             p.null ? "NULL " : "", (int)p.prop.kind, p.prop.device,
             p.prop.flags, null_out ? "NULL" : "&gran");
    rc = zcopy_mem_granularity(p.null ? NULL : &p.prop,
                               null_out ? NULL : &gran);
    if (fz_verify(m, outcome(broken, 0), fz_code(rc)) &&
        gran != p.gran)
        fz_fail(m, "granularity %zu, expected %zu", gran, p.gran);
}

void fz_gen_set_range(fz_model_t *m, void **base, size_t *size,
                      size_t *alignment, uint64_t *flags)
{
    uintptr_t va = pick_va(m);

    /* Often a whole reservation, or its first pages; one without a range
     * yet, when there is one. */
    if (m->nresv && chance(m, 50)) {
        const fz_resv_t *r = &m->resv[fz_below(m, (unsigned)m->nresv)];
        for (int i = 0; i < m->nresv && ranges_in(m, r); i++)
            r = &m->resv[i];
        va = r->va;
        *size = chance(m, 50) ? r->size
                              : (1 + fz_below(m, (unsigned)(r->size / m->page))) *
                                    m->page;
    } else {
        *size = pick_size(m, va);
    }
    *base = (void *)va;
    *alignment = m->be.mpix && chance(m, 3) ? m->page : 0;
    *flags = m->be.mpix && chance(m, 3) ? 1 : 0;
}

fz_codes_t fz_expect_set_range(const fz_model_t *m, uintptr_t base,
                               size_t size, size_t alignment, uint64_t flags)
{
    fz_codes_t broken = 0;
    int r;

    if (alignment || flags || base == 0 || size == 0)
        broken |= FZ_CODE(ZCOPY_ERR_ARG);
    if (base % m->page || size % m->page || base + size < base)
        broken |= FZ_CODE(ZCOPY_ERR_RANGE);
    for (int i = 0; i < m->nranges; i++)
        if (overlaps(base, size, m->ranges[i].base, m->ranges[i].size))
            broken |= FZ_CODE(ZCOPY_ERR_OVERLAP);
    r = find_resv(m, base, false);
    if (r < 0)
        broken |= FZ_CODE(ZCOPY_ERR_NOT_FOUND);
    else if (!inside(base, size, m->resv[r].va, m->resv[r].size))
        broken |= FZ_CODE(ZCOPY_ERR_RANGE);
    if (!broken && m->nranges == FZ_MAX_RANGES)
        return 0; /* the driver must not make this call */
    return outcome(broken, 0);
}

void fz_apply_set_range(fz_model_t *m, uintptr_t base, size_t size)
{
    m->ranges[m->nranges++] = (fz_range_t){ .base = base, .size = size };
}

static void op_set_range(fz_model_t *m)
{
    size_t size, alignment;
    uint64_t flags;
    fz_codes_t expect;
    void *base;

    fz_gen_set_range(m, &base, &size, &alignment, &flags);
    expect = fz_expect_set_range(m, (uintptr_t)base, size, alignment, flags);
    if (expect == 0)
        return;
    describe(m, "set_memory_range(%p, %zu, alignment %zu, flags %" PRIu64 ")",
             base, size, alignment, flags);
    if (fz_verify(m, expect,
                  m->be.set_range(m->be.ctx, base, size, alignment, flags)))
        fz_apply_set_range(m, (uintptr_t)base, size);
}

static void op_unset_range(fz_model_t *m)
{
    uintptr_t base = PICK_START(m, m->ranges, m->nranges, base);
    int i = find_range(m, base, true);
    fz_codes_t broken = 0;

    if (i < 0)
        broken |= FZ_CODE(ZCOPY_ERR_NOT_FOUND);
    else if (blocks_in(m, &m->ranges[i]))
        broken |= FZ_CODE(ZCOPY_ERR_BUSY);
    describe(m, "unset_memory_range(%#" PRIxPTR ")", base);
    if (fz_verify(m, outcome(broken, 0),
                  m->be.unset_range(m->be.ctx, (void *)base)))
        REMOVE(m->ranges, m->nranges, i);
}

static void op_activate(fz_model_t *m)
{
    uintptr_t va = PICK_START(m, m->maps, m->nmaps, va);
    size_t size = pick_size(m, va), offset = 0;
    zcopy_mem_handle_t h = pick_handle(m);
    int mi = find_map(m, va, true), r;
    uint64_t flags = 0;
    fz_codes_t broken = 0;

    /* Most often the very mapping at va, so that activation happens. */
    if (mi >= 0 && chance(m, 60)) {
        h = m->maps[mi].h;
        size = m->maps[mi].size;
    }
    if (m->be.mpix && chance(m, 3))
        offset = m->page;
    if (m->be.mpix && chance(m, 3))
        flags = 8;
    if (offset || flags || h == NULL || size == 0)
        broken |= FZ_CODE(ZCOPY_ERR_ARG);
    r = find_range(m, va, false);
    if (va + size < va || r < 0 ||
        !inside(va, size, m->ranges[r].base, m->ranges[r].size))
        broken |= FZ_CODE(ZCOPY_ERR_RANGE);
    for (int i = 0; i < m->nblocks; i++)
        if (overlaps(va, size, m->blocks[i].va, m->blocks[i].size))
            broken |= FZ_CODE(ZCOPY_ERR_OVERLAP);
    /* Exactly one mapping of the handle at offset 0. */
    if (find_handle(m, h) < 0 || mi < 0 || m->maps[mi].h != h ||
        m->maps[mi].size != size || m->maps[mi].offset != 0)
        broken |= FZ_CODE(ZCOPY_ERR_ARG);
    if (!broken && m->nblocks == FZ_MAX_BLOCKS)
        return;
    describe(m, "activate_memory(%#" PRIxPTR ", %zu, offset %zu, %p, flags %"
             PRIu64 ")", va, size, offset, (void *)h, flags);
    if (fz_verify(m, outcome(broken, 0),
                  m->be.activate(m->be.ctx, (void *)va, size, offset, h,
                                 flags)))
        m->blocks[m->nblocks++] = (fz_block_t){
            .va = va, .size = size, .range_base = m->ranges[r].base,
            .range_size = m->ranges[r].size, .h = h,
            .order = m->next_order++ };
}

static void op_deactivate(fz_model_t *m)
{
    uintptr_t va = PICK_START(m, m->blocks, m->nblocks, va);
    int i = find_block(m, va, true);

    describe(m, "deactivate_memory(%#" PRIxPTR ")", va);
    if (fz_verify(m, i < 0 ? FZ_CODE(ZCOPY_ERR_NOT_FOUND) : FZ_OK,
                  m->be.deactivate(m->be.ctx, (void *)va)))
        REMOVE(m->blocks, m->nblocks, i);
}

static bool expect_covers(const fz_model_t *m, uintptr_t buf, size_t len)
{
    if (m->be.mpix && (buf == 0 || len == 0))
        return false; /* MPIX_Zcopy_query: nothing is activated */
    return fz_covers(m, buf, len);
}

static void query(fz_model_t *m, uintptr_t buf, size_t len)
{
    bool want = expect_covers(m, buf, len), got;

    describe(m, "covers(%#" PRIxPTR ", %zu)", buf, len);
    got = m->be.covers(m->be.ctx, (const void *)buf, len);
    if (got != want)
        fz_fail(m, "answered %s", got ? "activated" : "not activated");
    m->last_ok = got;
}

static void op_covers(fz_model_t *m)
{
    uintptr_t va = pick_va(m);

    query(m, va, pick_size(m, va) + (chance(m, 30) ? 1 : 0));
}

static void op_close_export(fz_model_t *m)
{
    if (m->nexports == 0)
        return;
    close(m->exports[--m->nexports].fd);
}

/* --- steps ---------------------------------------------------------------- */

void fz_step(fz_model_t *m)
{
    static void (*const ops[FZ_NOPS])(fz_model_t *) = {
        op_reserve, op_release, op_create, op_free, op_map, op_unmap,
        op_export, op_import, op_get_size, op_granularity, op_set_range,
        op_unset_range, op_activate, op_deactivate, op_covers,
        op_close_export,
    };
    static const unsigned default_weights[FZ_NOPS] = {
        8, 5, 9, 6, 14, 7, 3, 4, 2, 2, 8, 5, 16, 8, 6, 1,
    };
    const unsigned *weights = m->be.weights ? m->be.weights : default_weights;
    unsigned total = 0, pick, op = 0;

    for (unsigned i = 0; i < FZ_NOPS; i++)
        total += i == FZ_OP_SET_RANGE && !m->be.local_ranges ? 0 : weights[i];
    pick = fz_below(m, total);
    for (;; op++) {
        unsigned w = op == FZ_OP_SET_RANGE && !m->be.local_ranges ? 0
                                                                  : weights[op];
        if (pick < w)
            break;
        pick -= w;
    }
    m->step++;
    m->desc[0] = '\0';
    m->last_ok = false;
    ops[op](m);
    if (m->desc[0]) { /* the op made a call */
        m->calls[op]++;
        m->oks[op] += m->last_ok;
    }
    snprintf(m->history[m->step % 8], sizeof(m->history[0]), "%lu: %s -> %s",
             m->step, m->desc[0] ? m->desc : "(no call)",
             m->last_ok ? "ok" : "failed");
}

/* --- checks against zcopy ----------------------------------------------- */

void fz_check_covers(fz_model_t *m, int random_queries)
{
    for (int i = 0; i < m->nblocks; i++) {
        const fz_block_t *b = &m->blocks[i];
        query(m, b->va, b->size);
        query(m, b->va, b->size + 1);
        query(m, b->va - 1, 2);
        query(m, b->va + b->size - 1, 2);
    }
    for (int i = 0; i < random_queries; i++)
        op_covers(m);
}

typedef struct {
    uintptr_t lo, hi;
    char perms[5];
    unsigned long long offset;
    unsigned long long inode;
    bool zcopy;                   /* a memfd named "zcopy" */
} maps_line_t;

#define MAX_LINES 8192

static int read_maps(maps_line_t *lines)
{
    static char buf[4 << 20];
    size_t len = 0;
    ssize_t got;
    int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC), n = 0;

    if (fd < 0)
        return -1;
    while ((got = read(fd, buf + len, sizeof(buf) - 1 - len)) > 0)
        len += (size_t)got;
    close(fd);
    buf[len] = '\0';
    for (char *line = buf; *line && n < MAX_LINES;) {
        char *eol = strchr(line, '\n');
        maps_line_t *l = &lines[n];

        if (eol)
            *eol = '\0';
        if (sscanf(line, "%" SCNxPTR "-%" SCNxPTR " %4s %llx %*s %llu",
                   &l->lo, &l->hi, l->perms, &l->offset, &l->inode) == 5) {
            l->zcopy = strstr(line, "/memfd:zcopy ") != NULL;
            n++;
        }
        line = eol ? eol + 1 : line + strlen(line);
    }
    return n;
}

static int line_at(const maps_line_t *lines, int n, uintptr_t at)
{
    int lo = 0, hi = n;

    while (lo < hi) { /* /proc/self/maps is sorted */
        int mid = (lo + hi) / 2;
        if (lines[mid].hi <= at)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < n && lines[lo].lo <= at ? lo : -1;
}

void fz_check_maps(fz_model_t *m)
{
    static maps_line_t lines[MAX_LINES];
    int n = read_maps(lines);

    m->desc[0] = '\0';
    snprintf(m->desc, sizeof(m->desc), "checking /proc/self/maps");
    if (n <= 0)
        fz_fail(m, "cannot read /proc/self/maps");
    for (int r = 0; r < m->nresv; r++) {
        uintptr_t at = m->resv[r].va, end = at + m->resv[r].size;

        while (at < end) {
            int l = line_at(lines, n, at), mi = find_map(m, at, false);
            uintptr_t seg_end = end;

            if (l < 0)
                fz_fail(m, "%#" PRIxPTR " of reservation [%#" PRIxPTR ", +%zu) "
                        "is not mapped at all", at, m->resv[r].va,
                        m->resv[r].size);
            if (mi >= 0) {
                const fz_map_t *mp = &m->maps[mi];
                const fz_handle_t *h = &m->handles[find_handle(m, mp->h)];
                unsigned long long off = lines[l].offset + (at - lines[l].lo);

                seg_end = mp->va + mp->size;
                if (strcmp(lines[l].perms, "rw-s") || lines[l].inode != h->ino ||
                    off != mp->offset + (at - mp->va))
                    fz_fail(m, "%#" PRIxPTR ", mapped to handle %p (inode %llu) "
                            "at offset %zu, shows %s, inode %llu, offset %llu",
                            at, (void *)mp->h, (unsigned long long)h->ino,
                            mp->offset + (at - mp->va), lines[l].perms,
                            lines[l].inode, off);
            } else {
                for (int i = 0; i < m->nmaps; i++)
                    if (m->maps[i].va > at && m->maps[i].va < seg_end)
                        seg_end = m->maps[i].va;
                if (strcmp(lines[l].perms, "---p") || lines[l].inode != 0)
                    fz_fail(m, "%#" PRIxPTR ", in reservation [%#" PRIxPTR
                            ", +%zu) and mapped to nothing, shows %s, inode "
                            "%llu instead of PROT_NONE", at, m->resv[r].va,
                            m->resv[r].size, lines[l].perms, lines[l].inode);
            }
            at = lines[l].hi < seg_end ? lines[l].hi : seg_end;
        }
    }
    /* zcopy memory mapped outside the reservations: a leak. (One line may
     * span adjacent reservations: the kernel merges mappings of one file
     * at consecutive offsets.) */
    for (int l = 0; m->be.strict_maps && l < n; l++) {
        uintptr_t at = lines[l].lo;
        int r;

        while (lines[l].zcopy && at < lines[l].hi &&
               (r = find_resv(m, at, false)) >= 0)
            at = m->resv[r].va + m->resv[r].size;
        if (lines[l].zcopy && at < lines[l].hi)
            fz_fail(m, "zcopy memory mapped at [%#" PRIxPTR ", %#" PRIxPTR
                    ") outside every reservation", at, lines[l].hi);
    }
}

/* --- set-up and teardown ------------------------------------------------- */

static int make_memfd(const char *name, off_t size)
{
    int fd = memfd_create(name, MFD_CLOEXEC);

    if (fd >= 0 && ftruncate(fd, size) != 0) {
        close(fd);
        fd = -1;
    }
    return fd;
}

void fz_init(fz_model_t *m, const fz_backend_t *be, uint64_t seed)
{
    const zcopy_mem_prop_t cuda = { .kind = ZCOPY_MEM_CUDA };
    int p[2] = { -1, -1 };
    size_t g;

    memset(m, 0, sizeof(*m));
    m->be = *be;
    m->rng = seed * 0x9e3779b97f4a7c15ull + 0x632be59bd9b4e019ull;
    if (m->rng == 0)
        m->rng = 1;
    m->page = (size_t)sysconf(_SC_PAGESIZE);
    m->huge = 2u << 20;
    m->node0 = access("/sys/devices/system/node/node0", F_OK) == 0;
    m->next_order = 1;
    snprintf(m->desc, sizeof(m->desc), "set-up");
    if (zcopy_mem_granularity(&cuda, &g) != ZCOPY_ERR_UNSUPPORTED)
        fz_fail(m, "this driver assumes ZCOPY_MEM_CUDA is unavailable");
    if (pipe2(p, O_CLOEXEC) != 0)
        fz_fail(m, "pipe: %s", strerror(errno));
    m->fd_pipe = p[0];
    close(p[1]);
    m->fd_file = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
    m->fd_odd = make_memfd("rel-fuzz-odd", 100);
    m->fd_empty = make_memfd("rel-fuzz-empty", 0);
    m->fd_plain = make_memfd("rel-fuzz-plain", (off_t)m->page);
    m->fd_closed = 999; /* not open: far above what this process opens */
    if (fcntl(m->fd_closed, F_GETFD) >= 0)
        fz_fail(m, "fd %d is open", m->fd_closed);
    if (m->fd_file < 0 || m->fd_odd < 0 || m->fd_empty < 0 || m->fd_plain < 0)
        fz_fail(m, "fixture fds: %s", strerror(errno));
}

static void must(fz_model_t *m, fz_codes_t got)
{
    fz_verify(m, FZ_OK, got);
}

void fz_teardown(fz_model_t *m)
{
    while (m->nblocks) {
        fz_block_t *b = &m->blocks[m->nblocks - 1];
        describe(m, "teardown: deactivate_memory(%#" PRIxPTR ")", b->va);
        must(m, m->be.deactivate(m->be.ctx, (void *)b->va));
        m->nblocks--;
    }
    while (m->nmaps) {
        fz_map_t *mp = &m->maps[m->nmaps - 1];
        describe(m, "teardown: zcopy_mem_unmap(%#" PRIxPTR ")", mp->va);
        must(m, fz_code(zcopy_mem_unmap((void *)mp->va)));
        m->nmaps--;
    }
    while (m->nhandles) {
        fz_handle_t *h = &m->handles[m->nhandles - 1];
        describe(m, "teardown: zcopy_mem_free(%p)", (void *)h->h);
        must(m, fz_code(zcopy_mem_free(h->h)));
        if (m->nfreed < FZ_MAX_FREED)
            m->freed[m->nfreed++] = h->h;
        m->nhandles--;
    }
    while (m->nranges) {
        fz_range_t *r = &m->ranges[m->nranges - 1];
        describe(m, "teardown: unset_memory_range(%#" PRIxPTR ")", r->base);
        must(m, m->be.unset_range(m->be.ctx, (void *)r->base));
        m->nranges--;
    }
    while (m->nresv) {
        fz_resv_t *r = &m->resv[m->nresv - 1];
        describe(m, "teardown: zcopy_mem_release(%#" PRIxPTR ")", r->va);
        must(m, fz_code(zcopy_mem_release((void *)r->va)));
        m->nresv--;
    }
    while (m->nexports)
        op_close_export(m);
}

void fz_fini(fz_model_t *m)
{
    fz_teardown(m);
    close(m->fd_pipe);
    close(m->fd_file);
    close(m->fd_odd);
    close(m->fd_empty);
    close(m->fd_plain);
}

void fz_print_stats(const fz_model_t *m, const char *who)
{
    printf("%s: %lu steps; calls (succeeded/made):", who, m->step);
    for (int i = 0; i < FZ_NOPS; i++)
        if (m->calls[i])
            printf(" %s %lu/%lu", op_names[i], m->oks[i], m->calls[i]);
    printf("\n%s: outcomes:", who);
    for (int k = 0; k < 16; k++)
        if (m->codes[k])
            printf(" %s %lu", k ? zcopy_strerror(-k) : "SUCCESS", m->codes[k]);
    printf("\n");
}
