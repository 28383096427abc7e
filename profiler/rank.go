package profiler

import (
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/mpios/mpios/mpi"
)

// opKind says how an operation's event feeds the traffic tables.
type opKind uint8

const (
	kindOther opKind = iota
	kindSend         // Peer is the destination, Bytes what was sent
	kindRecv         // Peer is the source, Bytes what was received
	kindWait         // a completed request: a receive if Bytes > 0
	kindColl         // collective: counted per operation only
)

// knownOps are the operations mpi reports, indexed so that the hot path finds their counters
// with a string switch instead of a map lookup.
var knownOps = [...]struct {
	name string
	kind opKind
}{
	{"Send", kindSend}, {"Isend", kindSend}, {"Sendrecv", kindSend}, {"SendValue", kindSend},
	{"Recv", kindRecv}, {"RecvValue", kindRecv}, {"Irecv", kindOther},
	{"Wait", kindWait}, {"WaitAll", kindOther},
	{"Barrier", kindColl}, {"Bcast", kindColl}, {"Reduce", kindColl}, {"Allreduce", kindColl},
	{"ReduceScatterBlock", kindColl}, {"Scan", kindColl}, {"Gather", kindColl},
	{"Scatter", kindColl}, {"Allgather", kindColl}, {"Allgatherv", kindColl},
	{"Alltoall", kindColl}, {"Gatherv", kindColl}, {"Scatterv", kindColl},
	{"Exscan", kindColl}, {"ReduceScatter", kindColl}, {"Alltoallv", kindColl},
	{"Ibarrier", kindColl}, {"Ibcast", kindColl}, {"Ireduce", kindColl}, {"Iallreduce", kindColl},
	{"Iallgather", kindColl}, {"Ialltoall", kindColl},
	{"Ssend", kindSend}, {"Issend", kindSend}, {"Start", kindSend}, {"SendrecvReplace", kindSend},
	{"Mrecv", kindRecv}, {"NeighborAllgather", kindColl}, {"NeighborAlltoall", kindColl},
	{"Alltoallw", kindColl},
}

const numOps = len(knownOps)

// opIndex returns op's index in knownOps, or -1.
func opIndex(op string) int {
	switch op {
	case "Send":
		return 0
	case "Isend":
		return 1
	case "Sendrecv":
		return 2
	case "SendValue":
		return 3
	case "Recv":
		return 4
	case "RecvValue":
		return 5
	case "Irecv":
		return 6
	case "Wait":
		return 7
	case "WaitAll":
		return 8
	case "Barrier":
		return 9
	case "Bcast":
		return 10
	case "Reduce":
		return 11
	case "Allreduce":
		return 12
	case "ReduceScatterBlock":
		return 13
	case "Scan":
		return 14
	case "Gather":
		return 15
	case "Scatter":
		return 16
	case "Allgather":
		return 17
	case "Allgatherv":
		return 18
	case "Alltoall":
		return 19
	case "Gatherv":
		return 20
	case "Scatterv":
		return 21
	case "Exscan":
		return 22
	case "ReduceScatter":
		return 23
	case "Alltoallv":
		return 24
	case "Ibarrier":
		return 25
	case "Ibcast":
		return 26
	case "Ireduce":
		return 27
	case "Iallreduce":
		return 28
	case "Iallgather":
		return 29
	case "Ialltoall":
		return 30
	case "Ssend":
		return 31
	case "Issend":
		return 32
	case "Start":
		return 33
	case "SendrecvReplace":
		return 34
	case "Mrecv":
		return 35
	case "NeighborAllgather":
		return 36
	case "NeighborAlltoall":
		return 37
	case "Alltoallw":
		return 38
	}
	return -1
}

type opStat struct {
	calls, errors, bytes int64
	dur                  time.Duration
}

// traffic holds per-peer counters indexed by world rank. It grows only when a peer beyond its
// length shows up, so steady-state recording does not allocate.
type traffic struct {
	msgs, bytes []int64
}

func (t *traffic) add(peer, size, bytes int) {
	if peer >= len(t.msgs) {
		n := max(peer+1, size, 2*len(t.msgs))
		t.msgs = slices.Grow(t.msgs, n-len(t.msgs))[:n]
		t.bytes = slices.Grow(t.bytes, n-len(t.bytes))[:n]
	}
	t.msgs[peer]++
	t.bytes[peer] += int64(bytes)
}

func (t *traffic) list() []PeerTraffic {
	out := []PeerTraffic{}
	for i, m := range t.msgs {
		if m > 0 {
			out = append(out, PeerTraffic{Rank: i, Messages: m, Bytes: t.bytes[i]})
		}
	}
	return out
}

// sample is one closed interval between two iteration marks, covering steps iterations.
type sample struct {
	wall, comm time.Duration
	steps      int64
}

func (s sample) comp() time.Duration { return max(0, s.wall-s.comm) }

// window is a ring of the last samples.
type window struct {
	buf  []sample
	next int
	n    int
}

func (w *window) push(s sample) {
	w.buf[w.next] = s
	w.next = (w.next + 1) % len(w.buf)
	w.n = min(w.n+1, len(w.buf))
}

func (w *window) last() (sample, bool) {
	if w.n == 0 {
		return sample{}, false
	}
	return w.buf[(w.next-1+len(w.buf))%len(w.buf)], true
}

// rankState is the shard of one rank. Only its own goroutines (and snapshots) touch it, so
// ranks of a goroutine world do not contend.
type rankState struct {
	mu    sync.Mutex
	rank  int
	since time.Time

	calls, errors int64
	comm          time.Duration // total inside mpi calls
	ops           [numOps]opStat
	other         map[string]*opStat // operations unknown to this package, by name

	sent, recv traffic
	recvMsgs   int64

	// Iterations: mark starts the open interval (zero: no mark yet), iterComm is the time in
	// mpi calls since mark.
	mark       time.Time
	iterComm   time.Duration
	lastIter   int64
	hasIter    bool
	iterations int64
	win        window
}

func newRankState(rank int, since time.Time, windowLen int) *rankState {
	return &rankState{rank: rank, since: since, win: window{buf: make([]sample, windowLen)}}
}

// record folds one event into the shard. Called with s.mu held.
func (s *rankState) record(ev *mpi.CallEvent) {
	st, kind := s.op(ev.Op)
	st.calls++
	st.bytes += int64(ev.Bytes)
	st.dur += ev.Dur
	s.calls++
	s.comm += ev.Dur
	s.iterComm += ev.Dur
	if ev.Err != nil {
		st.errors++
		s.errors++
		return // failed calls moved no data we can vouch for
	}
	c := ev.Comm
	if ev.Op == "Sendrecv" || ev.Op == "SendrecvReplace" {
		// The receive half counts whatever the send half's peer is (ProcNull at the edge
		// of a domain sends nothing but still receives from the other side).
		if c != nil && ev.RecvPeer >= 0 && ev.RecvPeer < c.Size() {
			s.recv.add(c.WorldRank(ev.RecvPeer), c.Size(), ev.RecvBytes)
		}
		s.recvMsgs++
	}
	if c == nil || ev.Peer < 0 || ev.Peer >= c.Size() { // ProcNull, AnySource, no communicator
		return
	}
	peer := c.WorldRank(ev.Peer)
	switch kind {
	case kindSend:
		s.sent.add(peer, c.Size(), ev.Bytes)
	case kindRecv:
		s.recv.add(peer, c.Size(), ev.Bytes)
		s.recvMsgs++
	case kindWait:
		if ev.Bytes > 0 {
			s.recv.add(peer, c.Size(), ev.Bytes)
			s.recvMsgs++
		}
	}
}

func (s *rankState) op(name string) (*opStat, opKind) {
	if i := opIndex(name); i >= 0 {
		return &s.ops[i], knownOps[i].kind
	}
	st := s.other[name]
	if st == nil {
		if s.other == nil {
			s.other = make(map[string]*opStat)
		}
		st = &opStat{}
		s.other[name] = st
	}
	return st, kindOther
}

// iteration closes the interval ending at iteration iter at now. Called with s.mu held.
func (s *rankState) iteration(iter int64, now time.Time) error {
	if s.mark.IsZero() {
		// Nothing to time yet: this mark opens the first interval.
		s.begin(now)
		s.lastIter, s.hasIter = iter, true
		return nil
	}
	if now.Before(s.mark) {
		return errBackwards(s.rank, iter, now, s.mark)
	}
	steps := int64(1)
	if s.hasIter && iter > s.lastIter {
		steps = iter - s.lastIter // pcm may mark every k iterations
	}
	s.win.push(sample{wall: now.Sub(s.mark), comm: s.iterComm, steps: steps})
	s.iterations += steps
	s.lastIter, s.hasIter = iter, true
	s.begin(now)
	return nil
}

func (s *rankState) begin(now time.Time) {
	s.mark = now
	s.iterComm = 0
}

// profile copies the shard out. Called with s.mu held.
func (s *rankState) profile(job, node string, at time.Time) RankProfile {
	elapsed := max(0, at.Sub(s.since))
	p := RankProfile{
		Job:              job,
		Rank:             s.rank,
		Node:             node,
		Since:            s.since,
		At:               at,
		ElapsedSeconds:   elapsed.Seconds(),
		CommSeconds:      s.comm.Seconds(),
		CompSeconds:      max(0, elapsed-s.comm).Seconds(),
		Iteration:        s.lastIter,
		Iterations:       s.iterations,
		Calls:            s.calls,
		Errors:           s.errors,
		Sent:             s.sent.list(),
		Received:         s.recv.list(),
		ReceivedMessages: s.recvMsgs,
		Ops:              []OpStat{},
	}
	if last, ok := s.win.last(); ok {
		p.LastIterSeconds = last.wall.Seconds() / float64(last.steps)
	}
	var wall, comm, comp time.Duration
	for _, x := range s.win.buf[:s.win.n] {
		wall += x.wall
		comm += x.comm
		comp += x.comp()
		p.WindowIterations += x.steps
	}
	p.WindowSeconds, p.WindowCommSeconds, p.WindowCompSeconds = wall.Seconds(), comm.Seconds(), comp.Seconds()
	if p.WindowIterations > 0 {
		p.MeanIterSeconds = wall.Seconds() / float64(p.WindowIterations)
	}
	for i, st := range s.ops {
		if st.calls > 0 {
			p.Ops = append(p.Ops, st.export(knownOps[i].name, knownOps[i].kind == kindColl))
		}
	}
	for name, st := range s.other {
		p.Ops = append(p.Ops, st.export(name, false))
	}
	slices.SortFunc(p.Ops, func(a, b OpStat) int { return strings.Compare(a.Op, b.Op) })
	return p
}

func (st *opStat) export(name string, coll bool) OpStat {
	return OpStat{Op: name, Collective: coll, Calls: st.calls, Errors: st.errors, Bytes: st.bytes, Seconds: st.dur.Seconds()}
}
