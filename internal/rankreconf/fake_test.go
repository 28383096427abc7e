package rankreconf

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/mpios/mpios/internal/job"
	"github.com/mpios/mpios/internal/rewire"
)

// trace records the effects one rank performs, in order.
type trace struct {
	mu     sync.Mutex
	events []string
}

func (t *trace) add(format string, args ...any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.events = append(t.events, fmt.Sprintf(format, args...))
}

func (t *trace) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.Join(t.events, ", ")
}

// fakeControl is the supervisor: it starts successors on request, or refuses.
type fakeControl struct {
	tr       *trace
	startErr error  // the supervisor's refusal
	goneWhen string // "start": the successor ends while the supervisor starts it
	reply    job.MigrateReply
	gone     func(string)

	started []job.MigrateRequest
	reports []job.MigrateReport
}

func (c *fakeControl) StartSuccessor(req job.MigrateRequest) (job.MigrateReply, error) {
	c.tr.add("start successor of rank %d for entry %d", req.Rank, req.Seq)
	c.started = append(c.started, req)
	if c.startErr != nil {
		return job.MigrateReply{}, c.startErr
	}
	if c.goneWhen == "start" && c.gone != nil {
		c.gone("its successor on n1 (pid 42) ended before taking over: exited with status 3")
	}
	return c.reply, nil
}

func (c *fakeControl) WatchSuccessor(seq uint64, rank int, gone func(string)) func() {
	c.tr.add("watch")
	c.gone = gone
	return func() { c.gone = nil; c.tr.add("unwatch") }
}

func (c *fakeControl) Report(r job.MigrateReport) {
	c.tr.add("report ok=%v", r.OK)
	c.reports = append(c.reports, r)
}

// fakePred is the predecessor's end of the hand-over; its successor is at addr.
type fakePred struct {
	tr        *trace
	addr      string
	cancelled string
	acceptErr error
	stateErr  error
	finalErr  error

	finals []rewire.Final
	closed bool
}

func (p *fakePred) Spec() string         { return "127.0.0.1:4000/00112233445566778899aabbccddeeff" }
func (p *fakePred) Cancel(reason string) { p.cancelled = reason }

func (p *fakePred) Accept() (string, error) {
	p.tr.add("accept")
	if p.cancelled != "" {
		return "", errors.New(p.cancelled)
	}
	if p.acceptErr != nil {
		return "", p.acceptErr
	}
	return p.addr, nil
}

func (p *fakePred) SendState() error {
	p.tr.add("send state")
	return p.stateErr
}

func (p *fakePred) SendFinal(f rewire.Final) error {
	if f.Abort != "" {
		p.tr.add("abort hand-over")
	} else {
		p.tr.add("commit hand-over")
	}
	p.finals = append(p.finals, f)
	if f.Abort != "" {
		return nil
	}
	return p.finalErr
}

func (p *fakePred) Close() error {
	p.closed = true
	return nil
}

type fakeHandover struct {
	tr        *trace
	pred      *fakePred
	listenErr error
}

func (h *fakeHandover) Listen() (Predecessor, error) {
	h.tr.add("listen")
	if h.listenErr != nil {
		return nil, h.listenErr
	}
	return h.pred, nil
}

// fakeWorld is the data plane of one rank. agree stands for the Allgather.
type fakeWorld struct {
	tr        *trace
	agree     func(mine Outcome) ([]Outcome, error)
	addrs     []string
	snap      rewire.Snapshot
	retireErr error

	redirects []Redirect
	retired   bool
}

func (w *fakeWorld) Agree(mine Outcome) ([]Outcome, error) {
	w.tr.add("agree moved=%v", mine.Moved)
	return w.agree(mine)
}

func (w *fakeWorld) Redirect(rank int, addr string) error {
	w.tr.add("redirect rank %d to %s", rank, addr)
	w.redirects = append(w.redirects, Redirect{rank, addr})
	return nil
}

func (w *fakeWorld) Retire() ([]string, rewire.Snapshot, error) {
	w.tr.add("retire")
	w.retired = true
	return append([]string(nil), w.addrs...), w.snap, w.retireErr
}

// fakeClock advances by step at every reading.
func fakeClock(step time.Duration) func() time.Time {
	t := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	return func() time.Time {
		t = t.Add(step)
		return t
	}
}

// group is an Allgather among n ranks run as goroutines: each rank's agree blocks until
// every rank has contributed, then all get the same outcomes. fail, if set, is the error
// every rank gets instead.
type group struct {
	mu   sync.Mutex
	cond *sync.Cond
	got  []Outcome
	n    int
	fail error
}

func newGroup(n int) *group {
	g := &group{got: make([]Outcome, n)}
	g.cond = sync.NewCond(&g.mu)
	return g
}

func (g *group) agreeFor(rank int) func(Outcome) ([]Outcome, error) {
	return func(o Outcome) ([]Outcome, error) {
		g.mu.Lock()
		defer g.mu.Unlock()
		g.got[rank] = o
		g.n++
		g.cond.Broadcast()
		for g.n < len(g.got) {
			g.cond.Wait()
		}
		if g.fail != nil {
			return nil, g.fail
		}
		return append([]Outcome(nil), g.got...), nil
	}
}

// rankSim is one rank with fake effects.
type rankSim struct {
	tr    *trace
	ctl   *fakeControl
	pred  *fakePred
	world *fakeWorld
	m     Migration
}

func newRank(rank, size, iter int, moves []Move, agree func(Outcome) ([]Outcome, error)) *rankSim {
	tr := &trace{}
	addrs := make([]string, size)
	for i := range addrs {
		addrs[i] = fmt.Sprintf("n%d:%d", 1+i%2, 7000+i)
	}
	r := &rankSim{
		tr:    tr,
		ctl:   &fakeControl{tr: tr, reply: job.MigrateReply{Node: "n1", PID: 42}},
		pred:  &fakePred{tr: tr, addr: fmt.Sprintf("n1:%d", 8000+rank)},
		world: &fakeWorld{tr: tr, agree: agree, addrs: addrs, snap: rewire.Snapshot{NextCtx: 9}},
	}
	r.m = Migration{Rank: rank, Size: size, Iteration: iter, Moves: moves, StateBytes: 1 << 20,
		World: r.world, Control: r.ctl, Handover: &fakeHandover{tr: tr, pred: r.pred}, Now: fakeClock(5 * time.Millisecond)}
	return r
}

// alone returns an agreement in which the other ranks' outcomes are others, rank me's
// its own.
func alone(me int, others []Outcome) func(Outcome) ([]Outcome, error) {
	return func(o Outcome) ([]Outcome, error) {
		all := append([]Outcome(nil), others...)
		all[me] = o
		return all, nil
	}
}
