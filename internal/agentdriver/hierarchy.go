package agentdriver

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/mpios/mpios/internal/job"
	"github.com/mpios/mpios/internal/nodestatus"
	"github.com/mpios/mpios/iosbridge"
)

// The hierarchical manager (pcmd serve --hierarchical): Desell's §2.2.2 policy
// (iosbridge.HierarchyConfig.Plan) run for every job with ranks on this node, over this node
// and its peers. Every agent computes the same election from the same heartbeats
// (iosbridge.ElectManager); only the manager acts, and it turns the plan's migrations into
// migrate requests, one per target node, to the job's launcher.

// remoteIter is the latest iteration time of a rank anywhere, from its profile.
type remoteIter struct {
	node string
	iter time.Duration
	at   time.Time
}

// hierSubordinates describes job jobID on this node and its peers as the manager sees them:
// each node's processing power for the job (eq. 2.4: its CPUs × core speed × the share
// available to the job, counting the CPU its ranks use now as the job's), the job's ranks
// there (each holding an equal share of the data) and their slowest iteration time.
func (a *Agent) hierSubordinates(now time.Time, jobID string) []iosbridge.Subordinate {
	members := []iosbridge.NodeProfile{a.n.Local()}
	for _, p := range a.n.Peers() {
		if np, ok := a.n.PeerProfile(p); ok {
			members = append(members, np)
		}
	}
	a.pmu.Lock()
	iters := map[string]time.Duration{}
	for k, r := range a.iters {
		if k.job == jobID && now.Sub(r.at) <= a.staleAfter() {
			iters[r.node] = max(iters[r.node], r.iter)
		}
	}
	a.pmu.Unlock()
	var subs []iosbridge.Subordinate
	for _, np := range members {
		var ranks []iosbridge.RankID
		for _, r := range np.Ranks {
			if r.Job == jobID {
				ranks = append(ranks, r)
			}
		}
		avail := np.Availability
		if np.EffectiveCPUs > 0 {
			avail = math.Min(1, avail+float64(len(np.Ranks))/np.EffectiveCPUs)
		}
		speed := np.Speed
		if speed <= 0 {
			speed = 1
		}
		power := iosbridge.ProcessingPower([]iosbridge.Processor{{GHz: speed, Available: avail}}) * np.EffectiveCPUs
		subs = append(subs, iosbridge.Subordinate{Name: np.Node, Power: power, Data: float64(len(ranks)),
			Ranks: ranks, IterationTime: iters[np.Node]})
	}
	slices.SortFunc(subs, func(x, y iosbridge.Subordinate) int { return strings.Compare(x.Name, y.Name) })
	return subs
}

// planHierarchy runs the plan of every job with ranks here whose last request is older than
// the cooldown, and carries out the decisions of those this node manages.
func (a *Agent) planHierarchy(now time.Time) {
	// The jobs with ranks here or on a peer: the manager of a job may be a node that does
	// not run it yet (an idle node that joined).
	var jobs []string
	add := func(j string) {
		if !slices.Contains(jobs, j) {
			jobs = append(jobs, j)
		}
	}
	for _, r := range a.ranks() {
		add(r.Job)
	}
	for _, p := range a.n.Peers() {
		if np, ok := a.n.PeerProfile(p); ok {
			for _, r := range np.Ranks {
				add(r.Job)
			}
		}
	}
	slices.Sort(jobs)
	for _, jobID := range jobs {
		if a.hierBusy[jobID] || now.Before(a.hierNext[jobID]) || a.jobPolicy(jobID) == iosbridge.PolicyNone {
			continue
		}
		subs := a.hierSubordinates(now, jobID)
		d, err := iosbridge.HierarchyConfig{}.Plan(jobID, iosbridge.LevelCluster, subs, false)
		if err != nil || d.Manager != a.node || len(d.Migrations) == 0 {
			continue
		}
		// The cluster level keeps the job's rank count (the granularity of eq. 2.9 needs
		// cache sizes the agents do not measure), so the plan comes as migrations.
		byTo := map[string][]int{}
		var order []string
		for _, m := range d.Migrations {
			if _, ok := byTo[m.To]; !ok {
				order = append(order, m.To)
			}
			byTo[m.To] = append(byTo[m.To], m.Rank.Rank)
		}
		a.hierBusy[jobID] = true
		a.hierNext[jobID] = now.Add(a.cooldown())
		for _, to := range order {
			req := job.ControlRequest{Kind: job.ControlMigrate, Rank: byTo[to][0], Ranks: byTo[to], To: to,
				Reason: truncate(fmt.Sprintf("ios hierarchical: manager %s: %s", a.node, d.Reason), maxReasonBytes)}
			a.log.Printf("IOS agent: hierarchical manager asks job %s to move ranks %v to %s (%s)", jobID, req.Ranks, to, d.Reason)
			go func(jobID string, req job.ControlRequest) {
				rep, err := nodestatus.Control(a.nc, jobID, req, a.cfg.Key, a.cfg.ControlTimeout)
				select {
				case a.hierResults <- hierResult{job: jobID, req: req, rep: rep, err: err}:
				case <-a.quit:
				}
			}(jobID, req)
		}
	}
}

// hierResult is a job's answer to a hierarchical manager's request.
type hierResult struct {
	job string
	req job.ControlRequest
	rep job.ControlReply
	err error
}

// hierDone records a job's answer; the job may be planned again after the cooldown.
func (a *Agent) hierDone(r hierResult) {
	a.hierBusy[r.job] = false
	e := job.IOSEvent{At: a.cfg.Clock(), Kind: job.IOSMigrateOK, Job: r.job, Rank: r.req.Rank, Peer: r.req.To, Policy: "hierarchical", Reason: r.rep.Message}
	switch {
	case r.err != nil:
		e.Kind, e.Reason = job.IOSMigrateFailed, strings.TrimPrefix(r.err.Error(), "pcmd: ")
	case !r.rep.OK:
		e.Kind, e.Reason = job.IOSMigrateFailed, "refused: "+r.rep.Error
	}
	if e.Kind == job.IOSMigrateOK {
		a.migOK++
	} else {
		a.migFailed++
	}
	a.log.Printf("IOS agent: hierarchical request to job %s (ranks %v to %s): %s %s", r.job, r.req.Ranks, r.req.To, e.Kind, e.Reason)
	a.event(true, e)
}

// jobPolicy is the policy job jobID chose, or the node's.
func (a *Agent) jobPolicy(jobID string) string {
	if p, ok := a.jobPolicies[jobID]; ok {
		return p
	}
	return a.cfg.Policy
}

// cooldown is the stability cooldown in force.
func (a *Agent) cooldown() time.Duration {
	if a.cfg.Cooldown > 0 {
		return a.cfg.Cooldown
	}
	return iosbridge.DefaultStability().Cooldown
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}
