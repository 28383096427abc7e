package main

import (
	"sync"
	"testing"

	"github.com/nats-io/nats.go"
)

// recorder keeps every message an attacker's connection saw on a subject; its methods are
// safe while the subscription delivers.
type recorder struct {
	mu   sync.Mutex
	msgs []*nats.Msg
}

// record subscribes nc to subject (wildcards allowed) and returns what keeps the messages;
// the subscription reaches the server before record returns.
func record(t *testing.T, nc *nats.Conn, subject string) *recorder {
	t.Helper()
	r := &recorder{}
	if _, err := nc.Subscribe(subject, func(m *nats.Msg) {
		r.mu.Lock()
		r.msgs = append(r.msgs, m)
		r.mu.Unlock()
	}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return r
}

// take returns the messages recorded so far and forgets them.
func (r *recorder) take() []*nats.Msg {
	r.mu.Lock()
	defer r.mu.Unlock()
	got := r.msgs
	r.msgs = nil
	return got
}
