package testbed

import (
	"net/netip"
	"testing"
	"time"
)

func testFlow(a, b byte) flow {
	return flow{netip.AddrFrom4([4]byte{10, 77, 0, a}), netip.AddrFrom4([4]byte{10, 77, 0, b})}
}

// A link delays each packet by its delay, no less: a packet is never released before
// it arrived plus its flow's delay.
func TestDelayQueueHoldsEachPacketForItsFlowsDelay(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var q delayQueue
	ab, ba := testFlow(2, 3), testFlow(3, 2)
	q.push(t0, 20*time.Millisecond, ab, []byte{1})
	q.push(t0.Add(5*time.Millisecond), 10*time.Millisecond, ba, []byte{2})
	q.push(t0.Add(6*time.Millisecond), 0, testFlow(4, 5), []byte{3})
	if at, ok := q.next(); !ok || !at.Equal(t0.Add(6*time.Millisecond)) {
		t.Fatalf("next = %v, %v; want the undelayed packet at +6ms", at, ok)
	}
	if got := q.popDue(t0.Add(5 * time.Millisecond)); len(got) != 0 {
		t.Fatalf("released %v before any packet was due", got)
	}
	want := []struct {
		at  time.Duration
		pkt byte
	}{{6 * time.Millisecond, 3}, {15 * time.Millisecond, 2}, {20 * time.Millisecond, 1}}
	for _, w := range want {
		if got := q.popDue(t0.Add(w.at - time.Microsecond)); len(got) != 0 {
			t.Fatalf("at %v: released %v early", w.at-time.Microsecond, got)
		}
		got := q.popDue(t0.Add(w.at))
		if len(got) != 1 || got[0][0] != w.pkt {
			t.Fatalf("at %v: released %v, want packet %d", w.at, got, w.pkt)
		}
	}
	if q.len() != 0 || len(q.last) != 0 {
		t.Fatalf("queue not empty after every packet left: %d packets, %d flows", q.len(), len(q.last))
	}
}

// A link reorders nothing: when a flow's delay shrinks while packets are in flight, the
// later packets wait for the earlier ones; packets of one release time leave in arrival
// order.
func TestDelayQueueNeverReordersAFlow(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var q delayQueue
	f := testFlow(2, 3)
	delays := []time.Duration{30, 30, 5, 0, 30, 1, 1, 0}
	for i, d := range delays {
		q.push(t0.Add(time.Duration(i)*time.Millisecond), d*time.Millisecond, f, []byte{byte(i)})
	}
	var got []byte
	for now := t0; q.len() > 0; now = now.Add(time.Millisecond) {
		for _, p := range q.popDue(now) {
			got = append(got, p[0])
		}
		if now.After(t0.Add(time.Second)) {
			t.Fatal("packets never released")
		}
	}
	for i, p := range got {
		if int(p) != i {
			t.Fatalf("released in order %v, want 0..%d", got, len(delays)-1)
		}
	}
	// Each packet still waited at least its own delay.
	q.push(t0, 10*time.Millisecond, f, []byte{0})
	q.push(t0, 10*time.Millisecond, f, []byte{1})
	if got := q.popDue(t0.Add(10 * time.Millisecond)); len(got) != 2 || got[0][0] != 0 || got[1][0] != 1 {
		t.Fatalf("two packets of one release time: %v", got)
	}
}

func TestIPv4FlowReadsAddressesAndRefusesTheRest(t *testing.T) {
	pkt := make([]byte, 20)
	pkt[0] = 0x45
	copy(pkt[12:], []byte{10, 77, 0, 2, 10, 77, 0, 9})
	f, ok := ipv4Flow(pkt)
	if !ok || f != testFlow(2, 9) {
		t.Fatalf("ipv4Flow = %v, %v", f, ok)
	}
	if _, ok := ipv4Flow(pkt[:19]); ok {
		t.Error("truncated header accepted")
	}
	pkt[0] = 0x60
	if _, ok := ipv4Flow(pkt); ok {
		t.Error("IPv6 packet accepted")
	}
}
