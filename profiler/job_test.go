package profiler

import (
	"encoding/json"
	"errors"
	"os"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mpios/mpios/internal/mpitest"
	"github.com/mpios/mpios/mpi"
)

// inbox collects what JobProfilers publish, per rank.
type inbox struct {
	mu   sync.Mutex
	msgs map[int][][]byte
}

func (b *inbox) publisher(rank int) func([]byte) error {
	return func(data []byte) error {
		b.mu.Lock()
		defer b.mu.Unlock()
		if b.msgs == nil {
			b.msgs = map[int][][]byte{}
		}
		b.msgs[rank] = append(b.msgs[rank], append([]byte(nil), data...))
		return nil
	}
}

func (b *inbox) count(rank int) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.msgs[rank])
}

func (b *inbox) last(t *testing.T, rank int) RankProfile {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	msgs := b.msgs[rank]
	if len(msgs) == 0 {
		t.Fatalf("rank %d published nothing", rank)
	}
	var p RankProfile
	if err := json.Unmarshal(msgs[len(msgs)-1], &p); err != nil {
		t.Fatalf("rank %d: profile is not JSON: %v\n%s", rank, err, msgs[len(msgs)-1])
	}
	return p
}

func noInterceptor(t *testing.T) {
	t.Helper()
	if prev := mpi.SetInterceptor(nil); prev != nil {
		t.Errorf("interceptor %T still installed", prev)
	}
}

// TestStartJobPublishesExactCounts runs a known program on goroutine ranks, each with its
// JobProfiler as pcm will start it, and checks the published profiles to the message.
func TestStartJobPublishesExactCounts(t *testing.T) {
	const n, iters, k = 3, 20, 6
	var box inbox
	mpitest.Run(t, mpitest.InProc, n, func(c *mpi.Comm) error {
		jp, err := StartJob(c, JobOptions{Publish: box.publisher(c.Rank()), JobID: "ring", Node: "n1",
			Every: 5 * time.Millisecond, Policy: " SRAS "})
		if err != nil {
			return err
		}
		jp.Annotate(Annotation{StateBytes: 4096, Iterations: 100})
		right, left := (c.Rank()+1)%n, (c.Rank()+n-1)%n
		send, recv := make([]float64, k), make([]float64, k)
		for i := 1; i <= iters; i++ {
			if _, err := mpi.Sendrecv(c, send, right, 1, recv, left, 1); err != nil {
				return err
			}
			if c.Rank() == 0 {
				if err := mpi.Send(c, []int32{1, 2}, 1, 2); err != nil {
					return err
				}
			}
			if c.Rank() == 1 {
				if _, err := mpi.Recv(c, make([]int32, 2), 0, 2); err != nil {
					return err
				}
			}
			if err := mpi.Allreduce(c, []float64{1}, []float64{0}, mpi.Sum); err != nil {
				return err
			}
			jp.Iteration(i)
		}
		// Periodic publication happens while the rank runs, not only at Close.
		for deadline := time.Now().Add(10 * time.Second); jp.Published() < 2; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				return errors.New("no periodic publication within 10s")
			}
		}
		if err := c.Barrier(); err != nil { // everybody's traffic is done before the final profiles
			return err
		}
		return jp.Close()
	})
	noInterceptor(t)
	for r := range n {
		if box.count(r) < 3 {
			t.Errorf("rank %d: %d publications, want at least 2 periodic and the final one", r, box.count(r))
		}
		p := box.last(t, r)
		right := (r + 1) % n
		wantSent := []PeerTraffic{{right, iters, iters * 8 * k}}
		if r == 0 {
			wantSent = []PeerTraffic{{1, 2 * iters, iters * (8*k + 8)}}
		}
		if !reflect.DeepEqual(p.Sent, wantSent) {
			t.Errorf("rank %d sent %+v, want %+v", r, p.Sent, wantSent)
		}
		recvd := int64(iters)
		if r == 1 {
			recvd = 2 * iters
		}
		if p.ReceivedMessages != recvd {
			t.Errorf("rank %d received %d messages, want %d", r, p.ReceivedMessages, recvd)
		}
		if s := p.Op("Allreduce"); s.Calls != iters || s.Bytes != 8*iters || !s.Collective {
			t.Errorf("rank %d Allreduce %+v", r, s)
		}
		if s := p.Op("Barrier"); s.Calls != 1 {
			t.Errorf("rank %d Barrier %+v", r, s)
		}
		if p.Job != "ring" || p.Rank != r || p.Node != "n1" || p.PID != os.Getpid() || p.Policy != "sras" {
			t.Errorf("rank %d labels: job %q rank %d node %q pid %d policy %q", r, p.Job, p.Rank, p.Node, p.PID, p.Policy)
		}
		if p.Iteration != iters || p.Iterations != iters || p.PlannedIterations != 100 || p.RemainingIterations() != 100-iters || p.StateBytes != 4096 {
			t.Errorf("rank %d iterations %d/%d planned %d state %d", r, p.Iteration, p.Iterations, p.PlannedIterations, p.StateBytes)
		}
		if p.MeanIterSeconds <= 0 || p.CommSeconds <= 0 {
			t.Errorf("rank %d: mean iteration %v, comm %v", r, p.MeanIterSeconds, p.CommSeconds)
		}
		ios := p.IOS()
		if err := ios.Validate(); err != nil {
			t.Errorf("rank %d: agent profile invalid: %v", r, err)
		}
		if ios.RemainingIterations != 100-iters || ios.StateBytes != 4096 || ios.Policy != "sras" || ios.IterationTime <= 0 {
			t.Errorf("rank %d: agent profile %+v", r, ios)
		}
	}
}

func TestStartJobErrorsAndNil(t *testing.T) {
	cs := world(t, 1)
	pub := func([]byte) error { return nil }
	for want, opts := range map[string]JobOptions{
		"no Publish":     {},
		"negative":       {Publish: pub, Every: -time.Second},
		"unknown policy": {Publish: pub, Policy: "roundrobin"},
	} {
		if jp, err := StartJob(cs[0], opts); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("StartJob(%+v) = %v, %v; want an error with %q", opts, jp, err, want)
		}
	}
	if _, err := StartJob(nil, JobOptions{Publish: pub}); err == nil {
		t.Error("nil communicator accepted")
	}
	noInterceptor(t)
	var jp *JobProfiler // profiling off: every method is a no-op
	jp.Iteration(3)
	jp.Annotate(Annotation{StateBytes: 1})
	if jp.Close() != nil || jp.Published() != 0 || jp.Profile().Calls != 0 {
		t.Error("nil JobProfiler is not inert")
	}
}

func TestStartJobPublishFailures(t *testing.T) {
	cs := world(t, 1)
	boom := errors.New("nats down")
	var mu sync.Mutex
	var seen []error
	jp, err := StartJob(cs[0], JobOptions{JobID: "j", Every: time.Millisecond,
		Publish: func([]byte) error { return boom },
		OnError: func(err error) { mu.Lock(); seen = append(seen, err); mu.Unlock() }})
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		mu.Lock()
		k := len(seen)
		mu.Unlock()
		if k > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("OnError never called")
		}
	}
	if err := jp.Close(); !errors.Is(err, boom) {
		t.Errorf("Close = %v, want the final publication's error", err)
	}
	if err2 := jp.Close(); err2 == nil || err2.Error() != jp.Close().Error() {
		t.Errorf("second Close = %v", err2)
	}
	noInterceptor(t)

	// Without OnError the failures are summarized by Close.
	fails := 0
	jp, err = StartJob(cs[0], JobOptions{Every: time.Millisecond, Publish: func([]byte) error {
		fails++
		if fails <= 2 {
			return boom
		}
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); jp.Published() == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no successful publication")
		}
	}
	if err := jp.Close(); err == nil || !strings.Contains(err.Error(), "2 profile publications failed") {
		t.Errorf("Close = %v", err)
	}
	noInterceptor(t)
}

// Two jobs in one process: the second gets a profiler of its own, and closing both leaves
// no interceptor behind.
func TestStartJobSharesPerJob(t *testing.T) {
	cs := world(t, 2)
	pub := func([]byte) error { return nil }
	a0, err := StartJob(cs[0], JobOptions{JobID: "a", Publish: pub, Every: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	a1, err := StartJob(cs[1], JobOptions{JobID: "a", Publish: pub, Every: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if a0.prof != a1.prof {
		t.Error("ranks of one job in one process do not share the profiler")
	}
	b0, err := StartJob(cs[0], JobOptions{JobID: "b", Publish: pub, Every: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if b0.prof == a0.prof {
		t.Error("a second job shares the first job's profiler")
	}
	for _, jp := range []*JobProfiler{b0, a0, a1} {
		if err := jp.Close(); err != nil {
			t.Error(err)
		}
	}
	noInterceptor(t)
}
