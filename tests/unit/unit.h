/*
 * A tiny harness for the unit tests (no MPI): counted checks that print
 * file:line on failure, helpers that look at the process from /proc, and
 * one summary line at the end.
 *
 *   CHECK(cond)                      cond is true
 *   CHECK_OK(call)                   call returns ZCOPY_SUCCESS
 *   CHECK_ERR(call, code, "text")    call returns code and
 *                                    zcopy_mem_last_error() contains "text"
 *   KNOWN_BUG(cond, "why")           a check that fails because of a bug
 *                                    reported but not yet fixed: printed,
 *                                    never counted; turn it into CHECK once
 *                                    the fix is in
 *   return unit_finish();            prints "N passed, N failed"; non-zero
 *                                    exit if anything failed or nothing was
 *                                    checked
 *
 * Everything is static inline: each test is one translation unit.
 */
#ifndef ZCOPY_UNIT_H
#define ZCOPY_UNIT_H

#include <zcopy/mem.h>

#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/proc.h"

static unsigned long unit_passed, unit_failed;

static inline bool unit_check(bool ok, const char *file, int line,
                              const char *expr)
{
    if (ok) {
        unit_passed++;
    } else {
        unit_failed++;
        fprintf(stderr, "%s:%d: FAILED: %s\n", file, line, expr);
    }
    return ok;
}

static inline bool unit_check_err(int got, int want, const char *substr,
                                  const char *file, int line, const char *expr)
{
    const char *detail = zcopy_mem_last_error();
    bool ok = got == want && (substr == NULL || strstr(detail, substr) != NULL);

    if (ok) {
        unit_passed++;
        return true;
    }
    unit_failed++;
    fprintf(stderr,
            "%s:%d: FAILED: %s\n    returned %d (%s)\n    expected %d (%s)\n"
            "    last error: \"%s\"%s%s%s\n",
            file, line, expr, got, zcopy_strerror(got), want,
            zcopy_strerror(want), detail,
            substr ? ", expected to contain \"" : "", substr ? substr : "",
            substr ? "\"" : "");
    return false;
}

#define CHECK(cond) unit_check((cond) ? true : false, __FILE__, __LINE__, #cond)
#define CHECK_ERR(call, code, substr)                                        \
    unit_check_err((call), (code), (substr), __FILE__, __LINE__, #call)
#define CHECK_OK(call) CHECK_ERR(call, ZCOPY_SUCCESS, NULL)

static inline void unit_known_bug(bool ok, const char *file, int line,
                                  const char *expr, const char *why)
{
    if (ok)
        fprintf(stderr, "%s:%d: known bug no longer reproduces (%s); make "
                "this a CHECK: %s\n", file, line, why, expr);
    else
        fprintf(stderr, "%s:%d: known bug, not counted (%s): %s\n", file,
                line, why, expr);
}
#define KNOWN_BUG(cond, why)                                                 \
    unit_known_bug((cond) ? true : false, __FILE__, __LINE__, #cond, (why))

/* The single summary line; the exit status of the test. */
static inline int unit_finish(void)
{
    printf("%lu passed, %lu failed\n", unit_passed, unit_failed);
    fflush(stdout);
    return unit_failed != 0 || unit_passed == 0 ? 1 : 0;
}

/* --- the process seen from /proc ------------------------------------------ */


/* /proc/self/maps read in one go into a static buffer (no malloc, so reading
 * it does not itself add a mapping); NULL if it does not fit. */
static inline const char *unit_read_maps(void)
{
    static char buf[8 << 20];
    size_t len = 0;
    ssize_t got;
    int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);

    if (fd < 0)
        return NULL;
    while ((got = read(fd, buf + len, sizeof(buf) - 1 - len)) > 0)
        len += (size_t)got;
    close(fd);
    if (got < 0 || len == sizeof(buf) - 1)
        return NULL;
    buf[len] = '\0';
    return buf;
}

/* Lines of /proc/self/maps, or -1. */
static inline long unit_maps_lines(void)
{
    const char *m = unit_read_maps();
    long n = 0;

    if (m == NULL)
        return -1;
    for (; *m; m++)
        n += *m == '\n';
    return n;
}

/* Lines of /proc/self/maps that contain @text, or -1. */
static inline long unit_maps_count(const char *text)
{
    const char *m = unit_read_maps();
    long n = 0;

    if (m == NULL)
        return -1;
    for (const char *line = m; *line;) {
        const char *eol = strchr(line, '\n');
        size_t len = eol ? (size_t)(eol - line) : strlen(line);
        const char *hit = strstr(line, text);

        n += hit != NULL && (size_t)(hit - line) < len;
        line += len + (eol != NULL);
    }
    return n;
}

/* True when [va, va + len) is covered, without a hole, by lines of
 * /proc/self/maps whose permissions are @perms ("---p", "rw-s") and whose
 * path contains @path (NULL: any path). */
static inline bool unit_range_is(const void *va, size_t len, const char *perms,
                                 const char *path)
{
    uintptr_t at = (uintptr_t)va, end = at + len;
    const char *m = unit_read_maps();

    if (m == NULL)
        return false;
    for (const char *line = m; *line && at < end;) {
        const char *eol = strchr(line, '\n');
        size_t linelen = eol ? (size_t)(eol - line) : strlen(line);
        char text[1024], p[5] = "", where[512] = "";
        uintptr_t lo, hi;

        /* One line at a time: "lo-hi perms offset dev inode   [path]". */
        snprintf(text, sizeof(text), "%.*s", (int)linelen, line);
        line += linelen + (eol != NULL);
        if (sscanf(text, "%" SCNxPTR "-%" SCNxPTR " %4s %*s %*s %*s %511[^\n]",
                   &lo, &hi, p, where) < 3 || hi <= at || lo > at)
            continue;
        if (strcmp(p, perms) != 0 || (path && strstr(where, path) == NULL))
            return false;
        at = hi;
    }
    return at >= end;
}

/* Reserved and inaccessible: what a reservation, and a hole left by unmap,
 * look like. An anonymous PROT_NONE mapping. */
static inline bool unit_range_reserved(const void *va, size_t len)
{
    return unit_range_is(va, len, "---p", NULL);
}

/* Mapped to zcopy host memory: a shared mapping of a memfd named "zcopy". */
static inline bool unit_range_mapped(const void *va, size_t len)
{
    return unit_range_is(va, len, "rw-s", "memfd:zcopy");
}

/* Fills @len bytes with a pattern that depends on @seed and the position. */
static inline void unit_fill(void *va, size_t len, unsigned seed)
{
    unsigned char *p = va;

    for (size_t i = 0; i < len; i++)
        p[i] = (unsigned char)(seed * 131u + i * 7u + (i >> 12));
}

static inline bool unit_has_pattern(const void *va, size_t len, unsigned seed)
{
    const unsigned char *p = va;

    for (size_t i = 0; i < len; i++)
        if (p[i] != (unsigned char)(seed * 131u + i * 7u + (i >> 12)))
            return false;
    return true;
}

#endif /* ZCOPY_UNIT_H */
