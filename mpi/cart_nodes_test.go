package mpi_test

import (
	"fmt"
	"testing"

	"github.com/mpios/mpios/internal/mpisuite"
	"github.com/mpios/mpios/internal/mpitest"
	"github.com/mpios/mpios/mpi"
)

// Six TCP ranks dealt round-robin over two loopback addresses (two nodes for mpi): CartCreate
// with reorder puts ranks 0, 2, 4 (node 127.0.0.1) at grid ranks 0-2 and ranks 1, 3, 5 at 3-5,
// so a 2x3 grid has one node per row; without reorder the grid keeps the ranks' order. The
// ported topology and split-type cases hold there too.
func TestCartCreateReorderAcrossTwoNodes(t *testing.T) {
	hosts := []string{"127.0.0.1", "127.0.0.2", "127.0.0.1", "127.0.0.2", "127.0.0.1", "127.0.0.2"}
	mpitest.RunEndpoints(t, mpitest.EndpointsOnHosts(t, hosts), func(c *mpi.Comm) error {
		r := c.Rank()
		node, err := mpi.CommSplitType(c, mpi.SplitShared, 0)
		if err != nil {
			return err
		}
		if node.Size() != 3 {
			return fmt.Errorf("node of %d ranks, want 3", node.Size())
		}
		cart, err := mpi.CartCreate(c, []int{2, 3}, []bool{false, false}, true)
		if err != nil {
			return err
		}
		if want := r/2 + 3*(r%2); cart.Rank() != want {
			return fmt.Errorf("rank %d is grid rank %d, want %d", r, cart.Rank(), want)
		}
		// Every row neighbour is on this rank's node.
		src, dst, err := cart.Shift(1, 1)
		if err != nil {
			return err
		}
		for _, q := range []int{src, dst} {
			if q == mpi.ProcNull {
				continue
			}
			w := cart.Group().WorldRank(q)
			if hosts[w] != hosts[r] {
				return fmt.Errorf("row neighbour %d (rank %d) on %s, this rank on %s", q, w, hosts[w], hosts[r])
			}
		}
		plain, err := mpi.CartCreate(c, []int{2, 3}, []bool{false, false}, false)
		if err != nil {
			return err
		}
		if plain.Rank() != r {
			return fmt.Errorf("without reorder rank %d is grid rank %d", r, plain.Rank())
		}
		for _, tc := range mpisuite.Cases {
			if tc.Name == "cartcreates" || tc.Name == "cmsplit_type" || tc.Name == "neighb_coll" {
				if err := tc.Run(c); err != nil {
					return fmt.Errorf("%s: %w", tc.Name, err)
				}
			}
		}
		return nil
	})
}
