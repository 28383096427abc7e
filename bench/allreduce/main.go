// Command allreduce measures the latency of a float64 Sum Allreduce over all
// ranks for element counts 1, 8, 64, ... (x8) up to -max, printing on rank 0
// one row "elements latency_us" (average time of one call on rank 0 after a
// barrier and warm-up). It also checks the reduced values. bench/c/allreduce.c
// uses the same counts, iteration counts and format.
//
// Usage: mpirun -np 4 allreduce [-max 262144] [-maxiters 2000]
//
// For profiling (not used by bench/compare): -min N skips the counts below N,
// -miniters K raises the call count of every count to at least K, and
// -cpuprofile FILE writes a pprof CPU profile of each rank to FILE.RANK.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"time"

	"github.com/mpios/mpios/mpi"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "allreduce:", err)
		os.Exit(1)
	}
}

// counts returns the powers of 8 up to maxElems.
func counts(maxElems int) []int {
	var c []int
	for n := 1; n <= maxElems; n *= 8 {
		c = append(c, n)
	}
	return c
}

// iterations scales the call count with the vector length so every count
// reduces about 8 MiB in total, clamped to [20, maxIters] (never below 1),
// with a tenth as many (at least 2) warm-up calls.
func iterations(elems, maxIters int) (iters, warmup int) {
	iters = (1 << 20) / elems
	iters = max(min(iters, maxIters), min(20, maxIters), 1)
	return iters, max(iters/10, 2)
}

func run(args []string, stdout io.Writer) (err error) {
	fs := flag.NewFlagSet("allreduce", flag.ContinueOnError)
	maxElems := fs.Int("max", 262144, "largest element count")
	maxIters := fs.Int("maxiters", 2000, "calls for the smallest counts")
	minElems := fs.Int("min", 1, "smallest element count (profiling)")
	minIters := fs.Int("miniters", 0, "at least this many calls for every count (profiling)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of each rank to `FILE`.RANK (profiling)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 0 || *maxElems < 1 || *maxIters < 1 || *minIters < 0 {
		return fmt.Errorf("bad arguments (want -max >= 1, -maxiters >= 1, -miniters >= 0, no positional arguments)")
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
	rank, size := comm.Rank(), comm.Size()
	if *cpuProfile != "" {
		stop, err := startProfile(fmt.Sprintf("%s.%d", *cpuProfile, rank))
		if err != nil {
			return err
		}
		defer stop()
	}
	send := make([]float64, *maxElems)
	recv := make([]float64, *maxElems)
	for i := range send {
		send[i] = float64(rank + 1)
	}
	// Small integers: the sum is exact whatever the reduction order.
	want := float64(size * (size + 1) / 2)
	if rank == 0 {
		fmt.Fprintln(stdout, "# elements latency_us")
	}
	for _, n := range counts(*maxElems) {
		if n < *minElems {
			continue
		}
		iters, warmup := iterations(n, *maxIters)
		iters = max(iters, *minIters)
		if err := comm.Barrier(); err != nil {
			return err
		}
		var start time.Time
		for i := range warmup + iters {
			if i == warmup {
				start = time.Now()
			}
			if err := mpi.Allreduce(comm, send[:n], recv[:n], mpi.Sum); err != nil {
				return err
			}
		}
		elapsed := time.Since(start)
		for i, v := range recv[:n] {
			if v != want {
				return fmt.Errorf("rank %d: allreduce of %d elements: element %d = %v, want %v", rank, n, i, v, want)
			}
		}
		if rank == 0 {
			fmt.Fprintf(stdout, "%d %.3f\n", n, elapsed.Seconds()/float64(iters)*1e6)
		}
	}
	return comm.Barrier()
}

// startProfile starts a CPU profile written to path; the returned function stops it.
func startProfile(path string) (func(), error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}
