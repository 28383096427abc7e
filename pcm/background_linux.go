package pcm

import (
	"runtime"

	"golang.org/x/sys/unix"
)

// inBackground runs work on a goroutine whose thread the kernel schedules only when a CPU
// would otherwise be idle (SCHED_IDLE): a checkpoint being written must not take CPU time
// from the application's ranks, which on a busy node it would otherwise slow down. When the
// application waits for the checkpoint (the next one is due, Close), its own thread sleeps,
// so the work still finishes.
func inBackground(work func()) {
	go func() {
		// The thread keeps its policy: lock it to this goroutine, which never unlocks, so
		// the runtime discards the thread when the goroutine ends instead of reusing it.
		runtime.LockOSThread()
		_ = unix.SchedSetAttr(0, &unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_IDLE}, 0)
		work()
	}()
}
