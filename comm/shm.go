package comm

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/mpios/mpios/internal/job"
	"golang.org/x/sys/unix"
)

// Shared memory between the ranks of a node.
//
// Every ordered pair of ranks still has its TCP connection, dialed and authenticated as
// before; it is how peers find each other and how a dead process is noticed (the kernel
// closes its sockets). Right after the handshake the two ends compare node identities; if
// they share a node (same boot, host name and kernel namespaces) and neither has shared memory
// turned off, the dialer creates a ring under /dev/shm (mode 0600, named after the job and
// keyed by the job secret), writes a MAC over the handshake's nonces into it, and tells the
// acceptor its name. The acceptor maps it only if the file belongs to its own user, is
// private, has the expected size and carries that MAC -- proof that the job's authenticated
// peer made it -- and then the dialer removes the name, so nothing is left on /dev/shm even if
// both crash later. From then on the connection's frames, its Bye included, go through the
// ring; the socket stays open to notice the other process's death and to carry the doorbells
// that wake a sleeping side (see shmRing). Large Data frames are read by the receiver straight
// out of the sender's memory with process_vm_readv where the kernel allows it (one copy, as
// MPICH and Open MPI do), else streamed through the ring.
//
// A redirect (migration) ends the old connection with a Bye through its ring and dials the
// successor, which negotiates afresh: a rank that moves onto its peer's node switches to
// shared memory, one that moves away to TCP, at the same ordered boundary as before.

// EnvTransport selects the transport between ranks (TCPConfig.Transport).
const EnvTransport = "MPIOS_TRANSPORT"

// Transport settings.
const (
	// TransportAuto uses shared memory with peers on this node and TCP with the others.
	TransportAuto = "auto"
	// TransportTCP uses TCP with every peer (for comparisons and diagnosis).
	TransportTCP = "tcp"
	// TransportShmCopy is TransportAuto without the single-copy path: large messages between
	// ranks of a node are copied through the ring, as where the kernel forbids
	// process_vm_readv.
	TransportShmCopy = "shm-copy"
)

// ShmDir is where rings are created: tmpfs, removed at reboot.
const ShmDir = "/dev/shm"

// cmaMin is the smallest Data frame read with process_vm_readv. Below it the ring is faster:
// its two copies run on two cores at once, the first pieces of a frame are copied out while
// the rest is copied in, and a frame of up to 512 KiB stays in the cores' caches; in a
// ping-pong the ring took 34 us for 256 KiB and 63 us for 512 KiB against 48 and 80 us with
// process_vm_readv (MPICH 43 and 77), both 122-126 us for 1 MiB, and process_vm_readv 387 us
// for 4 MiB against 566 (MPICH 388; docs/PERFORMANCE.md, 2026-11-27). mpi's rendezvous sends
// 1 MiB chunks, so a large message's full chunks take the single copy.
const cmaMin = 1 << 20

// transportSetting validates the configured or environment setting.
func transportSetting(cfg string) (string, error) {
	s := strings.ToLower(strings.TrimSpace(cfg))
	if s == "" {
		s = strings.ToLower(strings.TrimSpace(os.Getenv(EnvTransport)))
	}
	switch s {
	case "", TransportAuto, "shm", "shm-cma":
		// shm-cma forced the single copy while auto chose by a timing probe; auto now takes
		// it wherever the kernel allows it, and the old name stays accepted for scripts.
		return TransportAuto, nil
	case TransportTCP, TransportShmCopy:
		return s, nil
	}
	return "", fmt.Errorf("comm: transport %q: want auto, tcp, shm-copy or shm-cma (%s)", cfg, EnvTransport)
}

// nodeIdentity names the node (kernel instance, namespaces, launcher's node) this process
// lives in: two processes with equal identities can share /dev/shm and address each other by
// pid.
var nodeIdentity = sync.OnceValue(func() [32]byte {
	h := sha256.New()
	boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		// Without a boot id, no two processes agree: shared memory stays off.
		var r [16]byte
		rand.Read(r[:])
		boot = r[:]
	}
	h.Write(boot)
	// MPIOS_NODE is the pcmd node that started the rank: two pcmd nodes on one machine are
	// two nodes to the job (they place, count and migrate ranks separately).
	host, _ := os.Hostname()
	fmt.Fprintf(h, "\x00%s\x00%d\x00%s", host, os.Geteuid(), os.Getenv(job.EnvNode))
	for _, ns := range []string{"net", "mnt", "pid", "ipc"} {
		l, _ := os.Readlink("/proc/self/ns/" + ns)
		fmt.Fprintf(h, "\x00%s", l)
	}
	var id [32]byte
	h.Sum(id[:0])
	return id
})

// segmentPrefix is the start of the names of a job's rings. The tag, keyed by the job secret,
// keeps other jobs of the same user from guessing and pre-creating a ring's name.
func segmentPrefix(jobID string, secret []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("mpios shm segment\x00" + jobID))
	return "mpios." + jobID + "." + hex.EncodeToString(m.Sum(nil)[:8]) + "."
}

// RemoveJobSegments removes the shared-memory rings of job jobID that a dead process left on
// this node (a rank that crashed while setting up a ring leaves one; rings in use have no name
// any more). Launchers call it when they reap a rank or a job; rings being set up by live
// processes are left alone, so it is safe to call while other ranks of the job run.
func RemoveJobSegments(jobID string) error {
	if err := job.ValidateID(jobID); err != nil {
		return fmt.Errorf("comm: remove segments: %w", err)
	}
	names, err := filepath.Glob(filepath.Join(ShmDir, "mpios."+jobID+".*"))
	if err != nil {
		return err
	}
	var errs []error
	for _, n := range names {
		if creatorAlive(filepath.Base(n)) {
			continue
		}
		if err := os.Remove(n); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// creatorAlive reports whether the process that created ring name (…​.<src>-<dst>.<pid>.<rand>)
// still exists.
func creatorAlive(name string) bool {
	f := strings.Split(name, ".")
	if len(f) < 3 {
		return false
	}
	pid, err := strconv.Atoi(f[len(f)-2])
	if err != nil || pid <= 0 {
		return false
	}
	err = unix.Kill(pid, 0)
	return err == nil || errors.Is(err, unix.EPERM)
}

// shmLink is one connection's ring, seen from one side.
type shmLink struct {
	mem  []byte
	ring *shmRing
	cma  bool // the reader takes large Data frames from the writer's memory
	pid  int  // the writer's pid (reader side, for process_vm_readv)
	w    *ringWriter
	rd   *ringReader
	once sync.Once
}

// unmap releases the mapping. Callers make sure nothing uses the ring any more.
func (l *shmLink) unmap() {
	if l == nil {
		return
	}
	l.once.Do(func() {
		l.ring.gone.Store(true)
		l.ring.mapMu.Lock() // no local futex wake is under way, and none comes
		l.ring.unmapped = true
		unix.Munmap(l.mem)
		l.ring.mapMu.Unlock()
	})
}

// Negotiation messages, after the authentication handshake.
var (
	offerMagic  = [8]byte{'M', 'P', 'I', 'O', 'S', 'T', 'O', '1'}
	answerMagic = [8]byte{'M', 'P', 'I', 'O', 'S', 'T', 'A', '1'}
)

// Answers of the acceptor to the ring it was given.
const (
	ringRefused byte = 0 // use the socket
	ringCopy    byte = 1 // ring, every byte through it
	ringCMA     byte = 2 // ring, large Data frames by process_vm_readv
	// ringFutex, or'ed into ringCopy or ringCMA: both sides sleep on futexes (EnvShmWake).
	ringFutex byte = 4
)

// EnvShmWake selects how a side of a ring that sleeps is woken: "doorbell" (the default) or
// "futex" (see shmRing). The reading side's setting decides for the ring.
const EnvShmWake = "MPIOS_SHM_WAKE"

// Settings of EnvShmWake (TCPConfig.ShmWake).
const (
	ShmWakeDoorbell = "doorbell"
	ShmWakeFutex    = "futex"
)

// shmWakeSetting validates the configured or environment setting.
func shmWakeSetting(cfg string) (string, error) {
	s := strings.ToLower(strings.TrimSpace(cfg))
	if s == "" {
		s = strings.ToLower(strings.TrimSpace(os.Getenv(EnvShmWake)))
	}
	switch s {
	case "", ShmWakeDoorbell:
		return ShmWakeDoorbell, nil
	case ShmWakeFutex:
		return ShmWakeFutex, nil
	}
	return "", fmt.Errorf("comm: shared-memory wake %q: want doorbell or futex (%s)", cfg, EnvShmWake)
}

const maxSegmentName = 200

// transcript is what both ends of an authenticated connection know and nobody else does
// fresh: the handshake's nonces. A ring's MAC covers it, so a ring cannot be replayed.
type transcript struct {
	nonceA, nonceD []byte
	src, dst       int
}

func (e *TCPEndpoint) ringMAC(t *transcript, name string) []byte {
	return e.mac('m', t.nonceA, t.nonceD, []byte(name))
}

// offerRing runs the dialer's side of the negotiation on an authenticated connection: it
// returns the ring to write to, or nil to write on the socket.
func (e *TCPEndpoint) offerRing(conn net.Conn, t *transcript) (*shmLink, error) {
	id := nodeIdentity()
	want := byte(0)
	if shmSupported && e.transport != TransportTCP {
		want = 1
	}
	if _, err := conn.Write(append(append(offerMagic[:], want), id[:]...)); err != nil {
		return nil, err
	}
	var ans [8 + 1]byte
	if _, err := io.ReadFull(conn, ans[:]); err != nil {
		return nil, fmt.Errorf("reading transport answer: %w", err)
	}
	if [8]byte(ans[:8]) != answerMagic {
		return nil, fmt.Errorf("%w: bad transport answer", ErrAuth)
	}
	if ans[8] == 0 {
		return nil, nil
	}
	// Same node: create the ring. A failure here falls back to TCP (name length 0).
	var suffix [8]byte
	rand.Read(suffix[:])
	name := fmt.Sprintf("%s%d-%d.%d.%x", e.shmPrefix, t.src, t.dst, os.Getpid(), suffix)
	mem, path, err := createRing(name, e.ringMAC(t, name))
	if err != nil {
		e.logf("shared memory with rank %d unavailable, using TCP: %v", t.dst, err)
		name = ""
	} else {
		defer os.Remove(path) // mapped on both sides (or refused): the name is no longer needed
	}
	// The probe is read by the acceptor with process_vm_readv to learn whether the kernel lets
	// it read our memory; its first bytes, also sent on the socket, tell that it read the
	// right memory.
	probe := make([]byte, cmaProbeSize)
	rand.Read(probe[:cmaProbeCheck])
	var pin runtime.Pinner // on the heap and in place until the acceptor has read it
	pin.Pin(&probe[0])
	defer pin.Unpin()
	probeLen := uint32(len(probe))
	if e.transport == TransportShmCopy {
		probeLen = 0
	}
	msg := binary.LittleEndian.AppendUint16(nil, uint16(len(name)))
	msg = append(msg, name...)
	msg = binary.LittleEndian.AppendUint32(msg, uint32(os.Getpid()))
	msg = binary.LittleEndian.AppendUint64(msg, uint64(uintptr(unsafe.Pointer(&probe[0]))))
	msg = binary.LittleEndian.AppendUint32(msg, probeLen)
	msg = append(msg, probe[:cmaProbeCheck]...)
	if _, err := conn.Write(msg); err != nil {
		if mem != nil {
			unix.Munmap(mem)
		}
		return nil, err
	}
	var status [1]byte
	_, err = io.ReadFull(conn, status[:])
	if err != nil || status[0] == ringRefused || mem == nil {
		if mem != nil {
			unix.Munmap(mem)
		}
		if err != nil {
			return nil, fmt.Errorf("reading ring answer: %w", err)
		}
		return nil, nil
	}
	ring, err := newShmRing(mem)
	if err != nil {
		unix.Munmap(mem)
		return nil, err
	}
	ring.futex = status[0]&ringFutex != 0
	l := &shmLink{mem: mem, ring: ring, cma: status[0]&^ringFutex == ringCMA}
	l.w = newRingWriter(ring, e.pollPolicy())
	return l, nil
}

// createRing creates and maps a private ring file with its header written.
func createRing(name string, mac []byte) ([]byte, string, error) {
	path := filepath.Join(ShmDir, name)
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, "", fmt.Errorf("create %s: %w", path, err)
	}
	defer unix.Close(fd)
	if err := unix.Ftruncate(fd, ringMapBytes); err != nil {
		os.Remove(path)
		return nil, "", fmt.Errorf("size %s: %w", path, err)
	}
	mem, err := unix.Mmap(fd, 0, ringMapBytes, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		os.Remove(path)
		return nil, "", fmt.Errorf("map %s: %w", path, err)
	}
	initRingHeader(mem, mac)
	return mem, path, nil
}

// answerRing runs the acceptor's side: it returns the ring to read from, or nil to read the
// socket.
func (e *TCPEndpoint) answerRing(conn net.Conn, t *transcript) (*shmLink, error) {
	var offer [8 + 1 + 32]byte
	if _, err := io.ReadFull(conn, offer[:]); err != nil {
		return nil, fmt.Errorf("reading transport offer: %w", err)
	}
	if [8]byte(offer[:8]) != offerMagic {
		return nil, fmt.Errorf("%w: bad transport offer", ErrAuth)
	}
	id := nodeIdentity()
	accept := byte(0)
	if shmSupported && offer[8] == 1 && e.transport != TransportTCP && [32]byte(offer[9:]) == id {
		accept = 1
	}
	if _, err := conn.Write(append(answerMagic[:], accept)); err != nil {
		return nil, err
	}
	if accept == 0 {
		return nil, nil
	}
	var nl [2]byte
	if _, err := io.ReadFull(conn, nl[:]); err != nil {
		return nil, err
	}
	n := int(binary.LittleEndian.Uint16(nl[:]))
	if n > maxSegmentName {
		return nil, fmt.Errorf("%w: ring name of %d bytes", ErrAuth, n)
	}
	rest := make([]byte, n+4+8+4+cmaProbeCheck)
	if _, err := io.ReadFull(conn, rest); err != nil {
		return nil, err
	}
	name := string(rest[:n])
	pid := int(binary.LittleEndian.Uint32(rest[n:]))
	probeAddr := binary.LittleEndian.Uint64(rest[n+4:])
	probeLen := binary.LittleEndian.Uint32(rest[n+12:])
	probe := rest[n+16:]
	if name == "" { // the dialer could not create one
		_, err := conn.Write([]byte{ringRefused})
		return nil, err
	}
	l, err := e.openRing(name, t)
	if err != nil {
		e.logf("shared memory with rank %d refused, using TCP: %v", t.src, err)
		_, werr := conn.Write([]byte{ringRefused})
		return nil, werr
	}
	status := ringCopy
	if probeLen == cmaProbeSize && e.transport != TransportShmCopy {
		switch err := probeSingleCopy(pid, probeAddr, probe); {
		case err == nil:
			status = ringCMA
		case !cmaForbidden(err):
			e.logf("process_vm_readv from rank %d: %v; copying through the ring", t.src, err)
		}
	}
	l.cma, l.pid = status == ringCMA, pid
	if e.shmWake == ShmWakeFutex {
		status |= ringFutex
		l.ring.futex = true
	}
	l.rd = newRingReader(l.ring, e.pollPolicy())
	if _, err := conn.Write([]byte{status}); err != nil {
		l.unmap()
		return nil, err
	}
	return l, nil
}

// openRing maps a ring the dialer created, after checking that it is what a member of the
// job made for this connection.
func (e *TCPEndpoint) openRing(name string, t *transcript) (*shmLink, error) {
	want := fmt.Sprintf("%s%d-%d.", e.shmPrefix, t.src, t.dst)
	if !strings.HasPrefix(name, want) || strings.ContainsAny(name, "/\x00") {
		return nil, fmt.Errorf("%w: ring name %q not of this job and pair", ErrAuth, name)
	}
	path := filepath.Join(ShmDir, name)
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, err
	}
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		return nil, fmt.Errorf("%s is not a regular file", path)
	case int(st.Uid) != os.Geteuid() || st.Mode&0o077 != 0:
		return nil, fmt.Errorf("%w: %s has owner %d and mode %o, want %d and 0600", ErrAuth, path, st.Uid, st.Mode&0o777, os.Geteuid())
	case st.Size != ringMapBytes:
		return nil, fmt.Errorf("%s is %d bytes, want %d", path, st.Size, ringMapBytes)
	}
	mem, err := unix.Mmap(fd, 0, ringMapBytes, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("map %s: %w", path, err)
	}
	if [8]byte(mem[ringMagicOff:]) != ringMagic || binary.LittleEndian.Uint64(mem[ringSizeOff:]) != ringDataBytes ||
		!hmac.Equal(mem[ringMACOff:ringMACOff+macSize], e.ringMAC(t, name)) {
		unix.Munmap(mem)
		return nil, fmt.Errorf("%w: %s was not made by rank %d of this job", ErrAuth, path, t.src)
	}
	ring, err := newShmRing(mem)
	if err != nil {
		unix.Munmap(mem)
		return nil, err
	}
	return &shmLink{mem: mem, ring: ring}, nil
}

// The single-copy probe: its size, and the bytes of it that are also sent on the socket.
const (
	cmaProbeSize  = 4096
	cmaProbeCheck = 16
)

// probeSingleCopy reads the dialer's probe (cmaProbeSize bytes at addr of process pid,
// starting with check) with process_vm_readv: whether the kernel lets this process read the
// dialer's memory, and reads the right memory.
//
// Until 2026-11-27 it also timed the read against two local copies of the probe (the ring's
// two copies) and took the single copy only if it was no slower. That compared
// process_vm_readv (13 GB/s here) with a copy within one core's cache (50 GB/s), not with the
// ring, whose copies hand every line from one core to the other (7 GB/s for a 4 MiB
// ping-pong); and the single copy looked slow end to end because its writer slept through
// the acknowledgement (see ringWriter.waitFor). Measured since: 4 MiB ping-pong 10.4 GB/s
// with the single copy against 7.1 through the ring (MPICH 10.3), and faster in every
// polling and wake setting (docs/PERFORMANCE.md). MPICH and Open MPI use it unconditionally.
func probeSingleCopy(pid int, addr uint64, check []byte) error {
	got := make([]byte, cmaProbeSize)
	if err := readRemote(pid, got, addr); err != nil {
		return err
	}
	if !bytes.Equal(got[:len(check)], check) {
		return fmt.Errorf("process_vm_readv from pid %d: the probe reads back wrong", pid)
	}
	return nil
}

// cmaForbidden reports errors by which the kernel or its settings refuse process_vm_readv
// (Yama's ptrace_scope, seccomp filters, kernels without it): the ring copies instead.
func cmaForbidden(err error) bool {
	return errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.ENOSYS) || errors.Is(err, syscall.EACCES)
}

// writeRemoteData sends a Data frame over a ring: header and a descriptor of the payload in
// this process, which the reader copies out with process_vm_readv; it returns once the reader
// has taken it (the payload may be reused then).
func (l *shmLink) writeRemoteData(h *Header, payload []byte, scratch []byte) error {
	var pin runtime.Pinner // in place until the reader has copied it
	pin.Pin(&payload[0])
	defer pin.Unpin()
	l.w.seq++
	hc := *h
	hc.Flags |= FlagRemote
	b := AppendHeader(scratch[:0], &hc)
	b = binary.LittleEndian.AppendUint64(b, uint64(uintptr(unsafe.Pointer(&payload[0]))))
	b = binary.LittleEndian.AppendUint64(b, l.w.seq)
	if err := l.w.write(noDeadline, b); err != nil {
		return err
	}
	return l.w.waitFor(noDeadline, l.w.acked)
}

// noDeadline waits as long as the peer lives.
var noDeadline time.Time

// remoteDescSize is the descriptor that follows a FlagRemote Data header: address, sequence.
const remoteDescSize = 16
