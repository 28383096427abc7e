package mpi_test

import (
	"fmt"
	"testing"

	"github.com/mpios/mpios/internal/collcheck"
	"github.com/mpios/mpios/internal/mpitest"
)

// runChecks runs each check on 1 to 5 goroutine ranks, and on 4 over TCP. internal/e2e runs the
// same checks as processes through mpirun.
func runChecks(t *testing.T, checks []collcheck.Check) {
	for _, ch := range checks {
		t.Run(ch.Name, func(t *testing.T) {
			for n := 1; n <= 5; n++ {
				t.Run(fmt.Sprintf("np%d", n), func(t *testing.T) { mpitest.Run(t, mpitest.InProc, n, ch.Run) })
			}
			t.Run("tcp-np4", func(t *testing.T) { mpitest.Run(t, mpitest.TCP, 4, ch.Run) })
		})
	}
}

func TestCollectiveWithBuffersThatDoNotFitFailsOnEveryRankThatSeesItAndBlocksNone(t *testing.T) {
	runChecks(t, collcheck.Misfits)
}

func TestCollectiveSemanticsOfMPICHCollTests(t *testing.T) {
	runChecks(t, collcheck.Semantics)
}
