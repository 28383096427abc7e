package pcm

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/mpios/mpios/mpi"
	"github.com/mpios/mpios/pcm/redist"
	"github.com/mpios/mpios/pcm/state"
)

// resizeData moves every registered distributed object's data over c, a communicator that
// contains every process of both the old and the new configuration (for a grow: the new,
// larger world, old ranks keeping their numbers; for a shrink: the old world). Before the
// call, the process with rank r in c holds the part of old rank r (nothing if r >= oldSize);
// afterwards it holds the part of new rank newRank[r] of newSize (newRank[r] == -1: the
// process leaves and holds nothing). weights (len newSize, nil = equal) sets uneven shares.
// It is collective over c, and returns the bytes this process sent.
//
// The new parts are only prepared: resizeDone installs them (commit) or drops them (abort),
// once the caller has agreed on the outcome, so that after an abort every process holds the
// data it had and the job goes on in its old configuration. (A Malleable's items move for
// good: see Malleable.) The processes that join (r >= oldSize) also receive the replicated
// registered values (Register) from c's rank 0.
func (p *Process) resizeData(c *mpi.Comm, oldSize int, newRank []int, newSize int, weights []float64) (int64, error) {
	me := c.Rank()
	p.dist.pending = nil
	if err := checkResize(c.Size(), oldSize, newRank, newSize, weights); err != nil {
		return 0, err
	}
	cc, err := c.Dup() // a private context: no message of the application can match ours
	if err != nil {
		return 0, fmt.Errorf("pcm: resize: %w", err)
	}
	defer cc.Free()
	olds, err := p.agreeLayouts(cc, me >= oldSize, oldSize)
	if err != nil {
		return 0, err
	}
	var reqs []*mpi.Request
	plans := make([]redist.Plan, len(olds))
	news := make([][]int64, len(olds))
	p.dist.moved = 0
	for k, l := range olds {
		to, err := redist.Blocks(l.Rows, weights, newSize)
		if err != nil {
			return 0, p.abortResize(reqs, fmt.Errorf("pcm: resize block %q: %w", l.Name, err))
		}
		news[k] = boundsOf(to)
		fromW, toW := make([]redist.Range, c.Size()), make([]redist.Range, c.Size())
		for w := range fromW {
			if w < oldSize {
				fromW[w] = l.rangeOf(w)
			}
			if newRank[w] >= 0 {
				toW[w] = to[newRank[w]]
			}
		}
		if plans[k], err = redist.PlanRanges(fromW, toW); err != nil {
			return 0, p.abortResize(reqs, fmt.Errorf("pcm: resize block %q: %w", l.Name, err))
		}
		o := p.dist.objects[k]
		var dst, src []byte
		if newRank[me] >= 0 {
			dst = o.prepare(toW[me].Len())
		}
		if me < oldSize {
			src = o.localBytes()
		}
		rb := l.rowBytes()
		at := func(buf []byte, base redist.Range, rows redist.Range) []byte {
			return buf[int64(rows.Lo-base.Lo)*rb : int64(rows.Hi-base.Lo)*rb]
		}
		if kept := fromW[me].Intersect(toW[me]); !kept.Empty() {
			copy(at(dst, toW[me], kept), at(src, fromW[me], kept))
		}
		for _, t := range plans[k].Transfers {
			var r *mpi.Request
			switch me {
			case t.To:
				r, err = mpi.Irecv(cc, at(dst, toW[me], t.Rows), t.From, k)
			case t.From:
				r, err = mpi.Isend(cc, at(src, fromW[me], t.Rows), t.To, k)
				p.dist.moved += int64(t.Count) * rb
			default:
				continue
			}
			if err != nil {
				return 0, p.abortResize(reqs, fmt.Errorf("pcm: resize block %q: %w", l.Name, err))
			}
			reqs = append(reqs, r)
		}
	}
	if err := mpi.WaitAll(reqs...); err != nil {
		return 0, p.abortResize(nil, fmt.Errorf("pcm: resize: move rows: %w", err))
	}
	p.dist.pending = &pendingResize{bounds: news, rank: newRank[me]}
	// The application's own structures last: their items cannot be taken back.
	return p.dist.moved, p.resizeMalleable(cc, oldSize, newRank, newSize, weights)
}

// pendingResize is what resizeData prepared and resizeDone installs.
type pendingResize struct {
	bounds [][]int64 // per object, the new layout
	rank   int       // this process's new rank, -1 if it leaves
}

// resizeDone ends the resize whose data resizeData moved: with commit, every distributed
// object takes its new part (a process that leaves drops its data); without, the new parts
// are dropped and every process keeps what it had. Call it on every process of the resize
// once they agree on the outcome.
func (p *Process) resizeDone(commit bool) {
	pr := p.dist.pending
	p.dist.pending = nil
	if pr == nil || !commit {
		p.discardPrepared()
		return
	}
	for k, o := range p.dist.objects {
		if pr.rank < 0 {
			o.release()
		} else {
			o.install(pr.bounds[k], pr.rank)
		}
	}
}

// abortResize drops what a failed resize prepared.
func (p *Process) abortResize(reqs []*mpi.Request, err error) error {
	for _, r := range reqs {
		_, _ = r.Wait() // the first error is the one reported
	}
	p.discardPrepared()
	return err
}

// checkResize validates the arguments of resizeData, the same on every process.
func checkResize(cSize, oldSize int, newRank []int, newSize int, weights []float64) error {
	if oldSize < 1 || oldSize > cSize || newSize < 1 || len(newRank) != cSize {
		return fmt.Errorf("pcm: resize %d -> %d ranks over %d processes with %d new ranks: %w", oldSize, newSize, cSize, len(newRank), ErrConfig)
	}
	if weights != nil && len(weights) != newSize {
		return fmt.Errorf("pcm: resize to %d ranks with %d weights: %w", newSize, len(weights), ErrConfig)
	}
	seen := make([]bool, newSize)
	for w, r := range newRank {
		if r < -1 || r >= newSize || (r >= 0 && seen[r]) {
			return fmt.Errorf("pcm: resize: process %d gets new rank %d (new ranks %v): %w", w, r, newRank, ErrConfig)
		}
		if r >= 0 {
			seen[r] = true
		}
	}
	if i := slices.Index(seen, false); i >= 0 {
		return fmt.Errorf("pcm: resize: no process gets new rank %d (new ranks %v): %w", i, newRank, ErrConfig)
	}
	return nil
}

// agreeLayouts gives every process of c the layouts of c's rank 0 (an old rank), and the
// processes that join its replicated registered values. Every process checks the layouts
// against its own objects; any mismatch fails the call on all.
func (p *Process) agreeLayouts(c *mpi.Comm, joining bool, oldSize int) ([]blockLayout, error) {
	var msg []byte
	var encErr error
	if c.Rank() == 0 {
		var buf bytes.Buffer
		enc, err := json.Marshal(p.dist.layouts())
		if err == nil {
			buf.Write(fmt.Appendf(nil, "%d\n", len(enc)))
			buf.Write(enc)
			_, err = p.replicated().WriteTo(&buf)
		}
		msg, encErr = buf.Bytes(), err
	}
	n := []int{len(msg)}
	if encErr != nil {
		n[0] = -1 // tells the others that rank 0 cannot describe its state
	}
	if err := mpi.Bcast(c, n, 0); err != nil {
		return nil, fmt.Errorf("pcm: resize: %w", err)
	}
	switch {
	case encErr != nil:
		return nil, fmt.Errorf("pcm: resize: encode layouts and registered values: %w", encErr)
	case n[0] < 0:
		return nil, fmt.Errorf("pcm: resize: rank 0 could not encode its layouts and registered values: %w", ErrPeer)
	}
	if c.Rank() != 0 {
		msg = make([]byte, n[0])
	}
	if err := mpi.Bcast(c, msg, 0); err != nil {
		return nil, fmt.Errorf("pcm: resize: %w", err)
	}
	olds, err := p.decodeLayouts(msg, joining, oldSize)
	return olds, errors.Join(err, agreeOK(c, err))
}

// decodeLayouts reads rank 0's message and checks it against this process's objects.
func (p *Process) decodeLayouts(msg []byte, joining bool, oldSize int) ([]blockLayout, error) {
	var l int
	i := bytes.IndexByte(msg, '\n')
	if i < 0 {
		return nil, fmt.Errorf("pcm: resize: malformed layouts from rank 0")
	}
	if _, err := fmt.Sscan(string(msg[:i]), &l); err != nil || i+1+l > len(msg) {
		return nil, fmt.Errorf("pcm: resize: malformed layouts from rank 0")
	}
	var olds []blockLayout
	if err := json.Unmarshal(msg[i+1:i+1+l], &olds); err != nil {
		return nil, fmt.Errorf("pcm: resize: layouts from rank 0: %w", err)
	}
	if len(olds) != len(p.dist.objects) {
		return nil, fmt.Errorf("pcm: resize: rank 0 has %d distributed objects, this process %d: %w", len(olds), len(p.dist.objects), ErrCallOrder)
	}
	for k, o := range p.dist.objects {
		if err := o.layout().sameShape(olds[k]); err != nil {
			return nil, fmt.Errorf("pcm: resize: %v: %w", err, ErrCallOrder)
		}
		if err := olds[k].check(oldSize); err != nil {
			return nil, fmt.Errorf("pcm: resize: %v: %w", err, ErrCallOrder)
		}
	}
	if joining {
		if _, err := p.replicated().ReadFrom(bytes.NewReader(msg[i+1+l:])); err != nil {
			return nil, fmt.Errorf("pcm: resize: registered values from rank 0: %w", err)
		}
	}
	return olds, nil
}

// replicated returns the registry of the values every rank holds alike (Register), without
// the distributed objects.
func (p *Process) replicated() *state.Registry {
	return p.reg.Select(func(name string) bool { return !p.dist.isDistributedName(name) })
}

// agreeOK fails on every process of c if err is set on any, naming the lowest failing rank.
func agreeOK(c *mpi.Comm, err error) error {
	in, out := []int64{-1}, []int64{0}
	if err != nil {
		in[0] = int64(c.Size() - c.Rank())
	}
	if cerr := mpi.Allreduce(c, in, out, mpi.Max); cerr != nil {
		return cerr
	}
	if out[0] < 0 || err != nil {
		return nil // no failure, or this process's own error is already reported
	}
	return fmt.Errorf("failed on rank %d: %w", c.Size()-int(out[0]), ErrPeer)
}

// Rebalance re-weights the distributed objects without changing the number of ranks: rank r
// gets a share of every block's rows proportional to weights[r] (nil: equal shares; see
// redist.Shares for the rounding). Rows move only between ranks whose old and new ranges
// overlap. It is collective over the world, at an iteration boundary (after Reconfigure);
// a checkpoint in flight is finished first. Take Local, Padded and Range again afterwards.
func (p *Process) Rebalance(weights []float64) error {
	p.awaitSnapshot()
	if !p.loaded {
		return fmt.Errorf("pcm: Rebalance before Load: %w", ErrCallOrder)
	}
	if !p.hasDistributed() {
		return fmt.Errorf("pcm: Rebalance: nothing distributed is registered (NewBlock, RegisterMalleable): %w", ErrCallOrder)
	}
	if err := p.settle(); err != nil && !errors.Is(err, ErrCheckpointFailed) {
		return err
	}
	n := p.world.Size()
	ranks := make([]int, n)
	for r := range ranks {
		ranks[r] = r
	}
	_, err := p.resizeData(p.world, n, ranks, n, weights)
	// Nobody installs before everybody has its rows: a failure anywhere leaves every
	// process with its old data. A process that failed does not agree: its error is a
	// broken communicator (the others' collectives then fail too) or the same on every
	// process (a bad request).
	if err == nil {
		err = agreeOK(p.world, nil)
	}
	p.resizeDone(err == nil)
	if err != nil {
		return fmt.Errorf("pcm: Rebalance: %w", err)
	}
	return nil
}

// MovedBytes returns the number of bytes this process sent in its last redistribution
// (resize or Rebalance).
func (p *Process) MovedBytes() int64 { return p.dist.moved }
