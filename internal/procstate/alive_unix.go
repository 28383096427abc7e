//go:build unix

package procstate

import (
	"errors"
	"syscall"
)

// Alive reports whether pid names a running process. A process of another user counts as
// alive (signal 0 is refused with EPERM, which proves it exists).
func Alive(pid int) bool {
	if pid <= 0 {
		return false
	}
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
