// Package rewire carries a rank from one process to another during a live migration: the
// hand-over connection between the old process (the predecessor) and the new one (the
// successor), and the seam through which package pcm, which runs the migration protocol
// (internal/rankreconf), reaches what it needs of package mpi: Launched, which mpi.Launched
// returns for a world that mpi.Init made, carries the job, the process's control-plane
// connection, the world's Member (the address table, the matching engine) and, in a
// successor, its Inheritance. Nothing here is process-global.
//
// The hand-over is a direct, authenticated TCP connection between the two processes; bulk
// state never travels over NATS. Its exchange, in order:
//
//	successor   -> predecessor  hello: rank, HMAC(job secret, nonce, rank, token), data address
//	predecessor -> successor    state: the pcm blob (registered state and pcm's schedule)
//	successor   -> predecessor  ack (or the reason it cannot take the state)
//	   ... the ranks agree that the migration happens (or not) ...
//	predecessor -> successor    final: the address table and the engine snapshot, or abort
//	successor   -> predecessor  ack
//
// Before the final message nothing is committed: the predecessor can still abort and go on
// as if nothing had happened.
package rewire

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mpios/mpios/internal/ctlauth"
	"github.com/mpios/mpios/internal/job"
)

// Message is an eager message that arrived at the predecessor and was not received yet; it
// moves to the successor's matching engine.
type Message struct {
	Ctx  uint32 `msgpack:"ctx"`
	Peer int    `msgpack:"peer"`
	Tag  int32  `msgpack:"tag"`
	Elem uint8  `msgpack:"elem"`
	Data []byte `msgpack:"data"`
}

// Snapshot is what a predecessor's matching engine holds at the hand-over.
type Snapshot struct {
	NextCtx    uint32    `msgpack:"next_ctx"`   // next free communicator context
	Unexpected []Message `msgpack:"unexpected"` // in arrival order
}

// Final is the predecessor's last message: the world's addresses after every migration of
// this boundary, and the engine snapshot. A non-empty Abort cancels the migration.
type Final struct {
	Addrs []string `msgpack:"addrs"`
	Snap  Snapshot `msgpack:"snap"`
	Abort string   `msgpack:"abort,omitempty"`
}

// Member is a world communicator's side of a migration, implemented by package mpi.
type Member interface {
	// Addrs returns the data-plane address of every rank.
	Addrs() []string
	// Redirect makes rank's messages go to its successor at addr from now on.
	Redirect(rank int, addr string) error
	// Retire hands this process's rank over: it flushes and closes the data plane and
	// returns what the matching engine held. The world is unusable afterwards, except for
	// mpi.Finalize, which then only releases resources.
	Retire(timeout time.Duration) (Snapshot, error)
}

// ErrUnsupported reports a world that cannot migrate ranks (goroutine worlds, singletons).
var ErrUnsupported = errors.New("rewire: this world cannot migrate ranks (it needs processes started by mpirun over TCP)")

// Inheritance is what a successor process received from its predecessor before its world
// was created: the pcm blob.
type Inheritance struct {
	Rank  int
	State []byte
	Since time.Time // when the hand-over began
	Bytes int64     // state bytes received
}

// Launched is what package pcm needs of a world communicator that mpi.Init made in a
// process started by mpirun (mpi.Launched returns it): the job, the process's one
// connection to the control plane, the world's side of a migration and, in a successor,
// the inheritance.
type Launched struct {
	Env job.Env
	// Conn is the process's control-plane connection. mpi owns it: mpi.Finalize closes it.
	Conn *nats.Conn
	// Member is nil when the world cannot migrate ranks.
	Member Member
	// Joined is the resize request a joiner joined the job at (job.EnvJoin); 0 for others.
	Joined uint64
	// Auth authenticates the process's messages on the job's key-protected subjects (the
	// reconfiguration log, migration requests and reports); mpi sets it.
	Auth *ctlauth.JobChannel

	mu        sync.Mutex
	inherited *Inheritance
	iteration atomic.Int64 // the last iteration boundary reached, -1 before the first
}

// NewLaunched describes a launched world; inherited is nil unless the process is a successor.
func NewLaunched(env job.Env, conn *nats.Conn, member Member, inherited *Inheritance) *Launched {
	l := &Launched{Env: env, Conn: conn, Member: member, inherited: inherited}
	l.iteration.Store(-1)
	return l
}

// SetIteration records the iteration boundary the rank reached (pcm does, at every
// Reconfigure): the liveness beats carry it to mpirun, which counts what a recovery loses.
func (l *Launched) SetIteration(iter int64) { l.iteration.Store(iter) }

// Iteration returns the last iteration boundary recorded, -1 if none.
func (l *Launched) Iteration() int64 { return l.iteration.Load() }

// TakeInherited returns the inheritance once, or nil in a process that is not a successor.
func (l *Launched) TakeInherited() *Inheritance {
	l.mu.Lock()
	defer l.mu.Unlock()
	in := l.inherited
	l.inherited = nil
	return in
}

// Spec is where a successor finds its predecessor: the value of job.EnvMigrate.
type Spec struct {
	Addr  string // host:port of the predecessor's hand-over listener
	Token []byte // one-time token of this hand-over
}

// String encodes s as "host:port/token-hex".
func (s Spec) String() string { return fmt.Sprintf("%s/%x", s.Addr, s.Token) }

// Seal encodes v for publication on subject under auth's job key, or in clear when auth is
// nil (a world mpi did not launch, whose launcher holds no key).
func Seal(auth *ctlauth.JobChannel, subject string, v any) ([]byte, error) {
	if auth == nil {
		return job.Encode(v)
	}
	return auth.Encode(subject, v, time.Now())
}

// Unseal verifies data received on subject under auth's job key (when auth is not nil) and
// decodes it into v: a forged or replayed message of the launcher must not be acted on.
func Unseal(auth *ctlauth.JobChannel, subject string, data []byte, v any) error {
	if auth == nil {
		return job.Decode(data, v)
	}
	_, err := auth.Decode(subject, data, v, time.Now())
	return err
}
