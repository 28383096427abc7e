package comm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// A shared-memory ring carries one ordered pair's frames between two processes of a node: the
// dialing rank writes, the accepting rank reads, exactly like the byte stream of a TCP
// connection (the frames are encoded the same way, so the reader's validation is the same).
// It is a single-producer single-consumer byte ring: the writer owns tail, the reader owns
// head, each in its own cache lines of the mapping, and each side keeps the authoritative copy
// of its own counter in its private memory. What it reads of the other side's counter is only
// trusted after a bounds check, so a corrupt or hostile writer can stop the stream (the reader
// reports a broken connection) but never make the reader index outside the mapping.

// Layout of a ring's mapping. Counters sit 128 bytes apart: adjacent-line prefetching would
// otherwise make the two sides' counters share a line.
const (
	ringMagicOff  = 0   // [8]byte ringMagic
	ringSizeOff   = 8   // uint64: bytes of data
	ringMACOff    = 16  // [32]byte: HMAC binding the segment to the handshake that created it
	ringTailOff   = 128 // uint64: bytes written (writer)
	ringHeadOff   = 256 // uint64: bytes read (reader)
	ringRWaitOff  = 384 // uint32: 1 while the reader sleeps (wants a doorbell)
	ringWWaitOff  = 512 // uint32: 1 while the writer sleeps (wants a doorbell)
	ringAckedOff  = 640 // uint64: single-copy chunks the reader has taken
	ringDataOff   = 4096
	ringDataBytes = 256 << 10 // a power of two
	ringMapBytes  = ringDataOff + ringDataBytes
)

var ringMagic = [8]byte{'M', 'P', 'I', 'O', 'S', 'R', 'G', '1'}

// ErrRingCorrupt reports counters in a shared-memory ring that no correct peer writes.
var ErrRingCorrupt = errors.New("comm: shared-memory ring corrupt")

// errRingGone ends a ring wait: the peer process is gone or the local side was closed.
var errRingGone = errors.New("ring peer gone")

// A side that has nothing to do flags its wait in the ring (rwait, wwait) and sleeps; the
// other side, seeing the flag, wakes it. Two ways (EnvShmWake, chosen by the reader when the
// ring is set up):
//
//   - doorbell (the default): the sleeper parks in Go's scheduler on its bell, and the other
//     side rings it with a byte on the pair's TCP connection, which wakes the sleeper through
//     the network poller like any socket. A dead peer rings it too: its socket closes.
//   - futex: the sleeper sleeps in a FUTEX_WAIT system call on its flag, and the other side
//     wakes it with FUTEX_WAKE. The wake is cheaper than a socket write, but ranks run with one
//     P (GOMAXPROCS = cores / ranks), and a goroutine blocked in a system call keeps the rank's
//     P until the runtime's monitor takes it back (20 us to 10 ms later): the rank's other
//     goroutines -- the one that waits for a message, a reader of another peer -- stall
//     meanwhile (measured: a 2 MiB allreduce took 5-10 ms instead of 1 ms; see
//     docs/PERFORMANCE.md). Local wakes (a dead peer, a waiting goroutine) clear the flag and
//     wake the futex, under mapMu so that they never touch a ring being unmapped.

// shmRing is one side's view of a ring mapping.
type shmRing struct {
	data  []byte // the data area, len ringDataBytes
	mask  uint64
	tail  *atomic.Uint64
	head  *atomic.Uint64
	rwait *atomic.Uint32
	wwait *atomic.Uint32
	acked *atomic.Uint64
	gone  atomic.Bool // set from private memory by whoever learns that the stream is over
	// bell wakes a side that waits in the middle of a frame (the writer for room, the reader
	// that holds the dispatch for bytes); idle wakes the reader goroutine that waits between
	// frames (see ringDispatch). A wake rings both: every wait checks again what it waits for.
	bell chan struct{}
	idle chan struct{}
	// ringPeer rings the other side's bell (a byte on the socket); nil: nobody to wake.
	ringPeer func()

	// futex: sleepers sleep on their flag with FUTEX_WAIT and wakers use FUTEX_WAKE (set before
	// the ring is used). own is the flag this side sleeps on (rwait for the reader, wwait for
	// the writer).
	futex    bool
	own      *atomic.Uint32
	mapMu    sync.RWMutex // local futex wakes hold it shared; unmapping holds it
	unmapped bool
}

// futexNap bounds one FUTEX_WAIT: every wake is delivered (a waker clears the flag before it
// wakes, so a sleeper that has not yet called FUTEX_WAIT does not sleep), this is only a safety
// net.
const futexNap = 100 * time.Millisecond

// newShmRing views mem (len ringMapBytes, 8-byte aligned, as mappings are) as a ring.
func newShmRing(mem []byte) (*shmRing, error) {
	if len(mem) != ringMapBytes || uintptr(unsafe.Pointer(&mem[0]))%8 != 0 {
		return nil, fmt.Errorf("comm: ring mapping of %d bytes, want %d (aligned)", len(mem), ringMapBytes)
	}
	at := func(off int) unsafe.Pointer { return unsafe.Pointer(&mem[off]) }
	return &shmRing{
		data:  mem[ringDataOff:ringMapBytes:ringMapBytes],
		mask:  ringDataBytes - 1,
		tail:  (*atomic.Uint64)(at(ringTailOff)),
		head:  (*atomic.Uint64)(at(ringHeadOff)),
		rwait: (*atomic.Uint32)(at(ringRWaitOff)),
		wwait: (*atomic.Uint32)(at(ringWWaitOff)),
		acked: (*atomic.Uint64)(at(ringAckedOff)),
		bell:  make(chan struct{}, 1),
		idle:  make(chan struct{}, 1),
	}, nil
}

// initRingHeader writes a fresh ring's header (the creator does, before anyone maps it).
func initRingHeader(mem []byte, mac []byte) {
	copy(mem[ringMagicOff:], ringMagic[:])
	binary.LittleEndian.PutUint64(mem[ringSizeOff:], ringDataBytes)
	copy(mem[ringMACOff:ringMACOff+macSize], mac)
}

// markGone ends the wait of this side and wakes it.
func (r *shmRing) markGone() {
	r.gone.Store(true)
	r.ring()
}

// ring wakes this side if it sleeps (a doorbell arrived, or a goroutine waits for a message).
func (r *shmRing) ring() {
	select {
	case r.bell <- struct{}{}:
	default:
	}
	select {
	case r.idle <- struct{}{}:
	default:
	}
	if r.futex && r.own != nil {
		r.mapMu.RLock()
		if !r.unmapped && r.own.Swap(0) != 0 {
			futexWake(r.own)
		}
		r.mapMu.RUnlock()
	}
}

// wakePeer wakes the other side if it said it sleeps on word. Callers hold the lock that keeps
// the ring mapped (the writer's or the dispatch's). The flag is read before it is swapped: a
// swap writes its cache line, which the other side then has to fetch back, on every frame.
func (r *shmRing) wakePeer(word *atomic.Uint32) {
	if word.Load() == 0 || word.Swap(0) == 0 {
		return
	}
	if r.futex {
		futexWake(word)
	} else if r.ringPeer != nil {
		r.ringPeer()
	}
}

// sleep waits for a wake of this side, which set its flag own to 1 and found nothing to do:
// on c (the bell or idle) or, with futexes, on the flag.
func (r *shmRing) sleep(c chan struct{}) {
	if !r.futex {
		<-c
		return
	}
	select {
	case <-c: // a local wake that came first
	default:
		futexWait(r.own, 1, futexNap)
	}
}

// ringReader is the reading side: an io.Reader over the stream. Read is called by whoever
// holds the dispatch of the ring's frames (ringDispatch.mu): the connection's reader goroutine,
// or a goroutine that waits for a message from the peer and polls the ring itself
// (TCPEndpoint.Poll).
type ringReader struct {
	r      *shmRing
	head   uint64 // authoritative: the shared copy is only published (under the dispatch)
	pollIn *pollPolicy
	last   atomic.Int64 // monoNow when data last arrived
	parked atomic.Bool  // the reader goroutine sleeps until a writer's doorbell
	// pollers counts the goroutines polling the ring in Poll; while there are some, the
	// reader goroutine sleeps without asking the writer for doorbells (idleParked), and the
	// last poller to leave wakes it.
	pollers    atomic.Int32
	idleParked atomic.Bool
	d          *ringDispatch // set before the reader is published in TCPEndpoint.rings
}

func newRingReader(r *shmRing, poll *pollPolicy) *ringReader {
	r.own = r.rwait
	rr := &ringReader{r: r, head: r.head.Load(), pollIn: poll}
	rr.last.Store(monoNow())
	return rr
}

// available returns how many bytes are readable, checking the writer's tail against what a
// correct writer can have written.
func (rr *ringReader) available() (int, error) {
	n := rr.r.tail.Load() - rr.head
	if n > ringDataBytes {
		return 0, fmt.Errorf("%w: tail %d is %d bytes ahead of head %d (ring of %d)", ErrRingCorrupt, rr.r.tail.Load(), n, rr.head, ringDataBytes)
	}
	return int(n), nil
}

// ready reports whether Read would return at once: bytes, a corrupt ring or the end.
func (rr *ringReader) ready() bool {
	n, err := rr.available()
	return n > 0 || err != nil || rr.r.gone.Load()
}

// readChunk is the most Read copies at a time. Reading (and publishing, see publishChunk) in
// 64 KiB pieces let a writer refill the ring while the reader copied: +20% for a 4 MiB
// ping-pong, but 20-40% slower for a 2 MiB allreduce, where both ranks send and receive at
// once, in alternating runs (docs/PERFORMANCE.md, 2026-11-27); so the whole ring.
const readChunk = ringDataBytes

// Read copies what has arrived into p, waiting for at least one byte; io.EOF once the peer is
// gone and everything it wrote has been read.
func (rr *ringReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	n, err := rr.wait()
	if err != nil {
		return 0, err
	}
	n = min(n, len(p), readChunk)
	ringRaceEdge()
	off := int(rr.head & rr.r.mask)
	k := copy(p[:n], rr.r.data[off:])
	copy(p[k:n], rr.r.data)
	rr.head += uint64(n)
	rr.r.head.Store(rr.head)
	rr.r.wakePeer(rr.r.wwait)
	return n, nil
}

// wait returns the readable bytes once there are some. It is the wait in the middle of a frame
// (see idleWait for the one between frames).
func (rr *ringReader) wait() (int, error) {
	first := true
	for {
		n, err := rr.available()
		if n > 0 || err != nil {
			if n > 0 && !first {
				rr.last.Store(monoNow())
			}
			return n, err
		}
		if first {
			// The ring ran dry just now: that is when data last arrived, as far as the polling
			// window goes. (Stamping every read instead costs a look at the clock per frame,
			// as much as dispatching a small one.)
			rr.last.Store(monoNow())
		}
		if rr.r.gone.Load() {
			// The peer's last bytes were published before it went; look once more.
			if n, err = rr.available(); n > 0 || err != nil {
				return n, err
			}
			return 0, io.EOF
		}
		if first || rr.pollIn.poll(rr.last.Load()) {
			// Let the goroutines the last frames woke run first: their answer is what we wait for.
			first = false
			runtime.Gosched()
			continue
		}
		rr.r.rwait.Store(1)
		if n, _ := rr.available(); n > 0 || rr.r.gone.Load() {
			rr.r.rwait.Store(0)
			continue
		}
		rr.parked.Store(true) // a goroutine that starts waiting wakes us to poll (wake)
		rr.r.sleep(rr.r.bell)
		rr.parked.Store(false)
		rr.r.rwait.Store(0)
		rr.last.Store(monoNow()) // a wake means data or a waiting goroutine: poll again
	}
}

// idleWait is the reader goroutine's wait between frames: it returns once there is something
// to dispatch (buffered frames, bytes in the ring, or the end). While goroutines poll the ring
// themselves (Poll) it sleeps without a doorbell; otherwise it polls as the policy allows and
// then sleeps until the writer's doorbell.
func (rr *ringReader) idleWait(pending func() bool) {
	first := true
	for {
		if rr.pollers.Load() > 0 {
			// The pollers dispatch; competing with them for the frames would only add
			// hand-overs.
			rr.idleParked.Store(true)
			if rr.pollers.Load() == 0 {
				rr.idleParked.Store(false)
				continue
			}
			<-rr.r.idle
			rr.idleParked.Store(false)
			first = true
			continue
		}
		if pending() {
			return
		}
		if first {
			rr.last.Store(monoNow()) // dry just now (see wait)
		}
		if first || rr.pollIn.poll(rr.last.Load()) {
			first = false
			runtime.Gosched()
			continue
		}
		rr.r.rwait.Store(1)
		if pending() || rr.pollers.Load() > 0 {
			rr.r.rwait.Store(0)
			continue
		}
		rr.parked.Store(true)
		rr.r.sleep(rr.r.idle)
		rr.parked.Store(false)
		rr.r.rwait.Store(0)
		rr.last.Store(monoNow()) // a wake means data or a waiting goroutine: poll again
	}
}

// handBack wakes the reader goroutine if it sleeps because goroutines polled the ring (the
// last poller left). Only then: a wake that is not needed costs the poller, whose message
// has just arrived, two channel operations. (idleWait's flag and pollers are checked in
// opposite orders on both sides, so either the reader sees no pollers or we see it parked.)
func (rr *ringReader) handBack() {
	if rr.idleParked.Load() {
		select {
		case rr.r.idle <- struct{}{}:
		default:
		}
	}
}

// wakeSleeper wakes the reader goroutine sleeping in idleWait after a poller took its wait flag
// down. Callers hold the dispatch, which keeps the ring mapped.
func (rr *ringReader) wakeSleeper() {
	if rr.r.futex {
		futexWake(rr.r.rwait)
	}
	select {
	case rr.r.idle <- struct{}{}:
	default:
	}
}

// wake makes a sleeping reader poll again (WaitNotifier).
func (rr *ringReader) wake() {
	if rr == nil || !rr.parked.Load() || !rr.pollIn.gateOpen() {
		return
	}
	rr.r.ring()
}

// ack publishes that the single-copy chunk seq has been taken, releasing its writer.
func (rr *ringReader) ack(seq uint64) {
	rr.r.acked.Store(seq)
	rr.r.wakePeer(rr.r.wwait)
}

// ringWriter is the writing side. Its methods are called under the peer's write lock.
type ringWriter struct {
	r    *shmRing
	tail uint64 // authoritative: the shared copy is only published
	// head is the reader's head as last read: the reader writes the shared copy on every
	// frame, so reading it costs a cache-line transfer; space trusts this older value (the
	// room it shows is never more than there is) until it shows too little.
	head   uint64
	seq    uint64 // single-copy chunks sent
	pollIn *pollPolicy
}

func newRingWriter(r *shmRing, poll *pollPolicy) *ringWriter {
	r.own = r.wwait
	return &ringWriter{r: r, tail: r.tail.Load(), head: r.head.Load(), pollIn: poll}
}

// space returns how many bytes can be written, up to want: from the head as last read if
// that leaves want bytes, otherwise from the reader's head, which it checks.
func (rw *ringWriter) space(want int) (int, error) {
	if free := ringDataBytes - int(rw.tail-rw.head); free >= want {
		return free, nil
	}
	head := rw.r.head.Load()
	used := rw.tail - head
	if used > ringDataBytes {
		return 0, fmt.Errorf("%w: head is %d bytes behind tail %d (ring of %d)", ErrRingCorrupt, used, rw.tail, ringDataBytes)
	}
	rw.head = head
	return ringDataBytes - int(used), nil
}

// write appends the concatenation of bufs to the stream, publishing as space runs out and at
// the end, so a frame larger than the ring streams through it. It fails once the peer is gone
// or the deadline (zero: none) passes.
func (rw *ringWriter) write(deadline time.Time, bufs ...[]byte) error {
	for _, b := range bufs {
		for len(b) > 0 {
			free, err := rw.space(len(b))
			if err != nil {
				return err
			}
			if free == 0 {
				rw.publish()
				if err := rw.waitFor(deadline, rw.hasSpace); err != nil {
					return err
				}
				continue
			}
			n := min(free, len(b), publishChunk)
			off := int(rw.tail & rw.r.mask)
			k := copy(rw.r.data[off:], b[:n])
			copy(rw.r.data, b[k:n])
			rw.tail += uint64(n)
			b = b[n:]
			if n == publishChunk {
				rw.publish() // the reader starts copying while we write the rest
			}
		}
	}
	rw.publish()
	return nil
}

// publishChunk: a writer publishes at least every so many bytes (see readChunk). Small frames
// are published once, whole.
const publishChunk = ringDataBytes

func (rw *ringWriter) publish() {
	ringRaceEdge()
	rw.r.tail.Store(rw.tail)
	rw.r.wakePeer(rw.r.rwait)
}

func (rw *ringWriter) hasSpace() bool {
	free, err := rw.space(1)
	return free > 0 || err != nil
}

// acked reports whether the reader has taken single-copy chunk rw.seq.
func (rw *ringWriter) acked() bool { return rw.r.acked.Load() >= rw.seq }

// waitFor waits until ready() or the peer is gone.
func (rw *ringWriter) waitFor(deadline time.Time, ready func() bool) error {
	start := monoNow()
	for {
		if ready() {
			return nil
		}
		if rw.r.gone.Load() {
			return errRingGone
		}
		if !deadline.IsZero() && time.Now().After(deadline) {
			return fmt.Errorf("comm: shared-memory write: %w", errRingTimeout)
		}
		// The short window, or the long one while a goroutine of this rank waits for a message:
		// that goroutine polls its ring with runtime.Gosched, and a goroutine that yields
		// keeps Go's scheduler from looking at the network poller (it finds the yielder in its
		// run queue first), so a doorbell would reach a sleeping writer only when the
		// runtime's monitor polls the network, up to 10 ms later: a 1 MiB single-copy chunk
		// (~80 us) or a full ring left the writer asleep that long. The rank's processor is
		// busy polling anyway; the writer polls in its turns.
		if rw.pollIn.poll(start) {
			runtime.Gosched()
			continue
		}
		rw.r.wwait.Store(1)
		if ready() || rw.r.gone.Load() {
			rw.r.wwait.Store(0)
			continue
		}
		if deadline.IsZero() {
			rw.r.sleep(rw.r.bell)
		} else if rw.r.futex {
			futexWait(rw.r.wwait, 1, min(futexNap, time.Until(deadline)))
		} else {
			t := time.NewTimer(time.Until(deadline))
			select {
			case <-rw.r.bell:
			case <-t.C:
			}
			t.Stop()
		}
		rw.r.wwait.Store(0)
	}
}

var errRingTimeout = errors.New("reader did not make room in time")
