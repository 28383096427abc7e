package collcheck

import (
	"fmt"
	"math"

	"github.com/mpios/mpios/mpi"
)

func init() {
	Semantics = append(Semantics,
		Check{"bcast-every-root-and-type", BcastEveryRootAndType},
		Check{"reduce-every-root", ReduceEveryRoot},
		Check{"in-place", InPlace},
		Check{"reduce-scatter", ReduceScatterCounts},
		Check{"alltoallv", AlltoallvCounts},
		Check{"exscan", ExscanSum},
		Check{"maxloc-minloc", MaxLocMinLoc},
		Check{"logical-ops", LogicalOps},
		Check{"bitwise-ops", BitwiseOps},
		Check{"user-op-commutative", UserOpCommutative},
		Check{"user-op-noncommutative", UserOpNonCommutative},
		Check{"nonblocking", Nonblocking},
		Check{"ibarrier-waits-for-every-rank", IbarrierWaitsForEveryRank},
	)
}

func equalSlices[T comparable](what string, got, want []T) error {
	if len(got) != len(want) {
		return fmt.Errorf("%s: %d elements, want %d", what, len(got), len(want))
	}
	for i := range got {
		if got[i] != want[i] {
			return fmt.Errorf("%s: element %d is %v, want %v", what, i, got[i], want[i])
		}
	}
	return nil
}

// BcastEveryRootAndType (MPICH bcasttest, bcast2): every rank in turn broadcasts vectors of
// several lengths and element types; every rank ends with the root's values.
func BcastEveryRootAndType(c *mpi.Comm) error {
	for root := 0; root < c.Size(); root++ {
		for _, n := range []int{0, 1, 17, 9000, 40000} {
			ints := make([]int16, n)
			floats := make([]float32, n)
			if c.Rank() == root {
				for i := range ints {
					ints[i], floats[i] = int16(i*root+i), float32(i)/float32(root+1)
				}
			}
			if err := mpi.Bcast(c, ints, root); err != nil {
				return err
			}
			if err := mpi.Bcast(c, floats, root); err != nil {
				return err
			}
			for i := range ints {
				if ints[i] != int16(i*root+i) || floats[i] != float32(i)/float32(root+1) {
					return fmt.Errorf("Bcast root %d n %d: element %d is %v/%v", root, n, i, ints[i], floats[i])
				}
			}
		}
	}
	return nil
}

// ReduceEveryRoot (MPICH reduce): rank r contributes r+i at element i; the root of each
// Reduce gets i*P + P(P-1)/2.
func ReduceEveryRoot(c *mpi.Comm) error {
	p := c.Size()
	for root := 0; root < p; root++ {
		for _, n := range []int{1, 100, 20000} {
			send := make([]int32, n)
			for i := range send {
				send[i] = int32(c.Rank() + i)
			}
			recv := make([]int32, n)
			if err := mpi.Reduce(c, send, recv, mpi.Sum, root); err != nil {
				return err
			}
			if c.Rank() != root {
				continue
			}
			for i := range recv {
				if want := int32(i*p + p*(p-1)/2); recv[i] != want {
					return fmt.Errorf("Reduce root %d n %d: element %d is %d, want %d", root, n, i, recv[i], want)
				}
			}
		}
	}
	return nil
}

// InPlace (MPI_IN_PLACE in MPICH's coll tests): Gather, Scatter, Allgather, Reduce, Allreduce,
// Scan and Exscan with the send buffer being (part of) the receive buffer.
func InPlace(c *mpi.Comm) error {
	p, r := c.Size(), c.Rank()
	const n = 3
	block := func(k int) []int64 { return []int64{int64(10 * k), int64(10*k + 1), int64(10*k + 2)} }
	want := make([]int64, 0, p*n)
	for k := 0; k < p; k++ {
		want = append(want, block(k)...)
	}
	root := p - 1
	// Gather: the root's contribution is already in its block of recv.
	buf := make([]int64, p*n)
	var send []int64
	if r == root {
		copy(buf[r*n:], block(r))
		send = buf[r*n : (r+1)*n]
	} else {
		send = block(r)
	}
	if err := mpi.Gather(c, send, buf, root); err != nil {
		return err
	}
	if r == root {
		if err := equalSlices("Gather in place", buf, want); err != nil {
			return err
		}
	}
	// Scatter: the root keeps its block where it is.
	recv := make([]int64, n)
	if r == root {
		recv = buf[r*n : (r+1)*n]
	}
	if err := mpi.Scatter(c, buf, recv, root); err != nil {
		return err
	}
	if err := equalSlices("Scatter in place", recv, block(r)); err != nil {
		return err
	}
	// Allgather: every rank's block is already in place.
	all := make([]int64, p*n)
	copy(all[r*n:], block(r))
	if err := mpi.Allgather(c, all[r*n:(r+1)*n], all); err != nil {
		return err
	}
	if err := equalSlices("Allgather in place", all, want); err != nil {
		return err
	}
	// Reduce, Allreduce, Scan, Exscan: send and recv are the same slice.
	for _, n := range []int{4, 20000} {
		contrib := func() []int64 {
			v := make([]int64, n)
			for i := range v {
				v[i] = int64(r*n + i)
			}
			return v
		}
		total := func(upto, i int) int64 { // sum of ranks 0..upto-1 at element i
			return int64(upto*(upto-1)/2*n + upto*i)
		}
		v := contrib()
		if err := mpi.Reduce(c, v, v, mpi.Sum, 0); err != nil {
			return err
		}
		if r == 0 && (v[n-1] != total(p, n-1) || v[0] != total(p, 0)) {
			return fmt.Errorf("Reduce in place n %d: %d..%d", n, v[0], v[n-1])
		}
		v = contrib()
		if err := mpi.Allreduce(c, v, v, mpi.Sum); err != nil {
			return err
		}
		if v[n-1] != total(p, n-1) {
			return fmt.Errorf("Allreduce in place n %d: %d", n, v[n-1])
		}
		v = contrib()
		if err := mpi.Scan(c, v, v, mpi.Sum); err != nil {
			return err
		}
		if v[n-1] != total(r+1, n-1) || v[0] != total(r+1, 0) {
			return fmt.Errorf("Scan in place n %d: %d..%d", n, v[0], v[n-1])
		}
		v = contrib()
		if err := mpi.Exscan(c, v, v, mpi.Sum); err != nil {
			return err
		}
		if r > 0 && (v[n-1] != total(r, n-1) || v[0] != total(r, 0)) {
			return fmt.Errorf("Exscan in place n %d: %d..%d", n, v[0], v[n-1])
		}
	}
	return nil
}

// ReduceScatterCounts (MPICH redscat, redscat2, red_scat_block): rank r receives r+1 elements;
// element i of the input is rank+i on each rank, so element i of the result is
// P*i + P(P-1)/2. Also with ReduceScatterBlock, and with Max.
func ReduceScatterCounts(c *mpi.Comm) error {
	p, r := c.Size(), c.Rank()
	counts := make([]int, p)
	total := 0
	for i := range counts {
		counts[i] = i + 1
		total += i + 1
	}
	start := r * (r + 1) / 2
	for _, scale := range []int{1, 2000} { // 2000: blocks of many KiB
		cs := make([]int, p)
		for i := range cs {
			cs[i] = counts[i] * scale
		}
		send := make([]float64, total*scale)
		for i := range send {
			send[i] = float64(r + i)
		}
		recv := make([]float64, cs[r])
		if err := mpi.ReduceScatter(c, send, recv, cs, mpi.Sum); err != nil {
			return err
		}
		for k := range recv {
			i := start*scale + k
			if want := float64(p*i + p*(p-1)/2); recv[k] != want {
				return fmt.Errorf("ReduceScatter scale %d: element %d is %v, want %v", scale, k, recv[k], want)
			}
		}
		if err := mpi.ReduceScatter(c, send, recv, cs, mpi.Max); err != nil {
			return err
		}
		if want := float64(p - 1 + start*scale); recv[0] != want {
			return fmt.Errorf("ReduceScatter Max scale %d: %v, want %v", scale, recv[0], want)
		}
	}
	blk := make([]int32, 5)
	send := make([]int32, 5*p)
	for i := range send {
		send[i] = int32(r * i)
	}
	if err := mpi.ReduceScatterBlock(c, send, blk, mpi.Sum); err != nil {
		return err
	}
	for k := range blk {
		if want := int32((5*r + k) * p * (p - 1) / 2); blk[k] != want {
			return fmt.Errorf("ReduceScatterBlock: element %d is %d, want %d", k, blk[k], want)
		}
	}
	return nil
}

// AlltoallvCounts (MPICH alltoallv, alltoallv0): rank r sends j+1 elements (r*100+j) to rank j,
// except none to rank 0 (zero-length blocks); rank j receives them from every rank in order.
func AlltoallvCounts(c *mpi.Comm) error {
	p, r := c.Size(), c.Rank()
	for _, scale := range []int{1, 3000} {
		size := func(to int) int {
			if to == 0 {
				return 0
			}
			return (to + 1) * scale
		}
		sc, rc := make([]int, p), make([]int, p)
		var send []int32
		for j := 0; j < p; j++ {
			sc[j] = size(j)
			rc[j] = size(r)
			for k := 0; k < sc[j]; k++ {
				send = append(send, int32(r*100+j))
			}
		}
		recv := make([]int32, p*size(r))
		if err := mpi.Alltoallv(c, send, sc, recv, rc); err != nil {
			return err
		}
		for i, v := range recv {
			from := i / size(r)
			if want := int32(from*100 + r); v != want {
				return fmt.Errorf("Alltoallv scale %d: element %d is %d, want %d", scale, i, v, want)
			}
		}
	}
	return nil
}

// ExscanSum (MPICH exscan, exscan2): element i at rank r is r + i*P; the exclusive prefix sum
// at rank r > 0 is the sum over ranks j < r. Rank 0's buffer is left alone.
func ExscanSum(c *mpi.Comm) error {
	p, r := c.Size(), c.Rank()
	for _, n := range []int{1, 10, 20000} {
		send := make([]int64, n)
		for i := range send {
			send[i] = int64(r + i*p)
		}
		recv := make([]int64, n)
		for i := range recv {
			recv[i] = -7
		}
		if err := mpi.Exscan(c, send, recv, mpi.Sum); err != nil {
			return err
		}
		for i := range recv {
			want := int64(r*(r-1)/2 + i*p*r)
			if r == 0 {
				want = -7
			}
			if recv[i] != want {
				return fmt.Errorf("Exscan n %d: element %d is %d, want %d", n, i, recv[i], want)
			}
		}
	}
	return nil
}

// MaxLocMinLoc (MPICH opmaxloc, opminloc): (value, index) pairs. With value = rank, MaxLoc
// finds (P-1, P-1) and MinLoc (0, 0); with every value equal, both report the smallest index.
func MaxLocMinLoc(c *mpi.Comm) error {
	p, r := c.Size(), c.Rank()
	pairs := []float64{float64(r), float64(r), 5, float64(r), float64(-r), float64(r)}
	out := make([]float64, len(pairs))
	if err := mpi.Allreduce(c, pairs, out, mpi.MaxLoc); err != nil {
		return err
	}
	want := []float64{float64(p - 1), float64(p - 1), 5, 0, 0, 0}
	if err := equalSlices("Allreduce MaxLoc", out, want); err != nil {
		return err
	}
	ints := []int32{int32(r), int32(r), 5, int32(r), int32(-r), int32(r)}
	iout := make([]int32, len(ints))
	if err := mpi.Reduce(c, ints, iout, mpi.MinLoc, p-1); err != nil {
		return err
	}
	if r == p-1 {
		if err := equalSlices("Reduce MinLoc", iout, []int32{0, 0, 5, 0, int32(1 - p), int32(p - 1)}); err != nil {
			return err
		}
	}
	if err := mpi.Allreduce(c, []int32{1, 2, 3}, make([]int32, 3), mpi.MaxLoc); !isCount(err) {
		return fmt.Errorf("MaxLoc on an odd length: %v, want ErrCount", err)
	}
	return nil
}

// LogicalOps (MPICH opland, oplor, oplxor): an element is true when it is not zero.
func LogicalOps(c *mpi.Comm) error {
	p, r := c.Size(), c.Rank()
	odd := int32(r & 1)
	in := []int32{1, 0, odd, int32(r + 3)}
	for _, tc := range []struct {
		op   mpi.Op
		want []int32
	}{
		{mpi.LAnd, []int32{1, 0, 0, 1}}, // rank 0 is even
		{mpi.LOr, []int32{1, 0, boolInt(p > 1), 1}},
		{mpi.LXor, []int32{int32(p & 1), 0, int32((p / 2) & 1), int32(p & 1)}},
	} {
		if p == 1 {
			tc.want[3] = in[3] // one rank: the input is the result, as in MPI
		}
		out := make([]int32, len(in))
		if err := mpi.Allreduce(c, in, out, tc.op); err != nil {
			return err
		}
		if err := equalSlices("Allreduce "+tc.op.String(), out, tc.want); err != nil {
			return err
		}
	}
	fl := []float64{float64(r + 1)}
	out := []float64{0}
	if err := mpi.Allreduce(c, fl, out, mpi.LAnd); err != nil || out[0] != 1 {
		return fmt.Errorf("LAnd on floats: %v %v", out, err)
	}
	return nil
}

func boolInt(b bool) int32 {
	if b {
		return 1
	}
	return 0
}

// BitwiseOps (MPICH opband, opbor, opbxor): rank r sets bit r; BOr gives the low P bits, BAnd
// of all-ones with bit r cleared clears the low P bits, BXor of the rank's bit is BOr's value.
// Floats are refused with ErrOp.
func BitwiseOps(c *mpi.Comm) error {
	p, r := c.Size(), c.Rank()
	low := uint16(1<<p - 1)
	bit := []uint16{1 << r, ^uint16(1 << r)}
	for _, tc := range []struct {
		op   mpi.Op
		want []uint16
	}{
		{mpi.BOr, []uint16{low, ^uint16(1 - bitIf(p > 1))}},
		{mpi.BAnd, []uint16{bitIf(p == 1), ^low}},
		{mpi.BXor, []uint16{low, xorAll(p)}},
	} {
		out := make([]uint16, 2)
		if err := mpi.Allreduce(c, bit, out, tc.op); err != nil {
			return err
		}
		if err := equalSlices("Allreduce "+tc.op.String(), out, tc.want); err != nil {
			return err
		}
	}
	signed := []int8{int8(-1 << r)}
	out := []int8{0}
	if err := mpi.Allreduce(c, signed, out, mpi.BAnd); err != nil || out[0] != int8(-1<<(p-1)) {
		return fmt.Errorf("BAnd on int8: %v %v", out, err)
	}
	if err := mpi.Allreduce(c, []float64{1}, []float64{0}, mpi.BOr); !isOp(err) {
		return fmt.Errorf("BOr on float64: %v, want ErrOp", err)
	}
	return nil
}

func bitIf(b bool) uint16 {
	if b {
		return 1
	}
	return 0
}

// xorAll is the xor over ranks of ^(1<<r) in 16 bits.
func xorAll(p int) uint16 {
	var x uint16
	for r := 0; r < p; r++ {
		x ^= ^uint16(1 << r)
	}
	return x
}

// UserOpCommutative (MPICH uoplong): a user-defined sum over long vectors, which must give what
// Sum gives, with Reduce, Allreduce (small and large) and Scan.
func UserOpCommutative(c *mpi.Comm) error {
	p, r := c.Size(), c.Rank()
	mySum := mpi.NewOp("mySum", true, func(in, inout []int64) {
		for i := range inout {
			inout[i] += in[i]
		}
	})
	for _, n := range []int{1, 1000, 40000} {
		send := make([]int64, n)
		for i := range send {
			send[i] = int64(r*3 + i)
		}
		out := make([]int64, n)
		if err := mpi.Allreduce(c, send, out, mySum); err != nil {
			return err
		}
		for i := range out {
			if want := int64(3*p*(p-1)/2 + i*p); out[i] != want {
				return fmt.Errorf("Allreduce mySum n %d: element %d is %d, want %d", n, i, out[i], want)
			}
		}
		if err := mpi.Scan(c, send, out, mySum); err != nil {
			return err
		}
		if want := int64(3*r*(r+1)/2 + (n-1)*(r+1)); out[n-1] != want {
			return fmt.Errorf("Scan mySum n %d: %d, want %d", n, out[n-1], want)
		}
	}
	if err := mpi.Allreduce(c, []float64{1}, []float64{0}, mySum); !isOp(err) {
		return fmt.Errorf("an int64 op on float64: %v, want ErrOp", err)
	}
	return nil
}

// matMul multiplies 2x2 integer matrices stored as 4 consecutive elements, row by row.
func matMul(a, b []int64) (x, y, z, w int64) {
	return a[0]*b[0] + a[1]*b[2], a[0]*b[1] + a[1]*b[3], a[2]*b[0] + a[3]*b[2], a[2]*b[1] + a[3]*b[3]
}

// rankMatrix is a matrix that does not commute with those of the other ranks.
func rankMatrix(r int) []int64 { return []int64{int64(r + 1), 1, int64(r%3 - 1), 2} }

// UserOpNonCommutative (MPICH's noncommutative user-op tests): 2x2 matrix products, which do
// not commute, must come out in rank order M0·M1·...·M(P-1) from Reduce (every root),
// Allreduce, Scan, Exscan and ReduceScatterBlock.
func UserOpNonCommutative(c *mpi.Comm) error {
	p, r := c.Size(), c.Rank()
	matProd := mpi.NewOp("matProd", false, func(in, inout []int64) {
		for i := 0; i+3 < len(inout); i += 4 {
			inout[i], inout[i+1], inout[i+2], inout[i+3] = matMul(in[i:i+4], inout[i:i+4])
		}
	})
	prefix := func(upto int) []int64 { // M0·...·M(upto-1)
		acc := []int64{1, 0, 0, 1}
		for k := 0; k < upto; k++ {
			acc[0], acc[1], acc[2], acc[3] = matMul(acc, rankMatrix(k))
		}
		return acc
	}
	repeat := func(m []int64, times int) []int64 {
		var out []int64
		for i := 0; i < times; i++ {
			out = append(out, m...)
		}
		return out
	}
	for _, times := range []int{1, 3000} { // 3000 matrices: 96 KB, beyond the eager limit
		mine := repeat(rankMatrix(r), times)
		want := repeat(prefix(p), times)
		for root := 0; root < p; root++ {
			out := make([]int64, len(mine))
			if err := mpi.Reduce(c, mine, out, matProd, root); err != nil {
				return err
			}
			if r == root {
				if err := equalSlices(fmt.Sprintf("Reduce matProd root %d", root), out, want); err != nil {
					return err
				}
			}
		}
		out := make([]int64, len(mine))
		if err := mpi.Allreduce(c, mine, out, matProd); err != nil {
			return err
		}
		if err := equalSlices("Allreduce matProd", out, want); err != nil {
			return err
		}
		if err := mpi.Scan(c, mine, out, matProd); err != nil {
			return err
		}
		if err := equalSlices("Scan matProd", out, repeat(prefix(r+1), times)); err != nil {
			return err
		}
		if err := mpi.Exscan(c, mine, out, matProd); err != nil {
			return err
		}
		if r > 0 {
			if err := equalSlices("Exscan matProd", out, repeat(prefix(r), times)); err != nil {
				return err
			}
		}
	}
	// MPICH scantst's witness of the order: in must hold lower ranks than inout.
	const bad = -1000
	lowerFirst := mpi.NewOp("lowerFirst", false, func(in, inout []int32) {
		for i := range inout {
			if in[i] < 0 || inout[i] < 0 || in[i] >= inout[i] {
				inout[i] = bad
			} else {
				inout[i] = in[i]
			}
		}
	})
	for _, n := range []int{1, 20000} {
		mine := make([]int32, n)
		for i := range mine {
			mine[i] = int32(r)
		}
		out := make([]int32, n)
		if err := mpi.Scan(c, mine, out, lowerFirst); err != nil {
			return err
		}
		if out[0] != 0 || out[n-1] != 0 {
			return fmt.Errorf("Scan lowerFirst n %d: %d %d, want 0 (an operand came out of rank order)", n, out[0], out[n-1])
		}
		if err := mpi.Allreduce(c, mine, out, lowerFirst); err != nil {
			return err
		}
		if out[0] != 0 || out[n-1] != 0 {
			return fmt.Errorf("Allreduce lowerFirst n %d: %d %d, want 0", n, out[0], out[n-1])
		}
		if err := mpi.Reduce(c, mine, out, lowerFirst, p-1); err != nil {
			return err
		}
		if r == p-1 && (out[0] != 0 || out[n-1] != 0) {
			return fmt.Errorf("Reduce lowerFirst n %d: %d %d, want 0", n, out[0], out[n-1])
		}
	}
	blocks := repeat(rankMatrix(r), p)
	out := make([]int64, 4)
	if err := mpi.ReduceScatterBlock(c, blocks, out, matProd); err != nil {
		return err
	}
	return equalSlices("ReduceScatterBlock matProd", out, prefix(p))
}

// Nonblocking (MPICH nonblocking, nonblocking2, nonblocking3): several nonblocking collectives
// outstanding at once on one communicator, completed together; Iallreduce gives bitwise what
// Allreduce gives; a blocking collective after them sees them done.
func Nonblocking(c *mpi.Comm) error {
	p, r := c.Size(), c.Rank()
	const n = 9000 // the ring algorithm of Allreduce
	vals := make([]float64, n)
	for i := range vals {
		vals[i] = 1 / float64(3+r*7+i)
	}
	blocking := make([]float64, n)
	if err := mpi.Allreduce(c, vals, blocking, mpi.Sum); err != nil {
		return err
	}
	var reqs []*mpi.Request
	add := func(req *mpi.Request, err error) error {
		reqs = append(reqs, req)
		return err
	}
	bc := make([]int32, 100)
	if r == p-1 {
		for i := range bc {
			bc[i] = int32(i * 7)
		}
	}
	sum := make([]float64, n)
	gathered := make([]int32, p)
	a2aIn, a2aOut := make([]int32, p), make([]int32, p)
	for j := range a2aIn {
		a2aIn[j] = int32(100*r + j)
	}
	red := make([]int32, 1)
	if err := add(c.Ibarrier()); err != nil {
		return err
	}
	if err := add(mpi.Ibcast(c, bc, p-1)); err != nil {
		return err
	}
	if err := add(mpi.Iallreduce(c, vals, sum, mpi.Sum)); err != nil {
		return err
	}
	if err := add(mpi.Iallgather(c, []int32{int32(r * r)}, gathered)); err != nil {
		return err
	}
	if err := add(mpi.Ialltoall(c, a2aIn, a2aOut)); err != nil {
		return err
	}
	if err := add(mpi.Ireduce(c, []int32{int32(r + 1)}, red, mpi.Prod, 0)); err != nil {
		return err
	}
	// Work overlapping the collectives, as a pipelined solver's matrix-vector product would.
	work := 0.0
	for i := 0; i < 100000; i++ {
		work += math.Sqrt(float64(i))
	}
	_ = work
	if err := mpi.WaitAll(reqs...); err != nil {
		return err
	}
	for i := range bc {
		if bc[i] != int32(i*7) {
			return fmt.Errorf("Ibcast: element %d is %d", i, bc[i])
		}
	}
	for i := range sum {
		if math.Float64bits(sum[i]) != math.Float64bits(blocking[i]) {
			return fmt.Errorf("Iallreduce: element %d is %v, Allreduce gave %v", i, sum[i], blocking[i])
		}
	}
	for k := range gathered {
		if gathered[k] != int32(k*k) {
			return fmt.Errorf("Iallgather: %v", gathered)
		}
	}
	for j := range a2aOut {
		if a2aOut[j] != int32(100*j+r) {
			return fmt.Errorf("Ialltoall: %v", a2aOut)
		}
	}
	if r == 0 {
		fact := int32(1)
		for k := 2; k <= p; k++ {
			fact *= int32(k)
		}
		if red[0] != fact {
			return fmt.Errorf("Ireduce Prod: %d, want %d", red[0], fact)
		}
	}
	// Started and immediately followed by a blocking collective, which must wait for it.
	req, err := mpi.Iallreduce(c, []int64{int64(r)}, make([]int64, 1), mpi.Max)
	if err != nil {
		return err
	}
	if err := c.Barrier(); err != nil {
		return err
	}
	if _, done, err := req.Test(); !done || err != nil {
		return fmt.Errorf("Iallreduce not complete after a later Barrier: %v %v", done, err)
	}
	if c.Pending() != 0 {
		return fmt.Errorf("%d operations pending after every request completed", c.Pending())
	}
	return nil
}

// IbarrierWaitsForEveryRank (MPICH ibarrier): an Ibarrier is not complete while another rank
// has not started it (rank 0 tests it while the others wait for rank 0's go-ahead), and
// completes once all have.
func IbarrierWaitsForEveryRank(c *mpi.Comm) error {
	p, r := c.Size(), c.Rank()
	if r != 0 {
		if _, err := mpi.Recv(c, make([]int32, 1), 0, 5); err != nil {
			return err
		}
	}
	req, err := c.Ibarrier()
	if err != nil {
		return err
	}
	if r == 0 {
		if _, done, err := req.Test(); p > 1 && (done || err != nil) {
			return fmt.Errorf("Ibarrier complete (%v, %v) before the other ranks started it", done, err)
		}
		for k := 1; k < p; k++ {
			if err := mpi.Send(c, []int32{1}, k, 5); err != nil {
				return err
			}
		}
	}
	_, err = req.Wait()
	return err
}
