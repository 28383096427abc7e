// Package job defines the contract between a launcher (mpirun, later pcmd) and the ranks it
// starts: the environment a rank is started with, the NATS subjects of the job's control plane,
// and the messages exchanged on them. Bulk data never travels here; only addresses and events.
package job

import (
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

// Environment variables set by the launcher for every rank.
const (
	EnvJobID   = "MPIOS_JOB_ID"             // job identifier, [A-Za-z0-9_-]+
	EnvRank    = "MPIOS_RANK"               // world rank of this process
	EnvSize    = "MPIOS_SIZE"               // number of ranks in the world
	EnvNATS    = "MPIOS_NATS_URL"           // control-plane URL, credentials may be embedded (nats://user:pass@host:port)
	EnvSecret  = "MPIOS_SECRET"             // hex, at least 16 bytes: authenticates data-plane connections
	EnvBind    = "MPIOS_BIND"               // host/IP the rank listens on and advertises; default 127.0.0.1
	EnvTimeout = "MPIOS_RENDEZVOUS_TIMEOUT" // Go duration; how long Init waits for the address table
)

// DefaultRendezvousTimeout bounds how long a rank waits for all ranks to report their address.
const DefaultRendezvousTimeout = 60 * time.Second

// Env is a rank's launch environment.
type Env struct {
	JobID   string
	Rank    int
	Size    int
	NATSURL string
	Secret  []byte
	Bind    string
	Timeout time.Duration
}

// ErrNotLaunched reports that the process was not started by a launcher (no EnvJobID).
var ErrNotLaunched = errors.New("job: not started by a launcher")

// FromEnviron reads and validates the launch environment through getenv (os.Getenv if nil).
// It returns ErrNotLaunched when EnvJobID is unset.
func FromEnviron(getenv func(string) string) (Env, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	var e Env
	e.JobID = getenv(EnvJobID)
	if e.JobID == "" {
		return e, ErrNotLaunched
	}
	if err := ValidateID(e.JobID); err != nil {
		return e, err
	}
	var err error
	if e.Size, err = strconv.Atoi(getenv(EnvSize)); err != nil || e.Size < 1 {
		return e, fmt.Errorf("job: %s=%q: want an integer >= 1", EnvSize, getenv(EnvSize))
	}
	if e.Rank, err = strconv.Atoi(getenv(EnvRank)); err != nil || e.Rank < 0 || e.Rank >= e.Size {
		return e, fmt.Errorf("job: %s=%q: want an integer in [0,%d)", EnvRank, getenv(EnvRank), e.Size)
	}
	if e.NATSURL = getenv(EnvNATS); e.NATSURL == "" {
		return e, fmt.Errorf("job: %s is not set", EnvNATS)
	}
	if e.Secret, err = hex.DecodeString(getenv(EnvSecret)); err != nil || len(e.Secret) < 16 {
		return e, fmt.Errorf("job: %s: want at least 32 hex digits", EnvSecret)
	}
	if e.Bind = getenv(EnvBind); e.Bind == "" {
		e.Bind = "127.0.0.1"
	}
	e.Timeout = DefaultRendezvousTimeout
	if s := getenv(EnvTimeout); s != "" {
		if e.Timeout, err = time.ParseDuration(s); err != nil || e.Timeout <= 0 {
			return e, fmt.Errorf("job: %s=%q: want a positive duration", EnvTimeout, s)
		}
	}
	return e, nil
}

// Environ returns e as KEY=VALUE pairs for exec.Cmd.Env.
func (e Env) Environ() []string {
	out := []string{
		EnvJobID + "=" + e.JobID,
		EnvRank + "=" + strconv.Itoa(e.Rank),
		EnvSize + "=" + strconv.Itoa(e.Size),
		EnvNATS + "=" + e.NATSURL,
		EnvSecret + "=" + hex.EncodeToString(e.Secret),
	}
	if e.Bind != "" {
		out = append(out, EnvBind+"="+e.Bind)
	}
	if e.Timeout > 0 {
		out = append(out, EnvTimeout+"="+e.Timeout.String())
	}
	return out
}

// ValidateID checks that id is usable as a NATS subject token and a file name.
func ValidateID(id string) error {
	if id == "" || len(id) > 64 {
		return fmt.Errorf("job: id %q: want 1 to 64 characters", id)
	}
	for _, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return fmt.Errorf("job: id %q: only letters, digits, '-' and '_' are allowed", id)
		}
	}
	return nil
}

// Subjects of one job's control plane.
func subject(jobID, leaf string) string { return "mpios.job." + jobID + "." + leaf }

// HelloSubject: each rank sends a Hello request here; the launcher answers every rank with the
// complete Table once all ranks have said hello.
func HelloSubject(jobID string) string { return subject(jobID, "hello") }

// EventSubject: the launcher publishes Events (rank failures, job abort) here.
func EventSubject(jobID string) string { return subject(jobID, "event") }

// AbortSubject: a rank that calls mpi.Abort publishes an Abort here before exiting.
func AbortSubject(jobID string) string { return subject(jobID, "abort") }

// LostSubject: a rank whose connection to a peer broke without a goodbye publishes a Lost
// here before the calls waiting on that peer fail, so the launcher can tell the rank that died
// first from the ranks that exited because of it.
func LostSubject(jobID string) string { return subject(jobID, "lost") }

// Lost reports that Observer lost its connection to Rank abnormally.
type Lost struct {
	Observer int    `msgpack:"observer"`
	Rank     int    `msgpack:"rank"`
	Reason   string `msgpack:"reason"`
}

// Hello is a rank's rendezvous request.
type Hello struct {
	Rank int    `msgpack:"rank"`
	Addr string `msgpack:"addr"` // data-plane host:port
	PID  int    `msgpack:"pid"`
	Host string `msgpack:"host"`
}

// Table is the launcher's rendezvous reply: Addrs[r] is rank r's data-plane address.
// A non-empty Error means the job cannot start (the rank must exit with it).
type Table struct {
	Addrs []string `msgpack:"addrs"`
	Error string   `msgpack:"error,omitempty"`
}

// EventKind classifies an Event.
type EventKind string

const (
	// EventRankFailed: a rank exited abnormally or was killed; its peers fail calls that wait on it.
	EventRankFailed EventKind = "rank-failed"
	// EventAbort: the job is being stopped (Ctrl-C, timeout, mpi.Abort); every rank should exit.
	EventAbort EventKind = "abort"
)

// Event is published by the launcher on EventSubject.
type Event struct {
	Kind   EventKind `msgpack:"kind"`
	Rank   int       `msgpack:"rank"`
	Reason string    `msgpack:"reason"`
}

// Abort is published by a rank calling mpi.Abort.
type Abort struct {
	Rank    int    `msgpack:"rank"`
	Code    int    `msgpack:"code"`
	Message string `msgpack:"message"`
}

// Encode marshals a control message.
func Encode(v any) ([]byte, error) { return msgpack.Marshal(v) }

// Decode unmarshals a control message, rejecting malformed input with a clear error.
func Decode(data []byte, v any) error {
	if err := msgpack.Unmarshal(data, v); err != nil {
		return fmt.Errorf("job: decode %T: %w", v, err)
	}
	return nil
}

// Validate checks a Hello against the job size.
func (h Hello) Validate(size int) error {
	if h.Rank < 0 || h.Rank >= size {
		return fmt.Errorf("job: hello from rank %d: outside [0,%d)", h.Rank, size)
	}
	if _, _, ok := strings.Cut(h.Addr, ":"); !ok {
		return fmt.Errorf("job: hello from rank %d: address %q is not host:port", h.Rank, h.Addr)
	}
	return nil
}
