// suiterun runs the mpisuite cases in a real multi-process job:
//
//	suiterun [CASE...]                  every case (or the named ones) once; each rank prints
//	                                    "rank R of P ok"
//	suiterun -iters N [-pace D] [CASE...]   one case per iteration, round-robin, with an
//	                                    iteration boundary (pcm.Reconfigure) after each, so
//	                                    that ranks can migrate between cases: every case then
//	                                    runs on the world of successor processes too; the
//	                                    collective semantics checks (internal/collcheck, named
//	                                    coll/NAME) take turns with the cases
//	suiterun -iters N -resizable ...    as above, with a distributed block so that the job
//	                                    can be resized; after each resize the communicators
//	                                    derived from the old world must fail with ErrRevoked
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/mpios/mpios/internal/collcheck"
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
	resizable := fs.Bool("resizable", false, "with -iters: register a distributed block (so the job can be resized) and check that a resize revokes the old world's communicators")
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
	c, left, err := loop(c, *iters, *pace, *resizable, only)
	if err != nil {
		return fmt.Errorf("rank %d: %w", c.Rank(), err)
	}
	if !left {
		fmt.Printf("rank %d of %d ok\n", c.Rank(), c.Size())
	}
	return mpi.Finalize()
}

// loop runs case iter mod the number of cases at each iteration; it returns the world it ends
// on (a resize replaces it) and whether this process handed its rank to a successor.
func loop(c *mpi.Comm, iters int, pace time.Duration, resizable bool, only func(string) bool) (world *mpi.Comm, left bool, err error) {
	world = c
	p, err := pcm.Init(c)
	if err != nil {
		return world, false, err
	}
	iter := 0
	if err := p.Register("iter", &iter); err != nil {
		return world, false, err
	}
	if resizable {
		// A resize redistributes blocks; one row per rank at the largest size is enough.
		if _, err := pcm.NewBlock[float64](p, "rows", 64, 1); err != nil {
			return world, false, err
		}
	}
	defer solverkit.Close(p, "suiterun", c.Rank(), &err)
	p.SetIterations(iters)
	if err := p.Load(); err != nil {
		return world, false, err
	}
	world = p.World() // a joiner's world is the resize's
	var old []derived
	if resizable {
		if old, err = derive(world); err != nil {
			return world, false, err
		}
	}
	for iter < iters {
		cases := fitting(world.Size(), only)
		if len(cases) == 0 {
			return world, false, errors.New("no case to run")
		}
		tc := cases[iter%len(cases)]
		if err := tc.Run(world); err != nil {
			return world, false, fmt.Errorf("iteration %d: %s: %w", iter, tc.Name, err)
		}
		if err := world.Barrier(); err != nil {
			return world, false, fmt.Errorf("iteration %d: %s: barrier after: %w", iter, tc.Name, err)
		}
		iter++
		act, err := solverkit.Boundary(p, iter, world.Rank(), world.Size(), solverkit.Hooks{Name: "suiterun", Pace: pace})
		if leave := act == pcm.Leave; leave || err != nil {
			return world, leave, err
		}
		if act == pcm.Resized {
			if err := revoked(old); err != nil {
				return world, false, fmt.Errorf("iteration %d: %w", iter, err)
			}
			world = p.World()
			if old, err = derive(world); err != nil {
				return world, false, err
			}
			fmt.Printf("rank %d of %d: resized at iteration %d, %d communicators of the old world revoked\n", world.Rank(), world.Size(), iter, len(old))
		}
	}
	return world, false, nil
}

// fitting returns the cases that run on size ranks (and are selected): mpisuite's, then the
// collective checks, so that every call is exercised across migrations and resizes.
func fitting(size int, only func(string) bool) []mpisuite.Case {
	var cases []mpisuite.Case
	all := slices.Clone(mpisuite.Cases)
	for _, ch := range collcheck.Semantics {
		all = append(all, mpisuite.Case{Name: "coll/" + ch.Name, MinRanks: 1, Run: ch.Run})
	}
	for _, tc := range all {
		if size >= tc.MinRanks && (only == nil || only(tc.Name)) {
			cases = append(cases, tc)
		}
	}
	return cases
}

// derived is a communicator made from a world, named by the call that made it.
type derived struct {
	name string
	comm *mpi.Comm
}

// derive makes communicators of every kind from w (collective over w).
func derive(w *mpi.Comm) ([]derived, error) {
	var out []derived
	add := func(name string, c *mpi.Comm, err error) error {
		if err != nil {
			return fmt.Errorf("%s of the world: %w", name, err)
		}
		if c != nil {
			out = append(out, derived{name, c})
		}
		return nil
	}
	d, err := w.Dup()
	if err := add("Dup", d, err); err != nil {
		return nil, err
	}
	s, err := w.Split(w.Rank()%2, -w.Rank())
	if err := add("Split", s, err); err != nil {
		return nil, err
	}
	self, err := w.Split(w.Rank(), 0) // one rank: its calls send nothing
	if err := add("Split of one rank", self, err); err != nil {
		return nil, err
	}
	cart, err := mpi.CartCreate(w, []int{w.Size()}, []bool{true}, true)
	var cc *mpi.Comm
	if cart != nil {
		cc = cart.Comm
	}
	if err := add("CartCreate", cc, err); err != nil {
		return nil, err
	}
	node, err := mpi.CommSplitType(w, mpi.SplitShared, 0)
	if err := add("CommSplitType", node, err); err != nil {
		return nil, err
	}
	g, err := w.Group().Excl([]int{w.Size() - 1})
	if err != nil {
		return nil, err
	}
	if w.Size() == 1 {
		g = w.Group()
	}
	cr, err := mpi.CommCreate(w, g)
	if err := add("CommCreate", cr, err); err != nil {
		return nil, err
	}
	return out, nil
}

// revoked checks that every communicator of a world a resize replaced fails with ErrRevoked,
// in a collective and in a point-to-point call.
func revoked(old []derived) error {
	for _, d := range old {
		buf := []float64{1}
		if err := mpi.Allreduce(d.comm, buf, make([]float64, 1), mpi.Sum); !errors.Is(err, mpi.ErrRevoked) {
			return fmt.Errorf("Allreduce on a %s communicator of the old world after a resize: %v, want ErrRevoked", d.name, err)
		}
		if err := d.comm.Barrier(); !errors.Is(err, mpi.ErrRevoked) {
			return fmt.Errorf("Barrier on a %s communicator of the old world after a resize: %v, want ErrRevoked", d.name, err)
		}
		if err := mpi.Send(d.comm, buf, 0, 1); !errors.Is(err, mpi.ErrRevoked) {
			return fmt.Errorf("Send on a %s communicator of the old world after a resize: %v, want ErrRevoked", d.name, err)
		}
	}
	return nil
}
