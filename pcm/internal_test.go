package pcm

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/mpios/mpios/internal/mpitest"
	"github.com/mpios/mpios/mpi"
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
	} {
		p := &Process{lastSyncCost: c.cost, calls: c.calls, lastSyncEnd: now.Add(-c.perCall * time.Duration(c.calls))}
		if got := p.proposePoll(now); got != c.want {
			t.Errorf("cost %v, %v per call: M = %d, want %d", c.cost, c.perCall, got, c.want)
		}
	}
	p := &Process{opts: Options{PollEvery: 7}}
	if got := p.proposePoll(now); got != 7 {
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
