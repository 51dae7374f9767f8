/*
 * zcopy_bench: latency and bandwidth of MPI collectives, in the manner of
 * nccl-tests and the OSU micro-benchmarks, on zcopy-activated buffers (the
 * zero-copy candidates) or on plain malloc buffers.
 *
 *   mpirun -np 2 zcopy_bench -c allreduce -b 8 -e 64M -f 2 --check
 *
 * Size convention (nccl-tests): "size" is the bytes of the whole vector the
 * collective handles, which is also the largest buffer any one rank passes:
 *   allreduce, reduce, bcast   size = count * sizeof(type), each buffer
 *   reduce_scatter_block       size = each rank's send buffer (n blocks);
 *                              every rank receives size / n
 *   allgather                  size = each rank's receive buffer; every rank
 *                              sends size / n
 *   alltoall                   size = each rank's send (and receive) buffer;
 *                              size / n goes to each peer
 *   gather                     size = the root's receive buffer; every rank
 *                              sends size / n
 *   scatter                    size = the root's send buffer; every rank
 *                              receives size / n
 *   memcpy                     size = bytes each rank copies, all at once
 *   alltoall_between           an alltoall of that size whose blocks inside a
 *                              host are empty (MPI_Alltoallv): under a stock
 *                              component, what moving the rest costs
 *   allgatherv                 allgather's, through MPI_Allgatherv (every
 *                              count size / n)
 *   alltoallv                  alltoall's, through MPI_Alltoallv (every
 *                              count size / n)
 * Sizes are rounded down to whole elements (and whole per-rank blocks); a
 * size that holds no element per rank is skipped.
 *
 * Timing (--timing start, the default): before every iteration the ranks
 * meet in a barrier of point-to-point messages on a private communicator,
 * so that it never shows in the zcopy statistics and is the same in every
 * mode (the order in which a component's own barrier releases the ranks
 * favours its own rooted collectives; bench/README.md); each rank times
 * its own call; the time of an iteration is the largest over the ranks; a
 * row reports the median over iterations, and the minimum. --timing osu
 * and loop run the calls back to back, each followed by MPI_Barrier, as
 * the OSU micro-benchmarks do (iterate()).
 *
 * Bandwidth (nccl-tests): algbw = size / time; busbw = algbw * factor, the
 * factor turning algbw into the traffic one rank's link carries with the
 * optimal ring algorithm: allreduce 2(n-1)/n; reduce_scatter_block,
 * allgather, alltoall, gather, scatter (n-1)/n; reduce, bcast 1. For memcpy,
 * algbw is one rank's copy rate and busbw all ranks' together (factor n).
 *
 * Path: MPIX_Zcopy_get_stats on the measured communicator before and after
 * the timed iterations: "zcopy" when only zero-copy calls were counted,
 * "fallback:<last reason>" when only fallbacks, "mixed" when both (or ranks
 * disagree), "stock" when neither (the component is not loaded).
 */
#define _POSIX_C_SOURCE 200809L

#include <mpix_zcopy.h>

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ------------------------------------------------------------------------- */
/* Datatypes and ops                                                          */

typedef enum {
    T_INT8, T_UINT8, T_INT16, T_UINT16, T_INT32, T_UINT32,
    T_INT64, T_UINT64, T_FLOAT, T_DOUBLE
} type_id_t;

/* Where the send and receive buffers live (--buffers). */
typedef enum {
    BUF_ACTIVATED,                /* a zcopy arena, activated */
    BUF_HUGE,                     /* the same on 2 MiB pages */
    BUF_ALLOC_MEM,                /* MPI_Alloc_mem, mpool_hints=zcopy */
    BUF_MALLOC,                   /* aligned_alloc */
    BUF_PLAIN                     /* aligned_alloc, with memory activated
                                     elsewhere in the process */
} buffer_kind_t;

static const char *const buffer_kind_names[] = { "activated", "huge",
                                                 "alloc_mem", "malloc",
                                                 "plain" };

/* What one iteration's time is (--timing). */
typedef enum {
    TIMING_START,                 /* after a barrier every mode shares, the
                                     slowest rank's call */
    TIMING_OSU,                   /* back to back, each call followed by the
                                     MPI_Barrier under test: each rank's
                                     call alone, averaged over the ranks */
    TIMING_LOOP                   /* the same loop: the call and its
                                     barrier, the slowest rank */
} timing_t;

static const char *const timing_names[] = { "start", "osu", "loop" };
_Static_assert(sizeof(timing_names) / sizeof(timing_names[0]) ==
                  TIMING_LOOP + 1, "a name per timing");

typedef struct {
    const char *name;
    type_id_t id;
    size_t size;
    /* Test values are small non-negative integers: exact in every type,
     * whatever order a reduction adds them in. Pattern values lie below
     * @modulus (a prime); sums of inputs stay at or below @exact_max, which
     * also keeps them away from the all-ones poison (-1, UINT_MAX, NaN). */
    uint64_t modulus;
    uint64_t exact_max;
} dtype_t;

static const dtype_t dtypes[] = {
    { "int8", T_INT8, 1, 127, 127 },
    { "uint8", T_UINT8, 1, 127, 127 },
    { "int16", T_INT16, 2, 32749, 32767 },
    { "uint16", T_UINT16, 2, 32749, 32767 },
    { "int32", T_INT32, 4, 1048573, INT32_MAX },
    { "uint32", T_UINT32, 4, 1048573, INT32_MAX },
    { "int64", T_INT64, 8, 1048573, (uint64_t)1 << 53 },
    { "uint64", T_UINT64, 8, 1048573, (uint64_t)1 << 53 },
    { "float", T_FLOAT, 4, 1048573, (uint64_t)1 << 24 },
    { "double", T_DOUBLE, 8, 1048573, (uint64_t)1 << 53 },
};
#define NTYPES (sizeof(dtypes) / sizeof(dtypes[0]))

static MPI_Datatype mpi_type(type_id_t id)
{
    switch (id) {
    case T_INT8: return MPI_INT8_T;
    case T_UINT8: return MPI_UINT8_T;
    case T_INT16: return MPI_INT16_T;
    case T_UINT16: return MPI_UINT16_T;
    case T_INT32: return MPI_INT32_T;
    case T_UINT32: return MPI_UINT32_T;
    case T_INT64: return MPI_INT64_T;
    case T_UINT64: return MPI_UINT64_T;
    case T_FLOAT: return MPI_FLOAT;
    case T_DOUBLE: return MPI_DOUBLE;
    }
    return MPI_DATATYPE_NULL;
}

typedef enum { OP_SUM, OP_PROD, OP_MAX, OP_MIN } op_id_t;
static const char *const op_names[] = { "sum", "prod", "max", "min" };
#define NOPS (sizeof(op_names) / sizeof(op_names[0]))

static MPI_Op mpi_op(op_id_t id)
{
    switch (id) {
    case OP_SUM: return MPI_SUM;
    case OP_PROD: return MPI_PROD;
    case OP_MAX: return MPI_MAX;
    case OP_MIN: return MPI_MIN;
    }
    return MPI_OP_NULL;
}

/* Element access: values are small non-negative integers on the way in;
 * they come back as double so that a fractional or NaN result mismatches. */
static void put_elem(void *buf, type_id_t t, size_t i, uint64_t v)
{
    switch (t) {
    case T_INT8: ((int8_t *)buf)[i] = (int8_t)v; break;
    case T_UINT8: ((uint8_t *)buf)[i] = (uint8_t)v; break;
    case T_INT16: ((int16_t *)buf)[i] = (int16_t)v; break;
    case T_UINT16: ((uint16_t *)buf)[i] = (uint16_t)v; break;
    case T_INT32: ((int32_t *)buf)[i] = (int32_t)v; break;
    case T_UINT32: ((uint32_t *)buf)[i] = (uint32_t)v; break;
    case T_INT64: ((int64_t *)buf)[i] = (int64_t)v; break;
    case T_UINT64: ((uint64_t *)buf)[i] = v; break;
    case T_FLOAT: ((float *)buf)[i] = (float)v; break;
    case T_DOUBLE: ((double *)buf)[i] = (double)v; break;
    }
}

static double get_elem(const void *buf, type_id_t t, size_t i)
{
    switch (t) {
    case T_INT8: return ((const int8_t *)buf)[i];
    case T_UINT8: return ((const uint8_t *)buf)[i];
    case T_INT16: return ((const int16_t *)buf)[i];
    case T_UINT16: return ((const uint16_t *)buf)[i];
    case T_INT32: return ((const int32_t *)buf)[i];
    case T_UINT32: return ((const uint32_t *)buf)[i];
    case T_INT64: return (double)((const int64_t *)buf)[i];
    case T_UINT64: return (double)((const uint64_t *)buf)[i];
    case T_FLOAT: return ((const float *)buf)[i];
    case T_DOUBLE: return ((const double *)buf)[i];
    }
    return 0;
}

/* ------------------------------------------------------------------------- */
/* Options and per-row state                                                  */

struct run;
typedef enum { IO_WRITE, IO_CHECK } io_t;

/* One benchmarked operation. Every function sees the row's state. */
typedef struct coll {
    const char *name;
    bool reduces;   /* takes an op */
    bool rooted;    /* takes a root */
    bool blocked;   /* size splits into n per-rank blocks */
    bool in_place;  /* has an MPI_IN_PLACE form */
    double (*bus_factor)(int n);
    /* Writes this rank's inputs for iteration @seed, or (IO_CHECK) counts
     * input elements that changed: send buffers must come back untouched. */
    size_t (*inputs)(struct run *r, io_t io, unsigned seed);
    /* Fills the outputs with a value no correct result has. */
    void (*poison)(struct run *r);
    int (*execute)(struct run *r);
    /* Counts output elements that differ from what the bench computed. */
    size_t (*verify)(struct run *r, unsigned seed);
} coll_t;

#define MAX_COLLS 16

typedef struct {
    const coll_t *colls[MAX_COLLS];
    int ncolls;
    size_t min_bytes, max_bytes;
    unsigned long factor;
    const dtype_t *type;
    op_id_t op;
    int root;
    int iters, warmup;
    bool in_place, check, vary, progress, corrupt;
    buffer_kind_t buffers;        /* --buffers */
    timing_t timing;              /* --timing */
    const char *csv_path, *json_path;
} options_t;

/* The state of one measured row, shared by the per-collective functions. */
typedef struct run {
    const options_t *opt;
    const coll_t *coll;
    int rank, nranks;
    type_id_t type;
    size_t tsize;       /* bytes per element */
    size_t bytes;       /* the row's size (see the convention above) */
    size_t block;       /* the count passed to MPI: elements per rank block */
    size_t total;       /* elements of the whole vector: bytes / type size */
    int mcount;         /* block, as the int MPI takes */
    MPI_Datatype dt;
    MPI_Op mop;
    bool in_place;      /* --in-place, where the collective has that form */
    uint64_t sum_range; /* OP_SUM inputs lie in [0, sum_range) */
    char *send, *recv;
    MPI_Comm comm;      /* the measured communicator */
    const bool *same_host; /* per rank of comm: shares this rank's host */
    int *counts, *displs;  /* alltoall_between's and allgatherv's, per rank
                              of comm */
    int iter;           /* for error messages */
    unsigned long reported; /* mismatches this rank has printed */
} run_t;

/* ------------------------------------------------------------------------- */
/* Values: what each rank contributes, and what each output must hold        */

/* Element @idx of the vector rank @src contributes in iteration @seed. Odd
 * multipliers keep neighbours, ranks and iterations apart, so a block that
 * lands at the wrong place or comes from the wrong rank or iteration shows. */
static uint64_t pattern(const run_t *r, unsigned seed, int src, size_t idx)
{
    return ((uint64_t)idx * 7 + (uint64_t)src * 31 + (uint64_t)seed * 131) %
           r->opt->type->modulus;
}

/* Input of a reduction: bounded so the reduced value is exact in the type.
 * prod: one owner rank per element contributes 2..4, the others 1. */
static uint64_t reduce_input(const run_t *r, unsigned seed, int src, size_t idx)
{
    switch (r->opt->op) {
    case OP_SUM:
        return ((uint64_t)idx * 7 + (uint64_t)src * 31 +
                (uint64_t)seed * 131) % r->sum_range;
    case OP_PROD:
        if ((idx + seed) % (uint64_t)r->nranks == (uint64_t)src)
            return 2 + (idx + seed) % 3;
        return 1;
    case OP_MAX:
    case OP_MIN:
        break;
    }
    return pattern(r, seed, src, idx);
}

/* The reduction of element @idx over all ranks, computed here alone. */
static uint64_t reduce_expected(const run_t *r, unsigned seed, size_t idx)
{
    uint64_t acc = reduce_input(r, seed, 0, idx);

    for (int src = 1; src < r->nranks; src++) {
        uint64_t v = reduce_input(r, seed, src, idx);
        switch (r->opt->op) {
        case OP_SUM: acc += v; break;
        case OP_PROD: acc *= v; break;
        case OP_MAX: acc = v > acc ? v : acc; break;
        case OP_MIN: acc = v < acc ? v : acc; break;
        }
    }
    return acc;
}

/* Prints the first few mismatches of this rank; counts every one. */
static size_t mismatch(run_t *r, const char *what, size_t idx, double got,
                       uint64_t want)
{
    if (r->reported++ < 5)
        fprintf(stderr, "[rank %d] %s %zu B iteration %d: %s element %zu is "
                "%g, expected %llu\n", r->rank, r->coll->name, r->bytes,
                r->iter, what, idx, got, (unsigned long long)want);
    return 1;
}

/* Writes or checks elements [first, first + n) of rank @src's vector, held
 * in @buf from its element 0. Returns the mismatches (0 when writing). */
static size_t io_pattern(run_t *r, io_t io, void *buf, size_t n,
                         unsigned seed, int src, size_t first)
{
    size_t bad = 0;

    for (size_t i = 0; i < n; i++) {
        uint64_t v = pattern(r, seed, src, first + i);
        if (io == IO_WRITE)
            put_elem(buf, r->type, i, v);
        else if (get_elem(buf, r->type, i) != (double)v)
            bad += mismatch(r, "data", first + i, get_elem(buf, r->type, i), v);
    }
    return bad;
}

/* The same for the inputs of a reduction. */
static size_t io_reduce_input(run_t *r, io_t io, void *buf, size_t n,
                              unsigned seed)
{
    size_t bad = 0;

    for (size_t i = 0; i < n; i++) {
        uint64_t v = reduce_input(r, seed, r->rank, i);
        if (io == IO_WRITE)
            put_elem(buf, r->type, i, v);
        else if (get_elem(buf, r->type, i) != (double)v)
            bad += mismatch(r, "send", i, get_elem(buf, r->type, i), v);
    }
    return bad;
}

/* Checks @buf against elements [first, first + n) of the reduced vector. */
static size_t check_reduced(run_t *r, const void *buf, size_t n,
                            unsigned seed, size_t first)
{
    size_t bad = 0;

    for (size_t i = 0; i < n; i++) {
        uint64_t want = reduce_expected(r, seed, first + i);
        if (get_elem(buf, r->type, i) != (double)want)
            bad += mismatch(r, "reduced", first + i,
                            get_elem(buf, r->type, i), want);
    }
    return bad;
}

/* All-ones bytes: -1, UINTn_MAX or NaN, none of which a test value is. */
static void poison(void *buf, size_t bytes)
{
    memset(buf, 0xff, bytes);
}

static char *slot(const run_t *r, char *buf, int q)
{
    return buf + (size_t)q * r->block * r->tsize;
}

static bool is_root(const run_t *r)
{
    return r->rank == r->opt->root;
}

/* The send buffer argument: MPI_IN_PLACE on the ranks that @own the form. */
#define SENDBUF(r, own)                                                      \
    ((r)->in_place && (own) ? MPI_IN_PLACE : (void *)(r)->send)

/* ------------------------------------------------------------------------- */
/* The collectives                                                            */

static double factor_one(int n) { (void)n; return 1.0; }
static double factor_zero(int n) { (void)n; return 0.0; }
static double factor_ring(int n) { return (double)(n - 1) / n; }
static double factor_allreduce(int n) { return 2.0 * (n - 1) / n; }
static double factor_aggregate(int n) { return n; }
static size_t no_inputs(run_t *r, io_t io, unsigned seed) { return 0; }
static void no_poison(run_t *r) {}
static size_t no_verify(run_t *r, unsigned seed) { return 0; }

/* allreduce: send[count] -> recv[count] on every rank */
static size_t allreduce_inputs(run_t *r, io_t io, unsigned seed)
{
    return io_reduce_input(r, io, r->in_place ? r->recv : r->send, r->block,
                           seed);
}
static void allreduce_poison(run_t *r) { poison(r->recv, r->block * r->tsize); }
static int allreduce_execute(run_t *r)
{
    return MPI_Allreduce(SENDBUF(r, true), r->recv, r->mcount, r->dt, r->mop,
                         r->comm);
}
static size_t allreduce_verify(run_t *r, unsigned seed)
{
    return check_reduced(r, r->recv, r->block, seed, 0);
}

/* reduce: send[count] -> recv[count] at the root */
static size_t reduce_inputs(run_t *r, io_t io, unsigned seed)
{
    bool own = r->in_place && is_root(r);
    return io_reduce_input(r, io, own ? r->recv : r->send, r->block, seed);
}
static void reduce_poison(run_t *r)
{
    if (is_root(r))
        poison(r->recv, r->block * r->tsize);
}
static int reduce_execute(run_t *r)
{
    return MPI_Reduce(SENDBUF(r, is_root(r)), r->recv, r->mcount, r->dt, r->mop,
                      r->opt->root, r->comm);
}
static size_t reduce_verify(run_t *r, unsigned seed)
{
    return is_root(r) ? check_reduced(r, r->recv, r->block, seed, 0) : 0;
}

/* reduce_scatter_block: send[n * block] -> recv[block]; rank r gets block r */
static size_t rsb_inputs(run_t *r, io_t io, unsigned seed)
{
    return io_reduce_input(r, io, r->in_place ? r->recv : r->send,
                           r->block * (size_t)r->nranks, seed);
}
static int rsb_execute(run_t *r)
{
    return MPI_Reduce_scatter_block(SENDBUF(r, true), r->recv, r->mcount, r->dt,
                                    r->mop, r->comm);
}
static size_t rsb_verify(run_t *r, unsigned seed)
{
    size_t first = r->block * (size_t)r->rank;

    return check_reduced(r, r->recv, r->block, seed, first);
}

/* allgather: send[block] -> recv[n * block]; block q comes from rank q */
static size_t allgather_inputs(run_t *r, io_t io, unsigned seed)
{
    char *buf = r->in_place ? slot(r, r->recv, r->rank) : r->send;
    return io_pattern(r, io, buf, r->block, seed, r->rank, 0);
}
static void gathered_poison(run_t *r)
{
    poison(r->recv, r->block * r->tsize * (size_t)r->nranks);
}
static int allgather_execute(run_t *r)
{
    return MPI_Allgather(SENDBUF(r, true), r->mcount, r->dt, r->recv,
                         r->mcount, r->dt, r->comm);
}
static size_t gathered_verify(run_t *r, unsigned seed)
{
    size_t bad = 0;

    for (int q = 0; q < r->nranks; q++)
        bad += io_pattern(r, IO_CHECK, slot(r, r->recv, q), r->block, seed, q,
                          0);
    return bad;
}

/* The v-forms' rows that move what the fixed forms move: every count the
 * block, in rank order. Written with the inputs, outside the timed call. */
static void uniform_counts(run_t *r, io_t io)
{
    for (int q = 0; q < r->nranks && io == IO_WRITE; q++) {
        r->counts[q] = r->mcount;
        r->displs[q] = q * r->mcount; /* fits: layout() checked */
    }
}

/* allgatherv: allgather's data through MPI_Allgatherv: what a program that
 * calls the v-form pays (zcopy decides its path by counts and
 * displacements). */
static size_t allgatherv_inputs(run_t *r, io_t io, unsigned seed)
{
    uniform_counts(r, io);
    return allgather_inputs(r, io, seed);
}
static int allgatherv_execute(run_t *r)
{
    return MPI_Allgatherv(SENDBUF(r, true), r->mcount, r->dt, r->recv,
                          r->counts, r->displs, r->dt, r->comm);
}

/* bcast: buf[count] (the send buffer) from the root to every rank */
static size_t bcast_inputs(run_t *r, io_t io, unsigned seed)
{
    if (io == IO_CHECK || !is_root(r))
        return 0; /* the root's buffer is checked as an output */
    return io_pattern(r, io, r->send, r->block, seed, r->opt->root, 0);
}
static void bcast_poison(run_t *r)
{
    if (!is_root(r))
        poison(r->send, r->block * r->tsize);
}
static int bcast_execute(run_t *r)
{
    return MPI_Bcast(r->send, r->mcount, r->dt, r->opt->root, r->comm);
}
static size_t bcast_verify(run_t *r, unsigned seed)
{
    return io_pattern(r, IO_CHECK, r->send, r->block, seed, r->opt->root, 0);
}

/* alltoall: send[n * block] -> recv[n * block]; block q of rank p's send
 * buffer lands in block p of rank q's receive buffer */
static size_t alltoall_inputs(run_t *r, io_t io, unsigned seed)
{
    return io_pattern(r, io, r->in_place ? r->recv : r->send,
                      r->block * (size_t)r->nranks, seed, r->rank, 0);
}
static int alltoall_execute(run_t *r)
{
    return MPI_Alltoall(SENDBUF(r, true), r->mcount, r->dt, r->recv,
                        r->mcount, r->dt, r->comm);
}
static size_t alltoall_verify(run_t *r, unsigned seed)
{
    size_t bad = 0;

    for (int q = 0; q < r->nranks; q++)
        bad += io_pattern(r, IO_CHECK, slot(r, r->recv, q), r->block, seed, q,
                          r->block * (size_t)r->rank);
    return bad;
}

/* alltoallv: alltoall's data through MPI_Alltoallv, as the OSU
 * micro-benchmarks' osu_alltoallv calls it (zcopy cannot know another
 * pair's counts, so its path differs from alltoall's). */
static size_t alltoallv_inputs(run_t *r, io_t io, unsigned seed)
{
    uniform_counts(r, io);
    return alltoall_inputs(r, io, seed);
}
static int alltoallv_execute(run_t *r)
{
    return MPI_Alltoallv(SENDBUF(r, true), r->counts, r->displs, r->dt,
                         r->recv, r->counts, r->displs, r->dt, r->comm);
}

/* alltoall_between: the alltoall above with every block between two ranks
 * of one host left out (count 0), so that only blocks between hosts move.
 * Under a stock component it tells how long its alltoallv's schedule takes
 * to move those blocks through the point-to-point engine: about the least
 * an alltoall moving them the same way takes, whatever it does inside a
 * host (an estimate, not a bound: another schedule can do better). The
 * counts are written with the inputs, outside the timed call. */
static size_t between_inputs(run_t *r, io_t io, unsigned seed)
{
    for (int q = 0; q < r->nranks && io == IO_WRITE; q++) {
        r->counts[q] = r->same_host[q] ? 0 : r->mcount;
        r->displs[q] = q * r->mcount; /* fits: layout() checked */
    }
    return alltoall_inputs(r, io, seed);
}
static int between_execute(run_t *r)
{
    return MPI_Alltoallv(r->send, r->counts, r->displs, r->dt, r->recv,
                         r->counts, r->displs, r->dt, r->comm);
}
/* Elements of @buf's @n that are not the poison, byte for byte. */
static size_t unpoisoned(const run_t *r, const void *buf, size_t n)
{
    const unsigned char *b = buf;
    size_t changed = 0;

    for (size_t i = 0; i < n; i++)
        for (size_t k = 0; k < r->tsize; k++)
            if (b[i * r->tsize + k] != 0xff) {
                changed++;
                break;
            }
    return changed;
}

/* Blocks from other hosts as alltoall's; those from this host must still
 * hold the poison (the call had nothing to write there). Counts elements,
 * as every check does. */
static size_t between_verify(run_t *r, unsigned seed)
{
    size_t bad = 0, written;

    for (int q = 0; q < r->nranks; q++) {
        if (!r->same_host[q]) {
            bad += io_pattern(r, IO_CHECK, slot(r, r->recv, q), r->block,
                              seed, q, r->block * (size_t)r->rank);
            continue;
        }
        written = unpoisoned(r, slot(r, r->recv, q), r->block);
        if (written > 0 && r->reported++ < 5)
            fprintf(stderr, "[rank %d] %s %zu B iteration %d: %zu elements "
                    "of the empty block from rank %d were written\n",
                    r->rank, r->coll->name, r->bytes, r->iter, written, q);
        bad += written;
    }
    return bad;
}

/* gather: send[block] -> recv[n * block] at the root */
static size_t gather_inputs(run_t *r, io_t io, unsigned seed)
{
    bool own = r->in_place && is_root(r);
    char *buf = own ? slot(r, r->recv, r->rank) : r->send;
    return io_pattern(r, io, buf, r->block, seed, r->rank, 0);
}
static void gather_poison(run_t *r)
{
    if (is_root(r))
        gathered_poison(r);
}
static int gather_execute(run_t *r)
{
    return MPI_Gather(SENDBUF(r, is_root(r)), r->mcount, r->dt, r->recv,
                      r->mcount, r->dt, r->opt->root, r->comm);
}
static size_t gather_verify(run_t *r, unsigned seed)
{
    return is_root(r) ? gathered_verify(r, seed) : 0;
}

/* scatter: send[n * block] at the root -> recv[block]; rank q gets block q */
static size_t scatter_inputs(run_t *r, io_t io, unsigned seed)
{
    if (!is_root(r))
        return 0;
    return io_pattern(r, io, r->send, r->block * (size_t)r->nranks, seed,
                      r->rank, 0);
}
static void scatter_poison(run_t *r) { poison(r->recv, r->block * r->tsize); }
static int scatter_execute(run_t *r)
{
    /* In place, the root's own block stays where it is, in the send buffer. */
    void *recv = r->in_place && is_root(r) ? MPI_IN_PLACE : (void *)r->recv;
    return MPI_Scatter(r->send, r->mcount, r->dt, recv, r->mcount, r->dt,
                       r->opt->root, r->comm);
}
static size_t scatter_verify(run_t *r, unsigned seed)
{
    if (r->in_place && is_root(r))
        return 0;
    return io_pattern(r, IO_CHECK, r->recv, r->block, seed, r->opt->root,
                      r->block * (size_t)r->rank);
}

static int barrier_execute(run_t *r)
{
    return MPI_Barrier(r->comm);
}

/* memcpy: every rank copies send[count] to recv[count] at the same time,
 * the yardstick of the comparison's roofline. */
static size_t memcpy_inputs(run_t *r, io_t io, unsigned seed)
{
    return io_pattern(r, io, r->send, r->block, seed, r->rank, 0);
}
static int memcpy_execute(run_t *r)
{
    memcpy(r->recv, r->send, r->block * r->tsize);
    return MPI_SUCCESS;
}
static size_t memcpy_verify(run_t *r, unsigned seed)
{
    return io_pattern(r, IO_CHECK, r->recv, r->block, seed, r->rank, 0);
}

/*                      name  reduces rooted blocked in_place */
static const coll_t colls[] = {
    { "allreduce", true, false, false, true, factor_allreduce,
      allreduce_inputs, allreduce_poison, allreduce_execute, allreduce_verify },
    { "reduce", true, true, false, true, factor_one,
      reduce_inputs, reduce_poison, reduce_execute, reduce_verify },
    { "reduce_scatter_block", true, false, true, true, factor_ring,
      rsb_inputs, allreduce_poison, rsb_execute, rsb_verify },
    { "allgather", false, false, true, true, factor_ring,
      allgather_inputs, gathered_poison, allgather_execute, gathered_verify },
    { "bcast", false, true, false, false, factor_one,
      bcast_inputs, bcast_poison, bcast_execute, bcast_verify },
    { "alltoall", false, false, true, true, factor_ring,
      alltoall_inputs, gathered_poison, alltoall_execute, alltoall_verify },
    { "gather", false, true, true, true, factor_ring,
      gather_inputs, gather_poison, gather_execute, gather_verify },
    { "scatter", false, true, true, true, factor_ring,
      scatter_inputs, scatter_poison, scatter_execute, scatter_verify },
    { "barrier", false, false, false, false, factor_zero,
      no_inputs, no_poison, barrier_execute, no_verify },
    { "memcpy", false, false, false, false, factor_aggregate,
      memcpy_inputs, allreduce_poison, memcpy_execute, memcpy_verify },
    { "alltoall_between", false, false, true, false, factor_ring,
      between_inputs, gathered_poison, between_execute, between_verify },
    { "allgatherv", false, false, true, true, factor_ring,
      allgatherv_inputs, gathered_poison, allgatherv_execute,
      gathered_verify },
    { "alltoallv", false, false, true, true, factor_ring,
      alltoallv_inputs, gathered_poison, alltoallv_execute,
      alltoall_verify },
};
#define NCOLLS (sizeof(colls) / sizeof(colls[0]))
#define NALL 9 /* "all": every collective, not memcpy, alltoall_between,
                  allgatherv or alltoallv */

/* ------------------------------------------------------------------------- */
/* Errors                                                                     */

static int my_rank;

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2),
                                                     noreturn));
static void die(const char *fmt, ...)
{
    va_list ap;

    fprintf(stderr, "zcopy_bench [rank %d]: ", my_rank);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    MPI_Abort(MPI_COMM_WORLD, 2);
    exit(2);
}

static void check_mpi(int rc, const char *what)
{
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;

    if (rc == MPI_SUCCESS)
        return;
    MPI_Error_string(rc, msg, &len);
    die("%s failed: %s", what, msg);
}

static void check_mem(int rc, const char *what)
{
    if (rc != ZCOPY_SUCCESS)
        die("%s failed: %s (%s)", what, zcopy_strerror(rc),
            zcopy_mem_last_error());
}

/* ------------------------------------------------------------------------- */
/* Command line                                                               */

static void usage(FILE *f)
{
    fprintf(f,
"usage: mpirun -np N zcopy_bench [options]\n"
"  -c, --collective LIST  allreduce reduce reduce_scatter_block allgather\n"
"                         bcast alltoall gather scatter barrier memcpy\n"
"                         alltoall_between allgatherv alltoallv, or all\n"
"                         (every collective, not memcpy, alltoall_between,\n"
"                         allgatherv or alltoallv); comma-separated\n"
"                         [allreduce]\n"
"  -b, --minbytes SIZE    smallest size [8]; suffixes K, M, G (of 1024)\n"
"  -e, --maxbytes SIZE    largest size [64M]\n"
"  -f, --stepfactor N     multiply the size by N from one row to the next [2]\n"
"  -t, --datatype TYPE    int8 uint8 int16 uint16 int32 uint32 int64 uint64\n"
"                         float double [int32]\n"
"  -o, --op OP            sum prod max min [sum]\n"
"  -r, --root RANK        root of reduce, bcast, gather, scatter [0]\n"
"  -n, --iters N          timed iterations per row [20]\n"
"  -w, --warmup N         untimed iterations before them [5]\n"
"      --in-place         MPI_IN_PLACE where the collective has that form\n"
"      --check            verify every iteration's results (and that send\n"
"                         buffers are untouched); exit 1 on any error\n"
"      --vary             new input values every iteration (written outside\n"
"                         the timed region)\n"
"      --buffers KIND     activated: one zcopy arena, reserved, range-set,\n"
"                         mapped and activated on MPI_COMM_WORLD; huge: the\n"
"                         same on 2 MiB pages (ZCOPY_MEM_HUGE, needs\n"
"                         /proc/sys/vm/nr_hugepages); alloc_mem:\n"
"                         MPI_Alloc_mem with mpool_hints=zcopy (activated\n"
"                         by mpool/zcopy, no zcopy call); malloc:\n"
"                         aligned_alloc; plain: aligned_alloc in a process\n"
"                         that has activated a page elsewhere (MPI_Alloc_mem,\n"
"                         mpool_hints=zcopy), as a program using zcopy for\n"
"                         other buffers [activated]\n"
"      --timing MODE      start: each call after a barrier of empty\n"
"                         point-to-point messages (the same in every mode),\n"
"                         the slowest rank's time; osu: calls back to back,\n"
"                         each followed by MPI_Barrier on the same\n"
"                         communicator (zcopy's or the stock component's),\n"
"                         each rank's call alone averaged over the ranks,\n"
"                         OSU's per-call figure (then the median over\n"
"                         iterations, where OSU takes the mean); loop: that\n"
"                         loop's call and barrier together, the slowest\n"
"                         rank; a barrier row has no second barrier, and\n"
"                         memcpy rows are always timed as start [start]\n"
"      --csv FILE         also write the rows as CSV\n"
"      --json FILE        also write the rows as JSON\n"
"      --progress         progress line on stderr even when not a terminal\n"
"      --no-progress      no progress line\n"
"      --corrupt          (tests the checker) discard the first result on\n"
"                         every rank (alltoall_between: and write into the\n"
"                         rank's own empty block), so that --check must fail\n"
"  -h, --help             this text\n"
"\n"
"Size is nccl-tests' size, the bytes of the whole vector:\n"
"  allreduce, reduce, bcast: each buffer; reduce_scatter_block: each send\n"
"  buffer (receive: size/n); allgather: each receive buffer (send: size/n);\n"
"  alltoall: each send and receive buffer (size/n per peer); gather: the\n"
"  root's receive buffer (send: size/n); scatter: the root's send buffer\n"
"  (receive: size/n); memcpy: the bytes each rank copies; alltoall_between:\n"
"  alltoall's, with the blocks between ranks of one host empty\n"
"  (MPI_Alltoallv), so only blocks between hosts move; allgatherv:\n"
"  allgather's, through MPI_Allgatherv; alltoallv: alltoall's, through\n"
"  MPI_Alltoallv.\n"
"Columns: time_us is the median over iterations of the slowest rank's time\n"
"(--timing osu: of the ranks' mean),\n"
"min_us the smallest; algbw = size/time (GB/s = 1e9 B/s); busbw = algbw *\n"
"2(n-1)/n (allreduce), (n-1)/n (reduce_scatter_block, allgather, alltoall,\n"
"alltoall_between, allgatherv, alltoallv, gather, scatter), 1 (reduce,\n"
"bcast),\n"
"n (memcpy: all ranks together);\n"
"errors: mismatches over all ranks and iterations (with --check); path:\n"
"zcopy, fallback:<reason>, mixed, or stock (component not loaded), from\n"
"MPIX_Zcopy_get_stats around the timed iterations.\n");
}

/* "64M" -> 67108864. Returns false on junk or overflow. */
static bool parse_size(const char *s, size_t *out)
{
    unsigned long long v, mult = 1;
    char *end;

    errno = 0;
    v = strtoull(s, &end, 10);
    if (end == s || errno || *s == '-')
        return false;
    switch (*end) {
    case 'k': case 'K': mult = 1ull << 10; end++; break;
    case 'm': case 'M': mult = 1ull << 20; end++; break;
    case 'g': case 'G': mult = 1ull << 30; end++; break;
    default: break;
    }
    if (*end == 'B' || *end == 'b')
        end++;
    if (*end || v > SIZE_MAX / mult)
        return false;
    *out = (size_t)(v * mult);
    return true;
}

static bool parse_int(const char *s, long min, long max, long *out)
{
    char *end;
    long v;

    errno = 0;
    v = strtol(s, &end, 10);
    if (end == s || *end || errno || v < min || v > max)
        return false;
    *out = v;
    return true;
}

static const coll_t *find_coll(const char *name)
{
    for (size_t i = 0; i < NCOLLS; i++)
        if (strcmp(colls[i].name, name) == 0)
            return &colls[i];
    return NULL;
}

/* Appends the collectives named in a comma-separated @list. */
static bool parse_colls(options_t *o, const char *list)
{
    char buf[256], *save = NULL;

    if (strlen(list) >= sizeof(buf))
        return false;
    strcpy(buf, list);
    for (char *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        if (strcmp(tok, "all") == 0) {
            for (int i = 0; i < NALL && o->ncolls < MAX_COLLS; i++)
                o->colls[o->ncolls++] = &colls[i];
            continue;
        }
        if (!find_coll(tok) || o->ncolls >= MAX_COLLS)
            return false;
        o->colls[o->ncolls++] = find_coll(tok);
    }
    return o->ncolls > 0;
}

static const dtype_t *find_type(const char *name)
{
    for (size_t i = 0; i < NTYPES; i++)
        if (strcmp(dtypes[i].name, name) == 0)
            return &dtypes[i];
    return NULL;
}

/* The index of @name among @n @names, or -1. */
static int name_index(const char *const *names, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(names[i], name) == 0)
            return (int)i;
    return -1;
}

static bool find_op(const char *name, op_id_t *op)
{
    const int i = name_index(op_names, NOPS, name);

    if (i < 0)
        return false;
    *op = (op_id_t)i;
    return true;
}

enum {
    OPT_IN_PLACE = 256, OPT_CHECK, OPT_VARY, OPT_BUFFERS, OPT_CSV, OPT_JSON,
    OPT_PROGRESS, OPT_NO_PROGRESS, OPT_CORRUPT, OPT_TIMING
};

/* Handles one option; returns a message on error, NULL when fine. */
static const char *apply_option(options_t *o, int c, const char *arg,
                                int nranks)
{
    long v;

    switch (c) {
    case 'c': return parse_colls(o, arg) ? NULL : "bad -c";
    case 'b': return parse_size(arg, &o->min_bytes) ? NULL : "bad -b";
    case 'e': return parse_size(arg, &o->max_bytes) ? NULL : "bad -e";
    case 'f':
        if (!parse_int(arg, 2, 1 << 20, &v))
            return "-f needs an integer of at least 2";
        o->factor = (unsigned long)v;
        return NULL;
    case 't': return (o->type = find_type(arg)) ? NULL : "unknown -t";
    case 'o': return find_op(arg, &o->op) ? NULL : "unknown -o";
    case 'r':
        if (!parse_int(arg, 0, nranks - 1, &v))
            return "-r must name a rank of MPI_COMM_WORLD";
        o->root = (int)v;
        return NULL;
    case 'n':
        if (!parse_int(arg, 1, INT_MAX / 2, &v))
            return "-n must be at least 1";
        o->iters = (int)v;
        return NULL;
    case 'w':
        if (!parse_int(arg, 0, INT_MAX / 2, &v))
            return "bad -w";
        o->warmup = (int)v;
        return NULL;
    case OPT_IN_PLACE: o->in_place = true; return NULL;
    case OPT_CHECK: o->check = true; return NULL;
    case OPT_VARY: o->vary = true; return NULL;
    case OPT_BUFFERS:
        v = name_index(buffer_kind_names,
                       sizeof(buffer_kind_names) / sizeof(char *), arg);
        if (v < 0)
            return "--buffers is activated, huge, alloc_mem, malloc or plain";
        o->buffers = (buffer_kind_t)v;
        return NULL;
    case OPT_TIMING:
        v = name_index(timing_names, sizeof(timing_names) / sizeof(char *),
                       arg);
        if (v < 0)
            return "--timing is start, osu or loop";
        o->timing = (timing_t)v;
        return NULL;
    case OPT_CSV: o->csv_path = arg; return NULL;
    case OPT_JSON: o->json_path = arg; return NULL;
    case OPT_PROGRESS: o->progress = true; return NULL;
    case OPT_NO_PROGRESS: o->progress = false; return NULL;
    case OPT_CORRUPT: o->corrupt = true; return NULL;
    }
    return "unknown option";
}

/* Every rank parses the same command line and reaches the same verdict;
 * rank 0 alone speaks. Returns -1 to go on, else the exit status. */
static int parse_options(options_t *o, int argc, char **argv, int rank,
                         int nranks)
{
    static const struct option longs[] = {
        { "collective", required_argument, NULL, 'c' },
        { "minbytes", required_argument, NULL, 'b' },
        { "maxbytes", required_argument, NULL, 'e' },
        { "stepfactor", required_argument, NULL, 'f' },
        { "datatype", required_argument, NULL, 't' },
        { "op", required_argument, NULL, 'o' },
        { "root", required_argument, NULL, 'r' },
        { "iters", required_argument, NULL, 'n' },
        { "warmup", required_argument, NULL, 'w' },
        { "in-place", no_argument, NULL, OPT_IN_PLACE },
        { "check", no_argument, NULL, OPT_CHECK },
        { "vary", no_argument, NULL, OPT_VARY },
        { "buffers", required_argument, NULL, OPT_BUFFERS },
        { "timing", required_argument, NULL, OPT_TIMING },
        { "csv", required_argument, NULL, OPT_CSV },
        { "json", required_argument, NULL, OPT_JSON },
        { "progress", no_argument, NULL, OPT_PROGRESS },
        { "no-progress", no_argument, NULL, OPT_NO_PROGRESS },
        { "corrupt", no_argument, NULL, OPT_CORRUPT },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 }
    };
    const char *err = NULL;
    int c;

    *o = (options_t){ .min_bytes = 8, .max_bytes = 64u << 20, .factor = 2,
                      .type = find_type("int32"), .op = OP_SUM, .iters = 20,
                      .warmup = 5, .buffers = BUF_ACTIVATED,
                      .progress = isatty(STDERR_FILENO) };
    opterr = 0;
    while (!err && (c = getopt_long(argc, argv, "c:b:e:f:t:o:r:n:w:h", longs,
                                    NULL)) != -1) {
        if (c == 'h') {
            if (rank == 0)
                usage(stdout);
            return 0;
        }
        err = c == '?' ? "unknown option or missing argument"
                       : apply_option(o, c, optarg, nranks);
    }
    if (!err && optind < argc)
        err = "unexpected argument";
    if (!err && o->min_bytes == 0)
        err = "-b must be at least 1";
    if (!err && o->min_bytes > o->max_bytes)
        err = "-b is larger than -e";
    if (!err && o->ncolls == 0)
        parse_colls(o, "allreduce");
    if (err && rank == 0) {
        fprintf(stderr, "zcopy_bench: %s (near '%s')\n", err,
                argv[optind - 1 < argc ? optind - 1 : argc - 1]);
        usage(stderr);
    }
    return err ? 2 : -1;
}

/* ------------------------------------------------------------------------- */
/* Buffers                                                                    */

typedef struct {
    buffer_kind_t kind;
    void *base;                 /* the arena (activated, huge) */
    size_t size;
    zcopy_mem_handle_t handle;
    char *send, *recv;          /* each at least the largest size */
    void *elsewhere;            /* plain: the activated page, unused */
} buffers_t;

static size_t round_up(size_t v, size_t to)
{
    return (v + to - 1) / to * to;
}

/* One arena holds the send buffer, then the receive buffer: reserve, set
 * the range on MPI_COMM_WORLD (collective), create, map, activate. */
static void arena_init(buffers_t *b, size_t half, bool huge)
{
    const zcopy_mem_prop_t prop = { .kind = ZCOPY_MEM_HOST, .device = -1,
                                    .flags = huge ? ZCOPY_MEM_HUGE : 0 };
    size_t gran;

    check_mem(zcopy_mem_granularity(&prop, &gran), "zcopy_mem_granularity");
    b->size = round_up(2 * half, gran);
    check_mem(zcopy_mem_reserve(&b->base, b->size, gran, NULL, 0),
              "zcopy_mem_reserve");
    check_mpi(MPIX_Comm_set_memory_range(MPI_COMM_WORLD, b->base, b->size, 0,
                                         0), "MPIX_Comm_set_memory_range");
    check_mem(zcopy_mem_create(&b->handle, b->size, &prop, 0),
              "zcopy_mem_create");
    check_mem(zcopy_mem_map(b->base, b->size, 0, b->handle, 0),
              "zcopy_mem_map");
    check_mpi(MPIX_Comm_activate_memory(MPI_COMM_WORLD, b->base, b->size, 0,
                                        b->handle, 0),
              "MPIX_Comm_activate_memory");
    b->send = b->base;
    b->recv = b->send + half;
}

static void arena_fini(buffers_t *b)
{
    check_mpi(MPIX_Comm_deactivate_memory(MPI_COMM_WORLD, b->base),
              "MPIX_Comm_deactivate_memory");
    check_mem(zcopy_mem_unmap(b->base), "zcopy_mem_unmap");
    check_mem(zcopy_mem_free(b->handle), "zcopy_mem_free");
    check_mpi(MPIX_Comm_unset_memory_range(MPI_COMM_WORLD, b->base),
              "MPIX_Comm_unset_memory_range");
    check_mem(zcopy_mem_release(b->base), "zcopy_mem_release");
}

/* @size bytes of MPI_Alloc_mem, as a program that calls nothing of
 * zcopy's gets them: the mpool/zcopy component activates them. */
static void *alloc_mem_activated(size_t size)
{
    MPI_Info info;
    int active = 0;
    void *p;

    MPI_Info_create(&info);
    MPI_Info_set(info, "mpool_hints", "zcopy");
    check_mpi(MPI_Alloc_mem((MPI_Aint)size, info, &p), "MPI_Alloc_mem");
    MPI_Info_free(&info);
    /* Rows labelled alloc_mem or plain must not measure a process that
     * has nothing activated. */
    check_mpi(MPIX_Zcopy_query(MPI_COMM_WORLD, p, size, &active),
              "MPIX_Zcopy_query");
    if (!active)
        die("MPI_Alloc_mem with mpool_hints=zcopy returned memory that is "
            "not activated: is mpool/zcopy on the component path?");
    return p;
}

static void buffers_init(buffers_t *b, buffer_kind_t kind, size_t max_bytes)
{
    const size_t page = 4096;
    size_t half = round_up(max_bytes ? max_bytes : 1, page);

    b->kind = kind;
    b->elsewhere = NULL;
    if (kind == BUF_ACTIVATED || kind == BUF_HUGE) {
        arena_init(b, half, kind == BUF_HUGE);
    } else if (kind == BUF_ALLOC_MEM) {
        b->send = alloc_mem_activated(half);
        b->recv = alloc_mem_activated(half);
        b->size = 2 * half;
    } else {
        b->send = aligned_alloc(page, half);
        b->recv = aligned_alloc(page, half);
        if (!b->send || !b->recv)
            die("out of memory for two buffers of %zu bytes", half);
        if (kind == BUF_PLAIN)
            b->elsewhere = alloc_mem_activated(page);
    }
    /* Fault every page in now, not inside a timed call. */
    memset(b->send, 0, half);
    memset(b->recv, 0, half);
}

static void buffers_fini(buffers_t *b)
{
    if (b->kind == BUF_ACTIVATED || b->kind == BUF_HUGE) {
        arena_fini(b);
    } else if (b->kind == BUF_ALLOC_MEM) {
        check_mpi(MPI_Free_mem(b->send), "MPI_Free_mem");
        check_mpi(MPI_Free_mem(b->recv), "MPI_Free_mem");
    } else {
        free(b->send);
        free(b->recv);
        if (b->elsewhere != NULL)
            check_mpi(MPI_Free_mem(b->elsewhere), "MPI_Free_mem");
    }
}

/* ------------------------------------------------------------------------- */
/* Results                                                                    */

typedef struct {
    const char *coll, *type, *op;
    int np, root;               /* root -1: none */
    bool in_place;
    size_t bytes, count;
    int iters;
    double time_us, min_us;     /* median and minimum of the iterations'
                                   times (--timing says what those are) */
    const char *timing;
    double algbw, busbw;        /* GB/s */
    unsigned long long errors;
    char path[96];
} row_t;

typedef struct {
    FILE *csv, *json;
    int json_rows;
    unsigned long long errors;  /* over every row */
} sinks_t;

/* "64M", "1K", "12" */
static const char *human(size_t bytes, char *buf, size_t len)
{
    static const char units[] = "KMGT";
    int u = -1;

    while (bytes >= 1024 && bytes % 1024 == 0 && u < 3) {
        bytes /= 1024;
        u++;
    }
    if (u < 0)
        snprintf(buf, len, "%zu", bytes);
    else
        snprintf(buf, len, "%zu%c", bytes, units[u]);
    return buf;
}

static void print_header(const options_t *o, int nranks, const buffers_t *b)
{
    printf("# zcopy_bench: np %d, buffers %s", nranks,
           buffer_kind_names[o->buffers]);
    if (o->buffers == BUF_ACTIVATED || o->buffers == BUF_HUGE)
        printf(" (one arena of %zu bytes per rank)", b->size);
    printf(", iters %d, warmup %d, check %s, vary %s, in-place %s, "
           "timing %s\n", o->iters, o->warmup, o->check ? "on" : "off",
           o->vary ? "on" : "off", o->in_place ? "on" : "off",
           timing_names[o->timing]);
    printf("# size: bytes of the whole vector (nccl-tests); time: median over"
           " iterations of %s; GB/s = 1e9 B/s\n",
           o->timing == TIMING_OSU
               ? "the ranks' mean (memcpy: the slowest rank)"
               : o->timing == TIMING_LOOP
                     ? "the slowest rank's call and barrier (memcpy: its "
                       "copy)"
                     : "the slowest rank");
    printf("# %-20s %10s %10s %-6s %-4s %4s %10s %10s %10s %10s %6s  %s\n",
           "collective", "size", "count", "type", "op", "root", "time_us",
           "min_us", "algbw_GBps", "busbw_GBps", "errors", "path");
    fflush(stdout);
}

static void print_row(const row_t *w)
{
    char root[16] = "-";

    if (w->root >= 0)
        snprintf(root, sizeof(root), "%d", w->root);
    printf("  %-20s %10zu %10zu %-6s %-4s %4s %10.2f %10.2f %10.3f %10.3f "
           "%6llu  %s\n", w->coll, w->bytes, w->count, w->type, w->op, root,
           w->time_us, w->min_us, w->algbw, w->busbw, w->errors, w->path);
    fflush(stdout);
}

static void csv_row(FILE *f, const row_t *w)
{
    /* The path never holds a comma or a quote (path_of cleans it). */
    fprintf(f, "%s,%d,%zu,%zu,%s,%s,%d,%d,%d,%.3f,%.3f,%.4f,%.4f,%llu,%s,%s\n",
            w->coll, w->np, w->bytes, w->count, w->type, w->op, w->root,
            w->in_place, w->iters, w->time_us, w->min_us, w->algbw, w->busbw,
            w->errors, w->timing, w->path);
    fflush(f);
}

static void json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            fprintf(f, "\\%c", *s);
        else if ((unsigned char)*s < 0x20)
            fprintf(f, "\\u%04x", (unsigned char)*s);
        else
            fputc(*s, f);
    }
    fputc('"', f);
}

static void json_row(sinks_t *s, const row_t *w)
{
    FILE *f = s->json;

    fprintf(f, "%s\n    {\"collective\": ", s->json_rows++ ? "," : "");
    json_string(f, w->coll);
    fprintf(f, ", \"np\": %d, \"bytes\": %zu, \"count\": %zu, \"type\": ",
            w->np, w->bytes, w->count);
    json_string(f, w->type);
    fprintf(f, ", \"op\": ");
    json_string(f, w->op);
    fprintf(f, ", \"root\": %d, \"in_place\": %s, \"iters\": %d, "
            "\"time_us\": %.3f, \"min_us\": %.3f, \"algbw_GBps\": %.4f, "
            "\"busbw_GBps\": %.4f, \"errors\": %llu, \"timing\": \"%s\", "
            "\"path\": ",
            w->root, w->in_place ? "true" : "false", w->iters, w->time_us,
            w->min_us, w->algbw, w->busbw, w->errors, w->timing);
    json_string(f, w->path);
    fputc('}', f);
    fflush(f);
}

static FILE *open_or_die(const char *path)
{
    FILE *f = fopen(path, "w");

    if (!f)
        die("cannot write %s: %s", path, strerror(errno));
    return f;
}

/* Rank 0 only. */
static void sinks_open(sinks_t *s, const options_t *o, int nranks)
{
    *s = (sinks_t){ 0 };
    if (o->csv_path) {
        s->csv = open_or_die(o->csv_path);
        fprintf(s->csv, "collective,np,bytes,count,type,op,root,in_place,"
                "iters,time_us,min_us,algbw_GBps,busbw_GBps,errors,timing,"
                "path\n");
    }
    if (o->json_path) {
        s->json = open_or_die(o->json_path);
        fprintf(s->json, "{\n  \"bench\": \"zcopy_bench\", \"np\": %d, "
                "\"buffers\": \"%s\", \"iters\": %d, \"warmup\": %d, "
                "\"check\": %s, \"vary\": %s, \"timing\": \"%s\",\n"
                "  \"rows\": [", nranks,
                buffer_kind_names[o->buffers], o->iters, o->warmup,
                o->check ? "true" : "false", o->vary ? "true" : "false",
                timing_names[o->timing]);
    }
}

static void sinks_emit(sinks_t *s, const row_t *w)
{
    print_row(w);
    if (s->csv)
        csv_row(s->csv, w);
    if (s->json)
        json_row(s, w);
    s->errors += w->errors;
}

static void sinks_close(sinks_t *s)
{
    if (s->csv)
        fclose(s->csv);
    if (s->json) {
        fprintf(s->json, "\n  ]\n}\n");
        fclose(s->json);
    }
}

/* ------------------------------------------------------------------------- */
/* Measurement                                                                */

typedef struct {
    MPI_Comm comm;      /* measured: MPI_COMM_WORLD */
    MPI_Comm ctl;       /* the bench's own barriers and reductions */
    int rank, nranks;
    buffers_t buffers;
    sinks_t sinks;      /* rank 0 */
    bool *same_host;    /* per rank of comm: shares this rank's host */
    int *counts, *displs; /* alltoall_between's arguments */
} bench_t;

/* A private duplicate for the bench's own traffic, opted out of zcopy, so
 * that it neither counts in the statistics nor differs between modes. */
static MPI_Comm control_comm(void)
{
    MPI_Comm ctl;
    MPI_Info info;

    MPI_Info_create(&info);
    MPI_Info_set(info, MPIX_ZCOPY_INFO_KEY, "false");
    check_mpi(MPI_Comm_dup_with_info(MPI_COMM_WORLD, info, &ctl),
              "MPI_Comm_dup_with_info");
    MPI_Info_free(&info);
    return ctl;
}

/* The barrier before each timed call: a dissemination of empty messages,
 * ceil(log2 n) rounds, through the point-to-point engine, which every mode
 * shares (MPI_Barrier would be a peer's own barrier in its runs). */
static void start_barrier(MPI_Comm ctl)
{
    int rank, n;

    MPI_Comm_rank(ctl, &rank);
    MPI_Comm_size(ctl, &n);
    for (int d = 1; d < n; d <<= 1)
        check_mpi(MPI_Sendrecv(NULL, 0, MPI_BYTE, (rank + d) % n, 0, NULL, 0,
                               MPI_BYTE, (rank - d + n) % n, 0, ctl,
                               MPI_STATUS_IGNORE),
                  "MPI_Sendrecv");
}

/* Which ranks of @b's communicator share this rank's host, as MPI sees
 * hosts (MPI_COMM_TYPE_SHARED): servers of an emulated cluster are hosts,
 * zcopy's virtual servers are not. And room for alltoall_between's
 * arguments. */
static void hosts_init(bench_t *b)
{
    MPI_Group all, local;
    MPI_Comm node;
    int *mine, *there, m;

    b->same_host = calloc((size_t)b->nranks, sizeof(bool));
    b->counts = calloc((size_t)b->nranks, sizeof(int));
    b->displs = calloc((size_t)b->nranks, sizeof(int));
    mine = calloc((size_t)b->nranks, sizeof(int));
    there = calloc((size_t)b->nranks, sizeof(int));
    if (!b->same_host || !b->counts || !b->displs || !mine || !there)
        die("out of memory");
    check_mpi(MPI_Comm_split_type(b->ctl, MPI_COMM_TYPE_SHARED, 0,
                                  MPI_INFO_NULL, &node),
              "MPI_Comm_split_type");
    check_mpi(MPI_Comm_size(node, &m), "MPI_Comm_size");
    check_mpi(MPI_Comm_group(node, &local), "MPI_Comm_group");
    check_mpi(MPI_Comm_group(b->ctl, &all), "MPI_Comm_group");
    for (int i = 0; i < m; i++)
        mine[i] = i;
    check_mpi(MPI_Group_translate_ranks(local, m, mine, all, there),
              "MPI_Group_translate_ranks");
    for (int i = 0; i < m; i++)
        b->same_host[there[i]] = true;
    MPI_Group_free(&local);
    MPI_Group_free(&all);
    MPI_Comm_free(&node);
    free(mine);
    free(there);
}

static void hosts_fini(bench_t *b)
{
    free(b->same_host);
    free(b->counts);
    free(b->displs);
}

static MPIX_Zcopy_stats get_stats(MPI_Comm comm)
{
    MPIX_Zcopy_stats s;

    memset(&s, 0, sizeof(s));
    check_mpi(MPIX_Zcopy_get_stats(comm, &s), "MPIX_Zcopy_get_stats");
    return s;
}

/* The path every rank took, from its statistics deltas. */
static void path_of(const bench_t *b, const MPIX_Zcopy_stats *before,
                    const MPIX_Zcopy_stats *after, char *out, size_t len)
{
    unsigned long long d[2] = {
        after->zcopy_calls - before->zcopy_calls,
        after->fallback_calls - before->fallback_calls };
    unsigned long long lo[2], hi[2];

    MPI_Allreduce(d, lo, 2, MPI_UNSIGNED_LONG_LONG, MPI_MIN, b->ctl);
    MPI_Allreduce(d, hi, 2, MPI_UNSIGNED_LONG_LONG, MPI_MAX, b->ctl);
    if (hi[0] == 0 && hi[1] == 0) {
        snprintf(out, len, "stock");
    } else if (lo[0] == hi[0] && hi[1] == 0) {
        snprintf(out, len, "zcopy");
    } else if (lo[1] == hi[1] && hi[0] == 0) {
        snprintf(out, len, "fallback:%s", after->last_fallback_reason);
        /* Keep CSV fields plain: no commas, no quotes. */
        for (char *c = out; *c; c++)
            if (*c == ',' || *c == '"')
                *c = ';';
    } else {
        snprintf(out, len, "mixed");
    }
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median and minimum of the per-iteration times (sorted in place). */
static void summarize(double *t, int n, double *median, double *min)
{
    qsort(t, (size_t)n, sizeof(*t), cmp_double);
    *min = t[0];
    *median = n % 2 ? t[n / 2] : (t[n / 2 - 1] + t[n / 2]) / 2;
}

/* "allreduce 16M 3/20" on stderr, rewritten in place, at most twice a
 * second and only once a row has run for half a second. */
static void progress(const run_t *r, int it, int total, double start,
                     bool *shown)
{
    static double last;
    char size[32];
    double now;

    if (!r->opt->progress || r->rank != 0)
        return;
    now = MPI_Wtime();
    if (now - start < 0.5 || now - last < 0.5)
        return;
    last = now;
    *shown = true;
    fprintf(stderr, "\r%s %s %d/%d   ", r->coll->name,
            human(r->bytes, size, sizeof(size)), it + 1, total);
    fflush(stderr);
}

static void progress_clear(bool shown)
{
    if (shown)
        fprintf(stderr, "\r%60s\r", "");
}

static bool is_barrier(const coll_t *c)
{
    return c->execute == barrier_execute;
}

static bool is_memcpy(const coll_t *c)
{
    return c->execute == memcpy_execute;
}

/* How @r's iterations are timed: memcpy rows, the roofline's reference
 * (compare.sh), always from the bench's own barrier, whatever --timing
 * says of the collectives. */
static timing_t row_timing(const run_t *r)
{
    return is_memcpy(r->coll) ? TIMING_START : r->opt->timing;
}

/* The MPI_Barrier after a call under --timing osu and loop, but after a
 * barrier, which is its own (as osu_barrier times them). Returns the
 * seconds it took; adds what it counted in the zcopy statistics to
 * @counted, and keeps there the call's last fallback reason from before
 * it, so that the row's path is the collective's alone (those reads are
 * outside the time). */
static double barrier_after(const run_t *r, MPIX_Zcopy_stats *counted)
{
    MPIX_Zcopy_stats pre, post;
    double t0, t1;

    if (is_barrier(r->coll))
        return 0;
    pre = get_stats(r->comm);
    memcpy(counted->last_fallback_reason, pre.last_fallback_reason,
           sizeof(pre.last_fallback_reason));
    t0 = MPI_Wtime();
    check_mpi(MPI_Barrier(r->comm), "MPI_Barrier");
    t1 = MPI_Wtime();
    post = get_stats(r->comm);
    counted->zcopy_calls += post.zcopy_calls - pre.zcopy_calls;
    counted->fallback_calls += post.fallback_calls - pre.fallback_calls;
    return t1 - t0;
}

/* Runs warm-up and timed iterations of one row; fills @times (this rank's
 * seconds per timed iteration) and returns this rank's error count. */
static size_t iterate(bench_t *b, run_t *r, double *times,
                      MPIX_Zcopy_stats *before, MPIX_Zcopy_stats *after)
{
    const options_t *o = r->opt;
    const coll_t *c = r->coll;
    const timing_t timing = row_timing(r);
    int total = o->warmup + o->iters;
    double start = MPI_Wtime();
    MPIX_Zcopy_stats barriers = { 0 };
    bool shown = false;
    size_t errors = 0;

    /* Back to back, the first call starts from the bench's barrier, not
     * from wherever the previous row left each rank. */
    if (timing != TIMING_START)
        start_barrier(b->ctl);
    for (int it = 0; it < total; it++) {
        unsigned seed = o->vary ? (unsigned)it : 0;
        double t0, t1, tb = 0;
        int rc;

        r->iter = it;
        if (it == o->warmup) {
            *before = get_stats(r->comm);
            memset(&barriers, 0, sizeof(barriers));
        }
        /* Outside the timed region: clear outputs so that a call that does
         * nothing fails the check, and (re)write inputs; in place, the last
         * result has overwritten them. */
        if (o->check)
            c->poison(r);
        if (it == 0 || o->vary || r->in_place)
            c->inputs(r, IO_WRITE, seed);
        if (timing == TIMING_START)
            start_barrier(b->ctl);
        t0 = MPI_Wtime();
        rc = c->execute(r);
        t1 = MPI_Wtime();
        check_mpi(rc, c->name);
        if (timing != TIMING_START)
            tb = barrier_after(r, &barriers);
        if (it >= o->warmup)
            times[it - o->warmup] = t1 - t0 + (timing == TIMING_LOOP ? tb : 0);
        if (o->corrupt && it == 0) {
            c->poison(r);
            /* alltoall_between's own block must keep the poison: a write
             * there must be caught too. */
            if (c->execute == between_execute)
                memset(slot(r, r->recv, r->rank), 0, r->tsize);
        }
        if (o->check) {
            errors += c->verify(r, seed);
            if (!r->in_place)
                errors += c->inputs(r, IO_CHECK, seed);
        }
        progress(r, it, total, start, &shown);
    }
    *after = get_stats(r->comm);
    if (timing != TIMING_START && !is_barrier(c)) {
        after->zcopy_calls -= barriers.zcopy_calls;
        after->fallback_calls -= barriers.fallback_calls;
        memcpy(after->last_fallback_reason, barriers.last_fallback_reason,
               sizeof(barriers.last_fallback_reason));
    }
    progress_clear(shown);
    return errors;
}

static void measure(bench_t *b, run_t *r)
{
    const options_t *o = r->opt;
    const timing_t timing = row_timing(r);
    double *mine = calloc((size_t)o->iters, sizeof(double));
    double *per_iter = calloc((size_t)o->iters, sizeof(double));
    unsigned long long errors, all_errors = 0;
    MPIX_Zcopy_stats before = { 0 }, after = { 0 };
    row_t w = { .coll = r->coll->name, .np = r->nranks, .bytes = r->bytes,
                .count = r->total, .in_place = r->in_place,
                .iters = o->iters, .timing = timing_names[timing] };
    double secs;

    if (!mine || !per_iter)
        die("out of memory");
    errors = iterate(b, r, mine, &before, &after);
    /* Outside the loop: an iteration's time is its slowest rank's, or
     * (osu) the ranks' mean. */
    MPI_Reduce(mine, per_iter, o->iters, MPI_DOUBLE,
               timing == TIMING_OSU ? MPI_SUM : MPI_MAX, 0, b->ctl);
    MPI_Reduce(&errors, &all_errors, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, 0,
               b->ctl);
    path_of(b, &before, &after, w.path, sizeof(w.path));
    if (r->rank == 0) {
        if (timing == TIMING_OSU)
            for (int i = 0; i < o->iters; i++)
                per_iter[i] /= r->nranks;
        summarize(per_iter, o->iters, &secs, &w.min_us);
        w.time_us = secs * 1e6;
        w.min_us *= 1e6;
        w.algbw = secs > 0 ? (double)r->bytes / secs / 1e9 : 0;
        w.busbw = w.algbw * r->coll->bus_factor(r->nranks);
        w.errors = all_errors;
        w.type = r->bytes ? o->type->name : "none";
        w.op = r->coll->reduces ? op_names[o->op] : "none";
        w.root = r->coll->rooted ? o->root : -1;
        if (is_memcpy(r->coll))
            snprintf(w.path, sizeof(w.path), "memcpy");
        sinks_emit(&b->sinks, &w);
    }
    free(mine);
    free(per_iter);
}

/* Sets up the row for @size; false when the size holds no whole block. */
static bool layout(run_t *r, size_t size)
{
    size_t per_block = r->coll->blocked ? (size_t)r->nranks : 1;

    if (is_barrier(r->coll)) {
        r->bytes = r->block = r->total = 0;
        return true;
    }
    r->block = size / (r->tsize * per_block);
    r->total = r->block * per_block;
    r->bytes = r->total * r->tsize;
    if (r->block > INT_MAX)
        die("%s of %zu bytes: count does not fit an int", r->coll->name, size);
    if ((r->coll->execute == between_execute ||
         r->coll->execute == allgatherv_execute ||
         r->coll->execute == alltoallv_execute) &&
        r->block * (size_t)(r->nranks - 1) > INT_MAX)
        die("%s of %zu bytes: displacement does not fit an int",
            r->coll->name, size);
    r->mcount = (int)r->block;
    return r->block > 0;
}

static run_t row_state(const bench_t *b, const options_t *o, const coll_t *c)
{
    uint64_t range = o->type->exact_max / (uint64_t)b->nranks + 1;

    return (run_t){ .opt = o, .coll = c, .rank = b->rank,
                    .nranks = b->nranks, .type = o->type->id,
                    .tsize = o->type->size, .dt = mpi_type(o->type->id),
                    .mop = mpi_op(o->op),
                    .in_place = o->in_place && c->in_place,
                    .sum_range = range < 1024 ? range : 1024,
                    .send = b->buffers.send, .recv = b->buffers.recv,
                    .comm = b->comm, .same_host = b->same_host,
                    .counts = b->counts, .displs = b->displs };
}

/* Every size of the range for one collective (barrier: one row). */
static void run_coll(bench_t *b, const options_t *o, const coll_t *c)
{
    size_t last = SIZE_MAX;
    char h[32];

    for (size_t size = o->min_bytes;; size *= o->factor) {
        run_t r = row_state(b, o, c);

        if (!layout(&r, size)) {
            if (b->rank == 0)
                printf("# %s: %s B holds no %s per rank at np %d, skipped\n",
                       c->name, human(size, h, sizeof(h)), o->type->name,
                       b->nranks);
        } else if (r.bytes != last) { /* rounding can repeat a size */
            measure(b, &r);
            last = r.bytes;
        }
        if (is_barrier(c) || size > o->max_bytes / o->factor)
            break;
    }
}

int main(int argc, char **argv)
{
    bench_t b = { .comm = MPI_COMM_WORLD };
    options_t o;
    int status;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &b.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &b.nranks);
    my_rank = b.rank;
    status = parse_options(&o, argc, argv, b.rank, b.nranks);
    if (status >= 0) {
        MPI_Finalize();
        return status;
    }
    /* Report MPI failures with their message instead of aborting blind. */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    b.ctl = control_comm();
    hosts_init(&b);
    buffers_init(&b.buffers, o.buffers, o.max_bytes);
    if (b.rank == 0) {
        print_header(&o, b.nranks, &b.buffers);
        sinks_open(&b.sinks, &o, b.nranks);
    }
    for (int i = 0; i < o.ncolls; i++)
        run_coll(&b, &o, o.colls[i]);
    if (b.rank == 0) {
        sinks_close(&b.sinks);
        printf("# errors: %llu%s\n", b.sinks.errors,
               o.check ? "" : " (results not checked: --check)");
    }
    MPI_Bcast(&b.sinks.errors, 1, MPI_UNSIGNED_LONG_LONG, 0, b.ctl);
    buffers_fini(&b.buffers);
    hosts_fini(&b);
    MPI_Comm_free(&b.ctl);
    MPI_Finalize();
    return b.sinks.errors ? 1 : 0;
}
