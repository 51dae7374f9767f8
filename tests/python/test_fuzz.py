"""Random collectives under mpirun, every result checked against numpy.

    mpirun -np N python3 test_fuzz.py calls SEED ITERS
    mpirun -np N python3 test_fuzz.py threads SEED ITERS
    mpirun -np N python3 test_fuzz.py types SEED ITERS

Every rank seeds the same generator, so every rank draws the same calls
with no message between them; what a rank holds and expects follows from
the seed, the call and the rank alone.

calls: every collective zcopy takes (v-forms included), on WORLD, a dup,
two splits (one in reverse order) and one without rank 0; six types,
seven ops, counts from 0 to 256 Ki elements, in place or not, at random
offsets of an activated arena, and on each rank with probability 0.15 a
plain numpy buffer instead: ranks that disagree on eligibility must all
fall back together. Checks results, bytes around what a call may write
and send buffers.

types: bcast, allgather, gather, scatter and alltoall where each rank
describes the same signature its own way (the basic type, a contiguous
type of 4, or a strided vector resized over its gaps, which is not
contiguous): those that all see contiguous data take zero-copy, the
others fall back together. Checks results and the gaps.

threads: calls from two threads at once (MPI_THREAD_MULTIPLE), each on
communicators of its own (a dup of WORLD and four made from it) and its
own half of the arena.

Both modes also require that some calls ran zero-copy and some fell back,
so that the agreement between them was exercised. Exit status 1 on any
failure.
"""
import sys
import threading

import numpy as np
import mpi4py

if sys.argv[1] == "threads":
    mpi4py.rc.thread_level = "multiple"
from mpi4py import MPI  # noqa: E402 (after the thread level)

import zcopy

world = MPI.COMM_WORLD
wrank, wsize = world.Get_rank(), world.Get_size()
mode, seed, iters = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
draw = np.random.default_rng(seed)
ARENA = 40 << 20
arena = zcopy.empty(ARENA, np.uint8)
SENTINEL = 99
failures = 0
failures_lock = threading.Lock()

MPI_TYPES = {"int8": MPI.INT8_T, "uint16": MPI.UINT16_T,
             "int32": MPI.INT32_T, "int64": MPI.INT64_T,
             "float32": MPI.FLOAT, "float64": MPI.DOUBLE}
OPS = {"sum": (MPI.SUM, np.add), "max": (MPI.MAX, np.maximum),
       "min": (MPI.MIN, np.minimum), "prod": (MPI.PROD, np.multiply),
       "band": (MPI.BAND, np.bitwise_and), "bor": (MPI.BOR, np.bitwise_or),
       "bxor": (MPI.BXOR, np.bitwise_xor)}


def fail(it, what):
    global failures
    with failures_lock:
        failures += 1
        many = failures > 20
    if not many:
        print("FAILED [rank %d] call %d: %s" % (wrank, it, what),
              file=sys.stderr, flush=True)


class Carver:
    """Buffers one after another in [base, base + size) of the arena, at
    random gaps (whole elements of 8 bytes), or plain numpy memory."""

    def __init__(self, rng, base=0, size=ARENA):
        self.rng = rng
        self.base, self.size = base, size
        self.at = int(rng.integers(0, 64)) * 8

    def take(self, n, dt, plain):
        nbytes = n * np.dtype(dt).itemsize
        if plain:
            return np.empty(n, dt)
        if self.at + nbytes > self.size:
            self.at = 0
        view = arena[self.base + self.at:
                     self.base + self.at + nbytes].view(dt)
        self.at += nbytes + int(self.rng.integers(0, 8)) * 64 + 8
        self.at = (self.at + 7) // 8 * 8
        return view

    def filled(self, n, dt, plain, data=None):
        b = self.take(n, dt, plain)
        b[:] = SENTINEL if data is None else data
        return b


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


# --- calls --------------------------------------------------------------------

def run_reduction(it, comm, coll, dt, mt, opname, count, vcounts, inplace,
                  root, car, plain, tag):
    r, n = comm.Get_rank(), comm.Get_size()
    op = OPS[opname][0]
    salt = it
    if coll in ("allreduce", "reduce"):
        mine = values(count, dt, r, salt, opname)
        exp = reduced(count, dt, n, salt, opname)
        keep = inplace and (coll == "allreduce" or r == root)
        rb = car.filled(count, dt, plain, mine if keep else None)
        sb = None if keep else car.filled(count, dt, plain, mine)
        sarg = MPI.IN_PLACE if keep else [sb, mt]
        if coll == "allreduce":
            comm.Allreduce(sarg, [rb, mt], op)
        else:
            comm.Reduce(sarg, [rb, mt], op, root)
        if (coll == "allreduce" or r == root) and not np.array_equal(rb, exp):
            fail(it, tag + ": wrong result")
        if coll == "reduce" and r != root and not np.all(rb == SENTINEL):
            fail(it, tag + ": a non-root's receive buffer was written")
        if sb is not None and not np.array_equal(sb, mine):
            fail(it, tag + ": send buffer changed")
        return
    counts = [count] * n if coll == "reduce_scatter_block" else vcounts
    total = sum(counts)
    mine = values(total, dt, r, salt, opname)
    at = sum(counts[:r])
    exp = reduced(total, dt, n, salt, opname)[at:at + counts[r]]
    if inplace:
        rb = car.filled(total, dt, plain, mine)
        if coll == "reduce_scatter_block":
            comm.Reduce_scatter_block(MPI.IN_PLACE, [rb, mt], op)
        else:
            comm.Reduce_scatter(MPI.IN_PLACE, [rb, mt], counts, op)
    else:
        sb = car.filled(total, dt, plain, mine)
        rb = car.filled(counts[r] + 2, dt, plain)
        if coll == "reduce_scatter_block":
            comm.Reduce_scatter_block([sb, mt], [rb[:count], mt], op)
        else:
            comm.Reduce_scatter([sb, mt], [rb[:counts[r]], mt], counts, op)
        if not np.all(rb[counts[r]:] == SENTINEL):
            fail(it, tag + ": wrote past its block")
        if not np.array_equal(sb, mine):
            fail(it, tag + ": send buffer changed")
    if not np.array_equal(rb[:counts[r]], exp):
        fail(it, tag + ": wrong result")


def run_gathering(it, comm, coll, dt, mt, count, vcounts, vrng, inplace,
                  root, car, plain, tag):
    r, n = comm.Get_rank(), comm.Get_size()
    v = coll.endswith("v")
    counts = vcounts if v else [count] * n
    gaps = [int(x) for x in vrng.integers(0, 3, n)] if v else [0] * n
    order = list(range(n))
    if v:
        vrng.shuffle(order)  # displacements out of rank order
    displs = [0] * n
    at = 0
    for q in order:
        at += gaps[q]
        displs[q] = at
        at += counts[q]
    blocks = [values(counts[q], dt, q, it) for q in range(n)]
    here = coll.startswith("all") or r == root
    rb = car.filled(at if here else 1, dt, plain)
    sb = None
    if inplace and here:
        rb[displs[r]:displs[r] + counts[r]] = blocks[r]
        sarg = MPI.IN_PLACE
    else:
        sb = car.filled(counts[r], dt, plain, blocks[r])
        sarg = [sb, mt]
    rarg = [rb, (counts, displs), mt] if v else [rb, mt]
    if coll == "allgather":
        comm.Allgather(sarg, rarg)
    elif coll == "allgatherv":
        comm.Allgatherv(sarg, rarg)
    elif coll == "gather":
        comm.Gather(sarg, rarg if here else None, root)
    else:
        comm.Gatherv(sarg, rarg if here else None, root)
    if here:
        exp = np.full(at, SENTINEL, dtype=dt)
        for q in range(n):
            exp[displs[q]:displs[q] + counts[q]] = blocks[q]
        if not np.array_equal(rb, exp):
            fail(it, tag + ": wrong result (or a gap written)")
    elif not np.all(rb == SENTINEL):
        fail(it, tag + ": a non-root's receive buffer was written")
    if sb is not None and not np.array_equal(sb, blocks[r]):
        fail(it, tag + ": send buffer changed")


def run_spreading(it, comm, coll, dt, mt, count, vcounts, vrng, inplace,
                  root, car, plain, tag):
    r, n = comm.Get_rank(), comm.Get_size()
    if coll == "bcast":
        data = values(count, dt, root, it)
        b = car.filled(count, dt, plain, data if r == root else None)
        comm.Bcast([b, mt], root)
        if not np.array_equal(b, data):
            fail(it, tag + ": wrong result")
        return
    v = coll == "scatterv"
    counts = vcounts if v else [count] * n
    gaps = [int(x) for x in vrng.integers(0, 3, n)] if v else [0] * n
    displs, total = displs_of(counts, gaps)
    full = values(total, dt, root, it)
    exp = full[displs[r]:displs[r] + counts[r]]
    sb = car.filled(total if r == root else 1, dt, plain,
                    full if r == root else None)
    sarg = [sb, (counts, displs), mt] if v else [sb, mt]
    rb = None
    if inplace and r == root:
        rarg = MPI.IN_PLACE
    else:
        rb = car.filled(counts[r], dt, plain)
        rarg = [rb, mt]
    if v:
        comm.Scatterv(sarg if r == root else None, rarg, root)
    else:
        comm.Scatter(sarg if r == root else None, rarg, root)
    if rb is not None and not np.array_equal(rb, exp):
        fail(it, tag + ": wrong result")
    if r == root and not np.array_equal(sb, full):
        fail(it, tag + ": send buffer changed")


def run_exchange(it, comm, coll, dt, mt, count, vseed, inplace, car, plain,
                 tag):
    r, n = comm.Get_rank(), comm.Get_size()
    v = coll == "alltoallv"
    if v:  # sizes[i][j]: elements i sends j; in place needs them symmetric
        sizes = np.random.default_rng(vseed).integers(0, count + 1, (n, n))
        if inplace:
            sizes = np.maximum(sizes, sizes.T)
    else:
        sizes = np.full((n, n), count)
    scounts = [int(x) for x in sizes[r]]
    rcounts = [int(sizes[q][r]) for q in range(n)]
    sdispls, stotal = displs_of(scounts, [0] * n)
    rdispls, rtotal = displs_of(rcounts, [0] * n)
    mine = values(stotal, dt, r, it)
    exp = np.concatenate(
        [values(int(sizes[q].sum()), dt, q, it)
         [int(sizes[q][:r].sum()):int(sizes[q][:r + 1].sum())]
         for q in range(n)])
    rb = car.filled(rtotal, dt, plain, mine if inplace else None)
    if inplace:
        if v:
            comm.Alltoallv(MPI.IN_PLACE, [rb, (rcounts, rdispls), mt])
        else:
            comm.Alltoall(MPI.IN_PLACE, [rb, mt])
    else:
        sb = car.filled(stotal, dt, plain, mine)
        if v:
            comm.Alltoallv([sb, (scounts, sdispls), mt],
                           [rb, (rcounts, rdispls), mt])
        else:
            comm.Alltoall([sb, mt], [rb, mt])
        if not np.array_equal(sb, mine):
            fail(it, tag + ": send buffer changed")
    if not np.array_equal(rb, exp):
        fail(it, tag + ": wrong result")


def comms_from(comm):
    r = comm.Get_rank()
    return [comm, comm.Dup(), comm.Split(r % 2, r), comm.Split(0, -r),
            comm.Split(MPI.UNDEFINED if r == 0 else 1, r)]


def run_calls(comms, draw, base=0, size=ARENA):
    dtypes = list(MPI_TYPES)
    colls = ["allreduce", "reduce", "reduce_scatter_block", "reduce_scatter",
             "allgather", "allgatherv", "gather", "gatherv", "bcast",
             "scatter", "scatterv", "alltoall", "alltoallv", "barrier"]
    counts = [0, 1, 3, 17, 256, 1000, 4099, 65539, 262147]
    for it in range(iters):
        ci = int(draw.integers(0, len(comms)))
        coll = colls[int(draw.integers(0, len(colls)))]
        dname = dtypes[int(draw.integers(0, len(dtypes)))]
        opname = list(OPS)[int(draw.integers(0, len(OPS)))]
        count = counts[int(draw.integers(0, len(counts)))]
        inplace = bool(draw.integers(0, 3) == 0)
        plain = bool(draw.random(wsize)[wrank] < 0.15)
        rootdraw = int(draw.integers(0, 1 << 30))
        vseed = int(draw.integers(0, 1 << 30))
        comm = comms[ci]
        if comm == MPI.COMM_NULL:
            continue
        dt = np.dtype(dname)
        if dt.kind == "f" and opname in ("band", "bor", "bxor"):
            opname = "sum"
        n = comm.Get_size()
        root = rootdraw % n
        vrng = np.random.default_rng(vseed)
        vcounts = [int(x) for x in vrng.integers(0, count + 1, n)]
        car = Carver(np.random.default_rng(seed * 7919 + it), base, size)
        mt = MPI_TYPES[dname]
        tag = "%s n=%d count=%d %s %s in_place=%s comm=%d root=%d" % (
            coll, n, count, dname, opname, inplace, ci, root)
        try:
            if coll in ("allreduce", "reduce", "reduce_scatter_block",
                        "reduce_scatter"):
                run_reduction(it, comm, coll, dt, mt, opname, count, vcounts,
                              inplace, root, car, plain, tag)
            elif "gather" in coll:
                run_gathering(it, comm, coll, dt, mt, count, vcounts, vrng,
                              inplace, root, car, plain, tag)
            elif coll in ("bcast", "scatter", "scatterv"):
                run_spreading(it, comm, coll, dt, mt, count, vcounts, vrng,
                              inplace, root, car, plain, tag)
            elif coll.startswith("alltoall"):
                run_exchange(it, comm, coll, dt, mt, count, vseed + 1,
                             inplace, car, plain, tag)
            else:
                comm.Barrier()
        except MPI.Exception as e:
            fail(it, tag + ": raised " + str(e))
    return [c for c in comms if c != MPI.COMM_NULL]


# --- types --------------------------------------------------------------------

def layout_of(kind, c, mt, itemsize, made):
    """How this rank describes @c elements per block: (datatype, its count
    per block, stride and extent in elements)."""
    if kind == 0 or c % 4 != 0:
        return mt, c, 1, c
    if kind == 1:
        t = mt.Create_contiguous(4).Commit()
        made.append(t)
        return t, c // 4, 1, c
    vec = mt.Create_vector(c, 1, 2)
    t = vec.Create_resized(0, 2 * c * itemsize).Commit()
    vec.Free()
    made.append(t)
    return t, 1, 2, 2 * c


def run_types():
    bases = [("int32", MPI.INT32_T), ("float64", MPI.DOUBLE),
             ("int8", MPI.INT8_T)]
    colls = ["bcast", "allgather", "gather", "scatter", "alltoall"]
    counts = [4, 16, 256, 1024, 8192, 65536, 131072]
    r, n = wrank, wsize
    for it in range(iters):
        coll = colls[int(draw.integers(0, len(colls)))]
        dname, mt = bases[int(draw.integers(0, len(bases)))]
        c = counts[int(draw.integers(0, len(counts)))]
        kind = [int(x) for x in draw.integers(0, 3, n)][r]
        plain = bool(draw.random(n)[r] < 0.1)
        root = int(draw.integers(0, n))
        dt = np.dtype(dname)
        made = []
        t, cnt, stride, ext = layout_of(kind, c, mt, dt.itemsize, made)
        car = Carver(np.random.default_rng(seed * 31 + it))
        tag = "%s c=%d %s layout=%d root=%d" % (coll, c, dname, kind, root)

        def laid_out(blocks, data=None):
            b = car.filled(blocks * ext, dt, plain)
            for j in range(blocks if data is not None else 0):
                b[j * ext:j * ext + stride * c:stride] = \
                    data[j * c:(j + 1) * c]
            return b

        def read_back(b, blocks):
            return np.concatenate([b[j * ext:j * ext + stride * c:stride]
                                   for j in range(blocks)])

        def gaps_kept(b):
            return stride == 1 or np.all(b[1::2] == SENTINEL)

        try:
            if coll == "bcast":
                data = values(c, dt, root, it)
                b = laid_out(1, data if r == root else None)
                world.Bcast([b, cnt, t], root)
                ok = np.array_equal(read_back(b, 1), data) and gaps_kept(b)
            elif coll in ("allgather", "gather"):
                sb = laid_out(1, values(c, dt, r, it))
                here = coll == "allgather" or r == root
                rb = laid_out(n if here else 1)
                if coll == "allgather":
                    world.Allgather([sb, cnt, t], [rb, cnt, t])
                else:
                    world.Gather([sb, cnt, t],
                                 [rb, cnt, t] if here else None, root)
                exp = np.concatenate([values(c, dt, q, it) for q in range(n)])
                ok = np.array_equal(read_back(sb, 1), values(c, dt, r, it))
                if here:
                    ok &= np.array_equal(read_back(rb, n), exp) and \
                        gaps_kept(rb)
            elif coll == "scatter":
                full = values(c * n, dt, root, it)
                sb = laid_out(n if r == root else 1,
                              full if r == root else None)
                rb = laid_out(1)
                world.Scatter([sb, cnt, t] if r == root else None,
                              [rb, cnt, t], root)
                ok = np.array_equal(read_back(rb, 1),
                                    full[r * c:(r + 1) * c]) and gaps_kept(rb)
            else:
                sb = laid_out(n, values(c * n, dt, r, it))
                rb = laid_out(n)
                world.Alltoall([sb, cnt, t], [rb, cnt, t])
                exp = np.concatenate([values(c * n, dt, q, it)
                                      [r * c:(r + 1) * c] for q in range(n)])
                ok = np.array_equal(read_back(rb, n), exp) and gaps_kept(rb)
            if not ok:
                fail(it, tag + ": wrong result, gap or send buffer")
        except MPI.Exception as e:
            fail(it, tag + ": raised " + str(e))
        for x in made:
            x.Free()
    return [world]


def run_threads():
    if MPI.Query_thread() != MPI.THREAD_MULTIPLE:
        fail(-1, "MPI_THREAD_MULTIPLE not provided")
        return [world]
    sets = [comms_from(world.Dup()) for _ in range(2)]

    def body(k):
        try:
            run_calls(sets[k], np.random.default_rng(seed + 1000 * (k + 1)),
                      k * (ARENA // 2), ARENA // 2)
        except Exception as e:  # noqa: BLE001 (reported as a failure)
            fail(-1, "thread %d: %r" % (k, e))

    threads = [threading.Thread(target=body, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return [c for cs in sets for c in cs if c != MPI.COMM_NULL]


if mode == "calls":
    comms = run_calls(comms_from(world), draw)
elif mode == "threads":
    comms = run_threads()
else:
    comms = run_types()
zcopy_calls = sum(zcopy.stats(c)["zcopy_calls"] for c in comms)
fallbacks = sum(zcopy.stats(c)["fallback_calls"] for c in comms)
total_failures = world.allreduce(failures)
zcopy_calls = world.allreduce(zcopy_calls)
fallbacks = world.allreduce(fallbacks)
if wrank == 0:
    print("%s seed %d, %d calls: %d failures; %d zero-copy, %d fallbacks "
          "(over the ranks)" % (mode, seed, iters, total_failures,
                                zcopy_calls, fallbacks), flush=True)
    if zcopy_calls == 0 or fallbacks == 0:
        print("FAILED: both paths must have run", flush=True)
ok = total_failures == 0 and zcopy_calls > 0 and fallbacks > 0
sys.exit(0 if ok else 1)
