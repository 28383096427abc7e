// Command heat2d relaxes the 2-D heat (Laplace) equation with Jacobi sweeps on
// an N x N grid of interior cells, distributed over MPI ranks in row blocks.
//
// The top boundary row is held at 100.0, the other boundaries at 0, and the
// interior starts at 0. Each iteration exchanges one ghost row with each
// neighbour and applies the 5-point stencil
//
//	u'[i][j] = 0.25 * (u[i-1][j] + u[i+1][j] + u[i][j-1] + u[i][j+1])
//
// in exactly that order, so the result is bitwise independent of the number
// of ranks (and identical to bench/c/heat2d.c).
//
// Usage:
//
//	mpirun -np 4 heat2d -n 256 -iters 100 [-residual-every K] [-dump FILE]
//
// Rank 0 prints "checksum %.10e" and "sec_per_iter %.6e".
//
// Checkpointing and restart go through package pcm and are configured by the
// environment (see pcm): with MPIOS_CKPT_EVERY=K the grid and the iteration
// counter are checkpointed every K iterations, and MPIOS_RESTART=JOB resumes
// from JOB's newest valid checkpoint, with a result bitwise identical to an
// uninterrupted run, on the same number of ranks or another: the grid is a
// pcm.Block, whose rows pcm splits over however many ranks load it.
//
// The hidden flag -crash-after N (for tests of restart) makes rank 1 (rank 0
// if alone) exit with status 1 right after iteration N, as if it had died.
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

// Message tags of the two halo-exchange directions, so the two Sendrecv
// calls of one iteration can never match each other's messages.
const (
	tagToUp   = 1
	tagToDown = 2
)

// topBoundary is the fixed temperature of the top boundary row.
const topBoundary = 100.0

type config struct {
	n             int
	iters         int
	residualEvery int
	dump          string
	crashAfter    int           // test only: rank 1 exits after this iteration (0: never)
	pace          time.Duration // test only: sleep this long per iteration
	noPCM         bool          // benchmark baseline only: never call pcm.Reconfigure
	init          float64       // benchmark only: the interior's initial value
}

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "heat2d:", err)
		os.Exit(1)
	}
}

func parseFlags(args []string) (config, error) {
	var cfg config
	fs := flag.NewFlagSet("heat2d", flag.ContinueOnError)
	fs.IntVar(&cfg.n, "n", 256, "number of interior grid cells per side")
	fs.IntVar(&cfg.iters, "iters", 100, "number of Jacobi iterations")
	fs.IntVar(&cfg.residualEvery, "residual-every", 0, "print the global max cell change every K iterations (0: never)")
	fs.StringVar(&cfg.dump, "dump", "", "rank 0 writes the final interior grid here (raw little-endian float64, row-major)")
	fs.IntVar(&cfg.crashAfter, solverkit.CrashFlag, 0, "")
	fs.DurationVar(&cfg.pace, solverkit.PaceFlag, 0, "")
	fs.BoolVar(&cfg.noPCM, solverkit.NoPCMFlag, false, "")
	fs.Float64Var(&cfg.init, solverkit.InitFlag, 0, "")
	fs.Usage = func() { solverkit.Usage(fs) }
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	switch {
	case fs.NArg() != 0:
		return cfg, fmt.Errorf("unexpected arguments: %q", fs.Args())
	case cfg.n < 1:
		return cfg, fmt.Errorf("-n must be >= 1, got %d", cfg.n)
	case cfg.iters < 0:
		return cfg, fmt.Errorf("-iters must be >= 0, got %d", cfg.iters)
	case cfg.residualEvery < 0:
		return cfg, fmt.Errorf("-residual-every must be >= 0, got %d", cfg.residualEvery)
	case cfg.crashAfter < 0:
		return cfg, fmt.Errorf("-%s must be >= 0, got %d", solverkit.CrashFlag, cfg.crashAfter)
	}
	return cfg, nil
}

// step applies one Jacobi sweep to the rows interior rows of src and writes
// them to dst. Both are (rows+2) x (n+2) row-major blocks; ghost rows and
// boundary columns of dst are left untouched.
//
// The inner loop loads each cell of the middle row once and carries it in
// registers to the next two cells (as the left neighbour and the centre), so
// a cell costs three loads; the expression and its order are those of the
// package comment, so the results do not change.
func step(dst, src []float64, rows, n int) {
	w := n + 2
	// 0.25, but not a compile-time constant: a constant is reloaded from
	// memory in every iteration, a variable stays in a register.
	quarter := 0.25 + float64(n>>62)
	for i := 1; i <= rows; i++ {
		// Views of row i's neighbours, all of length n and indexed by
		// interior column j-1; equal lengths let the compiler drop the
		// bounds checks in the inner loop.
		out := dst[i*w+1 : i*w+1+n]
		up := src[(i-1)*w+1:][:len(out)]
		dn := src[(i+1)*w+1:][:len(out)]
		mid := src[i*w : i*w+w]
		right := mid[2:][:len(out)]
		left, centre := mid[0], mid[1]
		for j := range out {
			r := right[j]
			out[j] = quarter * (up[j] + dn[j] + left + r)
			left, centre = centre, r
		}
	}
}

// maxChange returns the largest |a - b| over the interior cells of two blocks.
func maxChange(a, b []float64, rows, n int) float64 {
	w := n + 2
	m := 0.0
	for i := 1; i <= rows; i++ {
		ra := a[i*w+1 : i*w+1+n]
		rb := b[i*w+1:][:len(ra)]
		for j := range ra {
			m = math.Max(m, math.Abs(ra[j]-rb[j]))
		}
	}
	return m
}

// interiorSum sums the interior cells of a block in row-major order.
func interiorSum(u []float64, rows, n int) float64 {
	w := n + 2
	s := 0.0
	for i := 1; i <= rows; i++ {
		for _, v := range u[i*w+1 : i*w+1+n] {
			s += v
		}
	}
	return s
}

// exchange fills the two ghost rows of u from the neighbouring ranks. up or
// down is mpi.ProcNull at the edges of the domain, where the ghost row is the
// fixed boundary and must not be overwritten.
func exchange(c *mpi.Comm, u []float64, rows, n, up, down int) error {
	w := n + 2
	first := u[w+1 : w+1+n]
	last := u[rows*w+1 : rows*w+1+n]
	ghostTop := u[1 : 1+n]
	ghostBottom := u[(rows+1)*w+1 : (rows+1)*w+1+n]
	if _, err := mpi.Sendrecv(c, first, up, tagToUp, ghostBottom, down, tagToUp); err != nil {
		return fmt.Errorf("halo exchange (upwards): %w", err)
	}
	if _, err := mpi.Sendrecv(c, last, down, tagToDown, ghostTop, up, tagToDown); err != nil {
		return fmt.Errorf("halo exchange (downwards): %w", err)
	}
	return nil
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
		// Every rank needs at least one row for the neighbour chain to work.
		return fmt.Errorf("-n %d is smaller than the number of ranks %d", cfg.n, comm.Size())
	}
	n := cfg.n

	// Solver state: the grid u, a block of rows distributed by pcm, and iter, the number of
	// completed iterations, both registered with pcm, which checkpoints and restores them and
	// moves u's rows when the job is resized. Each rank's rows (n+2 wide, boundary columns
	// included) are framed by a ghost (or boundary) row above and below; the block's
	// scratch buffer of the same shape receives the next sweep, and Flip makes it the grid.
	p, err := pcm.Init(comm)
	if err != nil {
		return err
	}
	u, err := pcm.NewBlock[float64](p, "u", n, n+2, pcm.Halo(1), pcm.DoubleBuffer())
	if err != nil {
		return err
	}
	if cfg.init != 0 {
		local := u.Local()
		for i := range u.Rows() {
			for j := 1; j <= n; j++ {
				local[i*(n+2)+j] = cfg.init
			}
		}
	}
	iter := 0
	if err := p.Register("iter", &iter); err != nil {
		return err
	}
	defer solverkit.Close(p, "heat2d", comm.Rank(), &err)
	p.SetIterations(cfg.iters)
	if err := p.Load(); err != nil {
		return err
	}
	startIter := iter

	// The decomposition, set again whenever the world or the block changes.
	var rank, size, rows, up, down int
	decompose := func() {
		rank, size, rows = comm.Rank(), comm.Size(), u.Rows()
		up, down = rank-1, rank+1
		if rank == 0 {
			up = mpi.ProcNull
			// The hot boundary is the upper ghost row of the first block, in both buffers.
			for _, g := range [][]float64{u.Padded(), u.Scratch()} {
				for j := range n + 2 {
					g[j] = topBoundary
				}
			}
		}
		if rank == size-1 {
			down = mpi.ProcNull
		}
	}
	decompose()

	// Start the clock together. A process that took over a migrated rank joins a
	// running loop: the others are not at this barrier.
	if p.Status() != pcm.Migrated {
		if err := comm.Barrier(); err != nil {
			return err
		}
	}
	start := time.Now()
	for iter < cfg.iters {
		grid, next := u.Padded(), u.Scratch()
		if err := exchange(comm, grid, rows, n, up, down); err != nil {
			return err
		}
		step(next, grid, rows, n)
		iter++
		if cfg.residualEvery > 0 && iter%cfg.residualEvery == 0 {
			local := []float64{maxChange(next, grid, rows, n)}
			global := []float64{0}
			if err := mpi.Allreduce(comm, local, global, mpi.Max); err != nil {
				return fmt.Errorf("residual allreduce: %w", err)
			}
			if rank == 0 {
				fmt.Fprintf(stdout, "residual %d %.6e\n", iter, global[0])
			}
		}
		u.Flip()
		// Iteration boundary: u is the grid after iter iterations and
		// nothing else carries state across iterations.
		act, err := solverkit.Boundary(p, iter, rank, size, solverkit.Hooks{Name: "heat2d", CrashAfter: cfg.crashAfter, Pace: cfg.pace, NoPCM: cfg.noPCM})
		if err != nil || act == pcm.Leave {
			return err
		}
		// After a resize (pcm.Resized) the world and u's rows are new: take the world
		// again (comm = p.World()) and call decompose.
	}
	if err := comm.Barrier(); err != nil {
		return err
	}
	elapsed := time.Since(start)

	local := []float64{interiorSum(u.Padded(), rows, n)}
	total := []float64{0}
	if err := mpi.Reduce(comm, local, total, mpi.Sum, 0); err != nil {
		return fmt.Errorf("checksum reduce: %w", err)
	}
	if cfg.dump != "" {
		if err := dumpGrid(comm, u, cfg.dump); err != nil {
			return err
		}
	}
	if rank == 0 {
		secPerIter := 0.0
		if done := cfg.iters - startIter; done > 0 {
			secPerIter = elapsed.Seconds() / float64(done)
		}
		if _, err := fmt.Fprintf(stdout, "checksum %.10e\nsec_per_iter %.6e\n", total[0], secPerIter); err != nil {
			return err
		}
	}
	return nil
}

// dumpGrid gathers the interior rows of every rank on rank 0 and writes them
// to path as raw little-endian float64 values, row-major, n*n in total.
func dumpGrid(c *mpi.Comm, u *pcm.Block[float64], path string) error {
	n, w := u.GlobalRows(), u.RowLen()
	send := make([]float64, 0, u.Rows()*n)
	local := u.Local()
	for i := range u.Rows() {
		send = append(send, local[i*w+1:i*w+1+n]...)
	}
	counts := make([]int, c.Size())
	for r, rg := range u.Ranges() {
		counts[r] = rg.Len() * n
	}
	var recv []float64
	if c.Rank() == 0 {
		recv = make([]float64, n*n)
	}
	if err := mpi.Gatherv(c, send, recv, counts, 0); err != nil {
		return fmt.Errorf("dump gatherv: %w", err)
	}
	if c.Rank() != 0 {
		return nil
	}
	return solverkit.WriteFloats(path, recv)
}
