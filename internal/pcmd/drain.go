package pcmd

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mpios/mpios/internal/agentdriver"
	"github.com/mpios/mpios/internal/ctlauth"
	"github.com/mpios/mpios/internal/ctlplane"
	"github.com/mpios/mpios/internal/job"
	"github.com/mpios/mpios/internal/nodestatus"
)

// planDrain places the ranks of a draining node on the free slots of its alive peers (not
// those draining themselves): each
// job's ranks go to the peer with the most free slots (ties: the first by name), as many as
// fit, then to the next, so that a job is split over as few nodes as possible. It returns
// one move per job and target, and the ranks that found no slot. Deterministic: the same
// tables give the same plan.
func planDrain(ranks []job.RankInfo, peers []job.NodeInfo) (moves []job.DrainMove, stuck []job.RankInfo) {
	type slot struct {
		name string
		free int
	}
	var free []slot
	for _, p := range peers {
		if n := p.Slots - p.Used; n > 0 && !p.Draining {
			free = append(free, slot{p.Name, n})
		}
	}
	ranks = slices.Clone(ranks)
	slices.SortFunc(ranks, func(a, b job.RankInfo) int {
		if c := strings.Compare(a.Job, b.Job); c != 0 {
			return c
		}
		return a.Rank - b.Rank
	})
	for i := 0; i < len(ranks); {
		best := -1
		for j, s := range free {
			if s.free > 0 && (best < 0 || s.free > free[best].free || s.free == free[best].free && s.name < free[best].name) {
				best = j
			}
		}
		if best < 0 {
			return moves, append(stuck, ranks[i:]...)
		}
		m := job.DrainMove{Job: ranks[i].Job, To: free[best].name}
		for ; i < len(ranks) && ranks[i].Job == m.Job && free[best].free > 0; i++ {
			m.Ranks = append(m.Ranks, ranks[i].Rank)
			free[best].free--
		}
		moves = append(moves, m)
	}
	return moves, nil
}

// drain handles a drain request: close the node to new ranks, place its ranks on its peers
// and ask their jobs to move them. A drain that cannot place every rank is refused and, if
// the node was not draining already, leaves it open as before. The node exits once it runs
// no rank (heartbeatLoop).
func (s *server) drain(req job.DrainRequest) job.DrainReply {
	rep := job.DrainReply{Node: s.cfg.Node}
	s.mu.Lock()
	again := s.draining
	s.draining = true
	if !again {
		s.drainWhy = req.Reason
	}
	peers := s.peers.aliveInfos(time.Now())
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		if s.draining {
			s.retry.planned(time.Now())
		}
		s.mu.Unlock()
	}()
	s.ranks.Drain() // first: no rank may arrive between the plan and the moves
	ranks := s.ranks.Ranks()
	moves, stuck := planDrain(ranks, peers)
	var shrinks []job.DrainMove
	var notes []string
	if len(stuck) > 0 {
		// No room for them: their jobs shrink off this node if they can.
		var rest []job.RankInfo
		shrinks, rest, notes = planShrinks(ranks, stuck, s.jobInfos(stuck), s.cfg.Node)
		moves, stuck = planDrain(rest, peers)
	}
	if len(stuck) > 0 {
		var names []string
		for _, r := range stuck {
			names = append(names, fmt.Sprintf("%s/%d", r.Job, r.Rank))
		}
		rep.Error = fmt.Sprintf("pcmd: node %s cannot drain: no alive peer has a free slot for %s", s.cfg.Node, strings.Join(names, ", "))
		if !again {
			s.ranks.Reopen()
			s.mu.Lock()
			s.draining = false
			s.mu.Unlock()
			rep.Error += "; it goes on taking ranks"
		}
		if len(notes) > 0 {
			rep.Error += " (" + strings.Join(notes, "; ") + ")"
		}
		s.log.Print(rep.Error)
		return rep
	}
	why := "pcmd drain of node " + s.cfg.Node
	if req.Reason != "" {
		why += ": " + req.Reason
	}
	moving := 0
	for _, m := range moves {
		moving += len(m.Ranks)
	}
	s.log.Printf("draining (%s): no new ranks, moving %s, shrinking %s", why, count(moving, "rank"), count(len(shrinks), "job"))
	timeout := s.cfg.IOS.ControlTimeout
	if timeout <= 0 { // the agent is off
		timeout = agentdriver.DefaultControlTimeout
	}
	var wg sync.WaitGroup
	// send asks m's job for creq, off this goroutine, and records and logs the answer.
	send := func(m *job.DrainMove, creq job.ControlRequest, what string) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			crep, err := nodestatus.Control(s.nc, m.Job, creq, s.signer, nodestatus.JobReplies(s.jobKeys, m.Job), timeout)
			switch {
			case err != nil:
				m.Answer = strings.TrimPrefix(err.Error(), "pcmd: ")
			case !crep.OK:
				m.Answer = "refused: " + crep.Error
			default:
				m.Accepted, m.Answer = true, crep.Message
			}
			s.log.Printf("drain: job %s %s: %s", m.Job, what, m.Answer)
		}()
	}
	for i := range moves {
		m := &moves[i]
		creq := job.ControlRequest{Kind: job.ControlMigrate, Rank: m.Ranks[0], To: m.To, Reason: why, Drain: true}
		if len(m.Ranks) > 1 {
			creq.Ranks = m.Ranks
		}
		send(m, creq, fmt.Sprintf("ranks %v to %s", m.Ranks, m.To))
	}
	for i := range shrinks {
		m := &shrinks[i]
		creq := job.ControlRequest{Kind: job.ControlResize, NP: m.ShrinkTo, On: []job.NodeSlots{{Node: s.cfg.Node, Slots: len(m.Ranks)}}, Reason: why}
		send(m, creq, fmt.Sprintf("shrinks to %d ranks, its ranks %v here leave", m.ShrinkTo, m.Ranks))
	}
	wg.Wait()
	rep.Moves = append(moves, shrinks...)
	return rep
}

// A drain's moves can fail after their jobs accepted them: the target filled up or began
// draining itself before the successor started, and the migration was aborted (two nodes
// drained at once). The ranks then stay, and the node would wait for their jobs to end. So a
// draining node that still runs ranks plans its drain again, first drainRetryFirst after
// the last plan, then at twice the interval each time up to drainRetryMost: the new plan
// places them on the peers as they are now, shrinks their jobs, or says why not. A rank whose
// move is still under way is refused as "already moving", and one that has moved is no
// longer the node's to move.
const (
	drainRetryFirst = 5 * time.Second
	drainRetryMost  = time.Minute
)

// drainRetry decides when a drain is planned again. The zero value has no plan yet.
type drainRetry struct {
	last time.Time     // the last plan
	wait time.Duration // from the last plan to the next; 0: drainRetryFirst
}

// planned notes a plan made at now, by a drain request or a retry.
func (r *drainRetry) planned(now time.Time) {
	if !r.last.IsZero() {
		r.wait = min(2*max(r.wait, drainRetryFirst), drainRetryMost)
	}
	r.last = now
}

// due reports whether a draining node that runs ranks plans its drain again at now.
func (r *drainRetry) due(now time.Time, ranks int) bool {
	return ranks > 0 && !r.last.IsZero() && now.Sub(r.last) >= max(r.wait, drainRetryFirst)
}

// retryDrain plans the drain again when it is due, off the caller's goroutine (the jobs'
// answers take up to the control timeout).
func (s *server) retryDrain(now time.Time) {
	s.mu.Lock()
	due := s.draining && s.retry.due(now, s.ranks.Used())
	if due {
		// Not due again while this retry runs: its own plan resets the clock.
		s.retry.last = now
	}
	why := s.drainWhy
	s.mu.Unlock()
	if !due {
		return
	}
	if why != "" {
		why += ", "
	}
	go s.drain(job.DrainRequest{Reason: why + "planned again: its ranks are still here"})
}

// planShrinks decides, for the jobs of the ranks that found no peer with room (stuck), which
// shrink off this node (self): a malleable job (infos, by job, from its mpirun) that keeps at
// least one rank elsewhere goes on without all its ranks here, as a drain that cannot move
// them "shrinks the job when it is malleable and no slot is free". It returns the shrinks,
// the ranks left to place on peers (those of the other jobs), and why each other job of a
// stuck rank cannot shrink. Deterministic: the same tables give the same plan.
func planShrinks(ranks, stuck []job.RankInfo, infos map[string]job.JobInfo, self string) (shrinks []job.DrainMove, rest []job.RankInfo, notes []string) {
	var jobs []string
	for _, r := range stuck {
		if !slices.Contains(jobs, r.Job) {
			jobs = append(jobs, r.Job)
		}
	}
	slices.Sort(jobs)
	shrunk := map[string]bool{}
	for _, j := range jobs {
		var here []int
		for _, r := range ranks {
			if r.Job == j {
				here = append(here, r.Rank)
			}
		}
		slices.Sort(here)
		info, ok := infos[j]
		switch {
		case !ok:
			notes = append(notes, fmt.Sprintf("job %s did not say whether it can shrink", j))
		case !info.Malleable:
			notes = append(notes, fmt.Sprintf("job %s cannot shrink: its ranks keep no distributed data", j))
		case info.Size-len(here) < 1:
			notes = append(notes, fmt.Sprintf("job %s cannot shrink: all its %d ranks run on %s", j, info.Size, self))
		default:
			shrinks = append(shrinks, job.DrainMove{Job: j, Ranks: here, ShrinkTo: info.Size - len(here)})
			shrunk[j] = true
		}
	}
	for _, r := range ranks {
		if !shrunk[r.Job] {
			rest = append(rest, r)
		}
	}
	return shrinks, rest, notes
}

// jobInfos asks the mpirun of each job of ranks for its job.JobInfo (size, malleability);
// jobs that do not answer, or whose answer does not verify under the job's key (the node
// learnt it from the job's spawns), are left out: they are not shrunk.
func (s *server) jobInfos(ranks []job.RankInfo) map[string]job.JobInfo {
	infos := map[string]job.JobInfo{}
	asked := map[string]bool{}
	for _, r := range ranks {
		if asked[r.Job] {
			continue
		}
		asked[r.Job] = true
		// Only the launcher's answer, under the job key, counts: anyone can answer first.
		err := ctlplane.Request(s.nc, job.JobInfoSubject(r.Job), nil, time.Second, func(m *nats.Msg) error {
			info, err := s.jobKeys.DecodeJobInfo(r.Job, m.Subject, m.Data, time.Now())
			if err == nil {
				infos[r.Job] = info
			}
			return err
		})
		if refused := (*ctlplane.RefusedError)(nil); errors.As(err, &refused) {
			s.log.Printf("pcmd: ignoring job %s's info (taken as not malleable): %v", r.Job, refused.Last)
		}
	}
	return infos
}

func (s *server) onDrain(m *nats.Msg) {
	if m.Reply == "" {
		s.log.Printf("ignoring a drain request without a reply subject")
		return
	}
	var req job.DrainRequest
	err := s.openDrain(m, &req)
	if err == nil {
		err = req.Validate()
	}
	if err != nil {
		msg := fmt.Sprintf("pcmd: node %s rejects a drain request: %v", s.cfg.Node, job.TrimPrefix(err))
		s.log.Print(msg)
		s.respondSigned(m, job.DrainReply{Node: s.cfg.Node, Error: msg})
		return
	}
	// The jobs' answers take up to the control timeout; other requests go on meanwhile.
	// Signed: anyone can answer a drain's requester first, and the operator must learn what
	// the node did.
	go s.respondSigned(m, s.drain(req))
}

// checkDrained ends a drained node once it runs no rank.
func (s *server) checkDrained() {
	s.mu.Lock()
	draining := s.draining
	s.mu.Unlock()
	if draining && s.ranks.Used() == 0 {
		select {
		case <-s.drained:
		default:
			close(s.drained)
		}
	}
}

// leave is a graceful leave (SIGTERM to pcmd serve): a drain of this node, whose ranks move
// to peers with free slots before it exits. One that cannot place them leaves the node
// serving, as a refused pcmd drain does.
func (s *server) leave() {
	s.log.Printf("asked to leave (SIGTERM): draining; a second SIGTERM stops the ranks at once")
	rep := s.drain(job.DrainRequest{Reason: "SIGTERM to pcmd serve"})
	if rep.Error != "" {
		s.log.Printf("cannot leave gracefully, serving on; a second SIGTERM (or --force) stops the node and its ranks")
		return
	}
	for _, m := range rep.Moves {
		if !m.Accepted {
			s.log.Printf("job %s did not take its ranks %v away (%s): the node waits for them to end; a second SIGTERM stops them", m.Job, m.Ranks, m.Answer)
		}
	}
	s.checkDrained() // a node without ranks leaves at once
}

// openDrain authenticates a drain request into req: signed by the node's own key, or, on a
// node started with --insecure-open, in clear.
func (s *server) openDrain(m *nats.Msg, req *job.DrainRequest) error {
	if _, err := ctlauth.DecodeEnvelope(m.Data); err != nil {
		if !s.cfg.InsecureOpen {
			return errors.New("takes drain requests only signed by its own key (pcmd drain --node-key, the seed of pcmd serve --node-key)")
		}
		return job.Decode(m.Data, req)
	}
	msg, err := s.drains.Verify(m.Subject, m.Data, time.Now())
	if err != nil {
		return err
	}
	return job.Decode(msg.Body, req)
}

// count says "1 rank", "2 ranks".
func count(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}
