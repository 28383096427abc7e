package comm

import (
	"fmt"
	"math"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// shmSupported: shared memory between ranks is used on Linux, where it is tested (and where
// process_vm_readv exists).
const shmSupported = true

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

// futex operations on a word that two processes map (shared, not FUTEX_PRIVATE_FLAG).
const (
	futexWaitOp = 0
	futexWakeOp = 1
)

// futexWait sleeps while *w == val, for at most d (or until a futexWake, or a signal). On an
// address that is not mapped the kernel returns EFAULT: no fault in this process.
func futexWait(w *atomic.Uint32, val uint32, d time.Duration) {
	ts := unix.NsecToTimespec(int64(d))
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(w)), futexWaitOp, uintptr(val), uintptr(unsafe.Pointer(&ts)), 0, 0)
}

// futexWake wakes every process sleeping on w.
func futexWake(w *atomic.Uint32) {
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(w)), futexWakeOp, math.MaxInt32, 0, 0, 0)
}
