/* How much memory this process can still take (base.h). */
#include "base.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The first line of @path, or false. */
static bool read_line(const char *path, char *line, size_t len)
{
    FILE *f = fopen(path, "r");
    bool ok;

    if (f == NULL)
        return false;
    ok = fgets(line, (int)len, f) != NULL;
    fclose(f);
    return ok;
}

/* The number in the first line of @path, or SIZE_MAX (none, or "max"). */
static size_t read_bytes(const char *path)
{
    char line[64], *end;
    unsigned long long v;

    if (!read_line(path, line, sizeof(line)))
        return SIZE_MAX;
    errno = 0;
    v = strtoull(line, &end, 10);
    if (end == line || errno != 0 || v >= SIZE_MAX)
        return SIZE_MAX;
    return (size_t)v;
}

/* Bytes the memory cgroup at @dir under @root (its limit and usage files
 * @max and @cur) lets its processes add; SIZE_MAX where it sets no limit or
 * cannot be read. A container sees its own cgroup at the mount's root,
 * whatever /proc/self/cgroup names, so the root answers where @dir is
 * absent. */
static size_t cgroup_left(const char *root, const char *dir,
                               const char *max, const char *cur)
{
    char base[384], path[448];
    size_t limit, used;

    snprintf(base, sizeof(base), "%s%s", root, dir);
    snprintf(path, sizeof(path), "%s/%s", base, max);
    if (access(path, R_OK) != 0)
        snprintf(base, sizeof(base), "%s", root);
    snprintf(path, sizeof(path), "%s/%s", base, max);
    limit = read_bytes(path);
    snprintf(path, sizeof(path), "%s/%s", base, cur);
    used = read_bytes(path);
    if (limit == SIZE_MAX || used == SIZE_MAX)
        return SIZE_MAX;
    return used < limit ? limit - used : 0;
}

/* The memory cgroups of this process, from /proc/self/cgroup: v2's line
 * "0::/path", v1's "N:controllers:/path" naming memory. */
static size_t cgroups_left(void)
{
    FILE *f = fopen("/proc/self/cgroup", "r");
    size_t left = SIZE_MAX, l;
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
            l = cgroup_left("/sys/fs/cgroup", dir, "memory.max",
                                 "memory.current");
        else if (strstr(ctrl, "memory") != NULL)
            l = cgroup_left("/sys/fs/cgroup/memory", dir,
                                 "memory.limit_in_bytes",
                                 "memory.usage_in_bytes");
        else
            continue;
        if (l < left)
            left = l;
    }
    fclose(f);
    return left;
}

/* @key's value in /proc/meminfo, in bytes; SIZE_MAX where absent. */
static size_t meminfo_bytes(const char *text, const char *key)
{
    const char *at = strstr(text, key);
    unsigned long long kb;

    if (at == NULL || sscanf(at + strlen(key), " %llu", &kb) != 1)
        return SIZE_MAX;
    return (size_t)kb << 10;
}

size_t zcopy_memory_left(void)
{
    char text[4096];
    size_t avail, swap, left = SIZE_MAX, cg = cgroups_left();
    FILE *f = fopen("/proc/meminfo", "r");
    size_t n = 0;

    if (f != NULL) {
        n = fread(text, 1, sizeof(text) - 1, f);
        fclose(f);
    }
    text[n] = '\0';
    avail = meminfo_bytes(text, "MemAvailable:");
    swap = meminfo_bytes(text, "SwapFree:");
    if (avail != SIZE_MAX)
        left = avail + (swap != SIZE_MAX ? swap : 0);
    return cg < left ? cg : left;
}
