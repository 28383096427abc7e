package testbin

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mpios/mpios/internal/ctlauth"
	"github.com/mpios/mpios/internal/job"
)

// Connect connects to the NATS server at url for the duration of the test.
func Connect(t testing.TB, url string) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// WaitFor polls cond every 10 ms until it holds, and fails the test, naming what it waited
// for, if limit passes first.
func WaitFor(t testing.TB, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(limit); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", limit, what)
		}
	}
}

// NodeAnswer decodes into v a pcmd's answer to a request (spawn, signal), which it signs
// with its node key for the inbox the answer came on.
func NodeAnswer(t testing.TB, msg *nats.Msg, v any) {
	t.Helper()
	m, err := ctlauth.VerifyStatement(msg.Subject, msg.Data, ctlauth.AnyKey{})
	if err != nil {
		t.Fatalf("answer on %s: not signed by a node: %v", msg.Subject, err)
	}
	if m.From.Role != ctlauth.RoleNode {
		t.Fatalf("answer on %s signed as %s, not as a node", msg.Subject, m.From)
	}
	if err := job.Decode(m.Body, v); err != nil {
		t.Fatalf("answer on %s: %v", msg.Subject, err)
	}
}
