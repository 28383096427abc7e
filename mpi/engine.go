package mpi

import (
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/mpios/mpios/comm"
)

// eagerLimit is the largest message sent eagerly (whole, without waiting for the receiver).
// Larger messages use the rendezvous protocol: an RTS is matched like any message, and the data
// moves only once the receive is posted, straight into the receive buffer.
const eagerLimit = 64 << 10

// dataChunk is the size of the Data frames that carry a rendezvous message; chunking lets small
// messages to the same peer slip in between the chunks of a large one.
const dataChunk = 1 << 20

// defaultUnexpectedLimit bounds the eager bytes one peer may have queued unmatched at this rank;
// beyond it this rank stops reading from that peer (TCP back-pressure) until receives drain it.
const defaultUnexpectedLimit = 64 << 20

// closedChan is the done channel of requests that complete when they are created.
var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// message is an arrived message that no posted receive matched yet.
type message struct {
	peer   int // world rank of the sender
	tag    int32
	elem   uint8
	total  uint64
	data   []byte // eager payload; nil for an RTS
	rts    bool
	sendID uint64   // the sender's request id (RTS)
	ack    *Request // a synchronous send to this rank itself, completed when the message matches
}

// queues holds one context's posted receives and unexpected messages, each in arrival order.
type queues struct {
	posted []*Request
	unexp  []*message
}

// engine is one process's matching engine and protocol state. It is the comm.Handler of the
// process's endpoint. Lock order: engine.mu is never held while calling the endpoint.
type engine struct {
	ep         comm.Endpoint
	rank, size int

	nextID atomic.Uint64

	mu       sync.Mutex
	ctxs     map[uint32]*queues
	sends    map[uint64]*Request // rendezvous sends waiting for CTS
	recvs    map[uint64]*Request // rendezvous receives waiting for data
	inflight []*Request          // per peer: the receive its eager payload is being read into
	peerErr  []error             // set once a peer failed or finalized
	broken   error               // job-wide failure: every operation fails with it
	closed   bool
	retired  bool // the rank moved to a successor process (see migrate.go)
	// revoked: a resize replaced this world (see resize.go). Set under mu; atomic so that
	// Comm.valid reads it on every call without the lock.
	revoked   atomic.Bool
	unexpSize []int64 // eager bytes queued unmatched, per peer
	unexpMax  int64
	space     *sync.Cond // unexpected bytes drained, or a failure
	arrived   *sync.Cond // a message was queued (Probe waits on it)
	nextCtx   uint32     // next free communicator context (even; ctx+1 is its collective context)
	claimed   int        // messages taken by Mprobe and not yet received

	// nonblockingColls counts the nonblocking collectives (Iallreduce, ...) not completed yet.
	nonblockingColls atomic.Int64

	// waitHint is the endpoint's comm.WaitNotifier, if it has one.
	waitHint comm.WaitNotifier
	// poller is the endpoint's comm.Poller, if it has one.
	poller comm.Poller

	// onPeerLost, if set, is told about a peer lost without a goodbye before the calls that
	// wait on it fail (Init uses it to tell the launcher which rank died first).
	onPeerLost func(peer int, err error)
}

func newEngine(ep comm.Endpoint) *engine {
	e := &engine{
		ep: ep, rank: ep.Rank(), size: ep.Size(),
		ctxs:      make(map[uint32]*queues),
		sends:     make(map[uint64]*Request),
		recvs:     make(map[uint64]*Request),
		inflight:  make([]*Request, ep.Size()),
		peerErr:   make([]error, ep.Size()),
		unexpSize: make([]int64, ep.Size()),
		unexpMax:  defaultUnexpectedLimit,
		nextCtx:   2,
	}
	e.space = sync.NewCond(&e.mu)
	e.arrived = sync.NewCond(&e.mu)
	e.waitHint, _ = ep.(comm.WaitNotifier)
	e.poller, _ = ep.(comm.Poller)
	return e
}

func (e *engine) queues(ctx uint32) *queues {
	q := e.ctxs[ctx]
	if q == nil {
		q = &queues{}
		e.ctxs[ctx] = q
	}
	return q
}

func matches(r *Request, peer int, tag int32) bool {
	return (r.peer == AnySource || r.peer == peer) && (r.tag == AnyTag || int32(r.tag) == tag)
}

// HandleFrame implements comm.Handler for Eager, RTS and CTS frames.
func (e *engine) HandleFrame(peer int, h *comm.Header, payload []byte) error {
	switch h.Kind {
	case comm.KindEager, comm.KindRTS:
		e.arrive(peer, h, payload, true)
		return nil
	case comm.KindCTS:
		e.mu.Lock()
		s := e.sends[h.ID]
		if s != nil && s.dest != peer {
			e.mu.Unlock()
			return fmt.Errorf("mpi: clear-to-send from rank %d for a message to rank %d", peer, s.dest)
		}
		delete(e.sends, h.ID)
		e.mu.Unlock()
		if s == nil {
			return nil // the send already failed; nothing to do
		}
		if h.Flags&comm.FlagDiscard != 0 {
			s.complete(Status{}, nil) // the receive failed on its side; the send is done
			return nil
		}
		go e.writeData(s, h.ID2)
		return nil
	}
	return fmt.Errorf("mpi: unexpected %v frame", h.Kind)
}

// arrive matches a message from peer against the posted receives of its context, or queues it.
// fromNet is false for messages a rank sends itself, which must never wait for queue space.
func (e *engine) arrive(peer int, h *comm.Header, payload []byte, fromNet bool) {
	e.arriveAck(peer, h, payload, fromNet, nil)
}

// arriveAck is arrive for a synchronous send of a rank to itself: ack completes when a
// receive matches the message.
func (e *engine) arriveAck(peer int, h *comm.Header, payload []byte, fromNet bool, ack *Request) {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return
	}
	q := e.queues(h.Ctx)
	for i, r := range q.posted {
		if matches(r, peer, h.Tag) {
			q.posted = append(q.posted[:i], q.posted[i+1:]...)
			e.mu.Unlock()
			if h.Kind == comm.KindRTS {
				e.startRendezvous(r, peer, h.Tag, h.Elem, h.Total, h.ID, true)
			} else {
				r.deliver(peer, h.Tag, h.Elem, payload)
				if ack != nil {
					e.acknowledge(ack)
				}
			}
			return
		}
	}
	m := &message{peer: peer, tag: h.Tag, elem: h.Elem, total: h.Total, rts: h.Kind == comm.KindRTS, sendID: h.ID, ack: ack}
	if !m.rts {
		m.data = append([]byte(nil), payload...)
		e.unexpSize[peer] += int64(len(m.data))
	}
	q.unexp = append(q.unexp, m)
	e.arrived.Broadcast()
	for fromNet && e.unexpSize[peer] > e.unexpMax && !e.closed && e.broken == nil && e.peerErr[peer] == nil {
		e.space.Wait()
	}
	e.mu.Unlock()
}

// EagerBuffer implements comm.EagerReceiver: a large eager payload whose receive is already
// posted is read by the transport straight into the receive buffer. Only a receive that takes
// the message as it is qualifies (no truncation, type mismatch or growing buffer); for the
// others the frame goes the usual way through HandleFrame.
func (e *engine) EagerBuffer(peer int, h *comm.Header) []byte {
	e.mu.Lock()
	defer e.mu.Unlock()
	q := e.ctxs[h.Ctx]
	if e.closed || q == nil {
		return nil
	}
	for i, r := range q.posted {
		if !matches(r, peer, h.Tag) {
			continue
		}
		if r.alloc || h.Total > uint64(len(r.buf)) || (h.Elem != r.elem && r.elem != elemRaw) || h.Total%uint64(r.esize) != 0 {
			return nil
		}
		q.posted = append(q.posted[:i], q.posted[i+1:]...)
		e.inflight[peer] = r
		return r.buf[:h.Len]
	}
	return nil
}

// EagerDone implements comm.EagerReceiver.
func (e *engine) EagerDone(peer int, h *comm.Header, err error) {
	e.mu.Lock()
	r := e.inflight[peer]
	e.inflight[peer] = nil
	e.mu.Unlock()
	if r == nil {
		return
	}
	if err != nil {
		r.complete(Status{Source: r.comm.commRank(peer), Tag: int(h.Tag)}, &ProcFailedError{Rank: peer, Reason: fmt.Sprintf("reading a message: %v", err)})
		return
	}
	r.buf = r.buf[:h.Len]
	r.complete(r.check(peer, h.Tag, h.Elem, h.Total))
}

// post matches a new receive against the unexpected messages of its context, or posts it.
func (e *engine) post(r *Request) error {
	e.mu.Lock()
	if err := e.failure(); err != nil {
		e.mu.Unlock()
		return err
	}
	q := e.queues(r.ctx)
	for i, m := range q.unexp {
		if matches(r, m.peer, m.tag) {
			q.unexp = append(q.unexp[:i], q.unexp[i+1:]...)
			if !m.rts {
				e.unexpSize[m.peer] -= int64(len(m.data))
				e.space.Broadcast()
			}
			e.mu.Unlock()
			e.receive(r, m)
			return nil
		}
	}
	// No message yet: a receive that can only be satisfied by a dead or finalized peer fails now.
	if r.peer >= 0 {
		if err := e.peerErr[r.peer]; err != nil {
			e.mu.Unlock()
			return err
		}
	}
	q.posted = append(q.posted, r)
	e.mu.Unlock()
	return nil
}

// receive completes receive r with message m, taken out of the unexpected queue: it delivers
// an eager payload or starts the rendezvous of a large or synchronous one.
func (e *engine) receive(r *Request, m *message) {
	if m.rts {
		e.startRendezvous(r, m.peer, m.tag, m.elem, m.total, m.sendID, false)
		return
	}
	r.deliver(m.peer, m.tag, m.elem, m.data)
	if m.ack != nil {
		e.acknowledge(m.ack)
	}
}

// acknowledge completes a synchronous send of this rank to itself whose message matched.
func (e *engine) acknowledge(ack *Request) {
	e.mu.Lock()
	delete(e.sends, ack.id)
	e.mu.Unlock()
	ack.complete(Status{}, nil)
}

// startRendezvous answers an RTS that receive r matched: it checks the buffer, registers r for
// the data and sends clear-to-send. async is set on the transport's reader goroutine, which
// must not block on a write to the peer it is reading from.
func (e *engine) startRendezvous(r *Request, peer int, tag int32, elem uint8, total, sendID uint64, async bool) {
	cts := &comm.Header{Kind: comm.KindCTS, ID: sendID}
	status, err := r.check(peer, tag, elem, total)
	if err == nil && total > uint64(len(r.buf)) && r.alloc {
		r.buf = make([]byte, total)
	}
	if err != nil || total == 0 {
		cts.Flags = comm.FlagDiscard
		r.complete(status, err)
	} else {
		r.id = e.nextID.Add(1)
		r.peer, r.total, r.status = peer, total, status
		r.buf = r.buf[:total]
		e.mu.Lock()
		e.recvs[r.id] = r
		e.mu.Unlock()
		cts.ID2 = r.id
	}
	send := func() {
		if err := e.ep.Send(peer, cts, nil); err != nil && cts.ID2 != 0 {
			// cts.ID2, not r.id: a receive that completed meanwhile (its peer failed) may be
			// recycled already (putRequest).
			e.mu.Lock()
			_, mine := e.recvs[cts.ID2]
			delete(e.recvs, cts.ID2)
			e.mu.Unlock()
			if mine {
				r.complete(r.status, err)
			}
		}
	}
	if async {
		go send()
	} else {
		send()
	}
}

// DataBuffer implements comm.Handler: rendezvous data goes straight into the receive buffer.
func (e *engine) DataBuffer(peer int, h *comm.Header) ([]byte, error) {
	e.mu.Lock()
	r := e.recvs[h.ID2]
	e.mu.Unlock()
	if r == nil {
		return nil, nil // the receive failed meanwhile; drop the data
	}
	if r.peer != peer || h.Total != r.total {
		return nil, fmt.Errorf("mpi: data from rank %d does not belong to its receive", peer)
	}
	return r.buf[h.Offset : h.Offset+uint64(h.Len)], nil
}

// DataDone implements comm.Handler.
func (e *engine) DataDone(peer int, h *comm.Header) error {
	e.mu.Lock()
	r := e.recvs[h.ID2]
	if r == nil {
		e.mu.Unlock()
		return nil
	}
	r.got += uint64(h.Len)
	done := r.got >= r.total
	if done {
		delete(e.recvs, h.ID2)
	}
	e.mu.Unlock()
	if done {
		r.complete(r.status, nil)
	}
	return nil
}

// writeData streams a rendezvous send's data to its receiver in chunks.
func (e *engine) writeData(s *Request, recvID uint64) {
	total := uint64(len(s.buf))
	for off := uint64(0); off < total; off += dataChunk {
		n := min(dataChunk, total-off)
		h := &comm.Header{Kind: comm.KindData, Elem: s.elem, ID2: recvID, Total: total, Offset: off, Len: uint32(n)}
		if err := e.ep.Send(s.dest, h, s.buf[off:off+n]); err != nil {
			s.complete(Status{}, e.sendError(s.dest, err))
			return
		}
	}
	s.complete(Status{}, nil)
}

// failure returns the job-wide error, if any. Caller holds e.mu.
func (e *engine) failure() error {
	if e.broken != nil {
		return e.broken
	}
	if e.retired {
		return ErrMigrated
	}
	if e.revoked.Load() {
		return &StaleCommError{Op: "operation"}
	}
	if e.closed {
		return ErrFinalized
	}
	return nil
}

// peerFailure returns why nothing can be sent to world rank w: the job-wide error, or the
// error that rank's connection failed with; nil if sending may proceed.
func (e *engine) peerFailure(w int) error {
	e.mu.Lock()
	err := e.failure()
	if err == nil {
		err = e.peerErr[w]
	}
	e.mu.Unlock()
	return err
}

// sendError turns a transport error into the error the application sees.
func (e *engine) sendError(peer int, err error) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.broken != nil {
		return e.broken
	}
	if pe := e.peerErr[peer]; pe != nil {
		return pe
	}
	return &ProcFailedError{Rank: peer, Reason: err.Error()}
}

// PeerClosed implements comm.Handler.
func (e *engine) PeerClosed(peer int, flags uint8, err error) {
	if err == nil && flags&comm.FlagMigrated != 0 {
		return // the rank lives on in its successor
	}
	var perr error
	if err == nil {
		perr = fmt.Errorf("%w: rank %d", ErrPeerFinalized, peer)
	} else {
		perr = &ProcFailedError{Rank: peer, Reason: err.Error()}
	}
	e.mu.Lock()
	if e.closed || e.peerErr[peer] != nil {
		e.mu.Unlock()
		return
	}
	if err != nil && e.onPeerLost != nil {
		e.mu.Unlock()
		e.onPeerLost(peer, err)
		e.mu.Lock()
		if e.closed || e.peerErr[peer] != nil {
			e.mu.Unlock()
			return
		}
	}
	e.peerErr[peer] = perr
	var failed []*Request
	for _, q := range e.ctxs {
		kept := q.posted[:0]
		for _, r := range q.posted {
			// An AnySource receive could be waiting for the dead rank's message.
			if r.peer == peer || (r.peer == AnySource && err != nil && r.comm.has(peer)) {
				failed = append(failed, r)
			} else {
				kept = append(kept, r)
			}
		}
		clear(q.posted[len(kept):])
		q.posted = kept
	}
	for id, s := range e.sends {
		if s.dest == peer {
			delete(e.sends, id)
			failed = append(failed, s)
		}
	}
	for id, r := range e.recvs {
		if r.peer == peer {
			delete(e.recvs, id)
			failed = append(failed, r)
		}
	}
	e.space.Broadcast()
	e.arrived.Broadcast()
	e.mu.Unlock()
	for _, r := range failed {
		r.complete(r.status, perr)
	}
}

// breakJob fails every pending and future operation with err: the launcher reported that a
// rank died, so any collective may wait forever on it (directly or through a peer).
func (e *engine) breakJob(err error) {
	e.mu.Lock()
	if e.broken != nil || e.closed {
		e.mu.Unlock()
		return
	}
	e.broken = err
	failed := e.takeAllPending()
	e.mu.Unlock()
	for _, r := range failed {
		r.complete(r.status, err)
	}
}

// takeAllPending removes every pending request. Caller holds e.mu.
func (e *engine) takeAllPending() []*Request {
	var all []*Request
	for _, q := range e.ctxs {
		all = append(all, q.posted...)
		q.posted = nil
	}
	for id, s := range e.sends {
		all = append(all, s)
		delete(e.sends, id)
	}
	for id, r := range e.recvs {
		all = append(all, r)
		delete(e.recvs, id)
	}
	e.space.Broadcast()
	e.arrived.Broadcast()
	return all
}

func (e *engine) isRetired() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.retired
}

// pending counts this process's incomplete nonblocking operations.
func (e *engine) pending() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := len(e.sends) + len(e.recvs) + e.claimed + int(e.nonblockingColls.Load())
	for _, r := range e.inflight {
		if r != nil {
			n++
		}
	}
	for _, q := range e.ctxs {
		n += len(q.posted)
	}
	return n
}

// close shuts the engine down; pending operations fail with ErrFinalized.
func (e *engine) close() {
	e.mu.Lock()
	failed := e.takeAllPending()
	e.closed = true
	e.mu.Unlock()
	for _, r := range failed {
		r.complete(r.status, ErrFinalized)
	}
}

// probe looks for a matching unexpected message; with wait it blocks until one arrives.
func (e *engine) probe(c *Comm, ctx uint32, peer, tag int, wait bool) (Status, bool, error) {
	_, st, ok, err := e.find(c, ctx, peer, tag, wait, false)
	return st, ok, err
}

// take is probe that also takes the message out of the unexpected queue (Mprobe).
func (e *engine) take(c *Comm, ctx uint32, peer, tag int, wait bool) (*message, Status, bool, error) {
	return e.find(c, ctx, peer, tag, wait, true)
}

func (e *engine) find(c *Comm, ctx uint32, peer, tag int, wait, take bool) (*message, Status, bool, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	probe := &Request{peer: peer, tag: tag}
	for {
		if err := e.failure(); err != nil {
			return nil, Status{}, false, err
		}
		if q := e.ctxs[ctx]; q != nil {
			for i, m := range q.unexp {
				if matches(probe, m.peer, m.tag) {
					if take {
						q.unexp = append(q.unexp[:i], q.unexp[i+1:]...)
						e.unexpSize[m.peer] -= int64(len(m.data))
						e.claimed++
						e.space.Broadcast()
					}
					return m, Status{Source: c.commRank(m.peer), Tag: int(m.tag), Count: int(m.total) / elemSize(m.elem)}, true, nil
				}
			}
		}
		if peer >= 0 && e.peerErr[peer] != nil {
			return nil, Status{}, false, e.peerErr[peer]
		}
		if !wait {
			return nil, Status{}, false, nil
		}
		e.arrived.Wait()
	}
}

// elemSize is the size of one element of a wire type (1 for raw bytes and values).
func elemSize(code uint8) int {
	switch code {
	case elemInt16, elemUint16:
		return 2
	case elemInt32, elemUint32, elemFloat32:
		return 4
	case elemInt, elemUint:
		return strconv.IntSize / 8
	case elemInt64, elemUint64, elemFloat64, elemComplex64:
		return 8
	case elemComplex128:
		return 16
	}
	return 1
}
