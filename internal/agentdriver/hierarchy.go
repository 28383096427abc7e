package agentdriver

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mpios/mpios/internal/ctlplane"
	"github.com/mpios/mpios/internal/job"
	"github.com/mpios/mpios/internal/nodestatus"
	"github.com/mpios/mpios/internal/reconf"
	"github.com/mpios/mpios/internal/supervisor"
	"github.com/mpios/mpios/iosbridge"
)

// The hierarchical manager (pcmd serve --hierarchical): Desell's §2.2.2 policy
// (iosbridge.HierarchyConfig.Plan) run for every job with ranks on this node, over this node
// and its peers. Every agent computes the same plan from the same heartbeats; only the job's
// manager (jobManager: the node mpirun lets resize the job and move its ranks) acts, and it
// turns the plan into grow, rebalance or migrate requests to the job's launcher.

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

// jobManager is the node that may resize the job and move any of its ranks: the manager
// among the nodes its ranks run on (supervisor.ManagerNode), as every agent computes it alone
// from the same heartbeat table.
func jobManager(subs []iosbridge.Subordinate) string {
	var nodes []string
	for _, s := range subs {
		if len(s.Ranks) > 0 {
			nodes = append(nodes, s.Name)
		}
	}
	return supervisor.ManagerNode(nodes)
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
		// The node that acts is the job's manager as mpirun authorizes it (the first by name
		// of the nodes running the job's ranks), not the plan's most powerful member: requests
		// from any other node would be refused (supervisor.AuthorizeControl).
		if err != nil || jobManager(subs) != a.node || d.Shares == nil {
			continue
		}
		// Whether the job can grow or be rebalanced is its launcher's to say (JobInfo), asked
		// off the agent's goroutine; the requests follow one after the other.
		a.hierBusy[jobID] = true
		a.hierNext[jobID] = now.Add(a.cooldown())
		go a.carryOut(jobID, d, subs)
	}
}

// carryOut asks job jobID's launcher for its shape, turns the manager's decision d into
// control requests (iosbridge.HierarchyConfig.ClusterRequests) and sends them in order,
// reporting each answer to the agent's goroutine, the last one marked.
func (a *Agent) carryOut(jobID string, d iosbridge.MalleabilityDecision, subs []iosbridge.Subordinate) {
	shape := a.jobShape(jobID, subs)
	reqs := iosbridge.HierarchyConfig{}.ClusterRequests(d, subs, shape)
	report := func(r hierResult) bool {
		select {
		case a.hierResults <- r:
			return true
		case <-a.quit:
			return false
		}
	}
	if len(reqs) == 0 {
		report(hierResult{job: jobID, last: true})
		return
	}
	for i, cr := range reqs {
		req := controlRequest(cr)
		req.Reason = truncate("ios hierarchical: manager "+a.node+": "+cr.Reason, maxReasonBytes)
		a.log.Printf("IOS agent: hierarchical manager asks job %s to %s (%s)", jobID, describe(cr), cr.Reason)
		rep, err := nodestatus.Control(a.nc, jobID, req, a.cfg.Key, nodestatus.JobReplies(a.cfg.Jobs, jobID), a.cfg.ControlTimeout)
		if !report(hierResult{job: jobID, req: req, what: describe(cr), rep: rep, err: err, last: i == len(reqs)-1}) {
			return
		}
		if err != nil || !rep.OK {
			// The later requests were planned for a job that did what this one asked.
			if i < len(reqs)-1 {
				report(hierResult{job: jobID, last: true})
			}
			return
		}
	}
}

// jobShape is what the job's launcher says of it (size, malleability, the weights of its
// last committed resize of that size) and the free slots of the nodes. A launcher that does
// not answer, or whose answer does not verify under the job's key (cfg.Jobs), leaves a job
// of the ranks the manager sees, taken as rigid: a forged info cannot make it grow a job.
func (a *Agent) jobShape(jobID string, subs []iosbridge.Subordinate) iosbridge.JobShape {
	var shape iosbridge.JobShape
	for _, s := range subs {
		shape.Size += len(s.Ranks)
	}
	if a.cfg.FreeSlots != nil {
		shape.FreeSlots = a.cfg.FreeSlots()
	}
	// Only the launcher's answer, under the job key, counts: anyone can answer first.
	var info job.JobInfo
	err := ctlplane.Request(a.nc, job.JobInfoSubject(jobID), nil, a.cfg.ControlTimeout, func(m *nats.Msg) error {
		got, err := a.cfg.Jobs.DecodeJobInfo(jobID, m.Subject, m.Data, time.Now())
		if err == nil {
			info = got
		}
		return err
	})
	if refused := (*ctlplane.RefusedError)(nil); errors.As(err, &refused) {
		a.log.Printf("IOS agent: ignoring job %s's info (taken as rigid): %v", jobID, refused.Last)
	}
	if err != nil {
		return shape
	}
	shape.Size, shape.Malleable = info.Size, info.Malleable
	for i := len(info.Reconfigurations) - 1; i >= 0; i-- {
		r := info.Reconfigurations[i]
		if r.Kind == reconf.Resize && r.State == reconf.Committed {
			if r.NP == info.Size && len(r.Weights) == info.Size {
				shape.Weights = r.Weights
			}
			break
		}
	}
	return shape
}

// controlRequest is the job.ControlRequest of a manager's request.
func controlRequest(cr iosbridge.ClusterRequest) job.ControlRequest {
	switch cr.Kind {
	case iosbridge.RequestGrow, iosbridge.RequestRebalance:
		req := job.ControlRequest{Kind: job.ControlResize, NP: cr.NP, Weights: cr.Weights}
		for _, on := range cr.On {
			req.On = append(req.On, job.NodeSlots{Node: on.Node, Slots: on.Ranks})
		}
		return req
	default:
		return job.ControlRequest{Kind: job.ControlMigrate, Rank: cr.Ranks[0], Ranks: cr.Ranks, To: cr.To}
	}
}

// describe says what a manager's request asks, for logs and events.
func describe(cr iosbridge.ClusterRequest) string {
	switch cr.Kind {
	case iosbridge.RequestGrow:
		var on []string
		for _, o := range cr.On {
			on = append(on, fmt.Sprintf("%s:%d", o.Node, o.Ranks))
		}
		return fmt.Sprintf("grow to %d ranks on %s", cr.NP, strings.Join(on, ","))
	case iosbridge.RequestRebalance:
		return fmt.Sprintf("rebalance its %d ranks by weights %v", cr.NP, cr.Weights)
	default:
		return fmt.Sprintf("move ranks %v to %s", cr.Ranks, cr.To)
	}
}

// hierResult is a job's answer to a hierarchical manager's request; a result without a
// request only ends the job's round.
type hierResult struct {
	job  string
	req  job.ControlRequest
	what string
	rep  job.ControlReply
	err  error
	last bool // the round's last answer: the job may be planned again after the cooldown
}

// hierDone records a job's answer.
func (a *Agent) hierDone(r hierResult) {
	if r.last {
		a.hierBusy[r.job] = false
	}
	if r.what == "" {
		return
	}
	ok, failed := job.IOSMigrateOK, job.IOSMigrateFailed
	if r.req.Kind == job.ControlResize {
		ok, failed = job.IOSResizeOK, job.IOSResizeFailed
	}
	e := job.IOSEvent{At: a.cfg.Clock(), Kind: ok, Job: r.job, Rank: -1, Peer: r.req.To, Policy: "hierarchical", Reason: r.what + ": " + r.rep.Message}
	if r.req.Kind == job.ControlMigrate {
		e.Rank = r.req.Rank
	}
	switch {
	case r.err != nil:
		e.Kind, e.Reason = failed, r.what+": "+strings.TrimPrefix(r.err.Error(), "pcmd: ")
	case !r.rep.OK:
		e.Kind, e.Reason = failed, r.what+": refused: "+r.rep.Error
	}
	if e.Kind == ok {
		a.migOK++
	} else {
		a.migFailed++
	}
	a.log.Printf("IOS agent: hierarchical request to job %s (%s): %s %s", r.job, r.what, e.Kind, e.Reason)
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
