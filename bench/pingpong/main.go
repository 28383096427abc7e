// Command pingpong measures point-to-point latency and bandwidth between
// ranks 0 and 1 (other ranks idle). For each message size 0, 1, 4, 16, ...
// (x4) up to -max bytes it bounces a []byte back and forth and prints, on
// rank 0, one row "bytes latency_us bandwidth_MBps", where latency is half
// the average round trip and bandwidth is bytes / latency (1 MB = 1e6 B).
// bench/c/pingpong.c uses the same sizes, iteration counts and format.
//
// Usage: mpirun -np 2 pingpong [-max 4194304] [-maxiters 10000]
//
// For profiling (not used by bench/compare): -min B skips the sizes below B
// and -cpuprofile FILE writes a pprof CPU profile of each rank to FILE.RANK.
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

const tag = 7

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "pingpong:", err)
		os.Exit(1)
	}
}

// sizes returns 0 followed by the powers of 4 up to maxBytes.
func sizes(maxBytes int) []int {
	s := []int{0}
	for b := 1; b <= maxBytes; b *= 4 {
		s = append(s, b)
	}
	return s
}

// iterations scales the round-trip count with the message size so every
// size moves about 64 MiB each way, clamped to [20, maxIters] (and never
// below 1), with a tenth as many (at least 2) warm-up round trips.
func iterations(size, maxIters int) (iters, warmup int) {
	iters = (64 << 20) / max(size, 1)
	iters = max(min(iters, maxIters), min(20, maxIters), 1)
	return iters, max(iters/10, 2)
}

func run(args []string, stdout io.Writer) (err error) {
	fs := flag.NewFlagSet("pingpong", flag.ContinueOnError)
	maxBytes := fs.Int("max", 4<<20, "largest message size in bytes")
	maxIters := fs.Int("maxiters", 10000, "round trips for the smallest messages")
	minBytes := fs.Int("min", 0, "smallest message size (profiling)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of each rank to `FILE`.RANK (profiling)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 0 || *maxBytes < 0 || *maxIters < 1 {
		return fmt.Errorf("bad arguments (want -max >= 0, -maxiters >= 1, no positional arguments)")
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
	if comm.Size() < 2 {
		return fmt.Errorf("needs at least 2 ranks, have %d", comm.Size())
	}
	rank := comm.Rank()
	if *cpuProfile != "" {
		f, err := os.Create(fmt.Sprintf("%s.%d", *cpuProfile, rank))
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	buf := make([]byte, *maxBytes)
	for i := range buf {
		buf[i] = byte(i)
	}
	if rank == 0 {
		fmt.Fprintln(stdout, "# bytes latency_us bandwidth_MBps")
	}
	for _, size := range sizes(*maxBytes) {
		if size < *minBytes {
			continue
		}
		iters, warmup := iterations(size, *maxIters)
		msg := buf[:size]
		if err := comm.Barrier(); err != nil {
			return err
		}
		var start time.Time
		for i := range warmup + iters {
			if i == warmup {
				start = time.Now()
			}
			switch rank {
			case 0:
				if err := mpi.Send(comm, msg, 1, tag); err != nil {
					return err
				}
				if _, err := mpi.Recv(comm, msg, 1, tag); err != nil {
					return err
				}
			case 1:
				if _, err := mpi.Recv(comm, msg, 0, tag); err != nil {
					return err
				}
				if err := mpi.Send(comm, msg, 0, tag); err != nil {
					return err
				}
			}
		}
		if rank == 0 {
			latUS := time.Since(start).Seconds() / float64(2*iters) * 1e6
			bw := 0.0
			if size > 0 {
				bw = float64(size) / latUS
			}
			fmt.Fprintf(stdout, "%d %.3f %.3f\n", size, latUS, bw)
		}
	}
	return comm.Barrier()
}
