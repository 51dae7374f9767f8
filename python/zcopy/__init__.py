"""zcopy from Python: activated memory and zero-copy statistics for mpi4py.

Memory comes from MPI.Alloc_mem with the info key mpool_hints=zcopy, which
the mpool/zcopy component answers with activated memory; collectives on it
(comm.Allreduce, comm.Bcast, ...) then run zero-copy inside each server
and through UCX between servers, with nothing else to call:

    from mpi4py import MPI
    import numpy as np
    import zcopy

    grad = zcopy.empty(1 << 20, np.float32)    # activated
    comm.Allreduce(MPI.IN_PLACE, grad, op=MPI.SUM)
    print(zcopy.stats(comm)["zcopy_calls"])

The module is ctypes over libzcopy: no compiled part. Failures raise
ZcopyError with zcopy's own description of the cause.
"""

import ctypes
import os
import weakref

from mpi4py import MPI

__all__ = ["ZcopyError", "stats", "query", "empty", "library"]

_SONAME = "libzcopy.so.0"


class ZcopyError(RuntimeError):
    """A zcopy call failed; the message is zcopy's description of why."""


class _Stats(ctypes.Structure):
    # MPIX_Zcopy_stats of include/mpix_zcopy.h, field for field. The size
    # travels with every call, so a newer libzcopy never writes past it.
    _fields_ = [
        ("zcopy_calls", ctypes.c_uint64),
        ("fallback_calls", ctypes.c_uint64),
        ("ipc_bytes", ctypes.c_uint64),
        ("ucx_bytes", ctypes.c_uint64),
        ("last_fallback_reason", ctypes.c_char * 64),
        ("inline_calls", ctypes.c_uint64),
        ("ctl_msgs", ctypes.c_uint64),
        ("ctl_bytes", ctypes.c_uint64),
        ("inline_max", ctypes.c_uint64),
    ]


def _load():
    """libzcopy as the process already has it, else from where it was built
    or installed: one copy per process, since the coll and mpool components
    and this module must share one registry of activated memory."""
    candidates = [os.environ.get("ZCOPY_LIBRARY")]
    try:
        from zcopy._library import LIBRARY
        candidates.append(LIBRARY)
    except ImportError:
        pass
    try:  # loaded by the components at MPI_Init
        return ctypes.CDLL(_SONAME, mode=os.RTLD_NOLOAD | os.RTLD_GLOBAL)
    except OSError:
        pass
    errors = []
    for path in filter(None, candidates + [_SONAME]):
        try:
            return ctypes.CDLL(path, mode=os.RTLD_GLOBAL)
        except OSError as e:
            errors.append(str(e))
    raise ZcopyError("cannot load libzcopy: " + "; ".join(errors))


_lib = _load()
_lib.MPIX_Zcopy_get_stats_sized.argtypes = [
    ctypes.c_void_p, ctypes.POINTER(_Stats), ctypes.c_size_t]
_lib.MPIX_Zcopy_query.argtypes = [
    ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
    ctypes.POINTER(ctypes.c_int)]
for _f in (_lib.MPIX_Zcopy_get_stats_sized, _lib.MPIX_Zcopy_query):
    _f.restype = ctypes.c_int

library = _lib._name
"""Path of the libzcopy this module calls."""


def _handle(comm):
    if not isinstance(comm, MPI.Comm):
        raise TypeError("expected an mpi4py communicator, got %s"
                        % type(comm).__name__)
    return ctypes.c_void_p(MPI._handleof(comm))


def _check(rc):
    if rc != MPI.SUCCESS:
        # zcopy's error strings name the call and the precise cause.
        raise ZcopyError(MPI.Get_error_string(rc))


def stats(comm):
    """Counters of @comm since its creation, as a dict with every field of
    MPIX_Zcopy_stats (zeros where zcopy is not enabled on it)."""
    s = _Stats()
    _check(_lib.MPIX_Zcopy_get_stats_sized(_handle(comm), ctypes.byref(s),
                                           ctypes.sizeof(s)))
    out = {name: getattr(s, name) for name, _ in _Stats._fields_}
    out["last_fallback_reason"] = s.last_fallback_reason.decode(
        "utf-8", "replace")
    return out


def query(comm, buffer):
    """True when all of @buffer (any object with the buffer protocol, e.g.
    a numpy array, bytearray, or MPI.memory) lies in activated memory."""
    try:
        mem = MPI.memory.frombuffer(buffer, readonly=True)
    except (TypeError, BufferError) as e:
        raise TypeError("query needs an object with the buffer protocol: %s"
                        % e) from None
    activated = ctypes.c_int(0)
    _check(_lib.MPIX_Zcopy_query(_handle(comm), ctypes.c_void_p(mem.address),
                                 mem.nbytes, ctypes.byref(activated)))
    return bool(activated.value)


def _free(mem):
    if not MPI.Is_finalized():
        MPI.Free_mem(mem)


def empty(shape, dtype=float, comm=MPI.COMM_WORLD):
    """A numpy array in activated memory, uninitialised, like numpy.empty.

    The memory is MPI.Alloc_mem's with mpool_hints=zcopy, and goes back
    with MPI.Free_mem once the array and every view of it are collected.
    Raises ZcopyError when no activated memory could be had (the mpool
    component is not installed, or the pool is out of memory)."""
    import numpy as np

    dtype = np.dtype(dtype)
    count = int(np.prod(shape, dtype=np.int64))
    nbytes = max(count * dtype.itemsize, 1)
    info = MPI.Info.Create()
    try:
        info.Set("mpool_hints", "zcopy")
        mem = MPI.Alloc_mem(nbytes, info)
    finally:
        info.Free()
    if not query(comm, mem):
        MPI.Free_mem(mem)
        raise ZcopyError(
            "MPI.Alloc_mem returned memory that is not activated: is the "
            "mpool/zcopy component installed (ompi_info | grep zcopy)?")

    # Views of a numpy array keep its first non-array base alive, so the
    # memory is handed to numpy through an owner whose collection frees it.
    class _Owner(ctypes.c_char * nbytes):
        pass

    owner = _Owner.from_buffer(mem)
    # Not at interpreter exit: arrays of modules may outlive the finalizers
    # there; MPI_Finalize copes with memory still allocated.
    weakref.finalize(owner, _free, mem).atexit = False
    return np.frombuffer(owner, dtype=dtype, count=count).reshape(shape)
