/*
 * The hwloc topology of this process and the devices read from it: loaded
 * once, on first use, then read without a lock.
 */
#include "gpu.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    hwloc_topology_t hw;
    bool this_system;
    zcopy_topo_device_t *numa;    /* NUMA nodes, logical order */
    int nnuma;
    zcopy_topo_device_t *gpus;    /* see gpu.c */
    int ngpus;
} topo_state_t;

/* One topology per process. Loading takes the lock; once loaded the state
 * never changes until cleanup, so readers only need the acquire load. A
 * failed load is remembered and not retried: hwloc would fail the same way
 * at every call, and each attempt rescans /sys. */
static struct {
    pthread_mutex_t lock;
    _Atomic(topo_state_t *) state;
    zcopy_status_t failed;        /* ZCOPY_SUCCESS until a load fails */
    char failure[160];            /* why, repeated to later callers */
} topo = { .lock = PTHREAD_MUTEX_INITIALIZER };

static unsigned cpuset_weight(hwloc_const_cpuset_t set)
{
    int w = set ? hwloc_bitmap_weight(set) : 0;
    return w > 0 ? (unsigned)w : 0; /* -1 is an infinite set: none here */
}

/* hwloc plugins that would start a GPU runtime (OpenCL, CUDA, NVML, ROCm
 * SMI, Level Zero) or an X connection (gl) in every process that loads the
 * topology, whether or not it ever uses a GPU; zcopy loads the CUDA driver
 * itself, and only when asked for CUDA memory. "pci" (libpciaccess) only
 * adds vendor names: the Linux backend finds PCI devices in sysfs itself,
 * and libpciaccess leaks its name table. */
static const char *const skipped_components[] = {
    "opencl", "cuda", "nvml", "rsmi", "levelzero", "gl", "pci",
};

static int os_index_order(const void *a, const void *b)
{
    int x = ((const zcopy_topo_device_t *)a)->os_index;
    int y = ((const zcopy_topo_device_t *)b)->os_index;

    return (x > y) - (x < y);
}

static zcopy_status_t numa_collect(topo_state_t *s)
{
    int n = hwloc_get_nbobjs_by_type(s->hw, HWLOC_OBJ_NUMANODE);

    if (n <= 0)
        return ZCOPY_SUCCESS; /* hwloc always has one; nothing to list if not */
    s->numa = calloc((size_t)n, sizeof(*s->numa));
    if (s->numa == NULL)
        return zcopy_error(ZCOPY_ERR_NOMEM, "topology: out of memory");
    for (int i = 0; i < n; i++) {
        hwloc_obj_t node = hwloc_get_obj_by_type(s->hw, HWLOC_OBJ_NUMANODE,
                                                 (unsigned)i);
        zcopy_topo_device_t *d = &s->numa[s->nnuma];

        if (node == NULL)
            continue;
        d->os_index = (int)node->os_index;
        snprintf(d->name, sizeof(d->name), "NUMA node %u", node->os_index);
        d->local_memory = node->attr ? node->attr->numanode.local_memory : 0;
        /* A memory object's cpuset is that of the object it hangs from:
         * the CPUs it is local to, even for a node without CPUs. */
        d->locality = node->cpuset;
        d->npus = cpuset_weight(node->cpuset);
        s->nnuma++;
    }
    return ZCOPY_SUCCESS;
}

static void state_free(topo_state_t *s)
{
    if (s == NULL)
        return;
    free(s->gpus);
    free(s->numa);
    hwloc_topology_destroy(s->hw);
    free(s);
}

static zcopy_status_t state_load(topo_state_t **state_p)
{
    topo_state_t *s = calloc(1, sizeof(*s));
    zcopy_status_t st;

    if (s == NULL)
        return zcopy_error(ZCOPY_ERR_NOMEM, "topology: out of memory");
    if (hwloc_topology_init(&s->hw) != 0) {
        st = zcopy_error(ZCOPY_ERR_SYSTEM, "hwloc_topology_init failed: %s",
                         strerror(errno));
        goto err_free_state;
    }
    /* GPUs are I/O objects, which hwloc leaves out unless asked; IMPORTANT
     * keeps GPUs, NICs and the PCI devices under them, not every bridge. */
    hwloc_topology_set_io_types_filter(s->hw, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
    for (size_t i = 0; i < sizeof(skipped_components) /
                               sizeof(skipped_components[0]); i++)
        (void)hwloc_topology_set_components(
            s->hw, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST,
            skipped_components[i]); /* fails only if this build lacks it */
    if (hwloc_topology_load(s->hw) != 0) {
        st = zcopy_error(ZCOPY_ERR_SYSTEM, "hwloc_topology_load failed: %s",
                         strerror(errno));
        goto err_destroy_topology;
    }
    s->this_system = hwloc_topology_is_thissystem(s->hw) != 0;
    st = numa_collect(s);
    if (st == ZCOPY_SUCCESS)
        st = zcopy_topo_gpus_collect(s->hw, &s->gpus, &s->ngpus);
    if (st != ZCOPY_SUCCESS)
        goto err_free_devices;
    /* Numbered lists read best in number order; hwloc's logical order
     * (by locality) is what os_index usually follows anyway. */
    if (s->nnuma > 1)
        qsort(s->numa, (size_t)s->nnuma, sizeof(*s->numa), os_index_order);
    if (s->ngpus > 1)
        qsort(s->gpus, (size_t)s->ngpus, sizeof(*s->gpus), os_index_order);
    zcopy_log(ZCOPY_LOG_TRACE, "topo", "topology loaded: %d NUMA nodes, %d "
              "GPUs%s", s->nnuma, s->ngpus,
              s->this_system ? "" : " (not this system: HWLOC_SYNTHETIC or "
                                    "HWLOC_XMLFILE)");
    *state_p = s;
    return ZCOPY_SUCCESS;

err_free_devices:
    free(s->gpus);
    free(s->numa);
err_destroy_topology:
    hwloc_topology_destroy(s->hw);
err_free_state:
    free(s);
    return st;
}

static zcopy_status_t topo_get(const topo_state_t **state_p)
{
    topo_state_t *s = atomic_load_explicit(&topo.state, memory_order_acquire);
    zcopy_status_t st = ZCOPY_SUCCESS;

    if (s != NULL) {
        *state_p = s;
        return ZCOPY_SUCCESS;
    }
    pthread_mutex_lock(&topo.lock);
    s = atomic_load_explicit(&topo.state, memory_order_relaxed);
    if (s == NULL && topo.failed == ZCOPY_SUCCESS) {
        st = state_load(&s);
        if (st == ZCOPY_SUCCESS) {
            /* Release: a reader that sees the pointer sees the state. */
            atomic_store_explicit(&topo.state, s, memory_order_release);
        } else {
            topo.failed = st;
            snprintf(topo.failure, sizeof(topo.failure), "%s",
                     zcopy_error_detail());
            zcopy_log(ZCOPY_LOG_WARN, "topo", "no topology, devices unknown: "
                      "%s", topo.failure);
        }
    } else if (s == NULL) {
        st = zcopy_error(topo.failed, "%s", topo.failure);
    }
    pthread_mutex_unlock(&topo.lock);
    if (st == ZCOPY_SUCCESS)
        *state_p = s;
    return st;
}

zcopy_status_t zcopy_topo_init(void)
{
    const topo_state_t *s;

    return topo_get(&s);
}

void zcopy_topo_cleanup(void)
{
    pthread_mutex_lock(&topo.lock);
    state_free(atomic_exchange_explicit(&topo.state, NULL,
                                        memory_order_acq_rel));
    topo.failed = ZCOPY_SUCCESS;
    topo.failure[0] = '\0';
    pthread_mutex_unlock(&topo.lock);
}

bool zcopy_topo_is_this_system(void)
{
    const topo_state_t *s;

    return topo_get(&s) == ZCOPY_SUCCESS && s->this_system;
}

static zcopy_status_t devices_of(const topo_state_t *s, zcopy_mem_kind_t kind,
                                 const zcopy_topo_device_t **devices_p,
                                 int *count_p)
{
    switch (kind) {
    case ZCOPY_MEM_HOST:
        *devices_p = s->numa;
        *count_p = s->nnuma;
        return ZCOPY_SUCCESS;
    case ZCOPY_MEM_CUDA:
        *devices_p = s->gpus;
        *count_p = s->ngpus;
        return ZCOPY_SUCCESS;
    }
    return zcopy_error(ZCOPY_ERR_ARG, "unknown memory kind %d", (int)kind);
}

zcopy_status_t zcopy_topo_devices(zcopy_mem_kind_t kind,
                                  const zcopy_topo_device_t **devices_p,
                                  int *count_p)
{
    const topo_state_t *s;

    if (devices_p == NULL || count_p == NULL)
        return zcopy_error(ZCOPY_ERR_ARG, "topology: NULL output pointer");
    ZCOPY_CHECK(topo_get(&s));
    return devices_of(s, kind, devices_p, count_p);
}

/* The device local to all of @where with the smallest locality: the
 * package's own node rather than one attached to the whole machine. */
static int nearest_of(const zcopy_topo_device_t *devices, int count,
                      hwloc_const_cpuset_t where)
{
    unsigned best_weight = UINT_MAX;
    int best = -1;

    if (hwloc_bitmap_iszero(where))
        return -1;
    for (int i = 0; i < count; i++) {
        const zcopy_topo_device_t *d = &devices[i];
        unsigned w = cpuset_weight(d->locality);

        if (d->locality == NULL || !hwloc_bitmap_isincluded(where, d->locality))
            continue;
        if (w < best_weight) {
            best_weight = w;
            best = d->os_index;
        }
    }
    return best;
}

/* The CPUs the calling thread may run on, for the caller to free: the
 * thread that runs the collectives, or allocates. Read each time: the
 * application may rebind between two calls. One system call, where the
 * process's binding reads every thread's from /proc (a quarter of a
 * communicator's set-up). An unbound thread, or one whose binding hwloc
 * cannot read, may run anywhere, so the whole machine is its place. */
static zcopy_status_t thread_binding(const topo_state_t *s,
                                      hwloc_bitmap_t *binding_p)
{
    hwloc_bitmap_t binding = hwloc_bitmap_alloc();

    if (binding == NULL)
        return zcopy_error(ZCOPY_ERR_NOMEM, "topology: out of memory");
    if (hwloc_get_cpubind(s->hw, binding, HWLOC_CPUBIND_THREAD) != 0 ||
        hwloc_bitmap_iszero(binding))
        hwloc_bitmap_copy(binding, hwloc_topology_get_topology_cpuset(s->hw));
    *binding_p = binding;
    return ZCOPY_SUCCESS;
}

zcopy_status_t zcopy_topo_nearest_device(zcopy_mem_kind_t kind,
                                         hwloc_const_cpuset_t cpuset,
                                         int *os_index_p)
{
    const zcopy_topo_device_t *devices = NULL;
    const topo_state_t *s;
    hwloc_bitmap_t binding = NULL;
    int count = 0;

    if (os_index_p == NULL)
        return zcopy_error(ZCOPY_ERR_ARG, "topology: NULL output pointer");
    ZCOPY_CHECK(topo_get(&s));
    ZCOPY_CHECK(devices_of(s, kind, &devices, &count));
    if (cpuset != NULL) {
        *os_index_p = nearest_of(devices, count, cpuset);
        return ZCOPY_SUCCESS;
    }
    ZCOPY_CHECK(thread_binding(s, &binding));
    *os_index_p = nearest_of(devices, count, binding);
    hwloc_bitmap_free(binding);
    return ZCOPY_SUCCESS;
}

bool zcopy_topo_numa_node_exists(int os_index)
{
    const topo_state_t *s;

    if (os_index < 0 || topo_get(&s) != ZCOPY_SUCCESS)
        return false;
    for (int i = 0; i < s->nnuma; i++)
        if (s->numa[i].os_index == os_index)
            return true;
    return false;
}

/* The outermost data cache above the first CPU of @where. */
static hwloc_obj_t last_cache_above(hwloc_topology_t hw,
                                    hwloc_const_cpuset_t where)
{
    hwloc_obj_t o = hwloc_get_obj_inside_cpuset_by_type(hw, where,
                                                        HWLOC_OBJ_PU, 0);
    hwloc_obj_t best = NULL;

    for (; o != NULL; o = o->parent)
        if (hwloc_obj_type_is_dcache(o->type) &&
            (best == NULL || o->attr->cache.depth > best->attr->cache.depth))
            best = o;
    return best;
}

zcopy_status_t zcopy_topo_last_cache(zcopy_topo_cache_t *cache)
{
    hwloc_bitmap_t binding = NULL;
    const topo_state_t *s;
    hwloc_obj_t c;
    int cores;

    ZCOPY_CHECK(topo_get(&s));
    ZCOPY_CHECK(thread_binding(s, &binding));
    c = last_cache_above(s->hw, binding);
    hwloc_bitmap_free(binding);
    if (c == NULL || c->attr->cache.size == 0)
        return zcopy_error(ZCOPY_ERR_NOT_FOUND, "topology: no data cache "
                           "above this thread's CPUs");
    cores = hwloc_get_nbobjs_inside_cpuset_by_type(s->hw, c->cpuset,
                                                   HWLOC_OBJ_CORE);
    *cache = (zcopy_topo_cache_t){ .bytes = c->attr->cache.size,
                                   .level = (int)c->attr->cache.depth,
                                   .cores = cores > 0 ? (unsigned)cores : 1 };
    return ZCOPY_SUCCESS;
}

/* Past this many bytes a copy's destination would not stay in cache for
 * the next touch (the next collective on the same buffers, the program
 * reading its result), because the last-level cache holds about its share
 * per core for each rank: then streaming stores, which skip reading every
 * destination line first, win. Half of that share, since a copy brings its
 * source in too. Without a cache to go by, 2 MiB (measured on the
 * project's first machine, an Intel VM). */
#define STREAMING_MIN_FALLBACK (2u << 20)

size_t zcopy_topo_streaming_min(zcopy_topo_cache_t *cache)
{
    zcopy_topo_cache_t c = { 0 };
    size_t share;

    if (zcopy_topo_last_cache(&c) != ZCOPY_SUCCESS)
        c = (zcopy_topo_cache_t){ 0 };
    if (cache != NULL)
        *cache = c;
    if (zcopy_config.streaming_min > 0)
        return zcopy_config.streaming_min;
    if (c.bytes == 0)
        return STREAMING_MIN_FALLBACK;
    share = (size_t)(c.bytes / c.cores);
    return share / 2 > 1 ? share / 2 : 1;
}
