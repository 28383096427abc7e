package pcmd

import (
	"strconv"

	"github.com/mpios/mpios/comm"
	"github.com/mpios/mpios/internal/job"
	"github.com/mpios/mpios/internal/nodecpu"
	"github.com/mpios/mpios/internal/spawner"
)

// nodeRanksEnv is the comm.EnvNodeRanks entry of a rank that req starts on this node (whose
// slot is already reserved), where same ranks of its job and other ranks of other jobs run
// or start: the ranks of its job on this node as mpirun placed them (or as many as run here
// now, if more), plus the ranks of other jobs. Ranks use it to decide whether they may poll
// their sockets (comm.DecideSpin).
func nodeRanksEnv(req job.SpawnRequest, same, other int) string {
	placed := 0
	if v, ok := spawner.Lookup(req.Env, comm.EnvNodeRanks); ok {
		placed, _ = strconv.Atoi(v) // malformed: count what runs here
	}
	return comm.EnvNodeRanks + "=" + strconv.Itoa(nodeRanks(placed, same, other))
}

// nodeRanks combines mpirun's count of a job's ranks on this node with pcmd's counts of the
// ranks it runs for the job and for other jobs.
func nodeRanks(placed, same, other int) int {
	return nodecpu.RanksSharing(placed, same, other)
}
