package pcm

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/mpios/mpios/pcm/ckptstore"
	"github.com/mpios/mpios/pcm/redist"
	"github.com/mpios/mpios/pcm/state"
)

// Loading distributed objects. A checkpoint's manifest records every block's layout
// (metaBlocks). A restarted rank computes its new rows (the checkpoint's layout when the
// number of ranks is the same, an even split otherwise), reads from each old piece that
// holds some of them exactly those rows, straight into its new buffer, and takes the
// replicated values from one of those pieces. Every piece it opens is read to its end, so
// that its checksums are verified.

// windowSink takes the rows want of a block from the piece of the rank that held old.
type windowSink struct {
	l         blockLayout
	old, want redist.Range
	dst       []byte // the new buffer's rows, want
}

func (s windowSink) Window(length int64) (int64, []byte, error) {
	rb := s.l.rowBytes()
	if length != int64(s.old.Len())*rb {
		return 0, nil, fmt.Errorf("the piece holds %d bytes of block %q, its layout says rows %v of %d bytes", length, s.l.Name, s.old, rb)
	}
	ov := s.old.Intersect(s.want)
	if ov.Empty() {
		return 0, nil, nil
	}
	return int64(ov.Lo-s.old.Lo) * rb, s.dst[int64(ov.Lo-s.want.Lo)*rb : int64(ov.Hi-s.want.Lo)*rb], nil
}

// wholeSink takes a block's rows whole into a new buffer of their size (a hand-over).
type wholeSink struct {
	o distributed
	l blockLayout
}

func (s wholeSink) Window(length int64) (int64, []byte, error) {
	if length%s.l.rowBytes() != 0 {
		return 0, nil, fmt.Errorf("%d bytes is not a whole number of rows of %d bytes", length, s.l.rowBytes())
	}
	return 0, s.o.prepare(int(length / s.l.rowBytes())), nil
}

// readInherited restores the state a predecessor handed over: the rank is the same, so are
// the rows; the layout comes with the replicated values. (A process that joins at a resize
// takes no such state: see join.)
func (p *Process) readInherited(r io.Reader) error {
	sinks := make(map[string]state.SliceSink, len(p.dist.objects))
	for _, o := range p.dist.objects {
		l := o.layout()
		sinks[l.Name] = wholeSink{o, l}
	}
	_, err := p.reg.ReadFromWith(r, state.ReadOptions{Slices: sinks})
	if err == nil {
		err = p.installLoaded(p.world.Rank(), p.world.Size())
	}
	if err != nil {
		p.discardPrepared()
	}
	return err
}

// installLoaded installs the prepared buffers under the layouts the registry now holds.
func (p *Process) installLoaded(rank, size int) error {
	for _, o := range p.dist.objects {
		l := o.layout() // the restored bounds
		if err := l.check(size); err != nil {
			return fmt.Errorf("pcm: Load: %v: %w", err, state.ErrMismatch)
		}
		if got, want := o.prepared(), l.rangeOf(rank).Len(); got != want {
			return fmt.Errorf("pcm: Load: block %q: %d rows for rank %d, its layout says %d: %w", l.Name, got, rank, want, state.ErrMismatch)
		}
	}
	for _, o := range p.dist.objects {
		o.install(o.layout().Bounds, rank)
	}
	return nil
}

func (p *Process) discardPrepared() {
	for _, o := range p.dist.objects {
		o.discard()
	}
}

// checkpointLayouts decodes the block layouts of m and matches them with the registered
// objects, in registration order.
func (p *Process) checkpointLayouts(m ckptstore.Manifest) ([]blockLayout, error) {
	meta, ok := m.Meta[metaBlocks]
	if !ok {
		return nil, fmt.Errorf("the checkpoint has no distributed data, this process registered %d blocks", len(p.dist.objects))
	}
	var ls []blockLayout
	if err := json.Unmarshal([]byte(meta), &ls); err != nil {
		return nil, fmt.Errorf("the checkpoint's layouts: %v", err)
	}
	if len(ls) != len(p.dist.objects) {
		return nil, fmt.Errorf("the checkpoint has %d blocks, this process registered %d", len(ls), len(p.dist.objects))
	}
	for k, o := range p.dist.objects {
		if err := o.layout().sameShape(ls[k]); err != nil {
			return nil, err
		}
		if err := ls[k].check(m.Size); err != nil {
			return nil, err
		}
	}
	return ls, nil
}

// tryLoadDistributed loads this rank's part of checkpoint m, which may have been taken at
// another number of ranks (see the comment at the top of the file).
func (p *Process) tryLoadDistributed(job string, m ckptstore.Manifest) (outcome, error) {
	rank, size := p.world.Rank(), p.world.Size()
	if len(p.dist.malleable) > 0 && m.Size != size {
		err := fmt.Errorf("pcm: restart from job %s checkpoint %d: the checkpoint has %d ranks, this world has %d, and pcm cannot split the application's own structures (RegisterMalleable %q) over another number (run with -np %d): %w",
			job, m.Seq, m.Size, size, p.dist.malleable[0].name, m.Size, ErrSizeMismatch)
		return outcome{Code: codeFatal, Rank: -1, Reason: err.Error()}, err
	}
	olds, err := p.checkpointLayouts(m)
	if err != nil {
		err = fmt.Errorf("pcm: restart from job %s checkpoint %d: %v: %w", job, m.Seq, err, state.ErrMismatch)
		return outcome{Code: codeFatal, Rank: rank, Reason: err.Error()}, err
	}
	news := make([][]int64, len(olds))
	wants := make([]redist.Range, len(olds))
	dsts := make([][]byte, len(olds))
	var pieces []int
	for k, l := range olds {
		if m.Size == size {
			news[k] = l.Bounds // the checkpoint's weighting
		} else {
			rs, _ := redist.Blocks(l.Rows, nil, size)
			news[k] = boundsOf(rs)
		}
		wants[k] = redist.Range{Lo: int(news[k][rank]), Hi: int(news[k][rank+1])}
		dsts[k] = p.dist.objects[k].prepare(wants[k].Len())
		for r := range m.Size {
			if !l.rangeOf(r).Intersect(wants[k]).Empty() && !slices.Contains(pieces, r) {
				pieces = append(pieces, r)
			}
		}
	}
	slices.Sort(pieces)
	// The replicated values come from the last piece read, so that they are assigned only
	// once every piece has been verified.
	if len(pieces) == 0 {
		pieces = []int{min(rank, m.Size-1)}
	}
	for i, r := range pieces {
		sinks := make(map[string]state.SliceSink, len(olds))
		for k, l := range olds {
			sinks[l.Name] = windowSink{l: l, old: l.rangeOf(r), want: wants[k], dst: dsts[k]}
		}
		if o, err := p.readPiece(job, m, r, state.ReadOptions{Slices: sinks, VerifyOnly: i < len(pieces)-1}); o.Code != codeOK {
			p.discardPrepared()
			return o, err
		}
	}
	for k, o := range p.dist.objects {
		o.install(news[k], rank)
	}
	return outcome{Code: codeOK, Rank: rank}, nil
}

// readPiece reads old rank r's piece of m with o, to its end.
func (p *Process) readPiece(job string, m ckptstore.Manifest, r int, o state.ReadOptions) (outcome, error) {
	rank := p.world.Rank()
	reason := reasonOf
	if r != rank {
		reason = func(err error) string { return fmt.Sprintf("piece of rank %d: %s", r, reasonOf(err)) }
	}
	rc, err := p.openPieceOf(m, r)
	if err != nil {
		return outcome{Code: codeSkip, Rank: rank, Reason: reason(err)}, nil
	}
	defer rc.Close()
	if _, err := p.reg.ReadFromWith(rc, o); err != nil {
		if errors.Is(err, state.ErrMismatch) {
			err = fmt.Errorf("pcm: restart from job %s checkpoint %d: the registered values do not match the checkpoint (entries %s): %w",
				job, m.Seq, m.Meta["pcm.entries"], err)
			return outcome{Code: codeFatal, Rank: rank, Reason: err.Error()}, err
		}
		return outcome{Code: codeSkip, Rank: rank, Reason: reason(err)}, nil
	}
	// ReadFrom stops at the state trailer; reading on to EOF has the piece's checksum
	// checked too.
	if _, err := io.Copy(io.Discard, rc); err != nil {
		return outcome{Code: codeSkip, Rank: rank, Reason: reason(err)}, nil
	}
	return outcome{Code: codeOK, Rank: rank}, nil
}
