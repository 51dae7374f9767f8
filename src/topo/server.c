/*
 * Servers: which processes share one, and the server map that verbose
 * output prints (SPEC section 5).
 */
#include "topo.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FNV_OFFSET 0xcbf29ce484222325ull
#define FNV_PRIME 0x100000001b3ull

static uint64_t hash64(const char *s, uint64_t h)
{
    while (*s)
        h = (h ^ (uint8_t)*s++) * FNV_PRIME;
    return h;
}

/* An integer from the environment; @dflt when absent or not a number. */
static int env_int(const char *name, int dflt)
{
    const char *v = getenv(name);
    char *end;
    long n;

    if (v == NULL || *v == '\0')
        return dflt;
    errno = 0;
    n = strtol(v, &end, 10);
    if (errno != 0 || *end != '\0' || n < 0 || n > INT32_MAX)
        return dflt;
    return (int)n;
}

/* Host name plus kernel boot id: two containers with one name on two
 * machines still differ, and a rebooted host is a new server. */
static uint64_t host_id_read(char *host, size_t host_len)
{
    char boot[64] = "";
    FILE *f;

    if (gethostname(host, host_len - 1) != 0)
        snprintf(host, host_len, "unknown");
    host[host_len - 1] = '\0';
    f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (f) {
        if (fgets(boot, sizeof(boot), f) == NULL)
            boot[0] = '\0';
        fclose(f);
    }
    return hash64(boot, hash64(host, FNV_OFFSET));
}

/* Read once per process: neither changes while it runs, and reading them
 * was a tenth of every communicator's set-up. */
static struct {
    pthread_once_t once;
    char host[sizeof(((zcopy_topo_server_t *)0)->host)];
    uint64_t id;
} host_facts = { .once = PTHREAD_ONCE_INIT };

static void host_facts_read(void)
{
    host_facts.id = host_id_read(host_facts.host, sizeof(host_facts.host));
}

static uint64_t host_id(char *host, size_t host_len)
{
    pthread_once(&host_facts.once, host_facts_read);
    snprintf(host, host_len, "%s", host_facts.host);
    return host_facts.id;
}

zcopy_status_t zcopy_topo_server(zcopy_topo_server_t *server_p)
{
    zcopy_topo_server_t s = { .virtual_count = 1, .local_rank = -1,
                              .local_count = 1 };
    int local_size, per;

    if (server_p == NULL)
        return zcopy_error(ZCOPY_ERR_ARG, "server: NULL output pointer");
    s.id[0] = host_id(s.host, sizeof(s.host));
    /* Open MPI tells each process its place among the job's processes on
     * the host; without it (a singleton) the process is alone. */
    s.local_rank = env_int("OMPI_COMM_WORLD_LOCAL_RANK", -1);
    local_size = env_int("OMPI_COMM_WORLD_LOCAL_SIZE", 0);
    if (s.local_rank < 0 || s.local_rank >= local_size) {
        s.local_rank = -1;
        *server_p = s;
        return ZCOPY_SUCCESS;
    }
    /* Virtual servers are consecutive blocks of local ranks, so that on
     * one host a split by rank / block gives exactly the servers. */
    s.virtual_count = zcopy_config.virtual_servers > 1
                          ? zcopy_config.virtual_servers : 1;
    per = (local_size + s.virtual_count - 1) / s.virtual_count;
    s.virtual_index = s.local_rank / per;
    s.local_index = s.local_rank % per;
    s.local_count = local_size - s.virtual_index * per;
    if (s.local_count > per)
        s.local_count = per;
    if (s.virtual_count > 1)
        s.id[1] = (uint64_t)s.virtual_index + 1;
    *server_p = s;
    return ZCOPY_SUCCESS;
}

void zcopy_topo_rank_self(zcopy_topo_rank_t *rank, bool devices)
{
    zcopy_topo_server_t s;
    int numa = -1, gpu = -1;

    zcopy_topo_server(&s);
    /* Without a topology the devices stay unknown; the server is still
     * right, and that is what decides the path. */
    if (devices && zcopy_topo_nearest_device(ZCOPY_MEM_HOST, NULL, &numa) !=
                       ZCOPY_SUCCESS)
        numa = -1;
    if (devices && zcopy_topo_nearest_device(ZCOPY_MEM_CUDA, NULL, &gpu) !=
                       ZCOPY_SUCCESS)
        gpu = -1;
    *rank = (zcopy_topo_rank_t){
        .server = { s.id[0], s.id[1] },
        .local_rank = s.local_rank,
        .local_index = s.local_index,
        .numa = numa,
        .gpu = gpu,
    };
}

/* --- the server map ------------------------------------------------------ */

/* A line being built; text past the end is cut and marked with "...". */
typedef struct {
    char text[400];
    size_t len;
} map_line_t;

static void line_add(map_line_t *l, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void line_add(map_line_t *l, const char *fmt, ...)
{
    size_t room = sizeof(l->text) - l->len;
    va_list ap;
    int n;

    if (room <= 4)
        return; /* already cut */
    va_start(ap, fmt);
    n = vsnprintf(l->text + l->len, room, fmt, ap);
    va_end(ap);
    if (n >= 0 && (size_t)n < room) {
        l->len += (size_t)n;
    } else {
        memcpy(l->text + sizeof(l->text) - 4, "...", 4);
        l->len = sizeof(l->text);
    }
}

static const zcopy_topo_rank_t *rank_at(const zcopy_topo_rank_t *ranks,
                                        size_t stride, int r)
{
    return (const zcopy_topo_rank_t *)((const char *)ranks +
                                       (size_t)r * stride);
}

static bool same_server(const zcopy_topo_rank_t *a, const zcopy_topo_rank_t *b)
{
    return a->server[0] == b->server[0] && a->server[1] == b->server[1];
}

/* Servers among @ranks, numbered from 1 in order of their lowest rank;
 * *@mine_p is the number of @me's server (0 if no rank is on it). */
static int count_servers(const zcopy_topo_rank_t *ranks, size_t stride,
                         int n, const zcopy_topo_rank_t *me, int *mine_p)
{
    int servers = 0;

    *mine_p = 0;
    for (int r = 0; r < n; r++) {
        const zcopy_topo_rank_t *x = rank_at(ranks, stride, r);
        bool first = true;

        for (int q = 0; q < r && first; q++)
            first = !same_server(rank_at(ranks, stride, q), x);
        if (!first)
            continue;
        servers++;
        if (same_server(x, me))
            *mine_p = servers;
    }
    return servers;
}

static void device_list(map_line_t *l, zcopy_mem_kind_t kind)
{
    const zcopy_topo_device_t *d;
    int n = 0;

    if (zcopy_topo_devices(kind, &d, &n) != ZCOPY_SUCCESS) {
        line_add(l, " unknown (no topology)");
        return;
    }
    if (n == 0)
        line_add(l, " none");
    for (int i = 0; i < n; i++) {
        if (kind == ZCOPY_MEM_HOST)
            line_add(l, "%s %d (%u CPUs, %" PRIu64 " MiB)", i ? "," : "",
                     d[i].os_index, d[i].npus, d[i].local_memory >> 20);
        else
            line_add(l, "%s %d %s %s (%u CPUs near)", i ? "," : "",
                     d[i].os_index, d[i].name, d[i].pci_bus_id, d[i].npus);
    }
}

static const char *device_name(int os_index, char *buf, size_t len)
{
    if (os_index < 0)
        return "none";
    snprintf(buf, len, "%d", os_index);
    return buf;
}

/* The copy threshold, what it came from, and the measured range below. */
static void streaming_line(void)
{
    zcopy_topo_cache_t c;
    const size_t min = zcopy_topo_streaming_min(&c);
    char why[96];

    if (zcopy_config.streaming_min > 0)
        snprintf(why, sizeof(why), "coll_zcopy_streaming_min");
    else if (c.bytes > 0)
        snprintf(why, sizeof(why), "half the L%d cache's share per core: "
                 "%llu KiB shared by %u cores", c.level,
                 (unsigned long long)(c.bytes >> 10), c.cores);
    else
        snprintf(why, sizeof(why), "no cache found in the topology");
    if (zcopy_config.streaming_min > 0 || min <= ZCOPY_TOPO_COPY_MEASURED_MIN)
        zcopy_log(ZCOPY_LOG_INFO, "topo", "  copies: streaming stores from "
                  "%zu bytes (%s), memcpy below that", min, why);
    else
        zcopy_log(ZCOPY_LOG_INFO, "topo", "  copies: streaming stores from "
                  "%zu bytes (%s); from %zu bytes below that, memcpy or "
                  "streaming stores, whichever measures faster", min, why,
                  ZCOPY_TOPO_COPY_MEASURED_MIN);
}

static void map_print(const char *scope, int comm_size,
                      const zcopy_topo_rank_t *ranks, size_t stride,
                      const zcopy_topo_server_t *s, const zcopy_topo_rank_t *me)
{
    int mine, servers = count_servers(ranks, stride, comm_size, me, &mine);
    map_line_t l = { .len = 0 };
    char a[16], b[16];

    zcopy_log(ZCOPY_LOG_INFO, "topo", "server map of %s (%d ranks, %d "
              "server%s): server %d of %d, host %s, id %016" PRIx64 ":%" PRIu64,
              scope, comm_size, servers, servers == 1 ? "" : "s", mine,
              servers, s->host, s->id[0], s->id[1]);
    line_add(&l, "  scope: the job's %d processes on this server = ranks",
             s->local_count);
    for (int r = 0; r < comm_size; r++)
        if (same_server(rank_at(ranks, stride, r), me))
            line_add(&l, " %d", r);
    zcopy_log(ZCOPY_LOG_INFO, "topo", "%s of %s", l.text, scope);

    l.len = 0;
    line_add(&l, "  NUMA nodes:");
    device_list(&l, ZCOPY_MEM_HOST);
    if (zcopy_topo_init() == ZCOPY_SUCCESS && !zcopy_topo_is_this_system())
        line_add(&l, " (HWLOC_SYNTHETIC or HWLOC_XMLFILE: not this machine)");
    zcopy_log(ZCOPY_LOG_INFO, "topo", "%s", l.text);
    l.len = 0;
    line_add(&l, "  GPUs:");
    device_list(&l, ZCOPY_MEM_CUDA);
    zcopy_log(ZCOPY_LOG_INFO, "topo", "%s", l.text);
    streaming_line();

    for (int r = 0; r < comm_size; r++) {
        const zcopy_topo_rank_t *x = rank_at(ranks, stride, r);

        if (same_server(x, me))
            zcopy_log(ZCOPY_LOG_INFO, "topo", "  rank %d: local rank %d, "
                      "nearest NUMA node %s, nearest GPU %s", r, x->local_rank,
                      device_name(x->numa, a, sizeof(a)),
                      device_name(x->gpu, b, sizeof(b)));
    }
}

void zcopy_topo_print_server_map(const char *scope, int comm_size,
                                 const zcopy_topo_rank_t *ranks, size_t stride)
{
    static atomic_bool printed;
    zcopy_topo_server_t s;
    zcopy_topo_rank_t me;
    int here = 0;

    if (zcopy_config.verbose < ZCOPY_LOG_INFO || ranks == NULL)
        return;
    if (zcopy_topo_server(&s) != ZCOPY_SUCCESS || s.local_index != 0)
        return; /* the first process of each server speaks for it */
    me = (zcopy_topo_rank_t){ .server = { s.id[0], s.id[1] } };
    for (int r = 0; r < comm_size; r++)
        here += same_server(rank_at(ranks, stride, r), &me);
    /* Only a communicator that holds the whole server shows all of it. One
     * process per server prints, and only once, so the job prints one map
     * per server however many such communicators it sets up. */
    if (here < s.local_count)
        return;
    if (atomic_exchange_explicit(&printed, true, memory_order_relaxed))
        return;
    map_print(scope, comm_size, ranks, stride, &s, &me);
}
