package supervisor

import "github.com/mpios/mpios/internal/job"

// Nodes joining a running job (Satin, seed 002 §4.4: processors may join a running
// computation at any time; MPI/IOS, seed 004: a node that joins is a target like any
// other). A node joins in one of two ways: a node declared gone (NodeGone) whose pcmd comes
// back, or a pcmd started after the job. From then on its free slots are the job's: a
// recovery may place ranks there, a resize may grow onto it, and a resize that names no
// node takes the free slots of the job's nodes, joined ones included. The loop (the node
// client) decides that a node joined — it verified the node's heartbeat and key card — and
// the Machine only counts slots.

// NodeJoined reports that a node can take the job's ranks: a node declared gone whose pcmd
// came back, or a pcmd started after the job.
type NodeJoined struct {
	Node string
	Free int    // ranks it can take now (its free slots)
	Why  string // e.g. "pcmd on node n2 came back (pid 4242)"
}

func (NodeJoined) event() {}

// onNodeJoined makes the node's free slots the job's, beside the ranks it runs already.
func (m *Machine) onNodeJoined(e NodeJoined) {
	if job.ValidateNode(e.Node) != nil || e.Free < 0 {
		m.logf("ignoring a join of node %q with %d free slots", e.Node, e.Free)
		return
	}
	delete(m.gone, e.Node)
	delete(m.rec.lost, e.Node)
	delete(m.draining, e.Node) // a node joins only when it takes ranks
	if m.cfg.Slots == nil {
		m.cfg.Slots = make(map[string]int)
	}
	m.cfg.Slots[e.Node] = m.ranksOn(e.Node) + e.Free
	why := e.Why
	if why == "" {
		why = "it offers its slots"
	}
	m.logf("node %s joined (%d free slots): %s", e.Node, e.Free, why)
}

// ranksOn counts the job's processes that run on node and hold or take a slot there: the
// current ranks, successors and joiners being started or running.
func (m *Machine) ranksOn(node string) int {
	n := 0
	for _, p := range m.procs {
		if p.node == node && (p.running || p.pid == 0) && !p.leaving {
			n++
		}
	}
	return n
}
