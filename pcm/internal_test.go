package pcm

import (
	"bytes"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/mpios/mpios/internal/mpitest"
	"github.com/mpios/mpios/mpi"
	"github.com/mpios/mpios/pcm/ckptstore"
	"github.com/mpios/mpios/pcm/state"
)

func TestProposePoll(t *testing.T) {
	now := time.Now()
	for _, c := range []struct {
		cost, perCall time.Duration
		calls         int64
		want          int64
	}{
		{100 * time.Microsecond, 4 * time.Millisecond, 10, 13}, // 100µs per 52ms: 0.19%
		{50 * time.Microsecond, 50 * time.Millisecond, 3, 1},   // slow iterations: every call
		{0, 10 * time.Millisecond, 1, 5},                       // nothing measured yet: defaultPollCost
		{100 * time.Microsecond, 0, 7, MaxPollEvery},           // no time between calls
		{time.Millisecond, time.Nanosecond, 5, MaxPollEvery},   // capped
		{time.Millisecond, 4 * time.Millisecond, 10, 125},      // 1ms per 500ms: 0.2%, and maxPollDelay
	} {
		p := &Process{lastSyncCost: c.cost, calls: c.calls, lastSyncEnd: now.Add(-c.perCall * time.Duration(c.calls))}
		if got := p.proposePoll(now, maxPollDelay); got != c.want {
			t.Errorf("cost %v, %v per call: M = %d, want %d", c.cost, c.perCall, got, c.want)
		}
	}
	// While pieces are written the agreements come at least every flightPollDelay, whatever
	// the budget allows: 50ms at 4ms per call is 13 calls, not 125.
	p := &Process{lastSyncCost: time.Millisecond, calls: 10, lastSyncEnd: now.Add(-40 * time.Millisecond)}
	if got := p.proposePoll(now, flightPollDelay); got != 13 {
		t.Errorf("while pieces are written: M = %d, want 13", got)
	}
	p = &Process{opts: Options{PollEvery: 7}}
	if got := p.proposePoll(now, maxPollDelay); got != 7 {
		t.Errorf("fixed: M = %d, want 7", got)
	}
}

// TestExchangeResultsOfAnyLength: the piece results of a checkpoint reach every rank in
// rank order, in the one fixed-slot Allgather when each fits its slot, and through the
// variable-length exchange when one does not (a long error text).
func TestExchangeResultsOfAnyLength(t *testing.T) {
	for name, long := range map[string]int{"all fit": -1, "rank 1 does not fit": 1, "the last does not fit": 2} {
		t.Run(name, func(t *testing.T) {
			result := func(r int) []byte {
				if r == long {
					return bytes.Repeat([]byte{'x', byte(r)}, resultSlot)
				}
				return bytes.Repeat([]byte{byte('a' + r)}, 100*r) // rank 0's is empty
			}
			mpitest.Run(t, mpitest.InProc, 3, func(c *mpi.Comm) error {
				got, err := exchangeResults(c, result(c.Rank()))
				if err != nil {
					return err
				}
				for r := range 3 {
					if !bytes.Equal(got[r], result(r)) {
						return fmt.Errorf("rank %d got %d bytes as rank %d's result, want %d", c.Rank(), len(got[r]), r, len(result(r)))
					}
				}
				return nil
			})
		})
	}
}

// TestACopyThatFailedMakesEveryRankChooseItsBuddyAgain: "a copy that fails leaves the piece
// with its own node only" (docs/cluster.md), and the next checkpoint chooses the buddies
// again, as it did when they were chosen at every checkpoint: when any rank's copy failed,
// every rank forgets its choice at the exchange of the piece results; when none did, every
// rank keeps it and the checkpoint commits with its copies.
func TestACopyThatFailedMakesEveryRankChooseItsBuddyAgain(t *testing.T) {
	for _, failed := range []int{-1, 0, 2} {
		name := fmt.Sprintf("copy-of-rank-%d-failed", failed)
		if failed < 0 {
			name = "all-copies-made"
		}
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			mpitest.Run(t, mpitest.InProc, 3, func(c *mpi.Comm) error {
				me := c.Rank()
				store, err := ckptstore.Open(filepath.Join(dir, strconv.Itoa(me)), &ckptstore.Options{Node: "n" + strconv.Itoa(me)})
				if err != nil {
					return err
				}
				p := &Process{world: c, reg: state.NewRegistry(), store: store, storeID: storeIdentity(store),
					opts:  Options{JobID: "buddies", SyncCheckpoints: true, Log: io.Discard},
					buddy: buddyChoice{world: c, node: "n" + strconv.Itoa((me+1)%3)}}
				// The piece itself is on another node: the commit checks nothing here.
				res := pieceResult{Info: ckptstore.PieceInfo{Rank: me, Node: "elsewhere", Size: 1, Checksum: ckptstore.CRC32C + ":00000000"},
					Store: p.storeID, Rechoose: me == failed}
				if me != failed {
					res.Info.Copies = []string{p.buddy.node}
				}
				p.flight = &flight{seq: 1, iter: 10, res: &res}
				if err := p.exchangePieces(); err != nil {
					return err
				}
				if kept := p.buddy.world != nil; kept != (failed < 0) {
					return fmt.Errorf("rank %d: buddy choice kept %v after the copy of rank %d failed", me, kept, failed)
				}
				if err := p.settle(); err != nil {
					return err
				}
				m, err := store.Latest("buddies")
				if err != nil {
					return err
				}
				for r, piece := range m.Pieces {
					if hasCopy := len(piece.Copies) == 1; hasCopy == (r == failed) {
						return fmt.Errorf("rank %d: committed piece %d has copies %v", me, r, piece.Copies)
					}
				}
				return nil
			})
		})
	}
}

// A checkpoint taken at a scheduled boundary commits within about flightPollDelay of its
// pieces being durable, even when the agreement before it, expensive on a loaded machine,
// set the next one far off: the scheduled agreement that starts the checkpoint sets the
// next agreement by the checkpoint, not by the budget. (Before, the checkpoint of
// iteration 200 waited for the next poll, 500 calls on, or the next checkpoint: a failure
// in between lost two checkpoint intervals of work, not one.)
func TestScheduledCheckpointCommitsBeforeTheNextIsDue(t *testing.T) {
	const every, iters, checkAt = 200, 399, 395
	dir := t.TempDir()
	mpitest.Run(t, mpitest.InProc, 3, func(c *mpi.Comm) error {
		p, err := InitWith(c, Options{JobID: "prompt", Dir: dir, Every: every, OnDemand: true, Node: "nodeA", Log: io.Discard})
		if err != nil {
			return err
		}
		iter, err := loadCounting(p)
		if err != nil {
			return err
		}
		for *iter < iters {
			time.Sleep(time.Millisecond) // the iteration's work: the schedule is in calls per time
			*iter++
			if _, err := p.Reconfigure(*iter); err != nil {
				return err
			}
			// Every agreement looks expensive: the budget alone would agree every
			// maxPollDelay, 500 calls or more at a millisecond per call.
			p.lastSyncCost = 50 * time.Millisecond
			if *iter == checkAt {
				ms, err := p.store.Checkpoints("prompt")
				if err != nil {
					return err
				}
				if len(ms) == 0 || ms[0].Iteration != every {
					return fmt.Errorf("rank %d at iteration %d: committed checkpoints %v, want the one of iteration %d (agreements every %d calls, next at call %d)",
						c.Rank(), *iter, ms, every, p.pollEvery, p.nextPoll)
				}
			}
		}
		return p.Close()
	})
}

// loadCounting registers an iteration counter as "iter" with p and loads p, as every test
// solver does once its data is registered; the counter holds the restored iteration.
func loadCounting(p *Process) (*int, error) {
	iter := new(int)
	if err := p.Register("iter", iter); err != nil {
		return nil, err
	}
	return iter, p.Load()
}
