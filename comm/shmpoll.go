package comm

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// Dispatch of a ring's frames, by the connection's reader goroutine or by a waiting goroutine.
//
// Over a socket, a frame reaches a goroutine that waits for it through the connection's reader
// goroutine: the reader dispatches the frame (the mpi layer completes the request) and the
// waiter is woken, a hand-over between goroutines (and, with the rank's one P, between them on
// the same thread) on every message. Over a ring, a waiting goroutine that may poll (the rank has
// a core to itself, see DecideSpin) reads and dispatches its peer's frames itself (Poll): the
// message it waits for completes on its own stack. The reader goroutine sleeps meanwhile,
// without asking the writer for doorbells, and takes over when the last poller leaves. Whoever
// dispatches holds ringDispatch.mu, so the frames of a peer are still handled one at a time, in
// order.

// ringDispatch is the dispatch state of one ring: what readFrames keeps on its stack for a
// socket.
type ringDispatch struct {
	e      *TCPEndpoint
	peer   int
	link   *shmLink
	rd     *ringReader
	direct EagerReceiver

	mu sync.Mutex // held while dispatching; guards the fields below
	fr *frameReader
	h  Header
	// ended: the stream ended (a Bye, with flags, or err); closed: the reader goroutine is
	// done with the ring, which may be unmapped: pollers must not touch it any more.
	ended, closed bool
	flags         uint8
	err           error
	// pend: fr holds unread bytes (frames to dispatch without the ring), or the stream ended.
	pend atomic.Bool
}

// pending reports whether there is something to dispatch, for the reader goroutine's wait
// outside mu: it compares the shared counters (the private head is the dispatcher's). A
// hostile writer can make it wrong, and so stop the stream, but the dispatch itself checks
// the counters again.
func (d *ringDispatch) pending() bool {
	r := d.rd.r
	return d.pend.Load() || r.tail.Load() != r.head.Load() || r.gone.Load()
}

// run is the reader goroutine of the ring: it dispatches frames until the stream ends.
func (d *ringDispatch) run() (uint8, error) {
	defer func() {
		d.mu.Lock()
		d.closed = true
		d.mu.Unlock()
	}()
	for {
		d.rd.idleWait(d.pending)
		d.mu.Lock()
		ended := d.drain(nil)
		d.mu.Unlock()
		if ended {
			return d.flags, d.err
		}
	}
}

// drain dispatches the frames that have arrived (or begun to), until the ring is empty at a
// frame boundary, the stream ends, or stop (if not nil) is set. It reports whether the stream
// ended. The caller holds mu.
func (d *ringDispatch) drain(stop *atomic.Bool) bool {
	for !d.ended {
		if d.fr.buffered() == 0 && !d.rd.ready() {
			break
		}
		bye, flags, err := d.e.nextFrame(d.peer, d.fr, d.link, d.direct, &d.h)
		if bye || err != nil {
			d.ended, d.flags, d.err = true, flags, err
			break
		}
		if stop != nil && stop.Load() {
			break
		}
	}
	d.pend.Store(d.fr.buffered() > 0 || d.ended)
	return d.ended
}

// pollYield is how many polls of a ring a waiting goroutine makes before it yields its
// processor between polls: a poll costs tens of nanoseconds, a yield and a look at the clock
// hundreds (the clock alone ~70 ns on this project's VM), and a small frame that arrives
// during them waits; but a rank's other goroutines wait for the processor meanwhile.
const pollYield = 64

// Poll implements Poller. A goroutine about to wait for a frame from peer reads peer's ring
// itself while the rank may poll (see pollPolicy), for up to the policy's long window, and
// returns when done is set or the window is over. It returns at once for a peer that sends
// over a socket (or any peer, peer < 0), or when polling is off.
func (e *TCPEndpoint) Poll(peer int, done *atomic.Bool) {
	if peer < 0 || peer >= len(e.rings) {
		return
	}
	rr := e.rings[peer].Load()
	if rr == nil || rr.pollIn == nil || !rr.pollIn.gateOpen() {
		return
	}
	d := rr.d
	rr.pollers.Add(1)
	// We wait for a message: the waits in the middle of a frame (ours, or the other readers')
	// poll the long window, as for any waiting goroutine (WaitNotifier), instead of asking
	// the writer for doorbells after the short one.
	e.waiters.Add(1)
	defer e.waiters.Add(-1)
	// The window starts at the first yield: a look at the clock costs as much as dispatching
	// a small frame, and most waits end before it (the other readers' windows count from
	// their own last data meanwhile).
	var start int64
	for spins := 1; ; spins++ {
		if d.mu.TryLock() {
			if d.closed {
				d.mu.Unlock()
				break
			}
			// Our polls replace the writer's doorbells (a reader goroutine that went to sleep
			// before we came asked for them). Read first: a write would take the flag's cache
			// line from the writer, which reads it on every frame.
			if rr.r.rwait.Load() != 0 && rr.r.rwait.Swap(0) != 0 {
				// That reader goroutine sleeps for a doorbell that no writer rings now that the
				// flag is down, and handBack wakes it only if it sleeps for the pollers: wake it
				// here (it then sees us and sleeps for the pollers), or it sleeps on after we
				// leave, and a rank whose gate has closed meanwhile (no polling, no wake from
				// WaitNotifier) waits for its peer's frames forever.
				rr.wakeSleeper()
			}
			ended := d.drain(done)
			d.mu.Unlock()
			if ended {
				break
			}
		}
		if done.Load() {
			break
		}
		if spins >= pollYield {
			// Past the first polls the wait is a long one (a large message, a peer that
			// computes): yield at every poll, so that the rank's other goroutines -- the
			// writer of a large message among them -- run at once.
			if spins == pollYield {
				start = monoNow()
				e.waitAt.Store(start)
			} else if spins%16 == 0 && !rr.pollIn.pollShortFor(start, rr.pollIn.long) {
				break
			}
			runtime.Gosched()
		}
	}
	if rr.pollers.Add(-1) == 0 {
		// The reader goroutine takes over: frames that arrive from now on, and any left.
		rr.handBack()
	}
}
