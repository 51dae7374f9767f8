"""The zcopy Python module under mpirun, with mpi4py and numpy.

    mpirun -np N python3 test_module.py          component loaded
    mpirun -np N --mca mpool ^zcopy python3 test_module.py nompool

Every check runs on every rank; the exit status is 1 if any rank failed.
"""
import gc
import sys

import numpy as np
from mpi4py import MPI

import zcopy

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
failures = []
STATS_FIELDS = ["zcopy_calls", "fallback_calls", "ipc_bytes", "ucx_bytes",
                "last_fallback_reason", "inline_calls", "ctl_msgs",
                "ctl_bytes", "inline_max"]


def check(cond, what):
    if not cond:
        failures.append(what)
        print("[rank %d] FAILED: %s" % (rank, what), file=sys.stderr)


def raises(exc, fn, *args):
    try:
        fn(*args)
    except exc as e:
        return str(e)
    return None


def delta(before, after, key):
    return after[key] - before[key]


def test_stats_fields():
    s = zcopy.stats(comm)
    check(list(s) == STATS_FIELDS, "stats keys %s" % list(s))
    check(all(isinstance(s[k], int) for k in STATS_FIELDS if k !=
              "last_fallback_reason"), "counters are ints")
    check(isinstance(s["last_fallback_reason"], str), "reason is a str")


def test_empty_is_zero_copy():
    a = zcopy.empty((256, 1024), np.float64)
    check(a.shape == (256, 1024) and a.dtype == np.float64, "shape, dtype")
    check(zcopy.query(comm, a), "zcopy.empty memory is activated")
    a[:] = rank + 1
    before = zcopy.stats(comm)
    comm.Allreduce(MPI.IN_PLACE, a, op=MPI.SUM)
    after = zcopy.stats(comm)
    check(np.all(a == size * (size + 1) / 2), "allreduce result")
    check(delta(before, after, "zcopy_calls") == 1,
          "allreduce on zcopy.empty ran zero-copy (reason: %s)"
          % after["last_fallback_reason"])
    check(delta(before, after, "ipc_bytes") > 0, "moved through mappings")


def test_plain_numpy_falls_back():
    a = np.full(1024, float(rank))
    check(not zcopy.query(comm, a), "numpy memory is not activated")
    before = zcopy.stats(comm)
    comm.Allreduce(MPI.IN_PLACE, a, op=MPI.SUM)
    after = zcopy.stats(comm)
    check(np.all(a == size * (size - 1) / 2), "fallback allreduce result")
    check(delta(before, after, "fallback_calls") == 1 and
          delta(before, after, "zcopy_calls") == 0,
          "allreduce on numpy memory fell back")
    check("not activated" in after["last_fallback_reason"],
          "reason names the memory: %r" % after["last_fallback_reason"])


def test_query_buffers():
    check(not zcopy.query(comm, bytearray(64)), "bytearray not activated")
    check(zcopy.query(comm, zcopy.empty(8, np.int32)[2:6]),
          "a view of activated memory is activated")
    check(raises(TypeError, zcopy.query, comm, 42) is not None,
          "query of an int raises TypeError")
    check(raises(TypeError, zcopy.stats, "world") is not None,
          "stats of a str raises TypeError")


def test_errors_carry_zcopy_message():
    msg = raises(zcopy.ZcopyError, zcopy.stats, MPI.COMM_NULL)
    check(msg is not None and msg.startswith("MPIX_Zcopy_get_stats") and
          "MPI_COMM_NULL" in msg,
          "stats(COMM_NULL) raises ZcopyError naming the cause: %r" % msg)


def test_memory_lives_as_long_as_views():
    a = zcopy.empty(1 << 20, np.float64)  # 8 MiB: a block of its own
    addr = a.ctypes.data
    view = a[10:20]
    del a
    gc.collect()
    view[:] = 5.0
    check(np.all(view == 5.0) and zcopy.query(comm, view),
          "a view outlives its array and stays activated")
    del view
    gc.collect()
    gone = MPI.memory.fromaddress(addr, 8 << 20)
    check(not zcopy.query(comm, gone),
          "memory is deactivated once the array and its views are gone")


def test_without_mpool():
    msg = raises(zcopy.ZcopyError, zcopy.empty, 16)
    check(msg is not None and "mpool/zcopy" in msg,
          "zcopy.empty without the component raises ZcopyError: %r" % msg)


if len(sys.argv) > 1 and sys.argv[1] == "nompool":
    tests = [test_stats_fields, test_without_mpool]
else:
    tests = [test_stats_fields, test_empty_is_zero_copy,
             test_plain_numpy_falls_back, test_query_buffers,
             test_errors_carry_zcopy_message,
             test_memory_lives_as_long_as_views]
for t in tests:
    t()
failed = comm.allreduce(len(failures), op=MPI.SUM)
if rank == 0:
    print("%d tests on %d ranks: %d failed checks" % (len(tests), size, failed))
sys.exit(1 if failed else 0)
