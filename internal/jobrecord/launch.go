package jobrecord

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// Launch is how a job was started: what "mpirun --restart JOB" needs to start it again
// without the command line repeated. mpirun keeps it after the job ends (unlike the Record),
// in LaunchPath, for jobs that checkpoint.
type Launch struct {
	JobID   string   `json:"job_id"`
	Program string   `json:"program"` // absolute when it was given as a path
	Args    []string `json:"args"`
	NP      int      `json:"np"`
	// Env are the job's MPIOS_CKPT_* settings (where its checkpoints are, how often).
	Env []string `json:"env,omitempty"`
	// Secret is the job's secret (hex), as in its Record, kept past the job's end: a
	// restart from the job reads its checkpoints on the nodes under its key. The file is
	// private to its owner (0600 in a 0700 directory), like the Record.
	Secret string `json:"secret,omitempty"`
}

// LaunchPath is the launch file of job id in dir (a RuntimeDir).
func LaunchPath(dir, id string) string { return filepath.Join(dir, "launched", id+".json") }

// ErrNoLaunch reports that no launch file of the job exists (it never ran here, or ran
// without checkpoints, or the runtime directory was cleared, as at a reboot).
var ErrNoLaunch = errors.New("no launch record")

// WriteLaunch writes l into dir, replacing the file of an earlier job with the same id.
func WriteLaunch(dir string, l Launch) error {
	sub := filepath.Dir(LaunchPath(dir, l.JobID))
	if err := ensurePrivateDir(dir); err != nil {
		return err
	}
	if err := ensurePrivateDir(sub); err != nil {
		return err
	}
	b, err := json.MarshalIndent(l, "", "  ")
	if err != nil {
		return fmt.Errorf("jobrecord: launch record: %w", err)
	}
	if err := writePrivate(LaunchPath(dir, l.JobID), b); err != nil {
		return fmt.Errorf("jobrecord: launch record: %w", err)
	}
	return nil
}

// ReadLaunch reads the launch file of job id in dir; a missing one matches ErrNoLaunch.
func ReadLaunch(dir, id string) (Launch, error) {
	var l Launch
	path := LaunchPath(dir, id)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return l, fmt.Errorf("jobrecord: job %s: %w in %s", id, ErrNoLaunch, filepath.Dir(path))
	}
	if err != nil {
		return l, fmt.Errorf("jobrecord: %w", err)
	}
	if err := json.Unmarshal(b, &l); err != nil || l.JobID != id || l.Program == "" || l.NP < 1 {
		return l, fmt.Errorf("jobrecord: launch record %s is damaged", path)
	}
	return l, nil
}
