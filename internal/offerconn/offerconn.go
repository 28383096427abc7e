// Package offerconn is the connection of a node's one-time offer (internal/pieceserver): a
// piece lent to a restarting rank, or a buddy copy taken from a rank. The requester dials
// the address the offer's reply names and presents its proof first; on both ends, a read or
// write that moves no byte for the idle limit fails, so that a frozen or cut-off peer ends
// the transfer in bounded time.
package offerconn

import (
	"fmt"
	"net"
	"time"
)

// IdleTimeout is how long either end of an offer's connection waits for the other to move a
// byte before the transfer fails. A peer that froze (SIGSTOP, a stalled disk) or vanished
// without closing the connection (a cut link) would otherwise block the fetch of a
// restarting rank, a rank's buddy copy or the node's side of it for good: TCP keeps an
// idle connection open, and retransmits to a silent peer for a quarter of an hour. The
// limit is generous because the buddy acknowledges a copy only once it is durable, which
// on a slow disk takes a while after the last byte.
const IdleTimeout = 2 * time.Minute

// largestIdleWrite bounds one write under one deadline: a large buffer is written in parts,
// each of which must go within the idle limit, rather than all of it.
const largestIdleWrite = 1 << 20

// Dial connects to an offer at addr (the reply to a piece or copy request) within timeout
// and presents proof, the HMAC of the offer's token under the job key (OfferProof). Reads
// and writes on the connection it returns fail once the node moves no byte for idle
// (IdleTimeout if 0).
func Dial(addr string, proof []byte, timeout, idle time.Duration) (net.Conn, error) {
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return nil, err
	}
	ic := Idle(c, idle)
	if _, err := ic.Write(proof); err != nil {
		c.Close()
		return nil, fmt.Errorf("present the offer's proof: %w", err)
	}
	return ic, nil
}

// Idle returns c whose every Read and Write fails once no byte moves for idle (IdleTimeout
// if 0): the node's end of an offer's connection.
func Idle(c net.Conn, idle time.Duration) net.Conn {
	if idle <= 0 {
		idle = IdleTimeout
	}
	return &idleLimited{Conn: c, idle: idle}
}

type idleLimited struct {
	net.Conn
	idle time.Duration
}

func (c *idleLimited) Read(p []byte) (int, error) {
	if err := c.Conn.SetReadDeadline(time.Now().Add(c.idle)); err != nil {
		return 0, err
	}
	return c.Conn.Read(p)
}

func (c *idleLimited) Write(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		if err := c.Conn.SetWriteDeadline(time.Now().Add(c.idle)); err != nil {
			return n, err
		}
		k, err := c.Conn.Write(p[n:min(len(p), n+largestIdleWrite)])
		n += k
		if err != nil {
			return n, err
		}
	}
	return n, nil
}
