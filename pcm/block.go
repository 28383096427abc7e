package pcm

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"unsafe"

	"github.com/mpios/mpios/mpi"
	"github.com/mpios/mpios/pcm/redist"
)

// Block is a distributed array registered with pcm: globalRows rows of rowLen elements,
// split over the ranks in contiguous blocks of rows, rank order following row order. pcm owns
// its memory: it checkpoints each rank's rows with the rest of the registered state (and the
// global layout with them, so that a restart can load them into another number of ranks),
// and moves rows between ranks when the job is resized (split or merge) or rebalanced.
//
// Local returns this rank's rows, a plain slice: use it in the hot loop, but take it again
// after every Reconfigure that returned Resized and after Rebalance, since the rows may then
// be others, in new memory.
//
// With the Halo option each rank's rows are framed by halo rows above and below (ghost rows
// for a stencil's neighbours, or fixed boundary values) that Padded includes; they are not
// saved, not moved, and zero after a resize or a restart. With DoubleBuffer the block has a
// second buffer of the same shape, Scratch, for sweeps that write a new grid from the old
// one: Flip exchanges the two. With ChangedOnlyByFlip a background checkpoint reads the rows
// during the next iteration instead of copying them at the boundary.
type Block[T mpi.Elem] struct {
	name       string
	rows       int // global
	rowLen     int
	halo       int
	double     bool
	flipOnly   bool    // ChangedOnlyByFlip
	flips      int64   // Flip calls so far (ChangedOnlyByFlip: a checkpoint checks its rows were left alone)
	rank       int     // the rank whose rows this process holds; -1 after it left
	bounds     []int64 // rank r holds rows [bounds[r], bounds[r+1]); registered, replicated
	buf, spare []T     // padded rows, and the scratch buffer (DoubleBuffer)
	local      []T     // buf without its halo rows; registered
	next       []T     // padded buffer being filled by a load or a resize, not yet installed
}

// BlockOption configures a Block (see Halo and DoubleBuffer).
type BlockOption func(*blockOptions) error

type blockOptions struct {
	halo     int
	double   bool
	flipOnly bool
}

// Halo frames each rank's rows with rows halo rows above and below (see Block).
func Halo(rows int) BlockOption {
	return func(o *blockOptions) error {
		if rows < 0 {
			return fmt.Errorf("pcm: Halo(%d): want >= 0: %w", rows, ErrConfig)
		}
		o.halo = rows
		return nil
	}
}

// DoubleBuffer gives the block a scratch buffer of its shape (see Block).
func DoubleBuffer() BlockOption {
	return func(o *blockOptions) error {
		o.double = true
		return nil
	}
}

// ChangedOnlyByFlip promises that the application changes the block's rows only by sweeping
// into Scratch and calling Flip, once per iteration: between two iteration boundaries
// (Reconfigure calls, or the last one and Close) it writes neither Local nor the rows of
// Padded (its halo rows it may), and flips at most once. A background checkpoint then does
// not copy the rows at the boundary where it is taken, which holds up every rank of a
// bulk-synchronous job: it reads them while the next iteration runs, and the next
// Reconfigure (or Close) first waits until it has, which it usually already has. A second
// Flip before then fails the checkpoint (its copy may hold rows of the next iteration) and
// turns the deferred read off for the rest of the run. Implies DoubleBuffer.
func ChangedOnlyByFlip() BlockOption {
	return func(o *blockOptions) error {
		o.double, o.flipOnly = true, true
		return nil
	}
}

// layoutPrefix names the registered layout of a block: "pcm.layout." + the block's name.
const layoutPrefix = "pcm.layout."

// NewBlock registers a distributed array of globalRows rows of rowLen elements under name,
// split evenly over p's world (the first globalRows%size ranks get a row more), and returns
// it with this rank's rows zeroed. Like Register, every rank calls it with the same
// arguments, before Load; Load then replaces the rows by the checkpointed or handed-over
// ones.
func NewBlock[T mpi.Elem](p *Process, name string, globalRows, rowLen int, opts ...BlockOption) (*Block[T], error) {
	var o blockOptions
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	if globalRows < 0 || rowLen < 1 {
		return nil, fmt.Errorf("pcm: block %q: %d rows of %d elements: %w", name, globalRows, rowLen, ErrConfig)
	}
	if strings.HasPrefix(name, layoutPrefix) {
		return nil, fmt.Errorf("pcm: block %q: names starting with %q are pcm's: %w", name, layoutPrefix, ErrConfig)
	}
	ranges, err := redist.Blocks(globalRows, nil, p.world.Size())
	if err != nil {
		return nil, fmt.Errorf("pcm: block %q: %w", name, err)
	}
	b := &Block[T]{name: name, rows: globalRows, rowLen: rowLen, halo: o.halo, double: o.double, flipOnly: o.flipOnly}
	b.next = b.alloc(ranges[p.world.Rank()].Len())
	b.install(boundsOf(ranges), p.world.Rank())
	if err := p.Register(layoutPrefix+name, &b.bounds); err != nil {
		return nil, err
	}
	if err := p.Register(name, &b.local); err != nil {
		return nil, err
	}
	p.dist.objects = append(p.dist.objects, b)
	return b, nil
}

// Local returns this rank's rows, row-major: Rows()*RowLen() elements.
func (b *Block[T]) Local() []T { return b.local }

// Padded returns this rank's rows with the halo rows above and below.
func (b *Block[T]) Padded() []T { return b.buf }

// Scratch returns the second buffer (DoubleBuffer), shaped like Padded; nil without it. Its
// contents are the application's, except that a resize, rebalance or restart zeroes them.
func (b *Block[T]) Scratch() []T { return b.spare }

// Flip exchanges the block's buffer with the scratch buffer (DoubleBuffer): after a sweep
// that wrote the new grid into Scratch, Flip makes it the block's rows.
func (b *Block[T]) Flip() {
	if !b.double {
		return
	}
	b.buf, b.spare = b.spare, b.buf
	b.local = b.buf[b.halo*b.rowLen : len(b.buf)-b.halo*b.rowLen]
	b.flips++
}

// Range returns the global rows this rank holds.
func (b *Block[T]) Range() redist.Range {
	if b.rank < 0 {
		return redist.Range{}
	}
	return redist.Range{Lo: int(b.bounds[b.rank]), Hi: int(b.bounds[b.rank+1])}
}

// Offset returns the first global row this rank holds.
func (b *Block[T]) Offset() int { return b.Range().Lo }

// Rows returns the number of rows this rank holds.
func (b *Block[T]) Rows() int { return b.Range().Len() }

// Ranges returns the rows of every rank, in rank order.
func (b *Block[T]) Ranges() []redist.Range {
	out := make([]redist.Range, len(b.bounds)-1)
	for r := range out {
		out[r] = redist.Range{Lo: int(b.bounds[r]), Hi: int(b.bounds[r+1])}
	}
	return out
}

// GlobalRows returns the number of rows of the whole array.
func (b *Block[T]) GlobalRows() int { return b.rows }

// RowLen returns the number of elements of a row.
func (b *Block[T]) RowLen() int { return b.rowLen }

// Name returns the name the block is registered under.
func (b *Block[T]) Name() string { return b.name }

// alloc returns a zeroed padded buffer for rows rows.
func (b *Block[T]) alloc(rows int) []T {
	return make([]T, (rows+2*b.halo)*b.rowLen)
}

// distributed is what pcm needs of a Block of any element type.
type distributed interface {
	layout() blockLayout
	// localBytes returns this rank's rows as bytes, aliasing them.
	localBytes() []byte
	// prepare allocates the buffer a load or resize fills for rows rows, and returns its
	// rows as bytes.
	prepare(rows int) []byte
	// prepared returns the number of rows of the prepared buffer, -1 if there is none.
	prepared() int
	// discard drops the prepared buffer.
	discard()
	// install makes the prepared buffer the block's rows, held by rank under bounds.
	install(bounds []int64, rank int)
	// release drops the rows of a process that left.
	release()
	// readLater reports whether a background checkpoint may read the rows after the boundary
	// (ChangedOnlyByFlip), under which registered name, and how many times the block has
	// flipped so far.
	readLater() (name string, ok bool, flips int64)
}

// blockLayout is a block's global layout, as a checkpoint's manifest records it.
type blockLayout struct {
	Name     string  `json:"name"`
	Rows     int     `json:"rows"`
	RowLen   int     `json:"rowLen"`
	Elem     string  `json:"elem"`
	ElemSize int     `json:"elemSize"`
	Bounds   []int64 `json:"bounds"` // rank r holds rows [Bounds[r], Bounds[r+1])
}

// rowBytes is the size of one row in bytes.
func (l blockLayout) rowBytes() int64 { return int64(l.RowLen) * int64(l.ElemSize) }

// rangeOf returns the rows of rank r.
func (l blockLayout) rangeOf(r int) redist.Range {
	return redist.Range{Lo: int(l.Bounds[r]), Hi: int(l.Bounds[r+1])}
}

// sameShape reports whether o describes the same array as l (its distribution aside).
func (l blockLayout) sameShape(o blockLayout) error {
	if l.Name != o.Name || l.Rows != o.Rows || l.RowLen != o.RowLen || l.Elem != o.Elem || l.ElemSize != o.ElemSize {
		return fmt.Errorf("block %q is %d rows of %d %s, the other side's %q is %d rows of %d %s",
			l.Name, l.Rows, l.RowLen, l.Elem, o.Name, o.Rows, o.RowLen, o.Elem)
	}
	return nil
}

// check verifies that the bounds tile the rows over size ranks.
func (l blockLayout) check(size int) error {
	b := l.Bounds
	if len(b) != size+1 || b[0] != 0 || b[size] != int64(l.Rows) {
		return fmt.Errorf("block %q: layout %v does not split %d rows over %d ranks", l.Name, b, l.Rows, size)
	}
	for r := range size {
		if b[r+1] < b[r] {
			return fmt.Errorf("block %q: layout %v decreases", l.Name, b)
		}
	}
	return nil
}

func (b *Block[T]) layout() blockLayout {
	var zero T
	return blockLayout{Name: b.name, Rows: b.rows, RowLen: b.rowLen, Elem: reflect.TypeOf(zero).Kind().String(),
		ElemSize: int(unsafe.Sizeof(zero)), Bounds: slices.Clone(b.bounds)}
}

func (b *Block[T]) localBytes() []byte { return asBytes(b.local) }

func (b *Block[T]) prepare(rows int) []byte {
	n := (rows + 2*b.halo) * b.rowLen
	if b.double && cap(b.spare) >= n && n > 0 {
		// The scratch buffer's contents are not kept: reuse its memory.
		b.next = b.spare[:n]
		clear(b.next)
	} else {
		b.next = b.alloc(rows)
	}
	return asBytes(b.next[b.halo*b.rowLen : n-b.halo*b.rowLen])
}

func (b *Block[T]) prepared() int {
	if b.next == nil {
		return -1
	}
	return len(b.next)/b.rowLen - 2*b.halo
}

func (b *Block[T]) discard() { b.next = nil }

func (b *Block[T]) install(bounds []int64, rank int) {
	old := b.buf
	b.buf, b.next = b.next, nil
	b.local = b.buf[b.halo*b.rowLen : len(b.buf)-b.halo*b.rowLen]
	b.bounds, b.rank = bounds, rank
	if !b.double {
		return
	}
	// The new scratch buffer: the memory of whichever of the old buffer and the old scratch
	// the new rows did not take.
	spare := b.spare
	if len(spare) > 0 && len(b.buf) > 0 && unsafe.SliceData(spare) == unsafe.SliceData(b.buf) {
		spare = old
	}
	if cap(spare) >= len(b.buf) {
		b.spare = spare[:len(b.buf)]
		clear(b.spare)
	} else {
		b.spare = make([]T, len(b.buf))
	}
}

func (b *Block[T]) readLater() (string, bool, int64) { return b.name, b.flipOnly, b.flips }

func (b *Block[T]) release() {
	b.buf, b.spare, b.local, b.next, b.rank = nil, nil, nil, nil, -1
}

// asBytes views a numeric slice as its bytes (raw, host order: what mpi and the state
// stream move without per-element encoding).
func asBytes[T mpi.Elem](s []T) []byte {
	if len(s) == 0 {
		return nil
	}
	var zero T
	return unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), len(s)*int(unsafe.Sizeof(zero)))
}

// boundsOf returns the bounds of contiguous ranges in rank order.
func boundsOf(rs []redist.Range) []int64 {
	b := make([]int64, len(rs)+1)
	for r, rg := range rs {
		b[r+1] = int64(rg.Hi)
	}
	return b
}

// distSet is a process's registered distributed objects.
type distSet struct {
	objects   []distributed
	malleable []malleableEntry
	pending   *pendingResize // prepared by resizeData, until resizeDone
	moved     int64          // bytes this process sent in its last redistribution
}

// hasDistributed reports whether anything distributed is registered (a resize of a job
// without distributed data is refused).
func (p *Process) hasDistributed() bool {
	return len(p.dist.objects) > 0 || len(p.dist.malleable) > 0
}

// layouts returns the layouts of every distributed object, in registration order.
func (d *distSet) layouts() []blockLayout {
	out := make([]blockLayout, len(d.objects))
	for i, o := range d.objects {
		out[i] = o.layout()
	}
	return out
}

// metaBlocks is the manifest annotation holding the layouts of the distributed objects.
const metaBlocks = "pcm.blocks"

// layoutMeta encodes the layouts for a checkpoint's manifest, "" if there is nothing
// distributed.
func (d *distSet) layoutMeta() string {
	if len(d.objects) == 0 {
		return ""
	}
	b, err := json.Marshal(d.layouts())
	if err != nil {
		return "" // cannot happen: plain data
	}
	return string(b)
}

// isDistributedName reports whether a registered name belongs to a distributed object
// (its rows or its layout).
func (d *distSet) isDistributedName(name string) bool {
	if strings.HasPrefix(name, layoutPrefix) {
		return true
	}
	for _, o := range d.objects {
		if o.layout().Name == name {
			return true
		}
	}
	return false
}
