/*
 * zcopy_progress: what zcopy's presence costs the MPI calls it does not
 * run, in one job: the time of one pass of Open MPI's progress engine
 * (MPI_Iprobe that finds nothing) and half the round trip of an 8 B
 * MPI_Send/MPI_Recv ping-pong between ranks 0 and 1, in microseconds.
 *
 *   mpirun -np 2 zcopy_progress [PROBES [PINGS]]   [200000 20000]
 *
 * Run it with zcopy and with `--mca coll ^zcopy`, interleaved. One
 * allreduce on MPI_COMM_WORLD comes first, so that zcopy has set the
 * communicator up (and started UCX, where it spans servers) as a job that
 * uses collectives would have. Every MPI call of a job runs the engine's
 * progress loop, and zcopy adds a callback to it once it has peers to
 * serve: the probes time that loop, the ping-pong what it does to the
 * latency of point-to-point messages. Prints one line per rank.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static long arg_or(int argc, char **argv, int i, long dflt)
{
    long v;

    if (argc <= i)
        return dflt;
    v = strtol(argv[i], NULL, 10);
    return v > 0 ? v : dflt;
}

static double probe_us(long probes)
{
    double t = MPI_Wtime();
    int flag;

    for (long i = 0; i < probes; i++)
        MPI_Iprobe(MPI_ANY_SOURCE, 99, MPI_COMM_WORLD, &flag,
                   MPI_STATUS_IGNORE);
    return (MPI_Wtime() - t) / (double)probes * 1e6;
}

static double pingpong_us(int rank, long pings)
{
    const int peer = rank == 0 ? 1 : 0;
    char byte[8] = { 0 };
    double t;

    MPI_Barrier(MPI_COMM_WORLD);
    if (rank > 1)
        return 0.0;
    t = MPI_Wtime();
    for (long i = 0; i < pings; i++) {
        if (rank == 0) {
            MPI_Send(byte, 8, MPI_BYTE, peer, 1, MPI_COMM_WORLD);
            MPI_Recv(byte, 8, MPI_BYTE, peer, 1, MPI_COMM_WORLD,
                     MPI_STATUS_IGNORE);
        } else {
            MPI_Recv(byte, 8, MPI_BYTE, peer, 1, MPI_COMM_WORLD,
                     MPI_STATUS_IGNORE);
            MPI_Send(byte, 8, MPI_BYTE, peer, 1, MPI_COMM_WORLD);
        }
    }
    return (MPI_Wtime() - t) / (double)pings / 2.0 * 1e6;
}

int main(int argc, char **argv)
{
    const long probes = arg_or(argc, argv, 1, 200000);
    const long pings = arg_or(argc, argv, 2, 20000);
    int rank, size, one = 1, sum = 0;
    double probe, ping;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size < 2) {
        if (rank == 0)
            fprintf(stderr, "zcopy_progress: needs 2 ranks or more\n");
        MPI_Finalize();
        return 1;
    }
    MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    probe = probe_us(probes);
    ping = pingpong_us(rank, pings);
    if (rank <= 1)
        printf("rank %d: progress pass %.3f us, 8 B ping-pong half round "
               "trip %.2f us\n", rank, probe, ping);
    else
        printf("rank %d: progress pass %.3f us\n", rank, probe);
    MPI_Finalize();
    return sum == size ? 0 : 1;
}
