package comm

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/mpios/mpios/internal/job"
)

// TCPConfig configures a TCP endpoint. Zero durations take the defaults below.
type TCPConfig struct {
	Rank, Size int
	// Addrs[r] is the data-plane address (host:port) of rank r.
	Addrs []string
	// Listener accepts this rank's incoming connections; it must already be listening on
	// Addrs[Rank] so that peers can connect as soon as they learn the table.
	Listener net.Listener
	// Secret authenticates connections: both ends prove knowledge of it (HMAC-SHA256 over fresh
	// nonces), so a stranger who connects to a rank's port cannot inject messages.
	Secret []byte
	// DialTimeout bounds the retries of a dial to a peer (default 10s).
	DialTimeout time.Duration
	// HandshakeTimeout bounds the authentication exchange of one connection (default 10s).
	HandshakeTimeout time.Duration
	// Logf receives reasons for rejected connections and invalid frames (default: stderr).
	Logf func(format string, args ...any)
	// SpinWait is how long the reader of a connection keeps polling its socket with
	// non-blocking reads after the last data arrived, before it parks in the Go network
	// poller. A frame that arrives within the window is dispatched at once, without the
	// poller's wake-up of a sleeping thread (which costs ~15 us on a 2-core VM). It pays
	// only when every rank has a core of its own: on a shared or oversubscribed core the
	// polling takes the time the peer needs. Positive: always poll that long; negative:
	// never poll; 0: decide by MPIOS_SPIN and the ranks on this node (see DecideSpin).
	SpinWait time.Duration
	// NodeRanks is the number of ranks on this node, for that decision (0: MPIOS_NODE_RANKS,
	// else unknown).
	NodeRanks int
	// Transport chooses between shared memory and TCP per peer: TransportAuto (the default)
	// uses shared memory with peers on this node, TransportTCP never does, TransportShmCopy
	// does without the single-copy path. Empty: MPIOS_TRANSPORT, else auto.
	Transport string
	// ShmWake is how a side of a shared-memory ring that sleeps is woken: ShmWakeDoorbell
	// (the default) or ShmWakeFutex. Empty: MPIOS_SHM_WAKE, else doorbell.
	ShmWake string
	// JobID names this job's shared-memory rings, so that launchers can remove what a crash
	// leaves (RemoveJobSegments). Empty: MPIOS_JOB_ID, else "local".
	JobID string
}

// SuggestedSpinWait is the polling window after data arrived when a rank has a core to
// itself: it halves small-message latency (see docs/PERFORMANCE.md).
const SuggestedSpinWait = 30 * time.Microsecond

// SuggestedSpinWaitLong is the polling window while a goroutine of the process waits for a
// message (WaitNotifier): waking a parked reader costs ~20 us, 2% of a wait this long, and
// the next message of a large transfer (a 4 MiB rendezvous takes ~0.7 ms) is caught at once.
const SuggestedSpinWaitLong = time.Millisecond

const (
	defaultDialTimeout      = 10 * time.Second
	defaultHandshakeTimeout = 10 * time.Second
	readBufferSize          = 256 << 10 // holds a header plus the largest eager payload
	// directMin is the smallest eager payload read straight into a waiting receive's buffer
	// when it has not arrived yet: below it, the copy out of the read buffer is cheaper than
	// the separate read system calls for header and payload.
	directMin  = 32 << 10
	smallFrame = 64 << 10 // frames up to this size are copied into one write
	nonceSize  = 16
	macSize    = sha256.Size
)

var (
	serverHelloMagic = [8]byte{'M', 'P', 'I', 'O', 'S', 'H', 'S', '1'}
	clientHelloMagic = [8]byte{'M', 'P', 'I', 'O', 'S', 'H', 'C', '1'}
)

// ErrAuth reports a connection whose peer failed authentication.
var ErrAuth = errors.New("comm: authentication failed")

// TCPEndpoint is an Endpoint over TCP. Each ordered pair of ranks uses one connection, dialed
// lazily by the sender on first use; the receiver only reads from it (except a final Bye), so
// there is no connect race to break and per-pair order is TCP's order.
type TCPEndpoint struct {
	cfg     TCPConfig
	spin    SpinPolicy
	handler Handler
	waiters atomic.Int32 // goroutines waiting for a message (Waiting)
	waitAt  atomic.Int64 // monoNow of the latest Waiting(true)
	writing atomic.Int32 // large frames being written (see Send)
	// readers[peer] is the polling reader of peer's connection, if it has one; rings[peer]
	// its ring reader, if it comes through shared memory.
	readers []atomic.Pointer[spinReader]
	rings   []atomic.Pointer[ringReader]

	transport string // TransportAuto, TransportTCP or TransportShmCopy
	shmWake   string // ShmWakeDoorbell or ShmWakeFutex
	shmPrefix string // the names of this job's rings start with it

	peers []*tcpPeer

	mu       sync.Mutex
	closed   bool
	retiring bool                     // Retire is handing this rank over to a successor
	in       map[net.Conn]*sync.Mutex // accepted connections and their write locks (for Bye)
	inPeer   []int                    // accepted connections per peer
	// inOrder lists each peer's accepted connections in acceptance order. After a peer
	// migrated, its successor's connection may be accepted while frames of the old process
	// are still unread on the old one; only the oldest connection is read, so the peer's
	// frames stay in sending order across the move.
	inOrder [][]net.Conn
	inTurn  *sync.Cond // an accepted connection ended (on mu)
	wg      sync.WaitGroup
}

type tcpPeer struct {
	dial sync.Mutex // serializes dialing
	mu   sync.Mutex // serializes writes
	conn net.Conn
	link *shmLink // the ring conn's frames go through, if the peer shares this node
	err  error    // sticky: set when the connection broke
	buf  []byte
}

// NewTCP returns an endpoint; call Start to begin accepting.
func NewTCP(cfg TCPConfig) (*TCPEndpoint, error) {
	if cfg.Size < 1 || cfg.Rank < 0 || cfg.Rank >= cfg.Size {
		return nil, fmt.Errorf("comm: rank %d of size %d", cfg.Rank, cfg.Size)
	}
	if len(cfg.Addrs) != cfg.Size {
		return nil, fmt.Errorf("comm: %d addresses for %d ranks", len(cfg.Addrs), cfg.Size)
	}
	if cfg.Listener == nil {
		return nil, errors.New("comm: no listener")
	}
	if len(cfg.Secret) < 16 {
		return nil, errors.New("comm: secret shorter than 16 bytes")
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = defaultDialTimeout
	}
	if cfg.HandshakeTimeout <= 0 {
		cfg.HandshakeTimeout = defaultHandshakeTimeout
	}
	if cfg.Logf == nil {
		logger := log.New(os.Stderr, "", 0)
		cfg.Logf = logger.Printf
	}
	spin, err := spinPolicy(&cfg)
	if err != nil {
		return nil, err
	}
	transport, err := transportSetting(cfg.Transport)
	if err != nil {
		return nil, err
	}
	shmWake, err := shmWakeSetting(cfg.ShmWake)
	if err != nil {
		return nil, err
	}
	if cfg.JobID == "" {
		cfg.JobID = os.Getenv(job.EnvJobID)
	}
	if cfg.JobID == "" {
		cfg.JobID = "local"
	}
	if err := job.ValidateID(cfg.JobID); err != nil {
		return nil, fmt.Errorf("comm: %w", err)
	}
	cfg.Addrs = append([]string(nil), cfg.Addrs...) // Redirect changes them
	e := &TCPEndpoint{cfg: cfg, spin: spin, peers: make([]*tcpPeer, cfg.Size), in: make(map[net.Conn]*sync.Mutex),
		inPeer: make([]int, cfg.Size), inOrder: make([][]net.Conn, cfg.Size), readers: make([]atomic.Pointer[spinReader], cfg.Size),
		rings: make([]atomic.Pointer[ringReader], cfg.Size), transport: transport, shmWake: shmWake, shmPrefix: segmentPrefix(cfg.JobID, cfg.Secret)}
	e.inTurn = sync.NewCond(&e.mu)
	for i := range e.peers {
		e.peers[i] = &tcpPeer{}
	}
	return e, nil
}

// Rank implements Endpoint.
func (e *TCPEndpoint) Rank() int { return e.cfg.Rank }

// Size implements Endpoint.
func (e *TCPEndpoint) Size() int { return e.cfg.Size }

// Spin returns how this endpoint's readers poll their sockets, and why.
func (e *TCPEndpoint) Spin() SpinPolicy { return e.spin }

// Waiting implements WaitNotifier. While a goroutine waits, the readers poll for up to the
// policy's WaitLong since the last data or the start of the wait, whichever is later (instead
// of its Wait since the last data), and the reader of the awaited
// peer, if it sleeps in the network poller, is woken to poll: the frame is then read as soon
// as it arrives, without the poller's wake-up of a sleeping thread (a rank that computed
// longer than the polling window, as a solver between its halo exchanges, would otherwise pay
// that on every exchange).
func (e *TCPEndpoint) Waiting(peer int, on bool) {
	if !on {
		e.waiters.Add(-1)
		return
	}
	e.waiters.Add(1)
	e.waitAt.Store(monoNow())
	if peer >= 0 && peer < len(e.readers) {
		e.readers[peer].Load().wake()
		e.rings[peer].Load().wake()
		return
	}
	for i := range e.readers {
		e.readers[i].Load().wake()
		e.rings[i].Load().wake()
	}
}

// Start implements Endpoint.
func (e *TCPEndpoint) Start(h Handler) error {
	if h == nil {
		return errors.New("comm: nil handler")
	}
	e.handler = h
	e.wg.Add(1)
	go e.acceptLoop()
	return nil
}

func (e *TCPEndpoint) logf(format string, args ...any) {
	e.cfg.Logf("comm: rank %d: "+format, append([]any{e.cfg.Rank}, args...)...)
}

func (e *TCPEndpoint) isClosed() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.closed
}

func (e *TCPEndpoint) acceptLoop() {
	defer e.wg.Done()
	for {
		conn, err := e.cfg.Listener.Accept()
		if err != nil {
			if e.isClosed() || errors.Is(err, net.ErrClosed) {
				return
			}
			e.logf("accept: %v", err)
			time.Sleep(10 * time.Millisecond)
			continue
		}
		e.wg.Add(1)
		go e.serveConn(conn)
	}
}

// serveConn authenticates an incoming connection and then reads its frames until it ends.
func (e *TCPEndpoint) serveConn(conn net.Conn) {
	defer e.wg.Done()
	t, err := e.acceptHandshake(conn)
	if err != nil {
		if !e.isClosed() {
			e.logf("rejected connection from %v: %v", conn.RemoteAddr(), err)
		}
		conn.Close()
		return
	}
	peer := t.src
	conn.SetDeadline(time.Now().Add(e.cfg.HandshakeTimeout))
	link, err := e.answerRing(conn, t)
	conn.SetDeadline(time.Time{})
	if err != nil {
		e.unregister(peer, conn)
		if !e.isClosed() {
			e.logf("rejected connection from rank %d: %v", peer, err)
		}
		conn.Close()
		return
	}
	if link != nil {
		// The dialer writes only doorbells on the socket now (see shmRing), and it ends when
		// the dialer's process does, or when we close it. Our doorbells for the dialer go the
		// other way, under the lock of our Byes on this socket.
		e.mu.Lock()
		wmu := e.in[conn]
		e.mu.Unlock()
		link.ring.ringPeer = func() {
			wmu.Lock()
			conn.Write(doorbell[:])
			wmu.Unlock()
		}
		e.wg.Add(1)
		go func() {
			defer e.wg.Done()
			var b [64]byte
			for {
				if _, err := conn.Read(b[:]); err != nil {
					link.ring.markGone()
					return
				}
				link.ring.ring()
			}
		}()
	}

	e.mu.Lock()
	for len(e.inOrder[peer]) > 0 && e.inOrder[peer][0] != conn && !e.closed {
		e.inTurn.Wait()
	}
	e.mu.Unlock()
	flags, err := e.readFrames(peer, conn, link)
	e.unregister(peer, conn)
	conn.Close()
	link.unmap() // its reader was the only user
	e.mu.Lock()
	closed := e.closed
	e.mu.Unlock()
	if closed {
		return
	}
	if err != nil {
		var fe *FrameError
		if errors.As(err, &fe) {
			e.logf("closing connection from rank %d: %v", peer, err)
		}
		e.handler.PeerClosed(peer, 0, &PeerError{Peer: peer, Op: "receive from", Err: fmt.Errorf("%w: %v", ErrPeerLost, err)})
		return
	}
	e.handler.PeerClosed(peer, flags, nil)
}

// unregister forgets an accepted connection of peer.
func (e *TCPEndpoint) unregister(peer int, conn net.Conn) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.in, conn)
	e.inPeer[peer]--
	e.inOrder[peer] = slices.DeleteFunc(e.inOrder[peer], func(c net.Conn) bool { return c == conn })
	e.inTurn.Broadcast()
}

// readFrames dispatches frames from peer, from conn or from its ring (link), until a Bye
// (returns its flags) or an error.
func (e *TCPEndpoint) readFrames(peer int, conn net.Conn, link *shmLink) (uint8, error) {
	direct, _ := e.handler.(EagerReceiver)
	if link != nil {
		d := &ringDispatch{e: e, peer: peer, link: link, rd: link.rd, direct: direct,
			fr: &frameReader{src: link.rd, buf: make([]byte, readBufferSize)}}
		link.rd.d = d
		e.rings[peer].Store(link.rd)
		defer e.rings[peer].CompareAndSwap(link.rd, nil)
		return d.run()
	}
	var src io.Reader = conn
	if sc, ok := conn.(syscall.Conn); ok && e.spin.Wait > 0 {
		if rc, err := sc.SyscallConn(); err == nil {
			sr := newSpinReader(conn, rc, e.pollPolicy())
			e.readers[peer].Store(sr) // only one connection of a peer is read at a time
			defer e.readers[peer].CompareAndSwap(sr, nil)
			src = sr
		}
	}
	fr := &frameReader{src: src, buf: make([]byte, readBufferSize)}
	var h Header // one per connection: the handlers get &h, which would escape per frame
	for {
		bye, flags, err := e.nextFrame(peer, fr, nil, direct, &h)
		if bye || err != nil {
			return flags, err
		}
	}
}

// nextFrame reads and dispatches the next frame from fr: it returns bye with the flags of a
// Bye, or the error that ends the stream. link is the connection's ring, if it has one.
func (e *TCPEndpoint) nextFrame(peer int, fr *frameReader, link *shmLink, direct EagerReceiver, hp *Header) (bye bool, flags uint8, err error) {
	hb, err := fr.next(HeaderSize)
	if err != nil {
		return false, 0, err
	}
	if *hp, err = DecodeHeader(hb); err != nil {
		return false, 0, err
	}
	h := hp
	if h.Flags&FlagRemote != 0 {
		if h.Kind != KindData || link == nil || !link.cma {
			return false, 0, &FrameError{Kind: h.Kind, Err: ErrBadKind, Info: "remote payload where none was agreed"}
		}
		return false, 0, e.readRemoteData(peer, fr, link, h)
	}
	switch h.Kind {
	case KindBye:
		return true, h.Flags, nil
	case KindEager:
		n := int(h.Len)
		if direct != nil && n >= directMin && fr.buffered() < n {
			if dst := direct.EagerBuffer(peer, h); dst != nil {
				if len(dst) != n {
					err = fmt.Errorf("comm: eager buffer of %d bytes for a %d-byte payload", len(dst), n)
				} else {
					err = fr.readFull(dst)
				}
				direct.EagerDone(peer, h, err)
				if err != nil {
					return false, 0, err
				}
				fr.exact = true
				return false, 0, nil
			}
		}
		payload, err := fr.next(n)
		if err != nil {
			return false, 0, err
		}
		if n > 0 && n < directMin {
			fr.exact = false
		}
		return false, 0, e.handler.HandleFrame(peer, h, payload)
	case KindRTS, KindCTS:
		return false, 0, e.handler.HandleFrame(peer, h, nil)
	case KindData:
		dst, err := e.handler.DataBuffer(peer, h)
		if err != nil {
			return false, 0, err
		}
		if dst == nil {
			return false, 0, fr.discard(int(h.Len))
		}
		if len(dst) != int(h.Len) {
			return false, 0, fmt.Errorf("comm: data buffer of %d bytes for a %d-byte chunk", len(dst), h.Len)
		}
		if err := fr.readFull(dst); err != nil {
			return false, 0, err
		}
		fr.exact = true
		return false, 0, e.handler.DataDone(peer, h)
	}
	return false, 0, nil
}

// readRemoteData takes a Data frame's payload straight out of the sender's memory, as the
// descriptor after its header says, and releases the sender.
func (e *TCPEndpoint) readRemoteData(peer int, fr *frameReader, link *shmLink, h *Header) error {
	desc, err := fr.next(remoteDescSize)
	if err != nil {
		return err
	}
	addr, seq := binary.LittleEndian.Uint64(desc), binary.LittleEndian.Uint64(desc[8:])
	h.Flags &^= FlagRemote
	dst, err := e.handler.DataBuffer(peer, h)
	if err != nil {
		return err
	}
	if dst != nil {
		if len(dst) != int(h.Len) {
			return fmt.Errorf("comm: data buffer of %d bytes for a %d-byte chunk", len(dst), h.Len)
		}
		if err := readRemote(link.pid, dst, addr); err != nil {
			return err
		}
	}
	link.rd.ack(seq)
	if dst == nil {
		return nil
	}
	return e.handler.DataDone(peer, h)
}

// frameReader buffers a connection's frames. Small frames are read many at a time into buf;
// a large payload with a known destination is read straight into it, without passing through
// buf. After such a payload, headers are read alone (exact) until a small payload arrives, so
// that reading a header does not pull the next large payload into buf.
type frameReader struct {
	src   io.Reader
	buf   []byte
	r, w  int // buf[r:w] is unread
	exact bool
}

func (f *frameReader) buffered() int { return f.w - f.r }

// next returns the next n <= len(buf) bytes, valid until the next call.
func (f *frameReader) next(n int) ([]byte, error) {
	if f.w-f.r < n {
		if err := f.fill(n, f.exact && n == HeaderSize); err != nil {
			return nil, err
		}
	}
	b := f.buf[f.r : f.r+n : f.r+n]
	f.r += n
	return b, nil
}

// fill reads until at least n bytes are buffered; exact reads no more than that.
func (f *frameReader) fill(n int, exact bool) error {
	if f.r == f.w || f.r+n > len(f.buf) {
		f.w = copy(f.buf, f.buf[f.r:f.w])
		f.r = 0
	}
	limit := len(f.buf)
	if exact {
		limit = f.r + n
	}
	for f.w-f.r < n {
		m, err := f.src.Read(f.buf[f.w:limit])
		f.w += m
		if err != nil && f.w-f.r < n {
			if err == io.EOF && f.w > f.r {
				err = io.ErrUnexpectedEOF
			}
			return err
		}
	}
	return nil
}

// readFull fills dst with the next len(dst) bytes: what is buffered, then straight from src.
func (f *frameReader) readFull(dst []byte) error {
	n := copy(dst, f.buf[f.r:f.w])
	f.r += n
	for n < len(dst) {
		m, err := f.src.Read(dst[n:])
		n += m
		if err != nil && n < len(dst) {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return err
		}
	}
	return nil
}

// discard skips the next n bytes.
func (f *frameReader) discard(n int) error {
	for n > 0 {
		if f.r == f.w {
			if err := f.fill(1, false); err != nil {
				return err
			}
		}
		k := min(n, f.w-f.r)
		f.r += k
		n -= k
	}
	return nil
}

// spinReader reads a socket for readFrames. After data arrived it polls the socket with
// non-blocking reads, yielding the processor between them (so that the goroutine the last
// frame woke runs first), for up to spin -- or long, while a goroutine of the process waits
// for a message -- and only then blocks in the network poller. The usual case in iterative
// programs -- the answer to a message comes within a few tens of microseconds -- then costs
// one read system call instead of an epoll wake-up, a futex wake of the runtime's monitor
// thread and a thread hand-off. The polling is bounded, so a rank that waits long sleeps as
// before; with a gate (adaptive polling) it stops while the node is loaded, where it would
// take the time other threads need.
type spinReader struct {
	conn   net.Conn
	rc     syscall.RawConn
	policy *pollPolicy
	last   int64       // monoNow when data last arrived (or wake woke the reader)
	got    bool        // the last Read returned data
	parked atomic.Bool // in the network poller

	// The non-blocking read, bound once: a closure per poll would be an allocation per poll.
	poll  func(fd uintptr) bool
	p     []byte
	n     int
	errno error
}

func newSpinReader(conn net.Conn, rc syscall.RawConn, policy *pollPolicy) *spinReader {
	r := &spinReader{conn: conn, rc: rc, policy: policy}
	r.poll = func(fd uintptr) bool {
		r.n, r.errno = syscall.Read(int(fd), r.p)
		return true // never park here: EAGAIN is handled by Read
	}
	return r
}

// pollPolicy decides, for the readers of sockets and rings alike, whether a reader that found
// nothing polls again or sleeps (in the network poller, or on the ring's bell).
type pollPolicy struct {
	spin    time.Duration // polling window after data arrived
	long    time.Duration // polling window while the process waits for a message
	gate    *loadGate     // nil: forced polling
	waiters *atomic.Int32 // the endpoint's waiting goroutines
	waitAt  *atomic.Int64 // and when the latest wait began (monoNow)
	writing *atomic.Int32 // the endpoint's large socket writes in progress
}

// pollPolicy is how this endpoint's readers poll: nil if they never do.
func (e *TCPEndpoint) pollPolicy() *pollPolicy {
	if e.spin.Wait <= 0 {
		return nil
	}
	var gate *loadGate
	if e.spin.Adaptive {
		gate = processGate()
	}
	return &pollPolicy{spin: e.spin.Wait, long: max(e.spin.WaitLong, e.spin.Wait), gate: gate,
		waiters: &e.waiters, waitAt: &e.waitAt, writing: &e.writing}
}

// poll reports whether a reader whose data last arrived at last (monoNow) polls again: for
// spin after the last data; while a goroutine waits, for long after the last data or the
// start of the wait (a rank that computed longer than spin since the last message then still
// polls for the answer it now waits for); never while the endpoint writes a large frame or
// the node is loaded.
func (p *pollPolicy) poll(last int64) bool {
	if p == nil {
		return false
	}
	since, window := last, p.spin
	if p.waiters.Load() > 0 {
		since, window = max(since, p.waitAt.Load()), p.long
	}
	return time.Duration(monoNow()-since) <= window && p.writing.Load() == 0 && (p.gate == nil || p.gate.allow())
}

// pollShort is poll without the long window of a waiting goroutine.
func (p *pollPolicy) pollShort(last int64) bool {
	return p != nil && p.pollShortFor(last, p.spin)
}

// pollShortFor reports whether a reader polls again window after since (monoNow).
func (p *pollPolicy) pollShortFor(since int64, window time.Duration) bool {
	return time.Duration(monoNow()-since) <= window && p.writing.Load() == 0 && (p.gate == nil || p.gate.allow())
}

// gateOpen reports whether polling is allowed by the node's load (a wake is then useful).
func (p *pollPolicy) gateOpen() bool {
	return p != nil && (p.gate == nil || p.gate.isOpen())
}

// monoEpoch and monoNow give the readers a monotonic clock in an int64, which an atomic holds.
var monoEpoch = time.Now()

func monoNow() int64 { return int64(time.Since(monoEpoch)) }

// wake makes a reader that sleeps in the network poller poll again (for Waiting), unless
// the node is loaded. It sets a read deadline in the past, which ends the sleeping Read; the
// reader clears it wherever it meets it (a wake can land just after the reader woke by
// itself, and then fails its next read instead).
func (r *spinReader) wake() {
	if r == nil || !r.parked.Load() || !r.policy.gateOpen() {
		return
	}
	r.conn.SetReadDeadline(time.Unix(1, 0))
}

// woken reports whether err is the deadline wake set, which it then clears (or the error
// clearing it).
func (r *spinReader) woken(err error) (bool, error) {
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		return false, nil
	}
	if err := r.conn.SetReadDeadline(time.Time{}); err != nil {
		return false, err
	}
	return true, nil
}

func (r *spinReader) Read(p []byte) (int, error) {
	if r.got {
		// The frames of the last read have been dispatched; let the goroutines they woke run
		// before polling again: their answer is what the next read waits for.
		r.got = false
		runtime.Gosched()
	}
	for {
		if !r.policy.poll(r.last) {
			r.parked.Store(true)
			n, err := r.conn.Read(p) // parks in the network poller
			r.parked.Store(false)
			if n > 0 {
				r.last, r.got = monoNow(), true
				return n, err
			}
			if woken, err := r.woken(err); woken {
				r.last = monoNow() // poll, as wake wanted
				continue
			} else if err != nil {
				return 0, err
			}
			return n, err
		}
		r.p = p
		cerr := r.rc.Read(r.poll)
		n, err := r.n, r.errno
		r.p, r.errno = nil, nil
		if cerr != nil {
			if woken, err := r.woken(cerr); woken {
				continue // a wake that came after the reader had woken by itself
			} else if err != nil {
				return 0, err
			}
			return 0, cerr
		}
		switch {
		case n > 0:
			r.last, r.got = monoNow(), true
			return n, nil
		case err == nil:
			return 0, io.EOF
		case err != syscall.EAGAIN && err != syscall.EINTR:
			return 0, err
		}
		runtime.Gosched()
	}
}

// Send implements Endpoint.
func (e *TCPEndpoint) Send(peer int, h *Header, payload []byte) error {
	if peer < 0 || peer >= e.cfg.Size || peer == e.cfg.Rank {
		return fmt.Errorf("comm: send to rank %d: not a peer of rank %d (size %d)", peer, e.cfg.Rank, e.cfg.Size)
	}
	if len(payload) != int(h.Len) {
		return fmt.Errorf("comm: payload of %d bytes, header says %d", len(payload), h.Len)
	}
	p := e.peers[peer]
	// Taking the write lock once here (and dialing only on first use) saved two allocations
	// and a lock per frame, and made a 2 MiB allreduce 40% slower in alternating runs
	// (docs/PERFORMANCE.md, 2026-11-27): kept as it was. Only the allocations gone (connect's
	// retry closure in a function apart), the same: 6-12% off the 16-byte ping-pong, +30-45%
	// for the 2 MiB allreduce, also with the single copy and with the garbage collector off
	// (shmsmall A/B, 2026-11-27): not the allocations' own cost but the frames' timing.
	conn, err := e.connect(peer, p)
	if err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil {
		return p.err
	}
	if l := p.link; l != nil && p.conn == conn {
		if h.Kind == KindData && l.cma && len(payload) >= cmaMin {
			err = l.writeRemoteData(h, payload, p.buf)
		} else {
			p.buf = AppendHeader(p.buf[:0], h)
			err = l.w.write(noDeadline, p.buf, payload)
		}
		if err != nil {
			p.err = &PeerError{Peer: peer, Op: "send to", Err: fmt.Errorf("%w: %v", ErrPeerLost, err)}
			conn.Close()
			return p.err
		}
		return nil
	}
	if HeaderSize+len(payload) <= smallFrame {
		p.buf = append(AppendHeader(p.buf[:0], h), payload...)
		_, err = conn.Write(p.buf)
	} else {
		// Readers do not poll while a large frame is written: the write system call runs
		// long enough for the runtime to hand this rank's P to another thread, and a polling
		// reader there would take a second core (the peer's, which is reading this frame).
		// They read what arrives meanwhile through the network poller, and poll again
		// afterwards if a goroutine waits.
		e.writing.Add(1)
		bufs := net.Buffers{AppendHeader(p.buf[:0], h), payload}
		_, err = bufs.WriteTo(conn)
		if e.writing.Add(-1) == 0 && e.waiters.Load() > 0 {
			for i := range e.readers {
				e.readers[i].Load().wake()
			}
		}
	}
	if err != nil {
		p.err = &PeerError{Peer: peer, Op: "send to", Err: fmt.Errorf("%w: %v", ErrPeerLost, err)}
		conn.Close()
		return p.err
	}
	return nil
}

// connect returns the connection to peer, dialing it on first use.
func (e *TCPEndpoint) connect(peer int, p *tcpPeer) (net.Conn, error) {
	p.dial.Lock()
	defer p.dial.Unlock()
	p.mu.Lock()
	conn, err := p.conn, p.err
	p.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if conn != nil {
		return conn, nil
	}
	if e.isClosed() {
		return nil, ErrClosed
	}
	e.mu.Lock()
	addr := e.cfg.Addrs[peer]
	e.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), e.cfg.DialTimeout)
	defer cancel()
	bo := backoff.WithContext(backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(5*time.Millisecond), backoff.WithMaxInterval(500*time.Millisecond),
		backoff.WithMaxElapsedTime(e.cfg.DialTimeout)), ctx)
	var link *shmLink
	err = backoff.Retry(func() error {
		d := net.Dialer{Timeout: e.cfg.HandshakeTimeout}
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return err
		}
		t, err := e.dialHandshake(c, peer)
		if err == nil {
			c.SetDeadline(time.Now().Add(e.cfg.HandshakeTimeout))
			link, err = e.offerRing(c, t)
			c.SetDeadline(time.Time{})
		}
		if err != nil {
			c.Close()
			if errors.Is(err, ErrAuth) {
				return backoff.Permanent(err)
			}
			return err
		}
		conn = c
		return nil
	}, bo)
	if err != nil {
		err = &PeerError{Peer: peer, Op: "connect to", Err: fmt.Errorf("%s: %w", addr, err)}
		p.mu.Lock()
		p.err = err
		p.mu.Unlock()
		return nil, err
	}
	if link != nil {
		link.ring.ringPeer = func() { conn.Write(doorbell[:]) } // under p.mu, like every write
	}
	p.mu.Lock()
	p.conn, p.link = conn, link
	p.mu.Unlock()
	e.wg.Add(1)
	go e.watchOutgoing(peer, p, conn, link)
	return conn, nil
}

// watchOutgoing reads the receiving side's only message on a dialed connection, its Bye, so
// that a peer that dies is noticed even by ranks that only send to it (and a Send that waits
// for room in the connection's ring ends).
func (e *TCPEndpoint) watchOutgoing(peer int, p *tcpPeer, conn net.Conn, link *shmLink) {
	defer e.wg.Done()
	var hb [HeaderSize]byte
	var err error
	for {
		if _, err = io.ReadFull(conn, hb[:1]); err != nil || link == nil || hb[0] != doorbell[0] {
			break
		}
		link.ring.ring() // the reader made room, or took a single-copy chunk
	}
	if err == nil {
		_, err = io.ReadFull(conn, hb[1:])
	}
	if link != nil {
		link.ring.markGone() // before p.mu, which a waiting Send holds
	}
	var flags uint8
	if err == nil {
		var h Header
		if h, err = DecodeHeader(hb[:]); err == nil && h.Kind != KindBye {
			err = &FrameError{Kind: h.Kind, Err: ErrBadKind, Info: "only bye is expected on an outgoing connection"}
		}
		flags = h.Flags
	}
	if e.isClosed() {
		return
	}
	perr := &PeerError{Peer: peer, Op: "send to", Err: ErrPeerLost}
	if err != nil {
		perr.Err = fmt.Errorf("%w: %v", ErrPeerLost, err)
	}
	p.mu.Lock()
	if p.conn != conn {
		// Redirect or Retire replaced this connection on purpose.
		p.mu.Unlock()
		conn.Close()
		return
	}
	if p.err == nil {
		p.err = perr
	}
	p.mu.Unlock()
	conn.Close()
	if err != nil {
		e.handler.PeerClosed(peer, 0, perr)
		return
	}
	// An orderly Bye here may overtake data the peer sent on its own connection to us; the
	// reader of that connection reports the Bye in order. Only a peer that never sent us
	// anything is reported from here.
	e.mu.Lock()
	streaming := e.inPeer[peer] > 0
	e.mu.Unlock()
	if !streaming {
		e.handler.PeerClosed(peer, flags, nil)
	}
}

// doorbell wakes the other side of a shared-memory ring (see shmRing); it cannot start a
// frame header, whose first byte is Magic0.
var doorbell = [1]byte{0}

// byeTimeout bounds the write of a Bye: a peer that does not read it in time is not waited for.
const byeTimeout = time.Second

// sayBye ends a stream in order: the Bye goes after every frame sent before it, through the
// connection's ring if it has one (link), else on the socket.
func sayBye(conn net.Conn, link *shmLink, flags uint8) {
	var b [HeaderSize]byte
	bye := AppendHeader(b[:0], &Header{Kind: KindBye, Flags: flags})
	deadline := time.Now().Add(byeTimeout)
	if link != nil && link.w != nil {
		link.w.write(deadline, bye)
		return
	}
	conn.SetWriteDeadline(deadline)
	conn.Write(bye)
}

// Close implements Endpoint: it says Bye on every connection and closes them.
func (e *TCPEndpoint) Close() error {
	return e.CloseWithFlags(0)
}

// CloseWithFlags closes like Close, with flags (e.g. FlagMigrated) on the Bye frames.
func (e *TCPEndpoint) CloseWithFlags(flags uint8) error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	e.closed = true
	in := make(map[net.Conn]*sync.Mutex, len(e.in))
	for c, m := range e.in {
		in[c] = m
	}
	e.mu.Unlock()
	e.cfg.Listener.Close()
	for _, p := range e.peers {
		p.mu.Lock()
		if p.conn != nil && p.err == nil {
			sayBye(p.conn, p.link, flags)
			p.conn.Close()
		}
		p.link.unmap()
		p.err = ErrClosed
		p.mu.Unlock()
	}
	e.mu.Lock()
	e.inTurn.Broadcast() // connections waiting for their turn give up
	e.mu.Unlock()
	for c, m := range in {
		m.Lock()
		sayBye(c, nil, flags)
		m.Unlock()
		c.Close()
	}
	done := make(chan struct{})
	go func() { e.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		return errors.New("comm: close: connection handlers did not finish within 5s")
	}
	return nil
}

// Handshake. The acceptor sends a nonce; the dialer answers with its rank, the rank it wants,
// its own nonce and an HMAC over all of it; the acceptor proves knowledge of the secret back.
// Fresh nonces on both sides make recorded handshakes useless for replay.

func (e *TCPEndpoint) mac(label byte, parts ...[]byte) []byte {
	m := hmac.New(sha256.New, e.cfg.Secret)
	m.Write([]byte{label})
	for _, p := range parts {
		m.Write(p)
	}
	return m.Sum(nil)
}

func (e *TCPEndpoint) acceptHandshake(conn net.Conn) (*transcript, error) {
	conn.SetDeadline(time.Now().Add(e.cfg.HandshakeTimeout))
	defer conn.SetDeadline(time.Time{})
	var nonceA [nonceSize]byte
	if _, err := rand.Read(nonceA[:]); err != nil {
		return nil, err
	}
	if _, err := conn.Write(append(serverHelloMagic[:], nonceA[:]...)); err != nil {
		return nil, err
	}
	var ch [8 + 4 + 4 + nonceSize + macSize]byte
	if _, err := io.ReadFull(conn, ch[:]); err != nil {
		return nil, fmt.Errorf("reading hello: %w", err)
	}
	if [8]byte(ch[:8]) != clientHelloMagic {
		return nil, fmt.Errorf("%w: not an mpios peer", ErrAuth)
	}
	ranks, nonceD, mac := ch[8:16], ch[16:16+nonceSize], ch[16+nonceSize:]
	if !hmac.Equal(mac, e.mac('c', nonceA[:], ranks, nonceD)) {
		return nil, fmt.Errorf("%w: bad credentials", ErrAuth)
	}
	src, dst := int(binary.LittleEndian.Uint32(ranks[:4])), int(binary.LittleEndian.Uint32(ranks[4:]))
	if dst != e.cfg.Rank {
		return nil, fmt.Errorf("connection meant for rank %d", dst)
	}
	if src < 0 || src >= e.cfg.Size || src == e.cfg.Rank {
		return nil, fmt.Errorf("connection claims rank %d", src)
	}
	// Register before acknowledging: once the dialer may send, a Bye it later sends on our
	// own outgoing connection must find this stream and leave the report to it (see
	// watchOutgoing), so that the Bye cannot overtake data still queued here.
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil, ErrClosed
	}
	e.in[conn] = new(sync.Mutex)
	e.inPeer[src]++
	e.inOrder[src] = append(e.inOrder[src], conn)
	e.mu.Unlock()
	if _, err := conn.Write(e.mac('s', nonceD, nonceA[:], ranks)); err != nil {
		e.unregister(src, conn)
		return nil, err
	}
	return &transcript{nonceA: nonceA[:], nonceD: nonceD, src: src, dst: dst}, nil
}

func (e *TCPEndpoint) dialHandshake(conn net.Conn, peer int) (*transcript, error) {
	conn.SetDeadline(time.Now().Add(e.cfg.HandshakeTimeout))
	defer conn.SetDeadline(time.Time{})
	var sh [8 + nonceSize]byte
	if _, err := io.ReadFull(conn, sh[:]); err != nil {
		return nil, fmt.Errorf("reading server hello: %w", err)
	}
	if [8]byte(sh[:8]) != serverHelloMagic {
		return nil, fmt.Errorf("%w: %s is not an mpios rank", ErrAuth, conn.RemoteAddr())
	}
	nonceA := sh[8:]
	var nonceD [nonceSize]byte
	if _, err := rand.Read(nonceD[:]); err != nil {
		return nil, err
	}
	ranks := binary.LittleEndian.AppendUint32(binary.LittleEndian.AppendUint32(nil, uint32(e.cfg.Rank)), uint32(peer))
	msg := append(append(append(clientHelloMagic[:], ranks...), nonceD[:]...), e.mac('c', nonceA, ranks, nonceD[:])...)
	if _, err := conn.Write(msg); err != nil {
		return nil, err
	}
	var ack [macSize]byte
	if _, err := io.ReadFull(conn, ack[:]); err != nil {
		return nil, fmt.Errorf("reading handshake ack (wrong job secret or wrong rank?): %w", err)
	}
	if !hmac.Equal(ack[:], e.mac('s', nonceD[:], nonceA, ranks)) {
		return nil, fmt.Errorf("%w: rank %d at %s did not prove the job secret", ErrAuth, peer, conn.RemoteAddr())
	}
	return &transcript{nonceA: nonceA, nonceD: nonceD[:], src: e.cfg.Rank, dst: peer}, nil
}

// Abandon closes every connection and the listener without a Bye, as the kernel does when a
// process dies. Peers see ErrPeerLost. It exists for failure tests.
func (e *TCPEndpoint) Abandon() {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return
	}
	e.closed = true
	var in []net.Conn
	for c := range e.in {
		in = append(in, c)
	}
	e.mu.Unlock()
	e.cfg.Listener.Close()
	for _, p := range e.peers {
		p.mu.Lock()
		if p.conn != nil {
			p.conn.Close()
		}
		p.link.unmap()
		p.err = ErrClosed
		p.mu.Unlock()
	}
	for _, c := range in {
		c.Close()
	}
}

// Addrs returns the current data-plane address of every rank.
func (e *TCPEndpoint) Addrs() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.cfg.Addrs)
}

// Redirect points this endpoint at the successor of a migrated peer: the connection to the
// old process ends with a Bye carrying FlagMigrated (after every frame already sent on it),
// and the next Send to peer dials addr. Frames the successor sends are read only after the
// old process's stream to us has ended, so the peer's frames keep their order. Call it when
// no Send to peer is in progress.
func (e *TCPEndpoint) Redirect(peer int, addr string) error {
	if peer < 0 || peer >= e.cfg.Size || peer == e.cfg.Rank {
		return fmt.Errorf("comm: redirect rank %d: not a peer of rank %d (size %d)", peer, e.cfg.Rank, e.cfg.Size)
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return fmt.Errorf("comm: redirect rank %d: address %q: %w", peer, addr, err)
	}
	p := e.peers[peer]
	p.dial.Lock()
	defer p.dial.Unlock()
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return ErrClosed
	}
	e.cfg.Addrs[peer] = addr
	e.mu.Unlock()
	p.mu.Lock()
	if p.conn != nil {
		sayBye(p.conn, p.link, FlagMigrated)
		p.conn.Close()
	}
	p.link.unmap()
	p.conn, p.link, p.err = nil, nil, nil
	p.mu.Unlock()
	return nil
}

// ErrRetireTimeout reports that peers did not close their connections to a retiring
// endpoint in time (some peer did not Redirect).
var ErrRetireTimeout = errors.New("comm: retire: peers still connected")

// Retire ends this endpoint's part in the job because a successor process takes over its
// rank. It says Bye with FlagMigrated on every outgoing connection, then waits, up to
// timeout, until every peer has closed its connection to this rank (each peer Redirects
// first), so every frame peers sent to this process has been handed to the Handler; then
// it closes the endpoint. The Handler sees no PeerClosed for any of it.
func (e *TCPEndpoint) Retire(timeout time.Duration) error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return ErrClosed
	}
	e.retiring = true
	e.mu.Unlock()
	for _, p := range e.peers {
		p.dial.Lock()
		p.mu.Lock()
		if p.conn != nil && p.err == nil {
			sayBye(p.conn, p.link, FlagMigrated)
			p.conn.Close()
		}
		p.link.unmap()
		p.conn, p.link, p.err = nil, nil, ErrClosed
		p.mu.Unlock()
		p.dial.Unlock()
	}
	deadline := time.Now().Add(timeout)
	var err error
	for {
		e.mu.Lock()
		var waiting []int
		for peer, n := range e.inPeer {
			if n > 0 {
				waiting = append(waiting, peer)
			}
		}
		e.mu.Unlock()
		if len(waiting) == 0 {
			break
		}
		if time.Now().After(deadline) {
			err = fmt.Errorf("%w after %v: rank(s) %v", ErrRetireTimeout, timeout, waiting)
			break
		}
		time.Sleep(200 * time.Microsecond)
	}
	if cerr := e.CloseWithFlags(FlagMigrated); err == nil {
		err = cerr
	}
	return err
}
