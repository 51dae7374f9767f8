"""A data-parallel training step, as an AI engineer writes it with mpi4py:
every rank holds the model, trains on its shard of the batch, and the
gradients are summed with one Allreduce per step. The parameters and the
gradient bucket live in activated memory (zcopy.empty), so those
collectives run zero-copy; nothing else in the program knows about zcopy.

    mpirun -np 4 python3 examples/train_data_parallel.py [--steps N] [--check]

The model is a small two-layer perceptron in numpy (tanh hidden layer,
mean squared error) on a synthetic regression task. --check also trains
the same model serially on the whole batch and exits 1 unless the
parameters agree, and unless every collective ran zero-copy.
"""
import argparse
import sys

import numpy as np
from mpi4py import MPI

import zcopy

IN, HIDDEN = 16, 32
BATCH = 4096


class Model:
    """Parameters in one flat vector (a bucket: one collective moves them
    all), with named views for the layers."""

    def __init__(self, flat):
        self.flat = flat
        shapes = [(IN, HIDDEN), (HIDDEN,), (HIDDEN, 1), (1,)]
        views, at = [], 0
        for shape in shapes:
            n = int(np.prod(shape))
            views.append(flat[at:at + n].reshape(shape))
            at += n
        self.w1, self.b1, self.w2, self.b2 = views

    @staticmethod
    def size():
        return IN * HIDDEN + HIDDEN + HIDDEN + 1


def init_params(flat, seed):
    rng = np.random.default_rng(seed)
    m = Model(flat)
    m.w1[:] = rng.normal(0, 1 / np.sqrt(IN), m.w1.shape)
    m.b1[:] = 0
    m.w2[:] = rng.normal(0, 1 / np.sqrt(HIDDEN), m.w2.shape)
    m.b2[:] = 0


def make_batch():
    rng = np.random.default_rng(7)
    x = rng.normal(size=(BATCH, IN))
    y = np.sin(x @ rng.normal(size=(IN, 1))) + 0.1 * x[:, :1]
    return x, y


def gradients(model, x, y, out, total):
    """Writes into @out the gradient of the loss over all @total samples,
    restricted to the samples (x, y): summed over ranks, it is the full
    batch's gradient. Returns this part of the loss."""
    g = Model(out)
    h = np.tanh(x @ model.w1 + model.b1)
    err = h @ model.w2 + model.b2 - y
    dpred = 2 * err / total
    g.w2[:] = h.T @ dpred
    g.b2[:] = dpred.sum(axis=0)
    dh = (dpred @ model.w2.T) * (1 - h * h)
    g.w1[:] = x.T @ dh
    g.b1[:] = dh.sum(axis=0)
    return float((err * err).sum() / total)


def train(comm, steps, lr):
    rank, size = comm.Get_rank(), comm.Get_size()
    params = zcopy.empty(Model.size(), np.float64, comm)
    grads = zcopy.empty(Model.size(), np.float64, comm)
    if rank == 0:
        init_params(params, seed=1)
    comm.Bcast(params, root=0)  # everyone starts from rank 0's model

    x, y = make_batch()
    shard = slice(rank * BATCH // size, (rank + 1) * BATCH // size)
    model = Model(params)
    loss = zcopy.empty(1, np.float64, comm)  # a metric: 8 bytes, inline
    for step in range(steps):
        loss[0] = gradients(model, x[shard], y[shard], grads, BATCH)
        comm.Allreduce(MPI.IN_PLACE, grads, op=MPI.SUM)
        comm.Allreduce(MPI.IN_PLACE, loss, op=MPI.SUM)  # 8 bytes
        params -= lr * grads
        if rank == 0 and (step % 10 == 0 or step == steps - 1):
            print("step %3d  loss %.6f" % (step, loss[0]))
    return params.copy()


def train_serial(steps, lr):
    params = np.empty(Model.size())
    grads = np.empty(Model.size())
    init_params(params, seed=1)
    x, y = make_batch()
    model = Model(params)
    for _ in range(steps):
        gradients(model, x, y, grads, BATCH)
        params -= lr * grads
    return params


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()

    comm = MPI.COMM_WORLD
    before = zcopy.stats(comm)
    params = train(comm, args.steps, args.lr)
    after = zcopy.stats(comm)
    calls = 1 + 2 * args.steps
    zc = after["zcopy_calls"] - before["zcopy_calls"]
    fb = after["fallback_calls"] - before["fallback_calls"]
    ok = True
    if comm.Get_rank() == 0:
        print("zero-copy statistics on rank 0: %d of %d collectives zero-copy"
              " (%d inline), %d fell back%s; %d bytes through peer mappings,"
              " %d through UCX" % (
                  zc, calls, after["inline_calls"] - before["inline_calls"],
                  fb, " (last: %s)" % after["last_fallback_reason"]
                  if fb else "",
                  after["ipc_bytes"] - before["ipc_bytes"],
                  after["ucx_bytes"] - before["ucx_bytes"]))
    if args.check:
        serial = train_serial(args.steps, args.lr)
        err = float(np.max(np.abs(params - serial)))
        ok = err <= 1e-9 * max(1.0, float(np.max(np.abs(serial)))) and \
            zc == calls and fb == 0
        ok = comm.allreduce(ok, op=MPI.LAND)
        if comm.Get_rank() == 0:
            print("check: largest difference from the serial computation "
                  "%.3g; %s" % (err, "results match the serial computation"
                                if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
