package iosbridge

import (
	"fmt"
	"time"
)

// Gossip of the Sheriff's acquaintances (Protocol.Hints). Bustos' peers keep their
// acquaintance lists up to date with heartbeats and find peers further away by exploration
// messages (seed 001 §3.2); his Sheriff steals from "one of its acquaintances" (§5.5). In a
// grid of 10,000 nodes an object then climbs one acquaintance at a time to scattered better
// nodes, each move paced by the stability cooldown, and the objects seldom meet on the best
// nodes. So a heartbeat also passes on, with a hop count, the few best-ranked underloaded
// nodes and the few lowest-ranked nodes hosting movable ranks its sender knows of: the
// stealer sends its request to such a host directly, the host keeps its ranks for one of
// the best stealers it knows of, and an overloaded node asks one of them first.

// MaxHintHops is how many heartbeats a hint travels from the node it names: a few more than
// the diameter of a random overlay of tens of neighbours per node over 10,000 nodes (3), and
// the bound on how long a hint outlives what it says (a node that stops being underloaded
// or hosting is dropped from its neighbours' lists at once, and from the others' within
// MaxHintHops heartbeat intervals).
const MaxHintHops = 4

// Hint names a node a heartbeat vouches for: its NodeRank and how many heartbeats away the
// news comes from (0: the sender itself).
type Hint struct {
	Node string  `msgpack:"node"`
	Rank float64 `msgpack:"rank"`
	Hops int     `msgpack:"hops"`
}

// Validate rejects a hint without a node, with a non-finite or negative rank or too many hops.
func (h Hint) Validate() error {
	if h.Node == "" || !finite(h.Rank) || h.Rank < 0 || h.Hops < 0 || h.Hops > MaxHintHops {
		return fmt.Errorf("iosbridge: hint %+v: want a node, a finite rank >= 0 and 0..%d hops", h, MaxHintHops)
	}
	return nil
}

// Hints returns the node's current lists (recomputed at each heartbeat): the best-ranked
// underloaded nodes it knows of, best first, and the lowest-ranked hosts of movable ranks,
// lowest first; both include the node itself when it qualifies.
func (n *Node) Hints() (best, hosts []Hint) {
	return append([]Hint(nil), n.best...), append([]Hint(nil), n.hosts...)
}

// underloaded is Bustos' load(B) < UT for a profile: the node would steal (spare CPUs at
// or above the steal threshold) and has room for a rank.
func (n *Node) underloaded(p NodeProfile) bool {
	return p.EffectiveCPUs > 0 && p.Availability >= n.cfg.StealThreshold && !p.full()
}

// movable reports whether a local rank could be given now: not given already and out of
// its cooldown.
func (n *Node) movable(now time.Time) bool {
	for _, r := range n.candidates() {
		if r.LastMigration.IsZero() || now.Sub(r.LastMigration) >= n.cfg.Stability.Cooldown {
			return true
		}
	}
	return false
}

// refreshHints recomputes the node's lists from its own state and its neighbours' last
// heartbeats, before it sends its own.
func (n *Node) refreshHints(now time.Time) {
	eff := n.effectiveLocal()
	self := Hint{Node: n.cfg.ID, Rank: NodeRank(eff)}
	n.best = n.mergeHints(n.underloaded(eff), self, true)
	n.hosts = n.mergeHints(len(eff.Ranks) > 0 && n.movable(now), self, false)
}

// mergeHints keeps the Protocol.Hints best of: this node (if qualifies), and its
// neighbours' best (high) or host (!high) lists one hop further, except hints about this
// node (it knows better) and about a neighbour whose own last heartbeat says it no longer
// qualifies. Best: highest rank first; hosts: lowest first; then fewest hops, then name.
func (n *Node) mergeHints(qualifies bool, self Hint, high bool) []Hint {
	k := n.proto.Hints
	out := make([]Hint, 0, k)
	before := func(a, b Hint) bool {
		if a.Rank != b.Rank {
			return (a.Rank > b.Rank) == high
		}
		if a.Hops != b.Hops {
			return a.Hops < b.Hops
		}
		return a.Node < b.Node
	}
	consider := func(h Hint) {
		if len(out) == k && !before(h, out[k-1]) {
			return
		}
		for i := range out {
			if out[i].Node == h.Node {
				if !before(h, out[i]) {
					return
				}
				out = append(out[:i], out[i+1:]...)
				break
			}
		}
		i := len(out)
		for i > 0 && before(h, out[i-1]) {
			i--
		}
		out = append(out, Hint{})
		copy(out[i+1:], out[i:])
		out[i] = h
		if len(out) > k {
			out = out[:k]
		}
	}
	if qualifies {
		consider(self)
	}
	for _, ps := range n.sortedPeerStates() {
		hs := ps.hosts
		if high {
			hs = ps.best
		}
		for _, h := range hs {
			h.Hops++
			// The rank test first: it turns most hints away without reading their names.
			if h.Hops > MaxHintHops || (len(out) == k && !before(h, out[k-1])) || h.Node == n.cfg.ID {
				continue
			}
			if q := n.peers[h.Node]; q != nil && q.profile != nil {
				if still := n.underloaded(*q.profile); high && !still || !high && len(q.profile.Ranks) == 0 {
					continue
				}
			}
			consider(h)
		}
	}
	return out
}

// hinted picks a random node of hs, other than this one, whose rank ok accepts.
func (n *Node) hinted(hs []Hint, ok func(rank float64) bool) (string, bool) {
	var fit []string
	for _, h := range hs {
		if h.Node != n.cfg.ID && ok(h.Rank) {
			fit = append(fit, h.Node)
		}
	}
	if len(fit) == 0 {
		return "", false
	}
	return fit[pick(n.cfg.Rand, len(fit))], true
}
