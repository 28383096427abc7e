// collcheck runs the checks of internal/collcheck in a real multi-process job:
//
//	collcheck NAME...   the named checks, in order ("semantics" and "misfits" name groups)
//
// Every rank prints "rank R of P ok" when all passed; otherwise it prints the first failure
// and exits 1.
package main

import (
	"fmt"
	"os"

	"github.com/mpios/mpios/internal/collcheck"
	"github.com/mpios/mpios/mpi"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "collcheck:", err)
		os.Exit(1)
	}
}

func run(names []string) error {
	var checks []collcheck.Check
	for _, name := range names {
		switch name {
		case "semantics":
			checks = append(checks, collcheck.Semantics...)
		case "misfits":
			checks = append(checks, collcheck.Misfits...)
		default:
			ch, ok := collcheck.Find(name)
			if !ok {
				return fmt.Errorf("unknown check %q", name)
			}
			checks = append(checks, ch)
		}
	}
	c, err := mpi.Init()
	if err != nil {
		return err
	}
	for _, ch := range checks {
		if err := ch.Run(c); err != nil {
			return fmt.Errorf("rank %d: %s: %w", c.Rank(), ch.Name, err)
		}
	}
	fmt.Printf("rank %d of %d ok\n", c.Rank(), c.Size())
	return mpi.Finalize()
}
