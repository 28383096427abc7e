package mpi_test

import (
	"fmt"
	"testing"

	"github.com/mpios/mpios/internal/mpisuite"
	"github.com/mpios/mpios/internal/mpitest"
	"github.com/mpios/mpios/mpi"
)

// TestMPICHSemantics runs the ported MPICH test/mpi cases (package mpisuite) on goroutine
// ranks, 2 to 5 of them, over both transports; internal/mpisuite runs them as processes.
func TestMPICHSemantics(t *testing.T) {
	for _, tc := range mpisuite.Cases {
		t.Run(tc.Name, func(t *testing.T) {
			for np := max(2, tc.MinRanks); np <= 5; np++ {
				for _, tr := range transports {
					t.Run(fmt.Sprintf("np%d/%v", np, tr), func(t *testing.T) {
						mpitest.Run(t, tr, np, func(c *mpi.Comm) error { return tc.Run(c) })
					})
				}
			}
		})
	}
}

// TestCommSplitTypeOneMachine: goroutine ranks, over the in-process transport or TCP on
// loopback, all share one node.
func TestCommSplitTypeOneMachine(t *testing.T) {
	forEach(t, 3, func(c *mpi.Comm) error {
		node, err := mpi.CommSplitType(c, mpi.SplitShared, 0)
		if err != nil {
			return err
		}
		if node.Size() != c.Size() || node.Compare(c) != mpi.Congruent {
			return fmt.Errorf("node communicator of %d ranks (%v), want all %d", node.Size(), node.Compare(c), c.Size())
		}
		return nil
	})
}
