package pcmd

import (
	"log"
	"slices"
	"sync"
	"time"

	"github.com/mpios/mpios/internal/job"
	"github.com/mpios/mpios/pcm/ckptstore"
)

// Making room in a memory store. A job's last checkpoints stay in the store after it ends,
// for mpirun --restart; left alone they would fill the cap after some dozens of jobs, and
// from then on every checkpoint and buddy copy would be refused. So when the store holds
// more than evictAbove of its cap, pcmd removes the checkpoints of jobs that have no rank on
// this node and changed nothing here for evictIdle, those that changed longest ago first,
// until it holds evictTo of the cap or no such job is left. A job that runs here is never
// touched, nor one that checkpointed or copied here recently (a job whose ranks are being
// recovered, or one that runs on other nodes and keeps its buddy copies here).
const (
	evictAboveNum, evictAboveDen = 3, 4 // of the cap
	evictToNum, evictToDen       = 1, 2 // of the cap
	evictIdle                    = time.Minute
	// evictRetry spaces the routine checks of a store that is over the mark with nothing to
	// remove, and the looks for idle jobs' spare files: each lists the whole store.
	evictRetry = 30 * time.Second
)

// overMark reports whether a memory store holding used of capacity bytes, asked for need
// more, should make room.
func overMark(used, need, capacity int64) bool {
	return capacity > 0 && used+need > capacity/evictAboveDen*evictAboveNum
}

// planEviction returns the jobs whose checkpoints to remove from a memory store that holds
// used of its capacity bytes and is asked for need more (0 on a routine check): none while
// used+need is at most evictAbove of the cap, else jobs without a rank here (running says
// which have) that changed at least evictIdle before now, those that changed longest ago
// first, until used+need falls to evictTo of the cap.
func planEviction(jobs []ckptstore.JobUsage, used, capacity, need int64, now time.Time, running func(job string) bool) []ckptstore.JobUsage {
	if !overMark(used, need, capacity) {
		return nil
	}
	target := capacity / evictToDen * evictToNum
	idle := make([]ckptstore.JobUsage, 0, len(jobs))
	for _, j := range jobs {
		if !running(j.Job) && now.Sub(j.LastChange) >= evictIdle {
			idle = append(idle, j)
		}
	}
	slices.SortStableFunc(idle, func(a, b ckptstore.JobUsage) int { return a.LastChange.Compare(b.LastChange) })
	var out []ckptstore.JobUsage
	for _, j := range idle {
		if used+need <= target {
			break
		}
		out = append(out, j)
		used -= j.Bytes
	}
	return out
}

// memEvictor makes room in a memory store (makeRoom).
type memEvictor struct {
	store    *ckptstore.Store
	capacity int64
	log      *log.Logger
	ranks    func() []job.RankInfo // the ranks running on this node
	now      func() time.Time

	mu         sync.Mutex
	next       time.Time // no routine check before then (nothing was left to remove); zero: none pending
	nextSpares time.Time // no look for idle jobs' spare files before then
}

// makeRoom removes finished jobs' checkpoints from the memory store as planEviction says,
// logging each, and reports whether it removed any. need is the room a refused write asks
// for (0: a routine check, which a store over the mark with nothing to remove makes only
// every evictRetry: each lists the whole store).
func (e *memEvictor) makeRoom(need int64) bool {
	if e == nil {
		return false
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.makeRoomLocked(need)
}

// check is makeRoom's routine check, for the heartbeat loop: it returns at once, making
// room in a goroutine of its own (removing gigabytes from a tmpfs takes a while, and the
// node must not miss its heartbeats), and only one at a time.
func (e *memEvictor) check() {
	if e == nil || !e.mu.TryLock() {
		return
	}
	go func() {
		defer e.mu.Unlock()
		e.makeRoomLocked(0)
		e.dropIdleSpares()
	}()
}

// dropIdleSpares deletes, every evictRetry, the spare piece files (ckptstore.DropSpares) of
// the jobs that have no rank here and changed nothing for evictIdle: a job keeps one
// checkpoint's pieces as spares for its next write, which a finished job never makes, and
// the usage count does not count them, so no cap would ever free their memory.
func (e *memEvictor) dropIdleSpares() {
	now := e.now()
	if now.Before(e.nextSpares) {
		return
	}
	e.nextSpares = now.Add(evictRetry)
	jobs, err := e.store.Jobs()
	if err != nil {
		e.log.Printf("memory store: cannot list its jobs: %v", err)
		return
	}
	here := e.runningJobs()
	for _, j := range jobs {
		if !here[j.Job] && now.Sub(j.LastChange) >= evictIdle {
			if err := e.store.DropSpares(j.Job); err != nil {
				e.log.Printf("memory store: %v", err)
			}
		}
	}
}

// wait returns once no check is running.
func (e *memEvictor) wait() {
	e.mu.Lock()
	e.mu.Unlock()
}

// runningJobs returns the jobs with a rank on this node.
func (e *memEvictor) runningJobs() map[string]bool {
	here := make(map[string]bool)
	for _, r := range e.ranks() {
		here[r.Job] = true
	}
	return here
}

// makeRoomLocked is makeRoom with e.mu held.
func (e *memEvictor) makeRoomLocked(need int64) bool {
	used, err := e.store.Usage()
	if err != nil {
		e.log.Printf("memory store: cannot read its usage: %v", err)
		return false
	}
	now := e.now()
	if !overMark(used, need, e.capacity) {
		e.next = time.Time{} // room again: a later shortage is news
		return false
	}
	if need == 0 && now.Before(e.next) {
		return false
	}
	jobs, err := e.store.Jobs()
	if err != nil {
		e.log.Printf("memory store: cannot list its jobs: %v", err)
		return false
	}
	here := e.runningJobs()
	plan := planEviction(jobs, used, e.capacity, need, now, func(j string) bool { return here[j] })
	removed := false
	for _, j := range plan {
		if err := e.store.RemoveJob(j.Job); err != nil {
			e.log.Printf("memory store: cannot remove the checkpoints of job %s: %v", j.Job, err)
			continue
		}
		removed = true
		used -= j.Bytes
		e.log.Printf("memory store: removed the checkpoints of job %s (%d MiB, last changed %s ago, no rank here) to make room: %d of %d MiB used",
			j.Job, j.Bytes>>20, now.Sub(j.LastChange).Round(time.Second), max(used, 0)>>20, e.capacity>>20)
	}
	if len(plan) > 0 {
		e.next = time.Time{}
		return removed
	}
	if e.next.IsZero() {
		e.log.Printf("memory store: %d of %d MiB used, and every job in it has a rank here or changed within %v: nothing to remove yet",
			used>>20, e.capacity>>20, evictIdle)
	}
	e.next = now.Add(evictRetry)
	return false
}
