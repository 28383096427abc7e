//go:build race

package comm

import "sync/atomic"

// The race detector does not see the happens-before edges that the rings' counters create:
// they live in shared memory, outside the Go heap it tracks. Without this, goroutine ranks of
// one test process that pass buffers around through rings look racy to it (over sockets, the
// syscall package makes the same edges visible). A read-modify-write on a Go variable after
// the writer's copy and before the reader's copy states the edge; normal builds compile it
// away (shmnorace.go).
var ringRaceSync atomic.Uint64

func ringRaceEdge() { ringRaceSync.Add(1) }
