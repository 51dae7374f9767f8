/*
 * What the reliability tests look at from outside zcopy's API, beyond
 * tests/common/proc.h: descriptors by what they are, shared files, and the
 * identity of the job for the wrapper script (jobcheck.sh).
 *
 * zcopy's memfds are named so that /proc tells them apart:
 *   "/memfd:zcopy (deleted)"          device memory (zcopy_mem_create)
 *   "/memfd:zcopy-export (deleted)"   a process's export table
 *   "/memfd:zcopy-ctl (deleted)"      a communicator's control segment
 *
 * Everything is static inline: each test is one translation unit.
 */
#ifndef ZCOPY_RELUTIL_H
#define ZCOPY_RELUTIL_H

#include "../common/proc.h" /* proc_count_fds, proc_count_maps */

#include <dirent.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define REL_MEM "/memfd:zcopy (deleted)"
#define REL_EXPORT "/memfd:zcopy-export (deleted)"
#define REL_CTL "/memfd:zcopy-ctl (deleted)"

/* Descriptors whose /proc link contains @text ("anon_inode:[pidfd]"). */
static inline int rel_count_fd_links(const char *text)
{
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    char path[300], link[256];
    int n = 0;

    if (d == NULL)
        return -1;
    while ((e = readdir(d)) != NULL) {
        ssize_t len;

        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
        len = readlink(path, link, sizeof(link) - 1);
        if (len < 0)
            continue;
        link[len] = '\0';
        n += strstr(link, text) != NULL;
    }
    closedir(d);
    return n;
}

/* Every line of /proc/self/maps. */
static inline int rel_count_mappings(void) { return proc_count_maps(""); }

/* The fd of this process whose link is exactly @name (e.g. REL_EXPORT),
 * and its inode; -1 if none. The first one found. */
static inline int rel_find_fd(const char *name, uint64_t *ino)
{
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    char path[300], link[256];
    int found = -1;

    if (d == NULL)
        return -1;
    while (found < 0 && (e = readdir(d)) != NULL) {
        struct stat st;
        ssize_t len;

        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
        len = readlink(path, link, sizeof(link) - 1);
        if (len < 0)
            continue;
        link[len] = '\0';
        if (strcmp(link, name) == 0 && stat(path, &st) == 0) {
            found = atoi(e->d_name);
            *ino = (uint64_t)st.st_ino;
        }
    }
    closedir(d);
    return found;
}

/* Whether @path names a file in a directory other processes share. */
static inline bool rel_in_shared_dir(const char *path)
{
#ifdef REL_BINARY_DIR
    /* The test's own executables and libraries, wherever the tree is. */
    if (strncmp(path, REL_BINARY_DIR, strlen(REL_BINARY_DIR)) == 0 ||
        strncmp(path, REL_SOURCE_DIR, strlen(REL_SOURCE_DIR)) == 0)
        return false;
#endif
    return strncmp(path, "/dev/shm/", 9) == 0 ||
           strncmp(path, "/tmp/", 5) == 0 || strncmp(path, "/run/", 5) == 0;
}

/* Whether Open MPI's point-to-point layer is UCX's (pml ucx, the default
 * where UCX finds the devices Open MPI asks it for: InfiniBand, RoCE):
 * Open MPI closes the PML components it did not select, so the library
 * stays mapped only then (a build without dlopen would say no, and the
 * tests below fail rather than pass wrongly). Its UCX context keeps
 * unlinked segments of UCX's shared-memory transport in /dev/shm
 * (ucx_shm_posix_<id>), its own and, once connected, its peers'. zcopy's
 * own UCX context, whose segments are named alike, starts only for a
 * communicator that spans servers (or under coll_zcopy_transport ucx),
 * which test_security and test_no_teardown never make; under ob1 they
 * still find any such segment. */
static inline bool rel_pml_is_ucx(void)
{
    return proc_count_maps("/mca_pml_ucx.so") > 0;
}

/* Open MPI's own shared files: shared-memory BTL segments, its unlinked
 * scratch file (/dev/shm/open_mpi.NNNN), the session directory (PMIx's
 * files are inside it) and, under pml ucx, UCX's unlinked segments. Not
 * zcopy's to judge. */
static inline bool rel_open_mpi_file(const char *path)
{
    return strstr(path, "/vader_segment.") || strstr(path, "/open_mpi.") ||
           strstr(path, "/ompi.") || strstr(path, "pmix") ||
           (strstr(path, "/ucx_shm_posix_") && strstr(path, " (deleted)") &&
            rel_pml_is_ucx());
}

/* The job's identity as Open MPI names its files (vader_segment.<host>.
 * <uid hex>.<jobid hex>.<rank>) and the pid of the launcher (mpirun forks
 * the local ranks, and its session directory is named after its pid), for
 * jobcheck.sh to look for leftovers of exactly this job. Rank 0 only. */
static inline void rel_announce_job(int rank)
{
    const char *job = getenv("OMPI_MCA_ess_base_jobid");

    if (rank != 0)
        return;
    printf("rel-job: %lx %d\n", job ? strtoul(job, NULL, 10) : 0ul,
           (int)getppid());
    fflush(stdout);
}

#endif
