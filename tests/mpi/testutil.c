#define _GNU_SOURCE /* fileno, dup */
#include "testutil.h"

#include <dirent.h>
#include <stdarg.h>
#include <stdlib.h>
#include <unistd.h>

/* Per-process test counters: one test program, one tally. */
unsigned long zt_passed, zt_failed;

#define ZT_DIE(...)                                                          \
    do {                                                                     \
        fprintf(stderr, __VA_ARGS__);                                        \
        fputc('\n', stderr);                                                 \
        MPI_Abort(MPI_COMM_WORLD, 2);                                        \
    } while (0)

void zt_arena_init(zt_arena_t *arena, MPI_Comm comm, size_t bytes)
{
    const zcopy_mem_prop_t prop = { .kind = ZCOPY_MEM_HOST, .device = -1 };
    size_t gran;
    int rc;

    if (zcopy_mem_granularity(&prop, &gran) != ZCOPY_SUCCESS)
        ZT_DIE("granularity: %s", zcopy_mem_last_error());
    arena->size = (bytes + gran - 1) / gran * gran;
    if (arena->size == 0)
        arena->size = gran;
    arena->comm = comm;
    rc = zcopy_mem_reserve(&arena->base, arena->size, 0, NULL, 0);
    if (rc != ZCOPY_SUCCESS)
        ZT_DIE("reserve: %s", zcopy_mem_last_error());
    if (MPIX_Comm_set_memory_range(comm, arena->base, arena->size, 0, 0))
        ZT_DIE("set_memory_range failed");
    rc = zcopy_mem_create(&arena->handle, arena->size, &prop, 0);
    if (rc != ZCOPY_SUCCESS)
        ZT_DIE("create: %s", zcopy_mem_last_error());
    rc = zcopy_mem_map(arena->base, arena->size, 0, arena->handle, 0);
    if (rc != ZCOPY_SUCCESS)
        ZT_DIE("map: %s", zcopy_mem_last_error());
    if (MPIX_Comm_activate_memory(comm, arena->base, arena->size, 0,
                                  arena->handle, 0))
        ZT_DIE("activate failed");
}

void zt_arena_fini(zt_arena_t *arena)
{
    if (MPIX_Comm_deactivate_memory(arena->comm, arena->base) ||
        zcopy_mem_unmap(arena->base) || zcopy_mem_free(arena->handle) ||
        MPIX_Comm_unset_memory_range(arena->comm, arena->base) ||
        zcopy_mem_release(arena->base))
        ZT_DIE("arena teardown failed: %s", zcopy_mem_last_error());
}

void *zt_arena_alloc(zt_arena_t *arena, size_t *offset, size_t bytes)
{
    size_t at = (*offset + 63) & ~(size_t)63;

    if (at + bytes > arena->size)
        ZT_DIE("arena of %zu bytes too small for %zu more", arena->size, bytes);
    *offset = at + bytes;
    return (char *)arena->base + at;
}

bool zt_check_at(bool cond, const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    int rank;

    if (cond) {
        zt_passed++;
        return true;
    }
    if (zt_failed++ < 20) {
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
        fprintf(stderr, "[rank %d] %s:%d: ", rank, file, line);
        va_start(ap, fmt);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
        fputc('\n', stderr);
    }
    return false;
}

void zt_require(bool ok, const char *what)
{
    int rank = -1;

    if (ok)
        return;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    fprintf(stderr, "[rank %d] fixture step failed: %s (%s)\n", rank, what,
            zcopy_mem_last_error());
    MPI_Abort(MPI_COMM_WORLD, 2);
}

int zt_finish(void)
{
    unsigned long mine[2] = { zt_passed, zt_failed }, all[2];
    int rank;

    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Allreduce(mine, all, 2, MPI_UNSIGNED_LONG, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0)
        printf("%lu passed, %lu failed\n", all[0], all[1]);
    MPI_Finalize();
    return all[1] != 0 || all[0] == 0;
}

MPIX_Zcopy_stats zt_stats(MPI_Comm comm)
{
    MPIX_Zcopy_stats s;

    if (MPIX_Zcopy_get_stats(comm, &s) != MPI_SUCCESS)
        ZT_DIE("get_stats failed");
    return s;
}

/* --- stderr capture ------------------------------------------------------ */

static FILE *zt_captured;
static int zt_real_stderr = -1;

void zt_stderr_capture(void)
{
    zt_captured = tmpfile();
    if (zt_captured == NULL) {
        perror("tmpfile");
        exit(2);
    }
    fflush(stderr);
    zt_real_stderr = dup(STDERR_FILENO);
    dup2(fileno(zt_captured), STDERR_FILENO);
}

const char *zt_stderr_release(void)
{
    static char text[1 << 16];
    size_t len;

    fflush(stderr);
    dup2(zt_real_stderr, STDERR_FILENO);
    close(zt_real_stderr);
    rewind(zt_captured);
    len = fread(text, 1, sizeof(text) - 1, zt_captured);
    text[len] = '\0';
    fclose(zt_captured);
    fputs(text, stderr);
    return text;
}

/* Reads control variable @name into @value, of @type; false, @value
 * untouched, when it does not exist or is of another type. */
static bool cvar_read(const char *name, MPI_Datatype type, void *value)
{
    MPI_T_cvar_handle handle;
    MPI_Datatype actual;
    MPI_T_enum enumtype;
    int provided, index, count, verbosity, bind, scope, name_len = 0,
        desc_len = 0;
    bool ok = false;

    if (MPI_T_init_thread(MPI_THREAD_SINGLE, &provided) != MPI_SUCCESS)
        return false;
    if (MPI_T_cvar_get_index(name, &index) == MPI_SUCCESS &&
        MPI_T_cvar_get_info(index, NULL, &name_len, &verbosity, &actual,
                            &enumtype, NULL, &desc_len, &bind,
                            &scope) == MPI_SUCCESS &&
        actual == type &&
        MPI_T_cvar_handle_alloc(index, NULL, &handle, &count) ==
            MPI_SUCCESS) {
        ok = count == 1 && MPI_T_cvar_read(handle, value) == MPI_SUCCESS;
        MPI_T_cvar_handle_free(&handle);
    }
    MPI_T_finalize();
    return ok;
}

unsigned long zt_cvar_ulong(const char *name, unsigned long dflt)
{
    unsigned long value;

    return cvar_read(name, MPI_UNSIGNED_LONG, &value) ? value : dflt;
}

int zt_cvar_bool(const char *name, int dflt)
{
    bool value;

    return cvar_read(name, MPI_C_BOOL, &value) ? value : dflt;
}

int zt_cvar_int(const char *name, int dflt)
{
    int value;

    return cvar_read(name, MPI_INT, &value) ? value : dflt;
}

int zt_value(int owner, int i, int call)
{
    return owner * 1000003 + i * 7 + call;
}

long zt_find_bad_sum(const int *got, int n, int nranks, int call)
{
    for (int i = 0; i < n; i++) {
        long long sum = 0;

        for (int j = 0; j < nranks; j++)
            sum += zt_value(j, i, call);
        if (got[i] != (int)sum)
            return i;
    }
    return -1;
}

bool zt_host_has_rdma(void)
{
    DIR *d = opendir("/sys/class/infiniband");
    struct dirent *e;
    bool any = false;

    while (d != NULL && !any && (e = readdir(d)) != NULL)
        any = e->d_name[0] != '.';
    if (d != NULL)
        closedir(d);
    return any;
}
