/* Helpers shared by the MPI tests: activated arenas and result checks. */
#ifndef ZCOPY_TESTUTIL_H
#define ZCOPY_TESTUTIL_H

#include <mpix_zcopy.h>
#include <stdbool.h>
#include <stdio.h>

/* Reserved, range-set, mapped and activated memory on one communicator. */
typedef struct {
    void *base;                   /* start of the activated block */
    size_t size;                  /* bytes activated */
    zcopy_mem_handle_t handle;
    MPI_Comm comm;
} zt_arena_t;

/* Collective over @comm. Aborts the job on any failure. */
void zt_arena_init(zt_arena_t *arena, MPI_Comm comm, size_t bytes);
void zt_arena_fini(zt_arena_t *arena);

/* Bump allocator inside the arena, 64-byte aligned. */
void *zt_arena_alloc(zt_arena_t *arena, size_t *offset, size_t bytes);

/* Records a failed expectation; prints the first few with their place. */
#define ZT_CHECK(_cond, ...)                                                 \
    zt_check_at((_cond), __FILE__, __LINE__, __VA_ARGS__)
bool zt_check_at(bool cond, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Sets @_bad to the index of the first element of @_got (of @_n) that
 * differs from @_expect, an expression of the index i; -1 if none. */
#define ZT_FIND_BAD(_bad, _got, _n, _expect)                                 \
    do {                                                                     \
        (_bad) = -1;                                                         \
        for (size_t i = 0; i < (_n); i++)                                    \
            if ((_got)[i] != (_expect)) {                                    \
                (_bad) = (long)i;                                            \
                break;                                                       \
            }                                                                \
    } while (0)

/* Counted checks that passed / failed on this rank. */
extern unsigned long zt_passed, zt_failed;

/* Sums the counts over MPI_COMM_WORLD, prints "N passed, N failed" on rank
 * 0, calls MPI_Finalize and returns the exit status for main. A test that
 * checked nothing fails. */
int zt_finish(void);

/* Sends this process's stderr to a temporary file until
 * zt_stderr_release(), which puts it back, echoes what was written and
 * returns it (the first 64 KiB, in a static buffer). One at a time. */
void zt_stderr_capture(void);
const char *zt_stderr_release(void);

/* A fixture step that must work for the test to mean anything: on failure,
 * says which (with the memory layer's last error) and aborts the job. */
void zt_require(bool ok, const char *what);

MPIX_Zcopy_stats zt_stats(MPI_Comm comm);

/* Element @i of rank @owner's input in call @call: distinct per owner,
 * element and call, so that a block taken from the wrong rank, place or
 * call shows. */
int zt_value(int owner, int i, int call);
/* The first of @n ints of @got that is not the sum of zt_value over ranks
 * 0 to @nranks - 1 (in int, as MPI_SUM on MPI_INT wraps here), or -1. */
long zt_find_bad_sum(const int *got, int n, int nranks, int call);

/* The value of an unsigned long MCA parameter as MPI_T's control variable
 * @name reads it (after MPI_Init, which loads the component); @dflt when
 * the variable does not exist (stock Open MPI). */
unsigned long zt_cvar_ulong(const char *name, unsigned long dflt);
/* The same for an int parameter. */
int zt_cvar_int(const char *name, int dflt);
/* The same for a bool parameter (MPI_T's MPI_C_BOOL): 0 or 1. */
int zt_cvar_bool(const char *name, int dflt);

/* Whether this host has an InfiniBand or RoCE device, over which UCX may
 * offer rc or dc: then zcopy reads blocks between servers by get rather
 * than pushing them (coll_zcopy_ucx_push_min). */
bool zt_host_has_rdma(void);

#endif
