package rankreconf

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/mpios/mpios/internal/job"
	"github.com/mpios/mpios/internal/rewire"
)

// Outcome is one rank's result of the prepare phase, exchanged at the commit point.
type Outcome struct {
	// Moved: this rank's successor holds the state and waits for the commit.
	Moved bool
	// Addr is the successor's data-plane address, when Moved.
	Addr string
}

// World is the rank's world communicator's part in a migration.
type World interface {
	// Agree gives every rank's outcome, in rank order. It is collective: the commit point.
	Agree(mine Outcome) ([]Outcome, error)
	// Redirect sends rank's messages to its successor at addr from now on.
	Redirect(rank int, addr string) error
	// Retire flushes and closes this rank's data plane, and returns every rank's address
	// and what the matching engine held. The world is unusable afterwards.
	Retire() ([]string, rewire.Snapshot, error)
}

// Control is the rank's link to its supervisor (mpirun).
type Control interface {
	// StartSuccessor asks the supervisor to start the successor req describes.
	StartSuccessor(req job.MigrateRequest) (job.MigrateReply, error)
	// WatchSuccessor calls gone, from any goroutine, when the supervisor reports that the
	// successor of rank for entry seq ended before taking over; stop ends the watch.
	WatchSuccessor(seq uint64, rank int, gone func(reason string)) (stop func())
	// Report tells the supervisor how this rank's migration ended.
	Report(job.MigrateReport)
}

// Handover opens this rank's end of a hand-over.
type Handover interface {
	// Listen opens a one-time listener for this rank's successor.
	Listen() (Predecessor, error)
}

// Predecessor is the old process's end of the connection to its successor
// (rewire.Predecessor).
type Predecessor interface {
	// Spec tells the successor where and how to reach this process.
	Spec() string
	// Cancel makes a pending Accept fail with reason.
	Cancel(reason string)
	// Accept waits for the successor and returns its data-plane address.
	Accept() (string, error)
	// SendState streams the rank's state and waits for the successor to take it.
	SendState() error
	// SendFinal commits (the address table and engine snapshot) or, with Abort set,
	// cancels the hand-over.
	SendFinal(rewire.Final) error
	// Close ends the hand-over (and the listener, if the successor never came).
	Close() error
}

// MaxAddr bounds a successor's address in the outcome exchange.
const MaxAddr = 255

// Migration is the migration protocol of one boundary, as one rank runs it. Every rank
// of the world runs it with the same Moves.
type Migration struct {
	Rank, Size int
	Iteration  int
	Moves      []Move
	// StateBytes is the size of the registered state, for the report.
	StateBytes int64

	World    World
	Control  Control
	Handover Handover
	// Now is the clock the pause is measured with.
	Now func() time.Time
	// Log receives what the supervisor is also told; nil: discarded.
	Log io.Writer
}

// Run runs the protocol. leave reports that this rank handed itself over and the process
// must leave its loop. err is nil, or says what went wrong; a rank whose migration was
// aborted before the commit continues (leave false) and reports why to the supervisor.
func (m *Migration) Run() (leave bool, err error) {
	log := m.Log
	if log == nil {
		log = io.Discard
	}
	mine, moving := Move{}, false
	for _, mv := range m.Moves {
		if mv.Rank == m.Rank {
			mine, moving = mv, true
		}
	}
	began := m.Now()
	var pred Predecessor
	var failure error
	out := Outcome{}
	if moving {
		pred, out.Addr, failure = m.prepare(mine)
		out.Moved = failure == nil
	}
	report := job.MigrateReport{Seq: mine.Seq, Rank: m.Rank, To: mine.To, Iteration: m.Iteration, StateBytes: m.StateBytes}
	abort := func(reason error) {
		if pred != nil {
			pred.SendFinal(rewire.Final{Abort: reason.Error()})
			pred.Close()
		}
		report.Error = reason.Error()
		m.Control.Report(report)
	}

	// The commit point: every rank learns which moves happen.
	all, err := m.World.Agree(out)
	if err == nil && len(all) != m.Size {
		err = fmt.Errorf("%d outcomes for %d ranks", len(all), m.Size)
	}
	if err != nil {
		if moving {
			abort(fmt.Errorf("ranks failed to agree: %w", err))
		}
		return false, fmt.Errorf("migration: agree: %w", err)
	}
	all[m.Rank] = out // this rank's own outcome is the one it knows
	v := Judge(m.Moves, all, m.Rank)
	var redirectErr error
	for _, r := range v.Redirects {
		if err := m.World.Redirect(r.Rank, r.Addr); err != nil && redirectErr == nil {
			redirectErr = fmt.Errorf("redirect rank %d to %s: %w", r.Rank, r.Addr, err)
		}
	}
	if v.Abort {
		if failure == nil {
			failure = fmt.Errorf("the joint move of request %d did not happen: rank %s not ready to move", mine.Seq, joinInts(v.Unready))
		}
		abort(failure)
		fmt.Fprintf(log, "pcm: rank %d: migration to %s aborted, continuing here: %v\n", m.Rank, mine.To, failure)
		return false, redirectErr
	}
	if !v.Leave {
		return false, redirectErr
	}

	// Committed: the peers talk to the successor now.
	defer pred.Close()
	addrs, snap, rerr := m.World.Retire()
	if len(addrs) == m.Size {
		addrs[m.Rank] = out.Addr
	} else if rerr == nil {
		rerr = fmt.Errorf("address table of %d entries for %d ranks", len(addrs), m.Size)
	}
	ferr := pred.SendFinal(rewire.Final{Addrs: addrs, Snap: snap})
	report.OK = ferr == nil
	report.Pause = m.Now().Sub(began)
	if err := errors.Join(rerr, ferr, redirectErr); err != nil {
		report.Error = err.Error()
		fmt.Fprintf(log, "pcm: rank %d: hand-over to %s incomplete: %v\n", m.Rank, mine.To, err)
	}
	m.Control.Report(report)
	if ferr != nil {
		// The successor did not take over after the commit: the rank is lost.
		return true, fmt.Errorf("hand-over of rank %d to %s failed after the commit: %w", m.Rank, mine.To, ferr)
	}
	return true, nil
}

// prepare is the moving rank's first phase: the supervisor starts the successor on the
// target, which connects back and receives the state. Nothing is committed: on failure the
// rank goes on. The Predecessor is returned when the successor connected, so that it can
// be told the outcome.
func (m *Migration) prepare(mv Move) (Predecessor, string, error) {
	pred, err := m.Handover.Listen()
	if err != nil {
		return nil, "", err
	}
	stop := m.Control.WatchSuccessor(mv.Seq, m.Rank, pred.Cancel)
	defer stop()
	rep, err := m.Control.StartSuccessor(job.MigrateRequest{Seq: mv.Seq, Rank: m.Rank, Handover: pred.Spec(), Iteration: m.Iteration, StateBytes: m.StateBytes})
	if err != nil {
		pred.Close()
		return nil, "", fmt.Errorf("start successor on %s: %w", mv.To, err)
	}
	addr, err := pred.Accept()
	if err != nil {
		pred.Close()
		return nil, "", fmt.Errorf("successor (pid %d on %s) did not connect: %w", rep.PID, rep.Node, err)
	}
	if len(addr) > MaxAddr {
		return pred, "", fmt.Errorf("successor on %s: address %q longer than %d bytes", rep.Node, addr, MaxAddr)
	}
	if err := pred.SendState(); err != nil {
		return pred, "", fmt.Errorf("hand state to the successor on %s: %w", rep.Node, err)
	}
	return pred, addr, nil
}

// Redirect is a rank whose messages go to its successor's address from now on.
type Redirect struct {
	Rank int
	Addr string
}

// Verdict is what the outcomes agreed at the commit point mean for one rank.
type Verdict struct {
	// Redirects are the moves that happened, except the rank's own: its address table
	// points these ranks at their successors from now on.
	Redirects []Redirect
	// Leave: the rank's own move happened; it retires and hands over.
	Leave bool
	// Abort: the rank's own move did not happen; it releases its successor and goes on.
	Abort bool
	// Unready, when the rank's own move is joint and aborted, are the ranks of its entry
	// whose move was not ready (the rank's own among them if it failed itself).
	Unready []int
}

// Judge returns the verdict of the agreed outcomes for rank me. The moves of a joint entry
// happen only if every one of them is ready: one that failed before the commit aborts them
// all, so that no node is left with a rank that arrived while the one it was to leave for
// stays (over its slots), nor an exchange half done.
func Judge(moves []Move, outcomes []Outcome, me int) Verdict {
	var v Verdict
	ready := func(mv Move) bool { return mv.Rank >= 0 && mv.Rank < len(outcomes) && outcomes[mv.Rank].Moved }
	failed := map[uint64]bool{} // joint entries with a move that is not ready
	for _, mv := range moves {
		if mv.Joint && !ready(mv) {
			failed[mv.Seq] = true
		}
	}
	for _, mv := range moves {
		moved := ready(mv) && !(mv.Joint && failed[mv.Seq])
		switch {
		case mv.Rank == me && moved:
			v.Leave = true
		case mv.Rank == me:
			v.Abort = true
			if mv.Joint {
				for _, x := range moves {
					if x.Seq == mv.Seq && !ready(x) {
						v.Unready = append(v.Unready, x.Rank)
					}
				}
			}
		case moved:
			v.Redirects = append(v.Redirects, Redirect{Rank: mv.Rank, Addr: outcomes[mv.Rank].Addr})
		}
	}
	return v
}

// OutcomeSize is the size of one rank's record in the outcome exchange: a flag, the
// address length and the address.
const OutcomeSize = 2 + MaxAddr

// AppendOutcome appends o's fixed-size record to b.
func AppendOutcome(b []byte, o Outcome) []byte {
	rec := make([]byte, OutcomeSize)
	if o.Moved && len(o.Addr) <= MaxAddr {
		rec[0] = 1
		rec[1] = byte(copy(rec[2:], o.Addr))
	}
	return append(b, rec...)
}

// ParseOutcomes decodes the records of every rank, in rank order.
func ParseOutcomes(b []byte) ([]Outcome, error) {
	if len(b)%OutcomeSize != 0 {
		return nil, fmt.Errorf("rankreconf: outcome records of %d bytes, want a multiple of %d", len(b), OutcomeSize)
	}
	out := make([]Outcome, len(b)/OutcomeSize)
	for i := range out {
		rec := b[i*OutcomeSize : (i+1)*OutcomeSize]
		switch {
		case rec[0] == 0:
		case rec[0] == 1 && rec[1] > 0:
			out[i] = Outcome{Moved: true, Addr: string(rec[2 : 2+int(rec[1])])}
		default:
			return nil, fmt.Errorf("rankreconf: malformed outcome of rank %d", i)
		}
	}
	return out, nil
}

// joinInts formats ranks as "1, 3".
func joinInts(rs []int) string {
	s := make([]string, len(rs))
	for i, r := range rs {
		s[i] = strconv.Itoa(r)
	}
	return strings.Join(s, ", ")
}
