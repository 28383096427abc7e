/* allreduce.c: C/MPI reference for bench/allreduce (same element counts,
 * iteration counts, warm-up, result check and output format).
 *
 * Build: mpicc -O2 -o allreduce allreduce.c
 * Run:   mpirun -np 4 ./allreduce [-max 262144] [-maxiters 2000]
 * For profiling, as bench/allreduce: -min N skips the counts below N and
 * -miniters K raises the call count of every count to at least K.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void fail(const char *msg) {
    fprintf(stderr, "allreduce: %s\n", msg);
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

/* Same rule as iterations() in bench/allreduce/main.go. */
static void iterations(int elems, int maxiters, int *iters, int *warmup) {
    int it = (1 << 20) / elems;
    it = imax(imax(imin(it, maxiters), imin(20, maxiters)), 1);
    *iters = it;
    *warmup = imax(it / 10, 2);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int maxelems = 262144, maxiters = 2000, minelems = 1, miniters = 0;
    for (int a = 1; a < argc; a++) {
        const char *f = argv[a];
        if (f[0] == '-' && f[1] == '-') f++;
        if (a + 1 >= argc) fail("missing flag value");
        const char *v = argv[++a];
        int bad = 0;
        if (strcmp(f, "-max") == 0) bad = parse_int(v, &maxelems);
        else if (strcmp(f, "-maxiters") == 0) bad = parse_int(v, &maxiters);
        else if (strcmp(f, "-min") == 0) bad = parse_int(v, &minelems);
        else if (strcmp(f, "-miniters") == 0) bad = parse_int(v, &miniters);
        else fail("unknown flag");
        if (bad) fail("bad flag value");
    }
    if (maxelems < 1 || maxiters < 1) fail("-max and -maxiters must be >= 1");
    double *send = malloc((size_t)maxelems * sizeof *send), *recv = malloc((size_t)maxelems * sizeof *recv);
    if (!send || !recv) fail("out of memory");
    for (int i = 0; i < maxelems; i++) send[i] = (double)(rank + 1);
    double want = (double)(size * (size + 1) / 2); /* exact in any reduction order */
    if (rank == 0) printf("# elements latency_us\n");
    for (long n = 1; n <= maxelems; n *= 8) {
        if (n < minelems) continue;
        int iters, warmup;
        iterations((int)n, maxiters, &iters, &warmup);
        iters = imax(iters, miniters);
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = 0;
        for (int i = 0; i < warmup + iters; i++) {
            if (i == warmup) t0 = MPI_Wtime();
            MPI_Allreduce(send, recv, (int)n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        }
        double elapsed = MPI_Wtime() - t0;
        for (long i = 0; i < n; i++)
            if (recv[i] != want) fail("wrong allreduce result");
        if (rank == 0) printf("%ld %.3f\n", n, elapsed / iters * 1e6);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    free(send);
    free(recv);
    MPI_Finalize();
    return 0;
}
