package job

import (
	"fmt"
	"time"
)

// Liveness and checkpoint reports: what mpirun's supervisor needs to recover a job by itself
// (a rank that stops beating is declared hung; a failure restarts every rank from the newest
// committed checkpoint).

// EnvAliveEvery is the period of a rank's liveness beats (a Go duration; "0" turns them off).
// mpirun sets it from --hang-timeout; DefaultAliveEvery without it.
const EnvAliveEvery = "MPIOS_ALIVE_EVERY"

// DefaultAliveEvery is the liveness period of a rank when EnvAliveEvery is unset.
const DefaultAliveEvery = time.Second

// AliveSubject carries the ranks' liveness beats (Alive) to mpirun.
func AliveSubject(jobID string) string { return subject(jobID, "alive") }

// Alive is a rank process's liveness beat. Done says the process finalized: it sends no more
// beats and must not be declared hung for that.
type Alive struct {
	Rank int `msgpack:"rank"`
	PID  int `msgpack:"pid"`
	// Iteration is the last iteration boundary the rank reached (pcm.Reconfigure), -1 if
	// unknown: what a recovery loses is counted from it.
	Iteration int64 `msgpack:"iter"`
	Done      bool  `msgpack:"done,omitempty"`
}

// Validate checks an Alive beat against the job's size.
func (a Alive) Validate(size int) error {
	if a.Rank < 0 || a.Rank >= size || a.PID <= 0 {
		return fmt.Errorf("job: liveness of rank %d pid %d in a job of %d ranks", a.Rank, a.PID, size)
	}
	return nil
}

// CommittedSubject carries Committed reports to mpirun.
func CommittedSubject(jobID string) string { return subject(jobID, "ckpt.committed") }

// Committed reports that checkpoint Seq of the job, taken at Iteration, is committed on every
// store: a recovery can restart from it. Rank 0 sends it.
type Committed struct {
	Seq       uint64 `msgpack:"seq"`
	Iteration int64  `msgpack:"iter"`
	Bytes     int64  `msgpack:"bytes"` // state bytes of all ranks
	// Applied is how many reconfiguration log entries the ranks had acted on when the
	// checkpoint was taken: every checkpoint entry up to it is done.
	Applied uint64 `msgpack:"applied,omitempty"`
}

// RestoredSubject carries Restored reports to mpirun.
func RestoredSubject(jobID string) string { return subject(jobID, "ckpt.restored") }

// Restored reports that the ranks restarted from checkpoint Seq of job From (taken at
// Iteration) and compute again. Rank 0 sends it once every rank has loaded its piece.
type Restored struct {
	From      string `msgpack:"from"`
	Seq       uint64 `msgpack:"seq"`
	Iteration int64  `msgpack:"iter"`
	// Error, instead, says the ranks found no checkpoint to restore (every copy of a piece
	// of each lost): recovering again is pointless.
	Error string `msgpack:"error,omitempty"`
}

// EnvReconfBase is set for the ranks restarted by a recovery: the number of entries of the
// job's reconfiguration log that belong to the failed run and must not be acted on again.
const EnvReconfBase = "MPIOS_RECONF_BASE"
