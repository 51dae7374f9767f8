/*
 * zcopy_progress: what zcopy's presence costs the MPI calls it does not
 * run, in one job: the time of one pass of Open MPI's progress engine
 * (MPI_Iprobe that finds nothing) and half the round trip of an 8 B
 * MPI_Send/MPI_Recv ping-pong between ranks 0 and 1, in microseconds; and
 * what the collectives of a job on plain memory pay for zcopy's set-up:
 * the job's first collective, and a communicator's life (dup, one 4 B
 * allreduce, free).
 *
 *   mpirun -np 2 zcopy_progress [PROBES [PINGS [COMMS]]]  [200000 20000 200]
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

/* A communicator made, used once and freed, the way libraries make
 * theirs: zcopy sets each up at its first collective. 0 when an allreduce
 * came out wrong. */
static double comm_life_us(int size, long comms)
{
    int one = 1, sum;
    double t;

    MPI_Barrier(MPI_COMM_WORLD);
    t = MPI_Wtime();
    for (long i = 0; i < comms; i++) {
        MPI_Comm c;

        MPI_Comm_dup(MPI_COMM_WORLD, &c);
        MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, c);
        MPI_Comm_free(&c);
        if (sum != size)
            return 0.0;
    }
    return (MPI_Wtime() - t) / (double)comms * 1e6;
}

/* Every rank past MPI_Init before the first collective is timed, without
 * a collective (which would be that first one): all report to rank 0,
 * which answers all. */
static void sync_by_messages(int rank, int size)
{
    if (rank != 0) {
        MPI_Send(NULL, 0, MPI_BYTE, 0, 2, MPI_COMM_WORLD);
        MPI_Recv(NULL, 0, MPI_BYTE, 0, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        return;
    }
    for (int r = 1; r < size; r++)
        MPI_Recv(NULL, 0, MPI_BYTE, r, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    for (int r = 1; r < size; r++)
        MPI_Send(NULL, 0, MPI_BYTE, r, 2, MPI_COMM_WORLD);
}

int main(int argc, char **argv)
{
    const long probes = arg_or(argc, argv, 1, 200000);
    const long pings = arg_or(argc, argv, 2, 20000);
    const long comms = arg_or(argc, argv, 3, 200);
    int rank, size, one = 1, sum = 0;
    double probe, ping, first, life;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size < 2) {
        if (rank == 0)
            fprintf(stderr, "zcopy_progress: needs 2 ranks or more\n");
        MPI_Finalize();
        return 1;
    }
    sync_by_messages(rank, size);
    first = MPI_Wtime();
    MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    first = (MPI_Wtime() - first) * 1e6;
    probe = probe_us(probes);
    ping = pingpong_us(rank, pings);
    life = comm_life_us(size, comms);
    if (rank <= 1)
        printf("rank %d: progress pass %.3f us, 8 B ping-pong half round "
               "trip %.2f us, first collective %.0f us, communicator "
               "life %.1f us\n", rank, probe, ping, first, life);
    else
        printf("rank %d: progress pass %.3f us, first collective %.0f us, "
               "communicator life %.1f us\n", rank, probe, first, life);
    MPI_Finalize();
    return sum == size && life > 0.0 ? 0 : 1;
}
