package main

import (
	"fmt"

	"github.com/mpios/mpios/internal/solverkit"
	"github.com/mpios/mpios/mpi"
)

// blocks2D is the 2-D decomposition (-decomp 2d): the ranks form a balanced grid of
// dims[0] x dims[1] (non-periodic: the domain has fixed boundaries), and each owns a block of
// rows x cols interior cells. The grid is a view of the world communicator, made without
// communication, so a process that takes over a migrated rank makes it again on its own.
type blocks2D struct {
	cart       *mpi.Cart
	n          int
	coords     []int
	rows, cols int
	// Neighbours; mpi.ProcNull beyond the domain's edges.
	north, south, west, east int
	// Packed ghost columns: a column of the row-major block is strided.
	column             mpi.Vector
	sendCol, recvCol   []float64
	sendColE, recvColE []float64
}

func newBlocks2D(world *mpi.Comm, n int) (*blocks2D, error) {
	dims := []int{0, 0}
	if err := mpi.DimsCreate(world.Size(), dims); err != nil {
		return nil, err
	}
	if n < dims[0] || n < dims[1] {
		// Every rank needs at least one row and one column.
		return nil, fmt.Errorf("-n %d is too small for a %d x %d grid of ranks", n, dims[0], dims[1])
	}
	cart, err := mpi.CartView(world, dims, []bool{false, false})
	if err != nil {
		return nil, err
	}
	b := &blocks2D{cart: cart, n: n}
	if b.coords, err = cart.Coords(cart.Rank()); err != nil {
		return nil, err
	}
	_, b.rows = solverkit.BlockRange(n, dims[0], b.coords[0])
	_, b.cols = solverkit.BlockRange(n, dims[1], b.coords[1])
	if b.north, b.south, err = cart.Shift(0, 1); err != nil {
		return nil, err
	}
	if b.west, b.east, err = cart.Shift(1, 1); err != nil {
		return nil, err
	}
	b.column = mpi.Column(b.rows, b.cols+2)
	b.sendCol, b.recvCol = make([]float64, b.rows), make([]float64, b.rows)
	b.sendColE, b.recvColE = make([]float64, b.rows), make([]float64, b.rows)
	return b, nil
}

// exchange fills the ghost rows and columns of u from the four neighbours. Corner ghost cells
// are never read by the 5-point stencil and are not exchanged.
func (b *blocks2D) exchange(u []float64) error {
	if err := exchange(b.cart.Comm, u, b.rows, b.cols, b.north, b.south); err != nil {
		return err
	}
	w := b.cols + 2
	firstCol, lastCol := u[w+1:], u[w+b.cols:]
	ghostWest, ghostEast := u[w:], u[w+b.cols+1:]
	if err := b.shiftColumn(firstCol, b.west, ghostEast, b.east, tagToWest, b.sendCol, b.recvCol); err != nil {
		return fmt.Errorf("halo exchange (westwards): %w", err)
	}
	if err := b.shiftColumn(lastCol, b.east, ghostWest, b.west, tagToEast, b.sendColE, b.recvColE); err != nil {
		return fmt.Errorf("halo exchange (eastwards): %w", err)
	}
	return nil
}

// shiftColumn sends the column starting at src to dest and receives the ghost column
// starting at ghost from source. A ghost column at the domain's edge (source ProcNull) is the
// fixed boundary and stays as it is.
func (b *blocks2D) shiftColumn(src []float64, dest int, ghost []float64, source, tag int, send, recv []float64) error {
	if _, err := mpi.Pack(send, src, b.column); err != nil {
		return err
	}
	st, err := mpi.Sendrecv(b.cart.Comm, send, dest, tag, recv, source, tag)
	if err != nil || st.Source == mpi.ProcNull {
		return err
	}
	return mpi.Unpack(ghost, recv, b.column)
}

// dump gathers every block on rank 0 and writes the interior grid to path as raw
// little-endian float64 values, row-major, n*n in total, as dumpGrid does for row blocks.
func (b *blocks2D) dump(u []float64, path string) error {
	c, n := b.cart.Comm, b.n
	dims := b.cart.Dims()
	// block returns the first row and column of rank r's block and its size.
	block := func(r int) (row0, rows, col0, cols int) {
		coords, _ := b.cart.Coords(r)
		row0, rows = solverkit.BlockRange(n, dims[0], coords[0])
		col0, cols = solverkit.BlockRange(n, dims[1], coords[1])
		return row0, rows, col0, cols
	}
	counts := make([]int, c.Size())
	for r := range counts {
		_, rows, _, cols := block(r)
		counts[r] = rows * cols
	}
	all, err := gatherInterior(c, u, b.rows, b.cols, counts)
	if err != nil || c.Rank() != 0 {
		return err
	}
	grid := make([]float64, n*n)
	off := 0
	for r := range counts {
		row0, rows, col0, cols := block(r)
		for i := range rows {
			copy(grid[(row0+i)*n+col0:][:cols], all[off+i*cols:][:cols])
		}
		off += rows * cols
	}
	return solverkit.WriteFloats(path, grid)
}
