// suiterun runs the mpisuite cases in a real multi-process job:
//
//	suiterun [CASE...]   every case (or the named ones); each rank prints "rank R of P ok"
package main

import (
	"fmt"
	"os"
	"slices"

	"github.com/mpios/mpios/internal/mpisuite"
	"github.com/mpios/mpios/mpi"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "suiterun:", err)
		os.Exit(1)
	}
}

func run(names []string) error {
	c, err := mpi.Init()
	if err != nil {
		return err
	}
	var only func(string) bool
	if len(names) > 0 {
		only = func(name string) bool { return slices.Contains(names, name) }
	}
	if err := mpisuite.RunAll(c, only); err != nil {
		return fmt.Errorf("rank %d: %w", c.Rank(), err)
	}
	fmt.Printf("rank %d of %d ok\n", c.Rank(), c.Size())
	return mpi.Finalize()
}
