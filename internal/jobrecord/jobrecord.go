// Package jobrecord is the record of a running job that mpirun keeps in the user's runtime
// directory, so tools such as pcmd find the job's control plane.
package jobrecord

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/mpios/mpios/internal/ctlauth"
	"github.com/mpios/mpios/internal/procstate"
)

// Record describes a running job. mpirun writes it to RecordPath while the job runs, so
// tools such as pcmd can find the job's control plane.
type Record struct {
	JobID   string    `json:"job_id"`
	NATSURL string    `json:"nats_url"` // with credentials: the file is private to the user
	PID     int       `json:"pid"`      // mpirun's pid
	Started time.Time `json:"started"`
	NP      int       `json:"np"`
	Program string    `json:"program"`
	// Secret is the job's secret (hex), from which its control-plane key derives
	// (ctlauth.DeriveJobKey): the job's owner signs control requests with it (pcmd migrate,
	// checkpoint, resize). The file is private to the user, like the credentials above.
	Secret string `json:"secret,omitempty"`
}

// ErrNoSecret: a job record carries no job secret (written by an older mpirun).
var ErrNoSecret = errors.New("job record has no job secret")

// OwnerWrapper returns what signs control requests as the owner of the job rec describes:
// a ctlauth.JobWrapper under the job's key, as a ctlauth.RoleTool sender numbered from now.
// Each process is a sender of its own (ctlauth.ToolInstance): the owner's tools run at once
// are not taken for replays of each other.
func (rec Record) OwnerWrapper(now time.Time) (*ctlauth.JobWrapper, error) {
	key, err := rec.Key()
	if err != nil {
		return nil, err
	}
	return ctlauth.NewJobWrapper(key, ctlauth.Sender{Role: ctlauth.RoleTool, Tool: ctlauth.ToolInstance()}, uint64(now.UnixNano()))
}

// Key returns the control-plane key of the job rec describes (ctlauth.DeriveJobKey of its
// secret): what its owner signs requests and verifies mpirun's replies (job info) with.
func (rec Record) Key() (ctlauth.JobKey, error) {
	if rec.Secret == "" {
		return ctlauth.JobKey{}, fmt.Errorf("jobrecord: job %s: %w", rec.JobID, ErrNoSecret)
	}
	secret, err := hex.DecodeString(rec.Secret)
	if err != nil {
		return ctlauth.JobKey{}, fmt.Errorf("jobrecord: job %s: secret: %w", rec.JobID, err)
	}
	key, err := ctlauth.DeriveJobKey(rec.JobID, secret)
	if err != nil {
		return ctlauth.JobKey{}, fmt.Errorf("jobrecord: %w", err)
	}
	return key, nil
}

// ReadJob reads the record of job id in dir (RuntimeDir), which must still be running:
// only the job's owner can read it.
func ReadJob(dir, id string) (Record, error) {
	rec, err := ReadRecord(RecordPath(dir, id))
	if err != nil {
		return rec, err
	}
	if rec.JobID != id {
		return rec, fmt.Errorf("jobrecord: %s describes job %q, not %s", RecordPath(dir, id), rec.JobID, id)
	}
	if !procstate.Alive(rec.PID) {
		return rec, fmt.Errorf("jobrecord: job %s: its mpirun (pid %d) is not running", id, rec.PID)
	}
	return rec, nil
}

// RuntimeDir returns the per-user directory holding job records: $XDG_RUNTIME_DIR/mpios, or
// os.TempDir()/mpios-<uid> without XDG_RUNTIME_DIR. It does not create it.
func RuntimeDir() string {
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		return filepath.Join(d, "mpios")
	}
	return filepath.Join(os.TempDir(), "mpios-"+strconv.Itoa(os.Getuid()))
}

// RecordPath is the record file of job id in dir.
func RecordPath(dir, id string) string { return filepath.Join(dir, id+".json") }

// ReadRecord reads a record file.
func ReadRecord(path string) (Record, error) {
	var r Record
	b, err := os.ReadFile(path)
	if err != nil {
		return r, fmt.Errorf("jobrecord: read job record: %w", err)
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return r, fmt.Errorf("jobrecord: job record %s: %w", path, err)
	}
	return r, nil
}

// ErrJobIDInUse reports that a live mpirun already runs a job with the requested id.
var ErrJobIDInUse = errors.New("job id is in use")

// ensurePrivateDir creates dir with mode 0700, or checks that an existing one is a directory
// that only we can write: in a shared /tmp another user could have planted it.
func ensurePrivateDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("jobrecord: runtime dir: %w", err)
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("jobrecord: runtime dir: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("jobrecord: runtime dir %s is not a directory", dir)
	}
	if err := checkOwner(fi); err != nil {
		return fmt.Errorf("jobrecord: runtime dir %s: %w", dir, err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		if err := os.Chmod(dir, 0o700); err != nil {
			return fmt.Errorf("jobrecord: runtime dir: %w", err)
		}
	}
	return nil
}

// Write writes rec atomically into dir, refusing to replace the record of a live job
// (ErrJobIDInUse). It returns the record's path.
func Write(dir string, rec Record) (string, error) {
	if err := ensurePrivateDir(dir); err != nil {
		return "", err
	}
	path := RecordPath(dir, rec.JobID)
	if old, err := ReadRecord(path); err == nil && procstate.Alive(old.PID) {
		return "", fmt.Errorf("jobrecord: job %s: %w by mpirun pid %d", rec.JobID, ErrJobIDInUse, old.PID)
	}
	b, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return "", fmt.Errorf("jobrecord: job record: %w", err)
	}
	if err := writePrivate(path, b); err != nil {
		return "", fmt.Errorf("jobrecord: job record: %w", err)
	}
	return path, nil
}

// writePrivate replaces the file at path with data, atomically (a reader sees the old file or
// the new one) and readable only by the user: records hold credentials.
func writePrivate(path string, data []byte) error {
	dir, name := filepath.Split(path)
	f, err := os.CreateTemp(dir, "."+name+"-*.tmp")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, werr := f.Write(append(data, '\n'))
	cerr := f.Close()
	if err := errors.Join(werr, cerr); err != nil {
		os.Remove(tmp)
		return err
	}
	// CreateTemp already uses 0600; be explicit.
	if err := os.Chmod(tmp, 0o600); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

// Remove removes the record at path; one already gone is not an error.
func Remove(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("jobrecord: remove job record: %w", err)
	}
	return nil
}
