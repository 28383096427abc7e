// Command stateapp is the test application of bench/migration: an iterative SPMD program whose
// only work is one tiny Allreduce per iteration and whose state is a large block of float64
// ("ballast"), so that migrating or checkpointing it costs what moving that much state costs.
//
//	mpirun -np 2 ./stateapp -mib 256 -iters 1000 [-pace 2ms] [-stop-file F] [-timeline F]
//
// Each rank registers with pcm a []float64 of -mib MiB and its iteration counter. A new
// process fills the ballast with a pattern that depends on the rank and the index; a process
// that took over a migrated rank, or restarted from a checkpoint, gets it from pcm.Load
// instead (and computes nothing). Iteration i adds 1 to element i mod len, so the state
// changes every iteration. At the end every rank compares its ballast with the pattern
// recomputed for the final iteration count, and rank 0 prints
//
//	iters N                  the number of completed iterations
//	checksum %016x           a hash of every rank's ballast, in rank order
//	verify ok                or "verify FAILED: ..." (and exit status 1)
//	running                  (first, with -stop-file) when the loop begins
//	sec_per_iter %.6e        wall time of the loop per iteration done by this job
//
// -lat N: after each iteration's Allreduce, ranks 0 and 1 exchange N round trips of 16 bytes,
// and rank 0 adds their mean half round trip in microseconds to its -timeline lines as a third
// column ("ITER SECONDS LAT_US"): the latency between the two before and after a migration
// moves one of them (onto the other's node: shared memory; away from it: TCP).
//
// -stop-file F: rank 0 looks for F every iteration and the ranks stop together (the stop flag
// travels in the iteration's Allreduce) at the end of the iteration in which it appeared,
// before its Reconfigure; -iters is
// then an upper bound. -timeline F: rank 0 writes "ITER SECONDS" lines, the time since the
// loop began at which it entered Reconfigure(ITER), so the stall a migration of another rank
// causes can be read off (bench/migration does). -verify=false skips the final check and hash
// (for timing runs).
package main

import (
	"bufio"
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
	iters    int
	pace     time.Duration
	stopFile string
	timeline string
	verify   bool
	lat      int
}

func main() {
	if err := run(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "stateapp:", err)
		os.Exit(1)
	}
}

func parseFlags(args []string) (config, error) {
	var cfg config
	fs := flag.NewFlagSet("stateapp", flag.ContinueOnError)
	fs.Float64Var(&cfg.mib, "mib", 16, "ballast per rank, MiB")
	fs.IntVar(&cfg.iters, "iters", 100, "number of iterations (an upper bound with -stop-file)")
	fs.DurationVar(&cfg.pace, "pace", 0, "sleep this long per iteration")
	fs.StringVar(&cfg.stopFile, "stop-file", "", "rank 0 stops the job after the iteration in which this file exists")
	fs.StringVar(&cfg.timeline, "timeline", "", "rank 0 writes when it entered each Reconfigure here")
	fs.BoolVar(&cfg.verify, "verify", true, "check the final ballast and print its checksum")
	fs.IntVar(&cfg.lat, "lat", 0, "ranks 0 and 1 time this many 16-byte round trips per iteration (-timeline's third column)")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	switch {
	case fs.NArg() != 0:
		return cfg, fmt.Errorf("unexpected arguments: %q", fs.Args())
	case cfg.mib < 0 || math.IsNaN(cfg.mib):
		return cfg, fmt.Errorf("-mib must be >= 0")
	case cfg.iters < 0:
		return cfg, fmt.Errorf("-iters must be >= 0")
	case cfg.lat < 0:
		return cfg, fmt.Errorf("-lat must be >= 0")
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
	rank, size := world.Rank(), world.Size()
	n := fill.Elems(cfg.mib)

	// State: the ballast and the iteration counter. A new process builds the ballast after
	// Load (which restores nothing for it); the others get it from Load, which allocates.
	var ballast []float64
	iter := 0
	p, err := pcm.Init(world)
	if err != nil {
		return err
	}
	defer p.Close()
	if err := p.Register("ballast", &ballast); err != nil {
		return err
	}
	if err := p.Register("iter", &iter); err != nil {
		return err
	}
	if err := p.Load(); err != nil {
		return err
	}
	if p.Status() == pcm.New {
		ballast = make([]float64, n)
		for j := range ballast {
			ballast[j] = fill.Base(rank, j)
		}
	}
	if len(ballast) != n {
		return fmt.Errorf("restored ballast has %d elements, -mib %g needs %d", len(ballast), cfg.mib, n)
	}
	startIter := iter

	var marks []time.Duration // rank 0: when it entered Reconfigure(startIter+1+k)
	var lats []float64        // rank 0, with -lat: the half round trip of that iteration, µs
	// A process that took over a migrated rank joins a running loop: no barrier.
	if p.Status() != pcm.Migrated {
		if err := world.Barrier(); err != nil {
			return err
		}
	}
	if rank == 0 && p.Status() != pcm.Migrated && cfg.stopFile != "" {
		fmt.Println("running") // bench/migration waits for this before migrating
	}
	start := time.Now()
	in := []float64{float64(rank), 0}
	out := []float64{0, 0}
	for iter < cfg.iters {
		in[1] = 0
		if rank == 0 && cfg.stopFile != "" {
			if _, err := os.Stat(cfg.stopFile); err == nil {
				in[1] = 1
			}
		}
		if err := mpi.Allreduce(world, in, out, mpi.Sum); err != nil {
			return fmt.Errorf("allreduce at iteration %d: %w", iter, err)
		}
		if want := float64(size*(size-1)) / 2; out[0] != want {
			return fmt.Errorf("allreduce at iteration %d: sum of ranks %v, want %v", iter, out[0], want)
		}
		if n > 0 {
			ballast[iter%n]++
		}
		iter++
		if out[1] > 0 {
			// Every rank saw the flag in this Allreduce. Stop before Reconfigure: a
			// migration there would start a successor that does not know of the stop.
			break
		}
		if cfg.lat > 0 && size > 1 && rank <= 1 {
			us, err := pingPong(world, rank, cfg.lat)
			if err != nil {
				return fmt.Errorf("round trips at iteration %d: %w", iter, err)
			}
			if rank == 0 {
				lats = append(lats, us)
			}
		}
		if rank == 0 && cfg.timeline != "" {
			marks = append(marks, time.Since(start))
		}
		act, err := p.Reconfigure(iter)
		if errors.Is(err, pcm.ErrCheckpointFailed) {
			fmt.Fprintf(os.Stderr, "stateapp: rank %d: warning: %v\n", rank, err)
		} else if err != nil {
			return err
		}
		if act == pcm.Leave {
			return nil
		}
		if cfg.pace > 0 {
			time.Sleep(cfg.pace)
		}
	}
	if err := world.Barrier(); err != nil {
		return err
	}
	elapsed := time.Since(start)

	if rank == 0 && cfg.timeline != "" {
		if err := writeTimeline(cfg.timeline, startIter, marks, lats); err != nil {
			return err
		}
	}
	if rank == 0 {
		fmt.Printf("iters %d\n", iter)
	}
	if cfg.verify {
		bad, first := 0, -1
		for j, x := range ballast {
			if math.Float64bits(x) != math.Float64bits(fill.Expected(rank, j, n, iter)) {
				if first < 0 {
					first = j
				}
				bad++
			}
		}
		if bad > 0 {
			fmt.Fprintf(os.Stderr, "stateapp: rank %d: %d of %d ballast elements wrong after %d iterations, first at %d: %v, want %v\n",
				rank, bad, n, iter, first, ballast[first], fill.Expected(rank, first, n, iter))
		}
		totalBad := []int64{0}
		if err := mpi.Reduce(world, []int64{int64(bad)}, totalBad, mpi.Sum, 0); err != nil {
			return fmt.Errorf("verify reduce: %w", err)
		}
		var hashes []uint64
		if rank == 0 {
			hashes = make([]uint64, size)
		}
		if err := mpi.Gather(world, []uint64{fill.Hash(ballast)}, hashes, 0); err != nil {
			return fmt.Errorf("checksum gather: %w", err)
		}
		if rank == 0 {
			fmt.Printf("checksum %016x\n", fill.Combine(hashes))
			if totalBad[0] != 0 {
				fmt.Printf("verify FAILED: %d wrong elements\n", totalBad[0])
			} else {
				fmt.Println("verify ok")
			}
		}
		if totalBad[0] != 0 {
			err = fmt.Errorf("ballast check failed")
		}
	}
	if rank == 0 {
		spi := 0.0
		if done := iter - startIter; done > 0 {
			spi = elapsed.Seconds() / float64(done)
		}
		fmt.Printf("sec_per_iter %.6e\n", spi)
	}
	return err
}

// pingPong runs n round trips of 16 bytes between ranks 0 and 1 and returns, on rank 0, the
// mean half round trip in microseconds.
func pingPong(c *mpi.Comm, rank, n int) (float64, error) {
	buf := make([]byte, 16)
	peer := 1 - rank
	start := time.Now()
	for range n {
		if rank == 0 {
			if err := mpi.Send(c, buf, peer, 7); err != nil {
				return 0, err
			}
			if _, err := mpi.Recv(c, buf, peer, 7); err != nil {
				return 0, err
			}
		} else {
			if _, err := mpi.Recv(c, buf, peer, 7); err != nil {
				return 0, err
			}
			if err := mpi.Send(c, buf, peer, 7); err != nil {
				return 0, err
			}
		}
	}
	return time.Since(start).Seconds() * 1e6 / float64(2*n), nil
}

func writeTimeline(path string, startIter int, marks []time.Duration, lats []float64) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	for k, d := range marks {
		if k < len(lats) {
			fmt.Fprintf(w, "%d %.6f %.3f\n", startIter+1+k, d.Seconds(), lats[k])
		} else {
			fmt.Fprintf(w, "%d %.6f\n", startIter+1+k, d.Seconds())
		}
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
