package profiler

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/mpios/mpios/internal/mpitest"
	"github.com/mpios/mpios/mpi"
)

func TestOpIndexMatchesTable(t *testing.T) {
	for i, op := range knownOps {
		if got := opIndex(op.name); got != i {
			t.Errorf("opIndex(%q) = %d, want %d", op.name, got, i)
		}
	}
	if opIndex("Frobnicate") != -1 {
		t.Error("unknown op has an index")
	}
}

// TestObserveClassification feeds synthetic events and checks how each kind of call lands.
func TestObserveClassification(t *testing.T) {
	cs := world(t, 3)
	p := New(Options{Job: "j", Node: "n", Now: func() time.Time { return t0.Add(time.Second) }})
	ev := func(c *mpi.Comm, op string, peer, bytes int, err error) {
		p.Observe(mpi.CallEvent{Op: op, Comm: c, Peer: peer, Bytes: bytes, RecvPeer: -1, Start: t0, Dur: ms(1), Err: err})
	}
	c0 := cs[0]
	ev(c0, "Send", 1, 80, nil)
	ev(c0, "Isend", 2, 16, nil)
	ev(c0, "Sendrecv", 1, 8, nil)
	ev(c0, "SendValue", 2, 0, nil)
	ev(c0, "Send", 1, 1000, errors.New("boom")) // failed: no traffic
	ev(c0, "Recv", 2, 24, nil)
	ev(c0, "RecvValue", 1, 5, nil)
	ev(c0, "Irecv", 1, 0, nil)
	ev(c0, "Wait", 1, 40, nil)
	ev(c0, "Wait", 0, 0, nil)            // rendezvous send request: no traffic
	ev(c0, "Recv", mpi.ProcNull, 0, nil) // no peer
	ev(c0, "Allreduce", -1, 8, nil)
	ev(c0, "Frobnicate", -1, 3, nil)
	ev(nil, "WaitAll", -1, 0, nil) // only rank 0 known: attributed to it
	ev(cs[1], "Barrier", -1, 0, nil)
	ev(nil, "WaitAll", -1, 0, nil) // two ranks known: dropped

	snaps := p.Snapshot()
	if len(snaps) != 2 {
		t.Fatalf("%d profiles, want 2", len(snaps))
	}
	r := byRank(t, snaps, 0)
	if got, want := r.Sent, []PeerTraffic{{1, 2, 88}, {2, 2, 16}}; !reflect.DeepEqual(got, want) {
		t.Errorf("sent %+v, want %+v", got, want)
	}
	if got, want := r.Received, []PeerTraffic{{1, 2, 45}, {2, 1, 24}}; !reflect.DeepEqual(got, want) {
		t.Errorf("received %+v, want %+v", got, want)
	}
	if r.ReceivedMessages != 4 { // Recv, RecvValue, Wait, Sendrecv's receive
		t.Errorf("received messages %d, want 4", r.ReceivedMessages)
	}
	if r.Calls != 14 || r.Errors != 1 {
		t.Errorf("calls %d errors %d, want 14 and 1", r.Calls, r.Errors)
	}
	if s := r.Op("Send"); s.Calls != 2 || s.Errors != 1 || s.Bytes != 1080 || s.Collective {
		t.Errorf("Send stat %+v", s)
	}
	if s := r.Op("Allreduce"); s.Calls != 1 || s.Bytes != 8 || !s.Collective {
		t.Errorf("Allreduce stat %+v", s)
	}
	if s := r.Op("Frobnicate"); s.Calls != 1 || s.Bytes != 3 {
		t.Errorf("unknown op stat %+v", s)
	}
	if s := r.Op("WaitAll"); s.Calls != 1 {
		t.Errorf("WaitAll stat %+v", s)
	}
	approx(t, "comm seconds", r.CommSeconds, 0.014)
	approx(t, "elapsed", r.ElapsedSeconds, 1)
	approx(t, "comp seconds", r.CompSeconds, 0.986)
	if r.Job != "j" || r.Node != "n" || !r.Since.Equal(t0) {
		t.Errorf("labels %q %q since %v", r.Job, r.Node, r.Since)
	}
	for i := 1; i < len(r.Ops); i++ {
		if r.Ops[i-1].Op >= r.Ops[i].Op {
			t.Errorf("ops not sorted: %q before %q", r.Ops[i-1].Op, r.Ops[i].Op)
		}
	}
	if p.Dropped() != 1 {
		t.Errorf("dropped %d, want 1", p.Dropped())
	}
}

// TestPeersAreWorldRanks checks that traffic on a split communicator is keyed by world rank.
func TestPeersAreWorldRanks(t *testing.T) {
	p := New(Options{})
	if err := p.Install(); err != nil {
		t.Fatal(err)
	}
	defer p.Uninstall()
	mpitest.Run(t, mpitest.InProc, 4, func(c *mpi.Comm) error {
		// Even and odd ranks, in reverse order: comm rank 0 of the evens is world rank 2.
		sub, err := c.Split(c.Rank()%2, -c.Rank())
		if err != nil {
			return err
		}
		if sub.Rank() == 0 {
			return mpi.Send(sub, []int32{1, 2, 3}, 1, 7)
		}
		_, err = mpi.Recv(sub, make([]int32, 3), 0, 7)
		return err
	})
	snaps := p.Snapshot()
	for w, want := range map[int]int{0: 2, 1: 3} { // receiver -> sender
		r := byRank(t, snaps, w)
		if got := r.ReceivedFrom(want); got.Messages != 1 || got.Bytes != 12 {
			t.Errorf("world %d received from %d: %+v", w, want, got)
		}
		if s := byRank(t, snaps, want).SentTo(w); s.Messages != 1 || s.Bytes != 12 {
			t.Errorf("world %d sent to %d: %+v", want, w, s)
		}
	}
}

// TestRingCounts runs a known program on goroutine ranks and checks exact counts.
func TestRingCounts(t *testing.T) {
	const n, iters, k = 3, 10, 5
	p := New(Options{Job: "ring"})
	if err := p.Install(); err != nil {
		t.Fatal(err)
	}
	mpitest.Run(t, mpitest.InProc, n, func(c *mpi.Comm) error {
		right, left := (c.Rank()+1)%n, (c.Rank()+n-1)%n
		send, recv := make([]float64, k), make([]float64, k)
		small := make([]float64, 3)
		sum := []float64{0}
		bc := make([]float64, 4)
		for i := range iters {
			if _, err := mpi.Sendrecv(c, send, right, 1, recv, left, 1); err != nil {
				return err
			}
			if err := mpi.Allreduce(c, []float64{float64(i)}, sum, mpi.Sum); err != nil {
				return err
			}
			if err := mpi.Bcast(c, bc, 0); err != nil {
				return err
			}
			rr, err := mpi.Irecv(c, make([]float64, 3), left, 2)
			if err != nil {
				return err
			}
			sr, err := mpi.Isend(c, small, right, 2)
			if err != nil {
				return err
			}
			if _, err := rr.Wait(); err != nil {
				return err
			}
			if _, err := sr.Wait(); err != nil { // eager send: a Wait with no traffic
				return err
			}
		}
		return nil
	})
	if err := p.Uninstall(); err != nil {
		t.Fatal(err)
	}
	snaps := p.Snapshot()
	if len(snaps) != n {
		t.Fatalf("%d profiles, want %d", len(snaps), n)
	}
	for r := range n {
		s := byRank(t, snaps, r)
		right, left := (r+1)%n, (r+n-1)%n
		if got, want := s.Sent, []PeerTraffic{{right, 2 * iters, iters * (8*k + 24)}}; !reflect.DeepEqual(got, want) {
			t.Errorf("rank %d sent %+v, want %+v", r, got, want)
		}
		// Sendrecv's receive half and the Irecv completed by Wait.
		if got, want := s.Received, []PeerTraffic{{left, 2 * iters, iters * (8*k + 24)}}; !reflect.DeepEqual(got, want) {
			t.Errorf("rank %d received %+v, want %+v", r, got, want)
		}
		if s.ReceivedMessages != 2*iters {
			t.Errorf("rank %d received messages %d, want %d", r, s.ReceivedMessages, 2*iters)
		}
		for _, w := range []OpStat{
			{Op: "Sendrecv", Calls: iters, Bytes: iters * 8 * k},
			{Op: "Allreduce", Collective: true, Calls: iters, Bytes: iters * 8},
			{Op: "Bcast", Collective: true, Calls: iters, Bytes: iters * 32},
			{Op: "Irecv", Calls: iters},
			{Op: "Isend", Calls: iters, Bytes: iters * 24},
			{Op: "Wait", Calls: 2 * iters, Bytes: iters * 24},
		} {
			got := s.Op(w.Op)
			got.Seconds = 0
			if got != w {
				t.Errorf("rank %d %s: %+v, want %+v", r, w.Op, got, w)
			}
		}
		if s.CommSeconds <= 0 {
			t.Errorf("rank %d: no communication time", r)
		}
	}
	if got := p.Dropped(); got != 0 {
		t.Errorf("dropped %d events, want 0 (every request knows its communicator)", got)
	}

	// Uninstalled: a second run leaves the profile unchanged.
	mpitest.Run(t, mpitest.InProc, n, func(c *mpi.Comm) error {
		return mpi.Allreduce(c, []float64{1}, []float64{0}, mpi.Sum)
	})
	after := p.Snapshot()
	for r := range n {
		if a, b := byRank(t, after, r).Calls, byRank(t, snaps, r).Calls; a != b {
			t.Errorf("rank %d: %d calls after Uninstall, %d before", r, a, b)
		}
	}
}

// TestCommComputeSplit injects sleeps: rank 1 computes, rank 0 waits for it in Sendrecv.
func TestCommComputeSplit(t *testing.T) {
	const iters, nap = 5, 30 * time.Millisecond
	p := New(Options{})
	if err := p.Install(); err != nil {
		t.Fatal(err)
	}
	defer p.Uninstall()
	mpitest.Run(t, mpitest.InProc, 2, func(c *mpi.Comm) error {
		me := c.Rank()
		buf := make([]float64, 8)
		if err := p.Begin(me, time.Now()); err != nil {
			return err
		}
		for i := 1; i <= iters; i++ {
			if me == 1 {
				time.Sleep(nap)
			}
			if _, err := mpi.Sendrecv(c, buf, 1-me, 0, make([]float64, 8), 1-me, 0); err != nil {
				return err
			}
			if err := p.Iteration(me, i, time.Now()); err != nil {
				return err
			}
		}
		return nil
	})
	snaps := p.Snapshot()
	waiter, worker := byRank(t, snaps, 0), byRank(t, snaps, 1)
	for _, s := range snaps {
		if s.Iterations != iters || s.WindowIterations != iters || s.Iteration != iters {
			t.Errorf("rank %d: iterations %d window %d last %d, want %d", s.Rank, s.Iterations, s.WindowIterations, s.Iteration, iters)
		}
		approx(t, "window split", s.WindowCommSeconds+s.WindowCompSeconds, s.WindowSeconds)
		if s.MeanIterSeconds < nap.Seconds() {
			t.Errorf("rank %d: mean iteration %vs shorter than the %v nap", s.Rank, s.MeanIterSeconds, nap)
		}
	}
	// The worker's computation contains its naps; the waiter spends them in Sendrecv (all
	// but generous scheduling noise).
	if min := (iters * nap).Seconds(); worker.WindowCompSeconds < min {
		t.Errorf("worker computed %vs, want >= %vs", worker.WindowCompSeconds, min)
	}
	if min := (iters * nap / 2).Seconds(); waiter.WindowCommSeconds < min {
		t.Errorf("waiter communicated %vs, want >= %vs", waiter.WindowCommSeconds, min)
	}
}

// TestIterationWindow checks the window arithmetic with injected times and durations.
func TestIterationWindow(t *testing.T) {
	cs := world(t, 1)
	p := New(Options{Window: 3, Now: func() time.Time { return t0.Add(time.Second) }})
	comm := func(op string, d time.Duration) {
		p.Observe(mpi.CallEvent{Op: op, Comm: cs[0], Peer: -1, Start: t0, Dur: d})
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(p.Begin(0, t0))
	comm("Barrier", ms(30))
	must(p.Iteration(0, 1, t0.Add(ms(100)))) // 100ms, 30ms comm
	must(p.Iteration(0, 2, t0.Add(ms(300)))) // 200ms
	comm("Allreduce", ms(500))               // more than the interval: computation clips at 0
	must(p.Iteration(0, 4, t0.Add(ms(700)))) // 400ms for 2 iterations
	must(p.Iteration(0, 5, t0.Add(ms(800)))) // 100ms; the first interval leaves the window

	r := p.Snapshot()[0]
	if r.Iteration != 5 || r.Iterations != 5 || r.WindowIterations != 4 {
		t.Errorf("iteration %d iterations %d window %d, want 5 5 4", r.Iteration, r.Iterations, r.WindowIterations)
	}
	approx(t, "last", r.LastIterSeconds, 0.1)
	approx(t, "mean", r.MeanIterSeconds, 0.7/4)
	approx(t, "window", r.WindowSeconds, 0.7)
	approx(t, "window comm", r.WindowCommSeconds, 0.5)
	approx(t, "window comp", r.WindowCompSeconds, 0.3)
	approx(t, "comm", r.CommSeconds, 0.53)
	approx(t, "comp", r.CompSeconds, 0.47)
	approx(t, "elapsed", r.ElapsedSeconds, 1)

	if err := p.Iteration(0, 6, t0.Add(ms(799))); err == nil {
		t.Error("an iteration ending before it started was accepted")
	}
	if err := p.Iteration(-1, 6, t0); err == nil {
		t.Error("a negative rank was accepted")
	}
	if err := p.Begin(-1, t0); err == nil {
		t.Error("Begin accepted a negative rank")
	}

	// A rank first seen at a mark: that mark only opens the interval.
	must(p.Iteration(7, 10, t0))
	r7 := byRank(t, p.Snapshot(), 7)
	if r7.Iteration != 10 || r7.Iterations != 0 || r7.MeanIterSeconds != 0 {
		t.Errorf("first mark: %+v", r7)
	}
	must(p.Iteration(7, 11, t0.Add(ms(50))))
	r7 = byRank(t, p.Snapshot(), 7)
	approx(t, "rank 7 last", r7.LastIterSeconds, 0.05)
	if r7.Iterations != 1 {
		t.Errorf("rank 7 iterations %d, want 1", r7.Iterations)
	}
}

func TestInstallChainsAndRestores(t *testing.T) {
	rec := &recorder{}
	mpi.SetInterceptor(rec)
	defer mpi.SetInterceptor(nil)
	p := New(Options{})
	if err := p.Install(); err != nil {
		t.Fatal(err)
	}
	if err := p.Install(); err == nil {
		t.Error("second Install succeeded")
	}
	mpitest.Run(t, mpitest.InProc, 2, func(c *mpi.Comm) error { return c.Barrier() })
	calls := byRank(t, p.Snapshot(), 0).Calls
	if calls == 0 || rec.n.Load() == 0 {
		t.Fatalf("profiler saw %d calls, chained interceptor %d", calls, rec.n.Load())
	}
	if err := p.Uninstall(); err != nil {
		t.Fatal(err)
	}
	if err := p.Uninstall(); err == nil {
		t.Error("second Uninstall succeeded")
	}
	if cur := mpi.SetInterceptor(rec); cur != mpi.Interceptor(rec) {
		t.Errorf("Uninstall left %T installed, want the recorder", cur)
	}

	// Someone installs on top of the profiler: Uninstall leaves it and says so.
	if err := p.Install(); err != nil {
		t.Fatal(err)
	}
	top := &recorder{}
	mpi.SetInterceptor(top)
	if err := p.Uninstall(); err == nil {
		t.Error("Uninstall under another interceptor reported success")
	}
	if cur := mpi.SetInterceptor(nil); cur != mpi.Interceptor(top) {
		t.Errorf("foreign interceptor replaced by %T", cur)
	}
}

func TestObserveDoesNotAllocate(t *testing.T) {
	cs := world(t, 4)
	p := New(Options{})
	evs := []mpi.CallEvent{
		{Op: "Sendrecv", Comm: cs[1], Peer: 2, Bytes: 64, Start: t0, Dur: 1},
		{Op: "Wait", Comm: cs[1], Peer: 3, Bytes: 64, Start: t0, Dur: 1},
		{Op: "Allreduce", Comm: cs[1], Peer: -1, Bytes: 8, Start: t0, Dur: 1},
		{Op: "Frobnicate", Comm: cs[1], Peer: -1, Start: t0, Dur: 1},
	}
	for _, ev := range evs {
		p.Observe(ev) // first sight of rank, peers and unknown op may allocate
	}
	if n := testing.AllocsPerRun(200, func() {
		for _, ev := range evs {
			p.Observe(ev)
		}
	}); n != 0 {
		t.Errorf("%v allocations per round of events", n)
	}
}

func TestDeltaAndIOS(t *testing.T) {
	prev := RankProfile{Job: "j", Rank: 1, At: t0, CommSeconds: 1, Calls: 10, ReceivedMessages: 4,
		Sent:     []PeerTraffic{{0, 2, 20}, {2, 1, 10}},
		Received: []PeerTraffic{{0, 4, 40}},
		Ops:      []OpStat{{Op: "Send", Calls: 3, Bytes: 30, Seconds: 0.5}}}
	cur := RankProfile{Job: "j", Rank: 1, Node: "n1", At: t0.Add(10 * time.Second), CommSeconds: 3, Calls: 25,
		ReceivedMessages: 9, Iteration: 40, MeanIterSeconds: 0.25,
		Sent:     []PeerTraffic{{0, 5, 50}, {2, 1, 10}},
		Received: []PeerTraffic{{0, 9, 90}},
		Ops:      []OpStat{{Op: "Recv", Calls: 1, Bytes: 8}, {Op: "Send", Calls: 7, Bytes: 70, Seconds: 1.5}}}
	d, err := Delta(prev, cur)
	if err != nil {
		t.Fatal(err)
	}
	approx(t, "elapsed", d.ElapsedSeconds, 10)
	approx(t, "comm", d.CommSeconds, 2)
	approx(t, "comp", d.CompSeconds, 8)
	if d.Calls != 15 || d.ReceivedMessages != 5 || !d.Since.Equal(t0) {
		t.Errorf("delta counters %+v", d)
	}
	if want := []PeerTraffic{{0, 3, 30}}; !reflect.DeepEqual(d.Sent, want) {
		t.Errorf("delta sent %+v, want %+v", d.Sent, want)
	}
	if want := []OpStat{{Op: "Recv", Calls: 1, Bytes: 8}, {Op: "Send", Calls: 4, Bytes: 40, Seconds: 1}}; !reflect.DeepEqual(d.Ops, want) {
		t.Errorf("delta ops %+v, want %+v", d.Ops, want)
	}
	if _, err := Delta(cur, prev); err == nil {
		t.Error("backwards delta accepted")
	}
	if _, err := Delta(prev, RankProfile{Job: "j", Rank: 2, At: cur.At}); err == nil {
		t.Error("delta across ranks accepted")
	}

	ios := d.IOS()
	if err := ios.Validate(); err != nil {
		t.Fatalf("converted profile invalid: %v", err)
	}
	if ios.Job != "j" || ios.Rank != 1 || ios.Node != "n1" || ios.Iteration != 40 ||
		ios.IterationTime != 250*time.Millisecond || ios.Window != 10*time.Second ||
		ios.CommTime != 2*time.Second || ios.CompTime != 8*time.Second || ios.MessagesProcessed != 5 {
		t.Errorf("converted profile %+v", ios)
	}
	if len(ios.Peers) != 1 || ios.Peers[0].Rank != 0 || ios.Peers[0].Bytes != 30 || ios.Peers[0].Messages != 3 {
		t.Errorf("converted peers %+v", ios.Peers)
	}
	// F(A) of ATS-RAS (eq. 2.3): 8 s computed for 5 messages received.
	if ios.ComputePerMessage != 1600*time.Millisecond {
		t.Errorf("computation per message %v, want 1.6s", ios.ComputePerMessage)
	}
	if none := (RankProfile{Job: "j", CompSeconds: 3}).IOS(); none.ComputePerMessage != 0 {
		t.Errorf("no message received: computation per message %v, want 0 (unknown)", none.ComputePerMessage)
	}
}
