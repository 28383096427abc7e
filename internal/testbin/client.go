package testbin

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"
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
