package mpi

import (
	"fmt"
	"math"
	"os"
	"slices"
	"time"

	"github.com/mpios/mpios/comm"
	"github.com/mpios/mpios/internal/job"
	"github.com/mpios/mpios/internal/rankreconf"
	"github.com/mpios/mpios/internal/rewire"
)

// Live migration (package pcm runs the protocol; see internal/rewire): this file is the
// matching engine's part of it. A process whose rank moves hands its unreceived messages
// and its context counter to the successor; every other process redirects the rank.

// rewirable is an endpoint whose peers can move (the TCP transport).
type rewirable interface {
	Addrs() []string
	Redirect(peer int, addr string) error
	Retire(timeout time.Duration) error
}

// memberOf returns the world's side of a migration, or nil if its transport cannot move
// ranks.
func memberOf(world *Comm) rewire.Member {
	if rw, ok := world.e.ep.(rewirable); ok && world.ctx == 0 {
		return member{e: world.e, rw: rw}
	}
	return nil
}

// Launched returns what package pcm needs of world when Init made it in a process started
// by mpirun: the job, the process's control-plane connection, the world's side of a
// migration and, in a process that took over a migrated rank, what it inherited. It returns
// nil for any other communicator (goroutine worlds, singletons, derived communicators).
// Applications do not need it.
func Launched(world *Comm) *rewire.Launched {
	session.mu.Lock()
	defer session.mu.Unlock()
	if world == nil || world != session.world {
		return nil
	}
	return session.launched
}

type member struct {
	e  *engine
	rw rewirable
}

func (m member) Addrs() []string { return m.rw.Addrs() }

func (m member) Redirect(rank int, addr string) error { return m.rw.Redirect(rank, addr) }

// Retire flushes the data plane (every frame peers sent before redirecting is queued here)
// and takes the unreceived messages out of the engine.
func (m member) Retire(timeout time.Duration) (rewire.Snapshot, error) {
	e := m.e
	e.mu.Lock()
	if n := len(e.sends) + len(e.recvs); n > 0 {
		e.mu.Unlock()
		return rewire.Snapshot{}, fmt.Errorf("mpi: retire: %w: %d operations", ErrPending, n)
	}
	// Nothing may block the flush: the successor gets whatever arrives.
	e.unexpMax = math.MaxInt64
	e.space.Broadcast()
	e.mu.Unlock()
	err := m.rw.Retire(timeout)
	e.mu.Lock()
	defer e.mu.Unlock()
	snap := rewire.Snapshot{NextCtx: e.nextCtx}
	ctxs := make([]uint32, 0, len(e.ctxs))
	for ctx := range e.ctxs {
		ctxs = append(ctxs, ctx)
	}
	slices.Sort(ctxs)
	for _, ctx := range ctxs {
		q := e.ctxs[ctx]
		if len(q.posted) > 0 && err == nil {
			err = fmt.Errorf("mpi: retire: %w: %d receives posted", ErrPending, len(q.posted))
		}
		for _, msg := range q.unexp {
			if msg.rts && err == nil {
				err = fmt.Errorf("mpi: retire: a large message from rank %d is still being sent", msg.peer)
			}
			snap.Unexpected = append(snap.Unexpected, rewire.Message{Ctx: ctx, Peer: msg.peer, Tag: msg.tag, Elem: msg.elem, Data: msg.data})
		}
	}
	e.closed, e.retired = true, true
	if err != nil {
		return snap, err
	}
	return snap, nil
}

// successorLink is a rewire.Successor that waits successorWait for the final word.
type successorLink struct{ s *rewire.Successor }

func (l successorLink) ReceiveState() ([]byte, error)       { return l.s.ReceiveState() }
func (l successorLink) Ack(err error) error                 { return l.s.Ack(err) }
func (l successorLink) ReceiveFinal() (rewire.Final, error) { return l.s.ReceiveFinal(successorWait) }

// inject puts a predecessor's unreceived messages into a fresh engine, before it starts.
func (e *engine) inject(s rewire.Snapshot) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.nextCtx = max(e.nextCtx, s.NextCtx)
	for _, msg := range s.Unexpected {
		if msg.Peer < 0 || msg.Peer >= e.size || msg.Peer == e.rank {
			return fmt.Errorf("mpi: inherited message from rank %d outside the world", msg.Peer)
		}
		q := e.queues(msg.Ctx)
		q.unexp = append(q.unexp, &message{peer: msg.Peer, tag: msg.Tag, elem: msg.Elem, total: uint64(len(msg.Data)), data: msg.Data})
		e.unexpSize[msg.Peer] += int64(len(msg.Data))
	}
	return nil
}

// successorWait bounds how long a successor waits for its predecessor's final word: the
// other migrations of the same boundary may be moving large states meanwhile.
const successorWait = 15 * time.Minute

// joinAsSuccessor takes over rank env.Rank from the predecessor named by spec: it receives
// the rank's state and, once every rank has agreed, the address table and the messages the
// predecessor had not received, then joins the data plane in its place.
func joinAsSuccessor(env job.Env, spec string) (joined, error) {
	began := time.Now()
	hs, err := rewire.ParseSpec(spec)
	if err != nil {
		return joined{}, err
	}
	ln, nc, holder, fail, err := listenAndConnect(env)
	if err != nil {
		return joined{}, err
	}
	succ, err := rewire.Dial(hs, env.Secret, env.Rank, ln.Addr().String(), 30*time.Second)
	if err != nil {
		return fail(err)
	}
	defer succ.Close()
	var world *Comm
	t := rankreconf.TakeOver{
		Rank: env.Rank, Size: env.Size, Self: ln.Addr().String(), Link: successorLink{succ}, Log: os.Stderr,
		Join: func(addrs []string, snap rewire.Snapshot) error {
			ep, err := comm.NewTCP(comm.TCPConfig{Rank: env.Rank, Size: env.Size, Addrs: addrs, Listener: ln, Secret: env.Secret})
			if err != nil {
				return err
			}
			e := newEngine(ep)
			if err := e.inject(snap); err != nil {
				return err
			}
			e.onPeerLost = lostReporter(env, nc, holder.auth)
			if world, err = attach(e); err != nil {
				return err
			}
			holder.set(world.e)
			return nil
		},
	}
	blob, err := t.Run()
	if err != nil {
		return fail(err)
	}
	return joined{world: world, nc: nc, inherited: &rewire.Inheritance{Rank: env.Rank, State: blob, Since: began, Bytes: int64(len(blob))}, holder: holder, auth: holder.auth}, nil
}
