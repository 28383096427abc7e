package pcm

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/mpios/mpios/mpi"
	"github.com/mpios/mpios/pcm/ckptstore"
	"github.com/mpios/mpios/pcm/state"
)

// A checkpoint goes through three steps, each ending at a point where every rank agrees:
//
//  1. At the boundary where it is due, each rank copies its registered state into memory
//     (a snapshot, milliseconds) and goes on computing while a goroutine writes the copy to
//     its store and makes it durable. The rows of ChangedOnlyByFlip blocks, which stay as
//     they are until the next boundary, are not copied there: the goroutine reads them, and
//     the next boundary waits until it has (awaitSnapshot).
//  2. At the first agreement point where every rank's piece is durable, the ranks exchange
//     what they wrote (sizes, checksums, errors); one rank per store commits the manifest
//     and prunes, again in the background.
//  3. At the first agreement point where every committing rank is done, the checkpoint is
//     committed, or reported failed on every rank.
//
// A checkpoint is thus committed a few agreement points after it was taken, and only once
// every piece is durable. While its pieces are being written the ranks agree at least every
// flightPollDelay, so that step 2 follows soon after the last piece is durable (the manifest
// is then in the stores, where recovery finds it: the work a failure loses stays within one
// checkpoint interval); step 3 only reports the commit and waits for an ordinary agreement.
// At most one is in flight: a checkpoint due while the previous one is still in flight, a
// migration, and Close first finish it (settle), waiting if need be.
// With Options.SyncCheckpoints all three steps happen at the boundary itself.

// flight is the checkpoint in flight; nil when there is none.
type flight struct {
	seq     uint64
	iter    int
	applied uint64 // log entries acted on when it was taken (reported with its commit)

	piece chan pieceResult // the background write's outcome
	res   *pieceResult     // once received

	committing bool               // step 2 is done: the manifest is being committed
	commit     chan error         // the background commit's outcome (committing leaders)
	commitErr  error              // once received
	commitDone bool               // commitErr is set
	manifest   ckptstore.Manifest // what is being committed
	blocks     string             // the layouts of the distributed objects when it was taken

	// The blocks whose rows the background reads after the boundary (ChangedOnlyByFlip),
	// with their flip counts when it was taken; torn, once set, fails the piece.
	readLater []distributed
	flipsAt   []int64
	torn      error
}

// startCheckpoint takes checkpoint p.seq of the state after iteration iter: step 1.
func (p *Process) startCheckpoint(iter int) {
	f := &flight{seq: p.seq, iter: iter, piece: make(chan pieceResult, 1), blocks: p.dist.layoutMeta(), applied: p.applied}
	p.seq++ // also when abandoned: a number is never reused
	p.flight = f
	res := pieceResult{Time: time.Now().UTC(), Store: p.storeID}
	rank, jobID := p.world.Rank(), p.opts.JobID
	buddy := ""
	if p.replicates() {
		var err error
		if buddy, err = p.chooseBuddy(); err != nil {
			f.piece <- res.with(ckptstore.PieceInfo{}, fmt.Errorf("choose the buddy node: %w", err))
			return
		}
	}
	if p.opts.SyncCheckpoints {
		if err := p.store.Reserve(int64(p.snapshotSize()), p.opts.Cap); err != nil {
			f.piece <- res.with(ckptstore.PieceInfo{}, err)
			return
		}
		// Straight from the registered values to disk: no second copy of the state in memory.
		info, err := p.store.PutPieceFrom(jobID, f.seq, rank, p.reg)
		if err == nil {
			info = p.replicate(buddy, f.seq, info, pieceSource{dense: func(w io.Writer) error {
				_, err := p.reg.WriteTo(w)
				return err
			}})
			res.Rechoose = buddy != "" && len(info.Copies) == 0
		}
		f.piece <- res.with(info, err)
		return
	}
	if p.snap == nil {
		p.snap = new(ckptstore.PieceBuffer)
	}
	snap, size := p.snap, p.snapshotSize()
	later, names := p.readLater(f)
	var capture *state.Capture
	var read chan struct{}
	if later {
		// Copy the small values now; the blocks' rows are read in the background, and the
		// next Reconfigure waits for that (awaitSnapshot).
		c, err := p.reg.Capture(p.capture, names)
		if err != nil {
			f.readLater, f.flipsAt = nil, nil
			f.piece <- res.with(ckptstore.PieceInfo{}, err)
			return
		}
		p.capture, capture = c, c
		read = make(chan struct{})
		p.snapRead = read
	} else if err := fillSnapshot(snap, size, p.reg); err != nil {
		f.piece <- res.with(ckptstore.PieceInfo{}, err)
		return
	}
	inBackground(func() {
		if capture != nil {
			if beforeDeferredRead != nil {
				beforeDeferredRead()
			}
			err := fillSnapshot(snap, size, capture)
			close(read)
			if err != nil {
				f.piece <- res.with(ckptstore.PieceInfo{}, err)
				return
			}
		}
		if err := p.store.Reserve(int64(snap.Len()), p.opts.Cap); err != nil {
			f.piece <- res.with(ckptstore.PieceInfo{}, err)
			return
		}
		info, err := p.store.PutPieceBuffer(jobID, f.seq, rank, snap)
		if err == nil {
			info = p.replicate(buddy, f.seq, info, pieceSource{
				dense: func(w io.Writer) error {
					_, err := w.Write(snap.Bytes())
					return err
				},
				// The snapshot knows its zero blocks: the buddy gets only the others.
				sparse: func(w io.Writer) error {
					_, err := snap.WriteSparseTo(w)
					return err
				},
			})
			res.Rechoose = buddy != "" && len(info.Copies) == 0
		}
		f.piece <- res.with(info, err)
	})
}

// beforeDeferredRead, if set (by tests), runs in the background before it reads the rows of
// ChangedOnlyByFlip blocks.
var beforeDeferredRead func()

// readLater notes in f the blocks whose rows a background checkpoint reads after the
// boundary, with their flip counts, and returns whether there are any and which registered
// names they are.
func (p *Process) readLater(f *flight) (bool, func(name string) bool) {
	if p.copyAtBoundary {
		return false, nil
	}
	var names []string
	for _, o := range p.dist.objects {
		if name, ok, flips := o.readLater(); ok {
			names = append(names, name)
			f.readLater, f.flipsAt = append(f.readLater, o), append(f.flipsAt, flips)
		}
	}
	return len(names) > 0, func(name string) bool { return slices.Contains(names, name) }
}

// awaitSnapshot waits until the background checkpoint has read the rows it reads after the
// boundary, before anything may change them: the application's next iteration, a
// migration, a resize. A block that flipped more than once meanwhile broke its promise
// (ChangedOnlyByFlip): the checkpoint fails, and later ones copy at the boundary.
func (p *Process) awaitSnapshot() {
	if p.snapRead == nil {
		return
	}
	<-p.snapRead
	p.snapRead = nil
	f := p.flight
	if f == nil {
		return
	}
	for i, o := range f.readLater {
		name, _, flips := o.readLater()
		if n := flips - f.flipsAt[i]; n > 1 && f.torn == nil {
			f.torn = fmt.Errorf("block %q flipped %d times before the iteration boundary after the one the checkpoint was taken at, "+
				"so its rows may have changed while the checkpoint read them (pcm.ChangedOnlyByFlip allows one Flip per iteration): "+
				"the following checkpoints copy the state at the boundary", name, n)
			p.copyAtBoundary = true
		}
	}
	f.readLater, f.flipsAt = nil, nil
}

// fillSnapshot replaces the contents of snap, sized for about size bytes, with the state
// src writes (the registry at the boundary, or its capture after it).
func fillSnapshot(snap *ckptstore.PieceBuffer, size int, src io.WriterTo) error {
	snap.Reset()
	snap.Grow(size)
	_, err := src.WriteTo(snap)
	return err
}

// snapshotSize estimates the bytes of a snapshot of the registered state.
func (p *Process) snapshotSize() int {
	return int(min(p.reg.Size()+4096, 1<<40))
}

func (r pieceResult) with(info ckptstore.PieceInfo, err error) pieceResult {
	r.Info = info
	if err != nil {
		r.Err = err.Error()
		r.err = err
	}
	return r
}

// busy reports whether this rank's part of the current step is still running, collecting
// its outcome if it has just finished. Only committing ranks have a part in step 3.
func (f *flight) busy() bool {
	if !f.committing {
		if f.res == nil {
			select {
			case r := <-f.piece:
				f.received(r)
			default:
			}
		}
		return f.res == nil
	}
	if f.commit != nil && !f.commitDone {
		select {
		case f.commitErr = <-f.commit:
			f.commitDone = true
		default:
		}
		return !f.commitDone
	}
	return false
}

// received takes the background write's outcome, failed if the rows it read were torn.
func (f *flight) received(r pieceResult) {
	if f.torn != nil && r.err == nil {
		r = r.with(ckptstore.PieceInfo{}, f.torn)
	}
	f.res = &r
}

// wait blocks until this rank's part of the current step is done.
func (f *flight) wait() {
	if !f.committing && f.res == nil {
		f.received(<-f.piece)
	}
	if f.committing && f.commit != nil && !f.commitDone {
		f.commitErr, f.commitDone = <-f.commit, true
	}
}

// commitVote is this rank's part of the agreement on step 3: 1 + its rank if its commit
// failed, else 0.
func (p *Process) commitVote() int64 {
	if f := p.flight; f != nil && f.committing && f.commitDone && f.commitErr != nil {
		return int64(p.world.Rank()) + 1
	}
	return 0
}

// advance takes the checkpoint in flight through its next step, once every rank is done with
// the current one. All ranks call it at the same point. failed is the agreed commitVote.
func (p *Process) advance(failed int64) error {
	f := p.flight
	if !f.committing {
		return p.exchangePieces()
	}
	p.flight = nil
	if failed == 0 {
		p.reportCommitted(f.manifest, f.applied)
		return nil
	}
	cerr := &CheckpointError{Job: p.opts.JobID, Seq: f.seq, Iteration: f.iter, CommitFailed: true}
	reason := "commit failed"
	if int(failed-1) == p.world.Rank() && f.commitErr != nil {
		reason, cerr.Err = f.commitErr.Error(), f.commitErr
	}
	cerr.Failures = []RankFailure{{Rank: int(failed - 1), Reason: reason}}
	return cerr
}

// exchangePieces is step 2: every rank learns what every rank wrote; if all succeeded, the
// first rank of each store commits the manifest there, in the background.
func (p *Process) exchangePieces() error {
	f := p.flight
	seq, rank, n := f.seq, p.world.Rank(), p.world.Size()
	cerr := &CheckpointError{Job: p.opts.JobID, Seq: seq, Iteration: f.iter, Err: f.res.err}
	enc, err := json.Marshal(f.res)
	if err != nil {
		p.flight = nil
		p.forgetBuddy()
		return fmt.Errorf("pcm: checkpoint %d: encode result: %w", seq, err)
	}
	encs, err := exchangeResults(p.world, enc)
	if err != nil {
		p.flight = nil
		p.forgetBuddy()
		return fmt.Errorf("pcm: checkpoint %d: exchange results: %w", seq, err)
	}
	results := make([]pieceResult, n)
	for r, b := range encs {
		if err := json.Unmarshal(b, &results[r]); err != nil {
			p.flight = nil
			p.forgetBuddy()
			return fmt.Errorf("pcm: checkpoint %d: result of rank %d: %w", seq, r, err)
		}
		if results[r].Err != "" {
			cerr.Failures = append(cerr.Failures, RankFailure{Rank: r, Reason: results[r].Err})
		}
		if results[r].Rechoose {
			p.forgetBuddy() // every rank sees the same results: all forget
		}
	}
	if len(cerr.Failures) > 0 {
		p.forgetBuddy()
		p.flight = nil
		return cerr // every rank saw the same results: all abandon it
	}
	for r := range results {
		if results[r].Store == p.storeID {
			p.leader = r == rank
			break
		}
	}
	f.manifest = ckptstore.Manifest{
		Job: p.opts.JobID, Seq: seq, Iteration: int64(f.iter), Size: n,
		Time: results[0].Time, // the same on every committing rank, so the manifests are equal
		Meta: map[string]string{"pcm.entries": strings.Join(p.reg.Names(), ",")},
	}
	if f.blocks != "" {
		f.manifest.Meta[metaBlocks] = f.blocks
	}
	for _, r := range results {
		f.manifest.Pieces = append(f.manifest.Pieces, r.Info)
	}
	f.committing = true
	if p.leader {
		f.commit = make(chan error, 1)
		commit := func() {
			err := p.commit(f.manifest)
			if err == nil {
				if perr := p.store.Prune(p.opts.JobID, p.opts.Keep); perr != nil {
					// The checkpoint is committed; a failed cleanup only costs disk space.
					fmt.Fprintf(p.opts.Log, "pcm: warning: %v\n", perr)
				}
			}
			f.commit <- err
		}
		if p.opts.SyncCheckpoints {
			commit()
		} else {
			inBackground(commit)
		}
	}
	return nil
}

// settle finishes the checkpoint in flight, waiting for this rank's parts: steps 2 and 3 as
// far as they are left. Collective: every rank calls it at the same point.
func (p *Process) settle() error {
	if p.flight == nil {
		return nil
	}
	if !p.flight.committing {
		p.flight.wait()
		if err := p.advance(0); err != nil || p.flight == nil {
			return err
		}
	}
	p.flight.wait()
	vote, out := []int64{p.commitVote()}, []int64{0}
	if err := mpi.Allreduce(p.world, vote, out, mpi.Max); err != nil {
		seq := p.flight.seq
		p.flight = nil
		return fmt.Errorf("pcm: checkpoint %d: agree on commit: %w", seq, err)
	}
	return p.advance(out[0])
}

// resultSlot is the size of a rank's slot in the exchange of piece results: a result is
// about 250 bytes of JSON.
const resultSlot = 512

// exchangeResults gives every rank the encoded piece results of all ranks, in rank order:
// one Allgather of fixed slots when each fits in its slot, as they do but for long error
// texts or node names. A slot that cannot hold its result says so, and then every rank,
// having seen the same slots, exchanges them again at their own lengths (allgatherBytes,
// two more collectives).
func exchangeResults(c *mpi.Comm, enc []byte) ([][]byte, error) {
	const head = 3 // fits (1) and the length (2 bytes)
	slot := make([]byte, resultSlot)
	if len(enc) <= resultSlot-head {
		slot[0] = 1
		binary.LittleEndian.PutUint16(slot[1:head], uint16(len(enc)))
		copy(slot[head:], enc)
	}
	all := make([]byte, c.Size()*resultSlot)
	if err := mpi.Allgather(c, slot, all); err != nil {
		return nil, err
	}
	out := make([][]byte, c.Size())
	for r := range out {
		s := all[r*resultSlot : (r+1)*resultSlot]
		if s[0] != 1 {
			return allgatherBytes(c, enc)
		}
		k := int(binary.LittleEndian.Uint16(s[1:head]))
		if k > resultSlot-head {
			return nil, fmt.Errorf("rank %d's result slot says %d bytes", r, k)
		}
		out[r] = s[head : head+k]
	}
	return out, nil
}
