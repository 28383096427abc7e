package mpi

// Alltoallw (MPI_Alltoallw): an all-to-all exchange whose blocks each have their own length
// and element type. In MPI every peer's block is described by a count, a displacement and a
// datatype; here each is a Block, a view of a slice of its own element type.

// Block is one peer's part of an Alltoallw: the bytes of a slice with its element type, made
// by BlockOf. A Block views the slice's memory (nothing is copied): a receive Block's slice
// holds the result. The zero Block is an empty one.
type Block struct {
	buf   []byte
	elem  uint8
	esize int
}

// BlockOf returns the Block of s. A slice of structs travels as bytes: pass StructBytes(s).
func BlockOf[T Elem](s []T) Block {
	return Block{buf: asBytes(s), elem: elemCode[T](), esize: sizeOf[T]()}
}

// Len returns the number of elements in b.
func (b Block) Len() int {
	if b.esize == 0 {
		return 0
	}
	return len(b.buf) / b.esize
}

// wire returns the element type and size b travels with. An empty block has no element type
// (as a count of 0 of any MPI datatype matches any other): every empty block travels as
// bytes, so that empty blocks of different types match, while an abort or a non-empty block
// still shows in the receive.
func (b Block) wire() (elem uint8, esize int) {
	if len(b.buf) == 0 {
		return elemUint8, 1
	}
	return b.elem, b.esize
}

func (b Block) elemOnWire() uint8 {
	elem, _ := b.wire()
	return elem
}

// Alltoallw sends send[j] to rank j and receives rank i's block into recv[i], on every rank
// (MPI_Alltoallw; pairwise exchange, as Alltoallv). send and recv must have one Block per rank
// of c. The blocks of one pair must agree: recv[i] on rank j has the element type and length
// of send[j] on rank i (empty blocks match whatever their types). A rank whose blocks do not
// fit returns ErrCount, takes part all the same, and sends word of it to the peers after it
// (which return an *AbandonedError, matching ErrCount); none blocks.
func Alltoallw(c *Comm, send, recv []Block) (err error) {
	if t := observe("Alltoallw"); t != nil {
		bytes := 0
		for _, b := range send {
			bytes += len(b.buf)
		}
		defer func() { t.done(c, -1, bytes, err) }()
	}
	if err := c.valid("Alltoallw"); err != nil {
		return err
	}
	c.afterNonblocking()
	p, r := c.Size(), c.Rank()
	var bad error
	if len(send) != p || len(recv) != p {
		bad = countError("Alltoallw", "%d send and %d receive blocks for %d ranks", len(send), len(recv), p)
	} else if se, _ := send[r].wire(); se != recv[r].elemOnWire() || len(send[r].buf) != len(recv[r].buf) {
		bad = countError("Alltoallw", "this rank sends itself %d elements of %s but receives %d of %s",
			send[r].Len(), elemName(se), recv[r].Len(), elemName(recv[r].elemOnWire()))
	} else {
		copy(recv[r].buf, send[r].buf)
	}
	for i := 1; i < p; i++ {
		dst, src := (r+i)%p, (r-i+p)%p
		var out, in Block
		if bad == nil {
			out, in = send[dst], recv[src]
		}
		b, err := exchangeBlock(c, out, dst, in, src, bad)
		if err != nil {
			return collErr("Alltoallw", err)
		}
		bad = b
	}
	return bad
}

// exchangeBlock is cexchangeFit for Blocks: out to dest, in filled exactly from src, or, with
// bad set, an abort sent and whatever src sends drained.
func exchangeBlock(c *Comm, out Block, dest int, in Block, src int, bad error) (error, error) {
	if bad != nil {
		if err := cwait(c.startSend("collective", c.ctx+1, nil, elemAbort, dest, tagAlltoall)); err != nil {
			return bad, err
		}
		return bad, cdrain(c, src, tagAlltoall)
	}
	ielem, iesize := in.wire()
	rr, err := c.irecv("collective", c.ctx+1, in.buf, ielem, iesize, src, tagAlltoall, false)
	if err != nil {
		return nil, err
	}
	oelem, _ := out.wire()
	sr, err := c.startSend("collective", c.ctx+1, out.buf, oelem, dest, tagAlltoall)
	if err != nil {
		rr.wait()
		return nil, err
	}
	st, rerr := rr.wait()
	if _, err := sr.wait(); err != nil {
		return nil, err
	}
	return fitOutcome("Alltoallw", st, rerr, len(in.buf)/iesize)
}
