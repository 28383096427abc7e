package pcm

import (
	"testing"
	"time"
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
