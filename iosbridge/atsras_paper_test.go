package iosbridge

import (
	"errors"
	"math"
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

// Eq. 2.3 with the bandwidth measured rather than assumed: the joins experiment's waiting
// rank, which MPI-IOS's default bandwidth (12.5 MB/s) moves to the joining node (the test
// above), stays when the bulk transfers from that node were measured at 1.25 MB/s: a
// 16 KB halo then takes 13 ms to cross, more than the rank's whole 6 ms in mpi calls, so all
// of that time is network time and doubles with the crossing messages.
func TestATSRASEquation2_3KeepsAChattyRankHomeAcrossAMeasuredSlowLink(t *testing.T) {
	local := node("n1", 1, 0, ids("j", 0, 1, 2, 3)...)
	joining := node("n4", 1, 0.5)
	r := haloRank(3, 120, 2300*time.Microsecond, 0.25, 2, 4)
	link := lan(400 * time.Microsecond)
	in := DecisionInput{Local: local, Remote: joining, Ranks: []RankProfile{r}, Link: link, Now: t0}
	d := ATSRAS{}.Decide(in)
	if !d.Migrate {
		t.Fatalf("with the default bandwidth the waiting rank should move: %+v", d)
	}
	if !strings.Contains(d.Reason, "12.5 MB/s default, none measured") {
		t.Fatalf("reason should say the bandwidth is the default: %q", d.Reason)
	}

	slow := *link
	slow.BandwidthBps = 1.25e6
	approx(t, "ν at the measured bandwidth", ATSRASNetworkPerMessage(r, &slow, DefaultMPIIOSConfig().DefaultBandwidthBps), 0.0002+16384/1.25e6)
	in.Link = &slow
	if d := (ATSRAS{}).Decide(in); d.Migrate {
		t.Fatalf("a chatty rank was moved across a link measured at 1.25 MB/s: %+v", d)
	}

	// And the other way: a node joining with 0.3 CPU free would save a rank with a quarter
	// CPU here 0.38 ms of computing per message, less than the 0.76 ms its halo to a peer
	// here would add crossing at 12.5 MB/s, but more than the 0.11 ms it adds at 1 GB/s: the
	// default keeps it home, the fast measured link moves it.
	f := 2300 * time.Microsecond
	net := 0.0002 + 16384/12.5e6
	chatty := haloRank(3, 1/(f.Seconds()+net/2+0.0002), f, 0.25, 2, 4)
	in.Remote = node("n4", 1, 0.3)
	in.Ranks, in.Link = []RankProfile{chatty}, link
	if d := (ATSRAS{}).Decide(in); d.Migrate {
		t.Fatalf("at the default bandwidth the chatty rank should stay: %+v", d)
	}
	fast := *link
	fast.BandwidthBps = 1e9
	in.Link = &fast
	d = ATSRAS{}.Decide(in)
	if !d.Migrate || !strings.Contains(d.Reason, "1e+03 MB/s measured") {
		t.Fatalf("want the chatty rank moved across a link measured at 1 GB/s, the reason naming it: %+v", d)
	}
}

// The node measures the link's bandwidth from the bulk transfers it is told of
// (ObserveTransfer) and gives it to its policy with the round trip: the joins experiment's
// crowded node gives a waiting rank to the joining node at the default bandwidth, keeps it
// once 4 MB from that node took 3.2 s (1.25 MB/s), and ignores transfers too small to
// measure. Bad measurements are refused.
func TestATSRASNodePricesCrossingMessagesWithTheMeasuredBandwidth(t *testing.T) {
	// Ranks 1-4 of a chain, each with a neighbour on another node (0, 5, or 9 for the
	// middle two): a rank none of whose messages cross is priced without the network.
	prof := node("n1", 1, 0, ids("j", 1, 2, 3, 4)...)
	var ranks []RankProfile
	for r := 1; r <= 4; r++ {
		peers := []int{r - 1, r + 1}
		if r == 2 || r == 3 {
			peers = []int{r - 1, r + 1, 9}
		}
		ranks = append(ranks, haloRank(r, 120, 2300*time.Microsecond, 0.25, peers...))
	}
	joining := node("n4", 1, 0.5)
	gives := func(observe func(n *Node)) []Migration {
		t.Helper()
		n := mustNode(t, Config{ID: "n1", Policy: mustPolicy(t, PolicyATSRAS)})
		if err := n.Update(t0, prof, ranks); err != nil {
			t.Fatal(err)
		}
		connect(t, t0, n, "n4")
		pinged(t, n, map[string]time.Duration{"n4": 400 * time.Microsecond})
		observe(n)
		now := t0.Add(time.Second)
		if err := n.Step(now, Message{Kind: KindStealRequest, From: "n4", To: "n1", Origin: "n4", ID: 1, TTL: 1, Profile: &joining}); err != nil {
			t.Fatal(err)
		}
		return n.Ready().Migrations
	}
	if m := gives(func(*Node) {}); len(m) != 1 || !strings.Contains(m[0].Reason, "default, none measured") {
		t.Fatalf("at the default bandwidth: gave %+v, want one rank, the reason saying so", m)
	}
	if m := gives(func(n *Node) {
		if err := n.ObserveTransfer(t0, "n4", 4<<20, time.Duration(float64(4<<20)/1.25e6*1e9)); err != nil {
			t.Fatal(err)
		}
		if bw, k, ok := n.Bandwidth("n4"); !ok || k != 1 {
			t.Fatalf("bandwidth from n4: %v, %d samples", bw, k)
		} else {
			approx(t, "measured bandwidth", bw, 1.25e6)
		}
		if l := n.linkTo("n4"); l == nil || l.Latency != 400*time.Microsecond || l.BandwidthBps != n.peers["n4"].bw.BandwidthBps {
			t.Fatalf("link to n4: %+v", l)
		}
	}); len(m) != 0 {
		t.Fatalf("across a link measured at 1.25 MB/s: gave %+v", m)
	}
	// n4 measured the copies it received from n1 at 1.25 MB/s and says so in its heartbeats:
	// that is the direction n1's ranks would take, and it wins over n1's own measurement of
	// the other direction (here 1 GB/s).
	if m := gives(func(n *Node) {
		if err := n.ObserveTransfer(t0, "n4", 1<<30, time.Second); err != nil {
			t.Fatal(err)
		}
		if err := n.Step(t0, Message{Kind: KindHeartbeat, From: "n4", To: "n1", Bandwidth: 1.25e6}); err != nil {
			t.Fatal(err)
		}
		if l := n.linkTo("n4"); l == nil || l.BandwidthBps != 1.25e6 {
			t.Fatalf("link to n4 after its heartbeat: %+v", l)
		}
	}); len(m) != 0 {
		t.Fatalf("across a link n4 measured at 1.25 MB/s: gave %+v", m)
	}
	if m := gives(func(n *Node) {
		// A halo-sized transfer says nothing of the bandwidth: left out.
		if err := n.ObserveTransfer(t0, "n4", 32<<10, 30*time.Millisecond); !errors.Is(err, ErrTransferTooSmall) {
			t.Fatalf("32 KB transfer: %v, want ErrTransferTooSmall", err)
		}
		// Nor does one its socket buffers took in before it was timed.
		if err := n.ObserveTransfer(t0, "n4", 4<<20, 50*time.Microsecond); !errors.Is(err, ErrTransferTooSmall) {
			t.Fatalf("4 MB in 50 µs: %v, want ErrTransferTooSmall", err)
		}
		if _, _, ok := n.Bandwidth("n4"); ok {
			t.Fatal("a too small transfer was measured")
		}
	}); len(m) != 1 {
		t.Fatalf("after a transfer too small to measure: gave %+v, want one rank", m)
	}

	n := mustNode(t, Config{ID: "n1", Policy: mustPolicy(t, PolicyATSRAS)})
	connect(t, t0, n, "n4")
	for _, c := range []struct {
		bytes int64
		d     time.Duration
	}{{0, time.Second}, {-1, time.Second}, {1 << 20, 0}, {1 << 20, -time.Second}, {1 << 40, time.Millisecond}} {
		if err := n.ObserveTransfer(t0, "n4", c.bytes, c.d); err == nil || errors.Is(err, ErrTransferTooSmall) {
			t.Errorf("%d bytes in %v: %v, want refused", c.bytes, c.d, err)
		}
	}
	if err := n.ObserveTransfer(t0, "n9", 4<<20, time.Second); err != nil {
		t.Fatalf("a transfer from a node that is no neighbour: %v, want ignored", err)
	}
	if _, _, ok := n.Bandwidth("n9"); ok {
		t.Fatal("a node that is no neighbour has a bandwidth")
	}
	if _, _, ok := n.Bandwidth("n4"); ok {
		t.Fatal("refused transfers were measured")
	}
}

// A node's heartbeats tell each neighbour the bandwidth it measured from it (and nothing
// before it measured one); anything but a heartbeat carrying a bandwidth, or one that is
// not a positive rate up to MaxBandwidthBps, is refused.
func TestHeartbeatsTellEachNeighbourTheBandwidthMeasuredFromIt(t *testing.T) {
	n := mustNode(t, Config{ID: "n1", Policy: mustPolicy(t, PolicyATSRAS)})
	connect(t, t0, n, "n2", "n3")
	if err := n.ObserveTransfer(t0, "n2", 8<<20, 80*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	n.Tick(t0)
	told := map[string]float64{}
	for _, hb := range ofKind(n.Ready(), KindHeartbeat) {
		told[hb.To] = hb.Bandwidth
	}
	if len(told) != 2 || told["n2"] != float64(8<<20)/0.08 || told["n3"] != 0 {
		t.Fatalf("heartbeats told %v, want n2 its measured bandwidth and n3 none", told)
	}
	for _, m := range []Message{
		{Kind: KindHeartbeat, From: "n2", To: "n1", Bandwidth: -1},
		{Kind: KindHeartbeat, From: "n2", To: "n1", Bandwidth: math.NaN()},
		{Kind: KindHeartbeat, From: "n2", To: "n1", Bandwidth: math.Inf(1)},
		{Kind: KindHeartbeat, From: "n2", To: "n1", Bandwidth: 2 * MaxBandwidthBps},
		{Kind: KindStealRequest, From: "n2", To: "n1", Origin: "n2", ID: 1, TTL: 1, Bandwidth: 1e6},
	} {
		if err := m.Validate(); err == nil {
			t.Errorf("%s with bandwidth %v accepted", m.Kind, m.Bandwidth)
		}
	}
	if err := (Message{Kind: KindHeartbeat, From: "n2", To: "n1", Bandwidth: 1e6}).Validate(); err != nil {
		t.Errorf("a heartbeat with a bandwidth refused: %v", err)
	}
}
