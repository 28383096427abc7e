// Package profilewriter records the profiles a job's ranks publish (mpirun --profile-out):
// every message on the job's profile subject becomes one line of a JSON-lines file.
package profilewriter

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// drainTimeout bounds the wait for the profiles in flight when the writer stops.
const drainTimeout = 2 * time.Second

// Writer appends every profile published on a subject to a file, one JSON object per line.
type Writer struct {
	path string
	f    *os.File
	sub  *nats.Subscription
	logf func(format string, args ...any)
	open func(subject string, data []byte) ([]byte, error)

	mu     sync.Mutex
	w      *bufio.Writer
	bad    int
	forged int
}

// Start creates the file at path (truncating it) and records the profiles published on
// subject, each after open (nil: none) verified it and returned its body: the job's
// profiles travel under its key, and a forged one must not reach the file. logf receives the
// writer's complaints (malformed or forged messages, write errors).
func Start(nc *nats.Conn, subject, path string, open func(subject string, data []byte) ([]byte, error), logf func(format string, args ...any)) (*Writer, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("profilewriter: %w", err)
	}
	pw := &Writer{path: path, f: f, w: bufio.NewWriter(f), logf: logf, open: open}
	pw.sub, err = nc.Subscribe(subject, pw.take)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("profilewriter: subscribe to %s: %w", subject, err)
	}
	return pw, nil
}

// take writes one profile; anything that is not a one-line JSON value is dropped.
func (pw *Writer) take(m *nats.Msg) {
	pw.mu.Lock()
	defer pw.mu.Unlock()
	data := m.Data
	if pw.open != nil {
		var err error
		if data, err = pw.open(m.Subject, m.Data); err != nil {
			if pw.forged++; pw.forged == 1 {
				pw.logf("ignoring a profile message that does not verify: %v", err)
			}
			return
		}
	}
	if !json.Valid(data) || bytes.ContainsAny(data, "\n") {
		if pw.bad++; pw.bad == 1 {
			pw.logf("ignoring a malformed profile message")
		}
		return
	}
	pw.w.Write(data) // a write error stays in the bufio.Writer and is reported by Stop
	pw.w.WriteByte('\n')
}

// Stop records the profiles still in flight, then flushes and closes the file.
func (pw *Writer) Stop(nc *nats.Conn) {
	// After the round trip every profile published before is queued for the subscription;
	// draining it hands them to take before the subscription closes.
	_ = nc.FlushTimeout(time.Second)
	closed := pw.sub.StatusChanged(nats.SubscriptionClosed)
	if err := pw.sub.Drain(); err == nil {
		select {
		case <-closed:
		case <-time.After(drainTimeout):
			pw.logf("--profile-out %s: profiles still in flight were dropped", pw.path)
		}
	}
	pw.mu.Lock()
	defer pw.mu.Unlock()
	if err := pw.w.Flush(); err != nil {
		pw.logf("--profile-out %s: %v", pw.path, err)
	}
	if err := pw.f.Close(); err != nil {
		pw.logf("--profile-out %s: %v", pw.path, err)
	}
}
