package launch

import (
	"strconv"

	"github.com/mpios/mpios/comm"
	"github.com/mpios/mpios/internal/nodecpu"
	"github.com/mpios/mpios/internal/rankproc"
)

// Every rank learns how many ranks run on its node (comm.EnvNodeRanks): a rank polls its
// sockets for incoming messages only while every rank on the node can have a core of its own
// (see comm.DecideSpin). mpirun counts the ranks of its job; pcmd adds those of other jobs
// on its node.

// nodeRanksEnv is the comm.EnvNodeRanks entry of rank's environment at the job's start.
func (r *runner) nodeRanksEnv(rank int) string {
	return comm.EnvNodeRanks + "=" + strconv.Itoa(nodeRanks(r.cfg.Starter, r.cfg.NP, rank))
}

// nodeRanks counts the ranks of a job of np ranks that start on rank's node: all of them
// when they run on this machine, those placed on the same node by a Remote starter.
func nodeRanks(s rankproc.Starter, np, rank int) int {
	p, ok := s.(interface{ Placement() []string })
	if !ok {
		return np
	}
	return placedWith(p.Placement(), rank)
}

// placedWith counts the ranks whose node in place is rank's (0 if rank has none).
func placedWith(place []string, rank int) int {
	if rank < 0 || rank >= len(place) {
		return 0
	}
	return nodecpu.RanksOn(place, place[rank])
}

// successorNodeRanksEnv is the comm.EnvNodeRanks entry for the successor of rank started on
// node to: the other ranks of the job running there now, less those leaving it in the same
// joint move (leaving), plus the successor.
func (r *runner) successorNodeRanksEnv(to string, rank, leaving int) string {
	return comm.EnvNodeRanks + "=" + strconv.Itoa(max(1, ranksOnNode(r.sup.Hosts(), to, rank)-leaving))
}

// ranksOnNode counts the ranks other than rank whose host is node, plus one for rank itself.
func ranksOnNode(hosts []string, node string, rank int) int {
	n := nodecpu.RanksOn(hosts, node)
	if rank >= 0 && rank < len(hosts) && hosts[rank] == node {
		n-- // its predecessor
	}
	return n + 1
}
