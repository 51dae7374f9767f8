/*
 * Topology layer: which server this process is on, which devices memory can
 * live on there, and which of them are nearest to this process (SPEC
 * section 5).
 *
 * The hwloc topology is loaded once per process, on first use, with I/O
 * discovery on so that GPUs show up. hwloc itself honours HWLOC_SYNTHETIC
 * and HWLOC_XMLFILE, so tests can describe a machine this one is not; such
 * a topology is reported as not this system, and the memory layer then
 * still asks the kernel before it places pages (mem_host.c).
 *
 * Devices are numbered by os_index: the kernel's NUMA node number (what
 * zcopy_mem_prop_t.device means for ZCOPY_MEM_HOST), or the GPU number
 * (what it means for ZCOPY_MEM_CUDA).
 */
#ifndef ZCOPY_TOPO_H
#define ZCOPY_TOPO_H

#include "base/base.h"

#include <assert.h>
#include <hwloc.h>

/* Where this process runs, as the coll layer groups processes. */
typedef struct {
    uint64_t id[2];               /* host; virtual server + 1, 0 if not split */
    int virtual_index;            /* which virtual server of the host, from 0 */
    int virtual_count;            /* virtual servers per host in effect */
    int local_rank;               /* among the job's processes on host, or -1 */
    int local_index;              /* among the job's processes on this server */
    int local_count;              /* the job's processes on this server */
    char host[65];                /* HOST_NAME_MAX + 1 */
} zcopy_topo_server_t;

typedef struct {
    int os_index;                 /* kernel NUMA node, or GPU number */
    char name[32];                /* "NUMA node 0", "cuda0", "card1" */
    char pci_bus_id[16];          /* GPUs: "0000:3b:00.0"; NUMA nodes: "" */
    uint64_t local_memory;        /* NUMA nodes: bytes; GPUs: 0 (not known) */
    unsigned npus;                /* logical CPUs local to the device */
    hwloc_const_cpuset_t locality;/* those CPUs */
} zcopy_topo_device_t;

/* One rank's place, exchanged at communicator setup (coll/server/control.c) so
 * that the server map needs no MPI call of its own. */
typedef struct {
    uint64_t server[2];           /* zcopy_topo_server_t.id */
    int32_t local_rank;
    int32_t local_index;
    int32_t numa;                 /* nearest NUMA node, -1 none or not
                                     looked up */
    int32_t gpu;                  /* nearest GPU, the same */
} zcopy_topo_rank_t;
static_assert(sizeof(zcopy_topo_rank_t) == 32, "exchanged between processes");

/* Loads the topology if not loaded yet; thread-safe, and cheap once loaded.
 * Every other call below loads it on demand, so calling this is optional;
 * it is there to learn early why hwloc failed. */
zcopy_status_t zcopy_topo_init(void);

/* Unloads it, so that the next call loads it again (e.g. under a new
 * HWLOC_SYNTHETIC). Only when no other thread uses the layer: pointers from
 * zcopy_topo_devices() die here. */
void zcopy_topo_cleanup(void);

/* True when the topology describes the machine this process runs on (not
 * HWLOC_SYNTHETIC, nor an XML file of another machine). */
bool zcopy_topo_is_this_system(void);

/* This process's server. Needs no hwloc; reads coll_zcopy_virtual_servers
 * (zcopy_config) at each call, since that is set after the library loads. */
zcopy_status_t zcopy_topo_server(zcopy_topo_server_t *server_p);

/* The devices of @kind (NUMA nodes for ZCOPY_MEM_HOST, NVIDIA GPUs for
 * ZCOPY_MEM_CUDA, see gpu.c) in os_index order. The array lives until
 * zcopy_topo_cleanup(). */
zcopy_status_t zcopy_topo_devices(zcopy_mem_kind_t kind,
                                  const zcopy_topo_device_t **devices_p,
                                  int *count_p);

/* os_index of the device of @kind nearest to @cpuset (NULL: the calling
 * thread's CPU binding, or the whole machine if it cannot be read), or -1 when no
 * device is local to all of @cpuset, e.g. an unbound process on a machine
 * with one NUMA node per package. Among the devices local to all of it,
 * the one with the smallest locality wins, then the first. */
zcopy_status_t zcopy_topo_nearest_device(zcopy_mem_kind_t kind,
                                         hwloc_const_cpuset_t cpuset,
                                         int *os_index_p);

/* True when the topology has a NUMA node with this os_index (false also
 * when the topology cannot be loaded). */
bool zcopy_topo_numa_node_exists(int os_index);

/* The outermost data cache above this process's CPUs (its first CPU when
 * bound to several caches; the machine's first when unbound). */
typedef struct {
    uint64_t bytes;
    int level;                    /* 3 for an L3 */
    unsigned cores;               /* cores that share it */
} zcopy_topo_cache_t;

zcopy_status_t zcopy_topo_last_cache(zcopy_topo_cache_t *cache);

/* Bytes from which bulk copies use streaming stores: coll_zcopy_streaming_min
 * when set, else derived from the last-level cache (topo.c says how); the
 * cache it went by in *@cache (bytes 0: none found), if not NULL. */
size_t zcopy_topo_streaming_min(zcopy_topo_cache_t *cache);

/* Where coll_zcopy_streaming_min is 0, copies from this length up to the
 * threshold above take memcpy or streaming stores, whichever makes the
 * calls faster (coll/copy.c): a virtual machine may show its few CPUs a whole
 * socket's last-level cache, which puts the threshold far too high.
 * Shorter copies always take memcpy: their destination fits, or nearly,
 * the private L2 of a recent server core (1-2 MiB on Intel since
 * Skylake-SP and AMD since Zen 4; 512 KiB on Zen 2 and 3, whose L3
 * slices are small enough for hwloc's threshold to be right), and the
 * next touch finds it there. On an Intel Xeon VM with 2 MiB of L2 per
 * core streaming stores lost on copies of 1-2 MiB and won from 2-4 MiB
 * on. x86-64 only: elsewhere copies have no streaming stores. */
#define ZCOPY_TOPO_COPY_MEASURED_MIN ((size_t)1 << 20)

/* This process's server, and with @devices its nearest devices; never
 * fails (devices are -1 when hwloc cannot tell, or were not asked for).
 * Finding devices loads the topology: 35 ms on the first set-up of a job
 * on the AMD EPYC VM, which a job that prints no server map (and
 * allocates from no pool) does not need to pay. */
void zcopy_topo_rank_self(zcopy_topo_rank_t *rank, bool devices);

/* Prints this server's part of the map at ZCOPY_LOG_INFO, once per process
 * and only on the first process of its server, the first time it sees a
 * communicator that holds every process of its server. @ranks[r] is at
 * (const char *)@ranks + r * @stride (the hello records of coll/server/control.c). */
void zcopy_topo_print_server_map(const char *scope, int comm_size,
                                 const zcopy_topo_rank_t *ranks,
                                 size_t stride);

#endif /* ZCOPY_TOPO_H */
