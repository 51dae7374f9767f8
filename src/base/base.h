/*
 * Base layer of libzcopy: status codes, error detail, logging, parameters.
 * Everything in src/ includes this header; nothing here knows about MPI.
 */
#ifndef ZCOPY_BASE_H
#define ZCOPY_BASE_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <zcopy/mem.h>

/* Public API of libzcopy. */
#define ZCOPY_EXPORT __attribute__((visibility("default")))
/* Internal calls that the coll component (mpi_ext/) makes into libzcopy:
 * exported from the .so, declared only in src/ headers. */
#define ZCOPY_COMPONENT_API __attribute__((visibility("default")))

/* Internal status: the public ZCOPY_SUCCESS / ZCOPY_ERR_* codes, plus
 * positive values that are not errors: take the fallback path; or (from a
 * zero-copy algorithm) the call is complete, after a rank could not reach
 * a peer, finished through the fallback's component or the job's
 * point-to-point engine (counted as a fallback). */
typedef int zcopy_status_t;
#define ZCOPY_FALLBACK 1
#define ZCOPY_REPAIRED 2

#define ZCOPY_CACHE_LINE 64

/* Records why the current call failed, for zcopy_mem_last_error() and
 * MPI_Error_string, and returns @status so callers can write
 * `return zcopy_error(ZCOPY_ERR_ARG, "...", ...)`. */
zcopy_status_t zcopy_error(zcopy_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
const char *zcopy_error_detail(void);
void zcopy_error_clear(void);

/* Logging: the level is tested before anything is formatted. */
typedef enum {
    ZCOPY_LOG_ERROR = 0, /* always printed */
    ZCOPY_LOG_WARN  = 1,
    ZCOPY_LOG_INFO  = 10, /* server map, path decisions per communicator */
    ZCOPY_LOG_DEBUG = 20, /* per-collective decisions */
    ZCOPY_LOG_TRACE = 30  /* imports, mappings, control-plane steps */
} zcopy_log_level_t;

void zcopy_log_emit(int level, const char *subsys, const char *file, int line,
                    const char *fmt, ...) __attribute__((format(printf, 5, 6)));

#define zcopy_log(_level, _subsys, ...)                                      \
    do {                                                                     \
        if ((_level) <= zcopy_config.verbose)                                \
            zcopy_log_emit((_level), (_subsys), __FILE__, __LINE__,          \
                           __VA_ARGS__);                                     \
    } while (0)

#define ZCOPY_CHECK(_expr)                                                   \
    do {                                                                     \
        zcopy_status_t _st = (_expr);                                        \
        if (_st < 0)                                                         \
            return _st;                                                      \
    } while (0)

/* Process-wide tunables. Global because the component sets them once from
 * MCA parameters before any communicator exists, and every layer reads them;
 * they are never written after MPI_Init. Documented in docs/parameters.md. */
typedef struct {
    int verbose;               /* log level, see zcopy_log_level_t */
    int virtual_servers;       /* split one host into N servers (>= 1) */
    size_t small_msg;          /* bytes: below, latency-optimised algorithms */
    size_t inline_max;         /* bytes per rank: payloads this small travel
                                  in the control plane (coll/server/control.h caps) */
    size_t inline_max_yield;   /* the same where waits yield the processor */
    size_t root_moves_max;     /* bytes: where waits yield, a rooted call's
                                  root moves at most this much itself
                                  (server path) */
    size_t rooted_yield_min;   /* bytes per rank: where waits yield, smaller
                                  bcast, reduce, gather and scatter go to
                                  the previous component (server path) */
    size_t one_per_server_min; /* bytes per rank: on a communicator with one
                                  rank on each server, smaller calls go to
                                  the previous component (spanning path) */
    bool one_per_server_moves; /* there, zcopy also runs the
                                  allgather(v)s and alltoalls whose
                                  payloads do not ride with the arrival,
                                  and every alltoallv (else they go to the
                                  previous component) */
    size_t span_inline_max;    /* the same between servers: payloads ride
                                  with the arrivals (coll/span.h caps) */
    int span_dissemination_min; /* servers from which the leaders pass
                                  each round in log2 steps (0: never) */
    int yield_mode;            /* 0 auto, 1 always yield, 2 never yield */
    int sleep_mode;            /* where waits yield: 0 auto, 1 always
                                  sleep, 2 never sleep */
    int transport;             /* zcopy_transport_t: how peers are reached */
    int ucx_fetch;             /* zcopy_ucx_fetch_t: how UCX reads a peer */
    size_t ucx_p2p_min;        /* bytes of one read from which fetch auto
                                  asks for the job's point-to-point engine
                                  where UCX's get is emulated (0: never) */
    size_t ucx_push_min;       /* bytes of one alltoall block from which
                                  fetch auto sends it between servers
                                  through that engine, where no rank's UCX
                                  get is real (0: never); an alltoallv's
                                  all go so unless it is 0 */
    size_t ucx_push_part_max;  /* bytes of one pushed part, at most 1 GiB
                                  (the engine counts in int) */
    bool mpi_threads;          /* the job may call MPI from several threads
                                  at once (MPI_THREAD_MULTIPLE) */
    unsigned ucx_max_requests; /* UCX requests one rank keeps in flight in a
                                  collective's transfers (0: no bound) */
    int wait_report_s;         /* report a peer awaited this long (0: never) */
    int peer_access;           /* zcopy_ipc_access_t: 0 auto, 1 pidfd, 2 socket */
    size_t streaming_min;      /* bytes: copies this long bypass the cache;
                                  0: from the caches (topo_streaming_min),
                                  measured below that (coll/copy.c) */
} zcopy_config_t;

/* coll_zcopy_transport: auto maps peers inside a server and uses UCX
 * between servers; ipc never uses UCX (spanning communicators fall back);
 * ucx reaches every peer through UCX, even inside a server. */
typedef enum {
    ZCOPY_TRANSPORT_AUTO,
    ZCOPY_TRANSPORT_IPC,
    ZCOPY_TRANSPORT_UCX
} zcopy_transport_t;

/* coll_zcopy_ucx_fetch: how a rank reads a peer's buffer on another
 * server. get: one UCX get (emulated by the target on tcp in UCX 1.13);
 * send: the target sends it with a tagged send on request (ucx/serve.c);
 * pml: the same request, answered through the job's point-to-point engine
 * (the host's hooks); auto: get where the network does it (rc, dc), else
 * send, which measured 3.4x faster over tcp, and pml for reads of at least
 * ucx_p2p_min bytes except from a bcast's or scatter's root
 * (src/ucx/README.md). */
typedef enum {
    ZCOPY_UCX_FETCH_AUTO,
    ZCOPY_UCX_FETCH_GET,
    ZCOPY_UCX_FETCH_SEND,
    ZCOPY_UCX_FETCH_PML
} zcopy_ucx_fetch_t;

extern zcopy_config_t zcopy_config;

void zcopy_config_from_env(void);

/* Seals the size of a memfd that peers will map (created with
 * MFD_ALLOW_SEALING, already at its final size): a peer holding the fd
 * can then neither shrink it, which would make the owner take SIGBUS on
 * its own pages, nor grow it, nor add seals of its own. */
int zcopy_memfd_seal_size(int fd);

/* The same, and from now on nobody maps it writable or writes to it but
 * through the mappings that exist (the owner's): for memfds only their
 * owner writes, such as the export table. */
int zcopy_memfd_seal_read_only(int fd);

/* Bytes of memory this process can still take: what the kernel counts as
 * available (free, and page cache it can drop) and free swap; where
 * @node is not -1, no more than that NUMA node's free pages and inactive
 * page cache; and no more than any of its memory cgroups (v1 or v2, the
 * ancestors' limits too) leaves, their inactive page cache counted as
 * room. SIZE_MAX where nothing can be read. */
size_t zcopy_memory_left(int node);

/* A shared segment of @size bytes for peers to map: a memfd, owner-only,
 * allocated now (ENOMEM here rather than SIGBUS later), size sealed. */
zcopy_status_t zcopy_memfd_segment(const char *name, size_t size, int *fd_p,
                                   uint64_t *ino_p);

/* Makes room for one more element after @count in a realloc'ed array of
 * *@capacity elements (doubling it when full); false when out of memory. */
bool zcopy_array_reserve(void **array, size_t *capacity, size_t count,
                         size_t elem_size);

/* Monotonic nanoseconds (clock.c), for polls paced by time. */
uint64_t zcopy_now_ns(void);

static inline size_t zcopy_align_up(size_t v, size_t a) { return (v + a - 1) & ~(a - 1); }
static inline bool zcopy_is_aligned(uintptr_t v, size_t a) { return (v & (a - 1)) == 0; }
static inline bool zcopy_ranges_overlap(uintptr_t a, size_t alen, uintptr_t b, size_t blen)
{
    return a < b + blen && b < a + alen;
}
static inline bool zcopy_range_inside(uintptr_t inner, size_t ilen, uintptr_t outer, size_t olen)
{
    return inner >= outer && ilen <= olen && inner - outer <= olen - ilen;
}

#endif /* ZCOPY_BASE_H */
