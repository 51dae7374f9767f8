/* What a test process holds, read from /proc: shared by every test suite. */
#ifndef ZCOPY_TEST_PROC_H
#define ZCOPY_TEST_PROC_H

#include <dirent.h>
#include <stdio.h>
#include <string.h>

/* Open file descriptors, not counting the directory stream's own. */
static inline int proc_count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    int n = 0;

    if (d == NULL)
        return -1;
    while ((e = readdir(d)) != NULL)
        if (e->d_name[0] != '.')
            n++;
    closedir(d);
    return n - 1;
}

/* Lines of /proc/self/maps containing @needle. zcopy's memfds show up as
 * "/memfd:zcopy (deleted)" (device memory), "/memfd:zcopy-ctl (deleted)"
 * (control segments) and "/memfd:zcopy-export (deleted)" (export tables). */
static inline int proc_count_maps(const char *needle)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[4096];
    int n = 0;

    if (f == NULL)
        return -1;
    while (fgets(line, sizeof(line), f))
        if (strstr(line, needle))
            n++;
    fclose(f);
    return n;
}

/* The process's virtual size in bytes (0 if unknown): tests that make a
 * peer's memory unmappable set RLIMIT_AS just above it. */
static inline unsigned long proc_vm_size(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    unsigned long kb = 0;

    while (f && fgets(line, sizeof(line), f))
        if (sscanf(line, "VmSize: %lu kB", &kb) == 1)
            break;
    if (f)
        fclose(f);
    return kb * 1024;
}

#endif
