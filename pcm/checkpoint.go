package pcm

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/mpios/mpios/internal/rankreconf"
	"github.com/mpios/mpios/internal/reconf"
	"github.com/mpios/mpios/mpi"
	"github.com/mpios/mpios/pcm/ckptstore"
)

const (
	// pollBudget is the share of run time the adaptive on-demand agreement may cost.
	pollBudget = 0.002
	// maxPollDelay bounds the time between two adaptive agreements.
	maxPollDelay = 500 * time.Millisecond
	// flightPollDelay bounds the time between agreements while a checkpoint's pieces are
	// being written: the first agreement after they are durable commits it.
	flightPollDelay = 50 * time.Millisecond
	// defaultPollCost is the assumed cost of one agreement before one was measured.
	defaultPollCost = 100 * time.Microsecond
)

// Fields of the agreement vector, reduced with Max.
const (
	agreeWant         = iota // some rank requested a checkpoint
	agreePending             // 1 + the highest rank with pending operations, or 0
	agreeIter                // the iteration
	agreeNegIter             // minus the iteration: its Max is minus the minimum
	agreePoll                // proposed poll interval
	agreeFlightPoll          // proposed poll interval while a checkpoint's pieces are written
	agreeNegHave             // minus the number of reconfiguration entries known: its Max is minus the minimum
	agreeBusy                // some rank is still busy with the checkpoint in flight
	agreeCommitFailed        // 1 + the highest rank whose commit of the checkpoint in flight failed, or 0
	agreeLen
)

// sync is an agreement point: the ranks exchange their requests and checks in one Allreduce,
// then checkpoint if it is due or requested.
func (p *Process) sync(iter int, scheduled bool, pending int) (Action, error) {
	start := time.Now()
	want := p.want.Swap(false)
	v := make([]int64, agreeLen)
	if want {
		v[agreeWant] = 1
	}
	if pending > 0 {
		v[agreePending] = int64(p.world.Rank()) + 1
	}
	v[agreeIter], v[agreeNegIter] = int64(iter), -int64(iter)
	v[agreePoll] = p.proposePoll(start, maxPollDelay)
	v[agreeFlightPoll] = p.proposePoll(start, flightPollDelay)
	if p.ctl != nil {
		v[agreeNegHave] = -int64(p.ctl.have())
	}
	if p.flight != nil && p.flight.busy() {
		v[agreeBusy] = 1
	}
	v[agreeCommitFailed] = p.commitVote()
	out := make([]int64, agreeLen)
	if err := mpi.Allreduce(p.world, v, out, mpi.Max); err != nil {
		p.keepRequest(want)
		return Continue, fmt.Errorf("pcm: Reconfigure(%d): agree: %w", iter, err)
	}
	p.lastSyncCost = time.Since(start)
	p.schedulePolls(out)
	defer func() { p.lastSyncEnd, p.callsAtSync = time.Now(), p.calls }()
	if lo, hi := -out[agreeNegIter], out[agreeIter]; lo != hi {
		p.keepRequest(want)
		return Continue, fmt.Errorf("pcm: Reconfigure: ranks are at iterations %d to %d, not the same: %w", lo, hi, ErrIteration)
	}
	if r := out[agreePending]; r > 0 {
		p.keepRequest(want)
		return Continue, p.pendingError(iter, int(r-1), pending)
	}
	var ckptErr error
	// note keeps a checkpoint's failure for the caller, who may ignore it, and stops at
	// anything else.
	note := func(err error) error {
		if err != nil && !errors.Is(err, ErrCheckpointFailed) {
			return err
		}
		ckptErr = errors.Join(ckptErr, err)
		return nil
	}
	if p.flight != nil && out[agreeBusy] == 0 {
		if err := note(p.advance(out[agreeCommitFailed])); err != nil {
			return Continue, err
		}
	}
	pt := rankreconf.Point{
		Rank: p.world.Rank(), Size: p.world.Size(), Applied: p.applied,
		Asked: out[agreeWant] > 0, Scheduled: scheduled, Checkpointing: p.opts.checkpointing(),
		SyncCheckpoints: p.opts.SyncCheckpoints, InFlight: p.flight != nil,
	}
	var log []reconf.Reconfiguration
	if p.ctl != nil {
		// Every rank knows at least -out[agreeNegHave] entries: act on those, all alike.
		pt.Known, log = uint64(-out[agreeNegHave]), p.ctl.known()
	}
	plan, err := rankreconf.Decide(pt, log)
	if err != nil {
		return Continue, fmt.Errorf("pcm: Reconfigure(%d): %w", iter, err)
	}
	p.applied = plan.Applied
	if plan.SettleFirst {
		if err := note(p.settle()); err != nil {
			return Continue, err
		}
	}
	if plan.Checkpoint {
		p.startCheckpoint(iter)
		if plan.SettleCheckpoint {
			if err := note(p.settle()); err != nil {
				return Continue, err
			}
		}
	}
	// The checkpoint steps above may have changed the schedule; a successor or joiner
	// inherits it from here.
	p.schedulePolls(out)
	if len(plan.Moves) > 0 || plan.Resize != nil {
		p.awaitSnapshot() // both move the rows the checkpoint may still be reading
	}
	if len(plan.Moves) > 0 {
		act, err := p.migrate(iter, plan.Moves)
		if act == Leave || err != nil || plan.Resize == nil {
			return act, errors.Join(ckptErr, err)
		}
	}
	if plan.Resize != nil {
		act, err := p.resize(iter, *plan.Resize)
		return act, errors.Join(ckptErr, err)
	}
	return Continue, ckptErr
}

// keepRequest re-arms a request consumed by an agreement that did not take place.
func (p *Process) keepRequest(want bool) {
	if want {
		p.want.Store(true)
	}
}

// schedulePolls sets the number of calls until the next agreement after one that gave out:
// the agreed proposal for a checkpoint whose pieces are being written if one is, else the
// ordinary one. Every rank is in the same checkpoint step at the same point of an agreement,
// so all follow the same schedule. A checkpoint started at a scheduled boundary thus commits within about
// flightPollDelay of its pieces being durable, whenever the last agreement was; a checkpoint
// whose manifest is being committed waits for an ordinary agreement to report it (its
// manifest is durable in the store once written, which is what recovery reads).
func (p *Process) schedulePolls(out []int64) {
	every := out[agreePoll]
	if f := p.flight; f != nil && !f.committing {
		every = out[agreeFlightPoll]
	}
	p.pollEvery = max(every, 1)
	p.nextPoll = p.calls - 1 + p.pollEvery // p.calls already counts this call
}

// proposePoll returns this rank's proposal for the number of calls until the next on-demand
// agreement: fixed, or such that one agreement costs pollBudget of the time spent between
// agreements, and at most delay apart. The ranks take the largest proposal, so all follow the
// same schedule.
func (p *Process) proposePoll(now time.Time, delay time.Duration) int64 {
	if p.opts.PollEvery > 0 {
		return int64(p.opts.PollEvery)
	}
	cost := p.lastSyncCost
	if cost <= 0 {
		cost = defaultPollCost
	}
	calls := p.calls - p.callsAtSync
	perCall := now.Sub(p.lastSyncEnd)
	if calls > 0 {
		perCall /= time.Duration(calls)
	}
	if perCall <= 0 {
		return MaxPollEvery
	}
	m := math.Ceil(float64(cost) / (pollBudget * float64(perCall)))
	// Requests (migrations above all) must not wait long, even when an agreement is
	// expensive (a loaded machine): at least one agreement per delay.
	m = min(m, math.Ceil(float64(delay)/float64(perCall)))
	return int64(min(max(m, 1), MaxPollEvery))
}

// pieceResult is what each rank reports after writing its piece.
type pieceResult struct {
	Info ckptstore.PieceInfo `json:"info"`
	Time time.Time           `json:"time"`
	Err  string              `json:"err,omitempty"`
	// Store identifies the rank's checkpoint store; the lowest rank of each store commits
	// and prunes for it. Decided per checkpoint, since migrations move ranks between stores.
	Store [2]uint64 `json:"store"`
	// Rechoose says that the rank had a buddy and its copy failed: every rank forgets its
	// buddy choice, so the next checkpoint chooses again, as it did before choices were kept.
	Rechoose bool `json:"rechoose,omitempty"`

	err error // this rank's own error, whose text is Err
}

// commit commits m on this rank's store. A store shared with another committing rank (the
// same directory under another node name) may already hold the identical manifest.
func (p *Process) commit(m ckptstore.Manifest) error {
	err := p.store.CommitManifest(m)
	if errors.Is(err, ckptstore.ErrCommitted) {
		if got, gerr := p.store.Manifest(m.Job, m.Seq); gerr == nil && slices.EqualFunc(got.Pieces, m.Pieces, ckptstore.PieceInfo.Equal) {
			return nil
		}
	}
	return err
}

// allgatherBytes gives every rank the byte strings of all ranks, in rank order.
func allgatherBytes(c *mpi.Comm, b []byte) ([][]byte, error) {
	n := c.Size()
	counts := make([]int, n)
	if err := mpi.Allgather(c, []int{len(b)}, counts); err != nil {
		return nil, err
	}
	total := 0
	for _, k := range counts {
		total += k
	}
	all := make([]byte, total)
	if err := mpi.Allgatherv(c, b, all, counts); err != nil {
		return nil, err
	}
	out := make([][]byte, n)
	for r, k := range counts {
		out[r], all = all[:k:k], all[k:]
	}
	return out, nil
}

// listSeqs returns the numbers of all checkpoint directories of job in store, committed or
// not, following the layout documented in package ckptstore.
func listSeqs(store *ckptstore.Store, job string) ([]uint64, error) {
	ents, err := os.ReadDir(filepath.Join(store.Dir(), job))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var seqs []uint64
	for _, e := range ents {
		if name := e.Name(); e.IsDir() && len(name) == 20 {
			if seq, err := strconv.ParseUint(name, 10, 64); err == nil {
				seqs = append(seqs, seq)
			}
		}
	}
	return seqs, nil
}
