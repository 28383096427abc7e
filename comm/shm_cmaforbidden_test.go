//go:build linux

package comm

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Where the kernel forbids process_vm_readv (Yama's ptrace_scope, another user, seccomp),
// large messages still arrive, copied through the ring. The receiving rank is a separate
// process whose seccomp filter makes process_vm_readv fail with EPERM, as those settings do;
// the sending rank is this test.
func TestShmSingleCopyForbiddenFallsBackToTheRing(t *testing.T) {
	if !shmSupported {
		t.Skip("no shared-memory transport on this system")
	}
	s := secret()
	lnA, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lnB, _ := net.Listen("tcp", "127.0.0.1:0")
	lf, err := lnA.(*net.TCPListener).File()
	if err != nil {
		t.Fatal(err)
	}
	lnA.Close()
	jobID := fmt.Sprintf("shmnocma%d", os.Getpid())
	addrs := lnA.Addr().String() + "," + lnB.Addr().String()
	cmd := exec.Command(os.Args[0], "-test.run=^TestShmHelperReaderWithoutProcessVMReadv$", "-test.v")
	cmd.Env = append(os.Environ(), "MPIOS_TEST_NOCMA_READER="+hex.EncodeToString(s)+" "+addrs+" "+jobID)
	cmd.ExtraFiles = []*os.File{lf} // fd 3: rank 0's listener
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lf.Close()
	b, err := NewTCP(TCPConfig{Rank: 1, Size: 2, Addrs: strings.Split(addrs, ","), Listener: lnB, Secret: s,
		DialTimeout: 10 * time.Second, Transport: TransportAuto, JobID: jobID, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	b.Start(newRecorder())
	defer b.Close()
	sendMessage(t, b, 42, pattern(3<<20, 9), 1<<20)
	l := linkOf(b, 0)
	if l == nil {
		t.Fatal("ranks of one node did not set up a ring")
	}
	if l.cma {
		t.Error("the writer sends by single copy to a reader that may not use process_vm_readv")
	}
	werr := cmd.Wait()
	t.Logf("reader process:\n%s", out.String())
	if werr != nil || !strings.Contains(out.String(), "reader: 3 MiB arrived intact, single copy false") {
		t.Fatalf("reader process: %v", werr)
	}
}

// TestShmHelperReaderWithoutProcessVMReadv is the receiving rank of
// TestShmSingleCopyForbiddenFallsBackToTheRing, in a process of its own.
func TestShmHelperReaderWithoutProcessVMReadv(t *testing.T) {
	arg := os.Getenv("MPIOS_TEST_NOCMA_READER")
	if arg == "" {
		t.Skip("helper process of TestShmSingleCopyForbiddenFallsBackToTheRing")
	}
	f := strings.Fields(arg)
	s, _ := hex.DecodeString(f[0])
	if err := denyProcessVMReadv(); err != nil {
		t.Fatalf("seccomp: %v", err)
	}
	if err := readRemote(os.Getpid(), make([]byte, 8), uint64(uintptr(unsafe.Pointer(&s[0])))); !errors.Is(err, syscall.EPERM) {
		t.Fatalf("process_vm_readv under the filter: %v, want EPERM", err)
	}
	ln, err := net.FileListener(os.NewFile(3, "listener"))
	if err != nil {
		t.Fatal(err)
	}
	a, err := NewTCP(TCPConfig{Rank: 0, Size: 2, Addrs: strings.Split(f[1], ","), Listener: ln, Secret: s,
		DialTimeout: 10 * time.Second, Transport: TransportAuto, JobID: f[2], Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	rec := newDataRecorder()
	a.Start(rec)
	defer a.Close()
	rec.wait(t, 3) // the three 1 MiB chunks
	rr := a.rings[1].Load()
	if rr == nil {
		t.Fatal("no ring from rank 1")
	}
	rec.mu.Lock()
	intact := bytes.Equal(rec.bufs[42], pattern(3<<20, 9))
	rec.mu.Unlock()
	if !intact {
		t.Fatal("the message arrived corrupted")
	}
	fmt.Printf("reader: 3 MiB arrived intact, single copy %v\n", rr.d.link.cma)
}

// denyProcessVMReadv installs a seccomp filter on every thread of the process that fails
// process_vm_readv with EPERM and allows everything else.
func denyProcessVMReadv() error {
	prog := []unix.SockFilter{
		{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: 0}, // seccomp_data.nr
		{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, Jt: 0, Jf: 1, K: unix.SYS_PROCESS_VM_READV},
		{Code: unix.BPF_RET | unix.BPF_K, K: unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)},
		{Code: unix.BPF_RET | unix.BPF_K, K: unix.SECCOMP_RET_ALLOW},
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	if _, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&fprog))); e != 0 {
		return fmt.Errorf("seccomp filter: %w", e)
	}
	return nil
}
