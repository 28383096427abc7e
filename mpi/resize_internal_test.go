package mpi

import (
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/mpios/mpios/comm"
)

// runRanks runs f on every rank of a goroutine world of n and returns their errors.
func runRanks(t *testing.T, worlds []*Comm, f func(r int, w *Comm) error) []error {
	t.Helper()
	errs := make([]error, len(worlds))
	var wg sync.WaitGroup
	for r, w := range worlds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = f(r, w)
		}()
	}
	wg.Wait()
	return errs
}

func goroutineWorld(t *testing.T, n int) []*Comm {
	t.Helper()
	net := comm.NewInProcNetwork(n)
	worlds := make([]*Comm, n)
	for r := range n {
		w, err := Attach(net.Endpoint(r))
		if err != nil {
			t.Fatal(err)
		}
		worlds[r] = w
	}
	return worlds
}

// A merge of 3 ranks into 2: a message rank 1 sent rank 0 before the boundary and rank 0
// had not received is neither lost, duplicated nor overtaken by one sent in the new world;
// a communicator derived from the old world fails with ErrRevoked; and the new world's
// contexts lie above the old world's.
func TestSwitchWorldCarriesUnreceivedMessagesInOrder(t *testing.T) {
	old := goroutineWorld(t, 3)
	next := goroutineWorld(t, 2)
	newRank := []int{0, 1, -1}
	derived := make([]*Comm, 3)
	errs := runRanks(t, old, func(r int, w *Comm) error {
		d, err := w.Dup()
		derived[r] = d
		if err != nil {
			return err
		}
		if r == 1 {
			if err := Send(w, []int{1, 2}, 0, 7); err != nil {
				return err
			}
		}
		if err := Quiesce(w, newRank); err != nil {
			return err
		}
		if newRank[r] < 0 {
			return SwitchWorld(w, nil, newRank)
		}
		nw := next[newRank[r]]
		if err := agreeFirstContext(nw, w); err != nil {
			return err
		}
		if err := SwitchWorld(w, nw, newRank); err != nil {
			return err
		}
		if r == 1 {
			return Send(nw, []int{3}, 0, 7)
		}
		return nil
	})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	first, second := make([]int, 2), make([]int, 1)
	if _, err := Recv(next[0], first, 1, 7); err != nil || first[0] != 1 || first[1] != 2 {
		t.Fatalf("first message %v, %v; want the old world's [1 2]", first, err)
	}
	if _, err := Recv(next[0], second, 1, 7); err != nil || second[0] != 3 {
		t.Fatalf("second message %v, %v; want the new world's [3]", second, err)
	}
	if _, ok, _ := next[0].e.probe(next[0], 0, AnySource, AnyTag, false); ok {
		t.Error("a message was carried twice")
	}
	if err := derived[0].Barrier(); !errors.Is(err, ErrRevoked) {
		t.Errorf("derived communicator after the resize: %v, want ErrRevoked", err)
	}
	var stale *StaleCommError
	if _, err := Recv(old[0], first, 1, 7); !errors.As(err, &stale) {
		t.Errorf("old world after the resize: %v, want a *StaleCommError", err)
	}
	// The rank merged away finalizes cleanly (mpi.Finalize): its world is revoked and closed,
	// there is nothing to wait for.
	if err := Detach(old[2]); err != nil {
		t.Errorf("Detach of the leaver's world: %v, want nil", err)
	}
	if next[0].e.nextCtx < derived[0].ctx+2 {
		t.Errorf("new world's next context %d, not above the old world's %d", next[0].e.nextCtx, derived[0].ctx)
	}
}

// A message to or from a rank that leaves would be lost: Quiesce says so before the commit.
func TestQuiesceRefusesToLoseAMessageOfALeaver(t *testing.T) {
	old := goroutineWorld(t, 3)
	errs := runRanks(t, old, func(r int, w *Comm) error {
		if r == 2 {
			if err := Send(w, []int{9}, 0, 1); err != nil {
				return err
			}
		}
		return Quiesce(w, []int{0, 1, -1})
	})
	if errs[0] == nil || !strings.Contains(errs[0].Error(), "from rank 2 to rank 0 would be lost") {
		t.Errorf("rank 0: %v, want the message from the leaver named", errs[0])
	}
	if errs[1] != nil || errs[2] != nil {
		t.Errorf("ranks 1, 2: %v, %v", errs[1], errs[2])
	}
}

// A communicator of one rank sends no message, so only Comm.valid can tell that a resize
// revoked it: its collectives (and Dup) fail with ErrRevoked after the switch, like those of
// larger communicators.
func TestOneRankCommunicatorOfARevokedWorldFails(t *testing.T) {
	old := goroutineWorld(t, 2)
	next := goroutineWorld(t, 2)
	newRank := []int{0, 1}
	selves := make([]*Comm, 2)
	errs := runRanks(t, old, func(r int, w *Comm) error {
		self, err := w.Split(r, 0)
		if err != nil {
			return err
		}
		selves[r] = self
		if err := Quiesce(w, newRank); err != nil {
			return err
		}
		if err := agreeFirstContext(next[r], w); err != nil {
			return err
		}
		return SwitchWorld(w, next[r], newRank)
	})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	self := selves[0]
	if self.Size() != 1 {
		t.Fatalf("Split by rank gave %d ranks", self.Size())
	}
	buf := []float64{1}
	calls := map[string]error{
		"Barrier":   self.Barrier(),
		"Bcast":     Bcast(self, buf, 0),
		"Allreduce": Allreduce(self, buf, make([]float64, 1), Sum),
		"Reduce":    Reduce(self, buf, make([]float64, 1), Sum, 0),
		"Scan":      Scan(self, buf, make([]float64, 1), Sum),
		"Allgather": Allgather(self, buf, make([]float64, 1)),
	}
	_, derr := self.Dup()
	calls["Dup"] = derr
	for name, err := range calls {
		if !errors.Is(err, ErrRevoked) {
			t.Errorf("%s on a one-rank communicator of the revoked world: %v, want ErrRevoked", name, err)
		}
	}
}
