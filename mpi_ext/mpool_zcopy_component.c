/*
 * mpool/zcopy: MPI_Alloc_mem returns activated memory, so that programs
 * which only use standard MPI get zero-copy collectives.
 *
 * Open MPI 4.1 asks every mpool component about the hints of each
 * MPI_Alloc_mem (the info key "mpool_hints", else the parameter
 * mpool_base_default_hints, chosen once at start-up) and takes the module
 * with the highest priority. This component answers only when the hints
 * name it ("zcopy" or "mpool=zcopy"); the memory itself is libzcopy's pool
 * (src/pool/pool.h).
 *
 * Two things Open MPI 4.1 does shape the rest:
 * - MPI_Free_mem hands any pointer its allocation tree does not know to
 *   free(3), so a second MPI_Free_mem of pool memory would give glibc a
 *   pointer it never allocated. For each freed address the component
 *   leaves a marker in the tree, found by that address but filed under a
 *   key no node has (the address plus one): Open MPI's own delete of it
 *   then fails and MPI_Free_mem raises MPI_ERR_NO_MEM, its answer to a bad
 *   base, with nothing changed. A marker goes when the pool hands the
 *   address out again, when the pool gives the address space back to the
 *   kernel (it keeps released blocks' reservations for a while, so that
 *   nobody else gets those addresses meanwhile), or to make room once
 *   MARKERS_MAX are held (a later bad free of it goes to free(3), as it
 *   would without zcopy).
 * - Under mpool_base_default_hints, Open MPI's own free lists take their
 *   payload from this module, at any time, also from progress runs that
 *   zcopy's waits start: those the pool cannot serve get ordinary memory.
 */
#include "opal_config.h"

#include "opal/mca/mpool/base/base.h"
#include "opal/mca/mpool/base/mpool_base_tree.h"
#include "opal/mca/mpool/mpool.h"
#include "opal/util/argv.h"

#include "pool/pool.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define MARKERS_MAX 4096

typedef struct {
    mca_mpool_base_component_t super;
    unsigned long block_size;     /* mpool_zcopy_block_size */
    int priority;                 /* mpool_zcopy_priority, when named */
} mca_mpool_zcopy_component_t;

static int zcopy_register(void);
static int zcopy_open(void);
static int zcopy_close(void);
static int zcopy_query(const char *hints, int *priority,
                       mca_mpool_base_module_t **module);

OPAL_MODULE_DECLSPEC extern mca_mpool_zcopy_component_t
    mca_mpool_zcopy_component;
static mca_mpool_base_module_t zcopy_module;

mca_mpool_zcopy_component_t mca_mpool_zcopy_component = {
    .super = {
        .mpool_version = {
            MCA_MPOOL_BASE_VERSION_3_0_0,
            .mca_component_name = "zcopy",
            MCA_BASE_MAKE_VERSION(component, 0, 1, 0),
            .mca_register_component_params = zcopy_register,
            .mca_open_component = zcopy_open,
            .mca_close_component = zcopy_close,
        },
        .mpool_data = {
            MCA_BASE_METADATA_PARAM_CHECKPOINT
        },
        .mpool_query = zcopy_query,
    },
    .block_size = ZCOPY_POOL_DEFAULT_BLOCK,
    .priority = 100,
};

/* The markers of freed addresses (see the top of the file), and the lock
 * that makes "free, then leave a marker" and "allocate, then drop the
 * marker" one step each: between the two, another thread could be handed
 * the address and file it in the tree. Per process, as Open MPI's tree is. */
static struct {
    pthread_mutex_t lock;
    mca_mpool_base_tree_item_t *item[MARKERS_MAX];
    size_t count;
    bool enabled;                 /* off once the tree is going, or while
                                     Open MPI reports MPI_Alloc_mem leaks */
    bool failure_reported;        /* an allocation got ordinary memory */
    uint64_t releases;            /* zcopy_pool_releases() at the last sweep */
} marks = { .lock = PTHREAD_MUTEX_INITIALIZER };

/* --- markers (under marks.lock) ----------------------------------------- */

static void *marker_addr(const mca_mpool_base_tree_item_t *m)
{
    return (char *)m->key - 1;
}

/* A marker remembers its place in marks.item in num_bytes, the field Open
 * MPI reads only for its leak report (markers are off during those). */
static void marker_drop(size_t k)
{
    mca_mpool_base_tree_item_t *m = marks.item[k];

    m->key = marker_addr(m); /* the key it was filed under */
    mca_mpool_base_tree_delete(m);
    mca_mpool_base_tree_item_put(m);
    if (k != --marks.count) {
        marks.item[k] = marks.item[marks.count];
        marks.item[k]->num_bytes = k;
    }
}

static void marker_add(void *addr)
{
    mca_mpool_base_tree_item_t *m;

    if (!marks.enabled)
        return;
    m = mca_mpool_base_tree_item_get();
    if (m == NULL)
        return; /* a later bad free goes to free(3), as without zcopy */
    m->key = addr;
    m->mpool = &zcopy_module;
    m->count = 0;
    if (mca_mpool_base_tree_insert(m) != OPAL_SUCCESS) {
        mca_mpool_base_tree_item_put(m);
        return;
    }
    m->key = (char *)addr + 1;
    if (marks.count == MARKERS_MAX)
        marker_drop(0);
    m->num_bytes = marks.count;
    marks.item[marks.count++] = m;
}

/* The marker of @addr, if the pool handed the address out again. */
static void marker_forget(void *addr)
{
    mca_mpool_base_tree_item_t *m;

    if (marks.count == 0)
        return;
    m = mca_mpool_base_tree_find(addr);
    if (m != NULL && m->mpool == &zcopy_module && marker_addr(m) == addr)
        marker_drop(m->num_bytes);
}

/* Markers on addresses the pool gave back to the kernel: anyone may be
 * handed those now. Rare: the pool keeps the last 64 released ranges. */
static void markers_sweep(void)
{
    uint64_t releases = zcopy_pool_releases();

    if (releases == marks.releases)
        return;
    marks.releases = releases;
    for (size_t k = marks.count; k-- > 0;)
        if (!zcopy_pool_contains(marker_addr(marks.item[k])))
            marker_drop(k);
}

/* --- module ------------------------------------------------------------- */

/* Ordinary memory, for what the pool cannot serve: Open MPI's own free
 * lists have no fallback of their own. */
static void *plain_alloc(size_t size, size_t align)
{
    void *p = NULL;

    if (align < sizeof(void *))
        align = sizeof(void *);
    return posix_memalign(&p, align, size) == 0 ? p : NULL;
}

static void *zcopy_alloc(mca_mpool_base_module_t *module, size_t size,
                         size_t align, uint32_t flags)
{
    zcopy_status_t st;
    void *p = NULL;

    (void)module;
    (void)flags;
    /* Called back from inside zcopy, perhaps under its locks. */
    if (zcopy_pool_reentered())
        return plain_alloc(size, align);
    pthread_mutex_lock(&marks.lock);
    st = zcopy_pool_alloc(size, align, &p);
    if (st == ZCOPY_SUCCESS) {
        marker_forget(p);
    } else if (!marks.failure_reported) {
        /* Every collective on this memory will fall back: say so once. */
        opal_output(0, "mpool/zcopy: no activated memory for %zu bytes "
                       "(%s); ordinary memory instead", size,
                    zcopy_error_detail());
        marks.failure_reported = true;
    }
    pthread_mutex_unlock(&marks.lock);
    return p != NULL ? p : plain_alloc(size, align);
}

static void zcopy_free(mca_mpool_base_module_t *module, void *addr)
{
    (void)module;
    if (addr == NULL) /* free lists without payload free that */
        return;
    pthread_mutex_lock(&marks.lock);
    if (zcopy_pool_free(addr) == ZCOPY_SUCCESS) {
        markers_sweep();
        if (zcopy_pool_contains(addr))
            marker_add(addr);
    } else if (!zcopy_pool_contains(addr)) {
        free(addr); /* from plain_alloc */
    } else {
        /* Only Open MPI calls this, with what zcopy_alloc returned. */
        opal_output(0, "mpool/zcopy: %s", zcopy_error_detail());
    }
    pthread_mutex_unlock(&marks.lock);
}

static mca_mpool_base_module_t zcopy_module = {
    .mpool_component = &mca_mpool_zcopy_component.super,
    .mpool_alloc = zcopy_alloc,
    .mpool_free = zcopy_free,
    .mpool_allocation_unit = ZCOPY_POOL_UNIT,
    .mpool_name = "zcopy",
};

/* --- component ---------------------------------------------------------- */

static int zcopy_register(void)
{
    mca_mpool_zcopy_component_t *c = &mca_mpool_zcopy_component;

    (void)mca_base_component_var_register(
        &c->super.mpool_version, "block_size",
        "Bytes of activated memory the pool takes at a time for small "
        "MPI_Alloc_mem requests (rounded up to the page size); a request "
        "above half of it gets memory of its own, released by its "
        "MPI_Free_mem",
        MCA_BASE_VAR_TYPE_UNSIGNED_LONG, NULL, 0, 0, OPAL_INFO_LVL_5,
        MCA_BASE_VAR_SCOPE_READONLY, &c->block_size);
    (void)mca_base_component_var_register(
        &c->super.mpool_version, "priority",
        "Priority of this pool when the hints of an MPI_Alloc_mem (info "
        "key mpool_hints, or mpool_base_default_hints) name it: zcopy or "
        "mpool=zcopy. Unnamed, it is never chosen",
        MCA_BASE_VAR_TYPE_INT, NULL, 0, 0, OPAL_INFO_LVL_9,
        MCA_BASE_VAR_SCOPE_READONLY, &c->priority);
    return OPAL_SUCCESS;
}

/* Open MPI unloads a component when its framework closes, yet keeps
 * calling the module it chose as the default pool: the free lists built
 * on it are destroyed later in MPI_Finalize, and the framework's own last.
 * So the component stays loaded for the life of the process. */
static void stay_loaded(void)
{
    Dl_info self;

    if (dladdr((void *)zcopy_query, &self) != 0 && self.dli_fname != NULL)
        (void)dlopen(self.dli_fname, RTLD_LAZY | RTLD_NOLOAD | RTLD_NODELETE);
}

/* Open MPI's leak report (mpi_show_mpi_alloc_mem_leaks) lists every item
 * of its tree, markers too: no markers while it is on. */
static bool leak_report_on(void)
{
    const int *value = NULL;
    int index = mca_base_var_find("ompi", "mpi", NULL,
                                  "show_mpi_alloc_mem_leaks");

    return index >= 0 &&
           mca_base_var_get_value(index, &value, NULL, NULL) == OPAL_SUCCESS &&
           value != NULL && *value != 0;
}

static int zcopy_open(void)
{
    stay_loaded();
    pthread_mutex_lock(&marks.lock);
    marks.enabled = !leak_report_on();
    pthread_mutex_unlock(&marks.lock);
    zcopy_pool_set_block_size(mca_mpool_zcopy_component.block_size);
    return OPAL_SUCCESS;
}

static int zcopy_close(void)
{
    pthread_mutex_lock(&marks.lock);
    while (marks.count > 0)
        marker_drop(marks.count - 1);
    marks.enabled = false;
    pthread_mutex_unlock(&marks.lock);
    zcopy_pool_trim();
    return OPAL_SUCCESS;
}

/* Whether @hints ("key=value,key=value" or bare names) ask for this pool:
 * 1 named, 0 silent, -1 another pool named. */
static int hints_name_zcopy(const char *hints)
{
    char **words;
    int named = 0;

    if (hints == NULL)
        return 0;
    words = opal_argv_split(hints, ',');
    for (int i = 0; words != NULL && words[i] != NULL && named >= 0; i++) {
        char *value = strchr(words[i], '=');

        if (value == NULL) {
            if (strcasecmp(words[i], "zcopy") == 0)
                named = 1;
            continue;
        }
        *value++ = '\0';
        if (strcasecmp(words[i], "mpool") == 0)
            named = strcasecmp(value, "zcopy") == 0 ? 1 : -1;
    }
    opal_argv_free(words);
    return named;
}

static int zcopy_query(const char *hints, int *priority,
                       mca_mpool_base_module_t **module)
{
    if (hints_name_zcopy(hints) <= 0)
        return OPAL_ERR_NOT_FOUND;
    if (priority != NULL)
        *priority = mca_mpool_zcopy_component.priority;
    if (module != NULL)
        *module = &zcopy_module;
    return OPAL_SUCCESS;
}
