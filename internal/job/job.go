// Package job defines the contract between a launcher (mpirun, later pcmd) and the ranks it
// starts: the environment a rank is started with, the NATS subjects of the job's control plane,
// and the messages exchanged on them. Bulk data never travels here; only addresses and events.
package job

import (
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/mpios/mpios/internal/msgpackcheck"
	"github.com/mpios/mpios/internal/reconf"
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

// Environment variables of the PCM service (package pcm): checkpointing and restart. The
// launcher passes its own environment through to the ranks, so they are set on mpirun.
const (
	EnvCkptEvery = "MPIOS_CKPT_EVERY" // checkpoint every K iterations; 0: on demand only; unset: off
	EnvCkptDir   = "MPIOS_CKPT_DIR"   // checkpoint store root; default $XDG_STATE_HOME/mpios/ckpt
	EnvCkptKeep  = "MPIOS_CKPT_KEEP"  // committed checkpoints kept per job; default 2
	EnvCkptCap   = "MPIOS_CKPT_CAP"   // bytes the store may hold (pcmd's memory store); unset: no cap
	EnvCkptPoll  = "MPIOS_CKPT_POLL"  // agree on on-demand requests every M iterations; 0: adaptive
	EnvCkptSync  = "MPIOS_CKPT_SYNC"  // 1: write and commit checkpoints at the boundary, not in the background
	EnvRestart   = "MPIOS_RESTART"    // id of the job whose newest valid checkpoint to restart from
	// EnvRestartSecret is the secret (hex) of the job EnvRestart names, from its owner's
	// launch record: the ranks ask the nodes for that job's checkpoints as its processes,
	// under its key, which the nodes that stored them know. Sealed for the node like
	// EnvSecret; never passed in clear.
	EnvRestartSecret = "MPIOS_RESTART_SECRET"
	// EnvMigrate is set by the launcher for a process that takes over a migrating rank:
	// where its predecessor waits to hand the rank over (see package internal/rewire).
	EnvMigrate = "MPIOS_MIGRATE"
	// EnvIncarnation counts the processes that have held a rank: 0 for the first, +1 per
	// migration.
	EnvIncarnation = "MPIOS_INCARNATION"
)

// Environment variables of profiling and autonomous reconfiguration.
const (
	EnvProfileEvery = "MPIOS_PROFILE_EVERY" // Go duration between profile publications; 0 turns profiling off; default 1s
	EnvPolicy       = "MPIOS_POLICY"        // the job's IOS decision policy (sras, atsras, flcras, mpiios, none); "" = the nodes' own
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
func Decode(data []byte, v any) (err error) {
	// msgpack v5.4.1 panics on some input (a nil where a time.Time is expected): any NATS
	// client could otherwise crash every receiver with one message.
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("job: decode %T: malformed input: %v", v, p)
		}
	}()
	// The decoder preallocates the lengths arrays announce: 9 bytes announcing 3e9 elements
	// killed any receiver out of memory (found by FuzzDecodeReconfLog).
	if err := msgpackcheck.Check(data); err != nil {
		return fmt.Errorf("job: decode %T: %w", v, err)
	}
	if err := msgpack.Unmarshal(data, v); err != nil {
		return fmt.Errorf("job: decode %T: %w", v, err)
	}
	return nil
}

// TrimPrefix drops this package's "job: " from err's message, for messages that already
// say where they come from. Errors.Is and As no longer see through the result.
func TrimPrefix(err error) error {
	if s, ok := strings.CutPrefix(err.Error(), "job: "); ok {
		return errors.New(s)
	}
	return err
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

// Node agents (pcmd). A pcmd daemon runs on every node of a cluster, registers it on the
// control plane, spawns ranks for launchers, relays their output and exit status, and hosts
// the node's checkpoint store. All its messages are msgpack, like the job's; every receiver
// decodes and validates them (Validate methods) before acting, as any NATS client can send them.
//
//	mpios.nodes.heartbeat           NodeInfo, published by every pcmd each NodeInfo.Interval
//	mpios.nodes.discover            request: every pcmd replies with its NodeView
//	mpios.node.<node>.info          request: that pcmd replies with its NodeInfo
//	mpios.node.<node>.spawn         request SpawnRequest, reply SpawnReply
//	mpios.node.<node>.signal        request SignalRequest, reply SignalReply
//	mpios.node.<node>.replay        request ReplayRequest, reply ReplayReply
//	mpios.job.<id>.rank.<r>.out     RankOutput: one line of rank r's stdout or stderr
//	mpios.job.<id>.rank.<r>.exit    RankExit: rank r ended; published after its last output line
//	mpios.job.<id>.keepalive        empty messages from the launcher; see SpawnRequest.KeepAlive
//	mpios.job.<id>.ctl              request ControlRequest, reply ControlReply (answered by the ranks)

// EnvNode is set by pcmd for the ranks it starts: the name of their node (e.g. for
// ckptstore.Options.Node).
const EnvNode = "MPIOS_NODE"

// Subjects shared by all node agents.
const (
	NodesHeartbeatSubject = "mpios.nodes.heartbeat"
	NodesDiscoverSubject  = "mpios.nodes.discover"
)

// NodeInfoSubject: request/reply, the named node answers with its NodeInfo.
func NodeInfoSubject(node string) string { return "mpios.node." + node + ".info" }

// NodeCardSubject is the subject a node's signed key card (NodeInfo.Card) is signed for; it
// is never published on, the card travels inside NodeInfo.
func NodeCardSubject(node string) string { return "mpios.node." + node + ".card" }

// NodeSpawnSubject: request/reply, SpawnRequest to SpawnReply.
func NodeSpawnSubject(node string) string { return "mpios.node." + node + ".spawn" }

// NodeSignalSubject: request/reply, SignalRequest to SignalReply.
func NodeSignalSubject(node string) string { return "mpios.node." + node + ".signal" }

// NodeReplaySubject: request/reply, ReplayRequest to ReplayReply.
func NodeReplaySubject(node string) string { return "mpios.node." + node + ".replay" }

// RankOutSubject carries the RankOutput messages of one rank.
func RankOutSubject(jobID string, rank int) string {
	return subject(jobID, "rank."+strconv.Itoa(rank)+".out")
}

// RankExitSubject carries the RankExit message of one rank.
func RankExitSubject(jobID string, rank int) string {
	return subject(jobID, "rank."+strconv.Itoa(rank)+".exit")
}

// RankSubjects matches RankOutSubject and RankExitSubject of one rank: a single subscription
// on it receives a rank's output and exit in the order the node published them.
func RankSubjects(jobID string, rank int) string {
	return subject(jobID, "rank."+strconv.Itoa(rank)+".*")
}

// IncarnationSubjects returns the output and exit subjects of a later incarnation of a
// rank (the process that took it over after inc migrations), and the subject matching both.
func IncarnationSubjects(jobID string, rank, inc int) (out, exit, both string) {
	base := "rank." + strconv.Itoa(rank) + ".i" + strconv.Itoa(inc) + "."
	return subject(jobID, base+"out"), subject(jobID, base+"exit"), subject(jobID, base+"*")
}

// KeepAliveSubject: the launcher of a job publishes a KeepAlive here every
// KeepAliveInterval while the job runs, under the job key (a node that knows the key
// takes no other); see SpawnRequest.KeepAlive.
func KeepAliveSubject(jobID string) string { return subject(jobID, "keepalive") }

// KeepAlive renews a job's lease on its nodes. It says nothing more: what counts is that
// it verifies under the job's key.
type KeepAlive struct{}

// ControlSubject: requests to a running job (ControlRequest), answered by the job's launcher
// with a ControlReply.
func ControlSubject(jobID string) string { return subject(jobID, "ctl") }

// ProfileSubject: every rank of a job publishes its profiler.RankProfile here, JSON-encoded,
// once per profile period (MPIOS_PROFILE_EVERY). The IOS agent of the rank's node (pcmd) and
// mpirun --profile-out subscribe to it.
func ProfileSubject(jobID string) string { return subject(jobID, "profile") }

// ProfileSubjectAll matches the ProfileSubject of every job.
const ProfileSubjectAll = "mpios.job.*.profile"

// KeepAliveInterval is how often a launcher publishes on KeepAliveSubject.
const KeepAliveInterval = time.Second

// ValidateNode checks that name is usable as a node name: a NATS subject token and a file
// name, like a job id.
func ValidateNode(name string) error {
	if err := ValidateID(name); err != nil {
		return fmt.Errorf("job: node name %q: want 1 to 64 letters, digits, '-' or '_'", name)
	}
	return nil
}

// Limits on node messages, so a bad message cannot make a node or a launcher misbehave.
const (
	MaxSlots     = 4096                  // NodeInfo.Slots
	MaxArgs      = 4096                  // SpawnRequest.Args
	MaxEnv       = 1024                  // SpawnRequest.Env
	MinInterval  = 10 * time.Millisecond // NodeInfo.Interval and SpawnRequest.KeepAlive
	MaxInterval  = time.Hour             // NodeInfo.Interval and SpawnRequest.KeepAlive
	maxPathBytes = 4096
)

// RankInfo is a rank a node runs.
type RankInfo struct {
	Job     string    `msgpack:"job"`
	Rank    int       `msgpack:"rank"`
	PID     int       `msgpack:"pid"`
	Started time.Time `msgpack:"started"`
	// Successor says the process took over a migrated rank (started with EnvMigrate): its
	// arrival starts the IOS stability cooldown, which a fresh start does not.
	Successor bool `msgpack:"successor,omitempty"`
}

// NodeInfo describes a node and its pcmd.
type NodeInfo struct {
	Name      string        `msgpack:"name"`
	Slots     int           `msgpack:"slots"` // ranks it accepts at once
	Used      int           `msgpack:"used"`  // ranks it runs now
	Load      [3]float64    `msgpack:"load"`  // 1, 5 and 15 minute load averages
	Advertise string        `msgpack:"advertise"`
	PID       int           `msgpack:"pid"` // pcmd's pid
	Version   string        `msgpack:"version"`
	Interval  time.Duration `msgpack:"interval"` // heartbeat period; gone after MissedBeats of them
	Seq       uint64        `msgpack:"seq"`      // heartbeat counter
	Leaving   bool          `msgpack:"leaving"`  // the last heartbeat of a pcmd shutting down
	Ranks     []RankInfo    `msgpack:"ranks"`

	// Draining: the node takes no new ranks, it is leaving (pcmd drain).
	Draining bool `msgpack:"draining,omitempty"`

	// Card is the node's key card (ctlauth.NodeCard: its signing and curve keys), signed by
	// its signing key for NodeCardSubject; launchers seal job secrets for its curve key.
	Card []byte `msgpack:"card,omitempty"`
}

// MissedBeats is how many heartbeat intervals may pass without one before a node is gone.
const MissedBeats = 3

// GoneAfter is how long after its last heartbeat the node counts as gone.
func (n NodeInfo) GoneAfter() time.Duration { return MissedBeats * n.Interval }

// Validate checks a NodeInfo received from the network.
func (n NodeInfo) Validate() error {
	if err := ValidateNode(n.Name); err != nil {
		return err
	}
	switch {
	case n.Slots < 0 || n.Slots > MaxSlots:
		return fmt.Errorf("job: node %s: %d slots, want 0 to %d", n.Name, n.Slots, MaxSlots)
	case n.Used < 0 || len(n.Ranks) > MaxSlots:
		return fmt.Errorf("job: node %s: %d used slots, %d ranks", n.Name, n.Used, len(n.Ranks))
	case n.Interval < MinInterval || n.Interval > MaxInterval:
		return fmt.Errorf("job: node %s: heartbeat interval %v outside [%v,%v]", n.Name, n.Interval, MinInterval, MaxInterval)
	}
	return nil
}

// PeerInfo is a node as another node last heard of it.
type PeerInfo struct {
	Info NodeInfo      `msgpack:"info"`
	Age  time.Duration `msgpack:"age"` // since its last heartbeat, by the reporting node's clock
}

// NodeView is a node's reply on NodesDiscoverSubject: itself and the peers it has heard
// heartbeats from, including those that went silent (so a newcomer learns who is gone).
type NodeView struct {
	Self  NodeInfo   `msgpack:"self"`
	Peers []PeerInfo `msgpack:"peers"`
}

// SpawnRequest asks a node to start one rank.
type SpawnRequest struct {
	Job  string   `msgpack:"job"`
	Rank int      `msgpack:"rank"`
	Path string   `msgpack:"path"` // absolute path of the executable on the node
	Args []string `msgpack:"args"`
	// Env holds MPIOS_* variables only (the node refuses others, as LD_PRELOAD and the like
	// would run code that its --allow list does not allow); the rank gets pcmd's own
	// environment plus these, and pcmd sets EnvBind, EnvNode and possibly EnvCkptDir itself.
	Env []string `msgpack:"env"`
	Dir string   `msgpack:"dir"` // absolute working directory on the node; "" = pcmd's
	// Out and Exit are where output lines and the exit go; "" means RankOutSubject and
	// RankExitSubject. Others must be in the job's subject space or an _INBOX.
	Out  string `msgpack:"out"`
	Exit string `msgpack:"exit"`
	// KeepAlive, if positive, is a lease: when no message arrives on KeepAliveSubject for
	// that long, the node stops the job's ranks as their launcher is presumed dead.
	KeepAlive time.Duration `msgpack:"keepalive"`

	// SealedSecret is the job's secret (EnvSecret, which Env then must not hold) sealed for
	// the node's curve key by the launcher's per-job curve key SealedFrom (ctlauth.SealSecret).
	SealedSecret []byte `msgpack:"sealed_secret,omitempty"`
	SealedFrom   string `msgpack:"sealed_from,omitempty"`
	// SealedEnv holds the rank's NATS credentials (MPIOS_NATS_TOKEN, MPIOS_NATS_PASSWORD, a
	// MPIOS_NATS_URL with a user or password in it) and the secret of the job it restarts
	// from (EnvRestartSecret), sealed like SealedSecret by SealedFrom (ctlauth.SealEnv). The
	// node refuses them in Env.
	SealedEnv []byte `msgpack:"sealed_env,omitempty"`

	// The rank's checkpoint settings, typed: the node sets EnvRestart, EnvCkptKeep and
	// EnvCkptDir from them (and from its own store), and refuses those variables in Env.
	//
	// Restart is the job whose newest valid checkpoint the rank restarts from ("" = none;
	// the job itself after a failure). The node lets the job read that job's checkpoints
	// only if the same launcher started it.
	Restart string `msgpack:"restart,omitempty"`
	// CkptDir is the checkpoint store root for a node without a store of its own (pcmd
	// serve --store); absolute. "" = the rank's default.
	CkptDir string `msgpack:"ckpt_dir,omitempty"`
	// CkptKeep is how many committed checkpoints the job keeps (0 = the default).
	CkptKeep int `msgpack:"ckpt_keep,omitempty"`
	// Replaces, for the successor of a joint move (an exchange of ranks between nodes), are
	// ranks of the same job that run on the node and leave it in the same reconfiguration:
	// the node may admit this rank in the slot of one of them when it has none free, as
	// the two share it for the moment of the hand-over only.
	Replaces []int `msgpack:"replaces,omitempty"`
}

// TypedEnv are the variables of a rank's environment that a spawn request sets only through
// its typed fields (Job, Rank, Restart, CkptDir, CkptKeep) or that the node sets itself.
var TypedEnv = []string{EnvRestart, EnvCkptDir, EnvCkptKeep, EnvCkptCap, EnvNode, EnvBind}

// MaxCkptKeep bounds SpawnRequest.CkptKeep.
const MaxCkptKeep = 1024

// Validate checks a SpawnRequest's form; the node applies its own policy afterwards.
func (s SpawnRequest) Validate() error {
	if err := ValidateID(s.Job); err != nil {
		return err
	}
	if s.Rank < 0 {
		return fmt.Errorf("job: spawn: rank %d is negative", s.Rank)
	}
	if s.Path == "" || len(s.Path) > maxPathBytes || strings.IndexByte(s.Path, 0) >= 0 {
		return fmt.Errorf("job: spawn: program path %q is empty, too long or contains NUL", s.Path)
	}
	if len(s.Args) > MaxArgs || len(s.Env) > MaxEnv {
		return fmt.Errorf("job: spawn: %d arguments and %d environment variables, want at most %d and %d",
			len(s.Args), len(s.Env), MaxArgs, MaxEnv)
	}
	for _, a := range s.Args {
		if strings.IndexByte(a, 0) >= 0 {
			return errors.New("job: spawn: an argument contains NUL")
		}
	}
	for _, kv := range s.Env {
		name, _, ok := strings.Cut(kv, "=")
		if !ok || !validEnvName(name) || strings.IndexByte(kv, 0) >= 0 {
			return fmt.Errorf("job: spawn: environment entry %.40q is not NAME=VALUE", kv)
		}
		if !strings.HasPrefix(name, "MPIOS_") {
			return fmt.Errorf("job: spawn: environment variable %s: only MPIOS_* variables may be passed", name)
		}
		if slices.Contains(TypedEnv, name) {
			return fmt.Errorf("job: spawn: environment variable %s: set by the node from the request's typed fields, not passed", name)
		}
	}
	if s.Restart != "" {
		if err := ValidateID(s.Restart); err != nil {
			return fmt.Errorf("job: spawn: restart: %w", err)
		}
	}
	if s.CkptDir != "" && (!strings.HasPrefix(s.CkptDir, "/") || len(s.CkptDir) > maxPathBytes || strings.IndexByte(s.CkptDir, 0) >= 0) {
		return errors.New("job: spawn: checkpoint directory is not an absolute path, too long or contains NUL")
	}
	if s.CkptKeep < 0 || s.CkptKeep > MaxCkptKeep {
		return fmt.Errorf("job: spawn: %d checkpoints kept, want 0 to %d", s.CkptKeep, MaxCkptKeep)
	}
	if len(s.Replaces) > MaxSlots {
		return fmt.Errorf("job: spawn: replaces %d ranks, want at most %d", len(s.Replaces), MaxSlots)
	}
	for _, r := range s.Replaces {
		if r < 0 || r == s.Rank {
			return fmt.Errorf("job: spawn: replaces rank %d", r)
		}
	}
	if len(s.Dir) > maxPathBytes || strings.IndexByte(s.Dir, 0) >= 0 {
		return errors.New("job: spawn: working directory is too long or contains NUL")
	}
	for _, sub := range []string{s.Out, s.Exit} {
		if sub == "" {
			continue
		}
		if !validSubject(sub) || !strings.HasPrefix(sub, subject(s.Job, "")) && !strings.HasPrefix(sub, "_INBOX.") {
			return fmt.Errorf("job: spawn: reply subject %q: want one in %s> or _INBOX.>", sub, subject(s.Job, ""))
		}
	}
	if s.KeepAlive != 0 && (s.KeepAlive < MinInterval || s.KeepAlive > MaxInterval) {
		return fmt.Errorf("job: spawn: keepalive %v outside [%v,%v]", s.KeepAlive, MinInterval, MaxInterval)
	}
	if len(s.SealedSecret) > 0 || s.SealedFrom != "" {
		if len(s.SealedSecret) == 0 || s.SealedFrom == "" || len(s.SealedSecret) > 1024 || len(s.SealedFrom) > 128 {
			return errors.New("job: spawn: a sealed secret needs both the box (at most 1 KiB) and its sender's curve key")
		}
		if slices.ContainsFunc(s.Env, func(kv string) bool { return strings.HasPrefix(kv, EnvSecret+"=") }) {
			return fmt.Errorf("job: spawn: %s both sealed and in clear", EnvSecret)
		}
	}
	if slices.ContainsFunc(s.Env, func(kv string) bool { return strings.HasPrefix(kv, EnvRestartSecret+"=") }) {
		return fmt.Errorf("job: spawn: environment variable %s: a secret travels only sealed for the node (SealedEnv), not in clear", EnvRestartSecret)
	}
	if len(s.SealedEnv) > 0 && (s.SealedFrom == "" || len(s.SealedEnv) > 16<<10) {
		return errors.New("job: spawn: a sealed environment needs its sender's curve key and at most 16 KiB")
	}
	return nil
}

func validEnvName(name string) bool {
	if name == "" {
		return false
	}
	for i, r := range name {
		if !(r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || r == '_' || i > 0 && r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}

// validSubject accepts a literal subject (no wildcards, no empty tokens, no white space).
func validSubject(s string) bool {
	if s == "" || len(s) > 256 {
		return false
	}
	for _, tok := range strings.Split(s, ".") {
		if tok == "" || tok == "*" || tok == ">" || strings.ContainsAny(tok, " \t\r\n\x00*>") {
			return false
		}
	}
	return true
}

// SpawnRefusal says why a node did not start a rank.
type SpawnRefusal string

// Reasons for refusing a SpawnRequest.
const (
	RefuseInvalid    SpawnRefusal = "invalid"     // malformed or invalid request
	RefuseNotAllowed SpawnRefusal = "not-allowed" // the program does not match the node's --allow
	RefuseDuplicate  SpawnRefusal = "duplicate"   // the node already runs this rank of this job
	RefuseNoSlot     SpawnRefusal = "no-slot"     // every slot of the node is in use
	RefuseStopping   SpawnRefusal = "stopping"    // pcmd is shutting down
	RefuseFailed     SpawnRefusal = "failed"      // starting the process failed
)

// SpawnReply answers a SpawnRequest: the rank's pid, or why it was not started.
type SpawnReply struct {
	Node    string       `msgpack:"node"`
	PID     int          `msgpack:"pid"`
	Refusal SpawnRefusal `msgpack:"refusal,omitempty"`
	Error   string       `msgpack:"error,omitempty"` // human-readable, starts with "pcmd: node X"
}

// Output streams of RankOutput.Stream.
const (
	StreamStdout = 1
	StreamStderr = 2
)

// RankOutput is one line (without its newline) a rank wrote, or a piece of one: a line too
// long for one NATS message is sent as pieces with Partial set on all but the last.
type RankOutput struct {
	Stream  int    `msgpack:"stream"`
	Seq     uint64 `msgpack:"seq"` // 1, 2, ... over both streams: gaps are lost messages
	Line    []byte `msgpack:"line"`
	Partial bool   `msgpack:"partial,omitempty"`
}

// RankExit reports how a rank ended.
type RankExit struct {
	Code   int    `msgpack:"code"`             // exit code, -1 if killed by a signal
	Signal int    `msgpack:"signal"`           // the signal that killed it, or 0
	Sent   uint64 `msgpack:"sent"`             // RankOutput messages published before this one
	Reason string `msgpack:"reason,omitempty"` // why pcmd stopped it, if it did
	Error  string `msgpack:"error,omitempty"`  // the exit status could not be established
}

// SignalRequest asks a node to signal one rank (and the processes it started).
type SignalRequest struct {
	Job    string `msgpack:"job"`
	Rank   int    `msgpack:"rank"`
	Signal int    `msgpack:"signal"`
}

// Validate checks a SignalRequest's form.
func (s SignalRequest) Validate() error {
	if err := ValidateID(s.Job); err != nil {
		return err
	}
	if s.Rank < 0 {
		return fmt.Errorf("job: signal: rank %d is negative", s.Rank)
	}
	if s.Signal < 1 || s.Signal > 64 {
		return fmt.Errorf("job: signal: %d is not a signal number", s.Signal)
	}
	return nil
}

// ReplayRequest asks a node again for what one rank's process published on its output and
// exit subjects: its launcher missed some of it (NATS delivers nothing to a subscriber whose
// connection is down, and a node that reconnects first publishes into the void).
type ReplayRequest struct {
	Job  string `msgpack:"job"`
	Rank int    `msgpack:"rank"`
	// Out names the process: the output subject its spawn request gave (SpawnRequest.Out,
	// RankOutSubject if that was "").
	Out   string `msgpack:"out"`
	After uint64 `msgpack:"after"` // the output messages wanted are those with a greater Seq
}

// Validate checks a ReplayRequest's form.
func (r ReplayRequest) Validate() error {
	if err := ValidateID(r.Job); err != nil {
		return err
	}
	if r.Rank < 0 {
		return fmt.Errorf("job: replay: rank %d is negative", r.Rank)
	}
	if r.Out == "" {
		return errors.New("job: replay: no output subject")
	}
	return nil
}

// ReplayReply answers a ReplayRequest. A node keeps the latest output messages of each rank
// (a bounded number) and, for a while after a rank ended, its exit.
type ReplayReply struct {
	Output []RankOutput `msgpack:"output,omitempty"` // Seq > After, ascending; the oldest may be gone
	// More says the node has more after Output than fits in one NATS message: ask again
	// after the last one.
	More     bool      `msgpack:"more,omitempty"`
	Exit     *RankExit `msgpack:"exit,omitempty"`      // nil: the process still runs
	NotFound bool      `msgpack:"not_found,omitempty"` // the node knows no such process (any more)
	Error    string    `msgpack:"error,omitempty"`
}

// SignalReply answers a SignalRequest.
type SignalReply struct {
	NotFound bool   `msgpack:"not_found,omitempty"` // the node does not run that rank (any more)
	Error    string `msgpack:"error,omitempty"`
}

// ControlKind is the kind of a ControlRequest.
type ControlKind string

// Kinds of ControlRequest.
const (
	ControlMigrate    ControlKind = "migrate"    // move Rank to node To
	ControlCheckpoint ControlKind = "checkpoint" // take a coordinated checkpoint now
	ControlResize     ControlKind = "resize"     // change the number of ranks to NP (see resize.go)
)

// ControlRequest asks a running job to reconfigure, on ControlSubject. The job's launcher
// (mpirun) answers it.
type ControlRequest struct {
	Kind ControlKind `msgpack:"kind"`
	Rank int         `msgpack:"rank"` // migrate: the rank to move
	To   string      `msgpack:"to"`   // migrate: the target node
	// Ranks, if not empty, replaces Rank: every listed rank moves to To at the same
	// iteration boundary.
	Ranks []int `msgpack:"ranks,omitempty"`
	// Reason says who asked and why ("pcmd migrate by root", "ios: node n3 steals, gain
	// 0.4"); mpirun logs it and pcmd status shows it.
	Reason string `msgpack:"reason,omitempty"`
	// NP is a resize's new number of ranks; On names the nodes that take the new ranks
	// (grow) or give theirs up (shrink), empty for the free slots or the highest ranks.
	NP int         `msgpack:"np,omitempty"`
	On []NodeSlots `msgpack:"on,omitempty"`
	// Weights, if set, are the new ranks' shares of the distributed data (one positive
	// weight per new rank: rank r holds rows in proportion to Weights[r]); nil for equal
	// shares. With NP the job's size, the request rebalances the ranks in place.
	Weights []float64 `msgpack:"weights,omitempty"`
	// Drain: a node asks to move its own ranks because it is leaving (pcmd drain), which a
	// job started with --policy none still allows; the node's signature vouches for it.
	Drain bool `msgpack:"drain,omitempty"`
	// Exchange, if set, makes this migration one node's part of a joint move: the IOS
	// agents' exchange of ranks between nodes. The job moves every part of the exchange
	// at the same iteration boundary, all or none, once each node of Exchange.Parties sent
	// its part; so a node whose slots are all in use can take a rank for one that leaves.
	Exchange *ExchangePart `msgpack:"exchange,omitempty"`
}

// ExchangePart names the joint move a migration request is part of.
type ExchangePart struct {
	// Origin and ID name the exchange: the node that asked for it and its request number
	// there (iosbridge's steal request).
	Origin string `msgpack:"origin"`
	ID     uint64 `msgpack:"id"`
	// Parties are the nodes that give ranks in it, each of which sends its own part.
	Parties []string `msgpack:"parties"`
}

// MaxExchangeParties bounds ExchangePart.Parties (the agents exchange among 2 or 3 nodes).
const MaxExchangeParties = 8

// Validate checks an ExchangePart's form.
func (x ExchangePart) Validate() error {
	if err := ValidateNode(x.Origin); err != nil {
		return fmt.Errorf("job: exchange origin: %w", TrimPrefix(err))
	}
	if len(x.Parties) < 2 || len(x.Parties) > MaxExchangeParties {
		return fmt.Errorf("job: exchange %s/%d among %d nodes, want 2 to %d", x.Origin, x.ID, len(x.Parties), MaxExchangeParties)
	}
	for i, p := range x.Parties {
		if err := ValidateNode(p); err != nil {
			return fmt.Errorf("job: exchange party: %w", TrimPrefix(err))
		}
		if slices.Contains(x.Parties[:i], p) {
			return fmt.Errorf("job: exchange %s/%d names node %s twice", x.Origin, x.ID, p)
		}
	}
	if !slices.Contains(x.Parties, x.Origin) {
		return fmt.Errorf("job: exchange %s/%d: its origin is not among its nodes", x.Origin, x.ID)
	}
	return nil
}

// Validate checks a ControlRequest's form.
func (c ControlRequest) Validate() error {
	switch c.Kind {
	case ControlCheckpoint:
		return nil
	case ControlResize:
		return c.validateResize()
	case ControlMigrate:
		if c.Rank < 0 {
			return fmt.Errorf("job: migrate: rank %d is negative", c.Rank)
		}
		if len(c.Ranks) > MaxSlots {
			return fmt.Errorf("job: migrate: %d ranks, want at most %d", len(c.Ranks), MaxSlots)
		}
		for _, r := range c.Ranks {
			if r < 0 {
				return fmt.Errorf("job: migrate: rank %d is negative", r)
			}
		}
		if len(c.Reason) > 1024 {
			return errors.New("job: migrate: reason longer than 1024 bytes")
		}
		if c.Exchange != nil {
			if err := c.Exchange.Validate(); err != nil {
				return err
			}
			if !slices.Contains(c.Exchange.Parties, c.To) {
				return fmt.Errorf("job: migrate: exchange %s/%d: target %s is not among its nodes", c.Exchange.Origin, c.Exchange.ID, c.To)
			}
		}
		return ValidateNode(c.To)
	}
	return fmt.Errorf("job: control request kind %q: want %q, %q or %q", c.Kind, ControlMigrate, ControlCheckpoint, ControlResize)
}

// ControlReply answers a ControlRequest.
type ControlReply struct {
	OK      bool   `msgpack:"ok"`
	Message string `msgpack:"message,omitempty"`
	Error   string `msgpack:"error,omitempty"`
}

// Reconfiguration log (reconf.Log). The launcher turns accepted ControlRequests into numbered
// entries and publishes the whole log on ReconfSubject whenever it grows; a rank that subscribed late
// asks for it on ReconfGetSubject. At their next agreement point the ranks act on the
// entries every one of them has (the smallest prefix), so all act at the same boundary.

// ReconfSubject carries the reconf.Log of a job, published by its launcher.
func ReconfSubject(jobID string) string { return subject(jobID, "reconf") }

// ReconfGetSubject: request (empty), the launcher replies with the reconf.Log.
func ReconfGetSubject(jobID string) string { return subject(jobID, "reconf.get") }

// MigrateSubject: a migrating rank asks its launcher to start its successor (request
// MigrateRequest, reply MigrateReply).
func MigrateSubject(jobID string) string { return subject(jobID, "migrate") }

// SuccessorGoneSubject: the launcher tells a migrating rank that the successor it started
// ended before taking over (SuccessorGone), so the rank stops waiting for it.
func SuccessorGoneSubject(jobID string) string { return subject(jobID, "successor-gone") }

// SuccessorGone reports the end of a successor that never took over.
type SuccessorGone struct {
	Seq    uint64 `msgpack:"seq"`
	Rank   int    `msgpack:"rank"`
	Reason string `msgpack:"reason"`
}

// MigratedSubject: a migrating rank reports the outcome (MigrateReport).
func MigratedSubject(jobID string) string { return subject(jobID, "migrated") }

// MigrateRequest asks the launcher to start the successor of Rank for log entry Seq on the
// entry's node; the successor finds its predecessor through Handover (EnvMigrate).
type MigrateRequest struct {
	Seq        uint64 `msgpack:"seq"`
	Rank       int    `msgpack:"rank"`
	Handover   string `msgpack:"handover"`
	Iteration  int    `msgpack:"iteration"`
	StateBytes int64  `msgpack:"state_bytes"`
}

// Validate checks a MigrateRequest's form.
func (m MigrateRequest) Validate(size int) error {
	if m.Rank < 0 || m.Rank >= size {
		return fmt.Errorf("job: migrate request: rank %d outside [0,%d)", m.Rank, size)
	}
	if m.Seq == 0 || m.Handover == "" || len(m.Handover) > 512 {
		return fmt.Errorf("job: migrate request of rank %d: no entry number or hand-over address", m.Rank)
	}
	return nil
}

// MigrateReply answers a MigrateRequest: where the successor runs, or why it does not.
type MigrateReply struct {
	Node  string `msgpack:"node"`
	PID   int    `msgpack:"pid"`
	Error string `msgpack:"error,omitempty"`
}

// MigrateReport is a migrating rank's account of one migration.
type MigrateReport struct {
	Seq        uint64        `msgpack:"seq"`
	Rank       int           `msgpack:"rank"`
	To         string        `msgpack:"to"`
	OK         bool          `msgpack:"ok"`
	Error      string        `msgpack:"error,omitempty"`
	Iteration  int           `msgpack:"iteration"`
	StateBytes int64         `msgpack:"state_bytes"`
	Pause      time.Duration `msgpack:"pause"` // from entering the migration to handing over
}

// JobInfoSubject: request (empty); the job's launcher replies with its JobInfo.
func JobInfoSubject(jobID string) string { return subject(jobID, "info") }

// JobRank is where one rank of a job runs now.
type JobRank struct {
	Rank        int    `msgpack:"rank"`
	Node        string `msgpack:"node"` // "" when the launcher runs it locally
	PID         int    `msgpack:"pid"`
	Incarnation int    `msgpack:"incarnation"` // migrations so far
}

// Migration is one migration as its launcher saw it.
type Migration struct {
	Seq       uint64        `msgpack:"seq"`
	Rank      int           `msgpack:"rank"`
	From      string        `msgpack:"from"`
	To        string        `msgpack:"to"`
	Reason    string        `msgpack:"reason,omitempty"`
	State     reconf.State  `msgpack:"state"` // proposed, prepared (successor running), committed, aborted
	Error     string        `msgpack:"error,omitempty"`
	Iteration int           `msgpack:"iteration,omitempty"`
	Pause     time.Duration `msgpack:"pause,omitempty"`
	At        time.Time     `msgpack:"at"`
}

// JobInfo describes a running job: its ranks, its migrations rank by rank, and its
// reconfiguration log.
type JobInfo struct {
	Job        string      `msgpack:"job"`
	Size       int         `msgpack:"size"`
	Policy     string      `msgpack:"policy,omitempty"`
	Ranks      []JobRank   `msgpack:"ranks"`
	Migrations []Migration `msgpack:"migrations"`
	// Reconfigurations is the job's log: every accepted request, in order, with its state.
	Reconfigurations []reconf.Reconfiguration `msgpack:"reconfigurations,omitempty"`
	// Malleable says the ranks keep distributed data (pcm.NewBlock): the job can shrink.
	Malleable bool `msgpack:"malleable,omitempty"`
}

// Checkpoint pieces on other nodes. A rank restarting on a node that does not hold its piece
// asks the pcmd of the node that does: the reply names a one-time TCP address where the
// piece's bytes are streamed (NATS carries only the request), and the rank checks them
// against the manifest's checksum.

// PieceSubject: request PieceRequest from a process of job requester, reply PieceReply,
// answered by node's pcmd. Both travel under requester's job key (ctlauth): the node
// verifies the request with the key it learned from the job's spawn requests, and the
// requester ignores replies that do not verify.
func PieceSubject(node, requester string) string { return "mpios.node." + node + ".piece." + requester }

// PieceSubjects is what node's pcmd subscribes to for piece requests: the requesting job is
// the last token (RequesterOf).
func PieceSubjects(node string) string { return "mpios.node." + node + ".piece.*" }

// RequesterOf returns the job that a piece, copy or manifest request was published for: the
// last token of its subject.
func RequesterOf(subject string) string {
	return subject[strings.LastIndexByte(subject, '.')+1:]
}

// PieceRequest names one rank's piece of checkpoint Seq of job Job.
type PieceRequest struct {
	Job  string `msgpack:"job"`
	Seq  uint64 `msgpack:"seq"`
	Rank int    `msgpack:"rank"`
}

// Validate checks a PieceRequest's form.
func (p PieceRequest) Validate() error {
	if err := ValidateID(p.Job); err != nil {
		return err
	}
	if p.Rank < 0 || p.Seq == 0 {
		return fmt.Errorf("job: piece request: rank %d of checkpoint %d", p.Rank, p.Seq)
	}
	return nil
}

// PieceReply says where to read a piece: connect to Addr, send the offer's proof
// (ctlauth.JobKey.OfferProof of Token: the token alone, which others may read, is not
// enough), read Size bytes. The offer expires after PieceOfferTTL.
type PieceReply struct {
	Addr  string `msgpack:"addr"`
	Token []byte `msgpack:"token"`
	Size  int64  `msgpack:"size"`
	Error string `msgpack:"error,omitempty"`
	// Sparse: the copy is to be sent as a sparse stream (ckptstore.PieceBuffer.WriteSparseTo),
	// as PieceCopyRequest.Sparse offered. A node that does not say so takes the plain bytes.
	Sparse bool `msgpack:"sparse,omitempty"`
	// Stored: the node stored the copy sent inline (PieceCopyRequest.Inline), verified and
	// durable; there is no offer.
	Stored bool `msgpack:"stored,omitempty"`
}

// PieceOfferTTL is how long a PieceReply's address waits for its connection.
const PieceOfferTTL = 30 * time.Second

// PieceCopySubject: request PieceCopyRequest, reply PieceReply, answered by node's pcmd,
// which keeps a buddy copy of another node's piece. The reply names a one-time TCP address:
// connect, send the proof of Token (as for PieceReply), then the piece's Size bytes (or, if
// the reply says Sparse, the piece as a sparse stream without its zero blocks), and read one
// line, "ok" once the copy is verified and durable, or the reason it is not. requester is
// the job whose piece it is: a job copies only its own pieces.
func PieceCopySubject(node, requester string) string {
	return "mpios.node." + node + ".piececopy." + requester
}

// PieceCopySubjects is what node's pcmd subscribes to for buddy copies.
func PieceCopySubjects(node string) string { return "mpios.node." + node + ".piececopy.*" }

// PieceCopyRequest offers a copy of a piece: its size and checksum as the owning node's
// store recorded them.
type PieceCopyRequest struct {
	PieceRequest `msgpack:",inline"`
	Size         int64  `msgpack:"size"`
	Checksum     string `msgpack:"checksum"`
	// Sparse offers to send the piece as a sparse stream; the reply says whether the node
	// takes it.
	Sparse bool `msgpack:"sparse,omitempty"`
	// From is the node the copy comes from (the sending rank's pcmd node), whose link to
	// this node the copy's bandwidth is measured for (the IOS agent's per-peer bandwidth);
	// "" from an older process: the copy is not measured.
	From string `msgpack:"from,omitempty"`
	// Inline is the whole sparse stream of a piece that is mostly zeros, at most
	// MaxInlineCopy bytes (Sparse must be set): the node stores it from the request itself,
	// signed with it, and replies Stored, without an offer or a connection (MPI's eager
	// protocol for small messages). A node that does not know the field makes an offer as
	// usual, and the stream goes over its connection.
	Inline []byte `msgpack:"inline,omitempty"`
}

// MaxInlineCopy caps PieceCopyRequest.Inline: a few run headers and blocks, never bulk data
// (which travels over the offer's connection, not over NATS).
const MaxInlineCopy = 8 << 10

// Validate checks a PieceCopyRequest's form.
func (p PieceCopyRequest) Validate() error {
	if err := p.PieceRequest.Validate(); err != nil {
		return err
	}
	if len(p.Inline) > MaxInlineCopy {
		return fmt.Errorf("job: piece copy request with %d bytes inline: at most %d", len(p.Inline), MaxInlineCopy)
	}
	if len(p.Inline) > 0 && !p.Sparse {
		return errors.New("job: piece copy request with bytes inline that are not a sparse stream")
	}
	if p.From != "" {
		if err := ValidateNode(p.From); err != nil {
			return fmt.Errorf("job: piece copy request from: %w", err)
		}
	}
	return nil
}

// ManifestsSubject: request ManifestsRequest from a process of job requester; every pcmd
// whose store has committed checkpoints of the job asked for, and that knows requester's
// key, replies with a ManifestsReply under that key (the others stay silent). A job
// restarting on nodes that hold none of its checkpoints finds them this way.
func ManifestsSubject(requester string) string { return "mpios.nodes.manifests." + requester }

// ManifestsSubjects is what every pcmd subscribes to for manifest requests.
const ManifestsSubjects = "mpios.nodes.manifests.*"

// ManifestsRequest asks for the committed checkpoints of Job.
type ManifestsRequest struct {
	Job string `msgpack:"job"`
}

// ManifestsReply lists a node's committed manifests of a job, each JSON-encoded
// (ckptstore.Manifest).
type ManifestsReply struct {
	Node      string   `msgpack:"node"`
	Manifests [][]byte `msgpack:"manifests"`
}
