package supervisor

import (
	"errors"
	"fmt"
	"slices"

	"github.com/mpios/mpios/internal/job"
)

// Who may reconfigure a job (issue 14). The loop authenticates every control request before
// the Machine sees it (a job-key envelope or a node's NKey signature, package ctlauth) and
// passes the verified Requester; AuthorizeControl decides what that requester may ask for.

// ErrNotAuthorized: an authenticated requester asked for something it may not do.
var ErrNotAuthorized = errors.New("not authorized")

// Requester is who sent a control request, as its authentication proved.
type Requester struct {
	// Owner: the request verified under the job key, which only the job's owner holds
	// (mpirun's 0600 job record, read by the pcmd CLI) and the job's own processes.
	Owner bool
	// Node: the request was signed by this node's key (its pcmd: an IOS agent, a drain).
	Node string
}

// String names the requester for logs and refusals.
func (r Requester) String() string {
	switch {
	case r.Owner:
		return "the job's owner"
	case r.Node != "":
		return "node " + r.Node
	}
	return "an unauthenticated sender"
}

// ControlView is what AuthorizeControl knows of the job.
type ControlView struct {
	// RankNodes is the node each rank runs on now ("" or "local" for this machine).
	RankNodes []string
	// PolicyNone: the job was started with --policy none, so no node's IOS decision may
	// move or resize it; only drains (job.ControlRequest.Drain) still move a node's ranks.
	PolicyNone bool
}

// ManagerNode is the job's manager among the nodes its ranks run on: the first by name,
// as every node computes it alone from the same placement. "" when the ranks run locally.
func ManagerNode(rankNodes []string) string {
	best := ""
	for _, n := range rankNodes {
		if n == "" || n == "local" {
			continue
		}
		if best == "" || n < best {
			best = n
		}
	}
	return best
}

// AuthorizeControl decides whether from may ask for c (already validated) of a job seen as
// v. The job's owner may ask for anything. A node may move only its own ranks, may shrink
// the job only off itself (always: a drain gives its slots back) and grow it only onto
// itself (not under --policy none; the only request of a node that runs no rank of the job
// yet, such as one that joined). The job's manager node may also resize the job and move
// any of its ranks, except under --policy none. Checkpoints are the owner's alone. The
// error wraps ErrNotAuthorized and says why.
func AuthorizeControl(from Requester, c job.ControlRequest, v ControlView) error {
	if from.Owner {
		return nil
	}
	if from.Node == "" {
		return fmt.Errorf("%w: %s request from %s", ErrNotAuthorized, c.Kind, from)
	}
	refuse := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s may not %s", ErrNotAuthorized, from, fmt.Sprintf(format, args...))
	}
	manager := !v.PolicyNone && ManagerNode(v.RankNodes) == from.Node
	switch c.Kind {
	case job.ControlMigrate:
		if manager {
			return nil
		}
		if v.PolicyNone && !c.Drain {
			return refuse("move ranks of a job started with --policy none (only a drain moves them)")
		}
		ranks := c.Ranks
		if len(ranks) == 0 {
			ranks = []int{c.Rank}
		}
		for _, r := range ranks {
			if r < 0 || r >= len(v.RankNodes) || v.RankNodes[r] != from.Node {
				return refuse("move rank %d: it does not run there", r)
			}
		}
		return nil
	case job.ControlResize:
		self := len(c.On) > 0 && !slices.ContainsFunc(c.On, func(ns job.NodeSlots) bool { return ns.Node != from.Node })
		if !slices.Contains(v.RankNodes, from.Node) && !(c.NP > len(v.RankNodes) && self && !v.PolicyNone) {
			return refuse("reconfigure a job it runs no rank of, except by growing it onto itself")
		}
		switch {
		case c.NP < len(v.RankNodes) && self:
			return nil // a shrink off itself
		case manager:
			return nil
		case c.NP > len(v.RankNodes) && self && !v.PolicyNone:
			return nil // a grow onto itself
		case v.PolicyNone:
			return refuse("resize a job started with --policy none except off itself")
		}
		return refuse("resize the job to %d ranks except onto or off itself (--on %s), and it is not the job's manager", c.NP, from.Node)
	case job.ControlCheckpoint:
		return refuse("request a checkpoint: only the job's owner may")
	}
	return refuse("send a %q request", c.Kind)
}

// controlView is the Machine's ControlView now.
func (m *Machine) controlView() ControlView {
	v := ControlView{RankNodes: make([]string, len(m.ranks)), PolicyNone: m.cfg.Policy == "none"}
	for r := range m.ranks {
		v.RankNodes[r] = nodeOf(m.procs[m.ranks[r].proc])
	}
	return v
}
