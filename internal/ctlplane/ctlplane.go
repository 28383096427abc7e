// Package ctlplane keeps mpios's processes on the NATS control plane through its outages:
// the connection options every process uses (reconnect forever with backoff, buffer what is
// published meanwhile) and a Watch that keeps an observer from mistaking its own outage for
// the death of the peers it cannot hear.
//
// Request is the one way mpios's processes ask a question on the control plane whose answer
// they authenticate: anyone on the server can answer first, so the first reply that verifies
// counts, not the first reply (request.go).
//
// A multi-node job survives an outage of up to a grace period (DefaultGrace, or
// MPIOS_NATS_GRACE): while an observer's connection is down, and for the time its peers
// need to be heard again after it comes back, no silence counts against them. An outage
// longer than the grace is a lost control plane, and silence counts in full again.
package ctlplane

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// DefaultGrace is how long an outage of the control plane is ridden out by default.
const DefaultGrace = 20 * time.Second

// EnvGrace overrides DefaultGrace in the processes that judge others by their silence
// (mpirun, pcmd): a Go duration such as "30s".
const EnvGrace = "MPIOS_NATS_GRACE"

// Reconnection pacing: the first attempts come quickly (a server restart is over in
// seconds), with jitter so that a whole cluster does not reconnect in one burst.
const (
	reconnectWait   = 250 * time.Millisecond
	reconnectJitter = 250 * time.Millisecond
	// reconnectBufSize bounds what is published during an outage and sent once the
	// connection is back (exit statuses, reports, heartbeats): nats.go's default, 8 MiB,
	// made explicit because losing it would lose exit codes.
	reconnectBufSize = 8 << 20
)

// GraceFromEnv returns the grace set by MPIOS_NATS_GRACE in env (nil: the process's
// environment), or DefaultGrace.
func GraceFromEnv(env []string) (time.Duration, error) {
	v := ""
	if env == nil {
		v = os.Getenv(EnvGrace)
	} else {
		for _, kv := range env {
			if s, ok := strings.CutPrefix(kv, EnvGrace+"="); ok {
				v = s
			}
		}
	}
	if v == "" {
		return DefaultGrace, nil
	}
	d, err := time.ParseDuration(strings.TrimSpace(v))
	if err != nil || d < 0 {
		return 0, fmt.Errorf("ctlplane: %s=%q: want a duration >= 0, such as 30s", EnvGrace, v)
	}
	return d, nil
}

// Watch follows an observer's own connection to the control plane and says how long a
// peer it last heard from at some instant counts as silent. Its zero value is a watch with
// DefaultGrace on a connection that is up. It is pure logic (time is passed in) and safe for
// concurrent use: the connection's handlers feed it while the observer's loop asks it.
type Watch struct {
	// Grace is the longest outage ridden out; 0 = DefaultGrace.
	Grace time.Duration

	mu     sync.Mutex
	down   bool
	downAt time.Time // when the connection was lost, while down
	upAt   time.Time // when it came back last
}

func (w *Watch) grace() time.Duration {
	if w.Grace <= 0 {
		return DefaultGrace
	}
	return w.Grace
}

// Disconnected records that the observer lost its connection at now.
func (w *Watch) Disconnected(now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.down {
		w.down, w.downAt = true, now
	}
}

// Reconnected records that the observer's connection came back at now.
func (w *Watch) Reconnected(now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.down, w.upAt = false, now
}

// Silence returns how long a peer last heard at last counts as silent at now. While the
// observer's own connection is down, and not for longer than the grace, it is 0: the
// observer hears nobody, which says nothing about them. Once the connection is back, silence
// counts from the reconnection, so that peers have their usual time to be heard again.
func (w *Watch) Silence(now, last time.Time) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.down {
		if now.Sub(w.downAt) < w.grace() {
			return 0
		}
		return now.Sub(last)
	}
	if w.upAt.After(last) {
		last = w.upAt
	}
	return max(now.Sub(last), 0)
}

// Outage returns how long the observer's connection has been down at now, and the grace;
// 0 while it is up. A silence beyond the grace during an outage is the observer's own loss
// of the control plane as much as the peers': what declares them gone says so.
func (w *Watch) Outage(now time.Time) (down, grace time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.down {
		down = max(now.Sub(w.downAt), 0)
	}
	return down, w.grace()
}

// Settling reports whether the observer's connection is down, or came back less than
// window ago: then "no responders" to a request proves nothing, since the peer may not have
// reconnected and subscribed again yet.
func (w *Watch) Settling(now time.Time, window time.Duration) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.down || (!w.upAt.IsZero() && now.Sub(w.upAt) < window)
}

// Options are the connection options every mpios process uses on the control plane:
// reconnect forever with jittered backoff, buffer publishes during an outage, and report
// the connection's ups and downs to w (may be nil) and logf (may be nil, without trailing
// newline). Add the process's own options (name, credentials, timeouts) after them.
func Options(w *Watch, logf func(format string, args ...any)) []nats.Option {
	if logf == nil {
		logf = func(string, ...any) {}
	}
	return []nats.Option{
		nats.MaxReconnects(-1),
		nats.ReconnectWait(reconnectWait),
		nats.ReconnectJitter(reconnectJitter, time.Second),
		nats.ReconnectBufSize(reconnectBufSize),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if w != nil {
				w.Disconnected(time.Now())
			}
			if err != nil {
				logf("lost connection to NATS: %v", err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			if w != nil {
				w.Reconnected(time.Now())
			}
			logf("reconnected to NATS at %s", nc.ConnectedUrlRedacted())
		}),
	}
}
