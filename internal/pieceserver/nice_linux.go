package pieceserver

import (
	"runtime"

	"golang.org/x/sys/unix"
)

// lowerPriority makes the calling goroutine run on a thread of its own, n nice levels below
// the process's priority (n > 0), for the rest of the goroutine's life. The goroutine stays
// locked to the thread, so the thread exits with it and its priority goes to no other
// goroutine. It reports whether the priority was lowered.
func lowerPriority(n int) bool {
	if n <= 0 {
		return false
	}
	runtime.LockOSThread()
	tid := unix.Gettid()
	// The system call answers 20 - nice (1 to 40).
	raw, err := unix.Getpriority(unix.PRIO_PROCESS, tid)
	if err != nil {
		return false
	}
	return unix.Setpriority(unix.PRIO_PROCESS, tid, min(20-raw+n, 19)) == nil
}
