package pcm

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/mpios/mpios/internal/mpitest"
	"github.com/mpios/mpios/internal/reconf"
	"github.com/mpios/mpios/mpi"
	"github.com/mpios/mpios/pcm/ckptstore"
)

// The ranks act on the log entries that every one of them has, at the same boundary, and
// only once: rank 0 already knows a second checkpoint request that the others have not
// received, so only the first is taken, at the first agreement point. A migration request
// on a world that cannot move ranks (goroutines) is ignored alike on every rank.
func TestRanksApplyTheAgreedPrefixOfTheLog(t *testing.T) {
	dir := t.TempDir()
	const n = 3
	logs := make([]bytes.Buffer, n)
	mpitest.Run(t, mpitest.InProc, n, func(c *mpi.Comm) error {
		rank := c.Rank()
		p, err := InitWith(c, Options{JobID: "agreed", Dir: dir, OnDemand: true, PollEvery: 1, Node: "nodeA", Log: &logs[rank]})
		if err != nil {
			return err
		}
		entries := []reconf.Reconfiguration{
			{Seq: 1, Kind: reconf.Checkpoint, State: reconf.Proposed},
			{Seq: 2, Kind: reconf.Migrate, Ranks: []int{1}, To: "n9", State: reconf.Proposed},
			{Seq: 3, Kind: reconf.Checkpoint, State: reconf.Proposed},
		}
		if rank != 0 {
			entries = entries[:2]
		}
		p.ctl = &control{entries: entries}
		x := 0
		if err := p.Register("x", &x); err != nil {
			return err
		}
		if err := p.Load(); err != nil {
			return err
		}
		for iter := 1; iter <= 4; iter++ {
			x = iter
			act, err := p.Reconfigure(iter)
			if err != nil || act != Continue {
				return fmt.Errorf("Reconfigure(%d) = %v, %v", iter, act, err)
			}
		}
		if p.applied != 2 {
			return fmt.Errorf("rank %d applied %d entries, want 2", rank, p.applied)
		}
		return p.Close()
	})
	store, err := ckptstore.Open(dir, &ckptstore.Options{Node: "nodeA"})
	if err != nil {
		t.Fatal(err)
	}
	ms, err := store.Checkpoints("agreed")
	if err != nil || len(ms) != 1 || ms[0].Iteration != 1 {
		t.Fatalf("checkpoints %+v (%v), want one, of iteration 1", ms, err)
	}
	for rank := range logs {
		if got := logs[rank].String(); strings.Count(got, "ignoring migration request") != 1 {
			t.Errorf("rank %d logged %q, want the migration ignored once", rank, got)
		}
	}
}
