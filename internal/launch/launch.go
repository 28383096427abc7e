// Package launch runs an mpios job: it is the loop around the job's supervisor.Machine. It
// provides the control plane (an embedded NATS server, internal/natsembed, or an external
// one), builds the program if it is a package directory (internal/gobuild), writes the job
// record (internal/jobrecord), starts processes through a rankproc.Starter (this machine, or
// pcmd nodes through internal/nodeclient), forwards their output line by line, and turns
// their exits and the job's NATS requests into the Machine's events. Every decision — the
// rendezvous, which failure ends the job, reconfigurations — is the Machine's.
package launch

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mpios/mpios/comm"
	"github.com/mpios/mpios/internal/ctlauth"
	"github.com/mpios/mpios/internal/ctlplane"
	"github.com/mpios/mpios/internal/gobuild"
	"github.com/mpios/mpios/internal/job"
	"github.com/mpios/mpios/internal/jobrecord"
	"github.com/mpios/mpios/internal/natsconn"
	"github.com/mpios/mpios/internal/natsembed"
	"github.com/mpios/mpios/internal/nodeclient"
	"github.com/mpios/mpios/internal/profilewriter"
	"github.com/mpios/mpios/internal/rankproc"
	"github.com/mpios/mpios/internal/supervisor"
)

// Defaults for Config fields left zero.
const (
	DefaultBind      = "127.0.0.1"
	DefaultKillGrace = 3 * time.Second
	// DefaultHangTimeout is ULFM's: a failure is declared after 10 s of silence.
	DefaultHangTimeout = 10 * time.Second
)

const rendezvousSlack = 2 * time.Second

// Exit statuses of failed jobs that have no rank status to report.
const (
	StatusFailed   = supervisor.StatusFailed   // rendezvous failed, a rank could not be started, job cancelled
	StatusTimedOut = supervisor.StatusTimedOut // --timeout expired (as timeout(1))
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

	// NoRecover ends a checkpointing job at its first failure instead of recovering it
	// (supervisor.Config.Recover); MaxRecoveries bounds the recoveries (0 =
	// supervisor.DefaultMaxRecoveries).
	NoRecover     bool
	MaxRecoveries int
	// HangTimeout declares failed a rank that sent no liveness beat for this long; 0 =
	// DefaultHangTimeout, < 0 turns hang detection off.
	HangTimeout time.Duration
	// MigrationTimeout aborts an accepted migration the ranks have not begun this long
	// after it was accepted; 0 = supervisor.DefaultMigrationTimeout.
	MigrationTimeout time.Duration

	Starter    rankproc.Starter // nil = rankproc.Local{}
	RuntimeDir string           // where the job's jobrecord.Record is written; "" = jobrecord.RuntimeDir()

	// NATSAuth authenticates mpirun to NATSURL (credentials, TLS); its URL and Name are
	// not used. The ranks get the same options through their environment (see Env).
	NATSAuth natsconn.Options
}

// FailureKind says why a job failed.
type FailureKind = supervisor.FailureKind

// Kinds of job failure.
const (
	RankFailed       = supervisor.RankFailed       // a rank exited non-zero or was killed
	RankAborted      = supervisor.RankAborted      // a rank published a job.Abort
	TimedOut         = supervisor.TimedOut         // Config.Timeout expired
	Interrupted      = supervisor.Interrupted      // a signal arrived on Config.Signals
	RendezvousFailed = supervisor.RendezvousFailed // the ranks did not all say hello in time
	StartFailed      = supervisor.StartFailed      // a rank could not be started
	Cancelled        = supervisor.Cancelled        // the context passed to Run was cancelled
)

// ExitError reports that the job ran but did not succeed. Its Reason has already been written
// to Config.Stderr when Run returns it.
type ExitError struct {
	Kind   FailureKind
	Rank   int // the rank at fault, or -1
	Code   int // exit status for mpirun, never 0
	Reason string
}

// Error returns the reason, prefixed with "launch: ".
func (e *ExitError) Error() string { return "launch: " + e.Reason }

// Run runs a job to completion. It returns nil if every rank exited with status 0, an
// *ExitError if the job failed once started, and another error if it could not be started
// (bad Config, program not found, *gobuild.BuildError, NATS unreachable).
func Run(ctx context.Context, cfg Config) error {
	if err := cfg.setDefaults(); err != nil {
		return err
	}
	prog, err := gobuild.Resolve(cfg.Program)
	if err != nil {
		return fmt.Errorf("launch: %w", err)
	}
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		return fmt.Errorf("launch: secret: %w", err)
	}

	defer comm.RemoveJobSegments(cfg.JobID) // shared-memory rings of ranks that crashed
	r := &runner{
		cfg:    cfg,
		stdout: newLineWriter(cfg.Stdout),
		stderr: newLineWriter(cfg.Stderr),
		cp:     newControlPlane(),
	}
	if r.auth, err = ctlauth.NewJobChannel(cfg.JobID, secret, ctlauth.Sender{Role: ctlauth.RoleLauncher}, time.Now()); err != nil {
		return fmt.Errorf("launch: %w", err)
	}
	if ks, ok := cfg.Starter.(nodeKeyStarter); ok {
		if r.nodeCtl, err = ctlauth.NewKeyVerifier(ks.NodeKeys(), ctlauth.ReplayOptions{NotBefore: time.Now().Add(-time.Second)}); err != nil {
			return fmt.Errorf("launch: %w", err)
		}
	}
	natsURL := cfg.NATSURL
	if natsURL == "" {
		srv, err := natsembed.Start("127.0.0.1", "mpirun-"+cfg.JobID)
		if err != nil {
			return err
		}
		defer srv.Shutdown()
		natsURL = srv.URL()
	}
	r.stderr.logf("job %s nats %s", cfg.JobID, natsconn.RedactURL(natsURL))

	if err := r.connect(natsURL); err != nil {
		return err
	}
	defer r.nc.Close()
	if cfg.ProfileOut != "" {
		pw, err := profilewriter.Start(r.nc, job.ProfileSubject(cfg.JobID), cfg.ProfileOut, func(subject string, data []byte) ([]byte, error) {
			body, _, err := r.auth.Open(subject, data, time.Now())
			return body, err
		}, r.stderr.logf)
		if err != nil {
			return fmt.Errorf("launch: --profile-out: %w", err)
		}
		defer pw.Stop(r.nc)
	}

	recPath, err := jobrecord.Write(cfg.RuntimeDir, jobrecord.Record{
		JobID: cfg.JobID, NATSURL: natsURL, PID: os.Getpid(), Started: time.Now().UTC(),
		NP: cfg.NP, Program: cfg.Program, Secret: hex.EncodeToString(secret),
	})
	switch {
	case errors.Is(err, jobrecord.ErrJobIDInUse):
		return fmt.Errorf("launch: %w", trimLaunch(err))
	case err != nil:
		// The record only lets other tools find the job; the job itself does not need it.
		r.stderr.logf("warning: %v (other tools will not find this job)", trimLaunch(err))
	default:
		defer func() {
			if err := jobrecord.Remove(recPath); err != nil {
				r.stderr.logf("%v", trimLaunch(err))
			}
		}()
	}

	r.writeLaunch(secret)

	if prog.PackageDir != "" {
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
	return r.run(ctx, prog.Path, env)
}

func (c *Config) setDefaults() error {
	if c.NP < 1 {
		return fmt.Errorf("launch: number of ranks is %d, want at least 1", c.NP)
	}
	if c.Program == "" {
		return errors.New("launch: no program given")
	}
	if c.JobID == "" {
		b := make([]byte, 3)
		if _, err := rand.Read(b); err != nil {
			return fmt.Errorf("launch: random: %w", err)
		}
		suffix := hex.EncodeToString(b)
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
	if c.HangTimeout == 0 {
		c.HangTimeout = DefaultHangTimeout
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
		c.Starter = rankproc.Local{}
	}
	if c.RuntimeDir == "" {
		c.RuntimeDir = jobrecord.RuntimeDir()
	}
	return nil
}

// runner is the loop around the job's supervisor.Machine: it owns the NATS connection and
// the processes, turns what happens to them into Events, and carries out the Machine's
// Actions. It decides nothing itself.
type runner struct {
	cfg    Config
	stall  stallWatch // the loop's own wake-ups
	stdout *lineWriter
	stderr *lineWriter
	nc     *nats.Conn
	msgs   chan *nats.Msg      // every job subject the Machine takes, in arrival order
	auth   *ctlauth.JobChannel // the job-key subjects (jobauth.go)
	// nodeCtl verifies the control requests the job's nodes sign; nil when the ranks do not
	// run on pcmd nodes.
	nodeCtl *ctlauth.KeyVerifier

	sup   *supervisor.Machine
	path  string  // the program
	env   job.Env // the ranks' job environment
	procs map[supervisor.ProcID]rankproc.Process
	exits chan supervisor.Exited
	// Work done off the loop (node checks, successor starts) hands its result back here; the
	// function runs on the loop and returns the Event for the Machine.
	inbox chan func() supervisor.Event
	cp    *controlPlane // the state of the NATS connection, told to the Machine
}

func (r *runner) connect(url string) error {
	id := r.cfg.JobID
	auth, err := r.cfg.NATSAuth.AuthOptions()
	if err != nil {
		return err
	}
	// Reconnect forever: the job survives a restart of an external server; the handlers below
	// replace ctlplane's to tell the Machine when the control plane is down.
	nc, err := nats.Connect(url, append(append(auth, ctlplane.Options(nil, nil)...),
		nats.Name("mpirun "+id),
		nats.Timeout(5*time.Second),
		nats.NoCallbacksAfterClientClose(),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			r.cp.set(false)
			if err != nil {
				r.stderr.logf("lost connection to NATS: %v", err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			r.cp.set(true)
			r.stderr.logf("reconnected to NATS at %s", natsconn.RedactURL(nc.ConnectedUrl()))
		}),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			r.stderr.logf("NATS: %v", err)
		}),
	)...)
	if err != nil {
		return fmt.Errorf("launch: connect to NATS at %s: %w", natsconn.RedactURL(url), err)
	}
	r.nc = nc
	// One channel for every subject the supervisor takes: the reader goroutine queues them in
	// arrival order, so a rank's Abort or Lost report, flushed before it exits, is queued
	// before the Machine decides on that exit (see supervisor.Flush).
	r.msgs = make(chan *nats.Msg, 16*r.cfg.NP+256)
	for _, subj := range []string{
		job.HelloSubject(id), job.AbortSubject(id), job.LostSubject(id), job.ControlSubject(id),
		job.MigrateSubject(id), job.MigratedSubject(id), job.ReconfGetSubject(id), job.JobInfoSubject(id),
		job.ResizeSubject(id), job.ResizedSubject(id), job.MalleableSubject(id),
		job.AliveSubject(id), job.CommittedSubject(id), job.RestoredSubject(id),
	} {
		if _, err := nc.ChanSubscribe(subj, r.msgs); err != nil {
			nc.Close()
			return fmt.Errorf("launch: subscribe to %s: %w", subj, err)
		}
	}
	// The server must know the subscriptions before any rank can say hello.
	if err := nc.FlushTimeout(5 * time.Second); err != nil {
		nc.Close()
		return fmt.Errorf("launch: NATS flush: %w", err)
	}
	return nil
}

// build compiles the program package, giving up if a stop signal arrives meanwhile.
func (r *runner) build(ctx context.Context, prog *gobuild.Program, tmp string) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- prog.Build(ctx, r.cfg.Program, tmp) }()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("launch: %w", err)
		}
		return nil
	case sig := <-r.cfg.Signals:
		cancel()
		<-done
		e := &ExitError{Kind: Interrupted, Rank: -1, Code: signalStatus(sig),
			Reason: fmt.Sprintf("received %v while building %s", sig, r.cfg.Program)}
		r.stderr.logf("%s", e.Reason)
		return e
	}
}

func signalStatus(sig os.Signal) int {
	if s, ok := sig.(syscall.Signal); ok {
		return 128 + int(s)
	}
	return StatusFailed
}

// run runs the job's Machine until every process it started has exited.
func (r *runner) run(ctx context.Context, path string, env job.Env) error {
	// Pdeathsig fires when the thread that forked a rank exits; keep this goroutine on its
	// thread so that only happens when mpirun itself dies.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()

	_, migrations := r.cfg.Starter.(rankproc.NodeStarter)
	checkpoints := rankproc.EnvValue(r.cfg.Env, job.EnvCkptEvery) != ""
	sup, err := supervisor.New(supervisor.Config{
		JobID: r.cfg.JobID, NP: r.cfg.NP, RendezvousTimeout: r.cfg.RendezvousTimeout,
		KillGrace: r.cfg.KillGrace, Timeout: r.cfg.Timeout, Migrations: migrations,
		Checkpoints: checkpoints, Policy: rankproc.EnvValue(r.cfg.Env, job.EnvPolicy),
		Recover: checkpoints && !r.cfg.NoRecover, MaxRecoveries: r.cfg.MaxRecoveries,
		HangTimeout: max(r.cfg.HangTimeout, 0), Slots: slotsOf(r.cfg.Starter),
		MigrationTimeout: r.cfg.MigrationTimeout,
	})
	if err != nil {
		return fmt.Errorf("launch: %w", err)
	}
	r.sup, r.path, r.env = sup, path, env
	r.procs = make(map[supervisor.ProcID]rankproc.Process)
	r.exits = make(chan supervisor.Exited, 2*r.cfg.NP+8)
	r.inbox = make(chan func() supervisor.Event, 16)

	var nodeC <-chan nodeclient.NodeEvent
	if w, ok := r.cfg.Starter.(nodeWatcher); ok {
		nodeC = w.Events()
	}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	awake := time.NewTicker(stallTick) // so that a long gap between wake-ups is a stall
	defer awake.Stop()
	ctxDone := ctx.Done()
	r.step(supervisor.Launch{})
	for !r.sup.Done() {
		var deadline <-chan time.Time
		if at, ok := r.sup.NextDeadline(); ok {
			timer.Reset(time.Until(at))
			deadline = timer.C
		} else {
			timer.Stop()
		}
		select {
		case ex := <-r.exits:
			r.step(ex)
		case m := <-r.msgs:
			r.step(r.event(m))
		case f := <-r.inbox:
			r.step(f())
		case ev := <-nodeC:
			if g := ev.Gone; g != nil {
				r.step(supervisor.NodeGone{Node: g.Node, Reason: g.Reason})
			} else if j := ev.Joined; j != nil {
				r.step(supervisor.NodeJoined{Node: j.Node, Free: j.Free, Why: j.Reason})
			} else if d := ev.Draining; d != nil {
				r.step(supervisor.NodeDraining{Node: d.Node, Draining: d.Draining})
			}
		case <-r.cp.changed:
			r.step(r.cp.event())
		case sig := <-r.cfg.Signals:
			s, ok := sig.(syscall.Signal)
			if !ok {
				s = syscall.SIGTERM
			}
			r.step(supervisor.Signal{Sig: s})
		case <-awake.C:
			r.step(supervisor.Tick{})
		case <-ctxDone:
			ctxDone = nil
			r.step(supervisor.Cancel{Cause: context.Cause(ctx).Error()})
		case <-deadline:
			// Messages already here happened before the deadline: the Machine sees them first.
			for drained := false; !drained; {
				select {
				case m := <-r.msgs:
					r.step(r.event(m))
				default:
					drained = true
				}
			}
			r.step(supervisor.Tick{})
		}
	}
	if f := r.sup.Failure(); f != nil {
		return &ExitError{Kind: f.Kind, Rank: f.Rank, Code: f.Code, Reason: f.Reason}
	}
	return nil
}

// errNoNodes answers a request for a node when the ranks run on this machine.
var errNoNodes = errors.New("the ranks run on this machine, not on pcmd nodes")

// nodeWatcher is a Starter that reports the nodes it lost and those that joined
// (nodeclient.Remote).
type nodeWatcher interface {
	Events() <-chan nodeclient.NodeEvent
}

// event turns a message on one of the job's subjects into the Machine's Event.
func (r *runner) event(m *nats.Msg) supervisor.Event {
	id := r.cfg.JobID
	switch m.Subject {
	case job.HelloSubject(id):
		if body, ok := r.open(m); ok {
			return supervisor.Hello{Reply: m.Reply, Data: body}
		}
	case job.AbortSubject(id):
		if body, ok := r.open(m); ok {
			return supervisor.Abort{Data: body}
		}
	case job.LostSubject(id):
		if body, ok := r.open(m); ok {
			return supervisor.Lost{Data: body}
		}
	case job.ControlSubject(id):
		from, body, err := r.openControl(m)
		if err != nil {
			r.refuseControl(m, err)
			break
		}
		return supervisor.Control{Reply: m.Reply, Data: body, From: from}
	case job.MigrateSubject(id):
		if body, ok := r.open(m); ok {
			return supervisor.SuccessorRequest{Reply: m.Reply, Data: body}
		}
	case job.MigratedSubject(id):
		if body, ok := r.open(m); ok {
			return supervisor.MigrateReport{Data: body}
		}
	case job.ReconfGetSubject(id):
		return supervisor.LogRequest{Reply: m.Reply}
	case job.JobInfoSubject(id):
		return supervisor.InfoRequest{Reply: m.Reply}
	case job.ResizeSubject(id):
		if body, ok := r.open(m); ok {
			return supervisor.ResizeHello{Reply: m.Reply, Data: body}
		}
	case job.ResizedSubject(id):
		if body, ok := r.open(m); ok {
			return supervisor.ResizeReport{Data: body}
		}
	case job.MalleableSubject(id):
		if body, ok := r.open(m); ok {
			return supervisor.Malleable{Data: body}
		}
	case job.AliveSubject(id):
		if body, ok := r.open(m); ok {
			return supervisor.Alive{Data: body}
		}
	case job.CommittedSubject(id):
		if body, ok := r.open(m); ok {
			return supervisor.Committed{Data: body}
		}
	case job.RestoredSubject(id):
		if body, ok := r.open(m); ok {
			return supervisor.Restored{Data: body}
		}
	}
	return supervisor.Tick{} // not subscribed: nothing happened
}

// step feeds ev to the Machine and carries out its actions, and those of the events the
// actions produce at once (a rank started or could not be).
func (r *runner) step(ev supervisor.Event) {
	if gap, ok := r.stall.woke(time.Now()); ok {
		// Before what happened meanwhile: the ranks' silence was mpirun's own.
		r.stepOne(supervisor.Stalled{For: gap})
	}
	r.stepOne(ev)
}

// stepOne feeds ev to the Machine and carries out the actions that follow.
func (r *runner) stepOne(ev supervisor.Event) {
	queue := r.sup.Step(time.Now(), ev)
	for len(queue) > 0 {
		a := queue[0]
		queue = queue[1:]
		if next := r.do(a); next != nil {
			queue = append(queue, r.sup.Step(time.Now(), next)...)
		}
	}
}

// do carries out one action; it returns the Event it produced at once, if any.
func (r *runner) do(a supervisor.Action) supervisor.Event {
	switch a := a.(type) {
	case supervisor.StartRank:
		return r.start(a)
	case supervisor.CheckNode:
		ns, ok := r.cfg.Starter.(rankproc.NodeStarter)
		if !ok { // the Machine migrates only with one
			return supervisor.NodeChecked{Check: a.Check, Err: errNoNodes}
		}
		go func() {
			err := ns.CheckNode(a.Node, a.Leaving)
			if err != nil {
				err = trimLaunch(err)
			}
			r.inbox <- func() supervisor.Event { return supervisor.NodeChecked{Check: a.Check, Err: err} }
		}()
	case supervisor.SignalProc:
		if p := r.procs[a.Proc]; p != nil {
			signal := func() {
				if err := p.Signal(a.Sig); err != nil {
					r.stderr.logf("%v", trimLaunch(err))
				}
			}
			if p.Host() == "" {
				signal()
			} else {
				// A remote signal is a request to the node's pcmd, which a frozen pcmd
				// answers only with a timeout: the loop must not wait for it, or a recovery
				// would wait that long before the node is found gone and the job restarts.
				go signal()
			}
		}
	case supervisor.Reply:
		if data, err := r.encodeReply(a.To, a.Msg); err == nil {
			_ = r.nc.Publish(a.To, data) // the requester times out and says so
		} else {
			r.stderr.logf("encode reply %T: %v", a.Msg, err)
		}
	case supervisor.Publish:
		data, err := r.encode(a.Subject, a.Msg)
		if err == nil {
			err = r.nc.Publish(a.Subject, data)
		}
		if err == nil && a.Flush {
			err = r.nc.FlushTimeout(500 * time.Millisecond)
		}
		if err != nil {
			r.stderr.logf("publish on %s: %v", a.Subject, err)
		}
	case supervisor.Flush:
		_ = r.nc.FlushTimeout(time.Second) // without the server, nothing more is coming anyway
	case supervisor.Log:
		r.stderr.logf("%s", a.Line)
	}
	return nil
}

// start starts a process for a.Rank: an initial rank at once (from this locked thread), a
// successor off the loop, as asking a node takes a round trip.
func (r *runner) start(a supervisor.StartRank) supervisor.Event {
	env := r.env
	env.Rank = a.Rank
	if a.Size > 0 {
		env.Size = a.Size // a restart after a resize, or into fewer ranks
	}
	if a.Join != 0 {
		return r.startJoiner(a, env)
	}
	spec := r.spec(a.Rank, r.path, env)
	if a.Restart != "" {
		return r.restart(a, spec)
	}
	if a.Node == "" {
		proc, err := r.cfg.Starter.Start(spec)
		return r.started(a.Proc, proc, err)
	}
	spec.Incarnation, spec.Replaces = a.Incarnation, a.Replaces
	spec.Env = append(spec.Env, job.EnvMigrate+"="+a.Handover, job.EnvIncarnation+"="+strconv.Itoa(a.Incarnation),
		r.successorNodeRanksEnv(a.Node, a.Rank, len(a.Replaces)))
	return r.startOn(a, spec)
}

// startOn starts spec on node a.Node, off the loop, as asking a node takes a round trip.
func (r *runner) startOn(a supervisor.StartRank, spec rankproc.Spec) supervisor.Event {
	ns, ok := r.cfg.Starter.(rankproc.NodeStarter)
	if !ok { // the Machine names nodes only with one
		return supervisor.Started{Proc: a.Proc, Err: errNoNodes}
	}
	go func() {
		proc, err := ns.StartOn(a.Node, spec)
		r.inbox <- func() supervisor.Event { return r.started(a.Proc, proc, err) }
	}()
	return nil
}

// startJoiner starts a process that joins the job at resize a.Join as rank a.Rank of a.Size:
// where the starter places it, or on a.Node off the loop.
func (r *runner) startJoiner(a supervisor.StartRank, env job.Env) supervisor.Event {
	env.Size = a.Size
	spec := r.spec(a.Rank, r.path, env)
	spec.Env = append(spec.Env, job.EnvJoin+"="+strconv.FormatUint(a.Join, 10))
	if a.Node == "" {
		proc, err := r.cfg.Starter.Start(spec)
		return r.started(a.Proc, proc, err)
	}
	spec.Env = append(spec.Env, r.successorNodeRanksEnv(a.Node, -1, 0))
	return r.startOn(a, spec)
}

// started registers a started process and waits for its exit.
func (r *runner) started(id supervisor.ProcID, proc rankproc.Process, err error) supervisor.Event {
	if err != nil {
		return supervisor.Started{Proc: id, Err: trimLaunch(err), NodeGone: errors.Is(err, rankproc.ErrHostGone),
			NodeClosed: errors.Is(err, rankproc.ErrHostClosed)}
	}
	r.procs[id] = proc
	go func() {
		ex, err := proc.Wait()
		e := supervisor.Exited{Proc: id, Status: ex.Status(), Desc: ex.String(), At: ex.At}
		if err != nil {
			e.Err, e.NodeGone = trimLaunch(err), errors.Is(err, rankproc.ErrHostGone)
		}
		r.exits <- e
	}()
	return supervisor.Started{Proc: id, PID: proc.PID(), Node: proc.Host()}
}

func (r *runner) spec(rank int, path string, env job.Env) rankproc.Spec {
	prefix := ""
	if r.cfg.TagOutput {
		prefix = "[" + strconv.Itoa(rank) + "] "
	}
	return rankproc.Spec{
		Rank: rank,
		Path: path,
		Args: r.cfg.Args,
		// Appended last so they override stale MPIOS_* variables of a surrounding job.
		Env: append(append(withGOMAXPROCS(r.cfg.Env, r.cfg.NP), env.Environ()...), r.nodeRanksEnv(rank), r.aliveEnv()),
		Dir: r.cfg.Dir,
		Output: func(s rankproc.Stream, line []byte) {
			if s == rankproc.Stderr {
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

// mpirunPackages prefix the errors of the packages mpirun is made of.
var mpirunPackages = []string{"launch: ", "rankproc: ", "nodeclient: ", "jobrecord: ", "natsembed: ", "profilewriter: ", "supervisor: "}

// Message returns err's message without the package prefix of mpirun's own packages
// ("launch: ", "nodeclient: ", ...), as mpirun shows it after its own "mpirun: ".
func Message(err error) string {
	msg := err.Error()
	for _, p := range mpirunPackages {
		if rest, ok := strings.CutPrefix(msg, p); ok {
			return rest
		}
	}
	return msg
}

// unprefixed is an error shown without its package prefix; errors.Is and As see through it.
type unprefixed struct{ err error }

func (u unprefixed) Error() string { return Message(u.err) }
func (u unprefixed) Unwrap() error { return u.err }

// trimLaunch drops the package prefix from err's message, for mpirun's own messages.
func trimLaunch(err error) error { return unprefixed{err} }
