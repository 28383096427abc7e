package testbed

import (
	"container/heap"
	"net/netip"
	"time"
)

// flow is the direction of a packet between two node addresses.
type flow struct{ src, dst netip.Addr }

// ipv4Flow reads the source and destination of an IPv4 packet; ok is false for anything
// else (IPv6, a truncated header), which the delay router drops.
func ipv4Flow(pkt []byte) (f flow, ok bool) {
	if len(pkt) < 20 || pkt[0]>>4 != 4 {
		return flow{}, false
	}
	return flow{netip.AddrFrom4([4]byte(pkt[12:16])), netip.AddrFrom4([4]byte(pkt[16:20]))}, true
}

// delayQueue holds packets until their release time, the time they arrived plus their
// flow's delay. A packet is never released before one that arrived earlier in its flow,
// even when the flow's delay shrinks meanwhile: a link reorders nothing.
type delayQueue struct {
	h    pktHeap
	seq  uint64
	last map[flow]held // each flow's newest queued packet (without its bytes)
}

// held is a queued packet.
type held struct {
	at  time.Time // release time
	seq uint64    // arrival order, breaking ties of at
	f   flow
	pkt []byte
}

type pktHeap []held

func (h pktHeap) Len() int { return len(h) }
func (h pktHeap) Less(i, j int) bool {
	if !h[i].at.Equal(h[j].at) {
		return h[i].at.Before(h[j].at)
	}
	return h[i].seq < h[j].seq
}
func (h pktHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *pktHeap) Push(x any)   { *h = append(*h, x.(held)) }
func (h *pktHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	old[len(old)-1] = held{}
	*h = old[:len(old)-1]
	return x
}

// push queues pkt of flow f, arrived at now, to be released delay later (or with the
// flow's previous packet, if that one is released later still).
func (q *delayQueue) push(now time.Time, delay time.Duration, f flow, pkt []byte) {
	if q.last == nil {
		q.last = map[flow]held{}
	}
	at := now.Add(delay)
	if prev, ok := q.last[f]; ok && prev.at.After(at) {
		at = prev.at
	}
	q.seq++
	q.last[f] = held{at: at, seq: q.seq}
	heap.Push(&q.h, held{at: at, seq: q.seq, f: f, pkt: pkt})
}

// next is the release time of the first packet due; ok is false when nothing is queued.
func (q *delayQueue) next() (at time.Time, ok bool) {
	if len(q.h) == 0 {
		return time.Time{}, false
	}
	return q.h[0].at, true
}

// popDue removes and returns, in release order, the packets due at now.
func (q *delayQueue) popDue(now time.Time) [][]byte {
	var out [][]byte
	for len(q.h) > 0 && !q.h[0].at.After(now) {
		p := heap.Pop(&q.h).(held)
		if q.last[p.f].seq == p.seq {
			// The flow's newest packet leaves: forget the flow, so the map stays as small
			// as the set of flows with packets in flight.
			delete(q.last, p.f)
		}
		out = append(out, p.pkt)
	}
	return out
}

// len is the number of queued packets.
func (q *delayQueue) len() int { return len(q.h) }
