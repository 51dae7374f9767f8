/*
 * zcopy_link: how fast the link between two servers moves bytes both ways
 * at once with nothing but TCP sockets, no MPI and no UCX: the ceiling of
 * any collective whose bytes must cross it. On the emulated cluster the
 * link is veth inside one kernel, and its cost is the servers' own CPUs
 * copying into and out of socket buffers (bench/README.md, "The link").
 *
 *   zcopy_link listen  PORT          STREAMS BYTES REPS   (on one server)
 *   zcopy_link connect HOST PORT     STREAMS BYTES REPS   (on the other)
 *
 * Each side sends BYTES, split over STREAMS connections, while it receives
 * as many; a rep starts after a one-byte exchange and ends when both
 * directions are done on this side. The connecting side prints the median
 * and fastest rep and the rate each way.
 */
#define _GNU_SOURCE
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_STREAMS 16

typedef struct {
    int fd;
    char *buf;
    size_t len;
    bool sending;
    bool failed;
} stream_io_t;

static double now_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

/* Moves the whole buffer one way on one stream (a thread per direction). */
static void *transfer(void *arg)
{
    stream_io_t *io = arg;

    for (size_t done = 0; done < io->len;) {
        ssize_t n = io->sending
                        ? send(io->fd, io->buf + done, io->len - done, 0)
                        : recv(io->fd, io->buf + done, io->len - done, 0);

        if (n <= 0) {
            io->failed = true;
            break;
        }
        done += (size_t)n;
    }
    return NULL;
}

static int open_streams(bool listening, const char *host, const char *port,
                        int n, int *fds)
{
    struct addrinfo hints = { .ai_family = AF_INET,
                              .ai_socktype = SOCK_STREAM,
                              .ai_flags = listening ? AI_PASSIVE : 0 };
    struct addrinfo *ai;
    const int one = 1;
    int lfd = -1;

    if (getaddrinfo(host, port, &hints, &ai) != 0)
        return -1;
    if (listening) {
        lfd = socket(AF_INET, SOCK_STREAM, 0);
        setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (bind(lfd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(lfd, n) != 0)
            lfd = -1;
    }
    for (int i = 0; i < n; i++) {
        if (listening) {
            fds[i] = lfd < 0 ? -1 : accept(lfd, NULL, NULL);
        } else {
            /* The listener may not be up yet: try for about 10 s. */
            fds[i] = -1;
            for (int t = 0; t < 200 && fds[i] < 0; t++) {
                fds[i] = socket(AF_INET, SOCK_STREAM, 0);
                if (connect(fds[i], ai->ai_addr, ai->ai_addrlen) != 0) {
                    close(fds[i]);
                    fds[i] = -1;
                    usleep(50000);
                }
            }
        }
        if (fds[i] < 0)
            break;
        setsockopt(fds[i], IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    }
    if (lfd >= 0)
        close(lfd);
    freeaddrinfo(ai);
    for (int i = 0; i < n; i++)
        if (fds[i] < 0)
            return -1;
    return 0;
}

/* One rep: both directions on every stream at once. */
static bool exchange(int n, int *fds, char *sbuf, char *rbuf, size_t per)
{
    stream_io_t out[MAX_STREAMS], in[MAX_STREAMS];
    pthread_t th[2 * MAX_STREAMS];
    bool ok = true;

    for (int i = 0; i < n; i++) {
        out[i] = (stream_io_t){ fds[i], sbuf + i * per, per, true, false };
        in[i] = (stream_io_t){ fds[i], rbuf + i * per, per, false, false };
        pthread_create(&th[2 * i], NULL, transfer, &out[i]);
        pthread_create(&th[2 * i + 1], NULL, transfer, &in[i]);
    }
    for (int i = 0; i < 2 * n; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < n; i++)
        ok = ok && !out[i].failed && !in[i].failed;
    return ok;
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    const bool listening = argc == 6 && !strcmp(argv[1], "listen");
    const int base = listening ? 3 : 4;
    int fds[MAX_STREAMS], n, reps;
    size_t bytes, per;
    char *sbuf, *rbuf, token = 'x';
    double *t;

    if (!listening && !(argc == 7 && !strcmp(argv[1], "connect"))) {
        fprintf(stderr, "usage: %s listen PORT STREAMS BYTES REPS\n"
                        "       %s connect HOST PORT STREAMS BYTES REPS\n",
                argv[0], argv[0]);
        return 2;
    }
    n = atoi(argv[base]);
    bytes = strtoull(argv[base + 1], NULL, 0);
    reps = atoi(argv[base + 2]);
    if (n < 1 || n > MAX_STREAMS || reps < 1 || bytes < (size_t)n) {
        fprintf(stderr, "zcopy_link: 1 to %d streams, BYTES >= STREAMS, "
                        "REPS >= 1\n", MAX_STREAMS);
        return 2;
    }
    per = bytes / n;
    sbuf = malloc(per * n);
    rbuf = malloc(per * n);
    t = malloc(sizeof(*t) * reps);
    if (sbuf == NULL || rbuf == NULL || t == NULL)
        return 1;
    memset(sbuf, 1, per * n); /* pages made before the first rep */
    memset(rbuf, 0, per * n);
    if (open_streams(listening, listening ? NULL : argv[2],
                     argv[listening ? 2 : 3], n, fds) != 0) {
        perror("zcopy_link: connection");
        return 1;
    }
    for (int r = 0; r < reps; r++) {
        double t0;

        if (send(fds[0], &token, 1, 0) != 1 || recv(fds[0], &token, 1, 0) != 1)
            return 1;
        t0 = now_us();
        if (!exchange(n, fds, sbuf, rbuf, per))
            return 1;
        t[r] = now_us() - t0;
    }
    qsort(t, reps, sizeof(*t), cmp_double);
    if (!listening)
        printf("%zu bytes each way over %d stream(s): median %.0f us, "
               "fastest %.0f us, %.2f GB/s each way (median)\n",
               per * n, n, t[reps / 2], t[0], per * n / t[reps / 2] / 1e3);
    for (int i = 0; i < n; i++)
        close(fds[i]);
    free(t);
    free(rbuf);
    free(sbuf);
    return 0;
}
