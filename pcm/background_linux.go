package pcm

import (
	"runtime"
	"sync"

	"golang.org/x/sys/unix"
)

// inBackground runs work (a checkpoint's writes and fsyncs) on a goroutine of its own, which
// must neither slow the application's ranks nor be slowed by them:
//
//   - Its thread has the lowest CPU priority (nice 19), so that what CPU it needs is taken
//     from idle time first. Not SCHED_IDLE: a thread that could starve indefinitely while
//     holding one of the Go runtime's Ps would stall the garbage collector's stop-the-world
//     phases, and so the application.
//   - It gets a P of its own: mpirun gives a rank GOMAXPROCS = cores / ranks, often 1, and a
//     goroutine blocked in a long system call (fsync) keeps its P until the runtime's monitor
//     takes it back, up to 10 ms later, during which nothing else of the process runs.
func inBackground(work func()) {
	extraP(+1)
	go func() {
		defer extraP(-1)
		// The thread keeps its priority: lock it to this goroutine, which never unlocks, so
		// the runtime discards the thread when the goroutine ends instead of reusing it.
		runtime.LockOSThread()
		// On Linux the nice value is per thread; 0 names the calling one.
		_ = unix.Setpriority(unix.PRIO_PROCESS, 0, 19)
		work()
	}()
}

var (
	extraMu   sync.Mutex
	extraN    int // background works running
	extraBase int // GOMAXPROCS before the first of them
)

// extraP adds (+1) or removes (-1) a background work's P.
func extraP(delta int) {
	extraMu.Lock()
	defer extraMu.Unlock()
	if delta > 0 && extraN == 0 {
		extraBase = runtime.GOMAXPROCS(0)
	}
	extraN += delta
	runtime.GOMAXPROCS(extraBase + extraN)
}
