/* heat2d.c: C/MPI reference for heat2d (see heat2d/main.go). Same grid,
 * boundary values, row-block decomposition, halo exchange, stencil
 * expression order, reductions and output format, so checksums and dumps
 * match the Go version bitwise.
 *
 * Build: mpicc -O2 -ffp-contract=off -o heat2d heat2d.c
 * Run:   mpirun -np 4 ./heat2d -n 256 -iters 100 [-residual-every K] [-dump FILE]
 */
#include <mpi.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { TAG_TO_UP = 1, TAG_TO_DOWN = 2 };

static void block_range(int n, int p, int r, int *start, int *count) {
    int base = n / p, rem = n % p;
    *count = base + (r < rem ? 1 : 0);
    *start = r * base + (r < rem ? r : rem);
}

static void step(double *restrict dst, const double *restrict src, int rows, int n) {
    int w = n + 2;
    for (int i = 1; i <= rows; i++) {
        const double *up = src + (size_t)(i - 1) * w, *mid = src + (size_t)i * w,
                     *dn = src + (size_t)(i + 1) * w;
        double *out = dst + (size_t)i * w;
        for (int j = 1; j <= n; j++)
            out[j] = 0.25 * (up[j] + dn[j] + mid[j - 1] + mid[j + 1]);
    }
}

static double max_change(const double *a, const double *b, int rows, int n) {
    int w = n + 2;
    double m = 0.0;
    for (int i = 1; i <= rows; i++)
        for (int j = 1; j <= n; j++) {
            double d = fabs(a[(size_t)i * w + j] - b[(size_t)i * w + j]);
            if (d > m) m = d;
        }
    return m;
}

static int parse_int(const char *s, int *out) {
    char *end;
    long v = strtol(s, &end, 10);
    if (*s == '\0' || *end != '\0' || v < 0 || v > 1000000000L) return -1;
    *out = (int)v;
    return 0;
}

static void fail(const char *msg) {
    fprintf(stderr, "heat2d: %s\n", msg);
    MPI_Abort(MPI_COMM_WORLD, 1);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);

    int n = 256, iters = 100, residual_every = 0;
    const char *dump = NULL;
    for (int a = 1; a < argc; a++) {
        const char *f = argv[a];
        if (f[0] == '-' && f[1] == '-') f++; /* accept --flag like Go's flag package */
        if (a + 1 >= argc) fail("missing flag value");
        const char *v = argv[++a];
        int bad = 0;
        if (strcmp(f, "-n") == 0) bad = parse_int(v, &n);
        else if (strcmp(f, "-iters") == 0) bad = parse_int(v, &iters);
        else if (strcmp(f, "-residual-every") == 0) bad = parse_int(v, &residual_every);
        else if (strcmp(f, "-dump") == 0) dump = v;
        else fail("unknown flag");
        if (bad) fail("bad flag value");
    }
    if (n < 1) fail("-n must be >= 1");
    if (size > n) fail("-n is smaller than the number of ranks");

    int start, rows;
    block_range(n, size, rank, &start, &rows);
    int up = rank == 0 ? MPI_PROC_NULL : rank - 1;
    int down = rank == size - 1 ? MPI_PROC_NULL : rank + 1;
    int w = n + 2;
    size_t cells = (size_t)(rows + 2) * w;
    double *u = calloc(cells, sizeof *u), *unew = calloc(cells, sizeof *unew);
    if (!u || !unew) fail("out of memory");
    if (rank == 0)
        for (int j = 0; j < w; j++) u[j] = unew[j] = 100.0;

    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int iter = 0; iter < iters;) {
        MPI_Sendrecv(u + w + 1, n, MPI_DOUBLE, up, TAG_TO_UP,
                     u + (size_t)(rows + 1) * w + 1, n, MPI_DOUBLE, down, TAG_TO_UP,
                     MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Sendrecv(u + (size_t)rows * w + 1, n, MPI_DOUBLE, down, TAG_TO_DOWN,
                     u + 1, n, MPI_DOUBLE, up, TAG_TO_DOWN, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        step(unew, u, rows, n);
        iter++;
        if (residual_every > 0 && iter % residual_every == 0) {
            double local = max_change(unew, u, rows, n), global;
            MPI_Allreduce(&local, &global, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
            if (rank == 0) printf("residual %d %.6e\n", iter, global);
        }
        double *t = u;
        u = unew;
        unew = t;
    }
    MPI_Barrier(MPI_COMM_WORLD);
    double elapsed = MPI_Wtime() - t0;

    double local = 0.0, total = 0.0;
    for (int i = 1; i <= rows; i++)
        for (int j = 1; j <= n; j++) local += u[(size_t)i * w + j];
    MPI_Reduce(&local, &total, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);

    if (dump) {
        double *send = malloc((size_t)rows * n * sizeof *send + 1);
        int *counts = malloc(size * sizeof *counts), *displs = malloc(size * sizeof *displs);
        double *all = rank == 0 ? malloc((size_t)n * n * sizeof *all) : NULL;
        if (!send || !counts || !displs || (rank == 0 && !all)) fail("out of memory");
        for (int i = 1; i <= rows; i++) memcpy(send + (size_t)(i - 1) * n, u + (size_t)i * w + 1, n * sizeof *send);
        for (int r = 0, off = 0; r < size; r++) {
            int s, c;
            block_range(n, size, r, &s, &c);
            counts[r] = c * n;
            displs[r] = off;
            off += c * n;
        }
        MPI_Gatherv(send, rows * n, MPI_DOUBLE, all, counts, displs, MPI_DOUBLE, 0, MPI_COMM_WORLD);
        if (rank == 0) {
            FILE *fp = fopen(dump, "wb");
            if (!fp) fail("cannot create dump file");
            for (size_t k = 0; k < (size_t)n * n; k++) {
                uint64_t bits;
                unsigned char le[8];
                memcpy(&bits, &all[k], 8);
                for (int b = 0; b < 8; b++) le[b] = (unsigned char)(bits >> (8 * b));
                if (fwrite(le, 1, 8, fp) != 8) fail("writing dump failed");
            }
            if (fclose(fp) != 0) fail("writing dump failed");
        }
        free(send);
        free(counts);
        free(displs);
        free(all);
    }
    if (rank == 0) {
        printf("checksum %.10e\n", total);
        printf("sec_per_iter %.6e\n", iters > 0 ? elapsed / iters : 0.0);
    }
    free(u);
    free(unew);
    MPI_Finalize();
    return 0;
}
