package mpi

import (
	"sync/atomic"
	"time"
)

// Interceptor observes every mpi call of the process, as MPI's PMPI profiling layer does: the
// application does not change, a profiler installs itself with SetInterceptor. Calls made inside
// mpi (the point-to-point messages of a collective) are not reported separately.
type Interceptor interface {
	// Observe is called when a call returns. It runs on the caller's goroutine, on the hot
	// path: it must be quick and safe for concurrent use.
	Observe(ev CallEvent)
}

// CallEvent describes one completed mpi call.
type CallEvent struct {
	Op    string // "Send", "Recv", "Allreduce", ...
	Comm  *Comm
	Peer  int // comm rank of the peer of a point-to-point call, or -1
	Bytes int // bytes this rank sent (sends, collectives) or received (receives)
	// RecvPeer and RecvBytes describe the receive half of a Sendrecv (RecvPeer is -1 for
	// every other call).
	RecvPeer, RecvBytes int
	Start               time.Time
	Dur                 time.Duration
	Err                 error
}

var interceptor atomic.Pointer[Interceptor]

// SetInterceptor installs i for the whole process (nil removes it) and returns the previous one.
func SetInterceptor(i Interceptor) Interceptor {
	var prev *Interceptor
	if i == nil {
		prev = interceptor.Swap(nil)
	} else {
		prev = interceptor.Swap(&i)
	}
	if prev == nil {
		return nil
	}
	return *prev
}

// trace is an in-flight observed call.
type trace struct {
	i     Interceptor
	op    string
	start time.Time
}

// observe starts tracing a call if an interceptor is installed; without one it costs an
// atomic load.
func observe(op string) *trace {
	p := interceptor.Load()
	if p == nil {
		return nil
	}
	return &trace{i: *p, op: op, start: time.Now()}
}

func (t *trace) done(c *Comm, peer, bytes int, err error) {
	t.i.Observe(CallEvent{Op: t.op, Comm: c, Peer: peer, Bytes: bytes, RecvPeer: -1, Start: t.start, Dur: time.Since(t.start), Err: err})
}
