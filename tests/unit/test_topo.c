/*
 * Unit test of the topology layer (SPEC section 5) on machines this one is
 * not: a synthetic topology of 2 packages and 4 NUMA nodes, an XML file
 * whose NUMA nodes are numbered out of order, and XML files with GPUs.
 * For each: the device lists, the nearest device of given cpusets, and
 * what zcopy_mem_create says to a NUMA node the topology has and the
 * kernel may not. Then the real machine, and the server identity with and
 * without virtual servers.
 */
#include "unit.h"

#include "topo/topo.h"

#include <sys/mman.h>

static char tmpdir[64];
static size_t page;

/* --- helpers ------------------------------------------------------------- */

/* Makes the next topology call load what @var names (HWLOC_SYNTHETIC or
 * HWLOC_XMLFILE, the other unset; NULL: the real machine). */
static void use_topology(const char *var, const char *value)
{
    unsetenv("HWLOC_SYNTHETIC");
    unsetenv("HWLOC_XMLFILE");
    if (var)
        setenv(var, value, 1);
    zcopy_topo_cleanup();
    CHECK_OK(zcopy_topo_init());
}

static bool kernel_has_node(int node)
{
    char path[64];

    snprintf(path, sizeof(path), "/sys/devices/system/node/node%d", node);
    return access(path, F_OK) == 0;
}

/* The os_index list of @kind as text, e.g. "0,1,8,9". */
static const char *device_indexes(zcopy_mem_kind_t kind)
{
    static char text[128];
    const zcopy_topo_device_t *d = NULL;
    size_t len = 0;
    int n = 0;

    text[0] = '\0';
    if (zcopy_topo_devices(kind, &d, &n) != ZCOPY_SUCCESS)
        return "(error)";
    for (int i = 0; i < n && len < sizeof(text) - 16; i++)
        len += (size_t)snprintf(text + len, sizeof(text) - len, "%s%d",
                                i ? "," : "", d[i].os_index);
    return text;
}

/* Nearest device of @kind to the CPUs in @list ("2-3", "0,2", ""). */
static int nearest(zcopy_mem_kind_t kind, const char *list)
{
    hwloc_bitmap_t set = hwloc_bitmap_alloc();
    int os_index = -2;

    CHECK(set != NULL && hwloc_bitmap_list_sscanf(set, list) == 0);
    CHECK_OK(zcopy_topo_nearest_device(kind, set, &os_index));
    hwloc_bitmap_free(set);
    return os_index;
}

static int create_on(int node)
{
    const zcopy_mem_prop_t prop = { .kind = ZCOPY_MEM_HOST, .device = node };
    zcopy_mem_handle_t h = NULL;
    int rc = zcopy_mem_create(&h, page, &prop, 0);

    if (rc == ZCOPY_SUCCESS)
        CHECK_OK(zcopy_mem_free(h));
    else
        CHECK(h == NULL);
    return rc;
}

/* A node the topology lists: placed if the kernel has it too, refused as
 * UNSUPPORTED (a valid request this machine cannot serve) if not. */
static void check_listed_node(int node)
{
    if (kernel_has_node(node))
        CHECK_OK(create_on(node));
    else
        CHECK_ERR(create_on(node), ZCOPY_ERR_UNSUPPORTED,
                  "exists in the hwloc topology");
}

/* A node the topology does not list: a bad argument either way. */
static void check_unlisted_node(int node)
{
    char text[64];

    snprintf(text, sizeof(text), "NUMA node %d does not exist", node);
    if (kernel_has_node(node))
        CHECK_ERR(create_on(node), ZCOPY_ERR_ARG,
                  "not in this process's hwloc topology");
    else
        CHECK_ERR(create_on(node), ZCOPY_ERR_ARG, text);
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");

    CHECK(f != NULL);
    if (f == NULL)
        return;
    CHECK(fputs(text, f) >= 0);
    CHECK(fclose(f) == 0);
}

/* --- synthetic: 2 packages, 2 L3 each, a NUMA node per L3 ----------------- */

static void test_synthetic(void)
{
    const zcopy_topo_device_t *d = NULL;
    int n = -1, own = -2;

    use_topology("HWLOC_SYNTHETIC", "pack:2 l3:2 [numa] core:2 pu:1");
    CHECK(!zcopy_topo_is_this_system());
    CHECK_OK(zcopy_topo_devices(ZCOPY_MEM_HOST, &d, &n));
    CHECK(n == 4);
    CHECK(strcmp(device_indexes(ZCOPY_MEM_HOST), "0,1,2,3") == 0);
    for (int i = 0; i < n; i++)
        CHECK(d[i].npus == 2 && d[i].locality != NULL &&
              hwloc_bitmap_weight(d[i].locality) == 2);
    CHECK_OK(zcopy_topo_devices(ZCOPY_MEM_CUDA, &d, &n));
    CHECK(n == 0);

    /* PUs 0-1 under node 0, 2-3 under node 1, ... */
    CHECK(nearest(ZCOPY_MEM_HOST, "0") == 0);
    CHECK(nearest(ZCOPY_MEM_HOST, "3") == 1);
    CHECK(nearest(ZCOPY_MEM_HOST, "4-5") == 2);
    CHECK(nearest(ZCOPY_MEM_HOST, "7") == 3);
    CHECK(nearest(ZCOPY_MEM_HOST, "0,2") == -1);   /* two nodes */
    CHECK(nearest(ZCOPY_MEM_HOST, "4-7") == -1);   /* a whole package */
    CHECK(nearest(ZCOPY_MEM_HOST, "0-7") == -1);   /* the machine */
    CHECK(nearest(ZCOPY_MEM_HOST, "") == -1);
    CHECK(nearest(ZCOPY_MEM_CUDA, "0") == -1);
    /* This process's binding means nothing in a made-up machine: hwloc
     * gives the whole of it, which no single node is local to. */
    CHECK_OK(zcopy_topo_nearest_device(ZCOPY_MEM_HOST, NULL, &own));
    CHECK(own == -1);

    for (int node = 0; node < 4; node++)
        CHECK(zcopy_topo_numa_node_exists(node));
    CHECK(!zcopy_topo_numa_node_exists(4));
    CHECK(!zcopy_topo_numa_node_exists(-1));

    CHECK_OK(create_on(-1));
    if (kernel_has_node(0))
        CHECK_OK(create_on(0));
    check_listed_node(3);
    check_unlisted_node(4);
    CHECK_ERR(create_on(-2), ZCOPY_ERR_ARG, "NUMA node -2 does not exist");
    if (!kernel_has_node(3)) {
        const zcopy_mem_prop_t prop = { .kind = ZCOPY_MEM_HOST, .device = 3 };
        size_t g = 0;

        CHECK_ERR(zcopy_mem_granularity(&prop, &g), ZCOPY_ERR_UNSUPPORTED,
                  "NUMA node 3 exists in the hwloc topology");
    }
}

/* --- the last-level cache and the streaming threshold ------------------- */

/* Each with its [numa]: hwloc 2.9 adding one itself to a synthetic
 * topology overlaps a memcpy (valgrind says so). */
static void test_caches(void)
{
    zcopy_topo_cache_t c = { 0 };

    /* 16 MiB of L3 over four cores: 4 MiB each, half of it 2 MiB. */
    use_topology("HWLOC_SYNTHETIC",
                 "pack:1 [numa] l3:1(size=16777216) l2:4(size=1048576) "
                 "core:1 pu:1");
    CHECK_OK(zcopy_topo_last_cache(&c));
    CHECK(c.level == 3 && c.bytes == 16u << 20 && c.cores == 4);
    CHECK(zcopy_topo_streaming_min(NULL) == 1u << 21);
    /* The parameter wins whatever the caches say. */
    zcopy_config.streaming_min = 12345;
    CHECK(zcopy_topo_streaming_min(&c) == 12345 && c.bytes == 16u << 20);
    zcopy_config.streaming_min = 0;

    /* One L2 per core and nothing shared: the share is the whole L2. */
    use_topology("HWLOC_SYNTHETIC",
                 "pack:2 [numa] core:2 l2:1(size=1048576) pu:2");
    CHECK_OK(zcopy_topo_last_cache(&c));
    CHECK(c.level == 2 && c.bytes == 1u << 20 && c.cores == 1);
    CHECK(zcopy_topo_streaming_min(NULL) == 1u << 19);

    /* No caches at all: the constant measured on the first machine. */
    use_topology("HWLOC_SYNTHETIC", "pack:1 [numa] core:2 pu:1");
    CHECK_ERR(zcopy_topo_last_cache(&c), ZCOPY_ERR_NOT_FOUND, "no data cache");
    CHECK(zcopy_topo_streaming_min(&c) == 2u << 20 && c.bytes == 0);
}

/* --- XML written by hwloc, NUMA nodes numbered 8, 9, 0, 1 ----------------- */

static void test_xml_numbering(void)
{
    char path[128];
    hwloc_topology_t hw;

    snprintf(path, sizeof(path), "%s/numa.xml", tmpdir);
    CHECK(hwloc_topology_init(&hw) == 0);
    CHECK(hwloc_topology_set_synthetic(
              hw, "pack:2 l3:2 [numa(indexes=8,9,0,1)] core:2 pu:1") == 0);
    CHECK(hwloc_topology_load(hw) == 0);
    CHECK(hwloc_topology_export_xml(hw, path, 0) == 0);
    hwloc_topology_destroy(hw);

    use_topology("HWLOC_XMLFILE", path);
    CHECK(!zcopy_topo_is_this_system());
    CHECK(strcmp(device_indexes(ZCOPY_MEM_HOST), "0,1,8,9") == 0);
    CHECK(nearest(ZCOPY_MEM_HOST, "0") == 8);  /* first L3: os_index 8 */
    CHECK(nearest(ZCOPY_MEM_HOST, "2-3") == 9);
    CHECK(nearest(ZCOPY_MEM_HOST, "5") == 0);
    CHECK(nearest(ZCOPY_MEM_HOST, "6") == 1);
    CHECK(zcopy_topo_numa_node_exists(8));
    CHECK(!zcopy_topo_numa_node_exists(2));
    check_listed_node(8);
    check_listed_node(0);
    check_unlisted_node(2);
    CHECK(unlink(path) == 0);
}

/* --- XML with GPUs -------------------------------------------------------- */

/* Two packages of two PUs, one NUMA node each. NVIDIA GPUs at 0000:3b
 * (package 0, OS devices %1$s) and 0000:86 (package 1, %2$s), and an Intel
 * VGA that is no CUDA device. */
static const char gpu_xml[] =
    "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
    "<!DOCTYPE topology SYSTEM \"hwloc2.dtd\">\n"
    "<topology version=\"2.0\">\n"
    "<object type=\"Machine\" os_index=\"0\" cpuset=\"0xf\" complete_cpuset=\"0xf\""
    " allowed_cpuset=\"0xf\" nodeset=\"0x3\" complete_nodeset=\"0x3\""
    " allowed_nodeset=\"0x3\" gp_index=\"1\">\n"
    " <object type=\"Package\" os_index=\"0\" cpuset=\"0x3\" complete_cpuset=\"0x3\""
    "  nodeset=\"0x1\" complete_nodeset=\"0x1\" gp_index=\"2\">\n"
    "  <object type=\"NUMANode\" os_index=\"0\" cpuset=\"0x3\" complete_cpuset=\"0x3\""
    "   nodeset=\"0x1\" complete_nodeset=\"0x1\" gp_index=\"3\" local_memory=\"1073741824\"/>\n"
    "  <object type=\"PU\" os_index=\"0\" cpuset=\"0x1\" complete_cpuset=\"0x1\""
    "   nodeset=\"0x1\" complete_nodeset=\"0x1\" gp_index=\"4\"/>\n"
    "  <object type=\"PU\" os_index=\"1\" cpuset=\"0x2\" complete_cpuset=\"0x2\""
    "   nodeset=\"0x1\" complete_nodeset=\"0x1\" gp_index=\"5\"/>\n"
    "  <object type=\"Bridge\" gp_index=\"20\" bridge_type=\"0-1\" depth=\"0\""
    "   bridge_pci=\"0000:[3a-3b]\">\n"
    "   <object type=\"PCIDev\" gp_index=\"21\" pci_busid=\"0000:3b:00.0\""
    "    pci_type=\"0302 [10de:2335] [10de:18be] a1\" pci_link_speed=\"0.000000\">\n"
    "%1$s"
    "   </object>\n"
    "  </object>\n"
    " </object>\n"
    " <object type=\"Package\" os_index=\"1\" cpuset=\"0xc\" complete_cpuset=\"0xc\""
    "  nodeset=\"0x2\" complete_nodeset=\"0x2\" gp_index=\"6\">\n"
    "  <object type=\"NUMANode\" os_index=\"1\" cpuset=\"0xc\" complete_cpuset=\"0xc\""
    "   nodeset=\"0x2\" complete_nodeset=\"0x2\" gp_index=\"7\" local_memory=\"1073741824\"/>\n"
    "  <object type=\"PU\" os_index=\"2\" cpuset=\"0x4\" complete_cpuset=\"0x4\""
    "   nodeset=\"0x2\" complete_nodeset=\"0x2\" gp_index=\"8\"/>\n"
    "  <object type=\"PU\" os_index=\"3\" cpuset=\"0x8\" complete_cpuset=\"0x8\""
    "   nodeset=\"0x2\" complete_nodeset=\"0x2\" gp_index=\"9\"/>\n"
    "  <object type=\"Bridge\" gp_index=\"30\" bridge_type=\"0-1\" depth=\"0\""
    "   bridge_pci=\"0000:[85-86]\">\n"
    "   <object type=\"PCIDev\" gp_index=\"31\" pci_busid=\"0000:86:00.0\""
    "    pci_type=\"0302 [10de:2335] [10de:18be] a1\" pci_link_speed=\"0.000000\">\n"
    "%2$s"
    "   </object>\n"
    "  </object>\n"
    " </object>\n"
    " <object type=\"Bridge\" gp_index=\"40\" bridge_type=\"0-1\" depth=\"0\""
    "  bridge_pci=\"0000:[00-00]\">\n"
    "  <object type=\"PCIDev\" gp_index=\"41\" pci_busid=\"0000:00:02.0\""
    "   pci_type=\"0300 [8086:46a6] [8086:3024] 0c\" pci_link_speed=\"0.000000\">\n"
    "   <object type=\"OSDev\" gp_index=\"42\" name=\"card0\" osdev_type=\"1\"/>\n"
    "  </object>\n"
    " </object>\n"
    "</object>\n"
    "</topology>\n";

/* An OS device of type GPU (osdev_type 1) named @name. */
#define GPU_OSDEV(_gp, _name)                                                \
    "    <object type=\"OSDev\" gp_index=\"" #_gp "\" name=\"" _name         \
    "\" osdev_type=\"1\"/>\n"

static void load_gpu_xml(const char *first, const char *second)
{
    char path[128], text[sizeof(gpu_xml) + 512];

    snprintf(path, sizeof(path), "%s/gpus.xml", tmpdir);
    snprintf(text, sizeof(text), gpu_xml, first, second);
    write_file(path, text);
    use_topology("HWLOC_XMLFILE", path);
    CHECK(unlink(path) == 0);
}

static void test_xml_gpus(void)
{
    const zcopy_topo_device_t *d = NULL;
    int n = -1;

    /* No CUDA names (hwloc without its CUDA plugin): PCI bus order, and a
     * GPU with no OS device at all still counts. */
    load_gpu_xml(GPU_OSDEV(22, "card1") GPU_OSDEV(23, "renderD129"), "");
    CHECK_OK(zcopy_topo_devices(ZCOPY_MEM_CUDA, &d, &n));
    CHECK(n == 2);
    if (n == 2) {
        CHECK(d[0].os_index == 0 && strcmp(d[0].pci_bus_id, "0000:3b:00.0") == 0);
        CHECK(strcmp(d[0].name, "card1") == 0 && d[0].npus == 2);
        CHECK(d[1].os_index == 1 && strcmp(d[1].pci_bus_id, "0000:86:00.0") == 0);
        CHECK(strcmp(d[1].name, "PCI 10de:2335") == 0);
    }
    CHECK(nearest(ZCOPY_MEM_CUDA, "0-1") == 0);
    CHECK(nearest(ZCOPY_MEM_CUDA, "3") == 1);
    CHECK(nearest(ZCOPY_MEM_CUDA, "1-2") == -1);
    CHECK(strcmp(device_indexes(ZCOPY_MEM_HOST), "0,1") == 0);

    /* CUDA names win over bus order, and name the device. */
    load_gpu_xml(GPU_OSDEV(22, "card1") GPU_OSDEV(24, "cuda1"),
                 GPU_OSDEV(32, "cuda0"));
    CHECK_OK(zcopy_topo_devices(ZCOPY_MEM_CUDA, &d, &n));
    CHECK(n == 2);
    if (n == 2) {
        CHECK(d[0].os_index == 0 && strcmp(d[0].pci_bus_id, "0000:86:00.0") == 0);
        CHECK(strcmp(d[0].name, "cuda0") == 0);
        CHECK(d[1].os_index == 1 && strcmp(d[1].name, "cuda1") == 0);
    }
    CHECK(nearest(ZCOPY_MEM_CUDA, "0") == 1);
    CHECK(nearest(ZCOPY_MEM_CUDA, "2-3") == 0);

    /* Where CUDA named some GPUs, the others are hidden from it
     * (CUDA_VISIBLE_DEVICES) and are no device numbers. */
    load_gpu_xml(GPU_OSDEV(22, "card1"), GPU_OSDEV(32, "cuda0"));
    CHECK(strcmp(device_indexes(ZCOPY_MEM_CUDA), "0") == 0);
    CHECK(nearest(ZCOPY_MEM_CUDA, "0") == -1);
}

/* --- the real machine ----------------------------------------------------- */

static void test_this_machine(void)
{
    const zcopy_topo_device_t *d = NULL;
    int n = 0, own = -2;

    use_topology(NULL, NULL);
    CHECK(zcopy_topo_is_this_system());
    CHECK_OK(zcopy_topo_devices(ZCOPY_MEM_HOST, &d, &n));
    CHECK(n >= 1);
    for (int i = 0; i < n; i++) {
        CHECK(zcopy_topo_numa_node_exists(d[i].os_index));
        /* Where the kernel shows nodes, hwloc's are among them. */
        if (kernel_has_node(0))
            CHECK(kernel_has_node(d[i].os_index));
    }
    CHECK_OK(zcopy_topo_nearest_device(ZCOPY_MEM_HOST, NULL, &own));
    CHECK(own == -1 || zcopy_topo_numa_node_exists(own));
    if (n == 1)
        CHECK(own == d[0].os_index); /* one node is local to every CPU */
    if (n >= 1 && kernel_has_node(d[0].os_index))
        CHECK_OK(create_on(d[0].os_index));
    CHECK_ERR(create_on(4096), ZCOPY_ERR_ARG, "NUMA node 4096 does not exist");
}

/* --- servers --------------------------------------------------------------- */

static void set_local(int rank, int size)
{
    char v[16];

    snprintf(v, sizeof(v), "%d", rank);
    setenv("OMPI_COMM_WORLD_LOCAL_RANK", v, 1);
    snprintf(v, sizeof(v), "%d", size);
    setenv("OMPI_COMM_WORLD_LOCAL_SIZE", v, 1);
}

static void test_server(void)
{
    zcopy_topo_server_t a, b;
    zcopy_topo_rank_t me;

    unsetenv("OMPI_COMM_WORLD_LOCAL_RANK");
    unsetenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    zcopy_config.virtual_servers = 1;
    CHECK_OK(zcopy_topo_server(&a));
    CHECK_OK(zcopy_topo_server(&b));
    CHECK(a.id[0] == b.id[0] && a.id[0] != 0 && a.id[1] == 0);
    CHECK(a.local_rank == -1 && a.local_index == 0 && a.local_count == 1);
    CHECK(a.host[0] != '\0');
    CHECK_ERR(zcopy_topo_server(NULL), ZCOPY_ERR_ARG, "NULL");

    set_local(3, 4);
    CHECK_OK(zcopy_topo_server(&b));
    CHECK(b.id[0] == a.id[0] && b.id[1] == 0);
    CHECK(b.local_rank == 3 && b.local_index == 3 && b.local_count == 4);

    /* Two virtual servers of 4 processes: local ranks {0,1} and {2,3}. */
    zcopy_config.virtual_servers = 2;
    CHECK_OK(zcopy_topo_server(&b));
    CHECK(b.id[0] == a.id[0] && b.id[1] == 2 && b.virtual_index == 1);
    CHECK(b.virtual_count == 2 && b.local_index == 1 && b.local_count == 2);
    set_local(1, 4);
    CHECK_OK(zcopy_topo_server(&b));
    CHECK(b.id[1] == 1 && b.local_index == 1 && b.local_count == 2);

    /* 5 processes in 2: blocks of 3, the last one short. */
    set_local(4, 5);
    CHECK_OK(zcopy_topo_server(&b));
    CHECK(b.id[1] == 2 && b.local_index == 1 && b.local_count == 2);
    set_local(2, 5);
    CHECK_OK(zcopy_topo_server(&b));
    CHECK(b.id[1] == 1 && b.local_index == 2 && b.local_count == 3);

    /* What a rank tells its peers at setup. */
    zcopy_topo_rank_self(&me, true);
    CHECK(me.server[0] == a.id[0] && me.server[1] == 1);
    CHECK(me.local_rank == 2 && me.local_index == 2);
    CHECK(me.numa == -1 || zcopy_topo_numa_node_exists(me.numa));
    /* Without the devices: the same place, nothing looked up. */
    zcopy_topo_rank_self(&me, false);
    CHECK(me.server[0] == a.id[0] && me.server[1] == 1);
    CHECK(me.local_rank == 2 && me.local_index == 2);
    CHECK(me.numa == -1 && me.gpu == -1);

    /* Nonsense in the environment: a process alone. */
    setenv("OMPI_COMM_WORLD_LOCAL_RANK", "x", 1);
    CHECK_OK(zcopy_topo_server(&b));
    CHECK(b.local_rank == -1 && b.local_count == 1 && b.id[1] == 0);

    unsetenv("OMPI_COMM_WORLD_LOCAL_RANK");
    unsetenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    zcopy_config.virtual_servers = 1;
}

int main(void)
{
    const zcopy_mem_prop_t host = { .kind = ZCOPY_MEM_HOST, .device = -1 };

    CHECK_OK(zcopy_mem_granularity(&host, &page));
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/zcopy-topo-XXXXXX");
    if (mkdtemp(tmpdir) == NULL) {
        perror("mkdtemp");
        return 1;
    }
    test_synthetic();
    test_caches();
    test_xml_numbering();
    test_xml_gpus();
    test_this_machine();
    test_server();
    zcopy_topo_cleanup();
    unsetenv("HWLOC_SYNTHETIC");
    unsetenv("HWLOC_XMLFILE");
    CHECK(rmdir(tmpdir) == 0);
    return unit_finish();
}
