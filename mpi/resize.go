package mpi

import (
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/mpios/mpios/internal/ctlauth"
	"github.com/mpios/mpios/internal/job"
	"github.com/mpios/mpios/internal/rewire"
)

// Resizing the world (package pcm runs the protocol, internal/supervisor hands out the new
// address table): this file builds a world of another size beside the old one, quiesces the
// old one, carries its unreceived messages over and revokes it. The new world is a new
// engine on new connections; its first free context is above every context the old worlds
// used, so a communicator of the new world never matches a stale message.

// ErrRevoked reports an operation on a communicator of a world that a resize replaced:
// re-create it from the new world (pcm.Process.World).
var ErrRevoked = errors.New("mpi: communicator revoked by a resize of the world")

// StaleCommError is the error of an operation on a communicator derived from a world that a
// resize replaced. It matches ErrRevoked.
type StaleCommError struct {
	Op string
}

func (e *StaleCommError) Error() string {
	return fmt.Sprintf("mpi: %s: communicator of a world replaced by a resize: re-create it from the new world", e.Op)
}

// Is makes a StaleCommError match ErrRevoked.
func (e *StaleCommError) Is(target error) bool { return target == ErrRevoked }

// resizeDialTimeout bounds the dials of a resize's new world: every member listened before
// it said hello, so a dial that is refused for this long means the member is gone (a joiner
// that died before the commit), and the resize is given up sooner than a job's start would.
const resizeDialTimeout = 3 * time.Second

// ResizeListener is a process's data-plane listener for the world a resize builds.
type ResizeListener struct {
	ln  net.Listener
	env job.Env
}

// ListenResize opens the listener of world's process in the world a resize builds. world
// must be the world Init returned (or the one the last resize made).
func ListenResize(world *Comm) (*ResizeListener, error) {
	session.mu.Lock()
	env, ok := session.env, world != nil && world == session.world && session.launched != nil
	session.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("mpi: resize: %w", rewire.ErrUnsupported)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(env.Bind, "0"))
	if err != nil {
		return nil, fmt.Errorf("mpi: resize: listen on %s: %w", env.Bind, err)
	}
	return &ResizeListener{ln: ln, env: env}, nil
}

// Addr is the listener's address, for the supervisor's table.
func (l *ResizeListener) Addr() string { return l.ln.Addr().String() }

// Close releases the listener of a resize that was given up before Build.
func (l *ResizeListener) Close() error { return l.ln.Close() }

// Connect connects this process as rank of the new world whose addresses are addrs. The
// new world is not the process's world until SwitchWorld; AgreeContexts must come first.
func (l *ResizeListener) Connect(rank int, addrs []string) (*Comm, error) {
	env := l.env
	env.Rank, env.Size = rank, len(addrs)
	session.mu.Lock()
	nc := session.nc
	var auth *ctlauth.JobChannel
	if session.holder != nil {
		auth = session.holder.auth
	}
	session.mu.Unlock()
	world, err := connectWorld(env, l.ln, addrs, nc, auth, resizeDialTimeout)
	if err != nil {
		l.ln.Close()
		return nil, fmt.Errorf("mpi: resize: %w", err)
	}
	return world, nil
}

// AgreeContexts raises the new world's first free context above every one the old world
// used, so that no communicator of the new world matches a stale message. It is collective
// over the new world (joiners agree in Init).
func AgreeContexts(world, old *Comm) error {
	if err := agreeFirstContext(world, old); err != nil {
		return fmt.Errorf("mpi: resize: agree on contexts: %w", err)
	}
	return nil
}

// agreeFirstContext raises world's first free context above every one old's engine used.
func agreeFirstContext(world, old *Comm) error {
	mine := []uint32{2}
	if old != nil {
		old.e.mu.Lock()
		mine[0] = old.e.nextCtx
		old.e.mu.Unlock()
	}
	agreed := make([]uint32, 1)
	if err := Allreduce(world, mine, agreed, Max); err != nil {
		return err
	}
	world.e.mu.Lock()
	world.e.nextCtx = max(world.e.nextCtx, agreed[0])
	world.e.mu.Unlock()
	return nil
}

// Break fails every pending and future operation on a new world with err: a member ended
// before the commit. It may be called from any goroutine.
func Break(world *Comm, err error) {
	if world != nil {
		world.e.breakJob(err)
	}
}

// Abandon closes a new world whose resize was aborted.
func Abandon(world *Comm) {
	if world == nil {
		return
	}
	world.e.close()
	world.e.ep.Close()
}

// Quiesce makes sure every message sent on old before this boundary has arrived here (each
// process sends every other one a marker on a fresh context and waits for theirs: a
// connection delivers in order), and says whether a message would be lost by the resize:
// one from a rank that leaves to one that stays, or any message to a rank that leaves.
// newRank[r] is old rank r's rank in the new world, -1 if it leaves. It is collective over
// old.
func Quiesce(old *Comm, newRank []int) error {
	if err := old.valid("resize"); err != nil {
		return err
	}
	if len(newRank) != old.Size() {
		return fmt.Errorf("mpi: resize: %d new ranks for a world of %d", len(newRank), old.Size())
	}
	e := old.e
	e.mu.Lock()
	limit := e.unexpMax
	e.unexpMax = math.MaxInt64 // nothing may hold the markers back
	e.space.Broadcast()
	e.mu.Unlock()
	defer func() {
		// An aborted resize leaves the old world in use, with its flow control.
		e.mu.Lock()
		e.unexpMax = limit
		e.mu.Unlock()
	}()
	fence, err := old.Dup()
	if err != nil {
		return fmt.Errorf("mpi: resize: %w", err)
	}
	defer fence.Free()
	var reqs []*Request
	for r := range old.Size() {
		if r != old.Rank() {
			req, err := Isend(fence, []byte{}, r, 0)
			if err != nil {
				return fmt.Errorf("mpi: resize: %w", err)
			}
			reqs = append(reqs, req)
		}
	}
	for r := range old.Size() {
		if r != old.Rank() {
			if _, err := Recv(fence, []byte{}, r, 0); err != nil {
				return fmt.Errorf("mpi: resize: %w", err)
			}
		}
	}
	if err := WaitAll(reqs...); err != nil {
		return fmt.Errorf("mpi: resize: %w", err)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	leaving := newRank[old.Rank()] < 0
	for _, m := range e.queues(old.ctx).unexp {
		if leaving || newRank[m.peer] < 0 {
			return fmt.Errorf("mpi: resize: an unreceived message from rank %d to rank %d would be lost (receive every message before the iteration boundary)", m.peer, old.Rank())
		}
	}
	return nil
}

// SwitchWorld ends old after a committed resize: old's unreceived messages move into next
// (renumbered by newRank), every communicator of old fails with ErrRevoked from now on, and
// next becomes the process's world (mpi.Finalize ends it). With next nil, the process left
// the world. Call it after Quiesce and the commit.
func SwitchWorld(old, next *Comm, newRank []int) error {
	e := old.e
	e.mu.Lock()
	var carried []*message
	if next != nil {
		carried = e.queues(old.ctx).unexp
	}
	failed := e.takeAllPending()
	e.revoked.Store(true)
	e.closed = true
	e.mu.Unlock()
	for _, r := range failed {
		r.complete(r.status, &StaleCommError{Op: "resize"})
	}
	if next != nil {
		n := next.e
		n.mu.Lock()
		q := n.queues(next.ctx)
		moved := make([]*message, 0, len(carried)+len(q.unexp))
		for _, m := range carried {
			m.peer = newRank[m.peer]
			n.unexpSize[m.peer] += int64(len(m.data))
			moved = append(moved, m)
		}
		// Messages of the old world were sent before anything of the new one.
		q.unexp = append(moved, q.unexp...)
		n.mu.Unlock()
	}
	cerr := e.ep.Close()
	session.mu.Lock()
	defer session.mu.Unlock()
	if session.world == old && next != nil {
		session.world = next
		session.env.Rank, session.env.Size = next.Rank(), next.Size()
		if session.holder != nil {
			session.holder.set(next.e)
		}
		session.beats.setRank(next.Rank())
		if l := session.launched; l != nil {
			l.Env.Rank, l.Env.Size = next.Rank(), next.Size()
			l.Member = memberOf(next)
		}
	}
	return cerr
}

// joinAtResize is Init in a process the launcher started to join a running job at resize
// seq (a joiner): it says hello to the launcher with the other members of the new world and
// connects to them once the launcher sends the table.
func joinAtResize(env job.Env, seqText string) (joined, error) {
	seq, err := strconv.ParseUint(seqText, 10, 64)
	if err != nil || seq == 0 {
		return joined{}, fmt.Errorf("%s=%q: want a request number", job.EnvJoin, seqText)
	}
	ln, nc, holder, fail, err := listenAndConnect(env)
	if err != nil {
		return joined{}, err
	}
	table, err := rewire.AskResizeTable(nc, holder.auth, env.JobID, job.ResizeHello{Seq: seq, Rank: env.Rank, OldRank: -1, Addr: ln.Addr().String(), PID: os.Getpid()})
	if err != nil {
		return fail(err)
	}
	if len(table) != env.Size {
		return fail(fmt.Errorf("resize: table has %d addresses for %d ranks", len(table), env.Size))
	}
	world, err := connectWorld(env, ln, table, nc, holder.auth, resizeDialTimeout)
	if err != nil {
		return fail(err)
	}
	holder.set(world.e)
	if err := AgreeContexts(world, nil); err != nil {
		return fail(err)
	}
	return joined{world: world, nc: nc, holder: holder, joinedAt: seq, auth: holder.auth}, nil
}

// isRevoked reports whether a resize replaced this engine's world.
func (e *engine) isRevoked() bool { return e.revoked.Load() }
