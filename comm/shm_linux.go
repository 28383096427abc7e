package comm

import (
	"fmt"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// shmSupported: rings need process-shared futexes (and may use process_vm_readv).
const shmSupported = true

// Futexes on the shared words. They are process-shared (not FUTEX_PRIVATE): the two sides are
// different processes. Errors are ignored on purpose: a wait that returns early (EAGAIN,
// EINTR, timeout) only makes the caller look again, and a wake that finds no sleeper is free.
const (
	futexWaitOp = 0 // FUTEX_WAIT
	futexWakeOp = 1 // FUTEX_WAKE
)

func futexWait(word *atomic.Uint32, val uint32, timeout time.Duration) {
	ts := unix.NsecToTimespec(int64(timeout))
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(word)), futexWaitOp, uintptr(val), uintptr(unsafe.Pointer(&ts)), 0, 0)
}

func futexWake(word *atomic.Uint32) {
	unix.RawSyscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(word)), futexWakeOp, 1, 0, 0, 0)
}

// readRemote fills dst from address addr of process pid.
func readRemote(pid int, dst []byte, addr uint64) error {
	if len(dst) == 0 {
		return nil
	}
	local := []unix.Iovec{{Base: &dst[0]}}
	local[0].SetLen(len(dst))
	remote := []unix.RemoteIovec{{Base: uintptr(addr), Len: len(dst)}}
	n, err := unix.ProcessVMReadv(pid, local, remote, 0)
	if err != nil {
		return fmt.Errorf("process_vm_readv from pid %d: %w", pid, err)
	}
	if n != len(dst) {
		return fmt.Errorf("process_vm_readv from pid %d: %d of %d bytes", pid, n, len(dst))
	}
	return nil
}
