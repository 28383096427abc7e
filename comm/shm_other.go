//go:build !linux

package comm

import (
	"fmt"
	"sync/atomic"
	"syscall"
	"time"
)

// shmSupported: shared memory between ranks is only used on Linux, where it is tested;
// elsewhere every peer uses TCP and readRemote is never reached.
const shmSupported = false

func readRemote(pid int, dst []byte, addr uint64) error {
	return fmt.Errorf("process_vm_readv from pid %d: %w", pid, syscall.ENOSYS)
}

// futexWait and futexWake are never reached without shared memory.
func futexWait(w *atomic.Uint32, val uint32, d time.Duration) {}
func futexWake(w *atomic.Uint32)                              {}
