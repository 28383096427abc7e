// Package rewire carries a rank from one process to another during a live migration: the
// hand-over connection between the old process (the predecessor) and the new one (the
// successor), and the seam through which package pcm, which runs the migration protocol,
// reaches the parts of package mpi it must change (the address table, the matching engine).
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
	"time"
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

var (
	mu        sync.Mutex
	memberOf  func(world any) (Member, error)
	inherited *Inheritance
)

// Install sets the function that finds a world's Member; package mpi calls it at init.
func Install(f func(world any) (Member, error)) {
	mu.Lock()
	defer mu.Unlock()
	memberOf = f
}

// MemberOf returns world's Member (world is an *mpi.Comm).
func MemberOf(world any) (Member, error) {
	mu.Lock()
	f := memberOf
	mu.Unlock()
	if f == nil {
		return nil, ErrUnsupported
	}
	return f(world)
}

// Inheritance is what a successor process received from its predecessor before its world
// was created: the pcm blob, and the connection to acknowledge through.
type Inheritance struct {
	Rank  int
	State []byte
	Since time.Time // when the hand-over began
	Bytes int64     // state bytes received
}

// SetInherited records the successor's inheritance (mpi.Init does, in a successor).
func SetInherited(in *Inheritance) {
	mu.Lock()
	defer mu.Unlock()
	inherited = in
}

// TakeInherited returns the inheritance once, or nil in a process that is not a successor.
func TakeInherited() *Inheritance {
	mu.Lock()
	defer mu.Unlock()
	in := inherited
	inherited = nil
	return in
}

// PeekInherited reports whether this process is a successor, without taking the state.
func PeekInherited() bool {
	mu.Lock()
	defer mu.Unlock()
	return inherited != nil
}

// Spec is where a successor finds its predecessor: the value of job.EnvMigrate.
type Spec struct {
	Addr  string // host:port of the predecessor's hand-over listener
	Token []byte // one-time token of this hand-over
}

// String encodes s as "host:port/token-hex".
func (s Spec) String() string { return fmt.Sprintf("%s/%x", s.Addr, s.Token) }
