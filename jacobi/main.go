// Command jacobi solves a dense, diagonally dominant linear system A x = b
// with Jacobi iterations, distributing the rows of A over MPI ranks.
//
//	A[i][j] = 1/(1+|i-j|)                   for i != j
//	A[i][i] = 1 + sum of the row's other entries
//	b[i]    = 1 + (i % 7),  x0 = 0
//
// Each iteration every rank updates its rows from the full x,
//
//	x'_i = (b_i - sum_{j != i} A_ij x_j) / A_ii   (j in increasing order),
//
// with the full x gathered everywhere (Allgatherv) at the start of the
// iteration, and the largest local change is reduced with Max. The iteration stops once that change is below
// -tol (counting that iteration) or after -maxiters iterations. Results are
// bitwise independent of the number of ranks and match bench/c/jacobi.c.
//
// Usage:
//
//	mpirun -np 2 jacobi -n 2048 -maxiters 100 -tol 1e-10 [-dump FILE]
//
// Rank 0 prints "iterations %d", "maxchange %.3e", "checksum %.10e" and
// "sec_per_iter %.6e".
//
// Checkpointing and restart go through package pcm and are configured by the
// environment (see pcm): MPIOS_CKPT_EVERY=K checkpoints x (a pcm.Block, each
// rank saving its rows), the iteration counter and the last change every K
// iterations, and MPIOS_RESTART=JOB resumes from JOB's newest valid
// checkpoint, on the same number of ranks or another, bitwise identically to
// an uninterrupted run. The hidden flag -crash-after N (for tests of restart)
// makes rank 1 (rank 0 if alone) exit with status 1 right after iteration N.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"time"

	"github.com/mpios/mpios/internal/solverkit"
	"github.com/mpios/mpios/mpi"
	"github.com/mpios/mpios/pcm"
)

type config struct {
	n          int
	maxIters   int
	tol        float64
	dump       string
	crashAfter int           // test only: rank 1 exits after this iteration (0: never)
	pace       time.Duration // test only: sleep this long per iteration
}

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "jacobi:", err)
		os.Exit(1)
	}
}

func parseFlags(args []string) (config, error) {
	var cfg config
	fs := flag.NewFlagSet("jacobi", flag.ContinueOnError)
	fs.IntVar(&cfg.n, "n", 1024, "system size (number of unknowns)")
	fs.IntVar(&cfg.maxIters, "maxiters", 1000, "maximum number of iterations")
	fs.Float64Var(&cfg.tol, "tol", 1e-10, "stop once the largest change of x in an iteration is below this")
	fs.StringVar(&cfg.dump, "dump", "", "rank 0 writes the final x here (raw little-endian float64)")
	fs.IntVar(&cfg.crashAfter, solverkit.CrashFlag, 0, "")
	fs.DurationVar(&cfg.pace, solverkit.PaceFlag, 0, "")
	fs.Usage = func() { solverkit.Usage(fs) }
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	switch {
	case fs.NArg() != 0:
		return cfg, fmt.Errorf("unexpected arguments: %q", fs.Args())
	case cfg.n < 1:
		return cfg, fmt.Errorf("-n must be >= 1, got %d", cfg.n)
	case cfg.maxIters < 0:
		return cfg, fmt.Errorf("-maxiters must be >= 0, got %d", cfg.maxIters)
	case math.IsNaN(cfg.tol):
		return cfg, errors.New("-tol must be a number")
	case cfg.crashAfter < 0:
		return cfg, fmt.Errorf("-%s must be >= 0, got %d", solverkit.CrashFlag, cfg.crashAfter)
	}
	return cfg, nil
}

// offDiag is A[i][j] for i != j.
func offDiag(i, j int) float64 {
	d := i - j
	if d < 0 {
		d = -d
	}
	return 1.0 / float64(1+d)
}

// buildRows returns rows start..start+count-1 of A (count x n, row-major),
// with the diagonal computed as 1 + the sum of the row's other entries taken
// in increasing column order, and the matching slice of b.
func buildRows(start, count, n int) (a, b []float64) {
	a = make([]float64, count*n)
	b = make([]float64, count)
	for r := range count {
		i := start + r
		row := a[r*n : (r+1)*n]
		s := 0.0
		for j := range n {
			if j != i {
				row[j] = offDiag(i, j)
				s += row[j]
			}
		}
		row[i] = 1 + s
		b[r] = float64(1 + i%7)
	}
	return a, b
}

// sweep computes the Jacobi update of rows start..start+len(xloc)-1 from the
// full vector x into xloc, given those rows of A (row-major, n wide) and b.
//
// A row's sum is one chain of dependent additions (j = 0, 1, ..., n-1
// skipping i, in that order), so a row at a time runs at the latency of one
// addition per element. sweep4 interleaves four rows, four independent
// chains that each keep their own order, so the results are bitwise those
// of one row at a time.
func sweep(xloc, a, b, x []float64, start int) {
	n := len(x)
	r := 0
	for ; r+4 <= len(xloc); r += 4 {
		i := start + r
		rows := a[r*n : (r+4)*n]
		a0, a1, a2, a3 := rows[:n], rows[n:2*n], rows[2*n:3*n], rows[3*n:]
		s0, s1, s2, s3 := sweep4(a0, a1, a2, a3, x, i)
		xloc[r] = (b[r] - s0) / a0[i]
		xloc[r+1] = (b[r+1] - s1) / a1[i+1]
		xloc[r+2] = (b[r+2] - s2) / a2[i+2]
		xloc[r+3] = (b[r+3] - s3) / a3[i+3]
	}
	for ; r < len(xloc); r++ {
		i := start + r
		row := a[r*n : (r+1)*n]
		xloc[r] = (b[r] - rowSum(row, x, i)) / row[i]
	}
}

// rowSum returns the sum of row[j]*x[j] over j = 0, 1, ..., n-1 skipping i,
// in that order. The explicit float64 conversions round every product, so
// that no compiler fuses a multiply-add (which would change the bits). Out
// of line for the reason given at dot4.
//
//go:noinline
func rowSum(row, x []float64, i int) float64 {
	s := 0.0
	lo, xlo := row[:i], x[:i]
	for j := range lo {
		s += float64(lo[j] * xlo[j])
	}
	hi, xhi := row[i+1:], x[i+1:]
	hi = hi[:len(xhi)]
	for j := range hi {
		s += float64(hi[j] * xhi[j])
	}
	return s
}

// sweep4 returns rowSum(ak, x, i+k) for the four consecutive rows a0..a3,
// whose diagonal entries are in columns i..i+3.
func sweep4(a0, a1, a2, a3, x []float64, i int) (s0, s1, s2, s3 float64) {
	// Columns left of the diagonal entries: every row takes them.
	s0, s1, s2, s3 = dot4(a0[:i], a1[:i], a2[:i], a3[:i], x[:i], 0, 0, 0, 0)
	// Columns i..i+3: row k skips column i+k.
	d0, d1, d2, d3 := a0[i:i+4], a1[i:i+4], a2[i:i+4], a3[i:i+4]
	xd := x[i : i+4]
	s1 += float64(d1[0] * xd[0])
	s2 += float64(d2[0] * xd[0])
	s3 += float64(d3[0] * xd[0])
	s0 += float64(d0[1] * xd[1])
	s2 += float64(d2[1] * xd[1])
	s3 += float64(d3[1] * xd[1])
	s0 += float64(d0[2] * xd[2])
	s1 += float64(d1[2] * xd[2])
	s3 += float64(d3[2] * xd[2])
	s0 += float64(d0[3] * xd[3])
	s1 += float64(d1[3] * xd[3])
	s2 += float64(d2[3] * xd[3])
	// Columns right of them.
	return dot4(a0[i+4:], a1[i+4:], a2[i+4:], a3[i+4:], x[i+4:], s0, s1, s2, s3)
}

// dot4 adds ak[j]*x[j] to sk for j = 0, 1, ..., len(x)-1, in that order.
//
// It is kept out of line so that its loop has registers for all its values:
// inlined into a larger function, the loop index was kept on the stack, a
// store and a load on every iteration's critical path.
//
//go:noinline
func dot4(a0, a1, a2, a3, x []float64, s0, s1, s2, s3 float64) (float64, float64, float64, float64) {
	a0, a1, a2, a3 = a0[:len(x)], a1[:len(x)], a2[:len(x)], a3[:len(x)]
	for j, xj := range x {
		s0 += float64(a0[j] * xj)
		s1 += float64(a1[j] * xj)
		s2 += float64(a2[j] * xj)
		s3 += float64(a3[j] * xj)
	}
	return s0, s1, s2, s3
}

func run(args []string, stdout io.Writer) (err error) {
	cfg, err := parseFlags(args)
	if err != nil {
		return err
	}
	comm, err := mpi.Init()
	if err != nil {
		return fmt.Errorf("mpi init: %w", err)
	}
	defer func() {
		if ferr := mpi.Finalize(); ferr != nil && err == nil {
			err = fmt.Errorf("mpi finalize: %w", ferr)
		}
	}()
	if comm.Size() > cfg.n {
		return fmt.Errorf("-n %d is smaller than the number of ranks %d", cfg.n, comm.Size())
	}
	n := cfg.n

	// Solver state, registered with pcm: x, the current iterate, a block of rows (one
	// value each) distributed by pcm, which checkpoints it and moves its rows when the job
	// is resized; iter, the number of completed iterations; change, the largest change of
	// the last one (printed at the end). The block's scratch buffer receives this rank's
	// rows of the next iterate.
	p, err := pcm.Init(comm)
	if err != nil {
		return err
	}
	x, err := pcm.NewBlock[float64](p, "x", n, 1, pcm.ChangedOnlyByFlip())
	if err != nil {
		return err
	}
	iter := 0
	change := 0.0
	if err := p.Register("iter", &iter); err != nil {
		return err
	}
	if err := p.Register("change", &change); err != nil {
		return err
	}
	defer solverkit.Close(p, "jacobi", comm.Rank(), &err)
	p.SetIterations(cfg.maxIters)
	if err := p.Load(); err != nil {
		return err
	}
	startIter := iter
	comm = p.World() // a process that joined at a resize has a world of another size

	// The decomposition, set again whenever the world or the block changes: this rank's
	// rows of A and b (derived data, rebuilt rather than moved) and every rank's row count.
	// xfull is scratch for the full iterate every rank needs, gathered from the blocks at
	// the start of each iteration.
	var rank, size, start int
	var a, b []float64
	var counts []int
	xfull := make([]float64, n)
	decompose := func() {
		rank, size, start = comm.Rank(), comm.Size(), x.Offset()
		a, b = buildRows(start, x.Rows(), n)
		counts = counts[:0]
		for _, rg := range x.Ranges() {
			counts = append(counts, rg.Len())
		}
	}
	decompose()

	// Start the clock together. A process that took over a migrated rank, or joined at a
	// resize, joins a running loop: the others are not at this barrier.
	if st := p.Status(); st != pcm.Migrated && st != pcm.Joined {
		if err := comm.Barrier(); err != nil {
			return err
		}
	}
	t0 := time.Now()
	for iter < cfg.maxIters {
		if err := mpi.Allgatherv(comm, x.Local(), xfull, counts); err != nil {
			return fmt.Errorf("allgatherv: %w", err)
		}
		xloc := x.Scratch()
		sweep(xloc, a, b, xfull, start)
		local := 0.0
		for r, v := range xloc {
			local = math.Max(local, math.Abs(v-xfull[start+r]))
		}
		global := []float64{0}
		if err := mpi.Allreduce(comm, []float64{local}, global, mpi.Max); err != nil {
			return fmt.Errorf("allreduce: %w", err)
		}
		change = global[0]
		x.Flip()
		iter++
		// Iteration boundary: x is the iterate after iter iterations. The
		// reconfiguration point comes after the convergence test, so that a
		// checkpoint always holds an iterate that still has to be improved:
		// a restart then simply continues the loop.
		if change < cfg.tol {
			break
		}
		act, err := solverkit.Boundary(p, iter, rank, size, solverkit.Hooks{Name: "jacobi", CrashAfter: cfg.crashAfter, Pace: cfg.pace})
		if err != nil || act == pcm.Leave {
			return err
		}
		if act == pcm.Resized { // a new world and new rows
			comm = p.World()
			decompose()
		}
	}
	if err := comm.Barrier(); err != nil {
		return err
	}
	elapsed := time.Since(t0)

	if err := mpi.Gatherv(comm, x.Local(), xfull, counts, 0); err != nil {
		return fmt.Errorf("gatherv: %w", err)
	}
	if rank != 0 {
		return nil
	}
	// Every rank holds the full x; rank 0 sums it in index order so the
	// checksum does not depend on the decomposition.
	sum := 0.0
	for _, v := range xfull {
		sum += v
	}
	secPerIter := 0.0
	if done := iter - startIter; done > 0 {
		secPerIter = elapsed.Seconds() / float64(done)
	}
	if _, err := fmt.Fprintf(stdout, "iterations %d\nmaxchange %.3e\nchecksum %.10e\nsec_per_iter %.6e\n",
		iter, change, sum, secPerIter); err != nil {
		return err
	}
	if cfg.dump != "" {
		return solverkit.WriteFloats(cfg.dump, xfull)
	}
	return nil
}
