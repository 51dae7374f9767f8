/* How much memory this process can still take (base.h). */
#include "base.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Up to @len - 1 bytes of @path, terminated; false where unreadable. */
static bool read_text(const char *path, char *text, size_t len)
{
    FILE *f = fopen(path, "r");
    size_t n;

    if (f == NULL)
        return false;
    n = fread(text, 1, len - 1, f);
    fclose(f);
    text[n] = '\0';
    return n > 0;
}

/* The number that follows @key in @text, times @unit; SIZE_MAX where
 * there is none ("max", or no such key). @key includes what ends it (a
 * colon, a space), so that one key is no prefix of another. */
static size_t text_value(const char *text, const char *key, size_t unit)
{
    const char *at = text;
    unsigned long long v;
    char *end;

    /* A key starts a line, or follows "Node N " (a node's meminfo). */
    while ((at = strstr(at, key)) != NULL && at != text && at[-1] != '\n' &&
           at[-1] != ' ')
        at++;
    if (at == NULL)
        return SIZE_MAX;
    errno = 0;
    v = strtoull(at + strlen(key), &end, 10);
    if (end == at + strlen(key) || errno != 0 || v >= SIZE_MAX / unit)
        return SIZE_MAX;
    return (size_t)v * unit;
}

/* The number a file of one line holds, or SIZE_MAX ("max", unreadable). */
static size_t file_value(const char *path)
{
    char text[64];

    return read_text(path, text, sizeof(text)) ? text_value(text, "", 1)
                                                : SIZE_MAX;
}

/* @limit less @usage, of which the cgroup could still drop the inactive
 * page cache (@stat's @inactive), as the kernel does before it kills. */
static size_t cgroup_room(size_t limit, size_t usage, const char *stat,
                          const char *inactive)
{
    char text[4096];
    size_t cache;

    if (limit == SIZE_MAX || usage == SIZE_MAX)
        return SIZE_MAX;
    if (read_text(stat, text, sizeof(text)) &&
        (cache = text_value(text, inactive, 1)) != SIZE_MAX)
        usage = cache < usage ? usage - cache : 0;
    return usage < limit ? limit - usage : 0;
}

/* cgroup v2: a limit may sit on any ancestor (a batch system's job, a
 * systemd slice) while the process's own group says "max", so every
 * directory from @dir up to the mount's root bounds the room. A container
 * that sees only its own group at the root finds @dir absent: the root
 * answers then. */
static size_t cgroup2_room(const char *dir)
{
    char path[512], file[560];
    size_t room = SIZE_MAX, r;
    char *cut;

    snprintf(path, sizeof(path), "/sys/fs/cgroup%s", dir);
    for (;;) {
        snprintf(file, sizeof(file), "%s/memory.max", path);
        if (access(file, R_OK) == 0) {
            const size_t limit = file_value(file);
            size_t usage;

            snprintf(file, sizeof(file), "%s/memory.current", path);
            usage = file_value(file);
            snprintf(file, sizeof(file), "%s/memory.stat", path);
            r = cgroup_room(limit, usage, file, "inactive_file ");
            if (r < room)
                room = r;
        }
        cut = strrchr(path, '/');
        if (cut == NULL || strcmp(path, "/sys/fs/cgroup") == 0)
            return room;
        *cut = '\0';
    }
}

/* cgroup v1: memory.stat's hierarchical limit already takes the
 * ancestors' into account. */
static size_t cgroup1_room(const char *dir)
{
    char base[512], stat[560], usage[560], text[4096];

    snprintf(base, sizeof(base), "/sys/fs/cgroup/memory%s", dir);
    snprintf(stat, sizeof(stat), "%s/memory.stat", base);
    if (access(stat, R_OK) != 0)
        snprintf(base, sizeof(base), "/sys/fs/cgroup/memory");
    snprintf(stat, sizeof(stat), "%s/memory.stat", base);
    snprintf(usage, sizeof(usage), "%s/memory.usage_in_bytes", base);
    if (!read_text(stat, text, sizeof(text)))
        return SIZE_MAX;
    return cgroup_room(text_value(text, "hierarchical_memory_limit ", 1),
                       file_value(usage), stat, "total_inactive_file ");
}

/* Whether the comma-separated @list names @name. */
static bool lists(const char *list, const char *name)
{
    const size_t len = strlen(name);

    for (const char *at = list; at != NULL; at = strchr(at, ',')) {
        at += *at == ',';
        if (strncmp(at, name, len) == 0 && (at[len] == ',' || at[len] == '\0'))
            return true;
    }
    return false;
}

/* The room the memory cgroups of this process leave it, from the lines of
 * /proc/self/cgroup: v2's "0::/path", v1's "N:controllers:/path". */
static size_t cgroups_room(void)
{
    FILE *f = fopen("/proc/self/cgroup", "r");
    size_t room = SIZE_MAX, r;
    char line[512];

    if (f == NULL)
        return SIZE_MAX;
    while (fgets(line, sizeof(line), f) != NULL) {
        char *ctrl = strchr(line, ':'), *dir;

        if (ctrl == NULL || (dir = strchr(ctrl + 1, ':')) == NULL)
            continue;
        *ctrl++ = '\0';
        *dir++ = '\0';
        dir[strcspn(dir, "\n")] = '\0';
        if (strcmp(dir, "/") == 0)
            dir[0] = '\0';
        if (strcmp(line, "0") == 0 && ctrl[0] == '\0')
            r = cgroup2_room(dir);
        else if (lists(ctrl, "memory"))
            r = cgroup1_room(dir);
        else
            continue;
        if (r < room)
            room = r;
    }
    fclose(f);
    return room;
}

size_t zcopy_memory_left(int node)
{
    char text[4096], path[64];
    size_t left = SIZE_MAX, cg = cgroups_room(), avail, swap, file;

    if (read_text("/proc/meminfo", text, sizeof(text))) {
        avail = text_value(text, "MemAvailable:", 1024);
        swap = text_value(text, "SwapFree:", 1024);
        if (avail != SIZE_MAX)
            left = avail + (swap != SIZE_MAX ? swap : 0);
    }
    if (node >= 0) {
        snprintf(path, sizeof(path),
                 "/sys/devices/system/node/node%d/meminfo", node);
        if (read_text(path, text, sizeof(text))) {
            /* A node's meminfo has no MemAvailable: its free pages and
             * the page cache it could drop first. */
            avail = text_value(text, "MemFree:", 1024);
            file = text_value(text, "Inactive(file):", 1024);
            if (avail != SIZE_MAX && file != SIZE_MAX && avail + file < left)
                left = avail + file;
        }
    }
    return cg < left ? cg : left;
}
