package mpi

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mpios/mpios/comm"
)

// TestUnexpectedQueueIsBounded floods a rank that posts no receives: the sender must stall once
// the receiver's queue for it is full, and every message must still arrive, in order, once the
// receiver drains it.
func TestUnexpectedQueueIsBounded(t *testing.T) {
	nw := comm.NewInProcNetwork(2)
	w0, err := Attach(nw.Endpoint(0))
	if err != nil {
		t.Fatal(err)
	}
	w1, err := Attach(nw.Endpoint(1))
	if err != nil {
		t.Fatal(err)
	}
	const limit = 1 << 20
	w1.e.mu.Lock()
	w1.e.unexpMax = limit
	w1.e.mu.Unlock()

	const msgs, size = 200, 8192 // 200 x 64 KiB = 12.5 MiB, far above the limit
	var sent atomic.Int64
	senderErr := make(chan error, 1)
	go func() {
		buf := make([]float64, size)
		for i := 0; i < msgs; i++ {
			buf[0] = float64(i)
			if err := Send(w0, buf, 1, 0); err != nil {
				senderErr <- err
				return
			}
			sent.Add(1)
		}
		senderErr <- nil
	}()
	// Wait until the sender stalls.
	last := int64(-1)
	for stable := 0; stable < 5; time.Sleep(20 * time.Millisecond) {
		if n := sent.Load(); n == last {
			stable++
		} else {
			last, stable = n, 0
		}
	}
	if last >= msgs {
		t.Fatalf("all %d messages were accepted without a posted receive", msgs)
	}
	w1.e.mu.Lock()
	queued := w1.e.unexpSize[0]
	w1.e.mu.Unlock()
	if queued > limit+size*8 {
		t.Fatalf("receiver queued %d bytes, limit %d", queued, limit)
	}
	buf := make([]float64, size)
	for i := 0; i < msgs; i++ {
		if _, err := Recv(w1, buf, 0, 0); err != nil {
			t.Fatal(err)
		}
		if buf[0] != float64(i) {
			t.Fatalf("message %d arrived as %v", i, buf[0])
		}
	}
	if err := <-senderErr; err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 2)
	go func() { done <- Detach(w0) }()
	go func() { done <- Detach(w1) }()
	for i := 0; i < 2; i++ {
		if err := <-done; err != nil {
			t.Fatal(fmt.Errorf("detach: %w", err))
		}
	}
}
