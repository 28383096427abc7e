package pcmd

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mpios/mpios/comm"
	"github.com/mpios/mpios/internal/job"
	"github.com/mpios/mpios/internal/launch"
)

type rankKey struct {
	job  string
	rank int
}

// rank is a rank the node runs, or is starting (proc nil). Fields after key are guarded by
// server.mu unless noted.
type rank struct {
	key       rankKey
	out, exit string // subjects
	proc      launch.Process
	pid       int
	started   time.Time
	leased    bool   // counted in its job's lease
	reason    string // why pcmd stopped it, if it did

	sent   atomic.Uint64 // output messages published
	warned atomic.Bool   // a publish error was logged
}

// lease tracks a job's keepalives (job.SpawnRequest.KeepAlive).
type lease struct {
	ttl     time.Duration
	last    time.Time
	sub     *nats.Subscription
	ranks   int
	expired bool
}

type spawnOp struct {
	spec launch.Spec
	res  chan<- spawnResult
}

type spawnResult struct {
	proc launch.Process
	err  error
}

// spawner starts every rank from one goroutine locked to its OS thread: Linux delivers a
// rank's Pdeathsig when the thread that forked it exits, and this thread lives as long as
// pcmd (it exits, killing stragglers, only when spawnc is closed at shutdown).
func (s *server) spawner() {
	runtime.LockOSThread()
	for op := range s.spawnc {
		p, err := launch.Local{}.Start(op.spec)
		op.res <- spawnResult{p, err}
	}
}

func (s *server) onSpawn(m *nats.Msg) {
	if m.Reply == "" {
		s.log.Printf("ignoring a spawn request without a reply subject")
		return
	}
	s.respond(m, s.spawn(m.Data))
}

// refuse builds a refusal reply and logs it.
func (s *server) refuse(code job.SpawnRefusal, format string, args ...any) job.SpawnReply {
	msg := fmt.Sprintf("pcmd: node %s ", s.cfg.Node) + fmt.Sprintf(format, args...)
	s.log.Print(msg)
	return job.SpawnReply{Node: s.cfg.Node, Refusal: code, Error: msg}
}

// spawn handles one spawn request: decode, validate, apply the node's policy, start.
func (s *server) spawn(data []byte) job.SpawnReply {
	var req job.SpawnRequest
	if err := job.Decode(data, &req); err != nil {
		return s.refuse(job.RefuseInvalid, "rejects a malformed spawn request: %v", trimJob(err))
	}
	if err := req.Validate(); err != nil {
		return s.refuse(job.RefuseInvalid, "rejects an invalid spawn request: %v", trimJob(err))
	}
	path, code, why := s.checkProgram(req.Path)
	if why != "" {
		return s.refuse(code, "%s", why)
	}
	if req.Dir != "" {
		if fi, err := os.Stat(req.Dir); !filepath.IsAbs(req.Dir) || err != nil || !fi.IsDir() {
			return s.refuse(job.RefuseInvalid, "cannot run rank %d of job %s in %s: not an existing absolute directory on this node",
				req.Rank, req.Job, req.Dir)
		}
	}
	if v, ok := lookupEnv(req.Env, job.EnvJobID); ok && v != req.Job {
		return s.refuse(job.RefuseInvalid, "rejects a spawn request for job %s whose %s is %q", req.Job, job.EnvJobID, v)
	}
	if v, ok := lookupEnv(req.Env, job.EnvRank); ok && v != strconv.Itoa(req.Rank) {
		return s.refuse(job.RefuseInvalid, "rejects a spawn request for rank %d whose %s is %q", req.Rank, job.EnvRank, v)
	}

	key := rankKey{req.Job, req.Rank}
	r := &rank{key: key, out: req.Out, exit: req.Exit}
	if r.out == "" {
		r.out = job.RankOutSubject(req.Job, req.Rank)
	}
	if r.exit == "" {
		r.exit = job.RankExitSubject(req.Job, req.Rank)
	}
	s.mu.Lock()
	switch old := s.ranks[key]; {
	case s.stopping:
		s.mu.Unlock()
		return s.refuse(job.RefuseStopping, "is shutting down")
	case old != nil:
		s.mu.Unlock()
		return s.refuse(job.RefuseDuplicate, "already runs rank %d of job %s (pid %d)", req.Rank, req.Job, old.pid)
	case len(s.ranks) >= s.cfg.Slots:
		used := len(s.ranks)
		s.mu.Unlock()
		return s.refuse(job.RefuseNoSlot, "has no free slot for rank %d of job %s (%d of %d in use)", req.Rank, req.Job, used, s.cfg.Slots)
	}
	s.ranks[key] = r // reserves the slot and the (job, rank) while starting
	s.wg.Add(1)
	s.mu.Unlock()

	res := make(chan spawnResult, 1)
	s.spawnc <- spawnOp{spec: launch.Spec{
		Rank:   req.Rank,
		Path:   path,
		Args:   req.Args,
		Env:    s.rankEnv(req),
		Dir:    req.Dir,
		Output: func(st launch.Stream, line []byte) { s.publishOutput(r, st, line) },
	}, res: res}
	sr := <-res
	if sr.err != nil {
		s.mu.Lock()
		delete(s.ranks, key)
		s.mu.Unlock()
		s.wg.Done()
		msg := strings.TrimPrefix(sr.err.Error(), "launch: ")
		return s.refuse(job.RefuseFailed, "cannot start %s for job %s: %v", path, req.Job, msg)
	}

	s.mu.Lock()
	r.proc, r.pid, r.started = sr.proc, sr.proc.PID(), time.Now().UTC()
	if req.KeepAlive > 0 {
		s.addLease(req.Job, req.KeepAlive)
		r.leased = true
	}
	stopping := s.stopping
	if stopping {
		r.reason = "pcmd on node " + s.cfg.Node + " is shutting down"
	}
	s.mu.Unlock()
	if stopping {
		// Shutdown began while we were starting it and did not see it.
		_ = r.proc.Signal(syscall.SIGTERM)
	}
	s.log.Printf("job %s rank %d: started %s (pid %d)", req.Job, req.Rank, path, r.pid)
	go s.watch(r)
	return job.SpawnReply{Node: s.cfg.Node, PID: r.pid}
}

// checkProgram applies --allow to a requested path. It returns the cleaned path to run, or a
// refusal code and message. Only the cleaned absolute path is matched, so "a/../../bin/sh"
// cannot slip through a pattern; symbolic links are not resolved, so patterns must name
// directories that untrusted users cannot write to.
func (s *server) checkProgram(p string) (string, job.SpawnRefusal, string) {
	if !filepath.IsAbs(p) {
		return "", job.RefuseNotAllowed, fmt.Sprintf("refuses to run %s: not an absolute path", p)
	}
	clean := filepath.Clean(p)
	shown := clean
	if clean != p {
		shown = fmt.Sprintf("%s (given as %s)", clean, p)
	}
	if len(s.cfg.Allow) == 0 {
		return "", job.RefuseNotAllowed, fmt.Sprintf("refuses to run %s: no --allow given, this node runs no program", shown)
	}
	if !Allowed(s.cfg.Allow, clean) {
		return "", job.RefuseNotAllowed, fmt.Sprintf("refuses to run %s: not allowed by --allow", shown)
	}
	fi, err := os.Stat(clean)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return "", job.RefuseFailed, fmt.Sprintf("cannot run %s: no such file on this node "+
			"(on a cluster the program must exist at the same path on every node)", shown)
	case err != nil:
		return "", job.RefuseFailed, fmt.Sprintf("cannot run %s: %v", shown, err)
	case !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0:
		return "", job.RefuseFailed, fmt.Sprintf("cannot run %s: not an executable file", shown)
	}
	return clean, "", ""
}

// Allowed reports whether the absolute path matches one of the glob patterns (as
// filepath.Match; '*' does not match '/'). The path is cleaned first; relative paths never
// match.
func Allowed(patterns []string, path string) bool {
	if !filepath.IsAbs(path) {
		return false
	}
	path = filepath.Clean(path)
	for _, p := range patterns {
		if ok, err := filepath.Match(p, path); err == nil && ok {
			return true
		}
	}
	return false
}

// rankEnv is pcmd's own environment plus the job's MPIOS_* variables, with the node's own
// settings last so a request cannot override them.
func (s *server) rankEnv(req job.SpawnRequest) []string {
	env := slices.Clone(s.baseEnv)
	for _, kv := range req.Env {
		name, _, _ := strings.Cut(kv, "=")
		if name == job.EnvBind || name == job.EnvNode || s.store != "" && name == job.EnvCkptDir {
			continue
		}
		env = append(env, kv)
	}
	env = append(env, job.EnvBind+"="+s.cfg.Advertise, job.EnvNode+"="+s.cfg.Node, s.nodeRanksEnv(req))
	if s.store != "" {
		env = append(env, job.EnvCkptDir+"="+s.store)
	}
	return env
}

func lookupEnv(env []string, name string) (string, bool) {
	v, found := "", false
	for _, kv := range env {
		if k, val, ok := strings.Cut(kv, "="); ok && k == name {
			v, found = val, true
		}
	}
	return v, found
}

// publishOutput relays one output line, split into pieces that fit a NATS message.
func (s *server) publishOutput(r *rank, st launch.Stream, line []byte) {
	limit := max(int(s.nc.MaxPayload())-1024, 1024)
	for {
		piece, partial := line, false
		if len(piece) > limit {
			piece, partial = line[:limit], true
		}
		// Counted even if publishing fails, so the receiver can tell that it lost some.
		seq := r.sent.Add(1)
		data, err := job.Encode(job.RankOutput{Stream: int(st), Seq: seq, Line: piece, Partial: partial})
		if err == nil {
			err = s.nc.Publish(r.out, data)
		}
		if err != nil && r.warned.CompareAndSwap(false, true) {
			s.log.Printf("job %s rank %d: output is being lost: %v", r.key.job, r.key.rank, err)
		}
		if !partial {
			return
		}
		line = line[limit:]
	}
}

// watch publishes the rank's exit, after its last output line, and frees its slot.
func (s *server) watch(r *rank) {
	defer s.wg.Done()
	ex, err := r.proc.Wait()
	comm.RemoveJobSegments(r.key.job) // shared-memory rings the rank left if it crashed
	s.mu.Lock()
	reason := r.reason
	s.mu.Unlock()
	msg := job.RankExit{Code: ex.Code, Signal: int(ex.Signal), Sent: r.sent.Load(), Reason: reason}
	if err != nil {
		msg.Error = strings.TrimPrefix(err.Error(), "launch: ")
		s.log.Printf("job %s rank %d (pid %d): %s", r.key.job, r.key.rank, r.pid, msg.Error)
	} else {
		s.log.Printf("job %s rank %d (pid %d) %s", r.key.job, r.key.rank, r.pid, ex)
	}
	// Published before the slot is freed: a heartbeat that no longer lists the rank then
	// follows its exit message.
	s.publish(r.exit, msg)
	s.mu.Lock()
	delete(s.ranks, r.key)
	if r.leased {
		s.releaseLease(r.key.job)
	}
	s.mu.Unlock()
}

// addLease counts a rank in its job's lease, subscribing to the job's keepalives for the
// first one. s.mu must be held.
func (s *server) addLease(jobID string, ttl time.Duration) {
	l := s.leases[jobID]
	if l == nil {
		l = &lease{last: time.Now()}
		sub, err := s.nc.Subscribe(job.KeepAliveSubject(jobID), func(*nats.Msg) {
			s.mu.Lock()
			l.last = time.Now()
			s.mu.Unlock()
		})
		if err != nil {
			// Without the subscription the lease would expire although mpirun is alive.
			s.log.Printf("job %s: cannot watch keepalives, its ranks will not be stopped if mpirun dies: %v", jobID, err)
			return
		}
		l.sub = sub
		s.leases[jobID] = l
	}
	l.ranks++
	l.ttl = max(l.ttl, ttl)
}

// releaseLease uncounts a rank; s.mu must be held.
func (s *server) releaseLease(jobID string) {
	l := s.leases[jobID]
	if l == nil {
		return
	}
	if l.ranks--; l.ranks <= 0 {
		_ = l.sub.Unsubscribe()
		delete(s.leases, jobID)
	}
}

// checkLeases stops the ranks of jobs whose launcher went silent: mpirun died, and nobody
// would ever stop them otherwise.
func (s *server) checkLeases() {
	now := time.Now()
	var victims []*rank
	s.mu.Lock()
	for id, l := range s.leases {
		if l.expired || now.Sub(l.last) <= l.ttl {
			continue
		}
		l.expired = true
		reason := fmt.Sprintf("no keepalive from the launcher of job %s for %v", id, now.Sub(l.last).Round(time.Second))
		s.log.Printf("%s, stopping its ranks", reason)
		victims = append(victims, s.running(func(r *rank) bool { return r.key.job == id }, reason)...)
	}
	s.mu.Unlock()
	if len(victims) == 0 {
		return
	}
	s.signalAll(victims, syscall.SIGTERM)
	time.AfterFunc(s.cfg.KillGrace, func() {
		s.mu.Lock()
		var late []*rank
		for _, r := range victims {
			if s.ranks[r.key] == r {
				late = append(late, r)
			}
		}
		s.mu.Unlock()
		s.signalAll(late, syscall.SIGKILL) // Signal after exit is a no-op
	})
}

func (s *server) onSignal(m *nats.Msg) {
	var req job.SignalRequest
	reply := func(rep job.SignalReply) {
		if rep.Error != "" {
			s.log.Print(rep.Error)
		}
		s.respond(m, rep)
	}
	if err := job.Decode(m.Data, &req); err != nil {
		reply(job.SignalReply{Error: fmt.Sprintf("pcmd: node %s rejects a malformed signal request: %v", s.cfg.Node, trimJob(err))})
		return
	}
	if err := req.Validate(); err != nil {
		reply(job.SignalReply{Error: fmt.Sprintf("pcmd: node %s rejects an invalid signal request: %v", s.cfg.Node, trimJob(err))})
		return
	}
	s.mu.Lock()
	var proc launch.Process
	if r := s.ranks[rankKey{req.Job, req.Rank}]; r != nil {
		proc = r.proc
	}
	s.mu.Unlock()
	if proc == nil {
		s.respond(m, job.SignalReply{NotFound: true,
			Error: fmt.Sprintf("pcmd: node %s does not run rank %d of job %s", s.cfg.Node, req.Rank, req.Job)})
		return
	}
	sig := syscall.Signal(req.Signal)
	s.log.Printf("job %s rank %d: sending %v", req.Job, req.Rank, sig)
	if err := proc.Signal(sig); err != nil {
		reply(job.SignalReply{Error: fmt.Sprintf("pcmd: node %s: %v", s.cfg.Node, strings.TrimPrefix(err.Error(), "launch: "))})
		return
	}
	s.respond(m, job.SignalReply{})
}
