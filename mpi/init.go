package mpi

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mpios/mpios/comm"
	"github.com/mpios/mpios/internal/ctlauth"
	"github.com/mpios/mpios/internal/ctlplane"
	"github.com/mpios/mpios/internal/job"
	"github.com/mpios/mpios/internal/natsconn"
	"github.com/mpios/mpios/internal/rewire"
)

// ErrAborted reports that the job is being stopped (mpi.Abort on some rank, Ctrl-C or a
// timeout in mpirun).
var ErrAborted = errors.New("mpi: job aborted")

// session is the process-wide state that Init creates and Finalize ends.
var session struct {
	mu        sync.Mutex
	world     *Comm
	finalized bool
	nc        *nats.Conn
	env       job.Env
	launched  *rewire.Launched // nil unless launched by mpirun
	holder    *engineHolder    // delivers job events to the world's engine
	beats     *liveness        // nil unless launched by mpirun
}

// joined is a launched process's world, its control-plane connection and, in a successor,
// what it inherited.
type joined struct {
	world     *Comm
	nc        *nats.Conn
	inherited *rewire.Inheritance
	holder    *engineHolder
	joinedAt  uint64              // a joiner: the resize it joined at
	auth      *ctlauth.JobChannel // the rank's job-key channel on nc
}

// Init joins the job that mpirun started and returns its world communicator. A process that
// was not started by mpirun gets a world of size 1 (a singleton), so a program runs unchanged
// on one rank. Init waits (bounded, see MPIOS_RENDEZVOUS_TIMEOUT) until every rank has started.
func Init() (*Comm, error) {
	session.mu.Lock()
	defer session.mu.Unlock()
	if session.finalized {
		return nil, ErrFinalized
	}
	if session.world != nil {
		return nil, ErrInitialized
	}
	env, err := job.FromEnviron(nil)
	if errors.Is(err, job.ErrNotLaunched) {
		world, err := Attach(comm.NewInProcNetwork(1).Endpoint(0))
		if err != nil {
			return nil, err
		}
		session.world = world
		return world, nil
	}
	if err != nil {
		return nil, fmt.Errorf("mpi: Init: %w", err)
	}
	join := joinJob
	if spec := os.Getenv(job.EnvMigrate); spec != "" {
		join = func(env job.Env) (joined, error) { return joinAsSuccessor(env, spec) }
	}
	if seq := os.Getenv(job.EnvJoin); seq != "" {
		join = func(env job.Env) (joined, error) { return joinAtResize(env, seq) }
	}
	j, err := join(env)
	if err != nil {
		return nil, fmt.Errorf("mpi: Init: rank %d of job %s: %w", env.Rank, env.JobID, err)
	}
	session.world, session.nc, session.env, session.holder = j.world, j.nc, env, j.holder
	session.launched = rewire.NewLaunched(env, j.nc, memberOf(j.world), j.inherited)
	session.launched.Joined = j.joinedAt
	session.launched.Auth = j.auth
	session.beats = startLiveness(env, j.nc, session.launched)
	return j.world, nil
}

// joinJob listens for peers, tells the launcher where, and waits for everybody's address.
func joinJob(env job.Env) (joined, error) {
	ln, nc, holder, fail, err := listenAndConnect(env)
	if err != nil {
		return joined{}, err
	}
	host, _ := os.Hostname()
	hello, err := holder.auth.Encode(job.HelloSubject(env.JobID), job.Hello{Rank: env.Rank, Addr: ln.Addr().String(), PID: os.Getpid(), Host: host}, time.Now())
	if err != nil {
		return fail(err)
	}
	// Only the launcher's table, under the job key, counts: anyone on the NATS server can
	// answer first.
	var table job.Table
	err = ctlplane.Request(nc, job.HelloSubject(env.JobID), hello, env.Timeout, func(reply *nats.Msg) error {
		var t job.Table
		if _, err := holder.auth.Decode(reply.Subject, reply.Data, &t, time.Now()); err != nil {
			return err
		}
		table = t
		return nil
	})
	if err != nil {
		return fail(fmt.Errorf("rendezvous: no address table from the launcher within %v: %w", env.Timeout, err))
	}
	if table.Error != "" {
		return fail(fmt.Errorf("rendezvous: launcher refused: %s", table.Error))
	}
	if len(table.Addrs) != env.Size {
		return fail(fmt.Errorf("rendezvous: table has %d addresses for %d ranks", len(table.Addrs), env.Size))
	}
	world, err := connectWorld(env, ln, table.Addrs, nc, holder.auth, 0)
	if err != nil {
		return fail(err)
	}
	holder.set(world.e)
	return joined{world: world, nc: nc, holder: holder, auth: holder.auth}, nil
}

// connectWorld starts rank env.Rank's data plane over ln with the address table addrs (of
// env.Size ranks); a lost peer is reported on nc, if not nil, authenticated by auth.
// dialTimeout 0 is comm's default.
func connectWorld(env job.Env, ln net.Listener, addrs []string, nc *nats.Conn, auth *ctlauth.JobChannel, dialTimeout time.Duration) (*Comm, error) {
	ep, err := comm.NewTCP(comm.TCPConfig{Rank: env.Rank, Size: env.Size, Addrs: addrs, Listener: ln, Secret: env.Secret, DialTimeout: dialTimeout})
	if err != nil {
		return nil, err
	}
	e := newEngine(ep)
	if nc != nil {
		e.onPeerLost = lostReporter(env, nc, auth)
	}
	world, err := attach(e)
	if err != nil {
		ep.Close()
		return nil, err
	}
	return world, nil
}

// listenAndConnect opens the rank's data-plane listener and its control-plane connection;
// fail releases both and returns err.
func listenAndConnect(env job.Env) (net.Listener, *nats.Conn, *engineHolder, func(error) (joined, error), error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(env.Bind, "0"))
	if err != nil {
		return nil, nil, nil, nil, fmt.Errorf("listen on %s: %w", env.Bind, err)
	}
	nc, holder, err := connectControl(env)
	if err != nil {
		ln.Close()
		return nil, nil, nil, nil, err
	}
	fail := func(err error) (joined, error) {
		ln.Close()
		nc.Close()
		return joined{}, err
	}
	return ln, nc, holder, fail, nil
}

// engineHolder delivers job events to the engine once it exists, and the first event that
// came earlier at that moment.
type engineHolder struct {
	mu    sync.Mutex
	eng   *engine
	early error

	// auth authenticates the rank's job-key messages (events in, lost-peer reports out).
	auth *ctlauth.JobChannel
}

func (h *engineHolder) deliver(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.eng != nil {
		h.eng.breakJob(err)
	} else if h.early == nil {
		h.early = err
	}
}

func (h *engineHolder) set(e *engine) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.eng = e
	if h.early != nil {
		e.breakJob(h.early)
	}
}

// connectControl connects to the job's control plane and subscribes to its events before
// anything else, so that no failure report can be missed.
func connectControl(env job.Env) (*nats.Conn, *engineHolder, error) {
	// Credentials and TLS files beside the URL, as the launcher passes them (natsconn.Environ).
	auth, err := natsconn.FromEnviron(nil).AuthOptions()
	if err != nil {
		return nil, nil, fmt.Errorf("connect to control plane: %w", err)
	}
	// The data plane does not need NATS: through an outage, keep trying quietly.
	nc, err := nats.Connect(env.NATSURL, append(append(auth, ctlplane.Options(nil, nil)...),
		nats.Name(fmt.Sprintf("mpios %s rank %d", env.JobID, env.Rank)),
		nats.Timeout(10*time.Second),
	)...)
	if err != nil {
		return nil, nil, fmt.Errorf("connect to control plane: %w", err)
	}
	holder := &engineHolder{}
	if holder.auth, err = rankChannel(env); err != nil {
		nc.Close()
		return nil, nil, err
	}
	_, err = nc.Subscribe(job.EventSubject(env.JobID), func(m *nats.Msg) {
		var ev job.Event
		// Only mpirun's own events count: a forged or replayed one must not end the job.
		if _, err := holder.auth.Decode(m.Subject, m.Data, &ev, time.Now()); err != nil {
			fmt.Fprintf(os.Stderr, "mpi: rank %d: ignoring job event: %v\n", env.Rank, err)
			return
		}
		switch ev.Kind {
		case job.EventRankFailed:
			holder.deliver(&ProcFailedError{Rank: ev.Rank, Reason: ev.Reason})
		case job.EventAbort:
			holder.deliver(fmt.Errorf("%w: %s", ErrAborted, ev.Reason))
		}
	})
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("subscribe to job events: %w", err)
	}
	return nc, holder, nil
}

// lostReporter tells the launcher about a peer lost without a goodbye.
func lostReporter(env job.Env, nc *nats.Conn, auth *ctlauth.JobChannel) func(peer int, err error) {
	return func(peer int, err error) {
		data, eerr := auth.Encode(job.LostSubject(env.JobID), job.Lost{Observer: env.Rank, Rank: peer, Reason: err.Error()}, time.Now())
		if eerr == nil && nc.Publish(job.LostSubject(env.JobID), data) == nil {
			nc.FlushTimeout(time.Second)
		}
	}
}

// Attach starts a matching engine on an endpoint and returns the world communicator over it.
// Init uses it; tests and embedders use it to run ranks as goroutines over
// comm.NewInProcNetwork. Detach ends it.
func Attach(ep comm.Endpoint) (*Comm, error) {
	return attach(newEngine(ep))
}

func attach(e *engine) (*Comm, error) {
	ep := e.ep
	if err := ep.Start(e); err != nil {
		return nil, fmt.Errorf("mpi: attach: %w", err)
	}
	group := make([]int, ep.Size())
	for i := range group {
		group[i] = i
	}
	return newComm(e, 0, group), nil
}

// Detach waits for every rank of world (a Barrier), then closes its endpoint. It is the
// Finalize of a world made by Attach.
func Detach(world *Comm) error {
	if world != nil && world.e != nil && !world.freed.Load() && (world.e.isRetired() || world.e.isRevoked()) {
		// The rank lives on in a successor, or left at a resize: nothing to wait for, the
		// endpoint is closed. (Before valid, which fails on a revoked world.)
		return nil
	}
	if err := world.valid("Detach"); err != nil {
		return err
	}
	if n := world.e.pending(); n > 0 {
		return fmt.Errorf("mpi: Finalize: %w: %d operations", ErrPending, n)
	}
	berr := world.Barrier()
	world.e.close()
	cerr := world.e.ep.Close()
	return errors.Join(berr, cerr)
}

// Finalize waits until every rank has called it, then closes all connections. No mpi call may
// follow. Nonblocking operations must be complete.
func Finalize() error {
	session.mu.Lock()
	defer session.mu.Unlock()
	if session.finalized {
		return ErrFinalized
	}
	if session.world == nil {
		return ErrNotInitialized
	}
	err := Detach(session.world)
	session.beats.stop()
	if session.nc != nil {
		session.nc.Close()
	}
	session.finalized = true
	return err
}

// Abort ends the whole job with exit code code: the launcher is told, stops every rank and
// exits with code. It does not return.
func Abort(c *Comm, code int) {
	session.mu.Lock()
	nc, env := session.nc, session.env
	session.mu.Unlock()
	if nc != nil {
		rank := env.Rank
		auth, err := rankChannel(env)
		if err == nil {
			var data []byte
			data, err = auth.Encode(job.AbortSubject(env.JobID), job.Abort{Rank: rank, Code: code, Message: fmt.Sprintf("rank %d called Abort(%d)", rank, code)}, time.Now())
			if err == nil {
				nc.Publish(job.AbortSubject(env.JobID), data)
				nc.FlushTimeout(2 * time.Second)
			}
		}
	}
	os.Exit(code)
}

// rankChannel returns a job-key channel speaking as this process's rank and incarnation.
func rankChannel(env job.Env) (*ctlauth.JobChannel, error) {
	inc, _ := strconv.Atoi(os.Getenv(job.EnvIncarnation)) // 0 if absent: the first process
	ch, err := ctlauth.NewJobChannel(env.JobID, env.Secret, ctlauth.Sender{Role: ctlauth.RoleRank, Rank: env.Rank, Incarnation: max(inc, 0)}, time.Now())
	if err != nil {
		return nil, fmt.Errorf("job key: %w", err)
	}
	return ch, nil
}
