// Package mpisuite holds the semantics of MPICH's test/mpi programs (pt2pt, comm, topo),
// ported to the mpi API as cases that every rank of a communicator runs. The mpi package's
// tests run them on goroutine ranks; this package's tests run them as real processes through
// mpirun on 2 to 5 ranks (testdata/suiterun).
package mpisuite

import (
	"fmt"

	"github.com/mpios/mpios/mpi"
)

// Case is one ported test program: Run is called on every rank of a communicator of at least
// MinRanks ranks and returns an error naming what did not hold.
type Case struct {
	Name     string
	MinRanks int
	Run      func(c *mpi.Comm) error
}

// Cases lists every case, in the order suiterun runs them.
var Cases []Case

func register(cs ...Case) { Cases = append(Cases, cs...) }

// RunAll runs every case that fits c's size, in order, separated by barriers so that a case's
// stray message cannot satisfy the next one's receive unnoticed.
func RunAll(c *mpi.Comm, only func(name string) bool) error {
	for _, tc := range Cases {
		if c.Size() < tc.MinRanks || (only != nil && !only(tc.Name)) {
			continue
		}
		if err := tc.Run(c); err != nil {
			return fmt.Errorf("%s: %w", tc.Name, err)
		}
		if err := c.Barrier(); err != nil {
			return fmt.Errorf("%s: barrier after: %w", tc.Name, err)
		}
	}
	return nil
}

func check(cond bool, format string, a ...any) error {
	if !cond {
		return fmt.Errorf(format, a...)
	}
	return nil
}

// fill returns n values that identify their sender, iteration and position.
func fill(n, rank, iter int) []float64 {
	s := make([]float64, n)
	for i := range s {
		s[i] = float64(rank*1000003 + iter*101 + i)
	}
	return s
}

func sameAs(got, want []float64) error {
	if len(got) != len(want) {
		return fmt.Errorf("%d values, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			return fmt.Errorf("value %d = %v, want %v", i, got[i], want[i])
		}
	}
	return nil
}
