package ctlauth

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nkeys"

	"github.com/mpios/mpios/internal/job"
)

// Errors of Verify. Each is wrapped with context; callers branch with errors.Is.
var (
	// ErrMalformed: the data is not an envelope this version understands.
	ErrMalformed = errors.New("ctlauth: malformed envelope")
	// ErrForged: the tag or signature does not verify for this subject, sender and body
	// (forged, altered, moved to another subject, or made with another job's key).
	ErrForged = errors.New("ctlauth: authentication failed")
	// ErrUntrusted: the signing key is valid but not in the receiver's KeySet.
	ErrUntrusted = errors.New("ctlauth: signer not trusted")
	// ErrReplay: this sender's sequence number was seen already, or is too far behind.
	ErrReplay = errors.New("ctlauth: replayed message")
	// ErrStale: the message's time is outside the accepted skew (or before NotBefore).
	ErrStale = errors.New("ctlauth: stale message")
	// ErrTooManySenders: the replay guard tracks its maximum of active senders.
	ErrTooManySenders = errors.New("ctlauth: too many active senders")
)

// Version is the envelope format version.
const Version = 1

// Scheme says how an envelope is authenticated.
type Scheme uint8

// Schemes.
const (
	SchemeJobMAC   Scheme = 1 // HMAC-SHA256 under a JobKey; Auth has macSize bytes
	SchemeNKeySign Scheme = 2 // ed25519 signature by Envelope.Key; Auth has sigSize bytes
)

// String names the scheme for messages.
func (s Scheme) String() string {
	switch s {
	case SchemeJobMAC:
		return "job MAC"
	case SchemeNKeySign:
		return "NKey signature"
	}
	return "scheme(" + strconv.Itoa(int(s)) + ")"
}

const (
	macSize = 32
	sigSize = 64
	// MaxBody bounds an envelope's body: NATS messages are at most 64 MiB when configured
	// to the server's maximum, 1 MiB by default.
	MaxBody = 64 << 20
	// maxSubject is NATS's practical limit on a subject's length.
	maxSubject = 1024
)

// Role is what kind of process sent a message.
type Role uint8

// Roles.
const (
	RoleLauncher Role = 1 // the job's mpirun
	RoleRank     Role = 2 // a rank (Sender.Rank, Sender.Incarnation)
	RoleNode     Role = 3 // a node's pcmd (Sender.Node)
	RoleTool     Role = 4 // the job owner's tools (pcmd migrate, pcmd checkpoint)
)

// String names the role for messages.
func (r Role) String() string {
	switch r {
	case RoleLauncher:
		return "launcher"
	case RoleRank:
		return "rank"
	case RoleNode:
		return "node"
	case RoleTool:
		return "tool"
	}
	return "role(" + strconv.Itoa(int(r)) + ")"
}

// Sender is who claims to have sent a message. The claim is only as good as the key that
// authenticated it: under a JobKey every process of the job can claim any role of the job.
type Sender struct {
	Role        Role   `msgpack:"role"`
	Rank        int    `msgpack:"rank,omitempty"`        // RoleRank
	Incarnation int    `msgpack:"incarnation,omitempty"` // RoleRank: processes that held the rank before
	Node        string `msgpack:"node,omitempty"`        // RoleNode; for others the node they run on, if any
	// Job is the job a launcher speaks for (RoleLauncher, optional): it separates the
	// numbering of one user's concurrent mpiruns, which sign with the same key.
	Job string `msgpack:"job,omitempty"`
	// Tool names one invocation of the owner's tools (RoleTool, optional: its host and pid,
	// ToolInstance): it separates the numbering of concurrent invocations, which sign with
	// the same key and number their messages from their own start time.
	Tool string `msgpack:"tool,omitempty"`
}

// maxTool bounds Sender.Tool.
const maxTool = 128

// ToolInstance names this process as a Sender.Tool: "HOST/PID".
func ToolInstance() string {
	host, _ := os.Hostname()
	host = strings.Map(func(r rune) rune {
		if notToolChar(r) {
			return -1
		}
		return r
	}, host)
	return fmt.Sprintf("%.64s/%d", host, os.Getpid())
}

// notToolChar: a Sender.Tool holds printable ASCII only, no space.
func notToolChar(r rune) bool { return r < '!' || r > '~' }

// Validate checks that s is a well-formed identity.
func (s Sender) Validate() error {
	switch s.Role {
	case RoleLauncher, RoleTool, RoleNode, RoleRank:
	default:
		return fmt.Errorf("%w: sender role %d", ErrMalformed, s.Role)
	}
	if s.Rank < 0 || s.Incarnation < 0 || (s.Role != RoleRank && (s.Rank != 0 || s.Incarnation != 0)) {
		return fmt.Errorf("%w: sender %v: rank %d incarnation %d", ErrMalformed, s.Role, s.Rank, s.Incarnation)
	}
	if s.Role == RoleNode && s.Node == "" {
		return fmt.Errorf("%w: node sender without a node name", ErrMalformed)
	}
	if s.Node != "" {
		if err := job.ValidateNode(s.Node); err != nil {
			return fmt.Errorf("%w: sender: %v", ErrMalformed, err)
		}
	}
	if s.Tool != "" {
		if s.Role != RoleTool || len(s.Tool) > maxTool || strings.ContainsFunc(s.Tool, notToolChar) {
			return fmt.Errorf("%w: %v sender names tool %.64q", ErrMalformed, s.Role, s.Tool)
		}
	}
	if s.Job != "" {
		if s.Role != RoleLauncher {
			return fmt.Errorf("%w: %v sender names job %.64q", ErrMalformed, s.Role, s.Job)
		}
		if err := job.ValidateID(s.Job); err != nil {
			return fmt.Errorf("%w: sender: %v", ErrMalformed, err)
		}
	}
	return nil
}

// String identifies the sender, as "rank 3.1@n2" (rank 3, incarnation 1, on node n2);
// distinct senders have distinct strings.
func (s Sender) String() string {
	out := s.Role.String()
	if s.Role == RoleRank {
		out += " " + strconv.Itoa(s.Rank) + "." + strconv.Itoa(s.Incarnation)
	}
	if s.Job != "" {
		out += " of job " + s.Job
	}
	if s.Tool != "" {
		out += " " + s.Tool
	}
	if s.Node != "" {
		out += "@" + s.Node
	}
	return out
}

// Envelope is the wire form of an authenticated message (msgpack). Subject is not carried:
// the receiver passes the subject the message arrived on, and Auth covers it.
type Envelope struct {
	Version uint8  `msgpack:"v"`
	Scheme  Scheme `msgpack:"scheme"`
	From    Sender `msgpack:"from"`
	Key     string `msgpack:"key,omitempty"` // SchemeNKeySign: the signer's NKey public key
	Seq     uint64 `msgpack:"seq"`           // per sender, from 1, strictly increasing
	Time    int64  `msgpack:"time"`          // sending time, Unix nanoseconds
	Body    []byte `msgpack:"body"`
	Auth    []byte `msgpack:"auth"` // HMAC-SHA256 tag or ed25519 signature
}

// DecodeEnvelope parses and checks the form of an envelope; it authenticates nothing.
func DecodeEnvelope(data []byte) (Envelope, error) {
	var e Envelope
	if err := job.Decode(data, &e); err != nil {
		return Envelope{}, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if err := e.validate(); err != nil {
		return Envelope{}, err
	}
	return e, nil
}

func (e *Envelope) validate() error {
	if e.Version != Version {
		return fmt.Errorf("%w: version %d, want %d", ErrMalformed, e.Version, Version)
	}
	switch e.Scheme {
	case SchemeJobMAC:
		if len(e.Auth) != macSize || e.Key != "" {
			return fmt.Errorf("%w: job MAC of %d bytes, key %q", ErrMalformed, len(e.Auth), e.Key)
		}
	case SchemeNKeySign:
		if len(e.Auth) != sigSize || !nkeys.IsValidPublicKey(e.Key) || nkeys.IsValidPublicCurveKey(e.Key) {
			return fmt.Errorf("%w: signature of %d bytes by key %.60q", ErrMalformed, len(e.Auth), e.Key)
		}
	default:
		return fmt.Errorf("%w: %v", ErrMalformed, e.Scheme)
	}
	if e.Seq == 0 {
		return fmt.Errorf("%w: sequence number 0", ErrMalformed)
	}
	if len(e.Body) > MaxBody {
		return fmt.Errorf("%w: body of %d bytes, at most %d", ErrMalformed, len(e.Body), MaxBody)
	}
	return e.From.Validate()
}

// signedBytes is what the tag or signature covers: every field but Auth, plus the subject,
// each length-prefixed so that no two different messages share an encoding.
func (e *Envelope) signedBytes(subject string) []byte {
	b := make([]byte, 0, 64+len(subject)+len(e.From.Node)+len(e.From.Job)+len(e.Key)+len(e.Body))
	b = append(b, "mpios-ctlauth\x00"...)
	b = append(b, e.Version, byte(e.Scheme), byte(e.From.Role))
	b = appendString(b, subject)
	b = binary.BigEndian.AppendUint64(b, uint64(e.From.Rank))
	b = binary.BigEndian.AppendUint64(b, uint64(e.From.Incarnation))
	b = appendString(b, e.From.Node)
	b = appendString(b, e.From.Job)
	b = appendString(b, e.Key)
	b = binary.BigEndian.AppendUint64(b, e.Seq)
	b = binary.BigEndian.AppendUint64(b, uint64(e.Time))
	b = appendString(b, string(e.Body))
	return b
}

func appendString(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint64(b, uint64(len(s)))
	return append(b, s...)
}

// Message is a verified envelope's content.
type Message struct {
	From Sender
	Key  string // the signer's NKey public key (SchemeNKeySign), else ""
	Seq  uint64
	Time time.Time
	Body []byte
}

// newEnvelope checks subject and body and returns the envelope to authenticate.
func newEnvelope(subject string, scheme Scheme, from Sender, key string, seq uint64, body []byte, now time.Time) (Envelope, error) {
	if subject == "" || len(subject) > maxSubject {
		return Envelope{}, fmt.Errorf("ctlauth: subject of %d bytes", len(subject))
	}
	if len(body) > MaxBody {
		return Envelope{}, fmt.Errorf("ctlauth: body of %d bytes, at most %d", len(body), MaxBody)
	}
	return Envelope{Version: Version, Scheme: scheme, From: from, Key: key, Seq: seq, Time: now.UnixNano(), Body: body}, nil
}

// decodeScheme decodes an envelope received on subject that must use scheme.
func decodeScheme(data []byte, subject string, scheme Scheme) (Envelope, error) {
	e, err := DecodeEnvelope(data)
	if err != nil {
		return Envelope{}, err
	}
	if e.Scheme != scheme {
		return Envelope{}, fmt.Errorf("%w: on %s: %v, want a %v", ErrMalformed, subject, e.Scheme, scheme)
	}
	return e, nil
}

// message returns the content of a verified envelope.
func (e *Envelope) message() Message {
	return Message{From: e.From, Seq: e.Seq, Time: time.Unix(0, e.Time), Body: e.Body}
}

// lockedGuard is a ReplayGuard shared by a verifier's concurrent callers.
type lockedGuard struct {
	mu sync.Mutex
	g  *ReplayGuard
}

func (l *lockedGuard) accept(sender string, e *Envelope, now time.Time) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.g.Accept(sender, e.Seq, time.Unix(0, e.Time), now)
}
