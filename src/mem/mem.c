/*
 * The public memory calls: every rule of SPEC section 2 is checked here,
 * before anything is changed, so a failed call leaves no trace.
 */
#include "mem.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct {
    uintptr_t va;
    size_t size;
    unsigned nmappings;
    unsigned pins;         /* set memory ranges inside */
} mem_reservation_t;

typedef struct {
    uintptr_t va;
    size_t size;
    size_t offset;
    struct zcopy_mem_handle *handle;
    unsigned pins;         /* activated blocks on it */
} mem_mapping_t;

/* The address space is one per process, and so is its bookkeeping: one
 * table of reservations, mappings and handles behind one lock. */
static struct {
    pthread_mutex_t lock;
    mem_reservation_t *resv;
    size_t nresv, cap_resv;
    mem_mapping_t *maps;
    size_t nmaps, cap_maps;
    struct zcopy_mem_handle *handles;
} mem = { .lock = PTHREAD_MUTEX_INITIALIZER };

static size_t page_size(void) { return (size_t)sysconf(_SC_PAGESIZE); }

/* --- sorted arrays ------------------------------------------------------ */

/* Index of the reservation containing @va, or -1. */
static ssize_t resv_find(uintptr_t va)
{
    size_t lo = 0, hi = mem.nresv;

    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (va < mem.resv[mid].va)
            hi = mid;
        else if (va >= mem.resv[mid].va + mem.resv[mid].size)
            lo = mid + 1;
        else
            return (ssize_t)mid;
    }
    return -1;
}

/* Index of the first mapping that ends after @va (insertion point). */
static size_t map_lower_bound(uintptr_t va)
{
    size_t lo = 0, hi = mem.nmaps;

    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (mem.maps[mid].va + mem.maps[mid].size <= va)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static ssize_t map_find_start(uintptr_t va)
{
    size_t i = map_lower_bound(va);
    return i < mem.nmaps && mem.maps[i].va == va ? (ssize_t)i : -1;
}

static bool handle_is_live(const struct zcopy_mem_handle *h)
{
    for (const struct zcopy_mem_handle *it = mem.handles; it; it = it->next)
        if (it == h)
            return true;
    return false;
}

/* --- granularity --------------------------------------------------------- */

static zcopy_status_t check_prop(const zcopy_mem_prop_t *prop)
{
    if (prop == NULL)
        return zcopy_error(ZCOPY_ERR_ARG, "memory properties are NULL");
    if (prop->kind == ZCOPY_MEM_CUDA)
        return zcopy_mem_cuda_probe();
    if (prop->kind != ZCOPY_MEM_HOST)
        return zcopy_error(ZCOPY_ERR_ARG, "unknown memory kind %d",
                           (int)prop->kind);
    if (prop->flags & ~ZCOPY_MEM_HUGE)
        return zcopy_error(ZCOPY_ERR_ARG, "unknown property flags 0x%x",
                           prop->flags & ~ZCOPY_MEM_HUGE);
    return zcopy_mem_host_check_node(prop->device);
}

ZCOPY_EXPORT int zcopy_mem_granularity(const zcopy_mem_prop_t *prop,
                                       size_t *granularity)
{
    if (granularity == NULL)
        return zcopy_error(ZCOPY_ERR_ARG, "granularity pointer is NULL");
    ZCOPY_CHECK(check_prop(prop));
    *granularity = zcopy_mem_host_granularity(prop->flags);
    return ZCOPY_SUCCESS;
}

/* --- reservations -------------------------------------------------------- */

static zcopy_status_t reserve_check(void **va, size_t size, size_t alignment,
                                    uint64_t flags)
{
    size_t gran = page_size();

    if (va == NULL)
        return zcopy_error(ZCOPY_ERR_ARG, "reserve: va pointer is NULL");
    if (flags != 0)
        return zcopy_error(ZCOPY_ERR_ARG, "reserve: flags 0x%llx must be 0",
                           (unsigned long long)flags);
    if (size == 0)
        return zcopy_error(ZCOPY_ERR_ARG, "reserve: size is 0");
    if (size % gran)
        return zcopy_error(ZCOPY_ERR_RANGE,
                           "reserve: size %zu is not a multiple of the "
                           "granularity %zu", size, gran);
    if (alignment != 0 &&
        (alignment % gran || (alignment & (alignment - 1)) != 0))
        return zcopy_error(ZCOPY_ERR_RANGE,
                           "reserve: alignment %zu is not a power-of-two "
                           "multiple of the granularity %zu", alignment, gran);
    if (size > SIZE_MAX / 2 || alignment > SIZE_MAX / 2)
        return zcopy_error(ZCOPY_ERR_RANGE, "reserve: size %zu too large",
                           size);
    return ZCOPY_SUCCESS;
}

/* mmap gives page alignment; for more, over-reserve and trim both ends. */
static void *reserve_aligned(size_t size, size_t alignment, void *hint)
{
    const int prot = PROT_NONE;
    const int mflags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;
    size_t extra = alignment > page_size() ? alignment : 0;
    uintptr_t start, aligned;
    void *p;

    p = mmap(hint, size + extra, prot, mflags, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    if (extra == 0)
        return p;
    start = (uintptr_t)p;
    aligned = zcopy_align_up(start, alignment);
    if (aligned > start)
        munmap(p, aligned - start);
    if (start + extra > aligned)
        munmap((void *)(aligned + size), start + extra - aligned);
    return (void *)aligned;
}

ZCOPY_EXPORT int zcopy_mem_reserve(void **va, size_t size, size_t alignment,
                                   void *hint, uint64_t flags)
{
    mem_reservation_t *r;
    size_t i;
    void *p;

    ZCOPY_CHECK(reserve_check(va, size, alignment, flags));
    p = reserve_aligned(size, alignment, hint);
    if (p == NULL)
        return zcopy_error(ZCOPY_ERR_NOMEM,
                           "reserve: no %zu bytes of address space: %s", size,
                           strerror(errno));

    pthread_mutex_lock(&mem.lock);
    if (!zcopy_array_reserve((void **)&mem.resv, &mem.cap_resv, mem.nresv, sizeof(*r))) {
        pthread_mutex_unlock(&mem.lock);
        munmap(p, size);
        return zcopy_error(ZCOPY_ERR_NOMEM, "reserve: out of memory");
    }
    for (i = 0; i < mem.nresv && mem.resv[i].va < (uintptr_t)p; i++)
        ;
    memmove(&mem.resv[i + 1], &mem.resv[i], (mem.nresv - i) * sizeof(*r));
    mem.resv[i] = (mem_reservation_t){ .va = (uintptr_t)p, .size = size };
    mem.nresv++;
    pthread_mutex_unlock(&mem.lock);
    *va = p;
    return ZCOPY_SUCCESS;
}

ZCOPY_EXPORT int zcopy_mem_release(void *va)
{
    zcopy_status_t st = ZCOPY_SUCCESS;
    mem_reservation_t r;
    ssize_t i;

    pthread_mutex_lock(&mem.lock);
    i = resv_find((uintptr_t)va);
    if (i < 0 || mem.resv[i].va != (uintptr_t)va) {
        st = i < 0 ? zcopy_error(ZCOPY_ERR_NOT_FOUND,
                                 "release: %p is not a reservation", va)
                   : zcopy_error(ZCOPY_ERR_NOT_FOUND,
                                 "release: %p is inside reservation [%p, +%zu) "
                                 "but not its start", va,
                                 (void *)mem.resv[i].va, mem.resv[i].size);
        goto out;
    }
    r = mem.resv[i];
    if (r.nmappings || r.pins) {
        st = zcopy_error(ZCOPY_ERR_BUSY,
                         "release: reservation %p still holds %u mapping(s) "
                         "and %u memory range(s)", va, r.nmappings, r.pins);
        goto out;
    }
    if (munmap(va, r.size) != 0) {
        st = zcopy_error(ZCOPY_ERR_SYSTEM, "release: munmap(%p) failed: %s",
                         va, strerror(errno));
        goto out;
    }
    memmove(&mem.resv[i], &mem.resv[i + 1], (mem.nresv - i - 1) * sizeof(r));
    mem.nresv--;
out:
    pthread_mutex_unlock(&mem.lock);
    return st;
}

/* --- physical memory ----------------------------------------------------- */

ZCOPY_EXPORT int zcopy_mem_create(zcopy_mem_handle_t *handle, size_t size,
                                  const zcopy_mem_prop_t *prop, uint64_t flags)
{
    struct zcopy_mem_handle *h;
    zcopy_status_t st;
    size_t gran;

    if (handle == NULL)
        return zcopy_error(ZCOPY_ERR_ARG, "create: handle pointer is NULL");
    if (flags != 0)
        return zcopy_error(ZCOPY_ERR_ARG, "create: flags 0x%llx must be 0",
                           (unsigned long long)flags);
    ZCOPY_CHECK(check_prop(prop));
    gran = zcopy_mem_host_granularity(prop->flags);
    if (size == 0)
        return zcopy_error(ZCOPY_ERR_ARG, "create: size is 0");
    if (size % gran)
        return zcopy_error(ZCOPY_ERR_RANGE,
                           "create: size %zu is not a multiple of the "
                           "granularity %zu", size, gran);
    if (size > (size_t)INT64_MAX) /* no file, hence no memfd, holds it */
        return zcopy_error(ZCOPY_ERR_NOMEM,
                           "create: %zu bytes is more than any memory", size);

    h = calloc(1, sizeof(*h));
    if (h == NULL)
        return zcopy_error(ZCOPY_ERR_NOMEM, "create: out of memory");
    h->kind = prop->kind;
    h->size = size;
    h->granularity = gran;
    h->device = prop->device;
    st = zcopy_mem_host_create(h, size, prop);
    if (st != ZCOPY_SUCCESS) {
        free(h);
        return st;
    }
    pthread_mutex_lock(&mem.lock);
    h->next = mem.handles;
    mem.handles = h;
    pthread_mutex_unlock(&mem.lock);
    *handle = h;
    return ZCOPY_SUCCESS;
}

ZCOPY_EXPORT int zcopy_mem_free(zcopy_mem_handle_t handle)
{
    struct zcopy_mem_handle **pp;
    zcopy_status_t st = ZCOPY_SUCCESS;

    if (handle == NULL)
        return zcopy_error(ZCOPY_ERR_ARG, "free: handle is NULL");
    pthread_mutex_lock(&mem.lock);
    for (pp = &mem.handles; *pp && *pp != handle; pp = &(*pp)->next)
        ;
    if (*pp == NULL) {
        st = zcopy_error(ZCOPY_ERR_NOT_FOUND, "free: %p is not a live handle",
                         (void *)handle);
        goto out;
    }
    if (handle->map_count) {
        st = zcopy_error(ZCOPY_ERR_BUSY,
                         "free: handle %p is still mapped %u time(s)",
                         (void *)handle, handle->map_count);
        goto out;
    }
    *pp = handle->next;
    close(handle->fd);
    free(handle);
out:
    pthread_mutex_unlock(&mem.lock);
    return st;
}

ZCOPY_EXPORT int zcopy_mem_get_size(zcopy_mem_handle_t handle, size_t *size)
{
    zcopy_status_t st = ZCOPY_SUCCESS;

    if (handle == NULL || size == NULL)
        return zcopy_error(ZCOPY_ERR_ARG, "get_size: NULL argument");
    pthread_mutex_lock(&mem.lock);
    if (handle_is_live(handle))
        *size = handle->size;
    else
        st = zcopy_error(ZCOPY_ERR_NOT_FOUND,
                         "get_size: %p is not a live handle", (void *)handle);
    pthread_mutex_unlock(&mem.lock);
    return st;
}

/* --- mappings ------------------------------------------------------------ */

static zcopy_status_t map_check(uintptr_t va, size_t size, size_t offset,
                                const struct zcopy_mem_handle *h,
                                uint64_t flags, ssize_t *resv_index,
                                size_t *insert_at)
{
    ssize_t r;
    size_t i;

    if (flags != 0)
        return zcopy_error(ZCOPY_ERR_ARG, "map: flags 0x%llx must be 0",
                           (unsigned long long)flags);
    if (h == NULL)
        return zcopy_error(ZCOPY_ERR_ARG, "map: handle is NULL");
    if (!handle_is_live(h))
        return zcopy_error(ZCOPY_ERR_NOT_FOUND, "map: %p is not a live handle",
                           (const void *)h);
    if (size == 0)
        return zcopy_error(ZCOPY_ERR_ARG, "map: size is 0");
    if (!zcopy_is_aligned(va, h->granularity) || size % h->granularity ||
        offset % h->granularity)
        return zcopy_error(ZCOPY_ERR_RANGE,
                           "map: address %p, size %zu or offset %zu is not a "
                           "multiple of the granularity %zu", (void *)va, size,
                           offset, h->granularity);
    if (offset > h->size || size > h->size - offset)
        return zcopy_error(ZCOPY_ERR_RANGE,
                           "map: [offset %zu, +%zu) exceeds the handle's %zu "
                           "bytes", offset, size, h->size);
    r = resv_find(va);
    if (r < 0)
        return zcopy_error(ZCOPY_ERR_NOT_FOUND,
                           "map: %p is not inside any reservation",
                           (void *)va);
    if (!zcopy_range_inside(va, size, mem.resv[r].va, mem.resv[r].size))
        return zcopy_error(ZCOPY_ERR_RANGE,
                           "map: [%p, +%zu) straddles the end of reservation "
                           "[%p, +%zu)", (void *)va, size,
                           (void *)mem.resv[r].va, mem.resv[r].size);
    i = map_lower_bound(va);
    if (i < mem.nmaps &&
        zcopy_ranges_overlap(va, size, mem.maps[i].va, mem.maps[i].size))
        return zcopy_error(ZCOPY_ERR_OVERLAP,
                           "map: [%p, +%zu) overlaps mapping [%p, +%zu)",
                           (void *)va, size, (void *)mem.maps[i].va,
                           mem.maps[i].size);
    *resv_index = r;
    *insert_at = i;
    return ZCOPY_SUCCESS;
}

ZCOPY_EXPORT int zcopy_mem_map(void *va, size_t size, size_t offset,
                               zcopy_mem_handle_t handle, uint64_t flags)
{
    zcopy_status_t st;
    size_t i = 0;
    ssize_t r = -1;
    void *p;

    pthread_mutex_lock(&mem.lock);
    st = map_check((uintptr_t)va, size, offset, handle, flags, &r, &i);
    if (st != ZCOPY_SUCCESS)
        goto out;
    if (!zcopy_array_reserve((void **)&mem.maps, &mem.cap_maps, mem.nmaps, sizeof(*mem.maps))) {
        st = zcopy_error(ZCOPY_ERR_NOMEM, "map: out of memory");
        goto out;
    }
    p = mmap(va, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED,
             handle->fd, (off_t)offset);
    if (p == MAP_FAILED) {
        st = zcopy_error(ZCOPY_ERR_SYSTEM, "map: mmap at %p failed: %s", va,
                         strerror(errno));
        goto out;
    }
    memmove(&mem.maps[i + 1], &mem.maps[i],
            (mem.nmaps - i) * sizeof(*mem.maps));
    mem.maps[i] = (mem_mapping_t){ .va = (uintptr_t)va, .size = size,
                                   .offset = offset, .handle = handle };
    mem.nmaps++;
    mem.resv[r].nmappings++;
    handle->map_count++;
out:
    pthread_mutex_unlock(&mem.lock);
    return st;
}

ZCOPY_EXPORT int zcopy_mem_unmap(void *va)
{
    const int mflags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED;
    zcopy_status_t st = ZCOPY_SUCCESS;
    mem_mapping_t m;
    ssize_t i;

    pthread_mutex_lock(&mem.lock);
    i = map_find_start((uintptr_t)va);
    if (i < 0) {
        size_t j = map_lower_bound((uintptr_t)va);
        if (j < mem.nmaps && mem.maps[j].va < (uintptr_t)va)
            st = zcopy_error(ZCOPY_ERR_NOT_FOUND,
                             "unmap: %p is inside mapping [%p, +%zu) but not "
                             "its start", va, (void *)mem.maps[j].va,
                             mem.maps[j].size);
        else
            st = zcopy_error(ZCOPY_ERR_NOT_FOUND, "unmap: %p is not a mapping",
                             va);
        goto out;
    }
    m = mem.maps[i];
    if (m.pins) {
        st = zcopy_error(ZCOPY_ERR_BUSY,
                         "unmap: mapping [%p, +%zu) is activated; deactivate "
                         "it first", va, m.size);
        goto out;
    }
    /* Put the hole back as part of the reservation, not as free space. */
    if (mmap(va, m.size, PROT_NONE, mflags, -1, 0) == MAP_FAILED) {
        st = zcopy_error(ZCOPY_ERR_SYSTEM, "unmap: mmap(%p) failed: %s", va,
                         strerror(errno));
        goto out;
    }
    memmove(&mem.maps[i], &mem.maps[i + 1], (mem.nmaps - i - 1) * sizeof(m));
    mem.nmaps--;
    mem.resv[resv_find(m.va)].nmappings--;
    m.handle->map_count--;
out:
    pthread_mutex_unlock(&mem.lock);
    return st;
}

/* --- shareable handles --------------------------------------------------- */

ZCOPY_EXPORT int zcopy_mem_export(zcopy_mem_handle_t handle, int *fd)
{
    zcopy_status_t st = ZCOPY_SUCCESS;
    int nfd;

    if (handle == NULL || fd == NULL)
        return zcopy_error(ZCOPY_ERR_ARG, "export: NULL argument");
    pthread_mutex_lock(&mem.lock);
    if (!handle_is_live(handle)) {
        st = zcopy_error(ZCOPY_ERR_NOT_FOUND, "export: %p is not a live handle",
                         (void *)handle);
        goto out;
    }
    nfd = fcntl(handle->fd, F_DUPFD_CLOEXEC, 0);
    if (nfd < 0) {
        st = zcopy_error(ZCOPY_ERR_SYSTEM, "export: dup failed: %s",
                         strerror(errno));
        goto out;
    }
    *fd = nfd;
out:
    pthread_mutex_unlock(&mem.lock);
    return st;
}

ZCOPY_EXPORT int zcopy_mem_import(int fd, zcopy_mem_handle_t *handle)
{
    struct zcopy_mem_handle *h;
    struct stat st;
    int nfd;

    if (handle == NULL)
        return zcopy_error(ZCOPY_ERR_ARG, "import: handle pointer is NULL");
    if (fd < 0 || fstat(fd, &st) != 0)
        return zcopy_error(ZCOPY_ERR_ARG, "import: %d is not an open file",
                           fd);
    /* Only memfds answer F_GET_SEALS; anything else is not zcopy memory. */
    if (!S_ISREG(st.st_mode) || fcntl(fd, F_GET_SEALS) < 0)
        return zcopy_error(ZCOPY_ERR_ARG,
                           "import: fd %d is not exported zcopy memory", fd);
    if (st.st_size <= 0)
        return zcopy_error(ZCOPY_ERR_ARG, "import: fd %d holds no memory", fd);
    if ((size_t)st.st_size % page_size())
        return zcopy_error(ZCOPY_ERR_ARG,
                           "import: fd %d holds %lld bytes, not a whole number "
                           "of pages", fd, (long long)st.st_size);
    h = calloc(1, sizeof(*h));
    if (h == NULL)
        return zcopy_error(ZCOPY_ERR_NOMEM, "import: out of memory");
    nfd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (nfd < 0) {
        free(h);
        return zcopy_error(ZCOPY_ERR_SYSTEM, "import: dup failed: %s",
                           strerror(errno));
    }
    h->kind = ZCOPY_MEM_HOST;
    h->fd = nfd;
    h->size = (size_t)st.st_size;
    h->ino = st.st_ino;
    h->device = -1;
    h->imported = true;
    h->granularity = page_size();
    /* hugetlbfs reports its page size as the block size. */
    if ((size_t)st.st_blksize > h->granularity)
        h->granularity = (size_t)st.st_blksize;
    pthread_mutex_lock(&mem.lock);
    h->next = mem.handles;
    mem.handles = h;
    pthread_mutex_unlock(&mem.lock);
    *handle = h;
    return ZCOPY_SUCCESS;
}

/* --- pins for the registry ----------------------------------------------- */

zcopy_status_t zcopy_mem_reservation_pin(uintptr_t va, size_t size)
{
    zcopy_status_t st = ZCOPY_SUCCESS;
    ssize_t r;

    pthread_mutex_lock(&mem.lock);
    r = resv_find(va);
    if (r < 0)
        st = zcopy_error(ZCOPY_ERR_NOT_FOUND,
                         "%p is not inside a reservation made with "
                         "zcopy_mem_reserve", (void *)va);
    else if (!zcopy_range_inside(va, size, mem.resv[r].va, mem.resv[r].size))
        st = zcopy_error(ZCOPY_ERR_RANGE,
                         "[%p, +%zu) straddles the end of reservation "
                         "[%p, +%zu)", (void *)va, size,
                         (void *)mem.resv[r].va, mem.resv[r].size);
    else
        mem.resv[r].pins++;
    pthread_mutex_unlock(&mem.lock);
    return st;
}

void zcopy_mem_reservation_unpin(uintptr_t va)
{
    ssize_t r;

    pthread_mutex_lock(&mem.lock);
    r = resv_find(va);
    if (r >= 0 && mem.resv[r].pins)
        mem.resv[r].pins--;
    pthread_mutex_unlock(&mem.lock);
}

zcopy_status_t zcopy_mem_mapping_pin(uintptr_t va, size_t size,
                                     zcopy_mem_handle_t handle,
                                     zcopy_mem_mapping_info_t *info)
{
    zcopy_status_t st = ZCOPY_SUCCESS;
    mem_mapping_t *m;
    ssize_t i;

    pthread_mutex_lock(&mem.lock);
    if (!handle_is_live(handle)) {
        st = zcopy_error(ZCOPY_ERR_ARG, "%p is not a live memory handle",
                         (void *)handle);
        goto out;
    }
    i = map_find_start(va);
    if (i < 0) {
        st = zcopy_error(ZCOPY_ERR_ARG, "no mapping starts at %p",
                         (void *)va);
        goto out;
    }
    m = &mem.maps[i];
    if (m->handle != handle || m->size != size || m->offset != 0) {
        st = zcopy_error(ZCOPY_ERR_ARG,
                         "[%p, +%zu) is not exactly mapped to handle %p at "
                         "offset 0 (the mapping there is [%p, +%zu) of handle "
                         "%p at offset %zu)", (void *)va, size, (void *)handle,
                         (void *)m->va, m->size, (void *)m->handle, m->offset);
        goto out;
    }
    m->pins++;
    *info = (zcopy_mem_mapping_info_t){ .fd = handle->fd, .offset = m->offset,
                                        .ino = handle->ino,
                                        .kind = handle->kind };
out:
    pthread_mutex_unlock(&mem.lock);
    return st;
}

void zcopy_mem_mapping_unpin(uintptr_t va)
{
    ssize_t i;

    pthread_mutex_lock(&mem.lock);
    i = map_find_start(va);
    if (i >= 0 && mem.maps[i].pins)
        mem.maps[i].pins--;
    pthread_mutex_unlock(&mem.lock);
}
