/* pingpong.c: C/MPI reference for bench/pingpong (same sizes, iteration
 * counts, warm-up and output format).
 *
 * Build: mpicc -O2 -o pingpong pingpong.c
 * Run:   mpirun -np 2 ./pingpong [-max 4194304] [-maxiters 10000]
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { TAG = 7 };

static void fail(const char *msg) {
    fprintf(stderr, "pingpong: %s\n", msg);
    MPI_Abort(MPI_COMM_WORLD, 1);
}

static int parse_int(const char *s, int *out) {
    char *end;
    long v = strtol(s, &end, 10);
    if (*s == '\0' || *end != '\0' || v < 0 || v > 1000000000L) return -1;
    *out = (int)v;
    return 0;
}

static int imin(int a, int b) { return a < b ? a : b; }
static int imax(int a, int b) { return a > b ? a : b; }

/* Same rule as iterations() in bench/pingpong/main.go. */
static void iterations(int size, int maxiters, int *iters, int *warmup) {
    int it = (64 << 20) / imax(size, 1);
    it = imax(imax(imin(it, maxiters), imin(20, maxiters)), 1);
    *iters = it;
    *warmup = imax(it / 10, 2);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, nranks;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    int maxbytes = 4 << 20, maxiters = 10000;
    for (int a = 1; a < argc; a++) {
        const char *f = argv[a];
        if (f[0] == '-' && f[1] == '-') f++;
        if (a + 1 >= argc) fail("missing flag value");
        const char *v = argv[++a];
        int bad = 0;
        if (strcmp(f, "-max") == 0) bad = parse_int(v, &maxbytes);
        else if (strcmp(f, "-maxiters") == 0) bad = parse_int(v, &maxiters);
        else fail("unknown flag");
        if (bad) fail("bad flag value");
    }
    if (maxiters < 1) fail("-maxiters must be >= 1");
    if (nranks < 2) fail("needs at least 2 ranks");
    unsigned char *buf = malloc((size_t)maxbytes + 1);
    if (!buf) fail("out of memory");
    for (int i = 0; i < maxbytes; i++) buf[i] = (unsigned char)i;
    if (rank == 0) printf("# bytes latency_us bandwidth_MBps\n");
    for (long size = 0; size <= maxbytes; size = size == 0 ? 1 : size * 4) {
        int iters, warmup;
        iterations((int)size, maxiters, &iters, &warmup);
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = 0;
        for (int i = 0; i < warmup + iters; i++) {
            if (i == warmup) t0 = MPI_Wtime();
            if (rank == 0) {
                MPI_Send(buf, (int)size, MPI_BYTE, 1, TAG, MPI_COMM_WORLD);
                MPI_Recv(buf, (int)size, MPI_BYTE, 1, TAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            } else if (rank == 1) {
                MPI_Recv(buf, (int)size, MPI_BYTE, 0, TAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                MPI_Send(buf, (int)size, MPI_BYTE, 0, TAG, MPI_COMM_WORLD);
            }
        }
        if (rank == 0) {
            double lat_us = (MPI_Wtime() - t0) / (2.0 * iters) * 1e6;
            printf("%ld %.3f %.3f\n", size, lat_us, size > 0 ? (double)size / lat_us : 0.0);
        }
    }
    MPI_Barrier(MPI_COMM_WORLD);
    free(buf);
    MPI_Finalize();
    return 0;
}
