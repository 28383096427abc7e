package comm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// dataRecorder takes eager frames and the chunks of rendezvous messages (Data frames), which
// it assembles per ID2.
type dataRecorder struct {
	mu      sync.Mutex
	frames  []Header
	payload [][]byte
	bufs    map[uint64][]byte
	done    []Header
	closed  []error
	flags   []uint8
	got     chan struct{}
	block   chan struct{} // if non-nil, HandleFrame waits on it (back-pressure)
	discard bool          // DataBuffer returns nil
}

func newDataRecorder() *dataRecorder {
	return &dataRecorder{bufs: map[uint64][]byte{}, got: make(chan struct{}, 1<<16)}
}

func (r *dataRecorder) HandleFrame(peer int, h *Header, payload []byte) error {
	if r.block != nil {
		<-r.block
	}
	r.mu.Lock()
	r.frames = append(r.frames, *h)
	r.payload = append(r.payload, bytes.Clone(payload))
	r.mu.Unlock()
	r.got <- struct{}{}
	return nil
}

func (r *dataRecorder) DataBuffer(peer int, h *Header) ([]byte, error) {
	if r.discard {
		return nil, nil
	}
	if h.Total > 64<<20 {
		return nil, fmt.Errorf("test recorder: message of %d bytes", h.Total)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	b := r.bufs[h.ID2]
	if b == nil {
		b = make([]byte, h.Total)
		r.bufs[h.ID2] = b
	}
	return b[h.Offset : h.Offset+uint64(h.Len)], nil
}

func (r *dataRecorder) DataDone(peer int, h *Header) error {
	r.mu.Lock()
	r.done = append(r.done, *h)
	r.mu.Unlock()
	r.got <- struct{}{}
	return nil
}

func (r *dataRecorder) PeerClosed(peer int, flags uint8, err error) {
	r.mu.Lock()
	r.closed = append(r.closed, err)
	r.flags = append(r.flags, flags)
	r.mu.Unlock()
	r.got <- struct{}{}
}

func (r *dataRecorder) wait(t *testing.T, n int) {
	t.Helper()
	waitCallbacks(t, r.got, n)
}

// sendOneAndWait sends rank 0 a one-byte eager frame with tag from b and waits until rec, rank
// 0's recorder, has it.
func sendOneAndWait(t *testing.T, b *TCPEndpoint, rec *dataRecorder, tag int32) {
	t.Helper()
	if err := b.Send(0, &Header{Kind: KindEager, Tag: tag, Len: 1, Total: 1}, []byte("x")); err != nil {
		t.Fatal(err)
	}
	rec.wait(t, 1)
}

// shmPair connects rank 1 (sender) to rank 0 (receiver, recording) over transport.
func shmPair(t *testing.T, transport string, jobID string) (*TCPEndpoint, *TCPEndpoint, *dataRecorder) {
	t.Helper()
	return shmPairSpin(t, transport, jobID, 0)
}

// shmPairSpin is shmPair with TCPConfig.SpinWait spin.
func shmPairSpin(t *testing.T, transport string, jobID string, spin time.Duration) (*TCPEndpoint, *TCPEndpoint, *dataRecorder) {
	t.Helper()
	return shmPairWake(t, transport, jobID, spin, "")
}

// shmPairWake is shmPairSpin with TCPConfig.ShmWake wake.
func shmPairWake(t *testing.T, transport string, jobID string, spin time.Duration, wake string) (*TCPEndpoint, *TCPEndpoint, *dataRecorder) {
	t.Helper()
	if !shmSupported {
		t.Skip("no shared-memory transport on this system")
	}
	s := secret()
	lnA, _ := net.Listen("tcp", "127.0.0.1:0")
	lnB, _ := net.Listen("tcp", "127.0.0.1:0")
	addrs := []string{lnA.Addr().String(), lnB.Addr().String()}
	cfg := func(rank int, ln net.Listener) TCPConfig {
		return TCPConfig{Rank: rank, Size: 2, Addrs: addrs, Listener: ln, Secret: s, DialTimeout: 2 * time.Second,
			Transport: transport, JobID: jobID, SpinWait: spin, ShmWake: wake, Logf: t.Logf}
	}
	a, err := NewTCP(cfg(0, lnA))
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewTCP(cfg(1, lnB))
	if err != nil {
		t.Fatal(err)
	}
	rec := newDataRecorder()
	a.Start(rec)
	b.Start(newRecorder())
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b, rec
}

func linkOf(e *TCPEndpoint, peer int) *shmLink {
	p := e.peers[peer]
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.link
}

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7) ^ seed
	}
	return b
}

// sendMessage sends a rendezvous-style message of total bytes as Data frames of chunk bytes.
func sendMessage(t *testing.T, e *TCPEndpoint, id uint64, msg []byte, chunk int) {
	t.Helper()
	for off := 0; off < len(msg); off += chunk {
		n := min(chunk, len(msg)-off)
		h := &Header{Kind: KindData, ID2: id, Total: uint64(len(msg)), Offset: uint64(off), Len: uint32(n)}
		if err := e.Send(0, h, msg[off:off+n]); err != nil {
			t.Fatal(err)
		}
	}
}

func TestShmPeersOnOneNodeUseARingAndKeepOrder(t *testing.T) {
	for _, tc := range []struct {
		transport string
		cma       bool
	}{{TransportAuto, true}, {TransportShmCopy, false}} {
		t.Run(tc.transport, func(t *testing.T) {
			a, b, rec := shmPair(t, tc.transport, "shmorder")
			_ = a
			// Eager frames of every size up to the largest, mixed with a 3 MiB message
			// (larger than the ring: it streams through it, or goes by single copy).
			big := pattern(3<<20, 5)
			var sent [][]byte
			for i := 0; i < 200; i++ {
				n := (i * 977) % (MaxEagerPayload + 1)
				p := pattern(n, byte(i))
				sent = append(sent, p)
				if err := b.Send(0, &Header{Kind: KindEager, Tag: int32(i), Len: uint32(n), Total: uint64(n)}, p); err != nil {
					t.Fatal(err)
				}
				if i == 100 {
					sendMessage(t, b, 42, big, 1<<20)
				}
			}
			l := linkOf(b, 0)
			if l == nil {
				t.Fatal("peers of one node did not set up a ring")
			}
			if l.cma != tc.cma {
				t.Errorf("single copy %v, want %v (process_vm_readv allowed for ourselves)", l.cma, tc.cma)
			}
			rec.wait(t, 200+3)
			rec.mu.Lock()
			defer rec.mu.Unlock()
			for i, h := range rec.frames {
				if h.Tag != int32(i) || !bytes.Equal(rec.payload[i], sent[i]) {
					t.Fatalf("frame %d: tag %d, payload of %d bytes (want %d), equal %v", i, h.Tag, len(rec.payload[i]), len(sent[i]), bytes.Equal(rec.payload[i], sent[i]))
				}
			}
			if !bytes.Equal(rec.bufs[42], big) {
				t.Fatal("the large message arrived corrupted")
			}
			for _, h := range rec.done {
				if h.Flags&FlagRemote != 0 {
					t.Fatal("the handler saw the transport's FlagRemote")
				}
			}
		})
	}
}

func TestShmTransportTCPForcesSockets(t *testing.T) {
	t.Setenv(EnvTransport, "tcp")
	_, b, rec := shmPair(t, "", "shmforced")
	if err := b.Send(0, &Header{Kind: KindEager, Len: 1, Total: 1}, []byte("x")); err != nil {
		t.Fatal(err)
	}
	rec.wait(t, 1)
	if linkOf(b, 0) != nil {
		t.Fatalf("%s=tcp still set up a ring", EnvTransport)
	}
	if _, err := transportSetting("udp"); err == nil {
		t.Fatal("an unknown transport was accepted")
	}
}

func TestShmDiscardedRemoteDataReleasesTheSender(t *testing.T) {
	_, b, rec := shmPair(t, TransportAuto, "shmdiscard")
	rec.discard = true
	// Chunks of cmaMin go by single copy; each Send returns only once the reader took it.
	sendMessage(t, b, 7, pattern(3*cmaMin, 1), cmaMin)
	if l := linkOf(b, 0); l == nil || !l.cma {
		t.Fatal("no single copy between ranks of one node")
	}
	if err := b.Send(0, &Header{Kind: KindEager, Tag: 9, Len: 2, Total: 2}, []byte("ok")); err != nil {
		t.Fatal(err)
	}
	rec.wait(t, 1)
}

func TestShmLeavesNoSegmentAndRemoveJobSegmentsCleansUp(t *testing.T) {
	job := fmt.Sprintf("shmclean%d", os.Getpid())
	_, b, rec := shmPair(t, TransportAuto, job)
	if err := b.Send(0, &Header{Kind: KindEager, Len: 1, Total: 1}, []byte("x")); err != nil {
		t.Fatal(err)
	}
	rec.wait(t, 1)
	if linkOf(b, 0) == nil {
		t.Fatal("no ring")
	}
	left, _ := filepath.Glob(filepath.Join(ShmDir, "mpios."+job+".*"))
	if len(left) != 0 {
		t.Fatalf("names left on %s while the job runs: %v", ShmDir, left)
	}
	// What a rank that crashed while setting up a ring leaves, the launcher removes; a ring
	// that a live rank is setting up stays.
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	mk := func(pid int) string {
		mem, path, err := createRing(fmt.Sprintf("%s0-1.%d.ab", segmentPrefix(job, secret()), pid), make([]byte, macSize))
		if err != nil {
			t.Fatal(err)
		}
		unix.Munmap(mem)
		t.Cleanup(func() { os.Remove(path) })
		return path
	}
	deadPath, livePath := mk(dead.Process.Pid), mk(os.Getpid())
	if err := RemoveJobSegments(job); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(deadPath); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("%s survived RemoveJobSegments: %v", deadPath, err)
	}
	if _, err := os.Stat(livePath); err != nil {
		t.Fatalf("the ring of a live process was removed: %v", err)
	}
	if err := RemoveJobSegments("../etc"); err == nil {
		t.Fatal("a job id with a path in it was accepted")
	}
}

func TestShmRingsOnlyOpenForMembersOfTheJob(t *testing.T) {
	a, _, _ := shmPair(t, TransportAuto, "shmmember")
	tr := &transcript{nonceA: []byte("0123456789abcdef"), nonceD: []byte("fedcba9876543210"), src: 1, dst: 0}
	good := a.shmPrefix + "1-0.1.aa"
	mk := func(name string, mac []byte, mode uint32) {
		t.Helper()
		mem, path, err := createRing(name, mac)
		if err != nil {
			t.Fatal(err)
		}
		unix.Munmap(mem)
		t.Cleanup(func() { os.Remove(path) })
		if err := os.Chmod(path, os.FileMode(mode)); err != nil {
			t.Fatal(err)
		}
	}
	// A ring with the right MAC opens.
	mk(good, a.ringMAC(tr, good), 0o600)
	l, err := a.openRing(good, tr)
	if err != nil {
		t.Fatalf("a member's ring was refused: %v", err)
	}
	l.unmap()
	cases := map[string]struct {
		name string
		mac  []byte
		mode uint32
	}{
		"made without the job secret": {a.shmPrefix + "1-0.1.bb", make([]byte, macSize), 0o600},
		"readable by others":          {a.shmPrefix + "1-0.1.cc", nil, 0o644},
		"another job's name":          {"mpios.other.0123456789abcdef.1-0.1.dd", nil, 0o600},
		"another pair's name":         {a.shmPrefix + "2-0.1.ee", nil, 0o600},
	}
	for what, c := range cases {
		mac := c.mac
		if mac == nil {
			mac = a.ringMAC(tr, c.name)
		}
		mk(c.name, mac, c.mode)
		if l, err := a.openRing(c.name, tr); err == nil {
			l.unmap()
			t.Errorf("a ring %s was opened", what)
		}
	}
	if _, err := a.openRing("../"+good, tr); err == nil {
		t.Error("a path outside the shm directory was opened")
	}
}

func TestShmProcessVMReadvRefusalFallsBackToCopying(t *testing.T) {
	for _, err := range []error{syscall.EPERM, syscall.ENOSYS, syscall.EACCES, fmt.Errorf("process_vm_readv: %w", syscall.EPERM)} {
		if !cmaForbidden(err) {
			t.Errorf("%v is not taken as a refusal", err)
		}
	}
	if cmaForbidden(syscall.EFAULT) {
		t.Error("EFAULT (a bad address) is taken as a refusal of the kernel")
	}
	// A pid that cannot be read (none: the highest possible pid is not in use) fails
	// without crashing, and the answer is to copy.
	if err := readRemote(1<<22+1, make([]byte, 8), 4096); err == nil {
		t.Error("process_vm_readv of a missing process succeeded")
	}
}

// A rank that dies while a peer waits for its frames, or while it waits for room in the
// ring, is reported as lost, as over TCP.
func TestShmDeadWriterIsReportedLost(t *testing.T) {
	a, b, rec := shmPair(t, TransportAuto, "shmdeadw")
	if err := b.Send(0, &Header{Kind: KindEager, Len: 1, Total: 1}, []byte("x")); err != nil {
		t.Fatal(err)
	}
	rec.wait(t, 1)
	// Half a frame in the ring, then the writer's process is gone.
	l := linkOf(b, 0)
	b.peers[0].mu.Lock()
	l.w.write(noDeadline, AppendHeader(nil, &Header{Kind: KindEager, Len: 1000, Total: 1000}), make([]byte, 10))
	b.peers[0].mu.Unlock()
	b.Abandon()
	rec.wait(t, 1)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.closed) != 1 || !errors.Is(rec.closed[0], ErrPeerLost) {
		t.Fatalf("closed reports %v, want one ErrPeerLost", rec.closed)
	}
	_ = a
}

func TestShmDeadReaderReleasesABlockedWriter(t *testing.T) {
	a, b, rec := shmPair(t, TransportAuto, "shmdeadr")
	rec.block = make(chan struct{})
	done := make(chan error, 1)
	go func() {
		// More than the ring holds while the reader's handler is stuck.
		p := make([]byte, MaxEagerPayload)
		for i := 0; ; i++ {
			if err := b.Send(0, &Header{Kind: KindEager, Len: uint32(len(p)), Total: uint64(len(p))}, p); err != nil {
				done <- err
				return
			}
		}
	}()
	select {
	case err := <-done:
		t.Fatalf("send failed before the reader died: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	a.Abandon()
	close(rec.block)
	select {
	case err := <-done:
		if !errors.Is(err, ErrPeerLost) {
			t.Fatalf("blocked send ended with %v, want ErrPeerLost", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a send blocked on a full ring outlived its reader")
	}
}

// A sender whose chunk waits to be read by single copy is released when the reader's process
// dies, as one waiting for room in the ring is.
func TestShmDeadReaderReleasesASingleCopySender(t *testing.T) {
	a, b, rec := shmPair(t, TransportAuto, "shmdeadcma")
	rec.block = make(chan struct{})
	defer close(rec.block)
	if err := b.Send(0, &Header{Kind: KindEager, Len: 1, Total: 1}, []byte("x")); err != nil {
		t.Fatal(err) // the reader's dispatch now waits in HandleFrame
	}
	if l := linkOf(b, 0); l == nil || !l.cma {
		t.Fatal("no single copy between ranks of one node")
	}
	done := make(chan error, 1)
	go func() {
		h := &Header{Kind: KindData, ID2: 1, Total: cmaMin, Len: cmaMin}
		done <- b.Send(0, h, pattern(cmaMin, 3))
	}()
	select {
	case err := <-done:
		t.Fatalf("the single-copy send returned before its reader took it: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	a.Abandon()
	select {
	case err := <-done:
		if !errors.Is(err, ErrPeerLost) {
			t.Fatalf("the send ended with %v, want ErrPeerLost", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a single-copy send outlived its reader")
	}
}

func TestShmMigrationSwitchesTransportInOrder(t *testing.T) {
	// Rank 0 reads; rank 1 first talks to it over TCP (as from another node), then its
	// peer is redirected to a successor on this node, which negotiates a ring. Frames keep
	// their order across the switch, and back.
	s := secret()
	ln0, _ := net.Listen("tcp", "127.0.0.1:0")
	ln1, _ := net.Listen("tcp", "127.0.0.1:0")
	ln1b, _ := net.Listen("tcp", "127.0.0.1:0")
	addrs := []string{ln0.Addr().String(), ln1.Addr().String()}
	mk := func(rank int, ln net.Listener, transport string) *TCPEndpoint {
		e, err := NewTCP(TCPConfig{Rank: rank, Size: 2, Addrs: addrs, Listener: ln, Secret: s, Transport: transport, JobID: "shmmig", Logf: t.Logf})
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	r0 := mk(0, ln0, TransportAuto)
	rec := newDataRecorder()
	r0.Start(rec)
	defer r0.Close()
	old := mk(1, ln1, TransportTCP) // "another node"
	old.Start(newRecorder())
	n := 0
	send := func(e *TCPEndpoint, k int) {
		for i := 0; i < k; i++ {
			p := pattern(100+n%3000, byte(n))
			if err := e.Send(0, &Header{Kind: KindEager, Tag: int32(n), Len: uint32(len(p)), Total: uint64(len(p))}, p); err != nil {
				t.Fatal(err)
			}
			n++
		}
	}
	send(old, 50)
	if linkOf(old, 0) != nil {
		t.Fatal("a forced-TCP rank set up a ring")
	}
	succ := mk(1, ln1b, TransportAuto)
	succ.Start(newRecorder())
	defer succ.Close()
	retired := make(chan error, 1)
	go func() { retired <- old.Retire(5 * time.Second) }()
	send(succ, 50)
	if linkOf(succ, 0) == nil {
		t.Fatal("the successor on the peer's node did not set up a ring")
	}
	if err := <-retired; err != nil {
		t.Logf("retire: %v", err) // rank 0 never redirected; not what this test is about
	}
	rec.wait(t, 100)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for i, h := range rec.frames {
		if h.Tag != int32(i) {
			t.Fatalf("frame %d has tag %d: order lost across the switch", i, h.Tag)
		}
	}
	for _, err := range rec.closed {
		if err != nil {
			t.Fatalf("the switch was reported as a failure: %v", err)
		}
	}
}

// The ring reader against a hostile writer: whatever the shared counters and bytes say, it
// returns data that was in the ring or an error, never reads outside the mapping, never panics.
func FuzzRingReader(f *testing.F) {
	f.Add(uint64(0), uint64(10), []byte("hello"), uint16(64))
	f.Add(uint64(ringDataBytes-3), uint64(ringDataBytes+5), []byte("wrap around"), uint16(16))
	f.Add(uint64(5), uint64(4), []byte{}, uint16(1))                         // tail behind head
	f.Add(uint64(0), uint64(1)<<63, []byte{}, uint16(1))                     // tail far ahead
	f.Add(uint64(1)<<63, uint64(1)<<63+ringDataBytes+1, []byte{}, uint16(1)) // one past full
	f.Fuzz(func(t *testing.T, head, tail uint64, fill []byte, readSize uint16) {
		mem := make([]byte, ringMapBytes)
		r, err := newShmRing(mem)
		if err != nil {
			t.Fatal(err)
		}
		for i := range r.data {
			if len(fill) > 0 {
				r.data[i] = fill[i%len(fill)]
			}
		}
		r.head.Store(head)
		r.tail.Store(tail)
		r.gone.Store(true) // no waiting: what is there is all there is
		rr := newRingReader(r, nil)
		buf := make([]byte, int(readSize)+1)
		total := uint64(0)
		for {
			n, err := rr.Read(buf)
			if n < 0 || n > len(buf) {
				t.Fatalf("read %d into %d bytes", n, len(buf))
			}
			total += uint64(n)
			if err != nil {
				if tail-head <= ringDataBytes && (err != io.EOF || total != tail-head) {
					t.Fatalf("valid ring (%d bytes): %v after %d bytes", tail-head, err, total)
				}
				if tail-head > ringDataBytes && !errors.Is(err, ErrRingCorrupt) {
					t.Fatalf("corrupt counters head %d tail %d: %v", head, tail, err)
				}
				return
			}
		}
	})
}

// Frames from a hostile writer go through the same validation as over TCP: random bytes in a
// ring end the stream with an error, never a panic or an oversized allocation.
func FuzzRingFrames(f *testing.F) {
	f.Add(AppendHeader(nil, &Header{Kind: KindEager, Len: 3, Total: 3}), []byte("abc"))
	f.Add(AppendHeader(nil, &Header{Kind: KindData, Flags: FlagRemote, Len: 1 << 20, Total: 1 << 20}), binary.LittleEndian.AppendUint64(nil, 4096))
	f.Add([]byte("garbage"), []byte{})
	f.Fuzz(func(t *testing.T, head, rest []byte) {
		mem := make([]byte, ringMapBytes)
		r, _ := newShmRing(mem)
		w := newRingWriter(r, nil)
		stream := append(append([]byte{}, head...), rest...)
		if len(stream) > ringDataBytes {
			stream = stream[:ringDataBytes]
		}
		if err := w.write(time.Now().Add(time.Second), stream); err != nil {
			t.Fatal(err)
		}
		r.gone.Store(true)
		e := &TCPEndpoint{handler: newDataRecorder(), readers: make([]atomic.Pointer[spinReader], 1), rings: make([]atomic.Pointer[ringReader], 1)}
		link := &shmLink{ring: r, rd: newRingReader(r, nil), cma: true, pid: 1 << 22}
		e.readFrames(0, nil, link) // must return (the stream ends) without panicking
	})
}

// A dialer that could not create its ring (full or missing /dev/shm) says so with an empty
// name; both ends then use the socket.
func TestShmDialerWithoutARingFallsBackToTCP(t *testing.T) {
	a, b, rec := shmPair(t, TransportAuto, "shmnoring")
	conn, err := net.Dial("tcp", a.cfg.Addrs[0])
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := b.dialHandshake(conn, 0); err != nil {
		t.Fatal(err)
	}
	id := nodeIdentity()
	conn.Write(append(append(offerMagic[:], 1), id[:]...))
	var ans [9]byte
	if _, err := io.ReadFull(conn, ans[:]); err != nil || ans[8] != 1 {
		t.Fatalf("answer %v, %v: want shared memory accepted", ans, err)
	}
	msg := binary.LittleEndian.AppendUint16(nil, 0) // no ring
	msg = append(msg, make([]byte, 4+8+4+16)...)    // pid, probe address and length, probe
	conn.Write(msg)
	var status [1]byte
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(conn, status[:]); err != nil || status[0] != ringRefused {
		t.Fatalf("status %v, %v: want the socket", status, err)
	}
	conn.Write(append(AppendHeader(nil, &Header{Kind: KindEager, Tag: 5, Len: 2, Total: 2}), "hi"...))
	rec.wait(t, 1)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.frames) != 1 || rec.frames[0].Tag != 5 || string(rec.payload[0]) != "hi" {
		t.Fatalf("frames %v", rec.frames)
	}
}

// A ring reader polls only as the socket readers would (a core of its own, or forced) and
// otherwise sleeps at once (parked on its bell); a writer wakes it.
func TestShmReaderSleepsUnlessItMayPoll(t *testing.T) {
	for _, tc := range []struct {
		name  string
		spin  time.Duration
		parks bool
	}{{"never", -1, true}, {"forced", time.Hour, false}} {
		t.Run(tc.name, func(t *testing.T) {
			a, b, rec := shmPairSpin(t, TransportAuto, "shmspin"+tc.name, tc.spin)
			send := func(tag int32) { t.Helper(); sendOneAndWait(t, b, rec, tag) }
			send(0)
			rr := a.rings[1].Load()
			if rr == nil {
				t.Fatal("no ring reader for rank 1")
			}
			parked := false
			for deadline := time.Now().Add(300 * time.Millisecond); time.Now().Before(deadline) && !parked; time.Sleep(time.Millisecond) {
				parked = rr.parked.Load()
			}
			if parked != tc.parks {
				t.Fatalf("reader parked: %v, want %v", parked, tc.parks)
			}
			send(1) // a sleeping reader is woken by the writer
		})
	}
}

// The probe reads a peer's memory where the kernel allows it, and notices memory that is not
// the probe; a missing process is an error, not a crash.
func TestShmSingleCopyProbeReadsThePeersMemory(t *testing.T) {
	probe := make([]byte, cmaProbeSize)
	copy(probe, "0123456789abcdef")
	addr := uint64(uintptr(unsafe.Pointer(&probe[0])))
	if err := probeSingleCopy(os.Getpid(), addr, probe[:cmaProbeCheck]); err != nil {
		t.Fatalf("probe of ourselves: %v", err)
	}
	if err := probeSingleCopy(os.Getpid(), addr, []byte("fedcba9876543210")); err == nil {
		t.Error("a probe with other bytes passed")
	}
	if err := probeSingleCopy(1<<22+1, addr, probe[:cmaProbeCheck]); err == nil {
		t.Error("a probe of a missing process passed")
	}
	runtime.KeepAlive(probe)
	if s, err := transportSetting("shm-cma"); err != nil || s != TransportAuto {
		t.Errorf("shm-cma: %q, %v; want the old name taken as %q", s, err, TransportAuto)
	}
}

// pollRecorder records, per frame, whether a goroutine in TCPEndpoint.Poll dispatched it.
type pollRecorder struct {
	mu       sync.Mutex
	tags     []int32
	byPoller []bool
	done     chan struct{} // closed by the next frame
	arrived  *atomic.Bool  // set by the next frame (what Poll watches)
}

func (r *pollRecorder) HandleFrame(peer int, h *Header, payload []byte) error {
	stack := make([]byte, 8<<10)
	stack = stack[:runtime.Stack(stack, false)]
	r.mu.Lock()
	r.tags = append(r.tags, h.Tag)
	r.byPoller = append(r.byPoller, bytes.Contains(stack, []byte("(*TCPEndpoint).Poll(")))
	if r.done != nil {
		close(r.done)
		r.done = nil
	}
	if r.arrived != nil {
		r.arrived.Store(true)
		r.arrived = nil
	}
	r.mu.Unlock()
	return nil
}
func (r *pollRecorder) DataBuffer(int, *Header) ([]byte, error) { return nil, nil }
func (r *pollRecorder) DataDone(int, *Header) error             { return nil }
func (r *pollRecorder) PeerClosed(int, uint8, error)            {}

// A goroutine that waits for a frame from a peer on its node polls the peer's ring and
// dispatches the frame itself (Poll), in order with the reader goroutine's dispatch; the
// reader goroutine takes over when it stops.
func TestShmWaiterDispatchesItsPeersFrames(t *testing.T) {
	if !shmSupported {
		t.Skip("no shared-memory transport on this system")
	}
	s := secret()
	lnA, _ := net.Listen("tcp", "127.0.0.1:0")
	lnB, _ := net.Listen("tcp", "127.0.0.1:0")
	addrs := []string{lnA.Addr().String(), lnB.Addr().String()}
	jobID := fmt.Sprintf("shmpoll-%d", os.Getpid())
	cfg := func(rank int, ln net.Listener) TCPConfig {
		return TCPConfig{Rank: rank, Size: 2, Addrs: addrs, Listener: ln, Secret: s, DialTimeout: 2 * time.Second,
			JobID: jobID, SpinWait: time.Hour, Logf: t.Logf}
	}
	a, err := NewTCP(cfg(0, lnA))
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewTCP(cfg(1, lnB))
	if err != nil {
		t.Fatal(err)
	}
	rec := &pollRecorder{}
	a.Start(rec)
	b.Start(newRecorder())
	t.Cleanup(func() { a.Close(); b.Close() })
	send := func(tag int32) {
		if err := b.Send(0, &Header{Kind: KindEager, Tag: tag, Len: 1, Total: 1}, []byte("x")); err != nil {
			t.Error(err)
		}
	}
	first := make(chan struct{})
	rec.done = first
	send(0)
	<-first
	rr := a.rings[1].Load()
	if rr == nil {
		t.Fatal("no ring from rank 1")
	}
	const rounds = 50
	for i := int32(1); i <= rounds; i++ {
		done := new(atomic.Bool)
		rec.mu.Lock()
		rec.arrived = done
		rec.mu.Unlock()
		sent := make(chan struct{})
		go func() {
			defer close(sent)
			for rr.pollers.Load() == 0 { // send while the waiter polls
				runtime.Gosched()
			}
			send(i)
		}()
		for !done.Load() {
			a.Poll(1, done)
		}
		<-sent
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	polled := 0
	for i, tag := range rec.tags {
		if tag != int32(i) {
			t.Fatalf("frame %d has tag %d: order lost", i, tag)
		}
		if rec.byPoller[i] {
			polled++
		}
	}
	if polled == 0 {
		t.Fatalf("none of %d frames was dispatched by the waiting goroutine", rounds)
	}
	// Without a waiter, the reader goroutine dispatches again.
	last := make(chan struct{})
	rec.done = last
	rec.mu.Unlock()
	send(rounds + 1)
	<-last
	rec.mu.Lock()
	if rec.byPoller[len(rec.byPoller)-1] {
		t.Fatal("a frame sent with nobody waiting was dispatched by a poller")
	}
	t.Logf("%d of %d frames dispatched by the waiting goroutine", polled, rounds)
}

// With MPIOS_SHM_WAKE=futex, sleeping sides sleep on futexes: a reader that never polls is
// woken by the writer's FUTEX_WAKE for every small frame, and a writer that waits for room
// while a message larger than the ring streams through it is woken by the reader's.
func TestShmFutexWakeDeliversEveryFrame(t *testing.T) {
	a, b, rec := shmPairWake(t, TransportShmCopy, fmt.Sprintf("shmfutex-%d", os.Getpid()), -1, ShmWakeFutex)
	for i := range 20 {
		if err := b.Send(0, &Header{Kind: KindEager, Tag: int32(i), Len: 1, Total: 1}, []byte("x")); err != nil {
			t.Fatal(err)
		}
		rec.wait(t, 1) // the reader sleeps before the next one
	}
	if l := linkOf(b, 0); l == nil || !l.ring.futex {
		t.Fatal("the ring does not use futexes")
	}
	big := make([]byte, 4*ringDataBytes+123)
	for i := range big {
		big[i] = byte(i * 7)
	}
	h := &Header{Kind: KindData, ID2: 9, Len: uint32(len(big)), Total: uint64(len(big))}
	if err := b.Send(0, h, big); err != nil {
		t.Fatal(err)
	}
	rec.wait(t, 1)
	rec.mu.Lock()
	got := rec.bufs[9]
	rec.mu.Unlock()
	if !bytes.Equal(got, big) {
		t.Fatal("the large message arrived corrupted")
	}
	if rr := a.rings[1].Load(); rr == nil || !rr.r.futex {
		t.Fatal("the reader does not sleep on a futex")
	}
}

// Local futex wakes (a goroutine starts waiting, a peer goes away) race the ring's unmapping
// when the connection ends: they must not touch the unmapped ring (no SIGSEGV).
func TestShmFutexWakeRacesUnmap(t *testing.T) {
	for i := range 20 {
		a, b, rec := shmPairWake(t, TransportShmCopy, fmt.Sprintf("shmfutexunmap-%d-%d", os.Getpid(), i), -1, ShmWakeFutex)
		if err := b.Send(0, &Header{Kind: KindEager, Len: 1, Total: 1}, []byte("x")); err != nil {
			t.Fatal(err)
		}
		rec.wait(t, 1)
		rr := a.rings[1].Load()
		if rr == nil {
			t.Fatal("no ring reader")
		}
		var stop atomic.Bool
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				rr.r.ring() // what Waiting, Poll and a closing socket do
				a.Waiting(1, true)
				a.Waiting(1, false)
			}
		}()
		b.Close()
		// The reader goroutine ends and unmaps the ring while the wakes go on.
		for unmapped := false; !unmapped; {
			runtime.Gosched()
			rr.r.mapMu.RLock()
			unmapped = rr.r.unmapped
			rr.r.mapMu.RUnlock()
		}
		rr.r.ring() // and after
		stop.Store(true)
		wg.Wait()
		a.Close()
	}
}

// A writer waiting for room polls only its short window while nothing else of its rank waits,
// then sleeps until the reader's doorbell; while a goroutine of the rank waits for a message
// (and polls, yielding the processor, which keeps Go's scheduler from delivering doorbells
// from the network poller) it polls as long as that goroutine may, and sleeps only after.
func TestShmWriterPollsWhileItsRankWaits(t *testing.T) {
	for _, tc := range []struct {
		name    string
		waiters int32
		sleeps  bool
	}{{"idle rank", 0, true}, {"waiting rank", 1, false}} {
		t.Run(tc.name, func(t *testing.T) {
			mem := make([]byte, ringMapBytes)
			rw, err := newShmRing(mem)
			if err != nil {
				t.Fatal(err)
			}
			rr, _ := newShmRing(mem)
			rr.ringPeer, rw.ringPeer = rw.ring, rr.ring // the doorbells, within the process
			var waiters atomic.Int32
			var waitAt atomic.Int64
			var writing atomic.Int32
			waiters.Store(tc.waiters)
			waitAt.Store(monoNow())
			// A short window of a nanosecond, a long one of an hour.
			policy := &pollPolicy{spin: time.Nanosecond, long: time.Hour, waiters: &waiters, waitAt: &waitAt, writing: &writing}
			w := newRingWriter(rw, policy)
			msg := pattern(3*ringDataBytes/2, 7)
			done := make(chan error, 1)
			go func() { done <- w.write(noDeadline, msg) }()
			// The ring fills; the writer then waits for room.
			for rw.tail.Load() != ringDataBytes {
				runtime.Gosched()
			}
			slept := false
			for i := 0; i < 20000 && !slept; i++ {
				slept = rw.wwait.Load() == 1
				runtime.Gosched()
			}
			if slept != tc.sleeps {
				t.Fatalf("writer asked for a doorbell: %v, want %v", slept, tc.sleeps)
			}
			r := newRingReader(rr, nil)
			got := make([]byte, len(msg))
			if _, err := io.ReadFull(r, got); err != nil {
				t.Fatal(err)
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, msg) {
				t.Fatal("the stream arrived changed")
			}
		})
	}
}

// A goroutine that polls the ring takes down the flag by which the sleeping reader goroutine
// asked the writer for a doorbell; the reader goroutine must not sleep on after the poller
// leaves, or the next frame, sent without a doorbell, waits forever (seen: ranks hung once
// the load gate had closed, so that nothing polled or woke the reader any more).
func TestShmPollerLeavesNoReaderAsleepWithoutDoorbell(t *testing.T) {
	for _, wake := range []string{ShmWakeDoorbell, ShmWakeFutex} {
		t.Run(wake, func(t *testing.T) {
			a, b, rec := shmPairWake(t, TransportAuto, "shmpollwake"+wake, time.Microsecond, wake)
			send := func(tag int32) { t.Helper(); sendOneAndWait(t, b, rec, tag) }
			send(0)
			rr := a.rings[1].Load()
			for !rr.parked.Load() || rr.r.rwait.Load() == 0 {
				time.Sleep(100 * time.Microsecond) // the reader's 1 us window ends; it sleeps
			}
			var done atomic.Bool
			done.Store(true) // a poll that finds its message already there: in and out
			a.Poll(1, &done)
			send(1) // no doorbell: the flag is down
		})
	}
}
