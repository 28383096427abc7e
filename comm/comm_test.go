package comm

import (
	"bytes"
	"crypto/rand"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestHeaderRoundTrip(t *testing.T) {
	hs := []Header{
		{Kind: KindEager, Elem: 12, Ctx: 7, Tag: 42, Len: 16, Total: 16},
		{Kind: KindRTS, Elem: 3, Ctx: 1, Tag: 0, Total: 1 << 30, ID: 99},
		{Kind: KindCTS, ID: 99, ID2: 1000, Flags: FlagDiscard},
		{Kind: KindData, Elem: 12, ID2: 1000, Total: 3 << 20, Offset: 2 << 20, Len: 1 << 20},
		{Kind: KindBye, Flags: FlagMigrated},
	}
	for _, h := range hs {
		b := AppendHeader(nil, &h)
		if len(b) != HeaderSize {
			t.Fatalf("encoded %d bytes", len(b))
		}
		got, err := DecodeHeader(b)
		if err != nil || got != h {
			t.Errorf("round trip of %+v: %+v, %v", h, got, err)
		}
	}
}

func TestDecodeRejectsInconsistentHeaders(t *testing.T) {
	bad := []Header{
		{Kind: KindEager, Len: MaxEagerPayload + 1, Total: MaxEagerPayload + 1},
		{Kind: KindEager, Len: 10, Total: 11},
		{Kind: KindRTS, Len: 1, Total: 1},
		{Kind: KindRTS, Total: MaxMessage + 1},
		{Kind: KindCTS, Len: 3},
		{Kind: KindData, Len: 0, Total: 10},
		{Kind: KindData, Len: 8, Offset: 5, Total: 10},
		{Kind: KindData, Len: MaxFramePayload + 1, Total: 1 << 30},
		{Kind: 77},
		{Kind: KindEager, Elem: MaxElemType + 1},
	}
	for _, h := range bad {
		b := AppendHeader(nil, &h)
		var fe *FrameError
		if _, err := DecodeHeader(b); !errors.As(err, &fe) {
			t.Errorf("%+v accepted (err %v)", h, err)
		}
	}
	b := AppendHeader(nil, &Header{Kind: KindBye})
	b[0] = 'X'
	if _, err := DecodeHeader(b); !errors.Is(err, ErrBadMagic) {
		t.Errorf("bad magic: %v", err)
	}
	b = AppendHeader(nil, &Header{Kind: KindBye})
	b[2] = 9
	if _, err := DecodeHeader(b); !errors.Is(err, ErrBadVersion) {
		t.Errorf("bad version: %v", err)
	}
}

func FuzzDecodeHeader(f *testing.F) {
	f.Add(AppendHeader(nil, &Header{Kind: KindEager, Len: 8, Total: 8}))
	f.Add(AppendHeader(nil, &Header{Kind: KindData, Len: 8, Total: 80, Offset: 72}))
	f.Add([]byte("MP\x01"))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := DecodeHeader(b)
		if err != nil {
			return
		}
		// Whatever decodes must be internally consistent and re-encode to the same bytes.
		if h.Len > MaxFramePayload || h.Total > MaxMessage {
			t.Fatalf("accepted oversized header %+v", h)
		}
		if !bytes.Equal(AppendHeader(nil, &h), zeroReserved(b[:HeaderSize])) {
			t.Fatalf("re-encoding differs for %+v", h)
		}
	})
}

func zeroReserved(b []byte) []byte {
	c := append([]byte(nil), b...)
	c[6], c[7] = 0, 0
	copy(c[20:24], []byte{0, 0, 0, 0})
	return c
}

// recorder is a Handler that records what arrives.
type recorder struct {
	mu     sync.Mutex
	frames []Header
	closed []error
	got    chan struct{}
}

func newRecorder() *recorder { return &recorder{got: make(chan struct{}, 100)} }

func (r *recorder) HandleFrame(peer int, h *Header, payload []byte) error {
	r.mu.Lock()
	r.frames = append(r.frames, *h)
	r.mu.Unlock()
	r.got <- struct{}{}
	return nil
}
func (r *recorder) DataBuffer(peer int, h *Header) ([]byte, error) { return nil, nil }
func (r *recorder) DataDone(peer int, h *Header) error             { return nil }
func (r *recorder) PeerClosed(peer int, flags uint8, err error) {
	r.mu.Lock()
	r.closed = append(r.closed, err)
	r.mu.Unlock()
	r.got <- struct{}{}
}

type syncLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *syncLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func pair(t *testing.T, secretA, secretB []byte) (*TCPEndpoint, *TCPEndpoint, *recorder, *syncLog) {
	t.Helper()
	lnA, _ := net.Listen("tcp", "127.0.0.1:0")
	lnB, _ := net.Listen("tcp", "127.0.0.1:0")
	addrs := []string{lnA.Addr().String(), lnB.Addr().String()}
	logA := &syncLog{}
	a, err := NewTCP(TCPConfig{Rank: 0, Size: 2, Addrs: addrs, Listener: lnA, Secret: secretA, DialTimeout: time.Second, Transport: TransportTCP,
		Logf: func(f string, args ...any) {
			logA.mu.Lock()
			defer logA.mu.Unlock()
			logA.b.WriteString(f)
		}})
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewTCP(TCPConfig{Rank: 1, Size: 2, Addrs: addrs, Listener: lnB, Secret: secretB, DialTimeout: time.Second, Transport: TransportTCP, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	rec := newRecorder()
	a.Start(rec)
	b.Start(newRecorder())
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b, rec, logA
}

func secret() []byte {
	s := make([]byte, 32)
	rand.Read(s)
	return s
}

func TestTCPDeliversInOrder(t *testing.T) {
	s := secret()
	a, b, rec, _ := pair(t, s, s)
	_ = a
	for i := 0; i < 20; i++ {
		if err := b.Send(0, &Header{Kind: KindEager, Tag: int32(i), Len: 3, Total: 3}, []byte("abc")); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 20; i++ {
		select {
		case <-rec.got:
		case <-time.After(5 * time.Second):
			t.Fatal("frames not delivered")
		}
	}
	for i, h := range rec.frames {
		if h.Tag != int32(i) {
			t.Fatalf("frame %d has tag %d", i, h.Tag)
		}
	}
}

func TestTCPWrongSecretIsRejected(t *testing.T) {
	_, b, rec, _ := pair(t, secret(), secret())
	err := b.Send(0, &Header{Kind: KindEager, Len: 1, Total: 1}, []byte("x"))
	if err == nil {
		t.Fatal("send with the wrong secret succeeded")
	}
	if len(rec.frames) != 0 {
		t.Fatalf("frames delivered from an unauthenticated peer: %v", rec.frames)
	}
}

func TestTCPStrangerCannotInject(t *testing.T) {
	s := secret()
	a, _, rec, logA := pair(t, s, s)
	conn, err := net.Dial("tcp", a.cfg.Addrs[0])
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// A well-formed data frame without a handshake.
	conn.Write(AppendHeader(nil, &Header{Kind: KindEager, Len: 0}))
	conn.Write(make([]byte, 100))
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 256)
	for {
		if _, err := conn.Read(buf); err != nil {
			break // the rank closed the connection
		}
	}
	if len(rec.frames) != 0 {
		t.Fatalf("stranger injected frames: %v", rec.frames)
	}
	time.Sleep(50 * time.Millisecond)
	if !strings.Contains(logA.String(), "rejected") {
		t.Errorf("rejection not logged: %q", logA.String())
	}
}

func TestTCPGarbageAfterHandshakeClosesOnlyThatConnection(t *testing.T) {
	s := secret()
	a, b, rec, _ := pair(t, s, s)
	conn, err := net.Dial("tcp", a.cfg.Addrs[0])
	if err != nil {
		t.Fatal(err)
	}
	tr, err := b.dialHandshake(conn, 0)
	if err != nil {
		t.Fatal(err)
	}
	if link, err := b.offerRing(conn, tr); err != nil || link != nil {
		t.Fatalf("transport negotiation: %v, %v", link, err)
	}
	conn.Write(bytes.Repeat([]byte{0xff}, HeaderSize)) // bad magic
	select {
	case <-rec.got:
	case <-time.After(5 * time.Second):
		t.Fatal("bad frame not reported")
	}
	if len(rec.closed) != 1 || !errors.Is(rec.closed[0], ErrPeerLost) {
		t.Fatalf("closed reports: %v", rec.closed)
	}
	// The endpoint still serves new connections.
	if err := b.Send(0, &Header{Kind: KindEager, Len: 1, Total: 1}, []byte("y")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-rec.got:
	case <-time.After(5 * time.Second):
		t.Fatal("frame after garbage not delivered")
	}
}
