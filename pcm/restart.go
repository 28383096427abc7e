package pcm

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/mpios/mpios/mpi"
	"github.com/mpios/mpios/pcm/ckptstore"
	"github.com/mpios/mpios/pcm/state"
)

// Outcome codes of one rank's attempt, agreed with Max: the worst one wins.
const (
	codeOK    = 0
	codeSkip  = 1 // this checkpoint is unusable: fall back to an older one
	codeFatal = 2 // no checkpoint will do (wrong world size, state does not fit): give up
)

// candidate is a committed checkpoint as one rank's store shows it.
type candidate struct {
	m      ckptstore.Manifest
	ok     bool   // the manifest reads
	reason string // why it does not
}

// outcome is one rank's result for one checkpoint, as exchanged between the ranks.
type outcome struct {
	Code   int    `json:"code"`
	Rank   int    `json:"rank"` // the rank at fault, or -1 for the manifest
	Reason string `json:"reason"`
}

// restore finds the newest checkpoint of the restart job that every rank can read and
// verify, and loads this rank's piece of it into the registry. The ranks walk down the
// checkpoint numbers together: each round they agree on the newest remaining candidate, every
// rank tries its own piece (which reads it only once, verifying while loading), and they
// agree on the outcome. Pieces may be on different nodes: each rank reads only its own.
func (p *Process) restore() (ckptstore.Manifest, error) {
	job := p.opts.Restart
	cands, err := p.localCandidates(job)
	if err == nil && len(cands) == 0 {
		cands = p.remoteCandidates(job)
	}
	o := outcome{Rank: p.world.Rank()}
	if err != nil {
		o.Code, o.Reason = codeFatal, "list checkpoints: "+err.Error()
		err = fmt.Errorf("pcm: restart from job %s: list checkpoints: %w", job, err)
	}
	if worst, fails, cerr := p.agreeOutcome(o); cerr != nil {
		return ckptstore.Manifest{}, fmt.Errorf("pcm: restart from job %s: %w", job, cerr)
	} else if worst != codeOK {
		return ckptstore.Manifest{}, p.fatal(job, err, fails)
	}

	var skipped []ckptstore.Skipped
	bound := int64(math.MaxInt64)
	for {
		best := int64(-1)
		for seq := range cands {
			if seq < uint64(bound) && int64(seq) > best {
				best = int64(seq)
			}
		}
		agreed := []int64{0}
		if err := mpi.Allreduce(p.world, []int64{best}, agreed, mpi.Max); err != nil {
			return ckptstore.Manifest{}, fmt.Errorf("pcm: restart from job %s: %w", job, err)
		}
		if agreed[0] < 0 {
			return ckptstore.Manifest{}, p.noCheckpoint(job, skipped)
		}
		seq := uint64(agreed[0])
		c, have := cands[seq]
		// Ranks on nodes that do not hold this checkpoint get its manifest from one that does.
		c, have, err = p.shareManifest(c, have)
		if err != nil {
			return ckptstore.Manifest{}, fmt.Errorf("pcm: restart from job %s checkpoint %d: share manifest: %w", job, seq, err)
		}
		o, ferr := p.tryLoad(job, seq, c, have)
		worst, fails, err := p.agreeOutcome(o)
		if err != nil {
			return ckptstore.Manifest{}, fmt.Errorf("pcm: restart from job %s checkpoint %d: %w", job, seq, err)
		}
		switch worst {
		case codeOK:
			if p.world.Rank() == 0 {
				for _, s := range skipped {
					fmt.Fprintf(p.opts.Log, "pcm: %v, falling back to checkpoint %d\n", s, seq)
				}
				fmt.Fprintf(p.opts.Log, "pcm: job %s restarts from job %s checkpoint %d (iteration %d)\n",
					p.opts.JobID, job, seq, c.m.Iteration)
			}
			return c.m, nil
		case codeFatal:
			return ckptstore.Manifest{}, p.fatal(job, ferr, fails)
		}
		for _, f := range fails {
			s := ckptstore.Skipped{Seq: seq, Rank: f.Rank, Reason: f.Reason}
			// Ranks sharing a store report the same manifest problem: say it once.
			if !containsSkipped(skipped, s) {
				skipped = append(skipped, s)
			}
		}
		bound = int64(seq)
	}
}

func containsSkipped(ss []ckptstore.Skipped, s ckptstore.Skipped) bool {
	for _, t := range ss {
		if t.Seq == s.Seq && t.Rank == s.Rank && t.Reason == s.Reason {
			return true
		}
	}
	return false
}

// fatal returns this rank's own fatal error, or one naming the rank that failed.
func (p *Process) fatal(job string, own error, fails []outcome) error {
	if own != nil {
		return own
	}
	for _, f := range fails {
		if f.Code == codeFatal {
			return fmt.Errorf("pcm: restart from job %s: rank %d: %s: %w", job, f.Rank, f.Reason, ErrPeer)
		}
	}
	return fmt.Errorf("pcm: restart from job %s: %w", job, ErrPeer)
}

// noCheckpoint is the error when no checkpoint is left, with why each was skipped.
func (p *Process) noCheckpoint(job string, skipped []ckptstore.Skipped) error {
	var b strings.Builder
	for _, s := range skipped {
		fmt.Fprintf(&b, "; %v", s)
	}
	return fmt.Errorf("pcm: restart from job %s: %w in %s%s", job, ErrNoCheckpoint, p.store.Dir(), b.String())
}

// agreeOutcome returns the worst outcome of all ranks and, if it is not codeOK, the
// outcomes that are not, in rank order. Every rank gets the same answer.
func (p *Process) agreeOutcome(o outcome) (int, []outcome, error) {
	worst := []int64{0}
	if err := mpi.Allreduce(p.world, []int64{int64(o.Code)}, worst, mpi.Max); err != nil {
		return 0, nil, err
	}
	if worst[0] == codeOK {
		return codeOK, nil, nil
	}
	enc, err := json.Marshal(o)
	if err != nil {
		return 0, nil, err
	}
	encs, err := allgatherBytes(p.world, enc)
	if err != nil {
		return 0, nil, err
	}
	var fails []outcome
	for r, b := range encs {
		var f outcome
		if err := json.Unmarshal(b, &f); err != nil {
			return 0, nil, fmt.Errorf("outcome of rank %d: %w", r, err)
		}
		if f.Code != codeOK {
			fails = append(fails, f)
		}
	}
	return int(worst[0]), fails, nil
}

// localCandidates lists the committed checkpoints of job in this rank's store, including those
// whose manifest does not read (with the reason), so that restart can say why it skips them.
func (p *Process) localCandidates(job string) (map[uint64]candidate, error) {
	ms, err := p.store.Checkpoints(job)
	if err != nil {
		return nil, err
	}
	cands := make(map[uint64]candidate, len(ms))
	for _, m := range ms {
		if m.Seq <= math.MaxInt64 {
			cands[m.Seq] = candidate{m: m, ok: true}
		}
	}
	seqs, err := listSeqs(p.store, job)
	if err != nil {
		return nil, err
	}
	for _, seq := range seqs {
		if _, ok := cands[seq]; ok || seq > math.MaxInt64 {
			continue
		}
		_, err := p.store.Manifest(job, seq)
		if err == nil || errors.Is(err, ckptstore.ErrNotFound) {
			continue // not committed
		}
		cands[seq] = candidate{reason: reasonOf(err)}
	}
	return cands, nil
}

// tryLoad reads this rank's piece of checkpoint seq into the registry (with distributed
// objects, the rows it needs from the pieces that hold them: tryLoadDistributed). The
// returned error is set for codeFatal outcomes.
func (p *Process) tryLoad(job string, seq uint64, c candidate, have bool) (outcome, error) {
	rank := p.world.Rank()
	switch {
	case !have:
		return outcome{Code: codeSkip, Rank: rank, Reason: "manifest missing on this rank's node"}, nil
	case !c.ok:
		return outcome{Code: codeSkip, Rank: -1, Reason: c.reason}, nil
	case len(p.dist.objects) > 0:
		return p.tryLoadDistributed(job, c.m)
	case c.m.Size != p.world.Size():
		err := &SizeMismatchError{Job: job, Seq: seq, Checkpoint: c.m.Size, World: p.world.Size(), Distributed: c.m.Meta[metaBlocks] != ""}
		return outcome{Code: codeFatal, Rank: -1, Reason: err.Error()}, err
	}
	return p.readPiece(job, c.m, rank, state.ReadOptions{})
}

// reasonOf condenses a load error into the short reason a fallback report shows.
func reasonOf(err error) string {
	if ce, ok := errorsAs[*ckptstore.CorruptError](err); ok {
		return ce.Reason
	}
	if ce, ok := errorsAs[*state.CorruptError](err); ok {
		if ce.Entry != "" {
			return fmt.Sprintf("%s (entry %q)", ce.Reason, ce.Entry)
		}
		return ce.Reason
	}
	switch {
	case errors.Is(err, ckptstore.ErrNotFound):
		return "piece missing"
	case errors.Is(err, ckptstore.ErrNotLocal):
		return "piece not on this node: " + err.Error()
	}
	return err.Error()
}
