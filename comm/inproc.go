package comm

import (
	"fmt"
	"sync"
)

// InProcNetwork connects goroutine ranks inside one process. A frame is handed to the receiving
// rank's Handler synchronously, by the sending goroutine, under a per-pair lock: per-pair order
// holds, and a Handler that blocks applies back-pressure to that sender, as TCP does.
type InProcNetwork struct {
	eps []*InProcEndpoint
}

// InProcEndpoint is one rank of an InProcNetwork.
type InProcEndpoint struct {
	net     *InProcNetwork
	rank    int
	ready   chan struct{} // closed by Start
	handler Handler
	pairs   []sync.Mutex // pairs[dst] serializes frames from this rank to dst

	mu     sync.Mutex
	closed bool
	failed bool
}

// NewInProcNetwork returns n connected endpoints, ranks 0..n-1.
func NewInProcNetwork(n int) *InProcNetwork {
	nw := &InProcNetwork{eps: make([]*InProcEndpoint, n)}
	for i := range nw.eps {
		nw.eps[i] = &InProcEndpoint{net: nw, rank: i, ready: make(chan struct{}), pairs: make([]sync.Mutex, n)}
	}
	return nw
}

// Endpoint returns rank r's endpoint.
func (nw *InProcNetwork) Endpoint(r int) *InProcEndpoint { return nw.eps[r] }

// Rank implements Endpoint.
func (e *InProcEndpoint) Rank() int { return e.rank }

// Size implements Endpoint.
func (e *InProcEndpoint) Size() int { return len(e.net.eps) }

// Start implements Endpoint.
func (e *InProcEndpoint) Start(h Handler) error {
	if h == nil {
		return fmt.Errorf("comm: nil handler")
	}
	e.handler = h
	close(e.ready)
	return nil
}

func (e *InProcEndpoint) state() (closed, failed bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.closed, e.failed
}

// Send implements Endpoint.
func (e *InProcEndpoint) Send(peer int, h *Header, payload []byte) error {
	if peer < 0 || peer >= len(e.net.eps) || peer == e.rank {
		return fmt.Errorf("comm: send to rank %d: not a peer of rank %d (size %d)", peer, e.rank, len(e.net.eps))
	}
	if len(payload) != int(h.Len) {
		return fmt.Errorf("comm: payload of %d bytes, header says %d", len(payload), h.Len)
	}
	if err := h.Validate(); err != nil {
		return err
	}
	if closed, _ := e.state(); closed {
		return ErrClosed
	}
	dst := e.net.eps[peer]
	if closed, failed := dst.state(); closed || failed {
		return &PeerError{Peer: peer, Op: "send to", Err: ErrPeerLost}
	}
	<-dst.ready
	e.pairs[peer].Lock()
	defer e.pairs[peer].Unlock()
	hc := *h // the handler may keep nothing of ours
	switch h.Kind {
	case KindData:
		buf, err := dst.handler.DataBuffer(e.rank, &hc)
		if err != nil {
			return err
		}
		if buf != nil {
			copy(buf, payload)
			return dst.handler.DataDone(e.rank, &hc)
		}
		return nil
	case KindBye:
		dst.handler.PeerClosed(e.rank, h.Flags, nil)
		return nil
	default:
		return dst.handler.HandleFrame(e.rank, &hc, payload)
	}
}

// Close implements Endpoint: peers see an orderly goodbye.
func (e *InProcEndpoint) Close() error {
	return e.shutdown(false)
}

// Fail simulates the death of this rank: peers see ErrPeerLost.
func (e *InProcEndpoint) Fail() {
	e.shutdown(true)
}

func (e *InProcEndpoint) shutdown(failed bool) error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	e.closed, e.failed = true, failed
	e.mu.Unlock()
	for _, p := range e.net.eps {
		if p == e {
			continue
		}
		if c, _ := p.state(); c {
			continue
		}
		select {
		case <-p.ready:
		default:
			continue
		}
		if failed {
			p.handler.PeerClosed(e.rank, 0, &PeerError{Peer: e.rank, Op: "receive from", Err: ErrPeerLost})
		} else {
			p.handler.PeerClosed(e.rank, 0, nil)
		}
	}
	return nil
}
