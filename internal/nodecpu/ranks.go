package nodecpu

// The ranks on a node are the demand on its CPUs: comm polls its sockets only while they
// are no more than UsableCPUs (comm.DecideSpin). mpirun counts them from its placement, pcmd
// from what it runs.

// RanksOn counts the ranks that placement (the node of each rank) puts on node.
func RanksOn(placement []string, node string) int {
	n := 0
	for _, p := range placement {
		if p == node {
			n++
		}
	}
	return n
}

// RanksSharing is the number of ranks sharing a node's CPUs when a launcher placed placed
// ranks of a job there, the node runs running of that job now (more, if some are already
// there), and others of other jobs.
func RanksSharing(placed, running, others int) int {
	return max(placed, running) + others
}
