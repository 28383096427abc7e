// suiterun runs the mpisuite cases in a real multi-process job:
//
//	suiterun [CASE...]                  every case (or the named ones) once; each rank prints
//	                                    "rank R of P ok"
//	suiterun -iters N [-pace D] [CASE...]   one case per iteration, round-robin, with an
//	                                    iteration boundary (pcm.Reconfigure) after each, so
//	                                    that ranks can migrate between cases: every case then
//	                                    runs on the world of successor processes too
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/mpios/mpios/internal/mpisuite"
	"github.com/mpios/mpios/internal/solverkit"
	"github.com/mpios/mpios/mpi"
	"github.com/mpios/mpios/pcm"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "suiterun:", err)
		os.Exit(1)
	}
}

func run(args []string) (err error) {
	fs := flag.NewFlagSet("suiterun", flag.ContinueOnError)
	iters := fs.Int("iters", 0, "run one case per iteration for this many iterations, with reconfiguration points (0: every case once)")
	pace := fs.Duration("pace", 0, "sleep this long per iteration")
	if err := fs.Parse(args); err != nil {
		return err
	}
	names := fs.Args()
	c, err := mpi.Init()
	if err != nil {
		return err
	}
	var only func(string) bool
	if len(names) > 0 {
		only = func(name string) bool { return slices.Contains(names, name) }
	}
	if *iters == 0 {
		if err := mpisuite.RunAll(c, only); err != nil {
			return fmt.Errorf("rank %d: %w", c.Rank(), err)
		}
		// The shared-memory rings this rank has mapped tell the test which transport ran.
		maps, err := os.ReadFile("/proc/self/maps")
		if err != nil {
			return err
		}
		fmt.Printf("rank %d rings %d\n", c.Rank(), strings.Count(string(maps), "/dev/shm/mpios."))
		fmt.Printf("rank %d of %d ok\n", c.Rank(), c.Size())
		return mpi.Finalize()
	}
	left, err := loop(c, *iters, *pace, only)
	if err != nil {
		return fmt.Errorf("rank %d: %w", c.Rank(), err)
	}
	if !left {
		fmt.Printf("rank %d of %d ok\n", c.Rank(), c.Size())
	}
	return mpi.Finalize()
}

// loop runs case iter mod the number of cases at each iteration; it reports whether this
// process handed its rank to a successor.
func loop(c *mpi.Comm, iters int, pace time.Duration, only func(string) bool) (left bool, err error) {
	var cases []mpisuite.Case
	for _, tc := range mpisuite.Cases {
		if c.Size() >= tc.MinRanks && (only == nil || only(tc.Name)) {
			cases = append(cases, tc)
		}
	}
	if len(cases) == 0 {
		return false, errors.New("no case to run")
	}
	p, err := pcm.Init(c)
	if err != nil {
		return false, err
	}
	iter := 0
	if err := p.Register("iter", &iter); err != nil {
		return false, err
	}
	defer solverkit.Close(p, "suiterun", c.Rank(), &err)
	p.SetIterations(iters)
	if err := p.Load(); err != nil {
		return false, err
	}
	for iter < iters {
		tc := cases[iter%len(cases)]
		if err := tc.Run(c); err != nil {
			return false, fmt.Errorf("iteration %d: %s: %w", iter, tc.Name, err)
		}
		if err := c.Barrier(); err != nil {
			return false, fmt.Errorf("iteration %d: %s: barrier after: %w", iter, tc.Name, err)
		}
		iter++
		act, err := solverkit.Boundary(p, iter, c.Rank(), c.Size(), solverkit.Hooks{Name: "suiterun", Pace: pace})
		if leave := act == pcm.Leave; leave || err != nil {
			return leave, err
		}
	}
	return false, nil
}
