package iosbridge

import (
	"fmt"
	"math"
	"time"
)

// ATSRASLocalRate is eq. 2.2 of Desell's thesis: M(L,A) = P(A)/T(A), the messages per second
// actor A processes at the local theater, with P(A) messages processed since the profile
// reset and T(A) seconds since that reset. ok is false when T(A) is 0 (undefined).
func ATSRASLocalRate(p, t float64) (m float64, ok bool) {
	if t <= 0 {
		return 0, false
	}
	return p / t, true
}

// ATSRASRemoteRate is eq. 2.3 exactly as printed in the thesis:
//
//	M(R,A) = F(A)/P(A) + T(A) / (F(A) * (S(A,L) − S(A,R)))
//
// with F(A) the average FLOPs per message, S(A,t) the messages A sent to theater t. ok is
// false wherever it divides by zero: P(A)=0, F(A)=0 or S(A,L)=S(A,R). It is kept to document
// the seed; the policy does not use it (see ATSRASRemoteEstimate for why).
func ATSRASRemoteRate(f, p, t, sl, sr float64) (m float64, ok bool) {
	den := f * (sl - sr)
	if p == 0 || den == 0 {
		return 0, false
	}
	return f/p + t/den, true
}

// ATSRASRemoteEstimate is the policy's eq. 2.3: the messages per second actor A would process
// at the remote theater R, from the quantities the printed equation names, measured.
//
// The printed formula cannot be applied as printed: its terms do not have the unit of a rate,
// it is undefined for an actor that sends nothing (S(A,L) = S(A,R) = 0, the thesis's
// "unconnected" benchmark, which ATS-RAS spreads over the nodes, Fig. 3.4), and its second
// term grows with S(A,L) − S(A,R), so it would move an actor away from the theater it talks
// to, against the prose ("co-locate tightly coupled actors", "if the actor will process
// messages faster remote, it is migrated"). What the prose asks for is predicted here from
// the same quantities. Locally A takes T(A)/P(A) per message: F(A) computing and c = T(A)/P(A)
// − F(A) in mpi calls, which splits into the network's part c_n and waiting w = c − c_n.
// Remotely:
//
//	M(R,A) = 1 / (F(A)·u/a + w + c_n·(X_R + 1)/(X_L + 1)),   c_n = min(c, ν·X_L/P(A))
//
// with F(A) the computation per message measured here (RankProfile.ComputePerMessage: FLOPs
// over this node's speed for A, as a node without hardware counters measures them), u the
// CPU A gets here and a = min(1, free CPUs of R) the CPU it would get there, X_L = S(A) −
// S(A,L) and X_R = S(A) − S(A,R) the messages that cross the network now and after the move
// (S(A) all messages A sent), and ν (net) the time one message takes to cross the network,
// measured (ATSRASNetworkPerMessage: half the base round trip to R plus the mean message
// size over the bandwidth). So the second term of eq. 2.3 scales only the time the crossing
// messages take, in proportion to how many cross; w is carried over unmultiplied. In a
// bulk-synchronous job most of c is the wait for the slowest rank's halo: no move of this
// rank removes it, and a faster placement only shortens it. Multiplying it, as the policy
// did when all of c was taken as communication, made a rank that mostly waits look twice as
// slow on an idle node (c ≈ 6 ms, F ≈ 2.3 ms: ~80 msg/s there against ~120 here), so a
// joining node got no rank (issue 17). A rank none of whose messages cross now (X_L = 0)
// has c_n = 0 and is priced with none after the move either, as before; pricing its crossings
// at ν·X_R/P(A) instead is right for the rank itself, but ATS-RAS picks ranks by their own
// gain only, and in the simulator (iossim, Figs. 3.4–3.9) that spread the heat slices and
// the hypercube worse (1.03× of optimal, 98.8% of round robin). With ν unknown (net ≤ 0: no
// round trip measured yet) all of c is scaled, the conservative reading. ok is false when
// P(A), T(A) or F(A) is unknown or R has no free CPU.
func ATSRASRemoteEstimate(f, p, t float64, total, sl, sr int64, u, a, net float64) (m float64, ok bool) {
	if p <= 0 || t <= 0 || f <= 0 || a <= 0 || u <= 0 {
		return 0, false
	}
	c := math.Max(0, t/p-f)
	xl, xr := float64(total-sl), float64(total-sr)
	var comm float64
	if net > 0 && finite(net) {
		cn := math.Min(c, net*xl/p)
		comm = (c - cn) + cn*(xr+1)/(xl+1)
	} else {
		comm = c * (xr + 1) / (xl + 1)
	}
	per := f*u/math.Min(1, a) + comm
	if per <= 0 {
		return 0, false
	}
	return 1 / per, true
}

// ATSRASNetworkPerMessage is ν of ATSRASRemoteEstimate, the seconds one message of r takes to
// cross the link l: half its base round trip plus r's mean message size over its bandwidth.
// The bandwidth is the link's measured one (l.BandwidthBps: Node.ObserveTransfer, the bulk
// transfers received from that node, in pcmd its buddy copies of checkpoint pieces), else
// bw, the default (MPI-IOS's 12.5 MB/s), until a transfer was measured. 0 (unknown) without
// a measured round trip.
func ATSRASNetworkPerMessage(r RankProfile, l *LinkProfile, bw float64) float64 {
	if l == nil || l.Samples <= 0 || l.Latency <= 0 {
		return 0
	}
	if l.BandwidthBps > 0 {
		bw = l.BandwidthBps
	}
	var msgs, bytes int64
	for _, pc := range r.Peers {
		if pc.Rank != r.Rank {
			msgs += pc.Messages
			bytes += pc.Bytes
		}
	}
	net := l.Latency.Seconds() / 2
	if msgs > 0 && bw > 0 {
		net += float64(bytes) / float64(msgs) / bw
	}
	return net
}

// ATSRASGain is eq. 2.1 as printed: G(L,R,A) = M(L,A) − M(R,A).
func ATSRASGain(ml, mr float64) float64 { return ml - mr }

// ATSRAS is Application Topology Sensitive RAS (thesis §2.2.1.2, eq. 2.1–2.3). For each
// candidate rank it evaluates eq. 2.2 and the policy's eq. 2.3 (ATSRASRemoteEstimate) with:
//
//	P(A) = RankProfile.MessagesProcessed, T(A) = RankProfile.Window (seconds),
//	F(A) = RankProfile.ComputePerMessage (seconds; filled by the profiler),
//	S(A,L), S(A,R) = messages the rank sent to peer ranks hosted on Local / Remote,
//	ν = ATSRASNetworkPerMessage: DecisionInput.Link's Latency (Node fills it with the base
//	    round trip of its heartbeat pings to Remote, Node.BaseLatency) and BandwidthBps
//	    (the bulk transfers measured from Remote, Node.ObserveTransfer), else MPI-IOS's
//	    default bandwidth until one was measured (the decision's reason says which).
//
// The round trip is measured on every run (pcmd's agents always ping, and a node whose
// policy is ATS-RAS pings by itself: Protocol), over the agents' path rather than mpi's: an upper bound of the network's
// share that host delays only add to, so the split errs towards keeping chatty ranks
// together. The same round trip prices every crossing message, now and after the move (the
// agent measures only its own links). The rank's own wait is what is left of its time in
// mpi calls, which needs no clock shared between nodes.
//
// Sign: eq. 2.1 as printed is local minus remote, while the prose says the module "chooses
// the actor with the best estimated increase in processed messages per second" and "if the
// actor will process messages faster remote, it is migrated". So the rank migrates when
// M(R,A) > M(L,A), i.e. G < 0; Decision.Gain is that increase, −G, so that "positive gain
// means move" holds for every policy. Ranks for which an equation is undefined are skipped.
type ATSRAS struct{}

// Name implements Policy.
func (ATSRAS) Name() string { return PolicyATSRAS }

// Protocol implements ProtocolPolicy: RAS stealing plus exchanges between busy nodes, and
// pings, whose round trips price the messages a move makes cross (ATSRASNetworkPerMessage).
func (ATSRAS) Protocol() Protocol { return Protocol{Steal: ScopeAnywhere, Exchange: true, Ping: true} }

// Decide implements Policy.
func (ATSRAS) Decide(in DecisionInput) Decision {
	d := Decision{Policy: PolicyATSRAS, Reason: "no rank would process messages faster remotely"}
	best := math.Inf(-1)
	free := in.Remote.FreeCPUs()
	if in.Exchange {
		free = math.Max(free, rankShare(in.Remote, 1)) // a busy remote still shares its CPUs
	}
	bw, bwFrom := DefaultMPIIOSConfig().DefaultBandwidthBps, "default, none measured"
	if in.Link != nil && in.Link.BandwidthBps > 0 && finite(in.Link.BandwidthBps) {
		bw, bwFrom = in.Link.BandwidthBps, "measured"
	}
	for _, r := range in.Ranks {
		_, sl := r.commTo(in.Local)
		_, sr := r.commTo(in.Remote)
		var total int64
		for _, pc := range r.Peers {
			if pc.Rank != r.Rank {
				total += pc.Messages
			}
		}
		p, t, f := float64(r.MessagesProcessed), r.Window.Seconds(), r.ComputePerMessage.Seconds()
		u := r.cpuUse(in.Local)
		net := ATSRASNetworkPerMessage(r, in.Link, bw)
		ml, ok1 := ATSRASLocalRate(p, t)
		mr, ok2 := ATSRASRemoteEstimate(f, p, t, total, sl, sr, u, free, net)
		if !ok1 || !ok2 {
			continue
		}
		g := ATSRASGain(ml, mr)
		inc := -g
		if !finite(inc) || inc <= 0 || inc <= best {
			continue
		}
		best = inc
		d.Migrate, d.Rank, d.Gain = true, r.ID(), inc
		d.Reason = fmt.Sprintf("eq.2.1 G=M(L)-M(R)=%.4g-%.4g=%.4g (F=%v/msg, CPU %.2f here, %.2f free there, sent %d here %d there of %d, network %v/msg at %.3g MB/s %s): %s processes %.4g msg/s more at %s",
			ml, mr, g, r.ComputePerMessage.Round(time.Microsecond), u, free, sl, sr, total, time.Duration(net*float64(time.Second)).Round(time.Microsecond), bw/1e6, bwFrom, r.ID(), inc, in.Remote.Node)
	}
	return d
}
