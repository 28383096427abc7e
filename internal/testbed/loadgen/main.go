// Command loadgen is the testbed's artificial load: a CPU-bound program that competes with
// a node's ranks for its CPU, as the competing processes of the MPI/IOS experiments did.
//
//	loadgen [-threads N] [-duty D] [-period P] [-for DURATION]
//
// It spins on N OS threads. With -duty 1 (the default) they never sleep, and the cgroup the
// testbed runs loadgen in decides how much CPU it gets. With -duty D < 1 each thread is busy
// for D of every period and sleeps for the rest, so loadgen takes about N×D CPUs when the
// machine has them (the testbed's loopback mode, where no cgroup bounds it). It runs until
// killed, or for -for DURATION.
package main

import (
	"flag"
	"fmt"
	"math"
	"os"
	"runtime"
	"sync/atomic"
	"time"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		os.Exit(2)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("loadgen", flag.ContinueOnError)
	threads := fs.Int("threads", 1, "busy threads")
	duty := fs.Float64("duty", 1, "fraction of every period each thread is busy (0 < D <= 1)")
	period := fs.Duration("period", 10*time.Millisecond, "duty-cycle period")
	limit := fs.Duration("for", 0, "stop after this long (0: run until killed)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	switch {
	case fs.NArg() != 0:
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	case *threads < 1 || *threads > 4096:
		return fmt.Errorf("-threads %d: want 1 to 4096", *threads)
	case !(*duty > 0 && *duty <= 1):
		return fmt.Errorf("-duty %v: want 0 < D <= 1", *duty)
	case *period < 100*time.Microsecond || *period > time.Second:
		return fmt.Errorf("-period %v: want 100µs to 1s", *period)
	case *limit < 0:
		return fmt.Errorf("-for %v: must not be negative", *limit)
	}
	// One P per busy thread and one to spare for the runtime.
	runtime.GOMAXPROCS(*threads + 1)
	for range *threads {
		go spin(*duty, *period)
	}
	if *limit > 0 {
		time.Sleep(*limit)
		return nil
	}
	select {}
}

// sink keeps the busy loop from being optimized away.
var sink atomic.Uint64

// spin keeps one OS thread busy for duty of every period.
func spin(duty float64, period time.Duration) {
	runtime.LockOSThread()
	busy := time.Duration(duty * float64(period))
	x := 1.0
	for {
		start := time.Now()
		for time.Since(start) < busy {
			for range 10000 {
				x = x*1.0000001 + 1e-9
			}
		}
		sink.Store(math.Float64bits(x))
		if duty < 1 {
			time.Sleep(period - time.Since(start))
		}
	}
}
