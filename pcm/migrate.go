package pcm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/mpios/mpios/internal/job"
	"github.com/mpios/mpios/internal/reconf"
	"github.com/mpios/mpios/internal/rewire"
	"github.com/mpios/mpios/mpi"
	"github.com/mpios/mpios/pcm/state"
	"github.com/vmihailenco/msgpack/v5"
)

// Migration protocol (the "spawn and rewire"), run by every rank at an agreement
// point where the ranks agreed on reconfiguration entries that move ranks:
//
//  1. Each moving rank (the predecessor) opens a hand-over listener and asks the launcher to
//     start its successor on the target node; the successor connects, and the predecessor
//     streams the registered state to it directly. Nothing is committed yet: any failure
//     (unknown node, refusal, a successor that does not start or dies) aborts this one
//     migration and the predecessor goes on.
//  2. All ranks exchange the outcomes (Allgather): this is the commit point.
//  3. Every rank redirects each moved rank to its successor's address; each predecessor
//     flushes its connections (every peer's last frames arrive), gives the successor the
//     address table and the messages it had not received, and returns Leave.

// Timeouts of the migration steps.
const (
	acceptTimeout = 60 * time.Second // successor start: exec, runtime, dial back
	retireTimeout = 60 * time.Second // peers redirect right after the commit
	finalTimeout  = 60 * time.Second
)

// outcomeSize is the size of one rank's record in the outcome exchange: a flag and the
// successor's address.
const outcomeSize = 264

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

// movesOf returns, in rank order, the ranks that entries move and their targets; a rank
// named twice goes where the first entry sends it.
func movesOf(entries []reconf.Reconfiguration, size int) (ranks []int, to map[int]reconf.Reconfiguration) {
	to = make(map[int]reconf.Reconfiguration)
	for _, e := range entries {
		if e.Kind != reconf.Migrate {
			continue
		}
		for _, r := range e.Ranks {
			if r < 0 || r >= size {
				continue
			}
			if _, dup := to[r]; !dup {
				to[r] = e
				ranks = append(ranks, r)
			}
		}
	}
	slices.Sort(ranks)
	return ranks, to
}

// migrate runs the protocol above for the agreed moves. It is collective.
func (p *Process) migrate(iter int, moving []int, to map[int]reconf.Reconfiguration) (Action, error) {
	me := p.world.Rank()
	member, merr := rewire.MemberOf(p.world)
	if merr != nil {
		// The same on every rank (it depends on the kind of world only).
		fmt.Fprintf(p.opts.Log, "pcm: rank %d: ignoring migration request: %v\n", me, merr)
		return Continue, nil
	}
	entry, mine := to[me]
	began := time.Now()
	var pred *rewire.Predecessor
	var succAddr string
	var failure error
	if mine {
		pred, succAddr, failure = p.handOverState(iter, entry)
	}

	// Commit point: everybody learns which moves happen.
	rec := make([]byte, outcomeSize)
	if mine && failure == nil {
		rec[0] = 1
		rec[1] = byte(copy(rec[2:], succAddr))
	}
	all := make([]byte, outcomeSize*p.world.Size())
	if err := mpi.Allgather(p.world, rec, all); err != nil {
		if pred != nil {
			pred.SendFinal(rewire.Final{Abort: "ranks failed to agree: " + err.Error()}, 0)
			pred.Close()
		}
		return Continue, fmt.Errorf("pcm: Reconfigure(%d): migration: agree: %w", iter, err)
	}
	var redirectErr error
	for _, r := range moving {
		o := all[r*outcomeSize : (r+1)*outcomeSize]
		if o[0] != 1 || r == me {
			continue
		}
		addr := string(o[2 : 2+int(o[1])])
		if err := member.Redirect(r, addr); err != nil && redirectErr == nil {
			redirectErr = fmt.Errorf("pcm: Reconfigure(%d): redirect rank %d to %s: %w", iter, r, addr, err)
		}
	}
	if !mine {
		return Continue, redirectErr
	}

	report := job.MigrateReport{Seq: entry.Seq, Rank: me, To: entry.To, Iteration: iter, StateBytes: p.reg.Size()}
	if failure != nil {
		if pred != nil {
			pred.SendFinal(rewire.Final{Abort: failure.Error()}, 0)
			pred.Close()
		}
		report.Error = failure.Error()
		p.ctl.report(report)
		fmt.Fprintf(p.opts.Log, "pcm: rank %d: migration to %s aborted, continuing here: %v\n", me, entry.To, failure)
		return Continue, redirectErr
	}
	defer pred.Close()
	if p.prof != nil {
		p.prof.Close() // the successor profiles the rank from now on
		p.prof = nil
	}
	snap, rerr := member.Retire(retireTimeout)
	addrs := member.Addrs()
	addrs[me] = succAddr
	ferr := pred.SendFinal(rewire.Final{Addrs: addrs, Snap: snap}, finalTimeout)
	report.OK = ferr == nil
	report.Pause = time.Since(began)
	if err := errors.Join(rerr, ferr, redirectErr); err != nil {
		report.Error = err.Error()
		fmt.Fprintf(p.opts.Log, "pcm: rank %d: hand-over to %s incomplete: %v\n", me, entry.To, err)
	}
	p.ctl.report(report)
	p.left = true
	if ferr != nil {
		// The peers already talk to the successor, which did not take over: the rank is lost.
		return Leave, fmt.Errorf("pcm: Reconfigure(%d): hand-over of rank %d to %s failed after the commit: %w", iter, me, entry.To, ferr)
	}
	return Leave, nil
}

// handOverState starts the successor through the launcher and gives it the state. On
// failure the predecessor is returned (if the successor connected) so it can be told to
// give up.
func (p *Process) handOverState(iter int, entry reconf.Reconfiguration) (*rewire.Predecessor, string, error) {
	env := p.ctl.env
	pred, err := rewire.Listen(env.Bind, env.Secret, env.Rank)
	if err != nil {
		return nil, "", err
	}
	size := p.reg.Size()
	stop := p.ctl.watchSuccessor(entry.Seq, env.Rank, pred.Cancel)
	defer stop()
	rep, err := p.ctl.requestSuccessor(job.MigrateRequest{Seq: entry.Seq, Rank: env.Rank, Handover: pred.Spec().String(), Iteration: iter, StateBytes: size})
	if err != nil {
		pred.Close()
		return nil, "", fmt.Errorf("start successor on %s: %w", entry.To, trimPrefix(err))
	}
	addr, err := pred.Accept(acceptTimeout)
	if err != nil {
		pred.Close()
		return nil, "", fmt.Errorf("successor (pid %d on %s) did not connect: %w", rep.PID, rep.Node, err)
	}
	if err := pred.SendState(size+4096, func(w io.Writer) error { return p.writeBlob(w, iter) }); err != nil {
		return pred, "", fmt.Errorf("hand state to the successor on %s: %w", rep.Node, err)
	}
	return pred, addr, nil
}

// writeBlob writes the hand-over blob: a length-prefixed msgpack migrationMeta, then the
// registered state stream.
func (p *Process) writeBlob(w io.Writer, iter int) error {
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
	if _, err := w.Write(meta); err != nil {
		return err
	}
	_, err = p.reg.WriteTo(w)
	return err
}

// loadInherited restores the state a predecessor handed over.
func (p *Process) loadInherited() error {
	blob := p.inherited
	p.inherited = nil
	if len(blob) < 4 {
		return fmt.Errorf("pcm: Load: hand-over state of %d bytes: %w", len(blob), state.ErrCorrupt)
	}
	n := int(binary.LittleEndian.Uint32(blob))
	if n > len(blob)-4 {
		return fmt.Errorf("pcm: Load: hand-over state header of %d bytes in %d: %w", n, len(blob), state.ErrCorrupt)
	}
	var meta migrationMeta
	if err := msgpack.Unmarshal(blob[4:4+n], &meta); err != nil {
		return fmt.Errorf("pcm: Load: hand-over state header: %v: %w", err, state.ErrCorrupt)
	}
	if !slices.Equal(meta.Names, p.reg.Names()) {
		return fmt.Errorf("pcm: Load: the predecessor registered %v, this process %v: %w", meta.Names, p.reg.Names(), ErrCallOrder)
	}
	if _, err := p.reg.ReadFrom(bytes.NewReader(blob[4+n:])); err != nil {
		return fmt.Errorf("pcm: Load: hand-over state: %w", err)
	}
	p.seq = max(p.seq, meta.Seq)
	p.applied, p.calls, p.nextPoll, p.pollEvery = meta.Applied, meta.Calls, meta.NextPoll, meta.PollEvery
	p.callsAtSync, p.lastSyncCost = meta.CallsAtSync, time.Duration(meta.CostNanos)
	p.lastIter, p.haveIter = meta.LastIter, true
	return nil
}

// trimPrefix drops the "mpirun: " its launcher puts before its own messages.
func trimPrefix(err error) error {
	if s, ok := strings.CutPrefix(err.Error(), "mpirun: "); ok {
		return errors.New(s)
	}
	return err
}
