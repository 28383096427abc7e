package pcm

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/mpios/mpios/internal/rankreconf"
	"github.com/mpios/mpios/internal/rewire"
	"github.com/mpios/mpios/mpi"
	"github.com/mpios/mpios/pcm/state"
	"github.com/vmihailenco/msgpack/v5"
)

// A migration at an agreement point is internal/rankreconf's protocol (Migration.Run); this
// file gives it its effects: the world communicator (mpi.Allgather of the outcomes, the
// address table through mpi.Launched's Member), the hand-over connection
// (internal/rewire), and the launcher's answers (control.go).

// Timeouts of the migration steps.
const (
	acceptTimeout = 60 * time.Second // successor start: exec, runtime, dial back
	retireTimeout = 60 * time.Second // peers redirect right after the commit
	finalTimeout  = 60 * time.Second
)

// migrationMeta is the pcm part of the hand-over: what keeps the successor's schedule in
// step with the other ranks.
type migrationMeta struct {
	Seq         uint64 `msgpack:"seq"`
	Applied     uint64 `msgpack:"applied"`
	Calls       int64  `msgpack:"calls"`
	NextPoll    int64  `msgpack:"next_poll"`
	PollEvery   int64  `msgpack:"poll_every"`
	CallsAtSync int64  `msgpack:"calls_at_sync"`
	LastIter    int    `msgpack:"last_iter"`
	CostNanos   int64  `msgpack:"cost"`
	Names       []string
}

// migrate runs the migrations of an agreement point. It is collective.
func (p *Process) migrate(iter int, moves []rankreconf.Move) (Action, error) {
	me := p.world.Rank()
	// The moved ranks' nodes change, and their successors know no buddy: all choose again.
	p.forgetBuddy()
	if p.launched == nil || p.launched.Member == nil {
		// The same on every rank (it depends on the kind of world only).
		fmt.Fprintf(p.opts.Log, "pcm: rank %d: ignoring migration request: %v\n", me, rewire.ErrUnsupported)
		return Continue, nil
	}
	m := rankreconf.Migration{
		Rank: me, Size: p.world.Size(), Iteration: iter, Moves: moves, StateBytes: p.reg.Size(),
		World:    rankWorld{p: p, member: p.launched.Member},
		Control:  p.ctl,
		Handover: handover{p: p, iter: iter},
		Now:      time.Now,
		Log:      p.opts.Log,
	}
	leave, err := m.Run()
	if err != nil {
		err = fmt.Errorf("pcm: Reconfigure(%d): %w", iter, err)
	}
	if leave {
		p.left = true
		return Leave, err
	}
	return Continue, err
}

// rankWorld is the world communicator's part in a migration (rankreconf.World).
type rankWorld struct {
	p      *Process
	member rewire.Member
}

func (w rankWorld) Agree(mine rankreconf.Outcome) ([]rankreconf.Outcome, error) {
	all := make([]byte, rankreconf.OutcomeSize*w.p.world.Size())
	if err := mpi.Allgather(w.p.world, rankreconf.AppendOutcome(nil, mine), all); err != nil {
		return nil, err
	}
	return rankreconf.ParseOutcomes(all)
}

func (w rankWorld) Redirect(rank int, addr string) error { return w.member.Redirect(rank, addr) }

func (w rankWorld) Retire() ([]string, rewire.Snapshot, error) {
	if w.p.prof != nil {
		w.p.prof.Close() // the successor profiles the rank from now on
		w.p.prof = nil
	}
	snap, err := w.member.Retire(retireTimeout)
	return w.member.Addrs(), snap, err
}

// handover opens hand-over listeners (rankreconf.Handover) that stream the state after
// iteration iter.
type handover struct {
	p    *Process
	iter int
}

func (h handover) Listen() (rankreconf.Predecessor, error) {
	env := h.p.launched.Env
	pred, err := rewire.Listen(env.Bind, env.Secret, env.Rank)
	if err != nil {
		return nil, err
	}
	return predecessor{pred: pred, p: h.p, iter: h.iter}, nil
}

// predecessor is a rewire.Predecessor with the timeouts and the state of this process.
type predecessor struct {
	pred *rewire.Predecessor
	p    *Process
	iter int
}

func (d predecessor) Spec() string            { return d.pred.Spec().String() }
func (d predecessor) Cancel(reason string)    { d.pred.Cancel(reason) }
func (d predecessor) Accept() (string, error) { return d.pred.Accept(acceptTimeout) }
func (d predecessor) Close() error            { return d.pred.Close() }

func (d predecessor) SendState() error {
	return d.pred.SendState(d.p.reg.Size()+4096, func(w io.Writer) error { return d.p.writeBlob(w, d.iter) })
}

func (d predecessor) SendFinal(f rewire.Final) error { return d.pred.SendFinal(f, finalTimeout) }

// writeBlob writes the hand-over blob: a length-prefixed msgpack migrationMeta, then the
// registered state stream.
func (p *Process) writeBlob(w io.Writer, iter int) error {
	if err := p.writeMeta(w, iter); err != nil {
		return err
	}
	_, err := p.reg.WriteTo(w)
	return err
}

// writeMeta writes pcm's own bookkeeping (a length-prefixed msgpack migrationMeta), which a
// successor or a process that joins at a resize takes over.
func (p *Process) writeMeta(w io.Writer, iter int) error {
	meta, err := msgpack.Marshal(&migrationMeta{
		Seq: p.seq, Applied: p.applied, Calls: p.calls, NextPoll: p.nextPoll, PollEvery: p.pollEvery,
		CallsAtSync: p.callsAtSync, LastIter: iter, CostNanos: int64(p.lastSyncCost), Names: p.reg.Names(),
	})
	if err != nil {
		return err
	}
	if _, err := w.Write(binary.LittleEndian.AppendUint32(nil, uint32(len(meta)))); err != nil {
		return err
	}
	_, err = w.Write(meta)
	return err
}

// loadInherited restores the state a predecessor handed over.
func (p *Process) loadInherited() error {
	blob := p.inherited
	p.inherited = nil
	n, err := p.loadMeta(blob)
	if err != nil {
		return err
	}
	if err := p.readInherited(bytes.NewReader(blob[n:])); err != nil {
		return fmt.Errorf("pcm: Load: hand-over state: %w", err)
	}
	return nil
}

// loadMeta takes over the bookkeeping writeMeta wrote at the start of blob and returns its
// length.
func (p *Process) loadMeta(blob []byte) (int, error) {
	if len(blob) < 4 {
		return 0, fmt.Errorf("pcm: Load: hand-over state of %d bytes: %w", len(blob), state.ErrCorrupt)
	}
	n := int(binary.LittleEndian.Uint32(blob))
	if n > len(blob)-4 {
		return 0, fmt.Errorf("pcm: Load: hand-over state header of %d bytes in %d: %w", n, len(blob), state.ErrCorrupt)
	}
	var meta migrationMeta
	if err := msgpack.Unmarshal(blob[4:4+n], &meta); err != nil {
		return 0, fmt.Errorf("pcm: Load: hand-over state header: %v: %w", err, state.ErrCorrupt)
	}
	if !slices.Equal(meta.Names, p.reg.Names()) {
		return 0, fmt.Errorf("pcm: Load: the predecessor registered %v, this process %v: %w", meta.Names, p.reg.Names(), ErrCallOrder)
	}
	p.seq = max(p.seq, meta.Seq)
	p.applied, p.calls, p.nextPoll, p.pollEvery = meta.Applied, meta.Calls, meta.NextPoll, meta.PollEvery
	p.callsAtSync, p.lastSyncCost = meta.CallsAtSync, time.Duration(meta.CostNanos)
	p.lastIter, p.haveIter = meta.LastIter, true
	return 4 + n, nil
}
