//go:build !linux

package comm

import (
	"fmt"
	"sync/atomic"
	"syscall"
	"time"
)

// shmSupported: rings need process-shared futexes, which only Linux has here; elsewhere every
// peer uses TCP and the functions below are never reached.
const shmSupported = false

func futexWait(word *atomic.Uint32, val uint32, timeout time.Duration) {}

func futexWake(word *atomic.Uint32) {}

func readRemote(pid int, dst []byte, addr uint64) error {
	return fmt.Errorf("process_vm_readv from pid %d: %w", pid, syscall.ENOSYS)
}
