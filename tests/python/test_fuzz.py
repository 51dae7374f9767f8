"""Random collectives under mpirun, every result checked against numpy.

    mpirun -np N python3 test_fuzz.py calls SEED CALLS
    mpirun -np N python3 test_fuzz.py threads SEED CALLS
    mpirun -np N python3 test_fuzz.py types SEED CALLS

Every rank seeds the same generator, so every rank draws the same calls
with no message between them; what a rank holds and expects follows from
the seed, the call and the rank alone.

calls: every collective zcopy takes (v-forms included), on WORLD, a dup,
two splits (one in reverse order) and one without rank 0; six types,
seven ops, counts from 0 to 256 Ki elements, in place or not, at random
offsets of an activated arena, and on each rank with probability 0.15 a
plain numpy buffer instead: ranks that disagree on eligibility must all
fall back together.

threads: the same calls from two threads at once (MPI_THREAD_MULTIPLE),
each on communicators of its own (a dup of WORLD and four made from it)
and its own half of the arena.

types: bcast, allgather, gather, scatter and alltoall where each rank
describes the same signature its own way (the basic type, a contiguous
type of 4, or a strided vector resized over its gaps, which is not
contiguous): those whose ranks all see contiguous data take zero-copy, the
others fall back together.

Checked: results, send buffers, the gaps that v-forms and strided types
leave, and guard bytes on both sides of every buffer. Every mode must also
have moved data zero-copy (bytes through mappings or UCX) and have fallen
back, so that the agreement between the paths ran. The first failure or
exception aborts the job: ranks that went different ways would otherwise
wait for each other until the test's timeout.
"""
import sys
import threading

import numpy as np
import mpi4py

if sys.argv[1] == "threads":
    mpi4py.rc.thread_level = "multiple"
from mpi4py import MPI  # noqa: E402 (after the thread level is chosen)

import zcopy  # noqa: E402

world = MPI.COMM_WORLD
wrank, wsize = world.Get_rank(), world.Get_size()
mode, seed, ncalls = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
# The largest call's buffers: an alltoall of 262147 int64 or doubles per
# block, send and receive, 2 x n x 2 MiB; threads get half each: up to 4
# ranks in threads mode, 8 otherwise (more ranks stop with an error).
ARENA = 40 << 20
arena = zcopy.empty(ARENA, np.uint8)
# No result can be 99 (sums and products of the inputs stay within 16 in
# magnitude, bitwise results within -8..7), so an element left unwritten
# never passes for a result.
SENTINEL = 99
GUARD_BYTES = 64

MPI_TYPES = {"int8": MPI.INT8_T, "uint16": MPI.UINT16_T,
             "int32": MPI.INT32_T, "int64": MPI.INT64_T,
             "float32": MPI.FLOAT, "float64": MPI.DOUBLE}
OPS = {"sum": (MPI.SUM, np.add), "max": (MPI.MAX, np.maximum),
       "min": (MPI.MIN, np.minimum), "prod": (MPI.PROD, np.multiply),
       "band": (MPI.BAND, np.bitwise_and), "bor": (MPI.BOR, np.bitwise_or),
       "bxor": (MPI.BXOR, np.bitwise_xor)}

thread_name = threading.local()


def stop(what):
    """Reports @what and aborts the job (see the module's docstring)."""
    print("FAILED [rank %d%s] %s" % (wrank, getattr(thread_name, "v", ""),
                                     what), file=sys.stderr, flush=True)
    world.Abort(1)


class Buffers:
    """One call's buffers: one after another in [base, base + size) of the
    arena, each between guard bytes and at a random distance from the
    last, or in plain numpy memory (with guards as well)."""

    def __init__(self, rng, base=0, size=ARENA):
        self.rng = rng
        self.base, self.end = base, base + size
        self.at = base + int(rng.integers(0, 64)) * 8
        self.guards = []

    def take(self, n, dt, plain, data=None):
        nbytes = n * np.dtype(dt).itemsize
        whole = nbytes + 2 * GUARD_BYTES
        if plain:
            mem = np.empty(whole, np.uint8)
        else:
            if self.at + whole > self.end:
                stop("the arena is too small for this call at %d ranks"
                     % wsize)
            mem = arena[self.at:self.at + whole]
            self.at += whole + int(self.rng.integers(0, 8)) * 64
        # Guards that differ from rank to rank and from each other: a copy
        # past the end of a peer's buffer into this one's must show.
        for g in (mem[:GUARD_BYTES], mem[GUARD_BYTES + nbytes:]):
            g[:] = (0x5A + 17 * wrank + len(self.guards)) & 0xFF
            self.guards.append((g, g[0]))
        b = mem[GUARD_BYTES:GUARD_BYTES + nbytes].view(dt)
        b[:] = SENTINEL if data is None else data
        return b

    def guards_intact(self):
        return all(np.all(g == value) for g, value in self.guards)


def values(n, dt, r, salt, opname="sum"):
    """Rank @r's input: small integers, so that every sum, product and
    float result is exact in every type."""
    i = np.arange(n, dtype=np.int64)
    if opname == "prod":
        v = np.where((i + r + salt) % 3 == 0, 2, 1) * \
            np.where((i * 5 + r) % 7 == 0, -1, 1)
        return (np.abs(v) if np.dtype(dt).kind == "u" else v).astype(dt)
    v = (i * 7 + r * 13 + salt) % 9 - 4
    return (v % 5 if np.dtype(dt).kind == "u" else v).astype(dt)


def reduced(n, dt, nranks, salt, opname):
    fn = OPS[opname][1]
    out = values(n, dt, 0, salt, opname)
    for q in range(1, nranks):
        out = fn(out, values(n, dt, q, salt, opname))
    return out


def displs_of(counts, gaps):
    out, at = [], 0
    for c, g in zip(counts, gaps):
        at += g
        out.append(at)
        at += c
    return out, at


class Call:
    """What one drawn call needs: its number (also the inputs' salt), its
    communicator, type, buffers and a description for reports."""

    def __init__(self, number, comm, dname, bufs, plain, desc):
        self.number, self.comm = number, comm
        self.r, self.n = comm.Get_rank(), comm.Get_size()
        self.dt, self.mt = np.dtype(dname), MPI_TYPES[dname]
        self.bufs, self.plain, self.desc = bufs, plain, desc

    def buf(self, n, data=None):
        return self.bufs.take(n, self.dt, self.plain, data)

    def inputs(self, n, r, opname="sum"):
        return values(n, self.dt, r, self.number, opname)

    def check(self, ok, what):
        if not ok:
            stop("call %d: %s: %s" % (self.number, self.desc, what))


# --- calls --------------------------------------------------------------------

def run_reduction(c, coll, opname, count, vcounts, in_place, root):
    op = OPS[opname][0]
    if coll in ("allreduce", "reduce"):
        mine = c.inputs(count, c.r, opname)
        expected = reduced(count, c.dt, c.n, c.number, opname)
        gets_result = coll == "allreduce" or c.r == root
        in_place_here = in_place and gets_result
        rb = c.buf(count, mine if in_place_here else None) \
            if gets_result else None
        sb = None if in_place_here else c.buf(count, mine)
        sarg = MPI.IN_PLACE if in_place_here else [sb, c.mt]
        if coll == "allreduce":
            c.comm.Allreduce(sarg, [rb, c.mt], op)
        else:  # a non-root's receive buffer is not significant
            c.comm.Reduce(sarg, [rb, c.mt] if gets_result else None, op, root)
        if gets_result:
            c.check(np.array_equal(rb, expected), "wrong result")
        if sb is not None:
            c.check(np.array_equal(sb, mine), "send buffer changed")
        return
    counts = [count] * c.n if coll == "reduce_scatter_block" else vcounts
    total = sum(counts)
    mine = c.inputs(total, c.r, opname)
    at = sum(counts[:c.r])
    expected = reduced(total, c.dt, c.n, c.number, opname)[
        at:at + counts[c.r]]
    if in_place:  # the whole input in the receive buffer, its block first
        rb = c.buf(total, mine)
        if coll == "reduce_scatter_block":
            c.comm.Reduce_scatter_block(MPI.IN_PLACE, [rb, c.mt], op)
        else:
            c.comm.Reduce_scatter(MPI.IN_PLACE, [rb, c.mt], counts, op)
        rb = rb[:counts[c.r]]
    else:
        sb = c.buf(total, mine)
        rb = c.buf(counts[c.r])
        if coll == "reduce_scatter_block":
            c.comm.Reduce_scatter_block([sb, c.mt], [rb, c.mt], op)
        else:
            c.comm.Reduce_scatter([sb, c.mt], [rb, c.mt], counts, op)
        c.check(np.array_equal(sb, mine), "send buffer changed")
    c.check(np.array_equal(rb, expected), "wrong result")


def run_gathering(c, coll, count, vcounts, vrng, in_place, root):
    v = coll.endswith("v")
    counts = vcounts if v else [count] * c.n
    gaps = [int(x) for x in vrng.integers(0, 3, c.n)] if v else [0] * c.n
    order = list(range(c.n))
    if v:
        vrng.shuffle(order)  # displacements out of rank order
    displs, at = [0] * c.n, 0
    for q in order:
        at += gaps[q]
        displs[q] = at
        at += counts[q]
    blocks = [c.inputs(counts[q], q) for q in range(c.n)]
    gets_result = coll.startswith("all") or c.r == root
    rb = c.buf(at) if gets_result else None
    sb = None
    if in_place and gets_result:
        rb[displs[c.r]:displs[c.r] + counts[c.r]] = blocks[c.r]
        sarg = MPI.IN_PLACE
    else:
        sb = c.buf(counts[c.r], blocks[c.r])
        sarg = [sb, c.mt]
    rarg = ([rb, (counts, displs), c.mt] if v else [rb, c.mt]) \
        if gets_result else None
    if coll == "allgather":
        c.comm.Allgather(sarg, rarg)
    elif coll == "allgatherv":
        c.comm.Allgatherv(sarg, rarg)
    elif coll == "gather":
        c.comm.Gather(sarg, rarg, root)
    else:
        c.comm.Gatherv(sarg, rarg, root)
    if gets_result:
        expected = np.full(at, SENTINEL, dtype=c.dt)  # the gaps kept
        for q in range(c.n):
            expected[displs[q]:displs[q] + counts[q]] = blocks[q]
        c.check(np.array_equal(rb, expected), "wrong result or gap written")
    if sb is not None:
        c.check(np.array_equal(sb, blocks[c.r]), "send buffer changed")


def run_spreading(c, coll, count, vcounts, vrng, in_place, root):
    if coll == "bcast":
        data = c.inputs(count, root)
        b = c.buf(count, data if c.r == root else None)
        c.comm.Bcast([b, c.mt], root)
        c.check(np.array_equal(b, data), "wrong result")
        return
    v = coll == "scatterv"
    counts = vcounts if v else [count] * c.n
    gaps = [int(x) for x in vrng.integers(0, 3, c.n)] if v else [0] * c.n
    displs, total = displs_of(counts, gaps)
    full = c.inputs(total, root)
    sb = c.buf(total, full) if c.r == root else None
    sarg = None  # not significant at the others
    if c.r == root:
        sarg = [sb, (counts, displs), c.mt] if v else [sb, c.mt]
    rb = None
    if in_place and c.r == root:
        rarg = MPI.IN_PLACE
    else:
        rb = c.buf(counts[c.r])
        rarg = [rb, c.mt]
    if v:
        c.comm.Scatterv(sarg, rarg, root)
    else:
        c.comm.Scatter(sarg, rarg, root)
    if rb is not None:
        c.check(np.array_equal(rb, full[displs[c.r]:displs[c.r] +
                                        counts[c.r]]), "wrong result")
    if sb is not None:
        c.check(np.array_equal(sb, full), "send buffer changed")


def run_exchange(c, coll, count, vseed, in_place):
    v = coll == "alltoallv"
    if v:  # sizes[i][j]: elements i sends j; in place needs them symmetric
        sizes = np.random.default_rng(vseed).integers(0, count + 1,
                                                      (c.n, c.n))
        if in_place:
            sizes = np.maximum(sizes, sizes.T)
    else:
        sizes = np.full((c.n, c.n), count)
    scounts = [int(x) for x in sizes[c.r]]
    rcounts = [int(sizes[q][c.r]) for q in range(c.n)]
    sdispls, stotal = displs_of(scounts, [0] * c.n)
    rdispls, rtotal = displs_of(rcounts, [0] * c.n)
    mine = c.inputs(stotal, c.r)
    expected = np.concatenate(
        [c.inputs(int(sizes[q].sum()), q)
         [int(sizes[q][:c.r].sum()):int(sizes[q][:c.r + 1].sum())]
         for q in range(c.n)])
    rb = c.buf(rtotal, mine if in_place else None)
    if in_place:
        if v:
            c.comm.Alltoallv(MPI.IN_PLACE, [rb, (rcounts, rdispls), c.mt])
        else:
            c.comm.Alltoall(MPI.IN_PLACE, [rb, c.mt])
    else:
        sb = c.buf(stotal, mine)
        if v:
            c.comm.Alltoallv([sb, (scounts, sdispls), c.mt],
                             [rb, (rcounts, rdispls), c.mt])
        else:
            c.comm.Alltoall([sb, c.mt], [rb, c.mt])
        c.check(np.array_equal(sb, mine), "send buffer changed")
    c.check(np.array_equal(rb, expected), "wrong result")


def comms_from(comm):
    r = comm.Get_rank()
    return [comm, comm.Dup(), comm.Split(r % 2, r), comm.Split(0, -r),
            comm.Split(MPI.UNDEFINED if r == 0 else 1, r)]


def run_calls(comms, draw, base=0, size=ARENA):
    """@ncalls calls drawn from @draw on @comms. Every draw comes before a
    rank skips a call on a communicator it is not in, and a choice made
    per rank draws one value for every rank, so that all ranks' streams
    stay the same."""
    dtypes = list(MPI_TYPES)
    colls = ["allreduce", "reduce", "reduce_scatter_block", "reduce_scatter",
             "allgather", "allgatherv", "gather", "gatherv", "bcast",
             "scatter", "scatterv", "alltoall", "alltoallv", "barrier"]
    counts = [0, 1, 3, 17, 256, 1000, 4099, 65539, 262147]
    for number in range(ncalls):
        ci = int(draw.integers(0, len(comms)))
        coll = colls[int(draw.integers(0, len(colls)))]
        dname = dtypes[int(draw.integers(0, len(dtypes)))]
        opname = list(OPS)[int(draw.integers(0, len(OPS)))]
        count = counts[int(draw.integers(0, len(counts)))]
        in_place = bool(draw.integers(0, 3) == 0)
        plain = bool(draw.random(wsize)[wrank] < 0.15)
        rootdraw = int(draw.integers(0, 1 << 30))
        vseed = int(draw.integers(0, 1 << 30))
        comm = comms[ci]
        if comm == MPI.COMM_NULL:
            continue
        if np.dtype(dname).kind == "f" and opname in ("band", "bor", "bxor"):
            opname = "sum"
        n = comm.Get_size()
        root = rootdraw % n
        vrng = np.random.default_rng(vseed)
        vcounts = [int(x) for x in vrng.integers(0, count + 1, n)]
        # Its own generator: plain buffers skip its draws on some ranks.
        bufs = Buffers(np.random.default_rng(seed * 7919 + number), base,
                       size)
        c = Call(number, comm, dname, bufs, plain,
                 "%s n=%d count=%d %s %s in_place=%s comm=%d root=%d" % (
                     coll, n, count, dname, opname, in_place, ci, root))
        if coll in ("allreduce", "reduce", "reduce_scatter_block",
                    "reduce_scatter"):
            run_reduction(c, coll, opname, count, vcounts, in_place, root)
        elif "gather" in coll:
            run_gathering(c, coll, count, vcounts, vrng, in_place, root)
        elif coll in ("bcast", "scatter", "scatterv"):
            run_spreading(c, coll, count, vcounts, vrng, in_place, root)
        elif coll.startswith("alltoall"):
            # Not vrng: its draws depend on the collective's shape.
            run_exchange(c, coll, count, vseed + 1, in_place)
        else:
            comm.Barrier()
        c.check(bufs.guards_intact(), "wrote outside its buffers")
    return [c for c in comms if c != MPI.COMM_NULL]


# --- threads ------------------------------------------------------------------

def run_threads():
    if MPI.Query_thread() != MPI.THREAD_MULTIPLE:
        stop("MPI_THREAD_MULTIPLE not provided")
    sets = [comms_from(world.Dup()) for _ in range(2)]

    def body(k):
        thread_name.v = ", thread %d" % k
        try:
            run_calls(sets[k], np.random.default_rng(seed + 1000 * (k + 1)),
                      k * (ARENA // 2), ARENA // 2)
        except Exception as e:  # noqa: BLE001 (any exception fails the job)
            stop("%r" % e)

    threads = [threading.Thread(target=body, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return [c for cs in sets for c in cs if c != MPI.COMM_NULL]


# --- types --------------------------------------------------------------------

BASIC, CONTIGUOUS4, STRIDED = range(3)


def layout_of(kind, count, mt, itemsize, made):
    """How this rank describes @count elements per block: (datatype, its
    count per block, stride and extent in elements)."""
    if kind == BASIC:
        return mt, count, 1, count
    if kind == CONTIGUOUS4:  # every count below is a multiple of 4
        t = mt.Create_contiguous(4).Commit()
        made.append(t)
        return t, count // 4, 1, count
    vec = mt.Create_vector(count, 1, 2)  # every other element
    t = vec.Create_resized(0, 2 * count * itemsize).Commit()
    vec.Free()
    made.append(t)
    return t, 1, 2, 2 * count


def run_type_call(c, coll, count, layout, root):
    t, per_block, stride, extent = layout

    def laid_out(blocks, data=None):
        b = c.buf(blocks * extent)
        for j in range(blocks if data is not None else 0):
            b[j * extent:j * extent + stride * count:stride] = \
                data[j * count:(j + 1) * count]
        return b

    def read_back(b, blocks):
        return np.concatenate([b[j * extent:j * extent + stride * count:
                                 stride] for j in range(blocks)])

    def gaps_kept(b):
        return stride == 1 or np.all(b[1::2] == SENTINEL)

    n, r = c.n, c.r
    if coll == "bcast":
        data = c.inputs(count, root)
        b = laid_out(1, data if r == root else None)
        c.comm.Bcast([b, per_block, t], root)
        c.check(np.array_equal(read_back(b, 1), data), "wrong result")
        c.check(gaps_kept(b), "a gap written")
    elif coll in ("allgather", "gather"):
        mine = c.inputs(count, r)
        sb = laid_out(1, mine)
        gets_result = coll == "allgather" or r == root
        rb = laid_out(n) if gets_result else None
        rarg = [rb, per_block, t] if gets_result else None
        if coll == "allgather":
            c.comm.Allgather([sb, per_block, t], rarg)
        else:
            c.comm.Gather([sb, per_block, t], rarg, root)
        c.check(np.array_equal(read_back(sb, 1), mine), "send buffer changed")
        if gets_result:
            expected = np.concatenate([c.inputs(count, q) for q in range(n)])
            c.check(np.array_equal(read_back(rb, n), expected),
                    "wrong result")
            c.check(gaps_kept(rb), "a gap written")
    elif coll == "scatter":
        full = c.inputs(count * n, root)
        sb = laid_out(n, full) if r == root else None
        rb = laid_out(1)
        c.comm.Scatter([sb, per_block, t] if r == root else None,
                       [rb, per_block, t], root)
        c.check(np.array_equal(read_back(rb, 1),
                               full[r * count:(r + 1) * count]),
                "wrong result")
        c.check(gaps_kept(rb), "a gap written")
    else:
        mine = c.inputs(count * n, r)
        sb = laid_out(n, mine)
        rb = laid_out(n)
        c.comm.Alltoall([sb, per_block, t], [rb, per_block, t])
        expected = np.concatenate([c.inputs(count * n, q)
                                   [r * count:(r + 1) * count]
                                   for q in range(n)])
        c.check(np.array_equal(read_back(rb, n), expected), "wrong result")
        c.check(gaps_kept(rb), "a gap written")
        c.check(np.array_equal(read_back(sb, n), mine), "send buffer changed")


def run_types(draw):
    bases = ["int32", "float64", "int8"]
    colls = ["bcast", "allgather", "gather", "scatter", "alltoall"]
    counts = [4, 16, 256, 1024, 8192, 65536, 131072]
    for number in range(ncalls):
        coll = colls[int(draw.integers(0, len(colls)))]
        dname = bases[int(draw.integers(0, len(bases)))]
        count = counts[int(draw.integers(0, len(counts)))]
        kind = int(draw.integers(0, 3, wsize)[wrank])  # see run_calls
        plain = bool(draw.random(wsize)[wrank] < 0.1)
        root = int(draw.integers(0, wsize))
        bufs = Buffers(np.random.default_rng(seed * 31 + number))
        c = Call(number, world, dname, bufs, plain,
                 "%s count=%d %s layout=%d root=%d" % (coll, count, dname,
                                                       kind, root))
        made = []
        layout = layout_of(kind, count, c.mt, c.dt.itemsize, made)
        run_type_call(c, coll, count, layout, root)
        c.check(bufs.guards_intact(), "wrote outside its buffers")
        for t in made:  # after the call, which has completed
            t.Free()
    return [world]


try:
    if mode == "calls":
        comms = run_calls(comms_from(world), np.random.default_rng(seed))
    elif mode == "threads":
        comms = run_threads()
    else:
        comms = run_types(np.random.default_rng(seed))
except Exception as e:  # noqa: BLE001 (any exception fails the job)
    stop("%r" % e)

stats = [zcopy.stats(c) for c in comms]
moved = world.allreduce(sum(s["ipc_bytes"] + s["ucx_bytes"] for s in stats))
fallbacks = world.allreduce(sum(s["fallback_calls"] for s in stats))
if wrank == 0:
    print("%s seed %d, %d calls: %d bytes moved zero-copy, %d fallbacks "
          "(over the ranks)" % (mode, seed, ncalls, moved, fallbacks),
          flush=True)
if moved == 0 or fallbacks == 0:
    stop("both paths must have run")
