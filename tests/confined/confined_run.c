/*
 * confined_run: runs a program the way a container or Ubuntu would, under a
 * seccomp filter that answers EPERM to what they refuse. Installed before
 * exec, the filter holds for the program and everything it starts.
 *
 *   confined_run docker PROGRAM [ARGS]   Docker's (and Podman's, and
 *       Kubernetes' RuntimeDefault) default profile without CAP_SYS_PTRACE
 *       and CAP_SYS_NICE: no pidfd_getfd, kcmp or process_madvise; no
 *       set_mempolicy, mbind, get_mempolicy, set_mempolicy_home_node,
 *       move_pages or migrate_pages. process_vm_readv/writev stay allowed
 *       (the profile allows them on kernels 4.8 and later).
 *   confined_run yama PROGRAM [ARGS]     as docker, and also no
 *       process_vm_readv/writev or ptrace: what Yama's ptrace_scope 1
 *       refuses between sibling processes (MPI ranks under one orted).
 *
 * Exits 2 on a usage error, 77 where seccomp filters cannot be installed.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#if defined(__x86_64__)
#define CONFINED_AUDIT_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define CONFINED_AUDIT_ARCH AUDIT_ARCH_AARCH64
#else
#error "confined_run: add this architecture's AUDIT_ARCH"
#endif

/* The call the whole suite is about: its number is 438 on every
 * architecture (the unified table), whatever the headers know. */
#ifndef SYS_pidfd_getfd
#define SYS_pidfd_getfd 438
#endif

/* What both modes refuse (numbers this libc knows; absent ones are left
 * out, since such a kernel has no such call to refuse). */
static const long docker_refused[] = {
    SYS_pidfd_getfd,
    SYS_kcmp,
#ifdef SYS_process_madvise
    SYS_process_madvise,
#endif
    SYS_set_mempolicy, SYS_mbind, SYS_get_mempolicy,
#ifdef SYS_set_mempolicy_home_node
    SYS_set_mempolicy_home_node,
#endif
    SYS_move_pages, SYS_migrate_pages,
};

static const long yama_refused[] = {
    SYS_process_vm_readv, SYS_process_vm_writev, SYS_ptrace,
};

#define NDOCKER (sizeof(docker_refused) / sizeof(docker_refused[0]))
#define NYAMA (sizeof(yama_refused) / sizeof(yama_refused[0]))
#define MAX_FILTER (6 + 2 * (NDOCKER + NYAMA) + 1)

static void refuse(struct sock_filter *f, size_t *n, long nr)
{
    f[(*n)++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K,
                                              (unsigned)nr, 0, 1);
    f[(*n)++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K,
                                              SECCOMP_RET_ERRNO | EPERM);
}

static int install(int yama)
{
    struct sock_filter f[MAX_FILTER];
    struct sock_fprog prog;
    size_t n = 0;

    /* Another architecture's calls (an i386 entry) are killed rather than
     * let through unchecked, and so are x32's, which share x86_64's
     * architecture but number their calls from 0x40000000. */
    f[n++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS,
                                          offsetof(struct seccomp_data, arch));
    f[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K,
                                          CONFINED_AUDIT_ARCH, 1, 0);
    f[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K,
                                          SECCOMP_RET_KILL_PROCESS);
    f[n++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS,
                                          offsetof(struct seccomp_data, nr));
    f[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K,
                                          0x40000000u, 0, 1);
    f[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K,
                                          SECCOMP_RET_KILL_PROCESS);
    for (size_t i = 0; i < NDOCKER; i++)
        refuse(f, &n, docker_refused[i]);
    for (size_t i = 0; yama && i < NYAMA; i++)
        refuse(f, &n, yama_refused[i]);
    f[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);

    prog.len = (unsigned short)n;
    prog.filter = f;
    /* Required to install a filter without CAP_SYS_ADMIN; it also keeps
     * set-uid programs from gaining what the filter would take away. */
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
        return -1;
    return (int)syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog);
}

int main(int argc, char **argv)
{
    int yama;

    if (argc < 3 || (strcmp(argv[1], "docker") && strcmp(argv[1], "yama"))) {
        fprintf(stderr, "usage: %s docker|yama PROGRAM [ARGS]\n", argv[0]);
        return 2;
    }
    yama = strcmp(argv[1], "yama") == 0;
    if (install(yama) != 0) {
        fprintf(stderr, "confined_run: cannot install a seccomp filter: %s\n",
                strerror(errno));
        return 77;
    }
    execvp(argv[2], argv + 2);
    fprintf(stderr, "confined_run: %s: %s\n", argv[2], strerror(errno));
    return 127;
}
