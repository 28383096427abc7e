/* jacobi.c: C/MPI reference for jacobi (see jacobi/main.go). Same matrix,
 * row-block decomposition, summation orders, Allgatherv + Allreduce(Max)
 * per iteration, stopping rule and output format, so results match the Go
 * version bitwise.
 *
 * Build: mpicc -O2 -ffp-contract=off -o jacobi jacobi.c
 * Run:   mpirun -np 2 ./jacobi -n 2048 -maxiters 100 -tol 0 [-dump FILE]
 */
#include <mpi.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void block_range(int n, int p, int r, int *start, int *count) {
    int base = n / p, rem = n % p;
    *count = base + (r < rem ? 1 : 0);
    *start = r * base + (r < rem ? r : rem);
}

static void fail(const char *msg) {
    fprintf(stderr, "jacobi: %s\n", msg);
    MPI_Abort(MPI_COMM_WORLD, 1);
}

static int parse_int(const char *s, int *out) {
    char *end;
    long v = strtol(s, &end, 10);
    if (*s == '\0' || *end != '\0' || v < 0 || v > 1000000000L) return -1;
    *out = (int)v;
    return 0;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);

    int n = 1024, maxiters = 1000;
    double tol = 1e-10;
    const char *dump = NULL;
    for (int a = 1; a < argc; a++) {
        const char *f = argv[a];
        if (f[0] == '-' && f[1] == '-') f++; /* accept --flag like Go's flag package */
        if (a + 1 >= argc) fail("missing flag value");
        const char *v = argv[++a];
        int bad = 0;
        if (strcmp(f, "-n") == 0) bad = parse_int(v, &n);
        else if (strcmp(f, "-maxiters") == 0) bad = parse_int(v, &maxiters);
        else if (strcmp(f, "-tol") == 0) {
            char *end;
            tol = strtod(v, &end);
            bad = *v == '\0' || *end != '\0' || isnan(tol);
        } else if (strcmp(f, "-dump") == 0) dump = v;
        else fail("unknown flag");
        if (bad) fail("bad flag value");
    }
    if (n < 1) fail("-n must be >= 1");
    if (size > n) fail("-n is smaller than the number of ranks");

    int start, rows;
    block_range(n, size, rank, &start, &rows);
    int *counts = malloc(size * sizeof *counts), *displs = malloc(size * sizeof *displs);
    double *a = malloc((size_t)rows * n * sizeof *a + 1), *b = malloc((size_t)rows * sizeof *b + 1);
    double *x = calloc(n, sizeof *x), *xnext = calloc(n, sizeof *xnext), *xloc = malloc((size_t)rows * sizeof *xloc + 1);
    if (!counts || !displs || !a || !b || !x || !xnext || !xloc) fail("out of memory");
    for (int r = 0, off = 0; r < size; r++) {
        int s, c;
        block_range(n, size, r, &s, &c);
        counts[r] = c;
        displs[r] = off;
        off += c;
    }
    for (int r = 0; r < rows; r++) {
        int i = start + r;
        double *row = a + (size_t)r * n, s = 0.0;
        for (int j = 0; j < n; j++) {
            if (j == i) continue;
            row[j] = 1.0 / (double)(1 + abs(i - j));
            s += row[j];
        }
        row[i] = 1 + s;
        b[r] = (double)(1 + i % 7);
    }

    int iter = 0;
    double change = 0.0;
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    while (iter < maxiters) {
        for (int r = 0; r < rows; r++) {
            int i = start + r;
            const double *row = a + (size_t)r * n;
            double s = 0.0;
            for (int j = 0; j < i; j++) s += row[j] * x[j];
            for (int j = i + 1; j < n; j++) s += row[j] * x[j];
            xloc[r] = (b[r] - s) / row[i];
        }
        MPI_Allgatherv(xloc, rows, MPI_DOUBLE, xnext, counts, displs, MPI_DOUBLE, MPI_COMM_WORLD);
        double local = 0.0;
        for (int r = 0; r < rows; r++) {
            double d = fabs(xloc[r] - x[start + r]);
            if (d > local) local = d;
        }
        MPI_Allreduce(&local, &change, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        double *t = x;
        x = xnext;
        xnext = t;
        iter++;
        if (change < tol) break;
    }
    MPI_Barrier(MPI_COMM_WORLD);
    double elapsed = MPI_Wtime() - t0;

    if (rank == 0) {
        double sum = 0.0;
        for (int i = 0; i < n; i++) sum += x[i];
        printf("iterations %d\nmaxchange %.3e\nchecksum %.10e\nsec_per_iter %.6e\n",
               iter, change, sum, iter > 0 ? elapsed / iter : 0.0);
        if (dump) {
            FILE *fp = fopen(dump, "wb");
            if (!fp) fail("cannot create dump file");
            for (int k = 0; k < n; k++) {
                uint64_t bits;
                unsigned char le[8];
                memcpy(&bits, &x[k], 8);
                for (int q = 0; q < 8; q++) le[q] = (unsigned char)(bits >> (8 * q));
                if (fwrite(le, 1, 8, fp) != 8) fail("writing dump failed");
            }
            if (fclose(fp) != 0) fail("writing dump failed");
        }
    }
    free(counts); free(displs); free(a); free(b); free(x); free(xnext); free(xloc);
    MPI_Finalize();
    return 0;
}
