// Command blockapp is bench/migration's malleable test application: an iterative SPMD
// program whose only work is one tiny Allreduce per iteration and whose state is one
// distributed array (pcm.NewBlock) of -mib MiB in all, block-distributed over the ranks, so
// that resizing the job costs what redistributing that much data costs.
//
//	mpirun -np 4 ./blockapp -mib 256 -iters 1000 [-pace 2ms] [-stop-file F]
//
// Element g of the array (rows of -row float64) starts as fill.Base(0, g) and iteration i
// adds 1 to element i mod N, on the rank that holds it, so the data changes every iteration
// and its final value does not depend on the number of ranks or on resizes. A process that
// restarted from a checkpoint or joined at a resize gets its rows from pcm. At the end every
// rank checks its rows, and rank 0 prints
//
//	running              (first, with -stop-file) when the loop begins
//	iters N              the number of completed iterations
//	ranks P              the number of ranks at the end
//	verify ok            or "verify FAILED: ..." (and exit status 1)
//
// -stop-file F: rank 0 looks for F every iteration and the ranks stop together at the end of
// the iteration in which it appeared (the flag travels in the iteration's Allreduce).
package main

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"time"

	"github.com/mpios/mpios/bench/migration/internal/fill"
	"github.com/mpios/mpios/mpi"
	"github.com/mpios/mpios/pcm"
)

type config struct {
	mib      float64
	row      int
	iters    int
	pace     time.Duration
	stopFile string
	verify   bool
}

func main() {
	if err := run(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "blockapp:", err)
		os.Exit(1)
	}
}

func parseFlags(args []string) (config, error) {
	var cfg config
	fs := flag.NewFlagSet("blockapp", flag.ContinueOnError)
	fs.Float64Var(&cfg.mib, "mib", 16, "the distributed array's size in all, MiB")
	fs.IntVar(&cfg.row, "row", 1024, "float64 elements per row")
	fs.IntVar(&cfg.iters, "iters", 100, "number of iterations (an upper bound with -stop-file)")
	fs.DurationVar(&cfg.pace, "pace", 0, "sleep this long per iteration")
	fs.StringVar(&cfg.stopFile, "stop-file", "", "rank 0 stops the job after the iteration in which this file exists")
	fs.BoolVar(&cfg.verify, "verify", true, "check the final array")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	switch {
	case fs.NArg() != 0:
		return cfg, fmt.Errorf("unexpected arguments: %q", fs.Args())
	case cfg.mib < 0 || math.IsNaN(cfg.mib):
		return cfg, errors.New("-mib must be >= 0")
	case cfg.row < 1:
		return cfg, errors.New("-row must be >= 1")
	case cfg.iters < 0:
		return cfg, errors.New("-iters must be >= 0")
	}
	return cfg, nil
}

func run(args []string) (err error) {
	cfg, err := parseFlags(args)
	if err != nil {
		return err
	}
	world, err := mpi.Init()
	if err != nil {
		return fmt.Errorf("mpi init: %w", err)
	}
	defer func() {
		if ferr := mpi.Finalize(); ferr != nil && err == nil {
			err = fmt.Errorf("mpi finalize: %w", ferr)
		}
	}()
	rows := fill.Elems(cfg.mib) / cfg.row
	n := rows * cfg.row
	p, err := pcm.Init(world)
	if err != nil {
		return err
	}
	defer p.Close()
	blk, err := pcm.NewBlock[float64](p, "array", rows, cfg.row)
	if err != nil {
		return err
	}
	iter := 0
	if err := p.Register("iter", &iter); err != nil {
		return err
	}
	if err := p.Load(); err != nil {
		return err
	}
	if p.Status() == pcm.New {
		base := blk.Offset() * cfg.row
		for k := range blk.Local() {
			blk.Local()[k] = fill.Base(0, base+k)
		}
	}
	// A process that joined at a resize or restarted joins a loop the others run: only new
	// jobs start together.
	if p.Status() == pcm.New {
		if err := world.Barrier(); err != nil {
			return err
		}
		if world.Rank() == 0 && cfg.stopFile != "" {
			fmt.Println("running") // bench/migration waits for this before resizing
		}
	}
	in, out := []float64{0}, []float64{0}
	for iter < cfg.iters {
		in[0] = 0
		if world.Rank() == 0 && cfg.stopFile != "" {
			if _, err := os.Stat(cfg.stopFile); err == nil {
				in[0] = 1
			}
		}
		if err := mpi.Allreduce(world, in, out, mpi.Max); err != nil {
			return fmt.Errorf("allreduce at iteration %d: %w", iter, err)
		}
		if n > 0 {
			if k := iter%n - blk.Offset()*cfg.row; k >= 0 && k < len(blk.Local()) {
				blk.Local()[k]++
			}
		}
		iter++
		if out[0] > 0 {
			break // every rank saw the flag: stop before Reconfigure
		}
		act, err := p.Reconfigure(iter)
		if errors.Is(err, pcm.ErrCheckpointFailed) {
			fmt.Fprintf(os.Stderr, "blockapp: rank %d: warning: %v\n", world.Rank(), err)
		} else if err != nil {
			return err
		}
		switch act {
		case pcm.Leave:
			return nil
		case pcm.Resized:
			world = p.World()
		}
		if cfg.pace > 0 {
			time.Sleep(cfg.pace)
		}
	}
	if world.Rank() == 0 {
		fmt.Printf("iters %d\nranks %d\n", iter, world.Size())
	}
	if !cfg.verify {
		return world.Barrier()
	}
	bad := int64(0)
	base := blk.Offset() * cfg.row
	for k, x := range blk.Local() {
		if math.Float64bits(x) != math.Float64bits(fill.Expected(0, base+k, n, iter)) {
			bad++
		}
	}
	total := []int64{0}
	if err := mpi.Reduce(world, []int64{bad}, total, mpi.Sum, 0); err != nil {
		return fmt.Errorf("verify reduce: %w", err)
	}
	if world.Rank() == 0 {
		if total[0] != 0 {
			fmt.Printf("verify FAILED: %d wrong elements\n", total[0])
			return errors.New("array check failed")
		}
		fmt.Println("verify ok")
	}
	return nil
}
