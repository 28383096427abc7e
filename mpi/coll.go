package mpi

import (
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"sync"
	"unsafe"

	"github.com/mpios/mpios/comm"
)

// Tags of the collective context. Collectives are called in the same order on every rank and
// messages between a pair never overtake each other, so one tag per collective suffices.
const (
	tagBarrier = iota + 1
	tagBcast
	tagReduce
	tagAllreduce
	tagGather
	tagScatter
	tagAllgather
	tagAlltoall
	tagScan
	tagGatherv
	tagScatterv
	tagReduceScatter
)

// allreduceRingMin is the vector size from which Allreduce switches from recursive doubling
// (log P steps, whole vector each) to the pipelined ring (2(P-1) steps of 1/P of the vector,
// bandwidth-optimal). Below it, the whole vector fits one eager message, and the fewer steps
// of recursive doubling win; from it on, recursive doubling would also wait for a
// rendezvous handshake in every step.
const allreduceRingMin = eagerLimit

// csend starts a send on the collective context; a nil Request means it is complete.
func csend[T Elem](c *Comm, buf []T, dest, tag int) (*Request, error) {
	return c.startSend("collective", c.ctx+1, asBytes(buf), elemCode[T](), dest, tag)
}

func crecv[T Elem](c *Comm, buf []T, src, tag int) (*Request, error) {
	return c.irecv("collective", c.ctx+1, asBytes(buf), elemCode[T](), sizeOf[T](), src, tag, false)
}

func cwait(r *Request, err error) error {
	if err != nil {
		return err
	}
	_, err = r.wait()
	return err
}

// cexchange sends send to dest and receives recv from src on the collective context.
func cexchange[T Elem](c *Comm, send []T, dest int, recv []T, src, tag int) error {
	rr, err := crecv(c, recv, src, tag)
	if err != nil {
		return err
	}
	sr, err := csend(c, send, dest, tag)
	if err != nil {
		rr.wait()
		return err
	}
	return waitAll(rr, sr)
}

func collErr(op string, err error) error {
	if err == nil || misfitErr(err) {
		return err // a misfit's error already names the call that found it
	}
	return fmt.Errorf("mpi: %s: %w", op, err)
}

func checkRoot(c *Comm, op string, root int) error {
	if root < 0 || root >= c.Size() {
		return fmt.Errorf("mpi: %s: %w: root %d not in [0,%d)", op, ErrRank, root, c.Size())
	}
	return nil
}

// Barrier blocks until every rank of c has called it (dissemination algorithm: ceil(log2 P)
// rounds of one zero-byte message each).
func (c *Comm) Barrier() (err error) {
	if t := observe("Barrier"); t != nil {
		defer func() { t.done(c, -1, 0, err) }()
	}
	c.afterNonblocking()
	return c.barrierImpl()
}

func (c *Comm) barrierImpl() error {
	if err := c.valid("Barrier"); err != nil {
		return err
	}
	p, r := c.Size(), c.Rank()
	var none []byte
	for k := 1; k < p; k <<= 1 {
		if err := cexchange(c, none, (r+k)%p, none, (r-k+p)%p, tagBarrier); err != nil {
			return collErr("Barrier", err)
		}
	}
	return nil
}

// Bcast copies buf of rank root into buf of every rank (binomial tree). Every buf must be as
// long as the root's: a rank whose buf is not returns ErrCount, and so do the ranks below it in
// the tree, which it sends word of the misfit instead of data.
func Bcast[T Elem](c *Comm, buf []T, root int) (err error) {
	if t := observe("Bcast"); t != nil {
		defer func() { t.done(c, -1, len(buf)*sizeOf[T](), err) }()
	}
	c.afterNonblocking()
	return bcastImpl[T](c, buf, root)
}

func bcastImpl[T Elem](c *Comm, buf []T, root int) error {
	if err := c.valid("Bcast"); err != nil {
		return err
	}
	if err := checkRoot(c, "Bcast", root); err != nil {
		return err
	}
	p := c.Size()
	vr := (c.Rank() - root + p) % p
	// bad: buf does not fit the root's (seen in the received message's length or type), or a
	// rank above this one said so; the subtree then gets aborts instead of data.
	var bad error
	mask := 1
	for ; mask < p; mask <<= 1 {
		if vr&mask != 0 {
			var fatal error
			bad, fatal = crecvFit(c, "Bcast", buf, (vr-mask+root)%p, tagBcast, nil)
			if fatal != nil {
				return collErr("Bcast", fatal)
			}
			break
		}
	}
	var reqs []*Request
	for mask >>= 1; mask > 0; mask >>= 1 {
		if vr+mask < p {
			r, err := csendFit(c, buf, bad, (vr+mask+root)%p, tagBcast)
			if err != nil {
				waitAll(reqs...)
				return collErr("Bcast", err)
			}
			reqs = append(reqs, r)
		}
	}
	if err := waitAll(reqs...); err != nil {
		return collErr("Bcast", err)
	}
	return bad
}

// Reduce combines send of every rank with op, element by element, into recv at root (binomial
// tree). recv is only used at root and must be as long as send there; send and recv may be
// the same slice (in place).
func Reduce[T Number](c *Comm, send, recv []T, op Op, root int) (err error) {
	if t := observe("Reduce"); t != nil {
		defer func() { t.done(c, -1, len(send)*sizeOf[T](), err) }()
	}
	c.afterNonblocking()
	return reduceImpl[T](c, send, recv, op, root)
}

func reduceImpl[T Number](c *Comm, send, recv []T, op Op, root int) error {
	if err := c.valid("Reduce"); err != nil {
		return err
	}
	if err := checkRoot(c, "Reduce", root); err != nil {
		return err
	}
	bad, err := opCheck[T]("Reduce", op, len(send))
	if err != nil {
		return err
	}
	p, rank := c.Size(), c.Rank()
	if rank == root && len(recv) != len(send) && bad == nil {
		bad = countError("Reduce", "recv has %d elements, send %d", len(recv), len(send))
	}
	// A non-commutative operation is reduced in rank order: over a tree rooted at rank 0, whose
	// subtrees hold consecutive ranks, and the result is then handed to root.
	top := root
	if !op.commutative() {
		top = 0
	}
	vr := (rank - top + p) % p
	acc, accBuf := getScratch[T](len(send))
	defer putScratch(accBuf)
	copy(acc, send)
	tmp, tmpBuf := getScratch[T](len(send))
	defer putScratch(tmpBuf)
	atTop := true
	for mask := 1; mask < p; mask <<= 1 {
		if vr&mask != 0 {
			if err := cwait(csendFit(c, acc, bad, (vr-mask+top)%p, tagReduce)); err != nil {
				return collErr("Reduce", err)
			}
			atTop = false
			break
		}
		if src := vr | mask; src < p {
			b, fatal := crecvFit(c, "Reduce", tmp, (src+top)%p, tagReduce, bad)
			if fatal != nil {
				return collErr("Reduce", fatal)
			}
			if bad = b; bad == nil {
				applyAfter(op, tmp, acc) // acc holds ranks vr.., tmp the ranks after them
			}
		}
	}
	if top != root {
		var err error
		if atTop {
			err = cwait(csendFit(c, acc, bad, root, tagReduce))
		} else if rank == root {
			bad, err = crecvFit(c, "Reduce", acc, top, tagReduce, bad)
		}
		if err != nil {
			return collErr("Reduce", err)
		}
	}
	if rank != root || bad != nil {
		return bad
	}
	copy(recv, acc)
	return nil
}

// opCheck validates op for n elements of T: an invalid operation (the same on every rank) ends
// the call at once (fatal); a length the operation does not take is the call's misfit (bad).
func opCheck[T Number](name string, op Op, n int) (bad, fatal error) {
	err := validFor[T](op, n)
	if err == nil {
		return nil, nil
	}
	err = fmt.Errorf("mpi: %s: %w", name, err)
	if errors.Is(err, ErrCount) {
		return err, nil
	}
	return nil, err
}

// Allreduce combines send of every rank with op into recv on every rank. Small vectors use
// recursive doubling, large ones a pipelined ring (reduce-scatter, then allgather). Every rank
// gets bitwise the same result, which depends only on the inputs, op and the communicator
// size. send and recv may be the same slice. Operations that are not elementwise (MaxLoc,
// MinLoc, user-defined) always use recursive doubling, which keeps pairs whole and rank order.
func Allreduce[T Number](c *Comm, send, recv []T, op Op) (err error) {
	if t := observe("Allreduce"); t != nil {
		defer func() { t.done(c, -1, len(send)*sizeOf[T](), err) }()
	}
	c.afterNonblocking()
	return allreduceImpl[T](c, send, recv, op)
}

func allreduceImpl[T Number](c *Comm, send, recv []T, op Op) error {
	if err := c.valid("Allreduce"); err != nil {
		return err
	}
	if err := validFor[T](op, len(send)); err != nil {
		return collErr("Allreduce", err)
	}
	if len(recv) != len(send) {
		// Take part all the same (into memory of its own), so that the other ranks finish.
		bad := countError("Allreduce", "recv has %d elements, send %d", len(recv), len(send))
		return firstErr(bad, allreduceImpl(c, send, make([]T, len(send)), op))
	}
	p := c.Size()
	if p > 1 && len(send)*sizeOf[T]() >= allreduceRingMin && len(send) >= p && op.elementwise() {
		if err := agreeBeforeRing[T](c, len(send)); err != nil {
			return collErr("Allreduce", err)
		}
		return collErr("Allreduce", ringAllreduce(c, send, recv, op))
	}
	copy(recv, send)
	if p == 1 {
		return nil
	}
	return collErr("Allreduce", recursiveDoubling(c, recv, op))
}

// elemAgree is the element type of the messages of agreeBeforeRing: apart from every data
// type, so that a rank that reduces a small vector by recursive doubling, and receives one of
// them where it waits for a partner's vector, sees a misfit (and vice versa).
const elemAgree uint8 = elemAbort - 1

// agreeBeforeRing makes the ranks agree on the length and element type of a ring Allreduce
// before it starts. The ring cuts the vector into blocks by its length, so ranks whose lengths
// (or types) differ would wait for segments that never come; and a rank whose vector is below
// the ring's threshold takes recursive doubling instead. So every rank that takes the ring
// first runs recursive doubling on its (length, type) pair, with elemAgree messages: the same
// tag, partners and abort rules as a small Allreduce, whose messages thus meet the agreement's
// ones and fail to fit. Any difference anywhere reaches every rank (a rank that saw one sends
// aborts in its later rounds), and every rank returns ErrCount before any ring message is
// sent. It costs log2(P) rounds of a 16-byte message, small next to the vector.
func agreeBeforeRing[T Number](c *Comm, n int) error {
	desc := [2]int64{int64(n), int64(elemCode[T]())}
	return doubling(c, desc[:], Op{}, elemAgree, true)
}

// recursiveDoubling is the small-vector Allreduce. A rank that receives a vector of another
// length (or word that another rank did) finishes its rounds sending aborts, so that its later
// partners learn of the misfit instead of waiting for it.
func recursiveDoubling[T Number](c *Comm, acc []T, op Op) error {
	return doubling(c, acc, op, elemCode[T](), false)
}

// doubling runs recursive doubling on acc, whose messages carry element type elem. It reduces
// with op, or, with agree set, only compares: a received vector that differs from acc is a
// misfit (agreeBeforeRing).
func doubling[T Number](c *Comm, acc []T, op Op, elem uint8, agree bool) error {
	// Its work memory is taken and given back here, without defer: in a function with as many
	// returns as the rounds have, deferred calls are not open-coded, and cost 5% of an
	// 8-element Allreduce over shared memory. (A panic leaves them to the garbage collector.)
	tmp, tmpBuf := getScratch[T](len(acc))
	s := newCollSender[T](c)
	s.elem = elem
	// One receive at a time, each waited for before the next is posted: one request serves
	// them all.
	rr := getRequest()
	err := doublingRounds(c, acc, op, agree, tmp, &s, rr)
	putRequest(rr)
	s.release()
	putScratch(tmpBuf)
	return err
}

// doublingRounds is doubling with its work memory: tmp (len(acc) elements), the sender of its
// messages and the request of its receives.
func doublingRounds[T Number](c *Comm, acc []T, op Op, agree bool, tmp []T, s *collSender[T], rr *Request) error {
	p, rank := c.Size(), c.Rank()
	pof2 := 1 << (bits.Len(uint(p)) - 1)
	rem := p - pof2
	elem := s.elem
	// combine folds tmp, received from rank src, into acc.
	combine := func(src int) error {
		switch {
		case agree:
			if !slices.Equal(tmp, acc) {
				return countError("Allreduce", "rank %d reduces %v elements of %s, this rank %v of %s",
					src, tmp[0], elemName(uint8(tmp[1])), acc[0], elemName(uint8(acc[1])))
			}
		case src < rank:
			apply(op, tmp, acc)
		default:
			applyAfter(op, tmp, acc)
		}
		return nil
	}
	recvFit := func(buf []T, src int) (bad, fatal error) {
		rr.reset()
		if err := cpostAs(c, rr, buf, elem, src, tagAllreduce); err != nil {
			return nil, err
		}
		st, err := rr.wait()
		return fitOutcome("Allreduce", st, err, len(buf))
	}
	var bad error
	// Fold the first 2*rem ranks pairwise so that a power of two takes part in the doubling.
	newrank := rank - rem
	if rank < 2*rem {
		if rank%2 == 0 {
			if err := s.send(acc, rank+1, tagAllreduce); err != nil {
				return err
			}
			newrank = -1
		} else {
			b, fatal := recvFit(tmp, rank-1)
			if fatal != nil {
				return fatal
			}
			if bad = b; bad == nil {
				bad = combine(rank - 1)
			}
			newrank = rank / 2
		}
	}
	if newrank >= 0 {
		for mask := 1; mask < pof2; mask <<= 1 {
			nd := newrank ^ mask
			dst := nd + rem
			if nd < rem {
				dst = 2*nd + 1
			}
			// The receive is posted before the send, so the partner's message lands in tmp
			// directly (never in the unexpected queue).
			rr.reset()
			if err := cpostAs(c, rr, tmp, elem, dst, tagAllreduce); err != nil {
				return err
			}
			if err := s.sendFit(acc, bad, dst, tagAllreduce); err != nil {
				c.e.withdraw(rr.ctx, unsafe.Slice(rr, 1))
				return err
			}
			st, err := rr.wait()
			if err != nil || st.Count != len(tmp) {
				b, fatal := fitOutcome("Allreduce", st, err, len(tmp))
				if fatal != nil {
					return fatal
				}
				bad = firstErr(bad, b)
			}
			if bad == nil {
				bad = combine(dst)
			}
		}
	}
	if rank < 2*rem {
		if rank%2 == 1 {
			return firstErr(s.sendFit(acc, bad, rank-1, tagAllreduce), bad)
		}
		b, fatal := recvFit(acc, rank+1)
		return firstErr(fatal, b)
	}
	return bad
}

// The pipelined ring of Allreduce. The vector is cut into p blocks (ringBlock) and every block
// into segments, and a rank forwards each segment as soon as it has received (and reduced) it,
// so that consecutive steps overlap. Blocks of up to ringBigBlock bytes are cut into segments
// of ringSegBytes, the eager limit: every message is sent eagerly, and no step waits for a
// clear-to-send round trip. Larger blocks are cut into segments of ringBigSegBytes, which
// travel by rendezvous: one write of the whole segment, read by the transport straight into
// recv. On loopback TCP (2-core VM, 2 MiB vectors on 2 ranks) that takes about half the time
// of a stream of 64 KiB eager frames, which the two ranks' readers -- each sharing its
// rank's only P with the sending and reducing goroutine -- drain in small, stop-and-go steps;
// a round trip per segment costs little next to that. Segments are 1 MiB, the size from
// which ranks of a node read each other's data with one process_vm_readv (comm's cmaMin):
// for a 2 MiB vector on 2 ranks one segment per block took 231 us against 260 with two of
// 512 KiB (MPICH 314), and over loopback TCP 473 against 557 us, in alternating runs
// (docs/PERFORMANCE.md, 2026-11-27).
//
// Step t = 0 .. 2p-3 of rank r sends block (r-t) mod p to the right neighbour and receives
// block (r-t-1) mod p from the left one, with tag tagRing+t. In the reduce-scatter steps
// (t < p-1) the received partial result is combined with this rank's own contribution; after
// step p-2 rank r holds the complete result of block r+1, and the allgather steps pass the
// complete blocks around. Element i is reduced in the same order on every run and its final
// value is computed by one rank only, so all ranks get the same bits (whatever the segment
// size: segments only cut the blocks).
//
// Every receive of a phase is posted at its start, straight into recv (a segment is reduced in
// place), so no scratch memory is needed. A rank then tells its left neighbour, with an empty
// message, that its receives are posted, and sends its right neighbour no more than
// ringEarlySegs segments before that neighbour's message has arrived: eagerly sent data thus
// (almost) never waits in the unexpected queue, where it would be copied twice. (A rank that
// finishes a call a little earlier than its neighbour would otherwise push a whole block into
// the neighbour's unexpected queue while the neighbour is still being woken up.)
//
// Phases bound the receives posted at once for very long vectors: phase j handles segments
// [j*k, (j+1)*k) of every block, with k*2*(p-1) <= ringWindow.
const (
	ringSegBytes    = eagerLimit
	ringBigBlock    = 4 * eagerLimit
	ringBigSegBytes = 1 << 20
	ringEarlySegs   = 2
	// tagRingReady is the tag of the receives-posted message; ring step t uses tagRing+t.
	tagRingReady = 1<<16 - 1
	tagRing      = 1 << 16
)

// ringWindow is a variable so that tests can make phases short.
var ringWindow = 512

// ringBlock returns the bounds of block b when n elements are cut into p nearly equal blocks
// (the first n%p one element larger).
func ringBlock(n, p, b int) (lo, hi int) {
	q, rem := n/p, n%p
	lo = b*q + min(b, rem)
	hi = lo + q
	if b < rem {
		hi++
	}
	return lo, hi
}

func ringAllreduce[T Number](c *Comm, send, recv []T, op Op) error {
	p, n := c.Size(), len(recv)
	local := send
	if overlaps(send, recv) {
		// Received partial results are stored (and reduced) in recv, so this rank's own
		// contribution must live elsewhere.
		buf, h := getScratch[T](n)
		defer putScratch(h)
		copy(buf, send)
		local = buf
	}
	_, biggest := ringBlock(n, p, 0) // block 0 is never smaller than the others
	segBytes := ringSegBytes
	if biggest*sizeOf[T]() > ringBigBlock {
		segBytes = ringBigSegBytes
	}
	seg := max(segBytes/sizeOf[T](), 1)
	nseg := (biggest + seg - 1) / seg
	perPhase := max(ringWindow/(2*(p-1)), 1)
	s := newCollSender[T](c)
	defer s.release()
	for k0 := 0; k0 < nseg; k0 += perPhase {
		if err := ringPhase(c, &s, local, recv, op, seg, k0, min(k0+perPhase, nseg)); err != nil {
			return err
		}
	}
	return nil
}

// ringPhase runs the ring on segments [k0, k1) of every block.
func ringPhase[T Number](c *Comm, s *collSender[T], local, recv []T, op Op, seg, k0, k1 int) error {
	p, r, n := c.Size(), c.Rank(), len(recv)
	right, left := (r+1)%p, (r-1+p)%p
	steps := 2 * (p - 1)
	// piece returns segment k of block b, if the block has one.
	piece := func(b, k int) (lo, hi int, ok bool) {
		blo, bhi := ringBlock(n, p, b)
		lo = blo + k*seg
		return lo, min(lo+seg, bhi), lo < bhi
	}
	recvBlock := func(t int) int { return ((r-t-1)%p + p) % p }
	count := 0
	for t := 0; t < steps; t++ {
		for k := k0; k < k1; k++ {
			if _, _, ok := piece(recvBlock(t), k); !ok {
				break
			}
			count++
		}
	}
	// reqs[0] receives the right neighbour's ready message, the others the ring's segments in
	// the order they are consumed.
	reqs := make([]Request, 1+count)
	if err := cpost[T](c, &reqs[0], nil, right, tagRingReady); err != nil {
		return err
	}
	i := 1
	for t := 0; t < steps; t++ {
		for k := k0; k < k1; k++ {
			lo, hi, ok := piece(recvBlock(t), k)
			if !ok {
				break
			}
			if err := cpost(c, &reqs[i], recv[lo:hi], left, tagRing+t); err != nil {
				c.e.withdraw(c.ctx+1, reqs[:i])
				return err
			}
			i++
		}
	}
	if err := s.send(nil, left, tagRingReady); err != nil {
		c.e.withdraw(c.ctx+1, reqs)
		return err
	}
	for k := k0; k < k1; k++ {
		lo, hi, ok := piece(r, k)
		if !ok {
			break
		}
		if k == k0+ringEarlySegs {
			if _, err := reqs[0].wait(); err != nil {
				c.e.withdraw(c.ctx+1, reqs[1:])
				return err
			}
		}
		if err := s.send(local[lo:hi], right, tagRing); err != nil {
			c.e.withdraw(c.ctx+1, reqs)
			return err
		}
	}
	if _, err := reqs[0].wait(); err != nil {
		c.e.withdraw(c.ctx+1, reqs[1:])
		return err
	}
	i = 1
	for t := 0; t < steps; t++ {
		for k := k0; k < k1; k++ {
			lo, hi, ok := piece(recvBlock(t), k)
			if !ok {
				break
			}
			_, err := reqs[i].wait()
			i++
			if err != nil {
				c.e.withdraw(c.ctx+1, reqs[i:])
				return err
			}
			if t < p-1 {
				reduceLocal(op, recv[lo:hi], local[lo:hi])
			}
			if t+1 < steps {
				if err := s.send(recv[lo:hi], right, tagRing+t+1); err != nil {
					c.e.withdraw(c.ctx+1, reqs[i:])
					return err
				}
			}
		}
	}
	return nil
}

// overlaps reports whether two slices share memory.
func overlaps[T Elem](a, b []T) bool {
	if len(a) == 0 || len(b) == 0 {
		return false
	}
	size := uintptr(sizeOf[T]())
	a0, b0 := uintptr(unsafe.Pointer(unsafe.SliceData(a))), uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return a0 < b0+uintptr(len(b))*size && b0 < a0+uintptr(len(a))*size
}

// Work memory of collectives, reused across calls instead of allocated by each.

// scratchPools[k] holds buffers of 1<<k bytes, kept as *[]uint64 so that every element type is
// aligned. They are shared by all communicators; sync.Pool drops them when memory is idle.
var scratchPools [64]sync.Pool

// getScratch returns a buffer of n elements (contents undefined) and the handle that
// putScratch takes back.
func getScratch[T Number](n int) ([]T, *[]uint64) {
	size := n * sizeOf[T]()
	if size == 0 {
		return nil, nil
	}
	k := max(bits.Len(uint(size-1)), 6)
	var h *[]uint64
	if v := scratchPools[k].Get(); v != nil {
		h = v.(*[]uint64)
	} else {
		w := make([]uint64, (1<<k)/8)
		h = &w
	}
	return unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(*h))), n), h
}

func putScratch(h *[]uint64) {
	if h != nil {
		scratchPools[bits.Len(uint(len(*h)*8-1))].Put(h)
	}
}

// cpost posts a receive of buf from rank src of c on the collective context, into r (a zero
// Request of the caller's, so that one allocation serves all the receives of a call).
func cpost[T Elem](c *Comm, r *Request, buf []T, src, tag int) error {
	return cpostAs(c, r, buf, elemCode[T](), src, tag)
}

// cpostAs is cpost of a message whose element type on the wire is elem.
func cpostAs[T Elem](c *Comm, r *Request, buf []T, elem uint8, src, tag int) error {
	r.e, r.comm, r.ctx = c.e, c, c.ctx+1
	r.peer, r.tag, r.buf, r.elem, r.esize = c.group[src], tag, asBytes(buf), elem, sizeOf[T]()
	r.from = r.peer
	return c.e.post(r)
}

// headerPool recycles the frame headers of collSenders.
var headerPool = sync.Pool{New: func() any { return new(comm.Header) }}

// collSender sends the messages of one collective call with one recycled frame header. An
// eager-sized message is written to the transport at once, without a Request: it allocates
// nothing.
type collSender[T Elem] struct {
	c    *Comm
	h    *comm.Header
	elem uint8
}

func newCollSender[T Elem](c *Comm) collSender[T] {
	return collSender[T]{c: c, h: headerPool.Get().(*comm.Header), elem: elemCode[T]()}
}

func (s *collSender[T]) release() {
	headerPool.Put(s.h)
	s.h = nil
}

// send sends buf to rank dest of s.c on the collective context and returns once buf may be
// reused.
func (s *collSender[T]) send(buf []T, dest, tag int) error {
	return cwait(s.c.sendWith(s.h, "collective", s.c.ctx+1, asBytes(buf), s.elem, dest, tag))
}

// sendFit is send, or an abort if bad is set (see collfit.go).
func (s *collSender[T]) sendFit(buf []T, bad error, dest, tag int) error {
	if bad != nil {
		return cwait(s.c.sendWith(s.h, "collective", s.c.ctx+1, nil, elemAbort, dest, tag))
	}
	return s.send(buf, dest, tag)
}

// withdraw takes back the receives of reqs (all posted on context ctx) that no message has
// matched yet, and waits for the others, so that no receive buffer of a collective that
// failed is written after it returns.
func (e *engine) withdraw(ctx uint32, reqs []Request) {
	if len(reqs) == 0 {
		return
	}
	lo := uintptr(unsafe.Pointer(&reqs[0]))
	hi := uintptr(unsafe.Pointer(&reqs[len(reqs)-1]))
	var taken []*Request
	e.mu.Lock()
	if q := e.ctxs[ctx]; q != nil {
		kept := q.posted[:0]
		for _, r := range q.posted {
			if a := uintptr(unsafe.Pointer(r)); a >= lo && a <= hi {
				taken = append(taken, r)
			} else {
				kept = append(kept, r)
			}
		}
		clear(q.posted[len(kept):])
		q.posted = kept
	}
	e.mu.Unlock()
	for _, r := range taken {
		r.complete(Status{}, ErrPending)
	}
	for i := range reqs {
		reqs[i].wait()
	}
}

// Scan computes the inclusive prefix reduction (MPI_Scan): recv at rank r combines send of
// ranks 0..r, in rank order. recv may be send (in place).
func Scan[T Number](c *Comm, send, recv []T, op Op) (err error) {
	if t := observe("Scan"); t != nil {
		defer func() { t.done(c, -1, len(send)*sizeOf[T](), err) }()
	}
	c.afterNonblocking()
	return scanImpl(c, "Scan", send, recv, op, false)
}

// Exscan computes the exclusive prefix reduction (MPI_Exscan): recv at rank r combines send of
// ranks 0..r-1, in rank order. recv of rank 0 is left as it is. recv may be send (in place).
func Exscan[T Number](c *Comm, send, recv []T, op Op) (err error) {
	if t := observe("Exscan"); t != nil {
		defer func() { t.done(c, -1, len(send)*sizeOf[T](), err) }()
	}
	c.afterNonblocking()
	return scanImpl(c, "Exscan", send, recv, op, true)
}

// scanImpl is recursive doubling: after round k, partial holds the reduction of the aligned
// block of 2^k ranks around this rank, and recv that of the part of it up to this rank.
func scanImpl[T Number](c *Comm, name string, send, recv []T, op Op, exclusive bool) error {
	if err := c.valid(name); err != nil {
		return err
	}
	bad, err := opCheck[T](name, op, len(send))
	if err != nil {
		return err
	}
	if len(recv) != len(send) && bad == nil {
		bad = countError(name, "recv has %d elements, send %d", len(recv), len(send))
	}
	p, r := c.Size(), c.Rank()
	partial, partialBuf := getScratch[T](len(send))
	defer putScratch(partialBuf)
	copy(partial, send) // before recv is written: they may be the same slice
	tmp, tmpBuf := getScratch[T](len(send))
	defer putScratch(tmpBuf)
	have := !exclusive && bad == nil // recv holds a partial result
	if have {
		copy(recv, send)
	}
	for mask := 1; mask < p; mask <<= 1 {
		dst := r ^ mask
		if dst >= p {
			continue
		}
		b, err := cexchangeFit(c, name, partial, dst, tmp, dst, tagScan, bad)
		if err != nil {
			return collErr(name, err)
		}
		if bad = b; bad != nil {
			continue
		}
		if dst < r {
			if have {
				apply(op, tmp, recv)
			} else {
				copy(recv, tmp)
				have = true
			}
			apply(op, tmp, partial)
		} else {
			applyAfter(op, tmp, partial)
		}
	}
	return bad
}

// Gather collects send (the same length on every rank) into recv at root, rank i's data at
// recv[i*len(send):]. recv is only used at root and must hold Size()*len(send) elements there;
// send may be root's block of recv (in place). It uses a binomial tree.
func Gather[T Elem](c *Comm, send, recv []T, root int) (err error) {
	if t := observe("Gather"); t != nil {
		defer func() { t.done(c, -1, len(send)*sizeOf[T](), err) }()
	}
	c.afterNonblocking()
	return gatherImpl[T](c, send, recv, root)
}

func gatherImpl[T Elem](c *Comm, send, recv []T, root int) error {
	if err := c.valid("Gather"); err != nil {
		return err
	}
	if err := checkRoot(c, "Gather", root); err != nil {
		return err
	}
	p, n := c.Size(), len(send)
	var bad error
	if c.Rank() == root && len(recv) != p*n {
		bad = countError("Gather", "recv has %d elements, want %d", len(recv), p*n)
	}
	vr := (c.Rank() - root + p) % p
	// tmp holds the blocks of ranks vr, vr+1, ... of this subtree, in relative order.
	size := p - vr
	if vr != 0 {
		size = min(vr&-vr, p-vr)
	}
	tmp := make([]T, size*n)
	copy(tmp, send) // first: send may be a block of recv (in place)
	cnt := 1
	for mask := 1; mask < p; mask <<= 1 {
		if vr&mask != 0 {
			if err := cwait(csendFit(c, tmp[:cnt*n], bad, (vr-mask+root)%p, tagGather)); err != nil {
				return collErr("Gather", err)
			}
			return bad
		}
		if child := vr + mask; child < p {
			ccnt := min(mask, p-child)
			b, fatal := crecvFit(c, "Gather", tmp[cnt*n:(cnt+ccnt)*n], (child+root)%p, tagGather, bad)
			if fatal != nil {
				return collErr("Gather", fatal)
			}
			bad = b
			cnt += ccnt
		}
	}
	if bad != nil {
		return bad
	}
	for i := 0; i < p; i++ {
		dst := (i + root) % p
		copy(recv[dst*n:(dst+1)*n], tmp[i*n:(i+1)*n])
	}
	return nil
}

// Scatter sends block i of send at root (len(recv) elements each) to rank i's recv. send is
// only used at root; recv may be root's block of send (in place). It uses a binomial tree.
func Scatter[T Elem](c *Comm, send, recv []T, root int) (err error) {
	if t := observe("Scatter"); t != nil {
		defer func() { t.done(c, -1, len(recv)*sizeOf[T](), err) }()
	}
	c.afterNonblocking()
	return scatterImpl[T](c, send, recv, root)
}

func scatterImpl[T Elem](c *Comm, send, recv []T, root int) error {
	if err := c.valid("Scatter"); err != nil {
		return err
	}
	if err := checkRoot(c, "Scatter", root); err != nil {
		return err
	}
	p, n := c.Size(), len(recv)
	vr := (c.Rank() - root + p) % p
	var bad error
	var tmp []T
	var mask int
	if vr == 0 {
		if len(send) != p*n {
			bad = countError("Scatter", "send has %d elements, want %d", len(send), p*n)
		} else {
			tmp = make([]T, p*n)
			for i := 0; i < p; i++ {
				src := (i + root) % p
				copy(tmp[i*n:(i+1)*n], send[src*n:(src+1)*n])
			}
		}
		mask = 1 << bits.Len(uint(p-1))
	} else {
		mask = vr & -vr
		size := min(mask, p-vr)
		tmp = make([]T, size*n)
		var fatal error
		bad, fatal = crecvFit(c, "Scatter", tmp, (vr-mask+root)%p, tagScatter, nil)
		if fatal != nil {
			return collErr("Scatter", fatal)
		}
	}
	var reqs []*Request
	for mask >>= 1; mask > 0; mask >>= 1 {
		if child := vr + mask; child < p {
			var blocks []T
			if bad == nil {
				blocks = tmp[mask*n : (mask+min(mask, p-child))*n]
			}
			r, err := csendFit(c, blocks, bad, (child+root)%p, tagScatter)
			if err != nil {
				waitAll(reqs...)
				return collErr("Scatter", err)
			}
			reqs = append(reqs, r)
		}
	}
	if err := waitAll(reqs...); err != nil {
		return collErr("Scatter", err)
	}
	if bad != nil {
		return bad
	}
	copy(recv, tmp[:n])
	return nil
}

// Allgather collects send of every rank into recv on every rank (rank i's data at
// recv[i*len(send):]), passing blocks around a ring. send may be this rank's block of recv
// (in place).
func Allgather[T Elem](c *Comm, send, recv []T) (err error) {
	if t := observe("Allgather"); t != nil {
		defer func() { t.done(c, -1, len(send)*sizeOf[T](), err) }()
	}
	c.afterNonblocking()
	return allgatherImpl[T](c, send, recv)
}

func allgatherImpl[T Elem](c *Comm, send, recv []T) error {
	if err := c.valid("Allgather"); err != nil {
		return err
	}
	p := c.Size()
	counts := make([]int, p)
	for i := range counts {
		counts[i] = len(send)
	}
	var bad error
	if len(recv) != p*len(send) {
		bad = countError("Allgather", "recv has %d elements, want %d", len(recv), p*len(send))
	}
	return ringAllgatherv(c, "Allgather", send, recv, counts, tagAllgather, bad)
}

// Allgatherv is Allgather with counts[i] elements from rank i, stored contiguously in rank
// order. len(send) must equal counts[Rank()]; send may be this rank's block of recv.
func Allgatherv[T Elem](c *Comm, send, recv []T, counts []int) (err error) {
	if t := observe("Allgatherv"); t != nil {
		defer func() { t.done(c, -1, len(send)*sizeOf[T](), err) }()
	}
	c.afterNonblocking()
	return allgathervImpl[T](c, send, recv, counts)
}

func allgathervImpl[T Elem](c *Comm, send, recv []T, counts []int) error {
	if err := c.valid("Allgatherv"); err != nil {
		return err
	}
	bad := checkCounts(c, "Allgatherv", counts, len(send), len(recv))
	return ringAllgatherv(c, "Allgatherv", send, recv, counts, tagAllgather, bad)
}

func checkCounts(c *Comm, op string, counts []int, own, total int) error {
	if len(counts) != c.Size() {
		return countError(op, "%d counts for %d ranks", len(counts), c.Size())
	}
	sum := 0
	for i, n := range counts {
		if n < 0 {
			return countError(op, "counts[%d] = %d", i, n)
		}
		sum += n
	}
	if counts[c.Rank()] != own {
		return countError(op, "counts[%d] = %d, but this rank has %d elements", c.Rank(), counts[c.Rank()], own)
	}
	if total >= 0 && total != sum {
		return countError(op, "buffer has %d elements, counts sum to %d", total, sum)
	}
	return nil
}

// offsets returns the start of each block of counts, and their total at the end.
func offsets(counts []int) []int {
	offs := make([]int, len(counts)+1)
	for i, n := range counts {
		offs[i+1] = offs[i] + n
	}
	return offs
}

// ringAllgatherv passes the blocks around the ring: in step s rank r sends block r-s to the
// right and receives block r-s-1 from the left. With bad set (this rank's arguments do not
// fit), or once a block does not, the rank passes aborts on and drains.
func ringAllgatherv[T Elem](c *Comm, op string, send, recv []T, counts []int, tag int, bad error) error {
	p, r := c.Size(), c.Rank()
	var offs []int
	if bad == nil {
		offs = offsets(counts)
		copy(recv[offs[r]:offs[r+1]], send)
	}
	right, left := (r+1)%p, (r-1+p)%p
	for s := 0; s < p-1; s++ {
		sb, rb := (r-s+p)%p, (r-s-1+p)%p
		var out, in []T
		if bad == nil {
			out, in = recv[offs[sb]:offs[sb+1]], recv[offs[rb]:offs[rb+1]]
		}
		b, err := cexchangeFit(c, op, out, right, in, left, tag, bad)
		if err != nil {
			return collErr(op, err)
		}
		bad = b
	}
	return bad
}

// Alltoall sends block j of send (len(send)/Size() elements) to rank j, which stores it as
// block i of its recv, for every pair (pairwise exchange). send and recv must not overlap.
func Alltoall[T Elem](c *Comm, send, recv []T) (err error) {
	if t := observe("Alltoall"); t != nil {
		defer func() { t.done(c, -1, len(send)*sizeOf[T](), err) }()
	}
	c.afterNonblocking()
	return alltoallImpl[T](c, send, recv)
}

func alltoallImpl[T Elem](c *Comm, send, recv []T) error {
	if err := c.valid("Alltoall"); err != nil {
		return err
	}
	p := c.Size()
	counts := make([]int, p)
	for i := range counts {
		counts[i] = len(send) / p
	}
	var bad error
	if len(send)%p != 0 || len(recv) != len(send) {
		bad = countError("Alltoall", "send %d and recv %d elements for %d ranks", len(send), len(recv), p)
	}
	return pairwiseExchange(c, "Alltoall", send, counts, recv, counts, tagAlltoall, bad)
}

// Alltoallv sends sendCounts[j] elements of send to rank j and receives recvCounts[i] elements
// from rank i, for every pair (MPI_Alltoallv). The blocks are contiguous in rank order in both
// buffers (use sub-slices for other layouts); recvCounts[i] must equal rank i's sendCounts for
// this rank. send and recv must not overlap. Alltoallw, which lets the element type differ per
// peer, has no single-call counterpart: Go slices have one element type, so call Alltoallv once
// per element type.
func Alltoallv[T Elem](c *Comm, send []T, sendCounts []int, recv []T, recvCounts []int) (err error) {
	if t := observe("Alltoallv"); t != nil {
		defer func() { t.done(c, -1, len(send)*sizeOf[T](), err) }()
	}
	if err := c.valid("Alltoallv"); err != nil {
		return err
	}
	c.afterNonblocking()
	var bad error
	if len(sendCounts) != c.Size() || len(recvCounts) != c.Size() {
		bad = countError("Alltoallv", "%d send and %d receive counts for %d ranks", len(sendCounts), len(recvCounts), c.Size())
	} else {
		bad = firstErr(checkVector("Alltoallv", "send", sendCounts, len(send)), checkVector("Alltoallv", "recv", recvCounts, len(recv)))
	}
	return pairwiseExchange(c, "Alltoallv", send, sendCounts, recv, recvCounts, tagAlltoall, bad)
}

// checkVector checks that counts are not negative and sum to the buffer's length.
func checkVector(op, buf string, counts []int, length int) error {
	sum := 0
	for i, n := range counts {
		if n < 0 {
			return countError(op, "%s count %d is %d", buf, i, n)
		}
		sum += n
	}
	if sum != length {
		return countError(op, "%s has %d elements, its counts sum to %d", buf, length, sum)
	}
	return nil
}

// pairwiseExchange is Alltoall(v): in step i rank r sends its block for r+i and receives the
// block of r-i. With bad set, or once a block does not fit, the rank sends aborts and drains.
func pairwiseExchange[T Elem](c *Comm, op string, send []T, sendCounts []int, recv []T, recvCounts []int, tag int, bad error) error {
	p, r := c.Size(), c.Rank()
	var soff, roff []int
	if bad == nil {
		soff, roff = offsets(sendCounts), offsets(recvCounts)
		if sendCounts[r] != recvCounts[r] {
			bad = countError(op, "this rank sends itself %d elements but receives %d", sendCounts[r], recvCounts[r])
		} else {
			copy(recv[roff[r]:roff[r+1]], send[soff[r]:soff[r+1]])
		}
	}
	for i := 1; i < p; i++ {
		dst, src := (r+i)%p, (r-i+p)%p
		var out, in []T
		if bad == nil {
			out, in = send[soff[dst]:soff[dst+1]], recv[roff[src]:roff[src+1]]
		}
		b, err := cexchangeFit(c, op, out, dst, in, src, tag, bad)
		if err != nil {
			return collErr(op, err)
		}
		bad = b
	}
	return bad
}

// Gatherv collects counts[i] elements from rank i into recv at root, contiguously in rank
// order. len(send) must equal counts[Rank()]; counts and recv are only used at root, where
// send may be root's block of recv (in place).
func Gatherv[T Elem](c *Comm, send, recv []T, counts []int, root int) (err error) {
	if t := observe("Gatherv"); t != nil {
		defer func() { t.done(c, -1, len(send)*sizeOf[T](), err) }()
	}
	c.afterNonblocking()
	return gathervImpl[T](c, send, recv, counts, root)
}

func gathervImpl[T Elem](c *Comm, send, recv []T, counts []int, root int) error {
	if err := c.valid("Gatherv"); err != nil {
		return err
	}
	if err := checkRoot(c, "Gatherv", root); err != nil {
		return err
	}
	if c.Rank() != root {
		return collErr("Gatherv", cwait(csend(c, send, root, tagGatherv)))
	}
	bad := checkCounts(c, "Gatherv", counts, len(send), len(recv))
	if bad != nil {
		// Drain every rank's message all the same, or a large one would block its sender.
		for i := 0; i < c.Size(); i++ {
			if i != root {
				if err := cdrain(c, i, tagGatherv); err != nil {
					return collErr("Gatherv", err)
				}
			}
		}
		return bad
	}
	offs := offsets(counts)
	reqs := make([]*Request, c.Size())
	var fatal error
	for i := range counts {
		if i == root {
			copy(recv[offs[i]:offs[i+1]], send)
		} else if r, err := crecv(c, recv[offs[i]:offs[i+1]], i, tagGatherv); err != nil {
			fatal = firstErr(fatal, err)
		} else {
			reqs[i] = r
		}
	}
	for i, r := range reqs {
		if r == nil {
			continue
		}
		st, err := r.wait()
		b, f := fitOutcome("Gatherv", st, err, counts[i])
		bad, fatal = firstErr(bad, b), firstErr(fatal, f)
	}
	if fatal != nil {
		return collErr("Gatherv", fatal)
	}
	return bad
}

// Scatterv sends counts[i] elements of send at root (contiguous in rank order) to rank i.
// len(recv) must equal counts[Rank()]; counts and send are only used at root, where recv may
// be root's block of send (in place).
func Scatterv[T Elem](c *Comm, send, recv []T, counts []int, root int) (err error) {
	if t := observe("Scatterv"); t != nil {
		defer func() { t.done(c, -1, len(recv)*sizeOf[T](), err) }()
	}
	c.afterNonblocking()
	return scattervImpl[T](c, send, recv, counts, root)
}

func scattervImpl[T Elem](c *Comm, send, recv []T, counts []int, root int) error {
	if err := c.valid("Scatterv"); err != nil {
		return err
	}
	if err := checkRoot(c, "Scatterv", root); err != nil {
		return err
	}
	if c.Rank() != root {
		bad, fatal := crecvFit(c, "Scatterv", recv, root, tagScatterv, nil)
		return firstErr(collErr("Scatterv", fatal), bad)
	}
	bad := checkCounts(c, "Scatterv", counts, len(recv), len(send))
	var offs []int
	if bad == nil {
		offs = offsets(counts)
	}
	reqs := make([]*Request, 0, c.Size())
	var fatal error
	for i := 0; i < c.Size(); i++ {
		var block []T
		if bad == nil {
			block = send[offs[i]:offs[i+1]]
		}
		if i == root {
			if bad == nil {
				copy(recv, block)
			}
		} else if r, err := csendFit(c, block, bad, i, tagScatterv); err != nil {
			fatal = firstErr(fatal, err)
		} else {
			reqs = append(reqs, r)
		}
	}
	if err := waitAll(reqs...); fatal == nil {
		fatal = err
	}
	return firstErr(collErr("Scatterv", fatal), bad)
}
