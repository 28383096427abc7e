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
//	mpirun -np 4 heat2d -n 256 -iters 100 [-residual-every K] [-dump FILE] [-decomp rows|2d] [-iter-times FILE]
//
// With -decomp 2d the grid is split in both directions over a balanced grid of
// ranks (mpi.DimsCreate, mpi.CartView) and each iteration also exchanges one
// ghost column with the west and east neighbours; the result is bitwise the
// same as with row blocks (the default).
//
// Rank 0 prints "checksum %.10e" and "sec_per_iter %.6e". With -iter-times FILE, rank 0 also
// writes the duration of every iteration of the timed loop to FILE, one line "ITERATION
// SECONDS" each (for benchmarks that look at single iterations, such as the ones that take a
// checkpoint); the process that is rank 0 at the end writes the iterations it timed itself.
//
// Checkpointing and restart go through package pcm and are configured by the
// environment (see pcm): with MPIOS_CKPT_EVERY=K the grid and the iteration
// counter are checkpointed every K iterations, and MPIOS_RESTART=JOB resumes
// from JOB's newest valid checkpoint, with a result bitwise identical to an
// uninterrupted run, on the same number of ranks or another: the grid is a
// pcm.Block, whose rows pcm splits over however many ranks load it. With
// -decomp 2d the grid is one plain slice per rank, so a restart needs the same
// number of ranks and the same -decomp (pcm refuses another number clearly).
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
	tagToWest = 3
	tagToEast = 4
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
	twoD          bool          // -decomp 2d: blocks of rows and columns
	iterTimes     string        // -iter-times: rank 0 writes every iteration's duration here
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
	fs.StringVar(&cfg.iterTimes, "iter-times", "", "rank 0 writes the duration of every timed iteration to `FILE` at the end, one line \"ITERATION SECONDS\" each (for benchmarks)")
	decomp := fs.String("decomp", "rows", "domain decomposition: rows (row blocks) or 2d (blocks of rows and columns)")
	fs.Usage = func() { solverkit.Usage(fs) }
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	cfg.twoD = *decomp == "2d"
	switch {
	case *decomp != "rows" && *decomp != "2d":
		return cfg, fmt.Errorf("-decomp must be rows or 2d, got %q", *decomp)
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

// newGrid allocates a local block of rows interior rows plus one ghost (or
// boundary) row above and below, each row n+2 wide (boundary columns
// included), and sets the fixed boundary values. isTop marks the rank that
// owns global row 1, whose upper ghost row is the hot boundary.
func newGrid(rows, n int, isTop bool) []float64 {
	w := n + 2
	u := make([]float64, (rows+2)*w)
	if isTop {
		for j := range w {
			u[j] = topBoundary
		}
	}
	return u
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

// domain is a decomposition of the grid over the ranks: this rank's block of rows x cols
// interior cells framed by one ghost (or boundary) cell on every side, a scratch block of
// the same shape for the next sweep, and how the ghosts are filled. Its constructor
// registers the grid with pcm.
type domain interface {
	// setup takes the world and this rank's block after pcm.Load (a restored grid may have
	// another layout) and again whenever the world or the block changes.
	setup(world *mpi.Comm) error
	// shape is the number of interior rows and columns of this rank's block.
	shape() (rows, cols int)
	// grids returns the current grid and the scratch block.
	grids() (cur, next []float64)
	// halo fills the ghost cells of cur, the current grid, from the neighbours.
	halo(cur []float64) error
	// flip makes the scratch block the current grid.
	flip()
	// dump gathers the interior on rank 0, which writes it to path as raw little-endian
	// float64 values, row-major, n*n in total.
	dump(path string) error
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

	// Solver state: the grid, owned by the decomposition, and iter, the number of completed
	// iterations, both registered with pcm, which checkpoints and restores them (and, for row
	// blocks, moves the grid's rows when the job is resized).
	p, err := pcm.Init(comm)
	if err != nil {
		return err
	}
	var d domain
	if cfg.twoD {
		d, err = newBlocks2D(p, comm, cfg.n, cfg.init)
	} else {
		d, err = newRowBlocks(p, comm, cfg.n, cfg.init)
	}
	if err != nil {
		return err
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
	comm = p.World() // a process that joined at a resize has a world of another size
	if err := d.setup(comm); err != nil {
		return err
	}
	rank, size := comm.Rank(), comm.Size()
	rows, cols := d.shape()

	// Start the clock together. A process that took over a migrated rank, or joined at a
	// resize, joins a running loop: the others are not at this barrier.
	if st := p.Status(); st != pcm.Migrated && st != pcm.Joined {
		if err := comm.Barrier(); err != nil {
			return err
		}
	}
	start := time.Now()
	var times *iterTimes
	if cfg.iterTimes != "" {
		times = newIterTimes(startIter, cfg.iters, start)
	}
	for iter < cfg.iters {
		grid, next := d.grids()
		if err := d.halo(grid); err != nil {
			return err
		}
		step(next, grid, rows, cols)
		iter++
		if cfg.residualEvery > 0 && iter%cfg.residualEvery == 0 {
			local := []float64{maxChange(next, grid, rows, cols)}
			global := []float64{0}
			if err := mpi.Allreduce(comm, local, global, mpi.Max); err != nil {
				return fmt.Errorf("residual allreduce: %w", err)
			}
			if rank == 0 {
				fmt.Fprintf(stdout, "residual %d %.6e\n", iter, global[0])
			}
		}
		d.flip()
		// Iteration boundary: the current grid is the one after iter iterations and
		// nothing else carries state across iterations.
		act, err := solverkit.Boundary(p, iter, rank, size, solverkit.Hooks{Name: "heat2d", CrashAfter: cfg.crashAfter, Pace: cfg.pace, NoPCM: cfg.noPCM})
		if err != nil || act == pcm.Leave {
			return err
		}
		if times != nil {
			times.done()
		}
		if act == pcm.Resized {
			// A new world and new rows (row blocks only: a 2-D grid is not resizable).
			comm = p.World()
			if err := d.setup(comm); err != nil {
				return err
			}
			rank, size = comm.Rank(), comm.Size()
			rows, cols = d.shape()
		}
	}
	if err := comm.Barrier(); err != nil {
		return err
	}
	elapsed := time.Since(start)

	cur, _ := d.grids()
	local := []float64{interiorSum(cur, rows, cols)}
	total := []float64{0}
	if err := mpi.Reduce(comm, local, total, mpi.Sum, 0); err != nil {
		return fmt.Errorf("checksum reduce: %w", err)
	}
	if cfg.dump != "" {
		if err := d.dump(cfg.dump); err != nil {
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
		if times != nil {
			if err := times.write(cfg.iterTimes); err != nil {
				return err
			}
		}
	}
	return nil
}

// gatherInterior gathers the interior cells of every rank's rows x cols block on rank 0,
// rank after rank, each row-major; counts[r] is the number of cells of rank r. Other ranks
// get nil.
func gatherInterior(c *mpi.Comm, u []float64, rows, cols int, counts []int) ([]float64, error) {
	w := cols + 2
	send := make([]float64, 0, rows*cols)
	for i := 1; i <= rows; i++ {
		send = append(send, u[i*w+1:i*w+1+cols]...)
	}
	var recv []float64
	if c.Rank() == 0 {
		total := 0
		for _, n := range counts {
			total += n
		}
		recv = make([]float64, total)
	}
	if err := mpi.Gatherv(c, send, recv, counts, 0); err != nil {
		return nil, fmt.Errorf("dump gatherv: %w", err)
	}
	return recv, nil
}
