package spawner

import (
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/mpios/mpios/comm"
	"github.com/mpios/mpios/internal/ctlauth"
	"github.com/mpios/mpios/internal/job"
	"github.com/mpios/mpios/internal/natsconn"
	"github.com/mpios/mpios/internal/rankproc"
)

// Config configures a Manager.
type Config struct {
	Node string // the node's name (job.ValidateNode)

	// Allow lists glob patterns (filepath.Match, '*' does not cross '/') of the absolute
	// program paths the node may run. Empty: every spawn request is refused.
	Allow []string
	// PinArgs fixes the arguments of some allowed programs (pcmd serve --pin-args):
	// "PROGRAM_GLOB ARG_GLOB...", see checkArgs. A program no pin names runs with the
	// arguments the request gives.
	PinArgs []string
	Slots   int // ranks run at once, 1 to job.MaxSlots

	KillGrace time.Duration // SIGTERM to SIGKILL delay when stopping ranks; > 0
	// MaxLease (> 0) is the longest a job's ranks outlive the last keepalive of its
	// launcher: the lease of a spawn request is capped to it, and a request that names
	// none gets it. Every rank thus holds a lease.
	MaxLease time.Duration

	// Env is the base environment of every rank (KEY=VALUE).
	Env []string
	// NodeEnv returns the variables the node sets for the rank that req starts, once its
	// slot is reserved: same and other count the ranks (started or starting, this one
	// included) of its job and of the other jobs on the node. They override the request's.
	// nil = none.
	NodeEnv func(req job.SpawnRequest, same, other int) []string

	Log *log.Logger // not nil

	// Launchers, if not nil, are the only launchers the node takes spawn and signal requests
	// from: each request must be signed by a listed key (pcmd serve --authorized-launchers).
	// Nil needs Open: unsigned requests are taken from anyone who can publish on the
	// node's subjects (--insecure-open). Signed requests are verified in both modes.
	Launchers *ctlauth.AuthorizedKeys
	Open      bool
	// Curve is the node's curve key (ctlauth.NodeKeys.Curve): it opens the job secrets
	// sealed in spawn requests. Nil: the node refuses sealed secrets.
	Curve nkeys.KeyPair
	// Keys receives the key of every job the node starts a rank of, from the request's
	// secret: one keyring per node, which the piece server verifies the jobs' requests with.
	// A spawn of a job id the keyring knows under another secret is refused. Nil: the
	// manager keeps its own.
	Keys *ctlauth.JobKeyring
	// Signer signs the node's answers to spawn and signal requests and its refusals of
	// replays, for the requester's inbox, with the node's key (the one its key card
	// names): anyone on the NATS server can answer a request first, and a launcher takes
	// only answers its node signed. Nil: answers go in clear (an older launcher's view of
	// a node without a card).
	Signer *ctlauth.KeyWrapper
}

// Validate checks the configuration; errors name the pcmd flag at fault.
func (c Config) Validate() error {
	if c.Slots < 1 || c.Slots > job.MaxSlots {
		return fmt.Errorf("pcmd: %d slots: want 1 to %d", c.Slots, job.MaxSlots)
	}
	for _, p := range c.Allow {
		if !filepath.IsAbs(p) {
			return fmt.Errorf("pcmd: --allow %q: want a pattern of absolute paths", p)
		}
		if _, err := filepath.Match(p, ""); err != nil {
			return fmt.Errorf("pcmd: --allow %q: %w", p, err)
		}
	}
	if _, err := parsePins(c.PinArgs); err != nil {
		return err
	}
	if c.KillGrace <= 0 {
		return errors.New("pcmd: kill grace must be positive")
	}
	if c.Launchers == nil && !c.Open {
		return ErrNoLauncherPolicy
	}
	if c.MaxLease < job.MinInterval || c.MaxLease > job.MaxInterval {
		return fmt.Errorf("pcmd: lease %v: want %v to %v", c.MaxLease, job.MinInterval, job.MaxInterval)
	}
	return nil
}

// Manager runs a node's ranks: it answers spawn and signal requests (job.NodeSpawnSubject,
// job.NodeSignalSubject), starts the ranks it admits, relays their output and exit status,
// and stops them when their job's lease runs out or the node shuts down. Its decisions are
// the Table's.
type Manager struct {
	cfg     Config
	pins    []argPin
	auth    *authorizer
	log     *log.Logger
	nc      *nats.Conn
	spawnc  chan spawnOp
	spawnSb *nats.Subscription
	sigSb   *nats.Subscription
	replSb  *nats.Subscription
	wg      sync.WaitGroup // one per admitted rank, until its exit is published

	mu     sync.Mutex
	table  *Table
	ranks  map[RankKey]*rank
	leases map[string]*nats.Subscription // keepalive subscriptions of the jobs with a lease
	ended  []*rank                       // ranks that ended, oldest first, kept for replays
}

// rank is a rank the node runs, or is starting (proc nil). proc is guarded by Manager.mu.
type rank struct {
	key       RankKey
	out, exit string              // subjects
	signer    string              // the launcher key that started it; its signals need the same; "": unsigned
	relay     *ctlauth.JobChannel // output and exit go under the job key; nil: in clear (no secret)
	proc      rankproc.Process
	pid       int

	sent   atomic.Uint64 // output messages published
	warned atomic.Bool   // a publish error was logged
	ledger ledger        // what it published, for its launcher to ask again (replay.go)
}

type spawnOp struct {
	spec rankproc.Spec
	res  chan<- spawnResult
}

type spawnResult struct {
	proc rankproc.Process
	err  error
}

// Start validates cfg, starts the node's spawning thread and subscribes to the node's
// spawn and signal subjects on nc. Shutdown stops it.
func Start(nc *nats.Conn, cfg Config) (*Manager, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	pins, _ := parsePins(cfg.PinArgs) // checked by Validate
	auth, err := newAuthorizer(cfg, time.Now())
	if err != nil {
		return nil, err
	}
	if cfg.Keys == nil {
		if cfg.Keys, err = ctlauth.NewJobKeyring(ctlauth.Sender{Role: ctlauth.RoleNode, Node: cfg.Node}, 0, time.Now()); err != nil {
			return nil, err
		}
	}
	m := &Manager{
		cfg: cfg, pins: pins, auth: auth, log: cfg.Log, nc: nc, spawnc: make(chan spawnOp),
		table: NewTable(cfg.Node, cfg.Slots, cfg.MaxLease), ranks: map[RankKey]*rank{}, leases: map[string]*nats.Subscription{},
	}
	go m.spawner()
	if m.spawnSb, err = nc.Subscribe(job.NodeSpawnSubject(cfg.Node), m.onSpawn); err == nil {
		m.sigSb, err = nc.Subscribe(job.NodeSignalSubject(cfg.Node), m.onSignal)
	}
	if err == nil {
		m.replSb, err = nc.Subscribe(job.NodeReplaySubject(cfg.Node), m.onReplay)
	}
	if err != nil {
		m.unsubscribe()
		close(m.spawnc)
		return nil, fmt.Errorf("pcmd: subscribe: %w", err)
	}
	return m, nil
}

func (m *Manager) unsubscribe() {
	for _, sb := range []*nats.Subscription{m.spawnSb, m.sigSb, m.replSb} {
		if sb != nil {
			_ = sb.Unsubscribe()
		}
	}
}

// spawner starts every rank from one goroutine locked to its OS thread: Linux delivers a
// rank's Pdeathsig when the thread that forked it exits, and this thread lives as long as
// pcmd (it exits, killing stragglers, only when spawnc is closed at shutdown).
func (m *Manager) spawner() {
	runtime.LockOSThread()
	for op := range m.spawnc {
		p, err := rankproc.Local{}.Start(op.spec)
		op.res <- spawnResult{p, err}
	}
}

// Used is the number of slots in use.
func (m *Manager) Used() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.table.Used()
}

// Ranks lists the started ranks, sorted by job and rank.
func (m *Manager) Ranks() []job.RankInfo {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.table.Ranks()
}

// respond answers msg with v, signed for the requester's inbox by the node's key when the
// node has one (Config.Signer).
func (m *Manager) respond(msg *nats.Msg, v any) {
	if msg.Reply == "" {
		return
	}
	data, err := job.Encode(v)
	if err == nil && m.cfg.Signer != nil {
		data, err = m.cfg.Signer.Wrap(msg.Reply, data, time.Now())
	}
	if err == nil {
		err = msg.Respond(data)
	}
	if err != nil {
		m.log.Printf("reply on %s: %v", msg.Subject, err)
	}
}

func (m *Manager) onSpawn(msg *nats.Msg) {
	if msg.Reply == "" {
		m.log.Printf("ignoring a spawn request without a reply subject")
		return
	}
	m.respond(msg, m.spawn(msg.Subject, msg.Data))
}

// refuse builds a refusal reply and logs it.
func (m *Manager) refuse(code job.SpawnRefusal, format string, args ...any) job.SpawnReply {
	text := fmt.Sprintf("pcmd: node %s ", m.cfg.Node) + fmt.Sprintf(format, args...)
	m.log.Print(text)
	return job.SpawnReply{Node: m.cfg.Node, Refusal: code, Error: text}
}

// spawn handles one spawn request: decode, validate, apply the node's policy, start.
func (m *Manager) spawn(subject string, data []byte) job.SpawnReply {
	in, err := m.auth.open(subject, data, spawnJob, time.Now())
	if err != nil {
		return m.refuse(job.RefuseNotAllowed, "%s", job.TrimPrefix(err).Error())
	}
	var req job.SpawnRequest
	if err := job.Decode(in.body, &req); err != nil {
		return m.refuse(job.RefuseInvalid, "rejects a malformed spawn request: %s", job.TrimPrefix(err).Error())
	}
	if err := req.Validate(); err != nil {
		return m.refuse(job.RefuseInvalid, "rejects an invalid spawn request: %s", job.TrimPrefix(err).Error())
	}
	path, code, why := checkProgram(m.cfg.Allow, req.Path)
	if why != "" {
		return m.refuse(code, "%s", why)
	}
	if why := checkArgs(m.pins, path, req.Args); why != "" {
		return m.refuse(job.RefuseNotAllowed, "%s", why)
	}
	if err := in.launcher.Permits(req.Job, path); err != nil {
		return m.refuse(job.RefuseNotAllowed, "%s", err)
	}
	if i := slices.IndexFunc(req.Env, natsconn.IsCredential); i >= 0 {
		name, _, _ := strings.Cut(req.Env[i], "=")
		return m.refuse(job.RefuseInvalid, "refuses rank %d of job %s: %s carries a NATS credential in clear; it must be sealed for this node",
			req.Rank, req.Job, name)
	}
	secretEnv, err := m.auth.secretEnv(req)
	if err != nil {
		return m.refuse(job.RefuseInvalid, "cannot start rank %d of job %s: %v", req.Rank, req.Job, err)
	}
	credEnv, err := m.auth.sealedEnv(req)
	if err != nil {
		return m.refuse(job.RefuseInvalid, "cannot start rank %d of job %s: %v", req.Rank, req.Job, err)
	}
	if why := m.learnJob(req, in.signer, secretEnv); why != "" {
		return m.refuse(job.RefuseNotAllowed, "%s", why)
	}
	if req.Dir != "" {
		if fi, err := os.Stat(req.Dir); !filepath.IsAbs(req.Dir) || err != nil || !fi.IsDir() {
			return m.refuse(job.RefuseInvalid, "cannot run rank %d of job %s in %s: not an existing absolute directory on this node",
				req.Rank, req.Job, req.Dir)
		}
	}
	if v, ok := Lookup(req.Env, job.EnvJobID); ok && v != req.Job {
		return m.refuse(job.RefuseInvalid, "rejects a spawn request for job %s whose %s is %q", req.Job, job.EnvJobID, v)
	}
	if v, ok := Lookup(req.Env, job.EnvRank); ok && v != strconv.Itoa(req.Rank) {
		return m.refuse(job.RefuseInvalid, "rejects a spawn request for rank %d whose %s is %q", req.Rank, job.EnvRank, v)
	}

	key := RankKey{req.Job, req.Rank}
	relay, err := relayChannel(m.cfg.Node, req, secretEnv)
	if err != nil {
		return m.refuse(job.RefuseInvalid, "cannot start rank %d of job %s: %v", req.Rank, req.Job, err)
	}
	r := &rank{key: key, out: req.Out, exit: req.Exit, signer: in.signer, relay: relay}
	if r.out == "" {
		r.out = job.RankOutSubject(req.Job, req.Rank)
	}
	if r.exit == "" {
		r.exit = job.RankExitSubject(req.Job, req.Rank)
	}
	m.mu.Lock()
	if code, why := m.table.Admit(key, req.Replaces...); code != "" {
		m.mu.Unlock()
		return m.refuse(code, "%s", why)
	}
	m.ranks[key] = r
	m.wg.Add(1)
	same, other := m.table.Counts(req.Job)
	m.mu.Unlock()

	var nodeEnv []string
	if m.cfg.NodeEnv != nil {
		nodeEnv = m.cfg.NodeEnv(req, same, other)
	}
	nodeEnv = append(typedEnv(req, nodeEnv), nodeEnv...)
	nodeEnv = append(nodeEnv, secretEnv...)
	nodeEnv = append(nodeEnv, credEnv...)
	res := make(chan spawnResult, 1)
	m.spawnc <- spawnOp{spec: rankproc.Spec{
		Rank:   req.Rank,
		Path:   path,
		Args:   req.Args,
		Env:    RankEnv(m.cfg.Env, req.Env, nodeEnv),
		Dir:    req.Dir,
		Output: func(st rankproc.Stream, line []byte) { m.publishOutput(r, st, line) },
	}, res: res}
	sr := <-res
	if sr.err != nil {
		m.mu.Lock()
		m.table.Abort(key)
		delete(m.ranks, key)
		m.mu.Unlock()
		m.wg.Done()
		return m.refuse(job.RefuseFailed, "cannot start %s for job %s: %s", path, req.Job, strings.TrimPrefix(sr.err.Error(), "rankproc: "))
	}

	m.mu.Lock()
	r.proc, r.pid = sr.proc, sr.proc.PID()
	watch, stop := m.table.Started(key, r.pid, time.Now(), req.KeepAlive)
	if slices.ContainsFunc(req.Env, func(kv string) bool { return strings.HasPrefix(kv, job.EnvMigrate+"=") }) {
		m.table.MarkSuccessor(key)
	}
	if watch {
		m.watchLease(req.Job)
	}
	m.mu.Unlock()
	if stop != "" {
		// Shutdown began while we were starting it and did not see it.
		_ = r.proc.Signal(syscall.SIGTERM)
	}
	m.log.Printf("job %s rank %d: started %s (pid %d)", req.Job, req.Rank, path, r.pid)
	go m.watch(r)
	return job.SpawnReply{Node: m.cfg.Node, PID: r.pid}
}

// checkProgram applies the allow-list to a requested path. It returns the cleaned path to
// run, or a refusal code and message. Only the cleaned absolute path is matched, so
// "a/../../bin/sh" cannot slip through a pattern; symbolic links are not resolved, so
// patterns must name directories that untrusted users cannot write to.
func checkProgram(allow []string, p string) (string, job.SpawnRefusal, string) {
	if !filepath.IsAbs(p) {
		return "", job.RefuseNotAllowed, fmt.Sprintf("refuses to run %s: not an absolute path", p)
	}
	clean := filepath.Clean(p)
	shown := clean
	if clean != p {
		shown = fmt.Sprintf("%s (given as %s)", clean, p)
	}
	if len(allow) == 0 {
		return "", job.RefuseNotAllowed, fmt.Sprintf("refuses to run %s: no --allow given, this node runs no program", shown)
	}
	if !Allowed(allow, clean) {
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

// publishOutput relays one output line, split into pieces that fit a NATS message.
func (m *Manager) publishOutput(r *rank, st rankproc.Stream, line []byte) {
	limit := max(int(m.nc.MaxPayload())-1024, 1024)
	for {
		piece, partial := line, false
		if len(piece) > limit {
			piece, partial = line[:limit], true
		}
		// Counted even if publishing fails, so the receiver can tell that it lost some.
		seq := r.sent.Add(1)
		o := job.RankOutput{Stream: int(st), Seq: seq, Line: piece, Partial: partial}
		r.ledger.add(o)
		data, err := r.encode(r.out, o)
		if err == nil {
			err = m.nc.Publish(r.out, data)
		}
		if err != nil && r.warned.CompareAndSwap(false, true) {
			m.log.Printf("job %s rank %d: output is being lost: %v", r.key.Job, r.key.Rank, err)
		}
		if !partial {
			return
		}
		line = line[limit:]
	}
}

// watch publishes the rank's exit, after its last output line, and frees its slot.
func (m *Manager) watch(r *rank) {
	defer m.wg.Done()
	ex, err := r.proc.Wait()
	comm.RemoveJobSegments(r.key.Job) // shared-memory rings the rank left if it crashed
	m.mu.Lock()
	reason := m.table.Reason(r.key)
	m.mu.Unlock()
	msg := job.RankExit{Code: ex.Code, Signal: int(ex.Signal), Sent: r.sent.Load(), Reason: reason}
	if err != nil {
		msg.Error = strings.TrimPrefix(err.Error(), "rankproc: ")
		m.log.Printf("job %s rank %d (pid %d): %s", r.key.Job, r.key.Rank, r.pid, msg.Error)
	} else {
		m.log.Printf("job %s rank %d (pid %d) %s", r.key.Job, r.key.Rank, r.pid, ex)
	}
	// Kept before it is published: a launcher that misses it asks once the node's
	// heartbeats no longer list the rank.
	r.ledger.ended(msg, time.Now())
	// Published before the slot is freed: a heartbeat that no longer lists the rank then
	// follows its exit message.
	data, err := r.encode(r.exit, msg)
	if err == nil {
		err = m.nc.Publish(r.exit, data)
	}
	if err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
		m.log.Printf("publish on %s: %v", r.exit, err)
	}
	m.mu.Lock()
	delete(m.ranks, r.key)
	m.keepEnded(r, time.Now())
	if _, unwatch := m.table.Exited(r.key); unwatch {
		if sb := m.leases[r.key.Job]; sb != nil {
			_ = sb.Unsubscribe()
			delete(m.leases, r.key.Job)
		}
	}
	m.mu.Unlock()
}

// watchLease listens for the keepalives of jobID's launcher. m.mu must be held.
func (m *Manager) watchLease(jobID string) {
	sb, err := m.nc.Subscribe(job.KeepAliveSubject(jobID), func(msg *nats.Msg) {
		if !m.keepAliveOK(jobID, msg) {
			return
		}
		m.mu.Lock()
		m.table.KeepAlive(jobID, time.Now())
		m.mu.Unlock()
	})
	if err != nil {
		m.log.Printf("job %s: cannot watch keepalives, its ranks will be stopped when its lease runs out: %v", jobID, err)
		return
	}
	m.leases[jobID] = sb
}

// keepAliveOK reports whether a keepalive of job jobID renews its lease: it must verify
// under the job's key when the node knows it, so that nobody else can keep the ranks of a
// dead launcher holding the node's slots. A job started without a secret renews with
// anything.
func (m *Manager) keepAliveOK(jobID string, msg *nats.Msg) bool {
	if _, known := m.cfg.Keys.Owner(jobID); !known {
		return true
	}
	// The body says nothing (a job.KeepAlive, or empty): what counts is that it verifies.
	_, _, err := m.cfg.Keys.Open(jobID, msg.Subject, msg.Data, time.Now())
	return err == nil
}

// CheckLeases stops the ranks of jobs whose launcher went silent: it died, and nobody
// would ever stop them otherwise. pcmd calls it at every heartbeat. silence is as for
// Table.ExpireBy.
func (m *Manager) CheckLeases(now time.Time, silence func(now, last time.Time) time.Duration) {
	m.mu.Lock()
	expired := m.table.ExpireBy(now, silence)
	var victims []*rank
	for _, e := range expired {
		m.log.Printf("%s, stopping its ranks", e.Reason)
		victims = append(victims, m.lookup(e.Ranks)...)
	}
	m.mu.Unlock()
	if len(victims) == 0 {
		return
	}
	m.signalAll(victims, syscall.SIGTERM)
	time.AfterFunc(m.cfg.KillGrace, func() {
		m.mu.Lock()
		var late []*rank
		for _, r := range victims {
			if m.ranks[r.key] == r {
				late = append(late, r)
			}
		}
		m.mu.Unlock()
		m.signalAll(late, syscall.SIGKILL) // Signal after exit is a no-op
	})
}

// lookup returns the processes of the started ranks keys. m.mu must be held.
func (m *Manager) lookup(keys []RankKey) []*rank {
	var out []*rank
	for _, k := range keys {
		if r := m.ranks[k]; r != nil && r.proc != nil {
			out = append(out, r)
		}
	}
	return out
}

func (m *Manager) signalAll(ranks []*rank, sig syscall.Signal) {
	for _, r := range ranks {
		if err := r.proc.Signal(sig); err != nil {
			m.log.Printf("job %s rank %d: %v: %v", r.key.Job, r.key.Rank, sig, err)
		}
	}
}

// Drain closes the node to new ranks and leaves its running ranks alone: spawn requests
// are refused (job.RefuseStopping) from now on.
func (m *Manager) Drain() {
	m.mu.Lock()
	m.table.Drain()
	m.mu.Unlock()
}

// Reopen undoes Drain: spawn requests are admitted again (unless the node shuts down).
func (m *Manager) Reopen() {
	m.mu.Lock()
	m.table.Reopen()
	m.mu.Unlock()
}

// Shutdown stops accepting spawns and stops every rank: SIGTERM, then SIGKILL after the
// kill grace. Each rank's exit is still published. It returns once the ranks are gone.
func (m *Manager) Shutdown() {
	m.unsubscribe()
	m.mu.Lock()
	victims := m.lookup(m.table.Shutdown())
	m.mu.Unlock()
	if len(victims) > 0 {
		m.log.Printf("stopping %d ranks", len(victims))
	}
	m.signalAll(victims, syscall.SIGTERM)
	done := make(chan struct{})
	go func() { m.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(m.cfg.KillGrace):
		m.mu.Lock()
		victims = m.lookup(m.table.Running())
		m.mu.Unlock()
		m.log.Printf("%d ranks did not stop within %v of SIGTERM, killing them", len(victims), m.cfg.KillGrace)
		m.signalAll(victims, syscall.SIGKILL)
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			// Never close spawnc under a spawn that may still send on it; the ranks die
			// with us anyway (Pdeathsig).
			m.log.Printf("some ranks did not exit after SIGKILL")
			return
		}
	}
	close(m.spawnc)
}

func (m *Manager) onSignal(msg *nats.Msg) {
	var req job.SignalRequest
	reply := func(rep job.SignalReply) {
		if rep.Error != "" {
			m.log.Print(rep.Error)
		}
		m.respond(msg, rep)
	}
	in, err := m.auth.open(msg.Subject, msg.Data, signalJob, time.Now())
	if err != nil {
		reply(job.SignalReply{Error: fmt.Sprintf("pcmd: node %s %s", m.cfg.Node, job.TrimPrefix(err).Error())})
		return
	}
	if err := job.Decode(in.body, &req); err != nil {
		reply(job.SignalReply{Error: fmt.Sprintf("pcmd: node %s rejects a malformed signal request: %s", m.cfg.Node, job.TrimPrefix(err).Error())})
		return
	}
	if err := req.Validate(); err != nil {
		reply(job.SignalReply{Error: fmt.Sprintf("pcmd: node %s rejects an invalid signal request: %s", m.cfg.Node, job.TrimPrefix(err).Error())})
		return
	}
	m.mu.Lock()
	var proc rankproc.Process
	signer := in.signer
	if r := m.ranks[RankKey{req.Job, req.Rank}]; r != nil {
		proc, signer = r.proc, r.signer
	}
	m.mu.Unlock()
	if signer != in.signer {
		// Only the launcher that started a rank may signal it.
		reply(job.SignalReply{Error: fmt.Sprintf("pcmd: node %s refuses a signal for rank %d of job %s not signed by the launcher that started it",
			m.cfg.Node, req.Rank, req.Job)})
		return
	}
	if proc == nil {
		m.respond(msg, job.SignalReply{NotFound: true,
			Error: fmt.Sprintf("pcmd: node %s does not run rank %d of job %s", m.cfg.Node, req.Rank, req.Job)})
		return
	}
	sig := syscall.Signal(req.Signal)
	m.log.Printf("job %s rank %d: sending %v", req.Job, req.Rank, sig)
	if err := proc.Signal(sig); err != nil {
		reply(job.SignalReply{Error: fmt.Sprintf("pcmd: node %s: %v", m.cfg.Node, strings.TrimPrefix(err.Error(), "launch: "))})
		return
	}
	m.respond(msg, job.SignalReply{})
}

// encode encodes v for publication on subject, under the job key when the rank has one.
func (r *rank) encode(subject string, v any) ([]byte, error) {
	if r.relay == nil {
		return job.Encode(v)
	}
	return r.relay.Encode(subject, v, time.Now())
}
