package spawner

import (
	"cmp"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mpios/mpios/internal/job"
)

// Replay (job.NodeReplaySubject). NATS delivers a message only to the subscribers connected
// when it is published: after an outage, a node that reconnects before the rank's launcher
// publishes the output and exits of its ranks into the void, and the launcher would report a
// rank that ended well as lost. So each rank keeps a ledger of what it published, and its
// launcher asks for what it missed.

// Bounds of a ledger and of the ledgers kept after their rank ended.
const (
	ledgerMaxBytes = 1 << 20 // output bytes a rank's ledger keeps, the latest
	ledgerMaxLines = 4096    // output messages a rank's ledger keeps, the latest
	// ledgerKeptFor is how long the ledger of an ended rank is kept: a launcher that missed the
	// exit notices the rank gone within a few heartbeats once it is back.
	ledgerKeptFor    = 2 * time.Minute
	ledgersKept      = 256      // ledgers of ended ranks kept at most, the latest
	ledgersKeptBytes = 32 << 20 // output bytes the ledgers of ended ranks keep at most
)

// ledger is what a rank published: its latest output messages and its exit.
type ledger struct {
	mu sync.Mutex
	// out[head:] are the messages kept, Seq ascending; those before head are forgotten, and
	// compacted away once they are half of out (a full ledger forgets one per line printed).
	out    []job.RankOutput
	head   int
	bytes  int
	exit   *job.RankExit
	doneAt time.Time
}

// add records an output message (a copy of its line), forgetting the oldest beyond the
// bounds.
func (l *ledger) add(o job.RankOutput) {
	o.Line = slices.Clone(o.Line)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.out = append(l.out, o)
	l.bytes += len(o.Line)
	for len(l.out)-l.head > ledgerMaxLines || (l.bytes > ledgerMaxBytes && l.head < len(l.out)-1) {
		l.bytes -= len(l.out[l.head].Line)
		l.out[l.head] = job.RankOutput{} // its line is garbage now
		l.head++
	}
	if l.head > len(l.out)/2 {
		n := copy(l.out, l.out[l.head:])
		clear(l.out[n:])
		l.out, l.head = l.out[:n], 0
	}
}

// ended records the rank's exit.
func (l *ledger) ended(e job.RankExit, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.exit, l.doneAt = &e, now
}

// replayOverhead bounds the encoding of a ReplayReply beyond its lines: its envelope, the
// exit, and each message's fields.
const replayOverhead, replayPerMessage = 4096, 32

// since returns the reply to a replay of the messages after seq after, at most limit bytes
// of it.
func (l *ledger) since(after uint64, limit int) job.ReplayReply {
	l.mu.Lock()
	defer l.mu.Unlock()
	kept := l.out[l.head:]
	i, _ := slices.BinarySearchFunc(kept, after+1, func(o job.RankOutput, seq uint64) int { return cmp.Compare(o.Seq, seq) })
	rep := job.ReplayReply{Exit: l.exit}
	size := replayOverhead
	for _, o := range kept[i:] {
		if size += len(o.Line) + replayPerMessage; size > limit && len(rep.Output) > 0 {
			rep.More = true
			break
		}
		rep.Output = append(rep.Output, o)
	}
	return rep
}

// keepEnded keeps r's ledger after its exit, and forgets the ledgers kept too long or beyond
// the bound. m.mu must be held.
func (m *Manager) keepEnded(r *rank, now time.Time) {
	m.ended = slices.DeleteFunc(m.ended, func(e *rank) bool {
		e.ledger.mu.Lock()
		defer e.ledger.mu.Unlock()
		return now.Sub(e.ledger.doneAt) > ledgerKeptFor
	})
	m.ended = append(m.ended, r)
	total := 0
	for _, e := range m.ended {
		total += e.ledger.size()
	}
	drop := 0
	for ; drop < len(m.ended)-1 && (len(m.ended)-drop > ledgersKept || total > ledgersKeptBytes); drop++ {
		total -= m.ended[drop].ledger.size()
	}
	m.ended = slices.Delete(m.ended, 0, drop)
}

// size is the output bytes the ledger keeps.
func (l *ledger) size() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.bytes
}

// findForReplay returns the process of req: running, or ended and kept (the latest). m.mu
// must be held.
func (m *Manager) findForReplay(req job.ReplayRequest) *rank {
	key := RankKey{req.Job, req.Rank}
	if r := m.ranks[key]; r != nil && r.out == req.Out {
		return r
	}
	for i := len(m.ended) - 1; i >= 0; i-- {
		if r := m.ended[i]; r.key == key && r.out == req.Out {
			return r
		}
	}
	return nil
}

func (m *Manager) onReplay(msg *nats.Msg) {
	if msg.Reply == "" {
		return
	}
	fail := func(format string, args ...any) {
		rep := job.ReplayReply{Error: fmt.Sprintf("pcmd: node %s ", m.cfg.Node) + fmt.Sprintf(format, args...)}
		m.log.Print(rep.Error)
		m.respond(msg, rep)
	}
	in, err := m.auth.open(msg.Subject, msg.Data, replayJob, time.Now())
	if err != nil {
		fail("%s", job.TrimPrefix(err).Error())
		return
	}
	var req job.ReplayRequest
	if err := job.Decode(in.body, &req); err != nil {
		fail("rejects a malformed replay request: %s", job.TrimPrefix(err).Error())
		return
	}
	if err := req.Validate(); err != nil {
		fail("rejects an invalid replay request: %s", job.TrimPrefix(err).Error())
		return
	}
	m.mu.Lock()
	r := m.findForReplay(req)
	m.mu.Unlock()
	if r == nil {
		m.respond(msg, job.ReplayReply{NotFound: true})
		return
	}
	if r.signer != in.signer {
		// A rank's output is its launcher's to read.
		fail("refuses a replay for rank %d of job %s not signed by the launcher that started it", req.Rank, req.Job)
		return
	}
	// Under the job key, as the rank's own messages: the output is the job's.
	data, err := r.encode(msg.Reply, r.ledger.since(req.After, int(m.nc.MaxPayload())))
	if err == nil {
		err = msg.Respond(data)
	}
	if err != nil {
		m.log.Printf("reply on %s: %v", msg.Subject, err)
	}
}

func replayJob(body []byte) (string, error) {
	var req job.ReplayRequest
	if err := job.Decode(body, &req); err != nil {
		return "", err
	}
	return req.Job, nil
}
