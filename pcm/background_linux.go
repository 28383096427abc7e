package pcm

import (
	"runtime"

	"golang.org/x/sys/unix"
)

// inBackground runs work on a goroutine whose thread has the lowest CPU priority (nice 19):
// a checkpoint being written must take as little CPU time as possible from the ranks, which
// on a busy node it would otherwise slow down. Not SCHED_IDLE: a thread that could starve
// indefinitely while holding one of the Go runtime's Ps would stall the garbage collector's
// stop-the-world phases, and so the application.
func inBackground(work func()) {
	go func() {
		// The thread keeps its priority: lock it to this goroutine, which never unlocks, so
		// the runtime discards the thread when the goroutine ends instead of reusing it.
		runtime.LockOSThread()
		// On Linux the nice value is per thread; 0 names the calling one.
		_ = unix.Setpriority(unix.PRIO_PROCESS, 0, 19)
		work()
	}()
}
