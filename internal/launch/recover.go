package launch

import (
	"encoding/hex"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mpios/mpios/internal/job"
	"github.com/mpios/mpios/internal/jobrecord"
	"github.com/mpios/mpios/internal/rankproc"
	"github.com/mpios/mpios/internal/supervisor"
)

// The loop's part of automatic recovery (supervisor/recover.go): restarting ranks from the
// job's newest committed checkpoint, the ranks' liveness period, and telling the Machine
// when mpirun's NATS connection is down, so that silence during an outage is not taken for
// hung ranks.

// restart starts a rank of a recovered job from the checkpoint, where the Machine placed it.
func (r *runner) restart(a supervisor.StartRank, spec rankproc.Spec) supervisor.Event {
	spec.Incarnation = a.Incarnation
	spec.Env = append(spec.Env, job.EnvRestart+"="+a.Restart, job.EnvIncarnation+"="+strconv.Itoa(a.Incarnation),
		job.EnvReconfBase+"="+strconv.FormatUint(a.ReconfBase, 10))
	if ns, ok := r.cfg.Starter.(rankproc.NodeStarter); ok && a.Node != "" {
		proc, err := ns.StartOn(a.Node, spec)
		return r.started(a.Proc, proc, err)
	}
	proc, err := r.cfg.Starter.Start(spec)
	return r.started(a.Proc, proc, err)
}

// aliveEnv sets the ranks' liveness period: several beats per hang timeout, so one late beat
// is no hang, and at most one a second, which costs nothing.
func (r *runner) aliveEnv() string {
	if r.cfg.HangTimeout < 0 {
		return job.EnvAliveEvery + "=0"
	}
	every := min(max(r.cfg.HangTimeout/5, 20*time.Millisecond), job.DefaultAliveEvery)
	return job.EnvAliveEvery + "=" + every.String()
}

// slotsOf returns the job's slots per node of a starter that places ranks on nodes.
func slotsOf(s rankproc.Starter) map[string]int {
	if sl, ok := s.(interface{ Slots() map[string]int }); ok {
		return sl.Slots()
	}
	return nil
}

// controlPlane follows mpirun's NATS connection from its callbacks (other goroutines) and
// wakes the loop, which tells the Machine the latest state.
type controlPlane struct {
	changed chan struct{} // one pending wake-up at most
	mu      sync.Mutex
	up      bool
	told    bool // the state told to the Machine last
}

func newControlPlane() *controlPlane {
	return &controlPlane{changed: make(chan struct{}, 1), up: true, told: true}
}

func (c *controlPlane) set(up bool) {
	c.mu.Lock()
	c.up = up
	c.mu.Unlock()
	select {
	case c.changed <- struct{}{}:
	default: // a wake-up is pending: the loop reads the latest state then
	}
}

// event returns the Machine's event for the latest state (Tick if it did not change).
func (c *controlPlane) event() supervisor.Event {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.up == c.told {
		return supervisor.Tick{}
	}
	c.told = c.up
	if c.up {
		return supervisor.ControlPlaneUp{}
	}
	return supervisor.ControlPlaneDown{}
}

// stallTick and stallAfter: the loop wakes at least every stallTick, so a gap of more than
// stallAfter between two wake-ups says mpirun itself did not run (stopped by SIGSTOP or a
// debugger, its machine suspended, starved of CPU).
const stallTick, stallAfter = 500 * time.Millisecond, 3 * time.Second

// stallWatch notices that the loop did not run for a while.
type stallWatch struct{ last time.Time }

// woke returns how long the loop did not run before now, and whether that was a stall.
func (w *stallWatch) woke(now time.Time) (time.Duration, bool) {
	last := w.last
	w.last = now
	if last.IsZero() {
		return 0, false
	}
	// The monotonic clock stops while the machine is suspended; the wall clock does not.
	gap := max(now.Sub(last), now.Round(0).Sub(last.Round(0)))
	return gap, gap > stallAfter
}

// writeLaunch keeps how a checkpointing job was started, and its secret, for
// "mpirun --restart JOB".
func (r *runner) writeLaunch(secret []byte) {
	var env []string
	for _, name := range []string{job.EnvCkptEvery, job.EnvCkptDir, job.EnvCkptSync, job.EnvCkptKeep, job.EnvCkptPoll} {
		if v := rankproc.EnvValue(r.cfg.Env, name); v != "" {
			env = append(env, name+"="+v)
		}
	}
	if env == nil {
		return // no checkpoint to restart from
	}
	program := r.cfg.Program
	if strings.ContainsRune(program, filepath.Separator) {
		if abs, err := filepath.Abs(program); err == nil {
			program = abs
		}
	}
	l := jobrecord.Launch{JobID: r.cfg.JobID, Program: program, Args: r.cfg.Args, NP: r.cfg.NP, Env: env, Secret: hex.EncodeToString(secret)}
	if err := jobrecord.WriteLaunch(r.cfg.RuntimeDir, l); err != nil {
		r.stderr.logf("warning: %v (mpirun --restart %s will need the program and -np)", trimLaunch(err), r.cfg.JobID)
	}
}
