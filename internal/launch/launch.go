// Package launch runs an mpios job: it provides the control plane (an embedded or external
// NATS server), starts the ranks through a Starter, forwards their output line by line,
// answers the rendezvous (internal/job), and stops the whole job when one rank fails, a rank
// aborts, the job times out or mpirun is interrupted.
package launch

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mpios/mpios/internal/job"
	"github.com/mpios/mpios/internal/natsconn"
)

// Defaults for Config fields left zero.
const (
	DefaultBind      = "127.0.0.1"
	DefaultKillGrace = 3 * time.Second
)

const rendezvousSlack = 2 * time.Second

// Exit statuses of failed jobs that have no rank status to report.
const (
	StatusFailed   = 1   // rendezvous failed, a rank could not be started, job cancelled
	StatusTimedOut = 124 // --timeout expired (as timeout(1))
)

// Config describes one job. Zero values select the documented defaults.
type Config struct {
	NP      int      // number of ranks, >= 1
	Program string   // executable path, command in $PATH, or Go main package directory
	Args    []string // passed to every rank verbatim

	JobID   string // "" generates one
	NATSURL string // existing NATS server (credentials may be embedded); "" starts an embedded one
	Bind    string // MPIOS_BIND for the ranks; "" = DefaultBind

	TagOutput         bool          // prefix every output line with "[rank] "
	Timeout           time.Duration // stop the job after this long; 0 = never
	RendezvousTimeout time.Duration // 0 = job.DefaultRendezvousTimeout
	KillGrace         time.Duration // SIGTERM to SIGKILL delay when stopping; 0 = DefaultKillGrace

	Env    []string  // base environment of the ranks; nil = os.Environ()
	Dir    string    // working directory of the ranks; "" = current
	Stdout io.Writer // nil = os.Stdout
	Stderr io.Writer // nil = os.Stderr; also receives mpirun's own "mpirun: " messages

	// Signals, typically fed by signal.Notify, stops the job: the first signal terminates
	// the ranks gracefully, a second one kills them at once.
	Signals <-chan os.Signal

	// ProfileOut, if set, is a file that receives every profile the ranks publish
	// (job.ProfileSubject), one JSON object per line.
	ProfileOut string

	Starter    Starter // nil = Local{}
	RuntimeDir string  // where the job Record is written; "" = RuntimeDir()

	// NATSAuth authenticates mpirun to NATSURL (credentials, TLS); its URL and Name are
	// not used. The ranks get the same options through their environment (see Env).
	NATSAuth natsconn.Options
}

// FailureKind says why a job failed.
type FailureKind int

// Kinds of job failure.
const (
	RankFailed       FailureKind = iota + 1 // a rank exited non-zero or was killed
	RankAborted                             // a rank published a job.Abort
	TimedOut                                // Config.Timeout expired
	Interrupted                             // a signal arrived on Config.Signals
	RendezvousFailed                        // the ranks did not all say hello in time
	StartFailed                             // a rank could not be started
	Cancelled                               // the context passed to Run was cancelled
)

// ExitError reports that the job ran but did not succeed. Its Reason has already been written
// to Config.Stderr when Run returns it.
type ExitError struct {
	Kind   FailureKind
	Rank   int // the rank at fault, or -1
	Code   int // exit status for mpirun, never 0
	Reason string
}

func (e *ExitError) Error() string { return "launch: " + e.Reason }

// Run runs a job to completion. It returns nil if every rank exited with status 0, an
// *ExitError if the job failed once started, and another error if it could not be started
// (bad Config, program not found, *BuildError, NATS unreachable).
func Run(ctx context.Context, cfg Config) error {
	if err := cfg.setDefaults(); err != nil {
		return err
	}
	prog, err := resolveProgram(cfg.Program)
	if err != nil {
		return err
	}
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		return fmt.Errorf("launch: secret: %w", err)
	}

	r := &runner{
		cfg:    cfg,
		stdout: newLineWriter(cfg.Stdout),
		stderr: newLineWriter(cfg.Stderr),
	}
	natsURL := cfg.NATSURL
	if natsURL == "" {
		srv, err := startEmbeddedNATS("127.0.0.1", cfg.JobID)
		if err != nil {
			return err
		}
		defer srv.shutdown()
		natsURL = srv.url
	}
	r.stderr.logf("job %s nats %s", cfg.JobID, RedactURL(natsURL))

	if err := r.connect(natsURL); err != nil {
		return err
	}
	defer r.nc.Close()
	if cfg.ProfileOut != "" {
		stop, err := r.recordProfiles(cfg.ProfileOut)
		if err != nil {
			return err
		}
		defer stop()
	}

	recPath, err := writeRecord(cfg.RuntimeDir, Record{
		JobID: cfg.JobID, NATSURL: natsURL, PID: os.Getpid(), Started: time.Now().UTC(),
		NP: cfg.NP, Program: cfg.Program,
	})
	switch {
	case errors.Is(err, ErrJobIDInUse):
		return err
	case err != nil:
		// The record only lets other tools find the job; the job itself does not need it.
		r.stderr.logf("warning: %v (other tools will not find this job)", trimLaunch(err))
	default:
		defer func() {
			if err := removeRecord(recPath); err != nil {
				r.stderr.logf("%v", trimLaunch(err))
			}
		}()
	}

	if prog.buildDir != "" {
		tmp, err := os.MkdirTemp("", "mpirun-build-")
		if err != nil {
			return fmt.Errorf("launch: build dir: %w", err)
		}
		defer os.RemoveAll(tmp)
		if err := r.build(ctx, &prog, tmp); err != nil {
			return err
		}
	}

	env := job.Env{
		JobID: cfg.JobID, Size: cfg.NP, NATSURL: natsURL, Secret: secret,
		// Ranks wait a little longer than mpirun so that mpirun, which knows which ranks
		// are missing, is the one to report a rendezvous timeout.
		Bind: cfg.Bind, Timeout: cfg.RendezvousTimeout + rendezvousSlack,
	}
	return r.run(ctx, prog.path, env)
}

func (c *Config) setDefaults() error {
	if c.NP < 1 {
		return fmt.Errorf("launch: number of ranks is %d, want at least 1", c.NP)
	}
	if c.Program == "" {
		return errors.New("launch: no program given")
	}
	if c.JobID == "" {
		suffix, err := randomHex(3)
		if err != nil {
			return err
		}
		c.JobID = time.Now().Format("0102-150405") + "-" + suffix
	} else if err := job.ValidateID(c.JobID); err != nil {
		return fmt.Errorf("launch: %w", err)
	}
	if c.Timeout < 0 || c.RendezvousTimeout < 0 || c.KillGrace < 0 {
		return errors.New("launch: timeouts must not be negative")
	}
	if c.Bind == "" {
		c.Bind = DefaultBind
	}
	if c.RendezvousTimeout == 0 {
		c.RendezvousTimeout = job.DefaultRendezvousTimeout
	}
	if c.KillGrace == 0 {
		c.KillGrace = DefaultKillGrace
	}
	if c.Env == nil {
		c.Env = os.Environ()
	}
	if c.Stdout == nil {
		c.Stdout = os.Stdout
	}
	if c.Stderr == nil {
		c.Stderr = os.Stderr
	}
	if c.Starter == nil {
		c.Starter = Local{}
	}
	if c.RuntimeDir == "" {
		c.RuntimeDir = RuntimeDir()
	}
	return nil
}

// rankState is the launcher's view of one rank.
type rankState struct {
	proc     Process
	running  bool
	hello    *nats.Msg // pending rendezvous request
	helloMsg job.Hello
	early    bool // exited with status 0 before saying hello

	incarnation int        // migrations so far
	next        *successor // migration in progress
}

type rankExit struct {
	rank int
	proc Process
	exit Exit
	err  error
}

type runner struct {
	exits          chan rankExit // rank exits, in the order they were observed
	lostMu         sync.Mutex
	firstLost      int // the rank named by the first lost-peer report, or -1
	cfg            Config
	stdout, stderr *lineWriter
	nc             *nats.Conn
	helloCh        chan *nats.Msg
	abortCh        chan *nats.Msg

	ranks     []rankState
	running   int
	hellos    int
	early     int
	rdvDone   bool
	stopping  bool
	failure   *ExitError
	graceC    <-chan time.Time
	rdvTimer  *time.Timer
	rdvC      <-chan time.Time
	signalled int

	rc reconfState
}

func (r *runner) connect(url string) error {
	id := r.cfg.JobID
	auth, err := r.cfg.NATSAuth.AuthOptions()
	if err != nil {
		return err
	}
	nc, err := nats.Connect(url, append(auth,
		nats.Name("mpirun "+id),
		nats.Timeout(5*time.Second),
		// The job must survive a restart of an external server; the ranks reconnect too.
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250*time.Millisecond),
		nats.ReconnectJitter(250*time.Millisecond, time.Second),
		nats.NoCallbacksAfterClientClose(),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				r.stderr.logf("lost connection to NATS: %v", err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			r.stderr.logf("reconnected to NATS at %s", RedactURL(nc.ConnectedUrl()))
		}),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			r.stderr.logf("NATS: %v", err)
		}),
	)...)
	if err != nil {
		return fmt.Errorf("launch: connect to NATS at %s: %w", RedactURL(url), err)
	}
	r.nc = nc
	// Channel subscriptions: the reader goroutine queues messages in arrival order, which
	// lets the event loop see an Abort published just before a rank's exit (see onExit).
	r.helloCh = make(chan *nats.Msg, 4*r.cfg.NP+64)
	r.abortCh = make(chan *nats.Msg, 64)
	if _, err := nc.ChanSubscribe(job.HelloSubject(id), r.helloCh); err != nil {
		nc.Close()
		return fmt.Errorf("launch: subscribe to %s: %w", job.HelloSubject(id), err)
	}
	if _, err := nc.ChanSubscribe(job.AbortSubject(id), r.abortCh); err != nil {
		nc.Close()
		return fmt.Errorf("launch: subscribe to %s: %w", job.AbortSubject(id), err)
	}
	// Reports of lost peers: a rank publishes one (and flushes) before its calls waiting on the
	// dead peer fail, so by the time it exits because of that, the report is here.
	r.firstLost = -1
	if _, err := nc.Subscribe(job.LostSubject(id), func(m *nats.Msg) {
		var l job.Lost
		if err := job.Decode(m.Data, &l); err != nil || l.Rank < 0 || l.Rank >= r.cfg.NP {
			return
		}
		r.lostMu.Lock()
		if r.firstLost < 0 {
			r.firstLost = l.Rank
		}
		r.lostMu.Unlock()
	}); err != nil {
		nc.Close()
		return fmt.Errorf("launch: subscribe to %s: %w", job.LostSubject(id), err)
	}
	if err := r.subscribeReconf(); err != nil {
		nc.Close()
		return err
	}
	// The server must know the subscriptions before any rank can say hello.
	if err := nc.FlushTimeout(5 * time.Second); err != nil {
		nc.Close()
		return fmt.Errorf("launch: NATS flush: %w", err)
	}
	return nil
}

// build compiles the program package, giving up if a stop signal arrives meanwhile.
func (r *runner) build(ctx context.Context, prog *program, tmp string) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- prog.build(ctx, r.cfg.Program, tmp) }()
	select {
	case err := <-done:
		return err
	case sig := <-r.cfg.Signals:
		cancel()
		<-done
		return r.fail(&ExitError{Kind: Interrupted, Rank: -1, Code: signalStatus(sig),
			Reason: fmt.Sprintf("received %v while building %s", sig, r.cfg.Program)}, nil)
	}
}

func signalStatus(sig os.Signal) int {
	if s, ok := sig.(syscall.Signal); ok {
		return 128 + int(s)
	}
	return StatusFailed
}

// run starts the ranks and runs the event loop until every started rank has exited.
func (r *runner) run(ctx context.Context, path string, env job.Env) error {
	// Pdeathsig fires when the thread that forked a rank exits; keep this goroutine on its
	// thread so that only happens when mpirun itself dies.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()

	n := r.cfg.NP
	r.ranks = make([]rankState, n)
	r.rc.path, r.rc.env = path, env
	exits := make(chan rankExit, 2*n+8)
	r.exits = exits
	for i := range n {
		env.Rank = i
		proc, err := r.cfg.Starter.Start(r.spec(i, path, env))
		if err != nil {
			r.fail(&ExitError{Kind: StartFailed, Rank: i, Code: StatusFailed,
				Reason: fmt.Sprintf("cannot start rank %d: %v", i, trimLaunch(err))},
				&job.Event{Kind: job.EventAbort, Rank: i, Reason: "rank failed to start"})
			break
		}
		r.ranks[i] = rankState{proc: proc, running: true}
		r.running++
		go func() {
			ex, err := proc.Wait()
			exits <- rankExit{rank: i, proc: proc, exit: ex, err: err}
		}()
	}

	var timeoutC <-chan time.Time
	if r.cfg.Timeout > 0 && !r.stopping {
		t := time.NewTimer(r.cfg.Timeout)
		defer t.Stop()
		timeoutC = t.C
	}
	ctxDone := ctx.Done()
	for r.running > 0 {
		select {
		case ex := <-exits:
			r.onExit(ex)
		case m := <-r.helloCh:
			r.onHello(m)
		case m := <-r.abortCh:
			r.onAbort(m)
		case m := <-r.rc.ctlCh:
			r.onControl(m)
		case m := <-r.rc.migrateCh:
			r.onMigrateRequest(m)
		case m := <-r.rc.reportCh:
			r.onMigrateReport(m)
		case m := <-r.rc.getCh:
			r.onReconfGet(m)
		case m := <-r.rc.infoCh:
			r.onJobInfo(m)
		case f := <-r.rc.doneCh:
			f()
		case sig := <-r.cfg.Signals:
			r.onSignal(sig)
		case <-ctxDone:
			ctxDone = nil
			r.fail(&ExitError{Kind: Cancelled, Rank: -1, Code: StatusFailed,
				Reason: "job cancelled: " + context.Cause(ctx).Error()},
				&job.Event{Kind: job.EventAbort, Rank: -1, Reason: "job cancelled"})
		case <-timeoutC:
			timeoutC = nil
			reason := "job timed out after " + r.cfg.Timeout.String()
			r.fail(&ExitError{Kind: TimedOut, Rank: -1, Code: StatusTimedOut, Reason: reason},
				&job.Event{Kind: job.EventAbort, Rank: -1, Reason: reason})
		case <-r.rdvC:
			r.rdvC = nil
			r.onRendezvousTimeout()
		case <-r.graceC:
			r.graceC = nil
			r.killAll(true)
		}
	}
	if r.rdvTimer != nil {
		r.rdvTimer.Stop()
	}
	if r.failure != nil {
		return r.failure
	}
	return nil
}

func (r *runner) spec(rank int, path string, env job.Env) Spec {
	prefix := ""
	if r.cfg.TagOutput {
		prefix = "[" + strconv.Itoa(rank) + "] "
	}
	return Spec{
		Rank: rank,
		Path: path,
		Args: r.cfg.Args,
		// Appended last so they override stale MPIOS_* variables of a surrounding job.
		Env: append(append(withGOMAXPROCS(r.cfg.Env, r.cfg.NP), env.Environ()...), r.nodeRanksEnv(rank)),
		Dir: r.cfg.Dir,
		Output: func(s Stream, line []byte) {
			if s == Stderr {
				r.stderr.writeLine(prefix, line)
			} else {
				r.stdout.writeLine(prefix, line)
			}
		},
	}
}

// withGOMAXPROCS gives each of np ranks sharing this machine its share of the cores, unless
// the user chose GOMAXPROCS: a rank's Go runtime otherwise assumes the whole machine, and
// hand-offs between its threads, competing with the other ranks for the same cores, add
// microseconds to every message.
func withGOMAXPROCS(env []string, np int) []string {
	for _, kv := range env {
		if strings.HasPrefix(kv, "GOMAXPROCS=") {
			return append([]string(nil), env...)
		}
	}
	return append(append([]string(nil), env...), "GOMAXPROCS="+strconv.Itoa(max(1, runtime.NumCPU()/np)))
}

func (r *runner) describe(rank int) string {
	p := r.ranks[rank].proc
	if h := p.Host(); h != "" {
		return fmt.Sprintf("rank %d (pid %d on %s)", rank, p.PID(), h)
	}
	return fmt.Sprintf("rank %d (pid %d)", rank, p.PID())
}

func (r *runner) onExit(ex rankExit) {
	st := &r.ranks[ex.rank]
	r.running--
	if ex.proc != st.proc {
		r.onSideExit(ex)
		return
	}
	if st.next != nil && st.next.proc != nil && ex.err == nil && ex.exit.Success() {
		// A migrating rank's process ends cleanly only after handing over: its report
		// may still be on its way.
		st.running = false // so the exited process is not kept as a side process
		r.commitMigration(ex.rank)
		return
	}
	st.running = false
	if r.stopping {
		return
	}
	if ex.err != nil {
		reason := fmt.Sprintf("%s: %v", r.describe(ex.rank), trimLaunch(ex.err))
		r.fail(&ExitError{Kind: RankFailed, Rank: ex.rank, Code: StatusFailed, Reason: reason},
			&job.Event{Kind: job.EventRankFailed, Rank: ex.rank, Reason: reason})
		return
	}
	if !ex.exit.Success() {
		ex = r.culprit(ex)
		// mpi.Abort publishes, flushes and exits: the Abort may still be in flight. A round
		// trip to the server guarantees it has been queued on abortCh if it was sent.
		if err := r.nc.FlushTimeout(time.Second); err == nil {
			select {
			case m := <-r.abortCh:
				if r.onAbort(m) {
					return
				}
			default:
			}
		}
		reason := r.describe(ex.rank) + " " + ex.exit.String()
		r.fail(&ExitError{Kind: RankFailed, Rank: ex.rank, Code: ex.exit.Status(), Reason: reason},
			&job.Event{Kind: job.EventRankFailed, Rank: ex.rank, Reason: reason})
		return
	}
	if r.rdvDone {
		return
	}
	// A clean exit before the rendezvous is fine for programs that never call mpi.Init, but
	// if any rank has said hello this one's peers would wait for it in vain.
	if st.hello != nil || r.hellos > 0 {
		reason := r.describe(ex.rank) + " exited before the rendezvous completed"
		r.fail(&ExitError{Kind: RendezvousFailed, Rank: ex.rank, Code: StatusFailed, Reason: reason},
			&job.Event{Kind: job.EventRankFailed, Rank: ex.rank, Reason: reason})
		return
	}
	st.early = true
	r.early++
}

// failureWindow is how long mpirun waits after a rank fails for other failures to arrive:
// peers of a dead rank notice its death within microseconds and may exit (reporting the
// failure they saw) before mpirun has even read the first exit status.
const failureWindow = 150 * time.Millisecond

// culprit collects the exits that arrive within failureWindow of first and returns the failed
// one that exited earliest; the others are reported as consequences.
func (r *runner) culprit(first rankExit) rankExit {
	failed := []rankExit{first}
	timer := time.NewTimer(failureWindow)
	defer timer.Stop()
collect:
	for r.running > 0 {
		select {
		case ex := <-r.exits:
			st := &r.ranks[ex.rank]
			r.running--
			if ex.proc != st.proc {
				r.onSideExit(ex)
				continue
			}
			st.running = false
			if ex.err != nil || !ex.exit.Success() {
				failed = append(failed, ex)
			}
		case <-timer.C:
			break collect
		}
	}
	// The first lost-peer report names the rank that died first: a rank that exits because it
	// lost a peer has reported that loss (and flushed it) before it exits, so the reports of
	// its own loss come later. Without a report, the earliest exit wins.
	r.lostMu.Lock()
	rank := func(ex rankExit) int {
		score := 0
		if ex.rank == r.firstLost {
			score -= 2
		}
		if ex.err != nil {
			score++
		}
		return score
	}
	best := 0
	for i, ex := range failed {
		if s, b := rank(ex), rank(failed[best]); s < b || (s == b && ex.exit.At.Before(failed[best].exit.At)) {
			best = i
		}
	}
	r.lostMu.Unlock()
	for i, ex := range failed {
		if i != best {
			r.stderr.logf("%s %s (after %s failed)", r.describe(ex.rank), ex.exit.String(), r.describe(failed[best].rank))
		}
	}
	return failed[best]
}

func (r *runner) onHello(m *nats.Msg) {
	var h job.Hello
	if err := job.Decode(m.Data, &h); err != nil {
		r.stderr.logf("ignoring malformed hello: %v", trimJob(err))
		r.reject(m, "malformed hello")
		return
	}
	if err := h.Validate(r.cfg.NP); err != nil {
		r.stderr.logf("ignoring invalid hello: %v", trimJob(err))
		r.reject(m, trimJob(err).Error())
		return
	}
	if r.stopping {
		r.reject(m, "the job is stopping")
		return
	}
	if r.rdvDone {
		r.stderr.logf("ignoring hello from rank %d (pid %d): the rendezvous is complete", h.Rank, h.PID)
		r.reject(m, "the rendezvous is already complete")
		return
	}
	if m.Reply == "" {
		r.stderr.logf("ignoring hello from rank %d (pid %d): no reply subject", h.Rank, h.PID)
		return
	}
	st := &r.ranks[h.Rank]
	if st.hello != nil {
		if st.helloMsg.PID == h.PID && st.helloMsg.Host == h.Host {
			st.hello, st.helloMsg = m, h // a retried request: answer the latest one
			return
		}
		r.stderr.logf("ignoring duplicate hello for rank %d from pid %d on %q (pid %d on %q said hello first)",
			h.Rank, h.PID, h.Host, st.helloMsg.PID, st.helloMsg.Host)
		r.reject(m, fmt.Sprintf("duplicate hello for rank %d", h.Rank))
		return
	}
	st.hello, st.helloMsg = m, h
	r.hellos++
	if r.early > 0 {
		var early []string
		for i := range r.ranks {
			if r.ranks[i].early {
				early = append(early, strconv.Itoa(i))
			}
		}
		reason := fmt.Sprintf("rank %s exited before the rendezvous completed", strings.Join(early, ", "))
		r.fail(&ExitError{Kind: RendezvousFailed, Rank: -1, Code: StatusFailed, Reason: reason},
			&job.Event{Kind: job.EventAbort, Rank: -1, Reason: reason})
		return
	}
	if r.hellos == 1 {
		// Measured from the first hello, as a rank measures its own wait from its Init: a
		// program that never calls Init is not a rendezvous failure.
		r.rdvTimer = time.NewTimer(r.cfg.RendezvousTimeout)
		r.rdvC = r.rdvTimer.C
	}
	if r.hellos < r.cfg.NP {
		return
	}
	r.rdvDone = true
	r.rdvTimer.Stop()
	r.rdvC = nil
	table := job.Table{Addrs: make([]string, r.cfg.NP)}
	for i := range r.ranks {
		table.Addrs[i] = r.ranks[i].helloMsg.Addr
	}
	r.respondAll(table)
}

// respondAll answers every pending hello with t.
func (r *runner) respondAll(t job.Table) {
	data, err := job.Encode(t)
	if err != nil {
		r.stderr.logf("encode address table: %v", err)
		return
	}
	for i := range r.ranks {
		st := &r.ranks[i]
		if st.hello == nil {
			continue
		}
		if err := st.hello.Respond(data); err != nil {
			r.stderr.logf("answer hello of rank %d: %v", i, err)
		}
		st.hello = nil
	}
}

// reject answers a hello that will not take part in the rendezvous.
func (r *runner) reject(m *nats.Msg, reason string) {
	if m.Reply == "" {
		return
	}
	if data, err := job.Encode(job.Table{Error: "mpirun: " + reason}); err == nil {
		_ = m.Respond(data)
	}
}

func (r *runner) onRendezvousTimeout() {
	if r.rdvDone || r.stopping {
		return
	}
	var missing []string
	for i := range r.ranks {
		if r.ranks[i].hello == nil {
			missing = append(missing, strconv.Itoa(i))
		}
	}
	reason := fmt.Sprintf("rendezvous timed out after %v: no hello from rank %s",
		r.cfg.RendezvousTimeout, strings.Join(missing, ", "))
	r.fail(&ExitError{Kind: RendezvousFailed, Rank: -1, Code: StatusFailed, Reason: reason},
		&job.Event{Kind: job.EventAbort, Rank: -1, Reason: reason})
}

// onAbort handles a job.Abort and reports whether it stopped the job.
func (r *runner) onAbort(m *nats.Msg) bool {
	var a job.Abort
	if err := job.Decode(m.Data, &a); err != nil {
		r.stderr.logf("ignoring malformed abort: %v", trimJob(err))
		return false
	}
	if a.Rank < 0 || a.Rank >= r.cfg.NP {
		r.stderr.logf("ignoring abort from rank %d: outside [0,%d)", a.Rank, r.cfg.NP)
		return false
	}
	if r.stopping {
		return false
	}
	// The OS keeps only the low 8 bits; an abort must never look like success.
	code := a.Code & 0xff
	if code == 0 {
		code = StatusFailed
	}
	reason := fmt.Sprintf("%s called abort with code %d", r.describe(a.Rank), a.Code)
	if a.Message != "" {
		reason += ": " + a.Message
	}
	r.fail(&ExitError{Kind: RankAborted, Rank: a.Rank, Code: code, Reason: reason},
		&job.Event{Kind: job.EventAbort, Rank: a.Rank, Reason: reason})
	return true
}

func (r *runner) onSignal(sig os.Signal) {
	r.signalled++
	if r.signalled > 1 {
		r.stderr.logf("received %v again, killing the job", sig)
		r.killAll(false)
		return
	}
	r.fail(&ExitError{Kind: Interrupted, Rank: -1, Code: signalStatus(sig),
		Reason: fmt.Sprintf("received %v, stopping the job", sig)},
		&job.Event{Kind: job.EventAbort, Rank: -1, Reason: fmt.Sprintf("mpirun received %v", sig)})
}

// fail records the first failure, reports it and stops the job. It returns the recorded
// failure so setup code can return it directly.
func (r *runner) fail(e *ExitError, ev *job.Event) *ExitError {
	if r.failure != nil {
		return r.failure
	}
	r.failure = e
	r.stderr.logf("%s", e.Reason)
	if r.nc != nil {
		if !r.rdvDone {
			// Ranks blocked in the rendezvous learn why instead of waiting for SIGTERM.
			r.respondAll(job.Table{Error: "mpirun: " + e.Reason})
		}
		if ev != nil {
			r.publishEvent(*ev)
		}
	}
	r.stop()
	return e
}

func (r *runner) publishEvent(ev job.Event) {
	data, err := job.Encode(ev)
	if err == nil {
		err = r.nc.Publish(job.EventSubject(r.cfg.JobID), data)
	}
	if err == nil {
		// Let peers see the event before the SIGTERM that follows.
		err = r.nc.FlushTimeout(500 * time.Millisecond)
	}
	if err != nil {
		r.stderr.logf("publish %s event: %v", ev.Kind, err)
	}
}

// stop asks every running rank to terminate and arms the kill timer.
func (r *runner) stop() {
	if r.stopping {
		return
	}
	r.stopping = true
	for i := range r.ranks {
		st := &r.ranks[i]
		if st.running {
			if err := st.proc.Signal(syscall.SIGTERM); err != nil {
				r.stderr.logf("%v", trimLaunch(err))
			}
		}
	}
	for p := range r.rc.side {
		_ = p.Signal(syscall.SIGTERM)
	}
	r.graceC = time.After(r.cfg.KillGrace)
}

// killAll SIGKILLs the ranks still running; late says the grace period expired.
func (r *runner) killAll(late bool) {
	for i := range r.ranks {
		st := &r.ranks[i]
		if !st.running {
			continue
		}
		if late {
			r.stderr.logf("%s did not stop within %v of SIGTERM, killing it", r.describe(i), r.cfg.KillGrace)
		}
		if err := st.proc.Signal(syscall.SIGKILL); err != nil {
			r.stderr.logf("%v", trimLaunch(err))
		}
	}
	for p := range r.rc.side {
		_ = p.Signal(syscall.SIGKILL)
	}
}

// trimLaunch drops the package prefix from err's message for mpirun's own messages.
func trimLaunch(err error) error {
	if s, ok := strings.CutPrefix(err.Error(), "launch: "); ok {
		return errors.New(s)
	}
	return err
}

func trimJob(err error) error {
	if s, ok := strings.CutPrefix(err.Error(), "job: "); ok {
		return errors.New(s)
	}
	return err
}
