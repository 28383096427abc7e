package mpi

// ReduceScatter reduces send, whose length is the sum of counts, with op and leaves block r of
// the result (counts[r] elements, blocks contiguous in rank order) in recv at rank r
// (MPI_Reduce_scatter). Elementwise operations use a ring; the others (MaxLoc, MinLoc,
// user-defined) a rank-ordered Reduce to rank 0 followed by Scatterv.
func ReduceScatter[T Number](c *Comm, send, recv []T, counts []int, op Op) (err error) {
	if t := observe("ReduceScatter"); t != nil {
		defer func() { t.done(c, -1, len(send)*sizeOf[T](), err) }()
	}
	c.afterNonblocking()
	return reduceScatterImpl(c, "ReduceScatter", send, recv, counts, op)
}

// ReduceScatterBlock reduces send (Size()*len(recv) elements) with op and leaves block r of
// the result in recv at rank r (MPI_Reduce_scatter_block).
func ReduceScatterBlock[T Number](c *Comm, send, recv []T, op Op) (err error) {
	if t := observe("ReduceScatterBlock"); t != nil {
		defer func() { t.done(c, -1, len(send)*sizeOf[T](), err) }()
	}
	if err := c.valid("ReduceScatterBlock"); err != nil {
		return err
	}
	c.afterNonblocking()
	counts := make([]int, c.Size())
	for i := range counts {
		counts[i] = len(recv)
	}
	return reduceScatterImpl(c, "ReduceScatterBlock", send, recv, counts, op)
}

func reduceScatterImpl[T Number](c *Comm, name string, send, recv []T, counts []int, op Op) error {
	if err := c.valid(name); err != nil {
		return err
	}
	bad, err := opCheck[T](name, op, len(send))
	if err != nil {
		return err
	}
	p, r := c.Size(), c.Rank()
	if cerr := checkCounts(c, name, counts, len(recv), len(send)); cerr != nil && bad == nil {
		bad = cerr
	}
	if !op.elementwise() {
		// Pairs must not be cut, and a non-commutative operation must see the ranks in order.
		var full []T
		if r == 0 {
			var h *[]uint64
			full, h = getScratch[T](len(send))
			defer putScratch(h)
		}
		rerr := reduceImpl(c, send, full, op, 0)
		if rerr != nil && !misfitErr(rerr) {
			return rerr
		}
		if bad != nil {
			full = nil
		}
		serr := scattervImpl(c, full, recv, counts, 0)
		return firstErr(bad, firstErr(rerr, serr))
	}
	var offs []int
	if bad == nil {
		offs = make([]int, p+1)
		for i, n := range counts {
			offs[i+1] = offs[i] + n
		}
	}
	buf, bufH := getScratch[T](len(send))
	defer putScratch(bufH)
	copy(buf, send)
	bad, err = ringReduceScatter(c, name, buf, offs, op, bad)
	if err != nil {
		return collErr(name, err)
	}
	if bad != nil {
		return bad
	}
	copy(recv, buf[offs[r]:offs[r+1]])
	return nil
}

// ringReduceScatter reduces buf (blocks at offs) around the ring so that rank r ends with the
// complete reduction of block r. op is elementwise and commutative. With bad set, or once a
// block does not fit, the rank sends aborts and drains.
func ringReduceScatter[T Number](c *Comm, name string, buf []T, offs []int, op Op, bad error) (error, error) {
	p, r := c.Size(), c.Rank()
	right, left := (r+1)%p, (r-1+p)%p
	maxCnt := 0
	if bad == nil {
		for i := 0; i < p; i++ {
			maxCnt = max(maxCnt, offs[i+1]-offs[i])
		}
	}
	tmp, tmpBuf := getScratch[T](maxCnt)
	defer putScratch(tmpBuf)
	mod := func(i int) int { return ((i % p) + p) % p }
	for s := 0; s < p-1; s++ {
		sb, rb := mod(r-s-1), mod(r-s-2)
		var send, in []T
		if bad == nil {
			send, in = buf[offs[sb]:offs[sb+1]], tmp[:offs[rb+1]-offs[rb]]
		}
		b, err := cexchangeFit(c, name, send, right, in, left, tagReduceScatter, bad)
		if err != nil {
			return nil, err
		}
		if bad = b; bad == nil {
			apply(op, in, buf[offs[rb]:offs[rb+1]])
		}
	}
	return bad, nil
}
