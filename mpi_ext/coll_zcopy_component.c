/*
 * Component: registration, parameters and MPI_T counters.
 */
#include "coll_zcopy.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ompi/attribute/attribute.h"
#include "ompi/runtime/mpiruntime.h"
#include "opal/mca/base/mca_base_pvar.h"
#include "opal/mca/base/mca_base_var_enum.h"
#include "opal/runtime/opal_progress.h"
#include "opal/util/output.h"

#include "coll/coll.h"
#include "ipc/ipc.h"
#include "ucx/ucx.h"

static int zcopy_register(void);
static int zcopy_init_query(bool enable_progress_threads,
                            bool enable_mpi_threads);
static int zcopy_close(void);

mca_coll_zcopy_component_t mca_coll_zcopy_component = {
    .super = {
        .collm_version = {
            MCA_COLL_BASE_VERSION_2_0_0,
            .mca_component_name = "zcopy",
            MCA_BASE_MAKE_VERSION(component, 0, 1, 0),
            .mca_register_component_params = zcopy_register,
            .mca_close_component = zcopy_close,
        },
        .collm_data = {
            MCA_BASE_METADATA_PARAM_CHECKPOINT
        },
        .collm_init_query = zcopy_init_query,
        .collm_comm_query = mca_coll_zcopy_comm_query,
    },
    .priority = 40,
    .verbose = 0,
    .virtual_servers = 1,
    .small_msg = 16384,
    .inline_max = 1024,
    .inline_max_yield = 8192,
    .root_moves_max = 262144,
    .rooted_yield_min = 256,
    .one_per_server_min = 2048,
    .one_per_server_moves = false,
    .span_inline_max = 262144,
    .span_dissemination_min = 64,
    .yield = 0,
    .sleep = 0,
    .transport = ZCOPY_TRANSPORT_AUTO,
    .wait_report = 60,
    .peer_access = ZCOPY_IPC_ACCESS_AUTO,
    .ucx_max_requests = 128,
    .ucx_p2p_min = 4194304,
    .ucx_push_min = 262144,
    .ucx_push_part_max = 1UL << 30,
};

/* Struct layouts are the real ABI and the framework checks only its own
 * version, so a build for 4.1 must refuse any other Open MPI release. */
static bool zcopy_release_matches(void)
{
    char version[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;

    MPI_Get_library_version(version, &len);
    if (strstr(version, "Open MPI v4.1.") != NULL)
        return true;
    opal_output(0, "coll/zcopy: built for Open MPI 4.1.x but running on "
                   "\"%.60s\"; the component stays unloaded (rebuild zcopy "
                   "against this Open MPI's headers)", version);
    return false;
}

static void zcopy_register_int(const char *name, const char *desc,
                               mca_base_var_info_lvl_t level, int *storage)
{
    (void)mca_base_component_var_register(
        &mca_coll_zcopy_component.super.collm_version, name, desc,
        MCA_BASE_VAR_TYPE_INT, NULL, 0, 0, level, MCA_BASE_VAR_SCOPE_READONLY,
        storage);
}

static void zcopy_register_bool(const char *name, const char *desc,
                                mca_base_var_info_lvl_t level, bool *storage)
{
    (void)mca_base_component_var_register(
        &mca_coll_zcopy_component.super.collm_version, name, desc,
        MCA_BASE_VAR_TYPE_BOOL, NULL, 0, 0, level, MCA_BASE_VAR_SCOPE_READONLY,
        storage);
}

static void zcopy_register_ulong(const char *name, const char *desc,
                                 mca_base_var_info_lvl_t level,
                                 unsigned long *storage)
{
    (void)mca_base_component_var_register(
        &mca_coll_zcopy_component.super.collm_version, name, desc,
        MCA_BASE_VAR_TYPE_UNSIGNED_LONG, NULL, 0, 0, level,
        MCA_BASE_VAR_SCOPE_READONLY, storage);
}

/* An enumerator, so that ompi_info lists the values and Open MPI rejects
 * a misspelt one itself. */
static void zcopy_register_enum(const char *name,
                                const mca_base_var_enum_value_t *values,
                                const char *desc, int *storage)
{
    char enum_name[64];
    mca_base_var_enum_t *e = NULL;

    snprintf(enum_name, sizeof(enum_name), "coll_zcopy_%s", name);
    if (mca_base_var_enum_create(enum_name, values, &e) != OPAL_SUCCESS)
        return;
    (void)mca_base_component_var_register(
        &mca_coll_zcopy_component.super.collm_version, name, desc,
        MCA_BASE_VAR_TYPE_INT, e, 0, 0, OPAL_INFO_LVL_6,
        MCA_BASE_VAR_SCOPE_READONLY, storage);
    OBJ_RELEASE(e);
}

static void zcopy_register_transport(mca_coll_zcopy_component_t *c)
{
    static const mca_base_var_enum_value_t values[] = {
        { ZCOPY_TRANSPORT_AUTO, "auto" },
        { ZCOPY_TRANSPORT_IPC, "ipc" },
        { ZCOPY_TRANSPORT_UCX, "ucx" },
        { 0, NULL },
    };

    zcopy_register_enum("transport", values,
        "How ranks reach each other's activated memory: auto maps peers "
        "inside a server and uses UCX between servers; ipc never uses UCX "
        "(communicators that span servers fall back); ucx goes through UCX "
        "even inside a server, to test and compare both data paths on one "
        "host",
        &c->transport);
}

static void zcopy_register_ucx_fetch(mca_coll_zcopy_component_t *c)
{
    static const mca_base_var_enum_value_t values[] = {
        { ZCOPY_UCX_FETCH_AUTO, "auto" },
        { ZCOPY_UCX_FETCH_GET, "get" },
        { ZCOPY_UCX_FETCH_SEND, "send" },
        { ZCOPY_UCX_FETCH_PML, "pml" },
        { 0, NULL },
    };

    zcopy_register_enum("ucx_fetch", values,
        "How a rank reads a peer's activated buffer on another server: get "
        "is one UCX get (which UCX 1.13 emulates on tcp with the target's "
        "active messages); send asks the target, which sends the bytes "
        "from its registered buffer with a tagged send into the reader's "
        "buffer; pml asks the same way, and the target sends through Open "
        "MPI's point-to-point engine (the PML and its BTLs) into the "
        "reader's buffer; auto is get where UCX reaches the peer over "
        "InfiniBand or RoCE (rc, dc), else send, measured 3.4x faster "
        "over tcp, and pml for reads of at least coll_zcopy_ucx_p2p_min "
        "bytes (except from a bcast's or scatter's root, and under "
        "MPI_THREAD_MULTIPLE); under auto, an alltoall's blocks of at least "
        "coll_zcopy_ucx_push_min bytes, and an alltoallv's, are sent "
        "rather than read. Must be "
        "the same on every rank (checked at set-up)",
        &c->ucx_fetch);
}

static void zcopy_register_peer_access(mca_coll_zcopy_component_t *c)
{
    static const mca_base_var_enum_value_t values[] = {
        { ZCOPY_IPC_ACCESS_AUTO, "auto" },
        { ZCOPY_IPC_ACCESS_PIDFD, "pidfd" },
        { ZCOPY_IPC_ACCESS_SOCKET, "socket" },
        { 0, NULL },
    };

    zcopy_register_enum("peer_access", values,
        "How a rank gets the memory descriptors of the ranks of its server: "
        "auto uses pidfd_getfd where the kernel allows it and asks the "
        "owner's UNIX socket where it is refused (containers' seccomp "
        "profiles, Yama ptrace_scope 1); every rank of a server serves over "
        "its socket once one of them needs it; pidfd and socket force one",
        &c->peer_access);
}

static int zcopy_register(void)
{
    mca_coll_zcopy_component_t *c = &mca_coll_zcopy_component;

    if (!zcopy_release_matches())
        return OMPI_ERR_NOT_AVAILABLE;

    zcopy_register_int("priority",
        "Selection priority of coll/zcopy; above coll/tuned (30) so that it "
        "intercepts collectives and falls back to the best other component",
        OPAL_INFO_LVL_6, &c->priority);
    zcopy_register_int("verbose",
        "Verbosity: 0 errors and warnings only, 10 path decisions per "
        "communicator and the server map, 20 every collective's decision, "
        "30 imports, mappings and control-plane steps",
        OPAL_INFO_LVL_9, &c->verbose);
    zcopy_register_int("yield",
        "How waits behave: 0 spin while every local rank has a core and "
        "yield the processor when ranks outnumber cores (decided from "
        "OMPI_COMM_WORLD_LOCAL_SIZE and the CPUs online), 1 always yield, "
        "2 never yield",
        OPAL_INFO_LVL_9, &c->yield);
    zcopy_register_int("sleep",
        "Where waits yield, whether a wait inside a server sleeps until the "
        "awaited rank stores: 0 where ranks are at least twice the cores "
        "they share, 1 always, 2 never; where some rank's waits yield "
        "without sleeping, small rooted calls go to the previous component "
        "(coll_zcopy_rooted_yield_min), as they do where the ranks are "
        "three times the cores or more",
        OPAL_INFO_LVL_9, &c->sleep);
    zcopy_register_int("virtual_servers",
        "Split each host into this many servers by local rank, so that one "
        "machine exercises the inter-server path (1: one server per host)",
        OPAL_INFO_LVL_9, &c->virtual_servers);
    zcopy_register_ulong("small_msg",
        "Messages of at most this many bytes per rank use latency-optimised "
        "algorithms; larger ones split the work so that all ranks move data "
        "at once",
        OPAL_INFO_LVL_9, &c->small_msg);
    zcopy_register_ulong("inline_max",
        "Collectives whose payload is at most this many bytes per rank "
        "(an allgatherv's largest block; 1072 at most) travel in the "
        "control plane instead of through "
        "peer mappings: a copy in and out, and no departure step. 0 never "
        "does",
        OPAL_INFO_LVL_9, &c->inline_max);
    zcopy_register_ulong("inline_max_yield",
        "The same where ranks outnumber cores (waits yield the processor): "
        "there every step of a collective costs a trip through the "
        "scheduler, so payloads of up to this many bytes per rank (256 KiB "
        "at most, never fewer than coll_zcopy_inline_max) are cheaper "
        "copied through the control plane than read through mappings",
        OPAL_INFO_LVL_9, &c->inline_max_yield);
    zcopy_register_ulong("root_moves_max",
        "Where ranks outnumber cores (waits yield the processor), the root "
        "of a bcast, gather(v) or reduce inside one server that moves at "
        "most this many bytes to or from its peers moves (or reduces) them "
        "all itself: the other ranks then wait for the root alone and the "
        "root for nobody, one trip through the scheduler fewer. Not a "
        "scatter(v), whose other ranks pull their own blocks and leave. "
        "The root decides and tells the others, so ranks may differ. 0: "
        "never",
        OPAL_INFO_LVL_9, &c->root_moves_max);
    zcopy_register_ulong("rooted_yield_min",
        "Where some rank's waits yield the processor without sleeping, or "
        "ranks are three times the cores or more (coll_zcopy_sleep), a "
        "bcast, reduce, gather or scatter inside one server that moves fewer "
        "bytes per rank than this goes to the previous component on every "
        "rank, counted as a fallback: zcopy's ranks agree before data "
        "moves, so each waits for others, where stock's senders leave once "
        "they have sent. 0: zcopy takes them all. Same value on every rank",
        OPAL_INFO_LVL_9, &c->rooted_yield_min);
    zcopy_register_ulong("one_per_server_min",
        "On a communicator that spans servers with one rank on each, a "
        "collective (not a v-form but allgatherv, by its largest block) "
        "that moves fewer bytes per rank than this, and a barrier, go to the previous component on every rank, "
        "counted as a fallback: there zcopy's small calls send what stock "
        "sends plus their agreement, and a rooted call's root waits for "
        "every arrival where stock's root sends and leaves. 0: zcopy takes "
        "them all (but what coll_zcopy_one_per_server_moves hands over). "
        "Same value on every rank",
        OPAL_INFO_LVL_9, &c->one_per_server_min);
    zcopy_register_bool("one_per_server_moves",
        "On a communicator that spans servers with one rank on each, "
        "whether zcopy itself runs the allgathers, allgathervs and "
        "alltoalls whose payloads do not ride with the arrival (see "
        "coll_zcopy_span_inline_max; alltoallv always). "
        "false: they go to the previous component, counted as a fallback: "
        "with nothing shared inside a server, zcopy sends the same bytes "
        "over the same network as stock's algorithms and adds its "
        "agreement (docs/parameters.md). Every other call stays with zcopy "
        "from coll_zcopy_one_per_server_min. Same value on every rank",
        OPAL_INFO_LVL_9, &c->one_per_server_moves);
    zcopy_register_ulong("span_inline_max",
        "On communicators that span servers: collectives whose payload is "
        "at most this many bytes per rank (an allgatherv's largest block; "
        "twice it for bcast, scatter and alltoall, and for allreduce where "
        "every server has one rank; allreduce over the most ranks of one "
        "server otherwise; a quarter of it for alltoall, "
        "reduce_scatter_block and scatter where leaders cannot send each "
        "server only its ranks' blocks) and at most 1 MiB for all ranks together (4 MiB "
        "for bcast, scatter and alltoall) ride with the arrival, one round "
        "between the servers' leaders instead of UCX transfers and syncs: "
        "a copy in and out. An alltoallv rides where every rank's blocks, "
        "after a table of 4 (n + 1) bytes of offsets, fit twice it within "
        "the 4 MiB over the ranks, where leaders can send each server only "
        "its ranks' blocks. 0 never does",
        OPAL_INFO_LVL_9, &c->span_inline_max);
    zcopy_register_int("span_dissemination_min",
        "On communicators that span at least this many servers, the "
        "servers' leaders pass each round (an arrival by Bruck's "
        "allgather, a sync by dissemination) in ceil(log2(servers)) steps "
        "of one message each, instead of one step in which each sends a "
        "message to every other leader; arrivals' parts then travel whole "
        "(alltoall, reduce_scatter_block and scatter keep a quarter of "
        "span_inline_max, and no alltoallv rides the arrival); 0 never "
        "does",
        OPAL_INFO_LVL_9, &c->span_dissemination_min);

    zcopy_register_ulong("streaming_min",
        "Copies of at least this many bytes use streaming stores, which "
        "bypass the cache; 0 derives it from the last-level cache this "
        "process shares (half of its size per core), and copies from 1 MiB "
        "below that take memcpy or streaming stores, whichever makes the "
        "calls faster as measured in the job, as the server map says at "
        "coll_zcopy_verbose 10",
        OPAL_INFO_LVL_6, &c->streaming_min);

    zcopy_register_int("wait_report",
        "Seconds a rank waits inside a zero-copy collective for a peer "
        "before it reports, once, which rank it awaits in which collective "
        "(it keeps waiting, as MPI does); 0 never reports",
        OPAL_INFO_LVL_9, &c->wait_report);
    zcopy_register_int("ucx_max_requests",
        "UCX requests (a get or a put; a read served by its target is a "
        "receive and a request message) that one rank keeps in flight in a "
        "collective's transfers between servers; it waits for some to "
        "complete, serving its peers meanwhile, before it issues more, so "
        "that an alltoall on a large communicator does not ask every peer "
        "at once (a transfer larger than the bound waits for none in "
        "flight); 0 or less sets no bound",
        OPAL_INFO_LVL_9, &c->ucx_max_requests);
    zcopy_register_ulong("ucx_p2p_min",
        "Bytes of one read from a peer on another server from which "
        "coll_zcopy_ucx_fetch auto has the peer answer through Open MPI's "
        "point-to-point engine (as pml does) instead of UCX's tagged send, "
        "where UCX's get is emulated (tcp, shared memory), except reads "
        "from the root of a bcast or scatter, under MPI_THREAD_MULTIPLE, "
        "and on a communicator where such a read's request was lost; 0 "
        "never does",
        OPAL_INFO_LVL_6, &c->ucx_p2p_min);
    zcopy_register_ulong("ucx_push_min",
        "Bytes of one block of an alltoall from which "
        "coll_zcopy_ucx_fetch auto sends the block between servers through "
        "Open MPI's point-to-point engine, from the sender's activated "
        "buffer into the receiver's, with no request first, where no "
        "rank's UCX get is real (tcp, shared memory) and some server has "
        "several of the communicator's ranks; smaller blocks are read as "
        "coll_zcopy_ucx_fetch says. An alltoallv's blocks between servers "
        "all go so there, whatever their size. Must be the same on every "
        "rank (checked at set-up); 0 never does (alltoallv's blocks are "
        "then read too)",
        OPAL_INFO_LVL_6, &c->ucx_push_min);
    zcopy_register_ulong("ucx_push_part_max",
        "Bytes of one part of a block pushed between servers "
        "(coll_zcopy_ucx_push_min): a larger block goes in parts of this "
        "size, in order (Open MPI's point-to-point engine counts in int, "
        "and an alltoallv's block may pass 2 GiB). 0, or more than 1 GiB, "
        "counts as 1 GiB. Must be the same on every rank (checked at "
        "set-up)",
        OPAL_INFO_LVL_9, &c->ucx_push_part_max);
    zcopy_register_transport(c);
    zcopy_register_ucx_fetch(c);
    zcopy_register_peer_access(c);

    /* libzcopy reads these from its own process-wide configuration. */
    zcopy_config.verbose = c->verbose > zcopy_config.verbose
                               ? c->verbose : zcopy_config.verbose;
    zcopy_config.virtual_servers = c->virtual_servers > 0 ? c->virtual_servers : 1;
    zcopy_config.small_msg = c->small_msg;
    zcopy_config.inline_max = c->inline_max;
    zcopy_config.inline_max_yield = c->inline_max_yield;
    zcopy_config.root_moves_max = c->root_moves_max;
    zcopy_config.rooted_yield_min = c->rooted_yield_min;
    zcopy_config.one_per_server_min = c->one_per_server_min;
    zcopy_config.one_per_server_moves = c->one_per_server_moves;
    zcopy_config.span_inline_max = c->span_inline_max;
    zcopy_config.span_dissemination_min =
        c->span_dissemination_min > 0 ? c->span_dissemination_min : 0;
    zcopy_config.streaming_min = c->streaming_min;
    zcopy_config.yield_mode = c->yield >= 0 && c->yield <= 2 ? c->yield : 0;
    zcopy_config.sleep_mode = c->sleep >= 0 && c->sleep <= 2 ? c->sleep : 0;
    zcopy_config.transport = c->transport;
    zcopy_config.ucx_fetch = c->ucx_fetch;
    zcopy_config.ucx_p2p_min = c->ucx_p2p_min;
    zcopy_config.ucx_push_min = c->ucx_push_min;
    zcopy_config.ucx_push_part_max =
        c->ucx_push_part_max > 0 && c->ucx_push_part_max < (1UL << 30)
            ? c->ucx_push_part_max : (size_t)1 << 30;
    zcopy_config.ucx_max_requests =
        c->ucx_max_requests > 0 ? (unsigned)c->ucx_max_requests : 0;
    zcopy_config.peer_access = c->peer_access;
    zcopy_config.wait_report_s = c->wait_report > 0 ? c->wait_report : 0;
    mca_coll_zcopy_install_host();

    return mca_coll_zcopy_register_pvars();
}

/* UCX 1.13 emulates get and put on activated memory with active messages
 * that the target's worker must serve (SPEC section 6). libzcopy's own
 * waits progress it, but a rank may also sit in a blocking MPI call (the
 * previous component's collectives that libzcopy uses for agreement, or an
 * application's MPI_Recv) while a peer still reads its buffers: Open MPI's
 * progress loop then progresses the worker too. */
static int zcopy_progress(void)
{
    return zcopy_coll_progress();
}

/* Whether zcopy_progress is in Open MPI's progress loop. A callback there
 * costs every progress call of every MPI operation (measured: 8 B
 * allreduce 0.39 us without, 0.57 us with), so it goes in only once
 * libzcopy has work for it; one flag for the process, as the loop is. */
static atomic_bool zcopy_progress_registered;

/* MPI_Finalize deletes MPI_COMM_SELF's attributes first, while every peer
 * still communicates, then fences, then destroys the communicators: by
 * then peers on other servers may have exited. Connections close here. */
static int zcopy_finalize_starts(MPI_Comm comm, int keyval, void *value,
                                 void *extra)
{
    (void)comm;
    (void)keyval;
    (void)value;
    (void)extra;
    zcopy_coll_disconnect();
    return MPI_SUCCESS;
}

static int zcopy_self_no_copy(MPI_Comm comm, int keyval, void *extra,
                              void *value_in, void *value_out, int *flag,
                              MPI_Comm newcomm)
{
    (void)comm;
    (void)keyval;
    (void)extra;
    (void)value_in;
    (void)value_out;
    (void)newcomm;
    *flag = 0;
    return MPI_SUCCESS;
}

/* Once, when the first communicator gets zcopy (MPI_Init's own, as a
 * rule): early, so that the hook exists before any UCX connection and is
 * never set up with libzcopy's locks held or while MPI_Finalize already
 * deletes MPI_COMM_SELF's attributes. One flag for the process, as the
 * attribute is. */
static atomic_bool zcopy_finalize_hooked;

void mca_coll_zcopy_finalize_hook(void)
{
    ompi_attribute_fn_ptr_union_t copy = {
        .attr_communicator_copy_fn = zcopy_self_no_copy };
    ompi_attribute_fn_ptr_union_t del = {
        .attr_communicator_delete_fn = zcopy_finalize_starts };
    int key;

    if (atomic_load_explicit(&zcopy_finalize_hooked, memory_order_relaxed) ||
        ompi_mpi_state >= OMPI_MPI_STATE_FINALIZE_STARTED ||
        atomic_exchange(&zcopy_finalize_hooked, true))
        return;
    if (ompi_attr_create_keyval(COMM_ATTR, copy, del, &key, NULL, 0, NULL) !=
            OMPI_SUCCESS ||
        ompi_attr_set_c(COMM_ATTR, &ompi_mpi_comm_self.comm,
                        &ompi_mpi_comm_self.comm.c_keyhash, key, NULL,
                        false) != OMPI_SUCCESS)
        opal_output(0, "coll/zcopy: no hook at MPI_Finalize; connections "
                       "between servers close when the communicators go");
}

/* Called once libzcopy has live state that needs the engine (a UCX worker,
 * a peer's mapping, a descriptor socket). */
void mca_coll_zcopy_want_progress(void)
{
    if (atomic_load_explicit(&zcopy_progress_registered, memory_order_relaxed) ||
        atomic_exchange(&zcopy_progress_registered, true))
        return;
    if (opal_progress_register(zcopy_progress) != OPAL_SUCCESS) {
        atomic_store(&zcopy_progress_registered, false);
        opal_output(0, "coll/zcopy: cannot join Open MPI's progress loop; "
                       "peers' memory is released at collectives only");
    }
}

/* Open MPI passes whether MPI_THREAD_MULTIPLE was granted. */
static int zcopy_init_query(bool enable_progress_threads,
                            bool enable_mpi_threads)
{
    (void)enable_progress_threads;
    zcopy_config.mpi_threads = enable_mpi_threads;
    return OMPI_SUCCESS;
}

static int zcopy_close(void)
{
    if (atomic_exchange(&zcopy_progress_registered, false))
        (void)opal_progress_unregister(zcopy_progress);
    return OMPI_SUCCESS;
}

/* --- MPI_T performance variables, bound to a communicator ---------------- */

typedef enum { PVAR_ZCOPY_CALLS, PVAR_FALLBACK_CALLS, PVAR_IPC_BYTES,
               PVAR_UCX_BYTES, PVAR_INLINE_CALLS, PVAR_CTL_MSGS,
               PVAR_CTL_BYTES, PVAR_P2P_BYTES } zcopy_pvar_t;

static int zcopy_pvar_get(const struct mca_base_pvar_t *pvar, void *value,
                          void *obj)
{
    /* Open MPI passes the bound communicator itself as obj. */
    const zcopy_comm_t *zc = zcopy_comm_lookup((MPI_Comm)obj);
    unsigned long long *out = value;
    MPIX_Zcopy_stats s;

    if (zc == NULL) {
        *out = 0;
        return OMPI_SUCCESS;
    }
    zcopy_comm_get_stats(zc, &s);
    switch ((zcopy_pvar_t)(uintptr_t)pvar->ctx) {
    case PVAR_ZCOPY_CALLS:    *out = s.zcopy_calls; break;
    case PVAR_FALLBACK_CALLS: *out = s.fallback_calls; break;
    case PVAR_IPC_BYTES:      *out = s.ipc_bytes; break;
    case PVAR_UCX_BYTES:      *out = s.ucx_bytes; break;
    case PVAR_INLINE_CALLS:   *out = s.inline_calls; break;
    case PVAR_CTL_MSGS:       *out = s.ctl_msgs; break;
    case PVAR_CTL_BYTES:      *out = s.ctl_bytes; break;
    case PVAR_P2P_BYTES:      *out = s.p2p_bytes; break;
    }
    return OMPI_SUCCESS;
}

/* Of the process, bound to nothing. */
static int zcopy_pvar_connections(const struct mca_base_pvar_t *pvar,
                                  void *value, void *obj)
{
    (void)pvar;
    (void)obj;
    *(unsigned long long *)value = zcopy_ucx_connections();
    return OMPI_SUCCESS;
}

static int zcopy_pvar_notify(struct mca_base_pvar_t *pvar,
                             mca_base_pvar_event_t event, void *obj,
                             int *count)
{
    (void)pvar;
    (void)obj;
    if (event == MCA_BASE_PVAR_HANDLE_BIND)
        *count = 1;
    return OMPI_SUCCESS;
}

int mca_coll_zcopy_register_pvars(void)
{
    static const struct {
        const char *name, *desc;
        zcopy_pvar_t which;
    } pvars[] = {
        { "zcopy_calls", "Collectives on this communicator that took the "
          "zero-copy path", PVAR_ZCOPY_CALLS },
        { "fallback_calls", "Collectives on this communicator handed to the "
          "previously selected component, or finished through the "
          "point-to-point engine after a peer's memory could not be mapped",
          PVAR_FALLBACK_CALLS },
        { "ipc_bytes", "Bytes this rank moved through peer mappings on this "
          "communicator", PVAR_IPC_BYTES },
        { "ucx_bytes", "Bytes this rank moved through UCX on this "
          "communicator", PVAR_UCX_BYTES },
        { "inline_calls", "Of the zero-copy collectives, those whose payload "
          "(at most coll_zcopy_inline_max bytes per rank; between servers "
          "coll_zcopy_span_inline_max, with the exceptions it names) "
          "travelled inside the control plane", PVAR_INLINE_CALLS },
        { "ctl_msgs", "Control messages this rank sent in collectives on "
          "this communicator: a record in shared memory counts once, what "
          "goes to another server once per rank it reaches", PVAR_CTL_MSGS },
        { "ctl_bytes", "Bytes of those control messages", PVAR_CTL_BYTES },
        { "p2p_bytes", "Bytes this rank read from other servers through "
          "Open MPI's point-to-point engine on this communicator "
          "(coll_zcopy_ucx_fetch pml, and reads of at least "
          "coll_zcopy_ucx_p2p_min under auto), or received there as pushed "
          "alltoall(v) blocks (coll_zcopy_ucx_push_min)", PVAR_P2P_BYTES },
    };

    for (size_t i = 0; i < sizeof(pvars) / sizeof(pvars[0]); i++)
        (void)mca_base_component_pvar_register(
            &mca_coll_zcopy_component.super.collm_version, pvars[i].name,
            pvars[i].desc, OPAL_INFO_LVL_4, MCA_BASE_PVAR_CLASS_COUNTER,
            MCA_BASE_VAR_TYPE_UNSIGNED_LONG_LONG, NULL,
            MCA_BASE_VAR_BIND_MPI_COMM,
            MCA_BASE_PVAR_FLAG_READONLY | MCA_BASE_PVAR_FLAG_CONTINUOUS,
            zcopy_pvar_get, NULL, zcopy_pvar_notify,
            (void *)(uintptr_t)pvars[i].which);
    (void)mca_base_component_pvar_register(
        &mca_coll_zcopy_component.super.collm_version, "ucx_connections",
        "UCX endpoints this process has connected for zero-copy collectives "
        "between servers (each connects at its first transfer)",
        OPAL_INFO_LVL_4, MCA_BASE_PVAR_CLASS_LEVEL,
        MCA_BASE_VAR_TYPE_UNSIGNED_LONG_LONG, NULL,
        MCA_BASE_VAR_BIND_NO_OBJECT,
        MCA_BASE_PVAR_FLAG_READONLY | MCA_BASE_PVAR_FLAG_CONTINUOUS,
        zcopy_pvar_connections, NULL, NULL, NULL);
    return OMPI_SUCCESS;
}
