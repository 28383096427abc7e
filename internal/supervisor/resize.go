package supervisor

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/mpios/mpios/internal/job"
	"github.com/mpios/mpios/internal/reconf"
)

// Resizing a running job (Desell's thesis §2.1.2, split and merge), from the supervisor's
// view. A resize request is checked (a size of at least 1 that differs from the job's, named
// nodes that are known and can take ranks, no other resize under way) and published as a
// Proposed entry of the log, naming the ranks that leave (a shrink: the highest ranks, or
// those on the named nodes) or the nodes of the new ranks (a grow). At the agreed boundary
// every process of the new world says ResizeHello; the first hello of a grow makes the
// Machine start the joiners. Once the whole new world said hello, the Machine sends every one
// the new address table (Prepared); the ranks move the data and rank 0 reports the outcome:
// Committed, the job has its new size; Aborted, it goes on at its old size. A joiner that
// cannot start or ends before the table is sent aborts the resize at once.

// ResizeHello is a process of a resize's new world at the boundary (a msgpack
// job.ResizeHello) with its reply subject.
type ResizeHello struct {
	Reply string
	Data  []byte
}

// ResizeReport is rank 0's account of a resize (a msgpack job.ResizeReport).
type ResizeReport struct{ Data []byte }

// Malleable is rank 0 telling whether the job registered distributed data (a msgpack
// job.Malleable).
type Malleable struct{ Data []byte }

func (ResizeHello) event()  {}
func (ResizeReport) event() {}
func (Malleable) event()    {}

// onMalleable records whether the job has data a resize can redistribute.
func (m *Machine) onMalleable(e Malleable) {
	var ml job.Malleable
	if job.Decode(e.Data, &ml) == nil {
		m.rigid, m.malleable = !ml.Distributed, ml.Distributed
	}
}

// resizing is the resize under way.
type resizing struct {
	seq        uint64
	old, np    int
	leavers    []int    // shrink: old ranks that leave, ascending
	nodes      []string // grow: node of each new rank (index np-old), "" for the starter's choice
	reason     string
	weights    []float64           // shares of the new ranks, nil for equal
	hellos     map[int]resizeHello // by new rank
	joiners    map[int]ProcID      // grow: new rank -> joiner process
	asked      bool                // the joiners were started
	tableSent  bool
	aborted    string          // why, once aborted before the table went out
	checks     map[uint64]bool // node checks not answered yet
	reply      string          // the control request, answered after the checks
	checkError string          // the first node check that failed
}

type resizeHello struct {
	reply string
	msg   job.ResizeHello
}

// onResizeControl checks a resize request and publishes it, or asks the named nodes first.
func (m *Machine) onResizeControl(reply string, c job.ControlRequest) {
	n := m.cfg.NP
	switch {
	case m.rs != nil:
		m.ctlError(reply, "job %s is already being resized (request %d)", m.cfg.JobID, m.rs.seq)
		return
	case c.NP == n && c.Weights == nil:
		m.ctlError(reply, "job %s already has %d ranks (give --weights to rebalance them)", m.cfg.JobID, n)
		return
	case c.NP == n && len(c.On) > 0:
		m.ctlError(reply, "job %s: a rebalance keeps its %d ranks where they run; --on names nodes to grow onto or shrink off", m.cfg.JobID, n)
		return
	case m.migrating() >= 0:
		m.ctlError(reply, "rank %d of job %s is migrating; resize once it has moved", m.migrating(), m.cfg.JobID)
		return
	case m.rigid:
		m.ctlError(reply, "job %s has no distributed data to redistribute (its ranks register none with pcm.NewBlock)", m.cfg.JobID)
		return
	case len(c.On) > 0 && !m.cfg.Migrations:
		m.ctlError(reply, "job %s runs its ranks locally; naming nodes needs pcmd nodes (start the job with --hosts or --hostfile)", m.cfg.JobID)
		return
	}
	rs := &resizing{old: n, np: c.NP, reason: c.Reason, weights: c.Weights, hellos: map[int]resizeHello{}, joiners: map[int]ProcID{}, reply: reply}
	var err error
	if c.NP > n {
		rs.nodes, err = m.growNodes(c.NP-n, c.On)
	} else {
		rs.leavers, err = m.shrinkRanks(n-c.NP, c.On)
	}
	if err != nil {
		m.ctlError(reply, "cannot resize job %s from %d to %d ranks: %v", m.cfg.JobID, n, c.NP, err)
		return
	}
	m.rs = rs
	var asked []string
	for _, node := range rs.nodes {
		if node != "" && !slices.Contains(asked, node) {
			asked = append(asked, node)
		}
	}
	if len(asked) == 0 {
		m.proposeResize()
		return
	}
	// Named nodes are asked whether they take ranks; the request waits for every answer.
	rs.checks = map[uint64]bool{}
	for _, node := range asked {
		m.lastCheck++
		rs.checks[m.lastCheck] = true
		m.emit(CheckNode{Check: m.lastCheck, Node: node})
	}
}

// migrating returns a rank with a migration under way, or -1: a resize and a migration never
// share a boundary (the successor would not take part in the resize).
func (m *Machine) migrating() int {
	for r := range m.ranks {
		if m.ranks[r].next != nil {
			return r
		}
	}
	return -1
}

// growNodes places k new ranks on the named nodes, in order, K each (all remaining for K 0);
// without names, in the job's free slots.
func (m *Machine) growNodes(k int, on []job.NodeSlots) ([]string, error) {
	if len(on) == 0 {
		return m.freeSlots(k)
	}
	nodes := make([]string, 0, k)
	for i, ns := range on {
		if why, gone := m.gone[ns.Node]; gone {
			return nil, fmt.Errorf("node %s", why)
		}
		if m.draining[ns.Node] {
			return nil, fmt.Errorf("node %s is draining: it takes no new ranks", ns.Node)
		}
		slots := ns.Slots
		if slots == 0 {
			slots = k - len(nodes)
			if i < len(on)-1 {
				slots = 1
			}
		}
		for j := 0; j < slots && len(nodes) < k; j++ {
			nodes = append(nodes, ns.Node)
		}
	}
	if len(nodes) < k {
		return nil, fmt.Errorf("%d new ranks but only %d slots named (%s)", k, len(nodes), nodeSlotsText(on))
	}
	return nodes, nil
}

// freeSlots places k new ranks in the job's free slots (Config.Slots less the ranks there,
// none on a node gone or draining), nodes in name order; a job whose ranks run on this machine starts them here. Too few free
// slots refuse the request at once, listing them: the starter would only fail later.
func (m *Machine) freeSlots(k int) ([]string, error) {
	if len(m.cfg.Slots) == 0 {
		return make([]string, k), nil
	}
	used := map[string]int{}
	for _, st := range m.ranks {
		if p := m.procs[st.proc]; p != nil {
			used[p.node]++
		}
	}
	names := slices.Sorted(maps.Keys(m.cfg.Slots))
	var nodes []string
	var free []string
	for _, n := range names {
		f := 0
		if _, gone := m.gone[n]; !gone && !m.draining[n] {
			f = max(m.cfg.Slots[n]-used[n], 0)
		}
		free = append(free, fmt.Sprintf("%s:%d", n, f))
		for range f {
			if len(nodes) < k {
				nodes = append(nodes, n)
			}
		}
	}
	if len(nodes) < k {
		return nil, fmt.Errorf("%d new ranks but the job's nodes have %d free slots (%s); name nodes with --on",
			k, len(nodes), strings.Join(free, ","))
	}
	return nodes, nil
}

// shrinkRanks picks the k ranks that leave: the highest, or the highest on each named node.
func (m *Machine) shrinkRanks(k int, on []job.NodeSlots) ([]int, error) {
	var leavers []int
	if len(on) == 0 {
		for r := m.cfg.NP - k; r < m.cfg.NP; r++ {
			leavers = append(leavers, r)
		}
		return leavers, nil
	}
	for _, ns := range on {
		var there []int
		for r := m.cfg.NP - 1; r >= 0; r-- {
			if p := m.procs[m.ranks[r].proc]; m.ranks[r].running && p != nil && p.node == ns.Node {
				there = append(there, r)
			}
		}
		if len(there) == 0 {
			return nil, fmt.Errorf("no rank of the job runs on %s", ns.Node)
		}
		if ns.Slots > 0 {
			there = there[:min(ns.Slots, len(there))]
		}
		leavers = append(leavers, there...)
	}
	slices.Sort(leavers)
	leavers = slices.Compact(leavers)
	if len(leavers) != k {
		return nil, fmt.Errorf("%d ranks must leave but %s run %d", k, nodeSlotsText(on), len(leavers))
	}
	return leavers, nil
}

func nodeSlotsText(on []job.NodeSlots) string {
	s := ""
	for i, ns := range on {
		if i > 0 {
			s += ","
		}
		s += ns.String()
	}
	return s
}

// onResizeChecked takes a node's answer to a resize's check; false if the check is not a
// resize's.
func (m *Machine) onResizeChecked(e NodeChecked) bool {
	rs := m.rs
	if rs == nil || !rs.checks[e.Check] {
		return false
	}
	delete(rs.checks, e.Check)
	if e.Err != nil && rs.checkError == "" {
		rs.checkError = e.Err.Error()
	}
	if len(rs.checks) > 0 {
		return true
	}
	if rs.checkError != "" || m.stopping || m.failing != nil {
		why := rs.checkError
		if why == "" {
			why = "the job is stopping"
		}
		m.rs = nil
		m.ctlError(rs.reply, "cannot resize job %s from %d to %d ranks: %s", m.cfg.JobID, rs.old, rs.np, why)
		return true
	}
	m.proposeResize()
	return true
}

// proposeResize publishes the resize under way.
func (m *Machine) proposeResize() {
	rs := m.rs
	var nodes []string
	if slices.ContainsFunc(rs.nodes, func(n string) bool { return n != "" }) {
		nodes = rs.nodes
	}
	rs.seq = m.propose(reconf.Reconfiguration{Kind: reconf.Resize, NP: rs.np, OldNP: rs.old, Ranks: rs.leavers, Nodes: nodes, Weights: rs.weights, Reason: rs.reason})
	m.logf("%s requested (request %d%s)", rs.what(), rs.seq, reasonSuffix(rs.reason))
	msg := fmt.Sprintf("job %s goes from %d to %d ranks at the next agreement point (request %d)", m.cfg.JobID, rs.old, rs.np, rs.seq)
	if rs.np == rs.old {
		msg = fmt.Sprintf("job %s rebalances its %d ranks at the next agreement point (request %d)", m.cfg.JobID, rs.np, rs.seq)
	}
	m.reply(rs.reply, job.ControlReply{OK: true, Message: msg})
}

// what names the resize for mpirun's log: "resize 4 -> 6 ranks", "resize 4 -> 6 ranks
// (weights 1,1,1,1,2,2)" or "rebalance of 4 ranks (weights 1,3,1,1)".
func (rs *resizing) what() string {
	s := fmt.Sprintf("resize %d -> %d ranks", rs.old, rs.np)
	if rs.np == rs.old {
		s = fmt.Sprintf("rebalance of %d ranks", rs.np)
	}
	if rs.weights != nil {
		w := make([]string, len(rs.weights))
		for i, x := range rs.weights {
			w[i] = strconv.FormatFloat(x, 'g', -1, 64)
		}
		s += " (weights " + strings.Join(w, ",") + ")"
	}
	return s
}

// onResizeHello takes a process of the new world at the boundary.
func (m *Machine) onResizeHello(e ResizeHello) {
	var h job.ResizeHello
	if err := job.Decode(e.Data, &h); err != nil {
		m.reply(e.Reply, job.Table{Error: "mpirun: malformed resize hello"})
		return
	}
	rs := m.rs
	switch {
	case rs == nil || rs.seq != h.Seq:
		m.reply(e.Reply, job.Table{Error: fmt.Sprintf("mpirun: no resize under way for request %d", h.Seq)})
		return
	case rs.aborted != "":
		m.reply(e.Reply, job.Table{Error: "mpirun: " + rs.aborted})
		return
	case m.stopping || m.failing != nil:
		m.reply(e.Reply, job.Table{Error: "mpirun: the job is stopping"})
		return
	}
	if err := h.Validate(rs.np, rs.old); err != nil {
		m.reply(e.Reply, job.Table{Error: "mpirun: " + job.TrimPrefix(err).Error()})
		return
	}
	if prev, ok := rs.hellos[h.Rank]; ok && prev.msg.PID != h.PID {
		m.reply(e.Reply, job.Table{Error: fmt.Sprintf("mpirun: duplicate resize hello for rank %d", h.Rank)})
		return
	}
	rs.hellos[h.Rank] = resizeHello{reply: e.Reply, msg: h}
	if h.OldRank >= 0 {
		if le := m.log.Get(rs.seq); le != nil {
			le.Iteration = h.Iteration
		}
	}
	if !rs.asked && rs.np > rs.old {
		rs.asked = true
		for i, node := range rs.nodes {
			r := rs.old + i
			id := m.newProc(r)
			p := m.procs[id]
			p.side, p.joiner, p.node = true, true, node
			rs.joiners[r] = id
			m.emit(StartRank{Proc: id, Rank: r, Node: node, Join: rs.seq, Size: rs.np})
		}
	}
	if len(rs.hellos) < rs.np {
		return
	}
	table := job.Table{Addrs: make([]string, rs.np)}
	for r := range rs.np {
		table.Addrs[r] = rs.hellos[r].msg.Addr
	}
	for r := range rs.np {
		m.reply(rs.hellos[r].reply, table)
	}
	rs.tableSent = true
	_ = m.log.Advance(rs.seq, reconf.Prepared, nil)
}

// onJoinerStarted takes the outcome of starting a joiner.
func (m *Machine) onJoinerStarted(id ProcID, p *proc, e Started) {
	rs := m.rs
	current := rs != nil && rs.joiners[p.rank] == id && rs.aborted == ""
	if e.Err != nil {
		delete(m.procs, id)
		if current {
			m.abortResize(fmt.Sprintf("cannot start rank %d on %s: %v", p.rank, nodeOf(p), e.Err))
		}
		return
	}
	p.pid, p.running = e.PID, true
	if e.Node != "" {
		p.node = e.Node
	}
	m.live++
	if m.stopping || !current {
		m.kill(id)
	}
}

// abortResize gives the resize up before the new world's table went out: every process
// that said hello, and every one that will, learns why; the joiners are killed.
func (m *Machine) abortResize(why string) {
	rs := m.rs
	if rs == nil || rs.aborted != "" {
		return
	}
	if rs.tableSent {
		// The ranks hold the table: they notice the loss themselves and report.
		return
	}
	rs.aborted = fmt.Sprintf("resize %d -> %d aborted: %s", rs.old, rs.np, why)
	// In rank order, as everything the machine does: its actions are the same for the same
	// events.
	for _, r := range slices.Sorted(maps.Keys(rs.hellos)) {
		m.reply(rs.hellos[r].reply, job.Table{Error: "mpirun: " + rs.aborted})
	}
	rs.hellos = map[int]resizeHello{}
	m.killJoiners(rs)
	if le := m.log.Get(rs.seq); le != nil && le.State.CanMoveTo(reconf.Aborted) {
		_ = le.Advance(reconf.Aborted, errors.New(why))
	}
	m.logf("%s; the job continues with %d ranks", rs.aborted, rs.old)
}

func (m *Machine) killJoiners(rs *resizing) {
	for _, r := range slices.Sorted(maps.Keys(rs.joiners)) {
		id := rs.joiners[r]
		if p := m.procs[id]; p != nil && p.running && !p.killed {
			m.kill(id)
		}
	}
}

// onResizeExit handles the exit of a joiner not yet part of the job or of a process whose
// rank left; false for any other process. A rank's process that fails while a resize is
// under way aborts the resize first (its exit is then the job's failure as usual).
func (m *Machine) onResizeExit(id ProcID, p *proc, e Exited) bool {
	if !p.joiner && !p.leaving {
		if m.rs != nil && e.failed() && m.ranks[p.rank].proc == id {
			m.resizeRankLost(p, e)
		}
		return false
	}
	p.running = false
	m.live--
	if m.rec.killing {
		defer m.respawnIfClear() // a joiner of the failed run may be the last to go
	}
	if p.leaving {
		m.leaverExit(p, e)
		return true
	}
	if rs := m.rs; rs != nil && rs.joiners[p.rank] == id && !p.killed && !m.stopping {
		why := fmt.Sprintf("new rank %d on %s (pid %d) ended: %s", p.rank, nodeOf(p), p.pid, exitText(e))
		if rs.tableSent {
			// The new world waits for it in vain: its members give the resize up.
			m.logf("%s", why)
			m.emit(Publish{Subject: job.ResizeGoneSubject(m.cfg.JobID), Msg: job.ResizeGone{Seq: rs.seq, Reason: why}, Flush: true})
		}
		m.abortResize(why)
	}
	return true
}

// resizeRankLost gives the resize under way up because a process of the old world failed
// before rank 0 reported the commit: the new world cannot be complete, nor can the old
// one finish moving its data. The entry is aborted naming the process; the new world's
// members that hold the table are told (they would wait for it in vain), the hellos
// pending and to come are refused, and the joiners are killed. The failure itself then
// follows the job's failure path (recovery, or the job's exit).
func (m *Machine) resizeRankLost(p *proc, e Exited) {
	rs := m.rs
	m.rs = nil
	why := fmt.Sprintf("%s ended: %s", describeProc(p.rank, p), exitText(e))
	if rs.seq == 0 {
		// Not published yet (its nodes are being checked): refuse the request.
		m.ctlError(rs.reply, "cannot resize job %s from %d to %d ranks: %s", m.cfg.JobID, rs.old, rs.np, why)
		return
	}
	if rs.tableSent {
		m.emit(Publish{Subject: job.ResizeGoneSubject(m.cfg.JobID), Msg: job.ResizeGone{Seq: rs.seq, Reason: why}, Flush: true})
	}
	for _, r := range slices.Sorted(maps.Keys(rs.hellos)) {
		m.reply(rs.hellos[r].reply, job.Table{Error: fmt.Sprintf("mpirun: resize %d -> %d aborted: %s", rs.old, rs.np, why)})
	}
	m.killJoiners(rs)
	// The exit seen first need not be the cause: a rank that lost its peer may exit before
	// the peer's death is reaped. The entry is aborted naming the rank the failure window
	// blames (settleLostResize), or this one when no window opens.
	m.lostResize = &lostResize{seq: rs.seq, old: rs.old, np: rs.np, why: why}
}

// lostResize is a resize given up for a failed rank, its abort not yet recorded.
type lostResize struct {
	seq     uint64
	old, np int
	why     string
}

// lostResizeWhy is the reason recorded for the lost resize when no failure names another.
func (m *Machine) lostResizeWhy() string {
	if m.lostResize == nil {
		return ""
	}
	return m.lostResize.why
}

// settleLostResize records the abort of the resize a failed rank ended, naming why.
func (m *Machine) settleLostResize(why string) {
	lr := m.lostResize
	if lr == nil {
		return
	}
	m.lostResize = nil
	if le := m.log.Get(lr.seq); le != nil && le.State.CanMoveTo(reconf.Aborted) {
		_ = le.Advance(reconf.Aborted, errors.New(why))
	}
	m.logf("resize %d -> %d ranks aborted: %s", lr.old, lr.np, why)
}

// onResizeReport takes rank 0's account of a resize and commits or aborts it.
func (m *Machine) onResizeReport(e ResizeReport) {
	var rep job.ResizeReport
	rs := m.rs
	if err := job.Decode(e.Data, &rep); err != nil || rs == nil || rep.Seq != rs.seq {
		m.logf("ignoring a malformed or unexpected resize report")
		return
	}
	m.rs = nil
	le := m.log.Get(rs.seq)
	le.Iteration, le.Pause, le.Bytes = rep.Iteration, rep.Pause, rep.Bytes
	reason := ""
	if rs.reason != "" {
		reason = " (" + rs.reason + ")"
	}
	if !rep.OK {
		if le.State.CanMoveTo(reconf.Aborted) {
			_ = le.Advance(reconf.Aborted, errors.New(rep.Error))
			m.logf("%s aborted at iteration %d: %s; the job continues with %d ranks%s",
				rs.what(), rep.Iteration, rep.Error, rs.old, reason)
		}
		m.killJoiners(rs)
		return
	}
	if err := le.Advance(reconf.Committed, nil); err != nil {
		m.logf("resize %d -> %d ranks: %v", rs.old, rs.np, err)
		return
	}
	m.commitResize(rs)
	done := fmt.Sprintf("resized %d -> %d ranks", rs.old, rs.np)
	if rs.np == rs.old {
		done = fmt.Sprintf("rebalanced %d ranks", rs.np)
	}
	m.logf("%s at iteration %d in %d ms, %s moved%s", done, rep.Iteration, rep.Pause.Milliseconds(), byteSize(rep.Bytes), reason)
}

// commitResize gives the job its new ranks: the joiners, or the survivors renumbered.
func (m *Machine) commitResize(rs *resizing) {
	if rs.np > rs.old {
		for r := rs.old; r < rs.np; r++ {
			id := rs.joiners[r]
			p := m.procs[id]
			st := rank{proc: id}
			if p != nil {
				p.side, p.joiner = false, false
				st.running = p.running
			}
			m.ranks = append(m.ranks, st)
		}
	} else {
		var kept []rank
		for r, st := range m.ranks {
			p := m.procs[st.proc]
			if slices.Contains(rs.leavers, r) {
				if p != nil {
					p.side, p.leaving = true, true
				}
				continue
			}
			if p != nil {
				p.rank = len(kept)
			}
			kept = append(kept, st)
		}
		m.ranks = kept
	}
	m.cfg.NP = rs.np
}

// leaverExit handles the exit of a process whose rank left at a shrink: a clean exit is
// expected, anything else is worth a line but not a failure of the job.
func (m *Machine) leaverExit(p *proc, e Exited) {
	if e.failed() {
		m.logf("process that left at a resize (pid %d on %s): %s", p.pid, nodeOf(p), exitText(e))
	}
}
