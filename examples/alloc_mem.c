/*
 * Zero-copy collectives in a program that uses only standard MPI: buffers
 * from MPI_Alloc_mem, named for the zcopy pool by the info key mpool_hints
 * (or, with MPI_INFO_NULL, by running under
 * --mca mpool_base_default_hints zcopy). It includes no zcopy header and
 * links no zcopy library; the MPI tools interface (MPI_T) shows which path
 * the collectives took.
 *
 *   mpirun -np 2 ./zcopy_alloc_mem
 */
#include <mpi.h>
#include <stdio.h>
#include <string.h>

#define COUNT (1 << 20) /* 4 MiB of float per buffer */

/* The component's counter of zero-copy collectives on a communicator,
 * through MPI_T. A counter's handle counts from when it was made. */
typedef struct {
    MPI_T_pvar_session session;
    MPI_T_pvar_handle handle;
    int loaded;
} counter_t;

static void counter_open(counter_t *c, MPI_Comm comm)
{
    int index, count;

    c->loaded = MPI_T_pvar_get_index("coll_zcopy_zcopy_calls",
                                     MPI_T_PVAR_CLASS_COUNTER,
                                     &index) == MPI_SUCCESS;
    if (!c->loaded)
        return;
    MPI_T_pvar_session_create(&c->session);
    MPI_T_pvar_handle_alloc(c->session, index, &comm, &c->handle, &count);
}

static unsigned long long counter_close(counter_t *c)
{
    unsigned long long value = 0;

    if (!c->loaded)
        return 0;
    MPI_T_pvar_read(c->session, c->handle, &value);
    MPI_T_pvar_handle_free(c->session, &c->handle);
    MPI_T_pvar_session_free(&c->session);
    return value;
}

int main(int argc, char **argv)
{
    float *grad, *params;
    unsigned long long zero_copy;
    counter_t counter;
    int rank, size, provided, errors = 0;
    MPI_Info info;

    MPI_Init(&argc, &argv);
    MPI_T_init_thread(MPI_THREAD_SINGLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);

    MPI_Info_create(&info);
    MPI_Info_set(info, "mpool_hints", "zcopy");
    MPI_Alloc_mem(COUNT * sizeof(float), info, &grad);
    MPI_Alloc_mem(COUNT * sizeof(float), info, &params);
    MPI_Info_free(&info);

    counter_open(&counter, MPI_COMM_WORLD);
    for (int i = 0; i < COUNT; i++)
        params[i] = rank == 0 ? (float)(i % 1000) : -1.0f;
    MPI_Bcast(params, COUNT, MPI_FLOAT, 0, MPI_COMM_WORLD);
    for (int i = 0; i < COUNT; i++)
        grad[i] = (float)(rank + 1);
    MPI_Allreduce(MPI_IN_PLACE, grad, COUNT, MPI_FLOAT, MPI_SUM,
                  MPI_COMM_WORLD);
    zero_copy = counter_close(&counter);

    for (int i = 0; i < COUNT; i++)
        errors += params[i] != (float)(i % 1000) ||
                  grad[i] != (float)(size * (size + 1) / 2);
    MPI_Allreduce(MPI_IN_PLACE, &errors, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) {
        if (!counter.loaded)
            printf("bcast and allreduce: %s; coll/zcopy is not loaded\n",
                   errors ? "WRONG RESULTS" : "results correct");
        else
            printf("bcast and allreduce: %s; %llu of 2 ran zero-copy\n",
                   errors ? "WRONG RESULTS" : "results correct", zero_copy);
    }

    MPI_Free_mem(params);
    MPI_Free_mem(grad);
    MPI_T_finalize();
    MPI_Finalize();
    return errors != 0;
}
