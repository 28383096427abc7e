package comm

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"testing/iotest"
	"time"
)

// frames encodes eager frames with the given payload sizes; payload i is filled with byte i.
func frames(sizes ...int) []byte {
	var b []byte
	for i, n := range sizes {
		b = AppendHeader(b, &Header{Kind: KindEager, Tag: int32(i), Len: uint32(n), Total: uint64(n)})
		b = append(b, bytes.Repeat([]byte{byte(i)}, n)...)
	}
	return b
}

// countingReader counts the reads and the bytes each asked for.
type countingReader struct {
	r     io.Reader
	reads []int
}

func (c *countingReader) Read(p []byte) (int, error) {
	c.reads = append(c.reads, len(p))
	return c.r.Read(p)
}

func TestFrameReaderDeliversFramesWhateverTheReadSizes(t *testing.T) {
	sizes := []int{0, 5, 70000, 16, 100 << 10, 0, 3}
	for name, wrap := range map[string]func(io.Reader) io.Reader{
		"whole": func(r io.Reader) io.Reader { return r },
		"half":  iotest.HalfReader,
		"bytes": iotest.OneByteReader,
	} {
		t.Run(name, func(t *testing.T) {
			fr := &frameReader{src: wrap(bytes.NewReader(frames(sizes...))), buf: make([]byte, 1<<17+HeaderSize)}
			for i, n := range sizes {
				hb, err := fr.next(HeaderSize)
				if err != nil {
					t.Fatalf("frame %d header: %v", i, err)
				}
				h, err := DecodeHeader(hb)
				if err != nil || int(h.Len) != n || h.Tag != int32(i) {
					t.Fatalf("frame %d: %+v, %v", i, h, err)
				}
				var payload []byte
				if i%2 == 0 { // alternately straight into a destination and through the buffer
					payload = make([]byte, n)
					err = fr.readFull(payload)
					fr.exact = true
				} else {
					payload, err = fr.next(n)
				}
				if err != nil || !bytes.Equal(payload, bytes.Repeat([]byte{byte(i)}, n)) {
					t.Fatalf("frame %d payload wrong (%v)", i, err)
				}
			}
			if _, err := fr.next(HeaderSize); err != io.EOF {
				t.Fatalf("after the last frame: %v, want EOF", err)
			}
		})
	}
}

func TestFrameReaderExactHeaderReadsLeaveLargePayloadsInTheSocket(t *testing.T) {
	data := frames(64<<10, 64<<10)
	cr := &countingReader{r: bytes.NewReader(data)}
	fr := &frameReader{src: cr, buf: make([]byte, readBufferSize), exact: true}
	for i := 0; i < 2; i++ {
		if _, err := fr.next(HeaderSize); err != nil {
			t.Fatal(err)
		}
		if fr.buffered() != 0 {
			t.Fatalf("frame %d: header read pulled %d payload bytes into the buffer", i, fr.buffered())
		}
		if err := fr.readFull(make([]byte, 64<<10)); err != nil {
			t.Fatal(err)
		}
	}
	// Without exact, one read takes everything there is.
	cr = &countingReader{r: bytes.NewReader(data)}
	fr = &frameReader{src: cr, buf: make([]byte, readBufferSize)}
	if _, err := fr.next(HeaderSize); err != nil {
		t.Fatal(err)
	}
	if fr.buffered() != len(data)-HeaderSize || len(cr.reads) != 1 {
		t.Fatalf("greedy read buffered %d of %d bytes in %d reads", fr.buffered(), len(data)-HeaderSize, len(cr.reads))
	}
}

func TestFrameReaderTruncatedStream(t *testing.T) {
	data := frames(100)
	for _, cut := range []int{10, HeaderSize + 50} {
		fr := &frameReader{src: bytes.NewReader(data[:cut]), buf: make([]byte, 4096)}
		_, err := fr.next(HeaderSize)
		if err == nil {
			err = fr.readFull(make([]byte, 100))
		}
		if err != io.ErrUnexpectedEOF {
			t.Errorf("stream cut at %d: %v, want ErrUnexpectedEOF", cut, err)
		}
	}
	fr := &frameReader{src: bytes.NewReader(data), buf: make([]byte, 4096)}
	fr.next(HeaderSize)
	if err := fr.discard(100); err != nil || fr.buffered() != 0 {
		t.Fatalf("discard: %v, %d left", err, fr.buffered())
	}
}

// directRecorder is a Handler that takes large eager payloads into buffers of its own.
type directRecorder struct {
	mu      sync.Mutex
	direct  map[int32][]byte // by tag: payloads received straight into our buffer
	handled map[int32][]byte // by tag: payloads handed to HandleFrame
	doneErr []error
	got     chan struct{}
	refuse  bool // EagerBuffer declines
}

func newDirectRecorder() *directRecorder {
	return &directRecorder{direct: map[int32][]byte{}, handled: map[int32][]byte{}, got: make(chan struct{}, 1000)}
}

func (r *directRecorder) EagerBuffer(peer int, h *Header) []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.refuse {
		return nil
	}
	b := make([]byte, h.Len)
	r.direct[h.Tag] = b
	return b
}

func (r *directRecorder) EagerDone(peer int, h *Header, err error) {
	r.mu.Lock()
	r.doneErr = append(r.doneErr, err)
	r.mu.Unlock()
	r.got <- struct{}{}
}

func (r *directRecorder) HandleFrame(peer int, h *Header, payload []byte) error {
	r.mu.Lock()
	r.handled[h.Tag] = append([]byte(nil), payload...)
	r.mu.Unlock()
	r.got <- struct{}{}
	return nil
}
func (r *directRecorder) DataBuffer(peer int, h *Header) ([]byte, error) { return nil, nil }
func (r *directRecorder) DataDone(peer int, h *Header) error             { return nil }
func (r *directRecorder) PeerClosed(peer int, flags uint8, err error) {
	r.mu.Lock()
	r.doneErr = append(r.doneErr, fmt.Errorf("closed: %w", err))
	r.mu.Unlock()
	r.got <- struct{}{}
}

func (r *directRecorder) wait(t *testing.T, n int) {
	t.Helper()
	waitCallbacks(t, r.got, n)
}

// waitCallbacks waits for n signals of a recording handler's callbacks.
func waitCallbacks(t *testing.T, got <-chan struct{}, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		select {
		case <-got:
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of %d callbacks arrived", i, n)
		}
	}
}

// directPair connects rank 1 (sender) to rank 0 (a directRecorder), with the given polling
// (0: adaptive, as for one rank per node).
func directPair(t *testing.T, spin time.Duration) (*TCPEndpoint, *TCPEndpoint, *directRecorder) {
	t.Helper()
	return directPairOver(t, spin, TransportTCP)
}

// directPairOver connects rank 1 (sender) to rank 0 (a directRecorder) over transport.
func directPairOver(t *testing.T, spin time.Duration, transport string) (*TCPEndpoint, *TCPEndpoint, *directRecorder) {
	t.Helper()
	t.Setenv(EnvSpin, "auto")
	s := secret()
	lnA, _ := net.Listen("tcp", "127.0.0.1:0")
	lnB, _ := net.Listen("tcp", "127.0.0.1:0")
	addrs := []string{lnA.Addr().String(), lnB.Addr().String()}
	a, err := NewTCP(TCPConfig{Rank: 0, Size: 2, Addrs: addrs, Listener: lnA, Secret: s, SpinWait: spin, NodeRanks: 1, Transport: transport, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewTCP(TCPConfig{Rank: 1, Size: 2, Addrs: addrs, Listener: lnB, Secret: s, SpinWait: spin, NodeRanks: 1, Transport: transport, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	if spin == 0 && !a.Spin().Adaptive {
		t.Fatalf("one rank on %g CPUs does not poll adaptively: %+v", usableCPUs(), a.Spin())
	}
	rec := newDirectRecorder()
	a.Start(rec)
	b.Start(newRecorder())
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b, rec
}

func TestTCPEagerPayloadsGoStraightToTheReceiver(t *testing.T) {
	for _, c := range []struct {
		spin    time.Duration
		waiting bool // a goroutine waits (WaitNotifier) all along
	}{{-1, false}, {0, false}, {0, true}, {50 * time.Microsecond, false}} {
		t.Run(fmt.Sprintf("spin=%v/waiting=%v", c.spin, c.waiting), func(t *testing.T) {
			a, b, rec := directPair(t, c.spin)
			if c.waiting {
				a.Waiting(1, true)
				defer a.Waiting(1, false)
			}
			sizes := []int{16, MaxEagerPayload, 40 << 10, 0, directMin - 1, 64 << 10, 3}
			for round := 0; round < 20; round++ {
				for i, n := range sizes {
					tag := int32(round*len(sizes) + i)
					p := bytes.Repeat([]byte{byte(tag)}, n)
					if err := b.Send(0, &Header{Kind: KindEager, Tag: tag, Len: uint32(n), Total: uint64(n)}, p); err != nil {
						t.Fatal(err)
					}
				}
			}
			rec.wait(t, 20*len(sizes))
			rec.mu.Lock()
			defer rec.mu.Unlock()
			for _, err := range rec.doneErr {
				if err != nil {
					t.Fatalf("EagerDone: %v", err)
				}
			}
			for round := 0; round < 20; round++ {
				for i, n := range sizes {
					tag := int32(round*len(sizes) + i)
					got, ok := rec.handled[tag]
					if d, isDirect := rec.direct[tag]; isDirect {
						if ok || n < directMin {
							t.Fatalf("tag %d (%d bytes) delivered twice or directly below directMin", tag, n)
						}
						got, ok = d, true
					}
					if !ok || !bytes.Equal(got, bytes.Repeat([]byte{byte(tag)}, n)) {
						t.Fatalf("tag %d (%d bytes): wrong or missing payload", tag, n)
					}
				}
			}
		})
	}
}

func TestTCPDeclinedEagerBufferFallsBackToHandleFrame(t *testing.T) {
	_, b, rec := directPair(t, -1)
	rec.refuse = true
	p := bytes.Repeat([]byte{7}, 100<<10)
	for tag := int32(0); tag < 5; tag++ {
		if err := b.Send(0, &Header{Kind: KindEager, Tag: tag, Len: uint32(len(p)), Total: uint64(len(p))}, p); err != nil {
			t.Fatal(err)
		}
	}
	rec.wait(t, 5)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.handled) != 5 || len(rec.doneErr) != 0 {
		t.Fatalf("%d frames handled, EagerDone calls %v", len(rec.handled), rec.doneErr)
	}
}

func TestTCPEagerDoneReportsAPayloadCutShort(t *testing.T) {
	a, b, rec := directPair(t, -1)
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
	n := 100 << 10
	conn.Write(AppendHeader(nil, &Header{Kind: KindEager, Tag: 1, Len: uint32(n), Total: uint64(n)}))
	conn.Write(make([]byte, n/2))
	conn.Close()
	rec.wait(t, 2) // EagerDone with the error, then PeerClosed
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.handled) != 0 {
		t.Fatal("a truncated payload was handled")
	}
	var sawDone bool
	for _, err := range rec.doneErr {
		if err != nil && errors.Is(err, io.ErrUnexpectedEOF) {
			sawDone = true
		}
	}
	if !sawDone || len(rec.doneErr) != 2 {
		t.Fatalf("callbacks %v: want EagerDone(ErrUnexpectedEOF) and PeerClosed", rec.doneErr)
	}
}

func TestTCPWaitingWakesASleepingReader(t *testing.T) {
	a, b, rec := directPair(t, 0) // adaptive polling
	send := func(tag int32) {
		t.Helper()
		if err := b.Send(0, &Header{Kind: KindEager, Tag: tag, Len: 3, Total: 3}, []byte("abc")); err != nil {
			t.Fatal(err)
		}
		rec.wait(t, 1)
	}
	send(0)
	r := a.readers[1].Load()
	if r == nil {
		t.Fatal("no polling reader for rank 1")
	}
	for deadline := time.Now().Add(10 * time.Second); !r.parked.Load(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the reader never went to sleep")
		}
	}
	for round := int32(1); round <= 3; round++ {
		a.Waiting(1, true) // wakes the reader (unless the node is loaded): it must keep working
		a.Waiting(-1, true)
		send(round)
		a.Waiting(-1, false)
		a.Waiting(1, false)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.handled) != 4 || len(rec.doneErr) != 0 {
		t.Fatalf("%d frames handled, other callbacks %v", len(rec.handled), rec.doneErr)
	}
	if n := a.waiters.Load(); n != 0 {
		t.Fatalf("%d waiters left", n)
	}
}

// Wakes that race with the reader waking by itself (a deadline in the past set just after it
// left the poller) must never fail the connection.
func TestTCPWakesRacingWithData(t *testing.T) {
	a, b, rec := directPair(t, 0)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			a.Waiting(1, true)
			a.Waiting(1, false)
			if r := a.readers[1].Load(); r != nil {
				r.conn.SetReadDeadline(time.Unix(1, 0)) // a wake that lands late, whatever the reader does
			}
		}
	}()
	const frames = 2000
	for i := 0; i < frames; i++ {
		if err := b.Send(0, &Header{Kind: KindEager, Tag: int32(i), Len: 3, Total: 3}, []byte("abc")); err != nil {
			t.Fatal(err)
		}
		if i%50 == 0 {
			time.Sleep(100 * time.Microsecond) // let the reader go to sleep now and then
		}
	}
	rec.wait(t, frames)
	close(stop)
	wg.Wait()
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.handled) != frames || len(rec.doneErr) != 0 {
		t.Fatalf("%d of %d frames handled, other callbacks %v", len(rec.handled), frames, rec.doneErr)
	}
}
