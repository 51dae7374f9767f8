/*
 * zcopy_handoff: how long one cache line takes to go from one CPU to
 * another and back, halved, in nanoseconds; compare.sh prints it before
 * every run.
 *
 * Every small collective inside a server, zcopy's and stock's shared-memory
 * ones alike, is a few such handoffs, so their times follow it. On a
 * virtual machine it is not a constant: the host may run the two vCPUs on
 * cores that share a cache or on cores that do not, and move them while a
 * benchmark runs (an AMD EPYC VM here went from about 60 ns to about
 * 260 ns and back within a minute, and the 8-byte collectives of every
 * component with it). A comparison whose runs saw different handoffs
 * compares the host's moods, not the components.
 *
 *   zcopy_handoff [CPU_A CPU_B]   (default: the first two CPUs allowed)
 *
 * Prints the nanoseconds, or "-" where fewer than two CPUs are allowed.
 * Two processes, each bound to its CPU, pass a counter back and forth
 * through one line of a fresh shared page.
 */
#define _GNU_SOURCE
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define ROUNDS 100000L

static int bind_to(int cpu)
{
    cpu_set_t set;

    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    return sched_setaffinity(0, sizeof(set), &set);
}

/* The first two CPUs this process may run on; false if it has fewer. */
static int first_two(int *a, int *b)
{
    cpu_set_t set;
    int found = 0;

    if (sched_getaffinity(0, sizeof(set), &set) != 0)
        return 0;
    for (int c = 0; c < CPU_SETSIZE && found < 2; c++) {
        if (!CPU_ISSET(c, &set))
            continue;
        *(found == 0 ? a : b) = c;
        found++;
    }
    return found == 2;
}

static double now_ns(void)
{
    struct timespec t;

    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

int main(int argc, char **argv)
{
    _Atomic long *line;
    int cpu_a, cpu_b, status;
    double start;
    pid_t child;

    if (argc == 3) {
        cpu_a = atoi(argv[1]);
        cpu_b = atoi(argv[2]);
    } else if (argc != 1 || !first_two(&cpu_a, &cpu_b)) {
        puts("-");
        return argc == 1 ? 0 : 2;
    }
    if (cpu_a == cpu_b) { /* one CPU would hand over once per time slice */
        puts("-");
        return 2;
    }
    line = mmap(NULL, 4096, PROT_READ | PROT_WRITE,
                MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (line == MAP_FAILED)
        return 1;
    atomic_store(line, 0);
    child = fork();
    if (child < 0)
        return 1;
    if (child == 0) {
        /* Unbound if it cannot be bound: a slower answer, never a parent
         * waiting forever. */
        (void)bind_to(cpu_b);
        /* Odd values are the parent's, even ones the child's answers. */
        for (long i = 1; i <= ROUNDS; i++) {
            while (atomic_load_explicit(line, memory_order_acquire) !=
                   2 * i - 1)
                ;
            atomic_store_explicit(line, 2 * i, memory_order_release);
        }
        _exit(0);
    }
    if (bind_to(cpu_a) != 0) {
        kill(child, SIGKILL);
        waitpid(child, NULL, 0);
        puts("-");
        return 2;
    }
    start = now_ns();
    for (long i = 1; i <= ROUNDS; i++) {
        atomic_store_explicit(line, 2 * i - 1, memory_order_release);
        while (atomic_load_explicit(line, memory_order_acquire) != 2 * i)
            ;
    }
    printf("%.0f\n", (now_ns() - start) / (2.0 * ROUNDS));
    waitpid(child, &status, 0);
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}
