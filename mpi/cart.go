package mpi

import (
	"errors"
	"fmt"
	"slices"
)

// Cartesian topologies (MPI_Cart_create and friends). A Cart is a communicator whose ranks are
// laid out on a grid, row-major (the last dimension varies fastest), with each dimension
// periodic or not. It answers "who are my neighbours" (Shift), and its neighbour collectives
// exchange with exactly those ranks, so a halo exchange is one call.

// ErrTopology reports topology arguments that do not fit: dimensions whose product does not
// match, a dimension or coordinate out of range, lengths that disagree.
var ErrTopology = errors.New("mpi: invalid topology")

// Cart is a communicator with a Cartesian topology. It embeds its *Comm: every communicator
// call works on it (pass cart.Comm to the generic functions).
type Cart struct {
	*Comm
	dims    []int
	periods []bool
	coords  []int // of the calling rank
	view    bool  // made by CartView: the communicator is not the Cart's own
}

// Free releases the Cart's communicator (MPI_Comm_free); for a CartView it does nothing, as
// the communicator belongs to the caller.
func (t *Cart) Free() error {
	if t != nil && t.view {
		return nil
	}
	return t.commOrNil().Free()
}

// DimsCreate chooses a balanced grid of nnodes ranks (MPI_Dims_create): the entries of dims
// that are 0 are set, those already positive are kept. The chosen sizes are as close to each
// other as possible (the largest as small as possible, then the smallest as large as possible)
// and in non-increasing order. It fails with ErrTopology if nnodes is not a multiple of the
// product of the fixed entries, or an entry is negative.
func DimsCreate(nnodes int, dims []int) error {
	if nnodes < 1 {
		return fmt.Errorf("mpi: DimsCreate: %w: %d nodes", ErrTopology, nnodes)
	}
	fixed, free := 1, 0
	for i, d := range dims {
		switch {
		case d < 0:
			return fmt.Errorf("mpi: DimsCreate: %w: dims[%d] = %d", ErrTopology, i, d)
		case d == 0:
			free++
		default:
			fixed *= d
		}
	}
	if nnodes%fixed != 0 || (free == 0 && fixed != nnodes) {
		return fmt.Errorf("mpi: DimsCreate: %w: %d nodes do not fill dimensions %v", ErrTopology, nnodes, dims)
	}
	if free == 0 {
		return nil
	}
	best := balancedFactors(nnodes/fixed, free)
	for i := range dims {
		if dims[i] == 0 {
			dims[i], best = best[0], best[1:]
		}
	}
	return nil
}

// balancedFactors splits n into k factors, non-increasing, the largest as small as possible
// and then the smallest as large as possible. It searches the divisors of n only: the largest
// of k factors of m is at least the k-th root of m, which keeps the search small even for
// n of a billion.
func balancedFactors(n, k int) []int {
	var divisors []int // of n, increasing
	var high []int
	for d := 1; d*d <= n; d++ {
		if n%d == 0 {
			divisors = append(divisors, d)
			if d*d != n {
				high = append(high, n/d)
			}
		}
	}
	slices.Reverse(high)
	divisors = append(divisors, high...)
	atLeastRoot := func(d, k, m int) bool { // d^k >= m, without overflow
		p := 1
		for range k {
			if p >= (m+d-1)/d {
				return true
			}
			p *= d
		}
		return p >= m
	}
	var best, cur []int
	var search func(rem, k, limit int)
	search = func(rem, k, limit int) {
		if k == 1 {
			if rem <= limit {
				cand := append(slices.Clone(cur), rem)
				if best == nil || cand[0] < best[0] || (cand[0] == best[0] && rem > best[len(best)-1]) {
					best = cand
				}
			}
			return
		}
		for _, f := range divisors {
			if f > limit || f > rem || (best != nil && len(cur) == 0 && f > best[0]) {
				break
			}
			if rem%f != 0 || !atLeastRoot(f, k, rem) {
				continue
			}
			cur = append(cur, f)
			search(rem/f, k-1, f)
			cur = cur[:len(cur)-1]
		}
	}
	search(n, k, n)
	return best
}

// CartCreate makes a Cartesian communicator of the grid dims over the ranks of c
// (MPI_Cart_create); periods says which dimensions wrap around. The product of dims must not
// exceed c's size; ranks left over get nil. Without reorder, rank i of the grid is rank i of c
// (the first ranks of c make the grid). With reorder, the ranks of one node get consecutive
// grid positions (nodes in the order of their lowest rank in c, and c's order within a node),
// so that more neighbour pairs share a node: with round-robin placement, row-major grid order
// would put every horizontal neighbour on another node. It is collective over c.
func CartCreate(c *Comm, dims []int, periods []bool, reorder bool) (cart *Cart, err error) {
	if t := observe("CartCreate"); t != nil {
		defer func() { t.done(c, -1, 0, err) }()
	}
	if err := c.valid("CartCreate"); err != nil {
		return nil, err
	}
	n, err := gridSize("CartCreate", dims, periods)
	if err != nil {
		return nil, err
	}
	if n > c.Size() {
		return nil, fmt.Errorf("mpi: CartCreate: %w: a grid of %d ranks in a communicator of %d", ErrTopology, n, c.Size())
	}
	pos := c.Rank()
	if reorder {
		nodes, err := nodeColors(c)
		if err != nil {
			return nil, fmt.Errorf("mpi: CartCreate: %w", err)
		}
		pos = nodeOrder(nodes)[c.Rank()]
	}
	color := 0
	if pos >= n {
		color = Undefined
	}
	sub, err := c.Split(color, pos)
	if err != nil || sub == nil {
		return nil, err
	}
	return newCart(sub, slices.Clone(dims), slices.Clone(periods)), nil
}

// nodeOrder returns the grid position of every rank for CartCreate's reorder: ranks sorted
// by node (nodes[r] is the lowest rank on r's node, so nodes come in the order of their first
// rank), by rank within a node.
func nodeOrder(nodes []int) []int {
	ranks := make([]int, len(nodes))
	for r := range ranks {
		ranks[r] = r
	}
	slices.SortStableFunc(ranks, func(a, b int) int { return nodes[a] - nodes[b] })
	pos := make([]int, len(nodes))
	for i, r := range ranks {
		pos[r] = i
	}
	return pos
}

// CartView lays all of c's ranks out on the grid dims, in c's order, without making a new
// communicator: the Cart shares c's context (a message sent on one matches receives on the
// other, as on one communicator) and creating it involves no communication. The product of
// dims must equal c's size. It is the topology for programs that must recreate it alone: a
// successor process of a migration makes the same view of its new world, where CartCreate,
// being collective, would wait for ranks that are not calling it.
func CartView(c *Comm, dims []int, periods []bool) (*Cart, error) {
	if err := c.valid("CartView"); err != nil {
		return nil, err
	}
	n, err := gridSize("CartView", dims, periods)
	if err != nil {
		return nil, err
	}
	if n != c.Size() {
		return nil, fmt.Errorf("mpi: CartView: %w: a grid of %d ranks over a communicator of %d", ErrTopology, n, c.Size())
	}
	t := newCart(c, slices.Clone(dims), slices.Clone(periods))
	t.view = true
	return t, nil
}

func gridSize(op string, dims []int, periods []bool) (int, error) {
	if len(periods) != len(dims) {
		return 0, fmt.Errorf("mpi: %s: %w: %d periods for %d dimensions", op, ErrTopology, len(periods), len(dims))
	}
	n := 1
	for i, d := range dims {
		if d < 1 {
			return 0, fmt.Errorf("mpi: %s: %w: dims[%d] = %d", op, ErrTopology, i, d)
		}
		n *= d
	}
	return n, nil
}

func newCart(c *Comm, dims []int, periods []bool) *Cart {
	t := &Cart{Comm: c, dims: dims, periods: periods}
	t.coords = t.coordsOf(c.Rank())
	return t
}

// Dims returns the size of each dimension (MPI_Cart_get).
func (t *Cart) Dims() []int { return slices.Clone(t.dims) }

// Periods returns which dimensions wrap around (MPI_Cart_get).
func (t *Cart) Periods() []bool { return slices.Clone(t.periods) }

// Ndims returns the number of dimensions (MPI_Cartdim_get).
func (t *Cart) Ndims() int { return len(t.dims) }

// Coords returns the grid coordinates of rank (MPI_Cart_coords).
func (t *Cart) Coords(rank int) ([]int, error) {
	if rank < 0 || rank >= t.Size() {
		return nil, fmt.Errorf("mpi: Coords: %w: %d not in [0,%d)", ErrRank, rank, t.Size())
	}
	return t.coordsOf(rank), nil
}

func (t *Cart) coordsOf(rank int) []int {
	coords := make([]int, len(t.dims))
	for i := len(t.dims) - 1; i >= 0; i-- {
		coords[i] = rank % t.dims[i]
		rank /= t.dims[i]
	}
	return coords
}

// RankOf returns the rank at coords (MPI_Cart_rank). A coordinate outside a periodic
// dimension wraps around; outside a non-periodic one it fails with ErrTopology.
func (t *Cart) RankOf(coords []int) (int, error) {
	if len(coords) != len(t.dims) {
		return 0, fmt.Errorf("mpi: RankOf: %w: %d coordinates for %d dimensions", ErrTopology, len(coords), len(t.dims))
	}
	rank := 0
	for i, x := range coords {
		d := t.dims[i]
		if x < 0 || x >= d {
			if !t.periods[i] {
				return 0, fmt.Errorf("mpi: RankOf: %w: coordinate %d of dimension %d not in [0,%d)", ErrTopology, x, i, d)
			}
			x = ((x % d) + d) % d
		}
		rank = rank*d + x
	}
	return rank, nil
}

// Shift returns the ranks disp steps away along dimension dim (MPI_Cart_shift): source is the
// rank that sends to the caller in a shift by disp, dest the rank the caller sends to. Beyond
// the edge of a non-periodic dimension they are ProcNull, so a halo exchange needs no special
// case at the boundary:
//
//	down, up := cart.Shift(0, 1)
//	mpi.Sendrecv(cart.Comm, lastRow, up, 0, ghostBelow, down, 0)
func (t *Cart) Shift(dim, disp int) (source, dest int, err error) {
	if dim < 0 || dim >= len(t.dims) {
		return 0, 0, fmt.Errorf("mpi: Shift: %w: dimension %d not in [0,%d)", ErrTopology, dim, len(t.dims))
	}
	return t.neighbor(dim, -disp), t.neighbor(dim, disp), nil
}

// neighbor returns the rank disp steps along dim from the caller, or ProcNull.
func (t *Cart) neighbor(dim, disp int) int {
	coords := slices.Clone(t.coords)
	coords[dim] += disp
	r, err := t.RankOf(coords)
	if err != nil {
		return ProcNull
	}
	return r
}

// Sub partitions the grid into lower-dimensional grids (MPI_Cart_sub): the dimensions with
// remain set are kept, ranks that agree on the coordinates of the others form one new Cart.
// With remain all false, every rank gets a grid of itself alone. It is collective.
func (t *Cart) Sub(remain []bool) (sub *Cart, err error) {
	if tr := observe("CartSub"); tr != nil {
		defer func() { tr.done(t.Comm, -1, 0, err) }()
	}
	if err := t.valid("Sub"); err != nil {
		return nil, err
	}
	if len(remain) != len(t.dims) {
		return nil, fmt.Errorf("mpi: Sub: %w: %d flags for %d dimensions", ErrTopology, len(remain), len(t.dims))
	}
	color, key := 0, 0
	var dims []int
	var periods []bool
	for i, keep := range remain {
		if keep {
			key = key*t.dims[i] + t.coords[i]
			dims, periods = append(dims, t.dims[i]), append(periods, t.periods[i])
		} else {
			color = color*t.dims[i] + t.coords[i]
		}
	}
	c, err := t.Split(color, key)
	if err != nil {
		return nil, fmt.Errorf("mpi: Sub: %w", err)
	}
	return newCart(c, dims, periods), nil
}

// tagNeighbor is the first tag of the neighbour collectives on the collective context, far
// from the other collectives' tags: a message moving to lower coordinates along dimension d
// has tag tagNeighbor+2d, one moving to higher coordinates tagNeighbor+2d+1, so that the two
// neighbours of a periodic dimension of size 2 (the same rank) stay apart.
const tagNeighbor = 1 << 20

// NeighborAllgather sends send to every neighbour of the grid and receives theirs
// (MPI_Neighbor_allgather): recv holds 2·Ndims blocks of len(send) elements, for each
// dimension first the neighbour at -1 then the one at +1. The blocks of missing neighbours
// (beyond a non-periodic edge) are left untouched. It is collective over the Cart.
func NeighborAllgather[T Elem](t *Cart, send, recv []T) (err error) {
	if tr := observe("NeighborAllgather"); tr != nil {
		defer func() { tr.done(t.commOrNil(), -1, 2*t.Ndims()*len(send)*sizeOf[T](), err) }()
	}
	if err := t.validCart("NeighborAllgather"); err != nil {
		return err
	}
	n := len(send)
	var lerr error
	if len(recv) != 2*len(t.dims)*n {
		lerr = fmt.Errorf("mpi: NeighborAllgather: %w: recv has %d elements, want %d blocks of %d", ErrCount, len(recv), 2*len(t.dims), n)
	}
	return neighborExchange(t, "NeighborAllgather", n, lerr,
		func(int) []T { return send }, func(i int) []T { return recv[i*n : (i+1)*n] })
}

// NeighborAlltoall sends a distinct block to each neighbour and receives one from each
// (MPI_Neighbor_alltoall): send and recv hold 2·Ndims blocks of the same length, ordered as in
// NeighborAllgather. Block 2d of send goes to the neighbour at -1 along dimension d, whose
// block 2d+1 of recv receives it. It is collective over the Cart.
func NeighborAlltoall[T Elem](t *Cart, send, recv []T) (err error) {
	if tr := observe("NeighborAlltoall"); tr != nil {
		defer func() { tr.done(t.commOrNil(), -1, len(send)*sizeOf[T](), err) }()
	}
	if err := t.validCart("NeighborAlltoall"); err != nil {
		return err
	}
	k := 2 * len(t.dims)
	var n int
	var lerr error
	if k > 0 {
		n = len(send) / k
	}
	if len(send) != len(recv) || (k > 0 && len(send)%k != 0) || (k == 0 && len(send) != 0) {
		lerr = fmt.Errorf("mpi: NeighborAlltoall: %w: send %d and recv %d elements, want equal multiples of %d blocks", ErrCount, len(send), len(recv), k)
	}
	return neighborExchange(t, "NeighborAlltoall", n, lerr,
		func(i int) []T { return send[i*n : (i+1)*n] }, func(i int) []T { return recv[i*n : (i+1)*n] })
}

func (t *Cart) commOrNil() *Comm {
	if t == nil {
		return nil
	}
	return t.Comm
}

func (t *Cart) validCart(op string) error {
	if t == nil {
		return fmt.Errorf("mpi: %s: %w: nil", op, ErrComm)
	}
	return t.valid(op)
}

// neighborExchange posts a receive from and a send to both neighbours along every dimension,
// blocks of n elements, and waits for all of them. A rank whose own arguments are wrong
// (lerr) still takes part, sending empty blocks and draining what it receives, so that its
// neighbours fail with ErrCount instead of waiting for it forever.
func neighborExchange[T Elem](t *Cart, op string, n int, lerr error, sendBlock, recvBlock func(i int) []T) error {
	c := t.Comm
	c.afterNonblocking() // the collective context keeps the order collectives were started in
	ctx := c.ctx + 1
	elem, esize := elemCode[T](), sizeOf[T]()
	reqs := make([]*Request, 0, 4*len(t.dims))
	var first error
	keep := func(err error) {
		if err != nil && first == nil {
			first = fmt.Errorf("mpi: %s: %w", op, err)
		}
	}
	for d := range t.dims {
		lower, higher := t.neighbor(d, -1), t.neighbor(d, 1)
		// Block 2d comes from the lower neighbour, moving up; block 2d+1 from the higher one.
		for i, from := range [2]int{lower, higher} {
			tag := tagNeighbor + 2*d + 1 - i
			var r *Request
			var err error
			if lerr != nil {
				r, err = c.irecv(op, ctx, nil, elem, esize, from, tag, true)
			} else {
				r, err = c.irecv(op, ctx, asBytes(recvBlock(2*d+i)), elem, esize, from, tag, false)
			}
			keep(err)
			reqs = append(reqs, r)
		}
	}
	for d := range t.dims {
		lower, higher := t.neighbor(d, -1), t.neighbor(d, 1)
		for i, to := range [2]int{lower, higher} {
			var buf []byte
			if lerr == nil {
				buf = asBytes(sendBlock(2*d + i))
			}
			r, err := c.startSend(op, ctx, buf, elem, to, tagNeighbor+2*d+i)
			keep(err)
			reqs = append(reqs, r)
		}
	}
	for i, r := range reqs {
		st, err := r.wait()
		keep(err)
		if i < 2*len(t.dims) && err == nil && lerr == nil && st.Source != ProcNull && st.Count != n {
			keep(fmt.Errorf("%w: neighbour %d sent %d elements, want %d", ErrCount, st.Source, st.Count, n))
		}
	}
	if lerr != nil {
		return lerr
	}
	return first
}
