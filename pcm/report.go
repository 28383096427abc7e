package pcm

import (
	"errors"
	"time"

	"github.com/mpios/mpios/internal/job"
	"github.com/mpios/mpios/pcm/ckptstore"
)

// Reports to the supervisor (mpirun), which recovers a failed job from the newest committed
// checkpoint: rank 0 tells it which checkpoints are committed and, after a restart, that the
// ranks compute again. Best effort: a lost report costs a recovery precision, never the job.

// reportCommitted tells mpirun that checkpoint m is committed on every store, and how many
// log entries the ranks had acted on when it was taken.
func (p *Process) reportCommitted(m ckptstore.Manifest, applied uint64) {
	if p.ctl == nil || p.world.Rank() != 0 {
		return
	}
	var bytes int64
	for _, pc := range m.Pieces {
		bytes += pc.Size
	}
	p.publish(job.CommittedSubject(p.opts.JobID), job.Committed{Seq: m.Seq, Iteration: m.Iteration, Bytes: bytes, Applied: applied})
}

// reportRestored tells mpirun that every rank restored checkpoint m.
func (p *Process) reportRestored(m ckptstore.Manifest) {
	if p.ctl == nil || p.world.Rank() != 0 {
		return
	}
	p.publish(job.RestoredSubject(p.opts.JobID), job.Restored{From: m.Job, Seq: m.Seq, Iteration: m.Iteration})
}

// reportUnrestorable tells mpirun that the ranks found no checkpoint to restart from (err
// matches ErrNoCheckpoint): recovering the job again would find none either.
func (p *Process) reportUnrestorable(err error) {
	if p.ctl == nil || p.world.Rank() != 0 || !errors.Is(err, ErrNoCheckpoint) {
		return
	}
	p.publish(job.RestoredSubject(p.opts.JobID), job.Restored{From: p.opts.Restart, Error: err.Error()})
}

func (p *Process) publish(subject string, msg any) {
	data, err := p.ctl.encode(subject, msg)
	if err == nil && p.ctl.nc.Publish(subject, data) == nil {
		// The report must reach mpirun before a failure that may follow at once.
		_ = p.ctl.nc.FlushTimeout(time.Second)
	}
}

// noteIteration records the iteration boundary reached for the liveness beats.
func (p *Process) noteIteration(iter int) {
	if p.launched != nil {
		p.launched.SetIteration(int64(iter))
	}
}
