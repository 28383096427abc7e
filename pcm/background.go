package pcm

import (
	"runtime"
	"sync"

	"github.com/mpios/mpios/comm"
)

// inBackground runs work (a checkpoint's writes and fsyncs) on a goroutine of its own, with
// a Go P of its own while it runs: mpirun gives a rank GOMAXPROCS = cores / ranks, often 1,
// and a goroutine blocked in a long system call (fsync) keeps its P until the runtime's
// monitor takes it back, up to 10 ms later, during which nothing else of the process runs.
//
// The goroutine is an ordinary one. Locking it to a thread at the lowest CPU priority was
// tried and cost heat2d 5% more: each time the locked goroutine ran, the runtime handed Ps
// between threads, and the application's goroutine hopped across a dozen threads.
func inBackground(work func()) {
	extraP(+1)
	// While it runs the ranks do not poll for messages: a rank that waits for a neighbour
	// then leaves its core to this work (comm.HoldPolling).
	release := comm.HoldPolling()
	go func() {
		defer extraP(-1)
		defer release()
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
