package spawner

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mpios/mpios/internal/job"
)

// RankKey names a rank of a job.
type RankKey struct {
	Job  string
	Rank int
}

// Table is a node's admission state: the ranks it starts or runs, in how many slots, and
// the leases of their jobs. It only decides: it runs no process, opens no socket and reads
// no clock (time is passed in), so that each decision is unit-tested. It is not safe for
// concurrent use; the Manager guards it.
type Table struct {
	node     string
	slots    int
	maxLease time.Duration
	ranks    map[RankKey]*entry
	leases   map[string]*lease
	// closed says why the node admits no rank ("" = it does); stopReason, if set, is given
	// to every rank that starts from now on, which is then to be stopped at once.
	closed, stopReason string
}

type entry struct {
	pid       int // 0 while starting
	started   time.Time
	leased    bool   // counted in its job's lease
	reason    string // why the node stops it, if it does
	successor bool   // took over a migrated rank (job.RankInfo.Successor)
	// A rank that arrives in a joint move when no slot is free shares the slot of a rank
	// of its job leaving the node in the same reconfiguration (Admit's replaces): the
	// leaver lends, the arrival borrows, and the two count as one until either exits.
	lends, borrows *RankKey
}

// lease tracks the keepalives of a job's launcher (job.SpawnRequest.KeepAlive).
type lease struct {
	ttl     time.Duration
	last    time.Time
	ranks   int
	expired bool
}

// NewTable is the empty table of node, which runs at most slots ranks at once, none of
// them longer than maxLease (> 0) after the last keepalive of its launcher.
func NewTable(node string, slots int, maxLease time.Duration) *Table {
	return &Table{node: node, slots: slots, maxLease: maxLease, ranks: map[RankKey]*entry{}, leases: map[string]*lease{}}
}

// Admit reserves a slot for rank k, or says why not: the node is closed, already runs k, or
// has no free slot. The reservation holds until Started or Abort.
//
// replaces are ranks of k's job that leave the node in the same joint move (an exchange,
// job.SpawnRequest.Replaces). When no slot is free, k shares the slot of one of them that
// runs here and lends it to no other: the node runs one rank over its slots only until
// either leaves, which the joint move's commit (the leaver exits) or abort (the arrival is
// stopped) brings about at the same boundary.
func (t *Table) Admit(k RankKey, replaces ...int) (job.SpawnRefusal, string) {
	var lender *entry
	var lenderKey RankKey
	switch old := t.ranks[k]; {
	case t.closed != "":
		return job.RefuseStopping, t.closed
	case old != nil:
		return job.RefuseDuplicate, fmt.Sprintf("already runs rank %d of job %s (pid %d)", k.Rank, k.Job, old.pid)
	case t.Used() >= t.slots:
		for _, r := range replaces {
			lk := RankKey{k.Job, r}
			if e := t.ranks[lk]; lender == nil && r != k.Rank && e != nil && e.pid != 0 && e.lends == nil && e.borrows == nil {
				lender, lenderKey = e, lk
			}
		}
		if lender == nil {
			why := fmt.Sprintf("has no free slot for rank %d of job %s (%d of %d in use)", k.Rank, k.Job, t.Used(), t.slots)
			if len(replaces) > 0 {
				why += fmt.Sprintf(", and none of the ranks it replaces (%s) runs here with a slot to share", joinRanks(replaces))
			}
			return job.RefuseNoSlot, why
		}
	}
	e := &entry{}
	if lender != nil {
		e.borrows, lender.lends = &lenderKey, &k
	}
	t.ranks[k] = e
	return "", ""
}

func joinRanks(rs []int) string {
	s := make([]string, len(rs))
	for i, r := range rs {
		s[i] = strconv.Itoa(r)
	}
	return strings.Join(s, ", ")
}

// Abort frees the slot of a rank that could not be started.
func (t *Table) Abort(k RankKey) {
	if e := t.ranks[k]; e != nil && e.pid == 0 {
		t.forget(k, e)
	}
}

// forget removes rank k; a slot it shared is the other rank's alone from now on.
func (t *Table) forget(k RankKey, e *entry) {
	delete(t.ranks, k)
	for _, other := range []*RankKey{e.lends, e.borrows} {
		if other == nil {
			continue
		}
		if o := t.ranks[*other]; o != nil {
			if o.lends != nil && *o.lends == k {
				o.lends = nil
			}
			if o.borrows != nil && *o.borrows == k {
				o.borrows = nil
			}
		}
	}
}

// Started records that admitted rank k runs as pid since now, and counts it in its job's
// lease: every rank holds one, so that none outlives its launcher. The lease lasts ttl, the
// one the request asked for, capped to the table's longest; a request that named none
// (ttl 0) gets the longest. watch reports that the lease is new, so the caller must start
// listening for the job's keepalives. A non-empty stop is why the rank must be stopped at
// once: the node began shutting down while it started.
func (t *Table) Started(k RankKey, pid int, now time.Time, ttl time.Duration) (watch bool, stop string) {
	e := t.ranks[k]
	if e == nil {
		return false, ""
	}
	e.pid, e.started = pid, now.UTC()
	if ttl <= 0 || ttl > t.maxLease {
		ttl = t.maxLease
	}
	l := t.leases[k.Job]
	switch {
	case l == nil:
		l = &lease{last: now}
		t.leases[k.Job] = l
		watch = true
	case l.expired:
		// A new launcher of the job (mpirun --restart keeps the job id) while the ranks of
		// the silent one are still being stopped: a fresh lease, or its ranks would never
		// be reaped.
		l.expired, l.last, l.ttl = false, now, 0
	}
	l.ranks++
	l.ttl = max(l.ttl, ttl)
	e.leased = true
	if t.stopReason != "" {
		e.reason = t.stopReason
		stop = e.reason
	}
	return watch, stop
}

// MarkSuccessor records that rank k took over a migrated rank, so the IOS agent applies
// the migration cooldown to it and not to freshly started ranks.
func (t *Table) MarkSuccessor(k RankKey) {
	if e := t.ranks[k]; e != nil {
		e.successor = true
	}
}

// Exited forgets rank k and frees its slot. It returns why the node stopped it ("" if it
// did not) and whether its job's lease ended with it, so the caller stops listening for
// the job's keepalives.
func (t *Table) Exited(k RankKey) (reason string, unwatch bool) {
	e := t.ranks[k]
	if e == nil {
		return "", false
	}
	t.forget(k, e)
	if !e.leased {
		return e.reason, false
	}
	l := t.leases[k.Job]
	if l == nil {
		return e.reason, false
	}
	if l.ranks--; l.ranks <= 0 {
		delete(t.leases, k.Job)
		return e.reason, true
	}
	return e.reason, false
}

// Reason is why the node stops rank k, "" if it does not (or does not know k).
func (t *Table) Reason(k RankKey) string {
	if e := t.ranks[k]; e != nil {
		return e.reason
	}
	return ""
}

// KeepAlive renews the lease of jobID at now.
func (t *Table) KeepAlive(jobID string, now time.Time) {
	if l := t.leases[jobID]; l != nil && now.After(l.last) {
		l.last = now
	}
}

// Expiry is a lease that ran out: the job's launcher sent no keepalive for Silence, and its
// ranks Ranks are to be stopped for Reason.
type Expiry struct {
	Job     string
	Silence time.Duration
	Reason  string
	Ranks   []RankKey
}

// Expire ends the leases that ran out by now and returns them, each once, with the ranks to
// stop (their stop reason recorded).
func (t *Table) Expire(now time.Time) []Expiry { return t.ExpireBy(now, nil) }

// ExpireBy is Expire with silence measuring how long a launcher last heard at last counts
// as silent at now (nil: now - last). pcmd passes its control-plane Watch, so that its own
// NATS outage does not count against the launchers it cannot hear.
func (t *Table) ExpireBy(now time.Time, silence func(now, last time.Time) time.Duration) []Expiry {
	if silence == nil {
		silence = func(now, last time.Time) time.Duration { return now.Sub(last) }
	}
	var out []Expiry
	for id, l := range t.leases {
		quiet := silence(now, l.last)
		if l.expired || quiet <= l.ttl {
			continue
		}
		l.expired = true
		reason := fmt.Sprintf("no keepalive from the launcher of job %s for %v", id, quiet.Round(time.Second))
		out = append(out, Expiry{Job: id, Silence: quiet, Reason: reason,
			Ranks: t.mark(func(k RankKey) bool { return k.Job == id }, reason)})
	}
	slices.SortFunc(out, func(a, b Expiry) int { return strings.Compare(a.Job, b.Job) })
	return out
}

// Drain closes the node to new ranks and leaves the running ones alone (the first step of
// a graceful leave).
func (t *Table) Drain() {
	if t.closed == "" {
		t.closed = "is draining: it takes no new ranks"
	}
}

// Reopen undoes Drain: the node takes new ranks again. It does not undo Shutdown.
func (t *Table) Reopen() {
	if t.stopReason == "" {
		t.closed = ""
	}
}

// Shutdown closes the node to new ranks and returns the started ranks, to be stopped
// because pcmd is shutting down; a rank still starting gets the same reason when it starts
// (Started).
func (t *Table) Shutdown() []RankKey {
	t.closed = "is shutting down"
	t.stopReason = "pcmd on node " + t.node + " is shutting down"
	return t.mark(func(RankKey) bool { return true }, t.stopReason)
}

// Running lists the started ranks, sorted.
func (t *Table) Running() []RankKey {
	return t.mark(func(RankKey) bool { return true }, "")
}

// mark returns the started ranks that keep selects, sorted, recording reason (if not "")
// as why the node stops them, unless they already have one.
func (t *Table) mark(keep func(RankKey) bool, reason string) []RankKey {
	var out []RankKey
	for k, e := range t.ranks {
		if e.pid != 0 && keep(k) {
			if reason != "" && e.reason == "" {
				e.reason = reason
			}
			out = append(out, k)
		}
	}
	slices.SortFunc(out, compareKeys)
	return out
}

func compareKeys(a, b RankKey) int {
	if c := strings.Compare(a.Job, b.Job); c != 0 {
		return c
	}
	return a.Rank - b.Rank
}

// Used is the number of slots in use: ranks started or starting, two sharing a slot in a
// joint move counted once.
func (t *Table) Used() int {
	n := len(t.ranks)
	for _, e := range t.ranks {
		if e.lends != nil {
			n--
		}
	}
	return n
}

// Ranks lists the started ranks, sorted by job and rank.
func (t *Table) Ranks() []job.RankInfo {
	var out []job.RankInfo
	for _, k := range t.Running() {
		e := t.ranks[k]
		out = append(out, job.RankInfo{Job: k.Job, Rank: k.Rank, PID: e.pid, Started: e.started, Successor: e.successor})
	}
	return out
}

// Counts is the number of ranks (started or starting) of jobID on the node, and of the
// other jobs.
func (t *Table) Counts(jobID string) (same, other int) {
	for k := range t.ranks {
		if k.Job == jobID {
			same++
		} else {
			other++
		}
	}
	return same, other
}
