package mpisuite

import (
	"errors"
	"fmt"
	"slices"

	"github.com/mpios/mpios/mpi"
)

// Cartesian topologies (MPICH topo dims, cartcreates, cartshift, cartsuball, neighb_coll).
func init() {
	register(
		Case{"dims", 1, dimsCreate},
		Case{"cartcreates", 2, cartCreates},
		Case{"cartshift", 2, cartShift},
		Case{"cartsuball", 2, cartSubAll},
		Case{"neighb_coll", 2, neighborCollectives},
	)
}

// dimsCreate: balanced, non-increasing grids; fixed entries are kept; impossible requests fail.
func dimsCreate(*mpi.Comm) error {
	cases := []struct {
		n          int
		dims, want []int
	}{
		{6, []int{0, 0}, []int{3, 2}},
		{12, []int{0, 0, 0}, []int{3, 2, 2}},
		{24, []int{0, 0, 0}, []int{4, 3, 2}},
		{16, []int{0, 0, 0}, []int{4, 2, 2}},
		{7, []int{0, 0}, []int{7, 1}},
		{1, []int{0, 0, 0}, []int{1, 1, 1}},
		{12, []int{0, 3, 0}, []int{2, 3, 2}},
		{8, []int{2, 4}, []int{2, 4}},
		{36, []int{0, 0}, []int{6, 6}},
		{5, []int{0}, []int{5}},
		{1000 * 1000 * 1000, []int{0, 0, 0}, []int{1000, 1000, 1000}},
		{32, []int{0, 32}, []int{1, 32}},
		{2 * 3 * 5 * 7 * 11 * 13, []int{0, 0, 0, 0}, []int{15, 14, 13, 11}},
		{1 << 20, []int{0, 0, 0, 0, 0, 0, 0}, []int{8, 8, 8, 8, 8, 8, 4}},
	}
	for _, tc := range cases {
		got := slices.Clone(tc.dims)
		if err := mpi.DimsCreate(tc.n, got); err != nil || !slices.Equal(got, tc.want) {
			return fmt.Errorf("DimsCreate(%d, %v) = %v, %v; want %v", tc.n, tc.dims, got, err, tc.want)
		}
	}
	for _, bad := range []struct {
		n    int
		dims []int
	}{{10, []int{3, 0}}, {6, []int{2, 2}}, {0, []int{0}}, {4, []int{-1, 0}}} {
		if err := mpi.DimsCreate(bad.n, bad.dims); !errors.Is(err, mpi.ErrTopology) {
			return fmt.Errorf("DimsCreate(%d, %v): %v, want ErrTopology", bad.n, bad.dims, err)
		}
	}
	return nil
}

// cartCreates: for 1-, 2- and 3-D grids over the balanced dims of the size, periodic or not,
// coordinates and ranks convert both ways, and every rank agrees with its neighbours.
func cartCreates(c *mpi.Comm) error {
	p := c.Size()
	for ndims := 1; ndims <= 3; ndims++ {
		for _, periodic := range []bool{false, true} {
			dims := make([]int, ndims)
			if err := mpi.DimsCreate(p, dims); err != nil {
				return err
			}
			periods := make([]bool, ndims)
			for i := range periods {
				periods[i] = periodic && i%2 == 0
			}
			cart, err := mpi.CartCreate(c, dims, periods, true)
			if err != nil {
				return err
			}
			if err := check(cart.Size() == p && slices.Equal(cart.Dims(), dims) && slices.Equal(cart.Periods(), periods), "cart %v %v: size %d", cart.Dims(), cart.Periods(), cart.Size()); err != nil {
				return err
			}
			for r := 0; r < p; r++ {
				coords, err := cart.Coords(r)
				if err != nil {
					return err
				}
				back, err := cart.RankOf(coords)
				if err != nil || back != r {
					return fmt.Errorf("dims %v: RankOf(Coords(%d) = %v) = %d, %v", dims, r, coords, back, err)
				}
			}
			// Row-major: the last coordinate varies fastest.
			if coords, _ := cart.Coords(1); ndims > 0 && dims[ndims-1] > 1 && coords[ndims-1] != 1 {
				return fmt.Errorf("dims %v: rank 1 at %v, want the last coordinate 1", dims, coords)
			}
			// Wrapping: a periodic coordinate outside the grid wraps, a non-periodic one fails.
			for i := range dims {
				coords := make([]int, ndims)
				coords[i] = dims[i]
				r, err := cart.RankOf(coords)
				if periods[i] {
					if err != nil || r != 0 {
						return fmt.Errorf("dims %v: wrapped RankOf(%v) = %d, %v", dims, coords, r, err)
					}
				} else if !errors.Is(err, mpi.ErrTopology) {
					return fmt.Errorf("dims %v: RankOf(%v) outside a non-periodic dimension: %v", dims, coords, err)
				}
			}
			if err := cart.Free(); err != nil {
				return err
			}
		}
	}
	if err := reorderedByNode(c); err != nil {
		return err
	}
	// A grid smaller than the communicator leaves the last ranks out.
	small, err := mpi.CartCreate(c, []int{p - 1}, []bool{false}, false)
	if err != nil {
		return err
	}
	if err := check((small == nil) == (c.Rank() == p-1), "rank %d of a %d-rank grid: %v", c.Rank(), p-1, small); err != nil {
		return err
	}
	if _, err := mpi.CartCreate(c, []int{p + 1}, []bool{false}, false); !errors.Is(err, mpi.ErrTopology) {
		return fmt.Errorf("a grid larger than the communicator: %v", err)
	}
	return nil
}

// reorderedByNode: CartCreate with reorder gives the ranks of this rank's node (as
// CommSplitType sees it) consecutive grid ranks, in c's order.
func reorderedByNode(c *mpi.Comm) error {
	node, err := mpi.CommSplitType(c, mpi.SplitShared, 0)
	if err != nil {
		return err
	}
	cart, err := mpi.CartCreate(c, []int{c.Size()}, []bool{false}, true)
	if err != nil {
		return err
	}
	members := make([]int, node.Size())
	for i := range members {
		members[i] = i
	}
	inC, err := node.Group().TranslateRanks(members, c.Group())
	if err != nil {
		return err
	}
	slices.Sort(inC)
	inCart, err := c.Group().TranslateRanks(inC, cart.Group())
	if err != nil {
		return err
	}
	for i := range inCart {
		if inCart[i] != inCart[0]+i {
			return fmt.Errorf("reordered grid: the ranks %v of this node are grid ranks %v, want consecutive", inC, inCart)
		}
	}
	return cart.Free()
}

// cartShift: on a periodic ring every rank's destination names it as source; on a chain the
// ends have ProcNull; a Sendrecv over the shift moves every rank's value one step.
func cartShift(c *mpi.Comm) error {
	p, r := c.Size(), c.Rank()
	for _, periodic := range []bool{true, false} {
		cart, err := mpi.CartCreate(c, []int{p}, []bool{periodic}, false)
		if err != nil {
			return err
		}
		for _, disp := range []int{1, 2, -1} {
			src, dst, err := cart.Shift(0, disp)
			if err != nil {
				return err
			}
			wantSrc, wantDst := r-disp, r+disp
			if periodic {
				wantSrc, wantDst = ((wantSrc%p)+p)%p, ((wantDst%p)+p)%p
			} else {
				if wantSrc < 0 || wantSrc >= p {
					wantSrc = mpi.ProcNull
				}
				if wantDst < 0 || wantDst >= p {
					wantDst = mpi.ProcNull
				}
			}
			if src != wantSrc || dst != wantDst {
				return fmt.Errorf("periodic=%v Shift(0, %d) = %d, %d; want %d, %d", periodic, disp, src, dst, wantSrc, wantDst)
			}
			in := []int{-1}
			st, err := mpi.Sendrecv(cart.Comm, []int{r}, dst, 0, in, src, 0)
			if err != nil {
				return err
			}
			if src != mpi.ProcNull && (in[0] != src || st.Source != src) {
				return fmt.Errorf("shift by %d: got %d from %d, want from %d", disp, in[0], st.Source, src)
			}
		}
		if _, _, err := cart.Shift(1, 1); !errors.Is(err, mpi.ErrTopology) {
			return fmt.Errorf("Shift along a missing dimension: %v", err)
		}
	}
	return nil
}

// cartSubAll: keeping every dimension gives the same grid; keeping none gives each rank alone;
// keeping one dimension of a 2-D grid gives its rows, numbered along the row.
func cartSubAll(c *mpi.Comm) error {
	p, r := c.Size(), c.Rank()
	dims := []int{0, 0}
	if err := mpi.DimsCreate(p, dims); err != nil {
		return err
	}
	cart, err := mpi.CartCreate(c, dims, []bool{true, false}, false)
	if err != nil {
		return err
	}
	all, err := cart.Sub([]bool{true, true})
	if err != nil {
		return err
	}
	if err := check(all.Size() == p && all.Rank() == r && slices.Equal(all.Dims(), dims), "Sub(all): size %d rank %d dims %v", all.Size(), all.Rank(), all.Dims()); err != nil {
		return err
	}
	none, err := cart.Sub([]bool{false, false})
	if err != nil {
		return err
	}
	if err := check(none.Size() == 1 && none.Rank() == 0 && none.Ndims() == 0, "Sub(none): size %d ndims %d", none.Size(), none.Ndims()); err != nil {
		return err
	}
	rows, err := cart.Sub([]bool{false, true})
	if err != nil {
		return err
	}
	coords, _ := cart.Coords(r)
	if err := check(rows.Size() == dims[1] && rows.Rank() == coords[1] && !rows.Periods()[0], "row: size %d rank %d, want %d %d", rows.Size(), rows.Rank(), dims[1], coords[1]); err != nil {
		return err
	}
	// The members of a row are the ranks with the same first coordinate.
	sum := []int{0}
	if err := mpi.Allreduce(rows.Comm, []int{r}, sum, mpi.Sum); err != nil {
		return err
	}
	want := 0
	for j := 0; j < dims[1]; j++ {
		want += coords[0]*dims[1] + j
	}
	return check(sum[0] == want, "row %d: sum of world ranks %d, want %d", coords[0], sum[0], want)
}

// neighborCollectives: on 1-D and 2-D grids, periodic or not, each block comes from the
// neighbour it names; blocks of missing neighbours are untouched; a wrong length fails on the
// caller and its neighbours instead of hanging.
func neighborCollectives(c *mpi.Comm) error {
	p := c.Size()
	for _, shape := range [][]int{{p}, {0, 0}} {
		dims := slices.Clone(shape)
		if err := mpi.DimsCreate(p, dims); err != nil {
			return err
		}
		for _, periodic := range []bool{false, true} {
			periods := make([]bool, len(dims))
			for i := range periods {
				periods[i] = periodic
			}
			cart, err := mpi.CartCreate(c, dims, periods, false)
			if err != nil {
				return err
			}
			if err := checkNeighbors(cart); err != nil {
				return fmt.Errorf("dims %v periodic %v: %w", dims, periodic, err)
			}
			// The same grid as a view of c: no new communicator, the same neighbours.
			view, err := mpi.CartView(c, dims, periods)
			if err != nil {
				return err
			}
			if err := checkNeighbors(view); err != nil {
				return fmt.Errorf("view %v periodic %v: %w", dims, periodic, err)
			}
			if err := view.Free(); err != nil || view.Compare(c) != mpi.Ident || c.Barrier() != nil {
				return fmt.Errorf("a view's Free freed its communicator (%v)", err)
			}
		}
	}
	if _, err := mpi.CartView(c, []int{p + 1}, []bool{false}); !errors.Is(err, mpi.ErrTopology) {
		return fmt.Errorf("a view larger than the communicator: %v", err)
	}
	return nil
}

func checkNeighbors(cart *mpi.Cart) error {
	r, k := cart.Rank(), 2*cart.Ndims()
	for _, n := range []int{2, 9000} { // eager and rendezvous blocks
		send := make([]int32, n)
		for i := range send {
			send[i] = int32(r*100000 + i)
		}
		recv := make([]int32, k*n)
		for i := range recv {
			recv[i] = -7
		}
		if err := mpi.NeighborAllgather(cart, send, recv); err != nil {
			return err
		}
		// Alltoall: block b carries (sender, b).
		send2 := make([]int32, k*n)
		for b := 0; b < k; b++ {
			for i := 0; i < n; i++ {
				send2[b*n+i] = int32(r*100 + b)
			}
		}
		recv2 := make([]int32, k*n)
		if err := mpi.NeighborAlltoall(cart, send2, recv2); err != nil {
			return err
		}
		for d := 0; d < cart.Ndims(); d++ {
			src, dst, _ := cart.Shift(d, 1)
			for side, nb := range []int{src, dst} {
				b := 2*d + side
				got := recv[b*n : (b+1)*n]
				if nb == mpi.ProcNull {
					if got[0] != -7 || got[n-1] != -7 {
						return fmt.Errorf("allgather block %d of a missing neighbour overwritten", b)
					}
					continue
				}
				if got[0] != int32(nb*100000) || got[n-1] != int32(nb*100000+n-1) {
					return fmt.Errorf("allgather block %d = %d..., want from rank %d", b, got[0], nb)
				}
				// The lower neighbour sent me its block for its higher neighbour, and back.
				wantBlock := 2*d + 1 - side
				if v := recv2[b*n]; v != int32(nb*100+wantBlock) {
					return fmt.Errorf("alltoall block %d = %d, want rank %d's block %d", b, v, nb, wantBlock)
				}
			}
		}
	}
	// A rank with a wrong receive length fails with ErrCount, and so do its neighbours (or
	// they complete): nobody waits forever.
	recv := make([]int32, 2*cart.Ndims())
	if r == 0 {
		recv = recv[:1]
	}
	err := mpi.NeighborAllgather(cart, []int32{int32(r)}, recv)
	if r == 0 && !errors.Is(err, mpi.ErrCount) {
		return fmt.Errorf("wrong length: %v, want ErrCount", err)
	}
	if err != nil && !errors.Is(err, mpi.ErrCount) {
		return fmt.Errorf("neighbour of a wrong length: %v, want ErrCount", err)
	}
	return nil
}
