package rewire

import (
	"bufio"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

// Frame types of the hand-over connection.
const (
	frameState  = 1 // a piece of the state blob; a zero-length piece ends it
	frameAck    = 2 // payload: "" for success, else the reason for refusing
	frameFinal  = 3 // payload: msgpack Final
	frameHint   = 4 // payload: u64, the expected state size (to allocate once)
	maxControl  = 64 << 20
	stateChunk  = 1 << 20
	idleTimeout = 2 * time.Minute // no progress for this long on the hand-over: give up
)

var (
	helloMagic  = [8]byte{'M', 'P', 'I', 'O', 'S', 'H', 'O', '1'}
	answerMagic = [8]byte{'M', 'P', 'I', 'O', 'S', 'H', 'O', 'A'}
)

// ErrAuth reports a hand-over connection that failed authentication.
var ErrAuth = errors.New("rewire: hand-over authentication failed")

func mac(secret, nonce []byte, rank int, token []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte{'m'})
	m.Write(nonce)
	m.Write(binary.LittleEndian.AppendUint32(nil, uint32(rank)))
	m.Write(token)
	return m.Sum(nil)
}

// ParseSpec decodes a Spec from its String form.
func ParseSpec(s string) (Spec, error) {
	i := strings.LastIndexByte(s, '/')
	if i < 0 {
		return Spec{}, fmt.Errorf("rewire: hand-over spec %q: want host:port/token", s)
	}
	tok, err := hex.DecodeString(s[i+1:])
	if err != nil || len(tok) < 16 {
		return Spec{}, fmt.Errorf("rewire: hand-over spec %q: token is not at least 32 hex digits", s)
	}
	if _, _, err := net.SplitHostPort(s[:i]); err != nil {
		return Spec{}, fmt.Errorf("rewire: hand-over spec %q: %w", s, err)
	}
	return Spec{Addr: s[:i], Token: tok}, nil
}

// conn frames messages on a hand-over connection.
type conn struct {
	c  net.Conn
	br *bufio.Reader
	bw *bufio.Writer
}

func newConn(c net.Conn) *conn {
	return &conn{c: c, br: bufio.NewReaderSize(c, 1<<20), bw: bufio.NewWriterSize(c, 1<<20)}
}

func (c *conn) writeFrame(kind byte, payload []byte) error {
	var h [9]byte
	h[0] = kind
	binary.LittleEndian.PutUint64(h[1:], uint64(len(payload)))
	c.c.SetWriteDeadline(time.Now().Add(idleTimeout))
	if _, err := c.bw.Write(h[:]); err != nil {
		return err
	}
	_, err := c.bw.Write(payload)
	return err
}

func (c *conn) flush() error {
	c.c.SetWriteDeadline(time.Now().Add(idleTimeout))
	return c.bw.Flush()
}

// readHeader reads a frame header, waiting at most wait.
func (c *conn) readHeader(wait time.Duration) (byte, uint64, error) {
	c.c.SetReadDeadline(time.Now().Add(wait))
	var h [9]byte
	if _, err := io.ReadFull(c.br, h[:]); err != nil {
		return 0, 0, err
	}
	return h[0], binary.LittleEndian.Uint64(h[1:]), nil
}

// readControl reads a small frame of kind want.
func (c *conn) readControl(want byte, wait time.Duration) ([]byte, error) {
	kind, n, err := c.readHeader(wait)
	if err != nil {
		return nil, err
	}
	if kind != want || n > maxControl {
		return nil, fmt.Errorf("rewire: hand-over protocol error: frame %d of %d bytes, want frame %d", kind, n, want)
	}
	b := make([]byte, n)
	c.c.SetReadDeadline(time.Now().Add(idleTimeout))
	if _, err := io.ReadFull(c.br, b); err != nil {
		return nil, err
	}
	return b, nil
}

func (c *conn) ack(reason string) error {
	if err := c.writeFrame(frameAck, []byte(reason)); err != nil {
		return err
	}
	return c.flush()
}

func (c *conn) waitAck(wait time.Duration) error {
	b, err := c.readControl(frameAck, wait)
	if err != nil {
		return err
	}
	if len(b) > 0 {
		return fmt.Errorf("successor refused: %s", b)
	}
	return nil
}

// Predecessor is the old process's end of a hand-over.
type Predecessor struct {
	cancel chan string // Cancel's reason
	once   sync.Once
	ln     net.Listener
	secret []byte
	rank   int
	token  []byte
	c      *conn
	addr   string // the successor's data-plane address
}

// Listen opens the hand-over listener of rank on host bind (the successor dials it).
func Listen(bind string, secret []byte, rank int) (*Predecessor, error) {
	token := make([]byte, 16)
	if _, err := rand.Read(token); err != nil {
		return nil, fmt.Errorf("rewire: token: %w", err)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(bind, "0"))
	if err != nil {
		return nil, fmt.Errorf("rewire: hand-over listener on %s: %w", bind, err)
	}
	return &Predecessor{ln: ln, secret: secret, rank: rank, token: token, cancel: make(chan string, 1)}, nil
}

// Cancel makes a pending Accept fail with reason (the successor is known to be gone).
func (p *Predecessor) Cancel(reason string) {
	p.once.Do(func() {
		p.cancel <- reason
		p.ln.Close()
	})
}

// Spec tells the successor where and how to reach this predecessor.
func (p *Predecessor) Spec() Spec { return Spec{Addr: p.ln.Addr().String(), Token: p.token} }

// Accept waits up to timeout for the successor to connect and authenticate, and returns its
// data-plane address. Connections that fail authentication are dropped and waiting goes on.
func (p *Predecessor) Accept(timeout time.Duration) (string, error) {
	deadline := time.Now().Add(timeout)
	defer p.ln.Close()
	var lastErr error
	for {
		if tl, ok := p.ln.(*net.TCPListener); ok {
			tl.SetDeadline(deadline)
		}
		c, err := p.ln.Accept()
		if err != nil {
			select {
			case reason := <-p.cancel:
				return "", errors.New(reason)
			default:
			}
			if lastErr != nil {
				return "", fmt.Errorf("rewire: no successor within %v (last attempt: %v)", timeout, lastErr)
			}
			return "", fmt.Errorf("rewire: no successor connected within %v: %w", timeout, err)
		}
		addr, err := p.handshake(c, deadline)
		if err != nil {
			c.Close()
			lastErr = err
			continue
		}
		p.addr = addr
		return addr, nil
	}
}

func (p *Predecessor) handshake(c net.Conn, deadline time.Time) (string, error) {
	c.SetDeadline(deadline)
	nonce := make([]byte, 16)
	if _, err := rand.Read(nonce); err != nil {
		return "", err
	}
	if _, err := c.Write(append(answerMagic[:], nonce...)); err != nil {
		return "", err
	}
	var hdr [8 + 4 + sha256.Size + 2]byte
	if _, err := io.ReadFull(c, hdr[:]); err != nil {
		return "", fmt.Errorf("reading hello: %w", err)
	}
	if [8]byte(hdr[:8]) != helloMagic {
		return "", fmt.Errorf("%w: not an mpios successor", ErrAuth)
	}
	rank := int(binary.LittleEndian.Uint32(hdr[8:12]))
	if rank != p.rank || !hmac.Equal(hdr[12:12+sha256.Size], mac(p.secret, nonce, rank, p.token)) {
		return "", fmt.Errorf("%w: bad credentials for rank %d", ErrAuth, rank)
	}
	n := binary.LittleEndian.Uint16(hdr[12+sha256.Size:])
	addr := make([]byte, n)
	if _, err := io.ReadFull(c, addr); err != nil {
		return "", err
	}
	if _, _, err := net.SplitHostPort(string(addr)); err != nil {
		return "", fmt.Errorf("successor address %q: %w", addr, err)
	}
	c.SetDeadline(time.Time{})
	p.c = newConn(c)
	return string(addr), nil
}

// SendState streams the state blob that write produces (sizeHint bytes expected) and waits
// for the successor's acknowledgement.
func (p *Predecessor) SendState(sizeHint int64, write func(io.Writer) error) error {
	if p.c == nil {
		return errors.New("rewire: SendState before Accept")
	}
	if err := p.c.writeFrame(frameHint, binary.LittleEndian.AppendUint64(nil, uint64(max(0, sizeHint)))); err != nil {
		return fmt.Errorf("rewire: send state: %w", err)
	}
	cw := &chunkWriter{c: p.c}
	if err := write(cw); err != nil {
		return fmt.Errorf("rewire: send state: %w", err)
	}
	if err := cw.Close(); err != nil {
		return fmt.Errorf("rewire: send state: %w", err)
	}
	if err := p.c.waitAck(idleTimeout); err != nil {
		return fmt.Errorf("rewire: state not taken: %w", err)
	}
	return nil
}

// SendFinal sends the final message and waits for the acknowledgement. With f.Abort set,
// the successor gives up and no acknowledgement is awaited.
func (p *Predecessor) SendFinal(f Final, wait time.Duration) error {
	if p.c == nil {
		return errors.New("rewire: SendFinal before Accept")
	}
	b, err := msgpack.Marshal(&f)
	if err != nil {
		return fmt.Errorf("rewire: final: %w", err)
	}
	if err := p.c.writeFrame(frameFinal, b); err != nil {
		return fmt.Errorf("rewire: final: %w", err)
	}
	if err := p.c.flush(); err != nil {
		return fmt.Errorf("rewire: final: %w", err)
	}
	if f.Abort != "" {
		return nil
	}
	if err := p.c.waitAck(wait); err != nil {
		return fmt.Errorf("rewire: final: %w", err)
	}
	return nil
}

// Close ends the hand-over (the listener too, if the successor never came).
func (p *Predecessor) Close() error {
	p.ln.Close()
	if p.c != nil {
		return p.c.c.Close()
	}
	return nil
}

// chunkWriter frames a byte stream as state pieces.
type chunkWriter struct {
	c   *conn
	buf []byte
}

func (w *chunkWriter) Write(b []byte) (int, error) {
	n := len(b)
	for len(b) > 0 {
		k := min(len(b), stateChunk)
		if err := w.c.writeFrame(frameState, b[:k]); err != nil {
			return n - len(b), err
		}
		b = b[k:]
	}
	return n, nil
}

func (w *chunkWriter) Close() error {
	if err := w.c.writeFrame(frameState, nil); err != nil {
		return err
	}
	return w.c.flush()
}

// Successor is the new process's end of a hand-over.
type Successor struct {
	c *conn
}

// Dial connects to the predecessor named by spec, proves it is rank's successor in the job
// whose secret it knows, and tells it dataAddr, where the successor will accept its peers.
func Dial(spec Spec, secret []byte, rank int, dataAddr string, timeout time.Duration) (*Successor, error) {
	if len(dataAddr) > 1024 {
		return nil, fmt.Errorf("rewire: data address %q too long", dataAddr)
	}
	d := net.Dialer{Timeout: timeout}
	c, err := d.Dial("tcp", spec.Addr)
	if err != nil {
		return nil, fmt.Errorf("rewire: dial predecessor at %s: %w", spec.Addr, err)
	}
	c.SetDeadline(time.Now().Add(timeout))
	var hello [8 + 16]byte
	if _, err := io.ReadFull(c, hello[:]); err != nil {
		c.Close()
		return nil, fmt.Errorf("rewire: predecessor at %s: %w", spec.Addr, err)
	}
	if [8]byte(hello[:8]) != answerMagic {
		c.Close()
		return nil, fmt.Errorf("%w: %s is not an mpios predecessor", ErrAuth, spec.Addr)
	}
	msg := append([]byte(nil), helloMagic[:]...)
	msg = binary.LittleEndian.AppendUint32(msg, uint32(rank))
	msg = append(msg, mac(secret, hello[8:], rank, spec.Token)...)
	msg = binary.LittleEndian.AppendUint16(msg, uint16(len(dataAddr)))
	msg = append(msg, dataAddr...)
	if _, err := c.Write(msg); err != nil {
		c.Close()
		return nil, fmt.Errorf("rewire: predecessor at %s: %w", spec.Addr, err)
	}
	c.SetDeadline(time.Time{})
	return &Successor{c: newConn(c)}, nil
}

// ReceiveState reads the state blob. It does not acknowledge it: call Ack once it is checked.
func (s *Successor) ReceiveState() ([]byte, error) {
	hint, err := s.c.readControl(frameHint, idleTimeout)
	if err != nil {
		return nil, fmt.Errorf("rewire: receive state: %w", err)
	}
	var buf []byte
	if len(hint) == 8 {
		if n := binary.LittleEndian.Uint64(hint); n < 1<<40 {
			buf = make([]byte, 0, n)
		}
	}
	for {
		kind, n, err := s.c.readHeader(idleTimeout)
		if err != nil {
			return nil, fmt.Errorf("rewire: receive state: %w", err)
		}
		if kind != frameState || n > stateChunk {
			return nil, fmt.Errorf("rewire: receive state: protocol error: frame %d of %d bytes", kind, n)
		}
		if n == 0 {
			return buf, nil
		}
		buf = growTo(buf, int(n))
		piece := buf[len(buf) : len(buf)+int(n)]
		s.c.c.SetReadDeadline(time.Now().Add(idleTimeout))
		if _, err := io.ReadFull(s.c.br, piece); err != nil {
			return nil, fmt.Errorf("rewire: receive state: %w", err)
		}
		buf = buf[:len(buf)+int(n)]
	}
}

func growTo(b []byte, n int) []byte {
	if cap(b)-len(b) >= n {
		return b
	}
	nb := make([]byte, len(b), 2*cap(b)+n)
	copy(nb, b)
	return nb
}

// Ack acknowledges the last message; a non-nil err refuses it with err's text.
func (s *Successor) Ack(err error) error {
	reason := ""
	if err != nil {
		reason = err.Error()
		if reason == "" {
			reason = "refused"
		}
	}
	return s.c.ack(reason)
}

// ReceiveFinal waits (up to wait) for the final message.
func (s *Successor) ReceiveFinal(wait time.Duration) (Final, error) {
	b, err := s.c.readControl(frameFinal, wait)
	if err != nil {
		return Final{}, fmt.Errorf("rewire: receive final: %w", err)
	}
	var f Final
	if err := msgpack.Unmarshal(b, &f); err != nil {
		return Final{}, fmt.Errorf("rewire: receive final: %w", err)
	}
	return f, nil
}

// Close ends the hand-over connection.
func (s *Successor) Close() error { return s.c.c.Close() }
