package mpi

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mpios/mpios/internal/ctlauth"
	"github.com/mpios/mpios/internal/job"
	"github.com/mpios/mpios/internal/rewire"
	"github.com/nats-io/nats.go"
)

// liveness sends a launched rank's beats to mpirun (job.AliveSubject) from its own
// goroutine, so a rank busy in a long computation still beats and only a stopped or frozen
// process falls silent. A beat is one small publish on the rank's control-plane connection;
// while NATS is away, nats.go buffers them and mpirun does not judge silence.
type liveness struct {
	quit chan struct{}
	done sync.WaitGroup
	once sync.Once
	nc   *nats.Conn
	auth *ctlauth.JobChannel // the beats travel under the job key
	subj string
	msg  job.Alive
	// rank is the process's rank now: a resize renumbers the ranks that stay (SwitchWorld),
	// and mpirun knows the process by its new number.
	rank atomic.Int64
}

// setRank makes the beats carry the process's new rank after a resize.
func (lv *liveness) setRank(r int) {
	if lv != nil {
		lv.rank.Store(int64(r))
	}
}

// startLiveness starts the beats of a launched rank; nil when they are turned off.
func startLiveness(env job.Env, nc *nats.Conn, l *rewire.Launched) *liveness {
	every := job.DefaultAliveEvery
	if s := os.Getenv(job.EnvAliveEvery); s != "" {
		d, err := time.ParseDuration(strings.TrimSpace(s))
		if err != nil || d < 0 {
			fmt.Fprintf(os.Stderr, "mpi: rank %d: ignoring %s=%q: want a duration >= 0\n", env.Rank, job.EnvAliveEvery, s)
		} else {
			every = d
		}
	}
	if every == 0 || nc == nil {
		return nil
	}
	lv := &liveness{quit: make(chan struct{}), nc: nc, auth: l.Auth, subj: job.AliveSubject(env.JobID),
		msg: job.Alive{PID: os.Getpid()}}
	lv.rank.Store(int64(env.Rank))
	lv.done.Add(1)
	go lv.run(every, l)
	return lv
}

func (lv *liveness) run(every time.Duration, l *rewire.Launched) {
	defer lv.done.Done()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		msg := lv.msg
		msg.Rank, msg.Iteration = int(lv.rank.Load()), l.Iteration()
		if data, err := rewire.Seal(lv.auth, lv.subj, msg); err == nil {
			_ = lv.nc.Publish(lv.subj, data) // a lost beat is made up by the next one
		}
		select {
		case <-lv.quit:
			return
		case <-t.C:
		}
	}
}

// stop ends the beats and tells mpirun that this process will send no more, so the time it
// still takes to exit is not mistaken for a hang.
func (lv *liveness) stop() {
	if lv == nil {
		return
	}
	lv.once.Do(func() {
		close(lv.quit)
		lv.done.Wait()
		msg := lv.msg
		msg.Rank, msg.Done = int(lv.rank.Load()), true
		if data, err := rewire.Seal(lv.auth, lv.subj, msg); err == nil && lv.nc.Publish(lv.subj, data) == nil {
			_ = lv.nc.FlushTimeout(time.Second)
		}
	})
}
