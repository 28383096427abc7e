package iosbridge

import (
	"strings"
	"testing"
	"time"
)

// haloRank is rank r of job j after a window of 10 s in which it processed rate messages per
// second, computing f per message at CPU u here, and sent as many 16 KB halos as it
// received, split evenly over peers.
func haloRank(r int, rate float64, f time.Duration, u float64, peers ...int) RankProfile {
	const window = 10 * time.Second
	p := int64(rate * window.Seconds())
	rp := RankProfile{Job: "j", Rank: r, MessagesProcessed: p, Window: window, ComputePerMessage: f, CPUUse: u}
	for _, q := range peers {
		n := p / int64(len(peers))
		rp.Peers = append(rp.Peers, PeerComm{Rank: q, Messages: n, Bytes: n * 16 << 10})
	}
	return rp
}

// lan is a link whose base round trip was measured at rtt (no bandwidth measured).
func lan(rtt time.Duration) *LinkProfile {
	return &LinkProfile{From: "n1", To: "n4", Latency: rtt, Samples: rttWindow}
}

// Eq. 2.3 and §2.2.1.2 ("if the actor will process messages faster remote, it is migrated"),
// issue 17's joins experiment: a bulk-synchronous rank on a crowded node processes 120
// messages per second, 2.3 ms of computing and ~6 ms in mpi calls each, most of that waiting
// for the slowest rank's halo; one of its two neighbours is on another node. A node joins
// with half a CPU free. Only the network's share of the 6 ms, ν·X_L/P(A) from the measured
// round trip and the halo size, grows with the crossing messages; the wait does not, so the
// rank processes more messages there and ATS-RAS gives it. Scaling all of the 6 ms (the
// reading without a measured round trip) predicts ~76 msg/s there, and nothing moves.
func TestATSRASEquation2_3MigratesARankThatMostlyWaitsToAJoiningNode(t *testing.T) {
	local := node("n1", 1, 0, ids("j", 0, 1, 2, 3)...)
	joining := node("n4", 1, 0.5)
	r := haloRank(3, 120, 2300*time.Microsecond, 0.25, 2, 4) // rank 2 is here, rank 4 on n2
	link := lan(400 * time.Microsecond)

	net := ATSRASNetworkPerMessage(r, link, DefaultMPIIOSConfig().DefaultBandwidthBps)
	approx(t, "ν: half the round trip plus 16 KB at the default bandwidth", net, 0.0002+16384/12.5e6)
	p, tt, f := float64(r.MessagesProcessed), r.Window.Seconds(), r.ComputePerMessage.Seconds()
	c := tt/p - f
	cn := net * 600 / p // 600 of its 1200 messages cross now; all 1200 after the move
	want := 1 / (f*0.25/0.5 + (c - cn) + cn*1201/601)
	got, ok := ATSRASRemoteEstimate(f, p, tt, 1200, 600, 0, 0.25, 0.5, net)
	if !ok {
		t.Fatal("estimate undefined")
	}
	approx(t, "M(R,A)", got, want)
	if got <= 120 {
		t.Fatalf("a rank that mostly waits is predicted slower on a joining node: %.4g msg/s there, 120 here", got)
	}
	d := ATSRAS{}.Decide(DecisionInput{Local: local, Remote: joining, Ranks: []RankProfile{r}, Link: link, Now: t0})
	if !d.Migrate || d.Rank != r.ID() {
		t.Fatalf("want rank 3 given to the joining node: %+v", d)
	}
	approx(t, "gain", d.Gain, want-120)
	if !strings.Contains(d.Reason, "network 1.511ms/msg") {
		t.Fatalf("reason should name the network time per message: %q", d.Reason)
	}

	// No round trip measured yet: all of c is scaled, as the policy did before.
	old, _ := ATSRASRemoteEstimate(f, p, tt, 1200, 600, 0, 0.25, 0.5, 0)
	approx(t, "M(R,A), all of c scaled", old, 1/(f*0.25/0.5+c*1201/601))
	if d := (ATSRAS{}).Decide(DecisionInput{Local: local, Remote: joining, Ranks: []RankProfile{r}, Now: t0}); d.Migrate {
		t.Fatalf("without a measured round trip the wait is scaled and the rank stays: %+v", d)
	}
}

// Eq. 2.3's second term still prices the network: the same rank, whose time in mpi calls is
// now the halo crossing a slow wide-area link (40 ms round trip) rather than waiting, stays
// when the joining node lies across that link, although it has more CPU to give.
func TestATSRASEquation2_3KeepsARankWhoseTimeIsNetworkAcrossASlowLink(t *testing.T) {
	local := node("n1", 1, 0, ids("j", 0, 1, 2, 3)...)
	joining := node("n4", 1, 0.5)
	link := lan(40 * time.Millisecond)
	f := 2300 * time.Microsecond
	net := 0.02 + 16384/12.5e6
	// Per message: F, half the messages crossing at ν each, and 0.5 ms of waiting.
	perMsg := f.Seconds() + net/2 + 0.0005
	r := haloRank(3, 1/perMsg, f, 0.25, 2, 4)
	approx(t, "ν", ATSRASNetworkPerMessage(r, link, DefaultMPIIOSConfig().DefaultBandwidthBps), net)
	if d := (ATSRAS{}).Decide(DecisionInput{Local: local, Remote: joining, Ranks: []RankProfile{r}, Link: link, Now: t0}); d.Migrate {
		t.Fatalf("a rank whose time is network across a slow link was moved across it: %+v", d)
	}
}

// §2.2.1.2, "co-locate tightly coupled actors" with a measured round trip: of two chatty
// ranks whose time in mpi calls is their halos' network time, the one whose peer is at the
// stealer moves there (its messages stop crossing), the one whose peer is here stays.
func TestATSRASEquation2_3CoLocatesChattyActorsWithAMeasuredRoundTrip(t *testing.T) {
	local := node("L", 2, 0, ids("j", 0, 1, 3)...)
	remote := node("R", 2, 0.5, ids("j", 2)...)
	link := lan(2 * time.Millisecond)
	f := 5 * time.Millisecond
	net := 0.001 + 16384/12.5e6
	toRemote := haloRank(0, 1/(f.Seconds()+net+0.0002), f, 1, 2) // all its halos cross
	toLocal := haloRank(1, 1/(f.Seconds()+0.0002), f, 1, 3)      // none of its halos cross
	in := DecisionInput{Local: local, Remote: remote, Ranks: []RankProfile{toLocal, toRemote}, Link: link, Now: t0}
	if d := (ATSRAS{}).Decide(in); !d.Migrate || d.Rank != toRemote.ID() {
		t.Fatalf("want the rank that talks to R moved: %+v", d)
	}
	in.Ranks = []RankProfile{toLocal}
	if d := (ATSRAS{}).Decide(in); d.Migrate {
		t.Fatalf("the rank that talks to its local neighbour moved: %+v", d)
	}
}

// The node gives its policy the round trip it measured to the stealer (DecisionInput.Link),
// so ATS-RAS can tell a bulk-synchronous rank's wait from its network time: the joins
// experiment's crowded node, whose four ranks mostly wait, gives one to a joining node with
// half a CPU free once a ping to it was answered, and none before (all of the wait scaled).
func TestATSRASNodeGivesAWaitingRankOnceTheRoundTripIsMeasured(t *testing.T) {
	prof := node("n1", 1, 0, ids("j", 0, 1, 2, 3)...)
	var ranks []RankProfile
	for r := 0; r < 4; r++ {
		peers := []int{r - 1, r + 1} // a chain; rank 4 is on n2
		if r == 0 {
			peers = []int{1}
		}
		ranks = append(ranks, haloRank(r, 120, 2300*time.Microsecond, 0.25, peers...))
	}
	joining := node("n4", 1, 0.5)
	gives := func(ping bool) []Migration {
		t.Helper()
		n := mustNode(t, Config{ID: "n1", Policy: mustPolicy(t, PolicyATSRAS)}) // ATS-RAS pings by itself (Protocol.Ping)
		if err := n.Update(t0, prof, ranks); err != nil {
			t.Fatal(err)
		}
		connect(t, t0, n, "n4")
		if ping {
			pinged(t, n, map[string]time.Duration{"n4": 400 * time.Microsecond})
			if l := n.linkTo("n4"); l == nil || l.Latency != 400*time.Microsecond {
				t.Fatalf("link to n4: %+v", l)
			}
		}
		now := t0.Add(time.Second)
		if err := n.Step(now, Message{Kind: KindStealRequest, From: "n4", To: "n1", Origin: "n4", ID: 1, TTL: 1, Profile: &joining}); err != nil {
			t.Fatal(err)
		}
		return n.Ready().Migrations
	}
	if m := gives(false); len(m) != 0 {
		t.Fatalf("without a measured round trip: gave %+v", m)
	}
	if m := gives(true); len(m) != 1 || m[0].To != "n4" {
		t.Fatalf("with the round trip measured: gave %+v, want one rank to n4", m)
	}
}
