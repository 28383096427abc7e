package pcm

import (
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/mpios/mpios/internal/job"
	"github.com/mpios/mpios/pcm/ckptstore"
)

// MaxPollEvery bounds the on-demand agreement interval, fixed or adaptive.
const MaxPollEvery = 1 << 16

// Options configure a Process. The zero value is a process that neither checkpoints nor
// restarts: Reconfigure then only checks for pending operations.
type Options struct {
	// JobID names the job in the checkpoint store. Default: the program name (made a valid
	// job id), so that singletons of different programs do not share checkpoints.
	JobID string
	// Every takes a checkpoint whenever the completed iteration count is a multiple of Every;
	// 0: no scheduled checkpoints.
	Every int
	// OnDemand enables RequestCheckpoint (checkpoints agreed at poll points, see PollEvery).
	OnDemand bool
	// PollEvery is the number of Reconfigure calls between two agreements on on-demand
	// requests; 0 adapts it so that the agreement costs about 0.2% of the time. At most
	// MaxPollEvery.
	PollEvery int
	// Dir is the checkpoint store root. Default: DefaultDir().
	Dir string
	// Node names this node in the manifests. Default: the host name. Ranks that share a store
	// directory must use the same node name (they do by default).
	Node string
	// Keep is the number of committed checkpoints kept per job. Default:
	// ckptstore.DefaultKeep (2), so that a damaged newest checkpoint leaves one to fall back
	// to.
	Keep int
	// Cap is the most bytes the checkpoint store may hold, the pieces of every rank and node
	// it keeps included: a checkpoint that would exceed it fails with a ckptstore.FullError.
	// pcmd sets it for its memory store (MPIOS_CKPT_CAP). 0: no cap.
	Cap int64
	// Restart is the id of the job to restart from; "" starts afresh (Status New).
	Restart string
	// RestartSecret is the secret of job Restart (MPIOS_RESTART_SECRET, which mpirun
	// --restart passes from that job's launch record): with it a launched process asks the
	// nodes for Restart's checkpoints as one of Restart's processes, under its key. Without
	// it, it asks under its own job's key. Never logged.
	RestartSecret []byte
	// Control follows the launcher's reconfiguration requests (migrations, checkpoints
	// asked for with pcmd) when the process was started by mpirun. OptionsFromEnv sets it.
	Control bool
	// ProfileEvery is the period at which a launched process publishes its rank's profile
	// (package profiler) for the IOS agents and mpirun --profile-out; 0 turns profiling
	// off. OptionsFromEnv sets it from MPIOS_PROFILE_EVERY, 1s by default.
	ProfileEvery time.Duration
	// Policy is the job's IOS decision policy (MPIOS_POLICY), carried in the profiles.
	Policy string
	// SyncCheckpoints writes and commits each checkpoint at the boundary where it is taken,
	// streaming the registered values straight to disk. By default a checkpoint costs the
	// application only a copy of its state in memory: the piece is written in the background
	// and committed at a later agreement point (see Close). Choose synchronous checkpoints
	// when the state is too large to hold twice in memory. OptionsFromEnv sets it from
	// MPIOS_CKPT_SYNC=1.
	SyncCheckpoints bool
	// ReconfBase is the number of entries of the launcher's reconfiguration log this process
	// must not act on: in a job that mpirun recovered from a failure, the requests of the
	// failed run. OptionsFromEnv sets it from MPIOS_RECONF_BASE.
	ReconfBase uint64
	// Log receives diagnostics (restart fallbacks, prune failures). Default: os.Stderr.
	Log io.Writer
}

// checkpointing reports whether o asks for checkpoints to be written.
func (o *Options) checkpointing() bool { return o.Every > 0 || o.OnDemand }

// usesStore reports whether o needs the checkpoint store.
func (o *Options) usesStore() bool { return o.checkpointing() || o.Restart != "" }

// DefaultDir returns the default checkpoint store root: $XDG_STATE_HOME/mpios/ckpt when
// XDG_STATE_HOME is an absolute path, else ~/.local/state/mpios/ckpt.
func DefaultDir() (string, error) {
	if d := os.Getenv("XDG_STATE_HOME"); filepath.IsAbs(d) {
		return filepath.Join(d, "mpios", "ckpt"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("pcm: default checkpoint directory: %w (set %s)", err, job.EnvCkptDir)
	}
	return filepath.Join(home, ".local", "state", "mpios", "ckpt"), nil
}

// OptionsFromEnv reads Options from the launch environment through getenv (os.Getenv if nil).
// See the package documentation for the variables. A process not started by a launcher (no
// MPIOS_JOB_ID) gets its program name as job id. Malformed values give an error matching
// ErrConfig that names the variable.
func OptionsFromEnv(getenv func(string) string) (Options, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	var o Options
	o.JobID = getenv(job.EnvJobID)
	o.Control = o.JobID != ""
	if o.Control {
		o.ProfileEvery = time.Second
	}
	if s := getenv(job.EnvProfileEvery); s != "" {
		d, err := time.ParseDuration(strings.TrimSpace(s))
		if err != nil || d < 0 {
			return o, fmt.Errorf("pcm: %s=%q: want a duration >= 0 (0: no profiling): %w", job.EnvProfileEvery, s, ErrConfig)
		}
		o.ProfileEvery = d
	}
	o.Policy = getenv(job.EnvPolicy)
	bad := func(name, val, want string) error {
		return fmt.Errorf("pcm: %s=%q: want %s: %w", name, val, want, ErrConfig)
	}
	if s := getenv(job.EnvCkptEvery); s != "" {
		k, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || k < 0 {
			return o, bad(job.EnvCkptEvery, s, "an integer >= 0 (0: on demand only)")
		}
		o.Every, o.OnDemand = k, true
	}
	if s := getenv(job.EnvCkptPoll); s != "" {
		m, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || m < 0 || m > MaxPollEvery {
			return o, bad(job.EnvCkptPoll, s, fmt.Sprintf("an integer in [0,%d] (0: adaptive)", MaxPollEvery))
		}
		o.PollEvery = m
	}
	if s := getenv(job.EnvCkptKeep); s != "" {
		k, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || k < 1 {
			return o, bad(job.EnvCkptKeep, s, "an integer >= 1")
		}
		o.Keep = k
	}
	if s := getenv(job.EnvCkptSync); s != "" {
		b, err := strconv.ParseBool(strings.TrimSpace(s))
		if err != nil {
			return o, bad(job.EnvCkptSync, s, "1 (write checkpoints at the boundary) or 0")
		}
		o.SyncCheckpoints = b
	}
	if s := getenv(job.EnvCkptCap); s != "" {
		c, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
		if err != nil || c < 0 {
			return o, bad(job.EnvCkptCap, s, "a number of bytes >= 0")
		}
		o.Cap = c
	}
	o.Dir = getenv(job.EnvCkptDir)
	// pcmd names its node for the ranks it starts: pieces record where they are stored.
	o.Node = getenv(job.EnvNode)
	o.Restart = getenv(job.EnvRestart)
	if s := getenv(job.EnvRestartSecret); s != "" {
		b, err := hex.DecodeString(strings.TrimSpace(s))
		if err != nil || len(b) == 0 {
			// The value is a secret: not repeated in the error.
			return o, fmt.Errorf("pcm: %s: not a hex secret: %w", job.EnvRestartSecret, ErrConfig)
		}
		o.RestartSecret = b
	}
	if s := getenv(job.EnvReconfBase); s != "" {
		n, err := strconv.ParseUint(strings.TrimSpace(s), 10, 64)
		if err != nil {
			return o, bad(job.EnvReconfBase, s, "an integer >= 0")
		}
		o.ReconfBase = n
	}
	if err := o.validate(); err != nil {
		return o, err
	}
	return o, nil
}

// defaultJobID is the job id of a process without a launcher: its program name with
// characters a job id cannot have replaced by '_'.
func defaultJobID() string {
	name := strings.TrimSuffix(filepath.Base(os.Args[0]), ".exe")
	b := []byte(name)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			b[i] = '_'
		}
	}
	if len(b) > 64 {
		b = b[:64]
	}
	if len(b) == 0 || job.ValidateID(string(b)) != nil {
		return "singleton"
	}
	return string(b)
}

// validate checks o and fills in defaults.
func (o *Options) validate() error {
	if o.JobID == "" {
		o.JobID = defaultJobID()
	}
	if err := job.ValidateID(o.JobID); err != nil {
		return fmt.Errorf("pcm: job id: %v: %w", err, ErrConfig)
	}
	if o.Restart != "" {
		if err := job.ValidateID(o.Restart); err != nil {
			return fmt.Errorf("pcm: %s: %v: %w", job.EnvRestart, err, ErrConfig)
		}
	}
	switch {
	case o.Every < 0:
		return fmt.Errorf("pcm: Every %d: want >= 0: %w", o.Every, ErrConfig)
	case o.PollEvery < 0 || o.PollEvery > MaxPollEvery:
		return fmt.Errorf("pcm: PollEvery %d: want 0 to %d: %w", o.PollEvery, MaxPollEvery, ErrConfig)
	case o.Keep < 0:
		return fmt.Errorf("pcm: Keep %d: want >= 0: %w", o.Keep, ErrConfig)
	}
	if o.Keep == 0 {
		o.Keep = ckptstore.DefaultKeep
	}
	if o.Log == nil {
		o.Log = os.Stderr
	}
	if o.Dir == "" && o.usesStore() {
		d, err := DefaultDir()
		if err != nil {
			return fmt.Errorf("%w: %w", err, ErrConfig)
		}
		o.Dir = d
	}
	return nil
}
