package pcmd

import (
	"slices"
	"strings"
	"time"

	"github.com/mpios/mpios/internal/job"
)

// forgetAfter is how long a silent peer stays in the node's view (as gone) before it is
// dropped, so pcmd status can still name recently lost nodes.
const forgetAfter = 15 * time.Minute

// peerTable is a node's view of its peers, learnt from their heartbeats. It only decides:
// no sockets, and time is passed in. It is not safe for concurrent use.
type peerTable struct {
	self  string
	pid   int // this pcmd's pid
	peers map[string]peer
	twins map[int]bool // pids of other pcmds beating with our name, already reported
}

type peer struct {
	info job.NodeInfo
	last time.Time
}

func newPeerTable(self string, pid int) *peerTable {
	return &peerTable{self: self, pid: pid, peers: map[string]peer{}, twins: map[int]bool{}}
}

// heard records a valid heartbeat received at now. A "leaving" heartbeat drops the peer at
// once. twin reports, once per pid, another pcmd that beats with this node's name.
func (t *peerTable) heard(info job.NodeInfo, now time.Time) (twin bool) {
	switch {
	case info.Name == t.self:
		if info.PID != t.pid && !t.twins[info.PID] {
			t.twins[info.PID] = true
			return true
		}
	case info.Leaving:
		delete(t.peers, info.Name)
	default:
		t.peers[info.Name] = peer{info: info, last: now}
	}
	return false
}

// alive names the peers whose heartbeats are current at now (none missed job.MissedBeats
// times), sorted.
func (t *peerTable) alive(now time.Time) []string {
	var out []string
	for name, p := range t.peers {
		if now.Sub(p.last) <= p.info.GoneAfter() {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// aliveInfos is the latest heartbeat of every alive peer at now, sorted by name.
func (t *peerTable) aliveInfos(now time.Time) []job.NodeInfo {
	var out []job.NodeInfo
	for _, name := range t.alive(now) {
		out = append(out, t.peers[name].info)
	}
	return out
}

// view lists every peer remembered, with the age of its last heartbeat at now.
func (t *peerTable) view(now time.Time) []job.PeerInfo {
	out := make([]job.PeerInfo, 0, len(t.peers))
	for _, p := range t.peers {
		out = append(out, job.PeerInfo{Info: p.info, Age: now.Sub(p.last)})
	}
	slices.SortFunc(out, func(a, b job.PeerInfo) int { return strings.Compare(a.Info.Name, b.Info.Name) })
	return out
}

// forget drops the peers silent for longer than forgetAfter at now, and names them.
func (t *peerTable) forget(now time.Time) []string {
	var gone []string
	for name, p := range t.peers {
		if now.Sub(p.last) > forgetAfter {
			delete(t.peers, name)
			gone = append(gone, name)
		}
	}
	return gone
}
