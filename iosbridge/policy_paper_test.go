package iosbridge

import (
	"math"
	"strings"
	"testing"
	"time"
)

// --- Desell's thesis §2.2.1.1: S-RAS ---

func TestSRASMigratesRandomActorOnlyWhenFullyUsedWithMultipleActors(t *testing.T) {
	p := mustPolicy(t, PolicySRAS)
	remote := node("idle", 2, 1)
	ranks := []RankProfile{rankProfile("j", 0, 0.5), rankProfile("j", 1, 0.5), rankProfile("j", 2, 0.5)}
	in := DecisionInput{Local: node("busy", 2, 0.02, ids("j", 0, 1, 2)...), Ranks: ranks, Remote: remote, Now: t0, Rand: fixedRand{2}}
	d := p.Decide(in)
	// "one of the local actors is chosen at random": the injected Rand picks index 2.
	if !d.Migrate || d.Rank != (RankID{"j", 2}) || d.Gain <= 0 {
		t.Fatalf("fully used node with 3 ranks: %+v", d)
	}
	in.Local.Availability = 0.30 // not "approximately 0%"
	if d := p.Decide(in); d.Migrate {
		t.Fatalf("30%% available: %+v", d)
	}
	in.Local = node("busy", 1, 0, ids("j", 0)...) // a single actor is never stolen
	in.Ranks = ranks[:1]
	if d := p.Decide(in); d.Migrate {
		t.Fatalf("single actor: %+v", d)
	}
}

// --- Desell's thesis §2.2.1.2: ATS-RAS, eq. 2.1–2.3 ---

func TestATSRASLocalRateEquation2_2(t *testing.T) {
	// M(L,A) = P(A)/T(A) = 100 messages / 10 s = 10 msg/s.
	m, ok := ATSRASLocalRate(100, 10)
	if !ok {
		t.Fatal("defined")
	}
	approx(t, "M(L,A)", m, 10)
	if _, ok := ATSRASLocalRate(100, 0); ok {
		t.Fatal("T(A)=0 must be undefined")
	}
}

func TestATSRASRemoteRateEquation2_3AsPrinted(t *testing.T) {
	// M(R,A) = F/P + T/(F·(S_L−S_R)) = 50/100 + 10/(50·(4−2)) = 0.5 + 0.1 = 0.6.
	m, ok := ATSRASRemoteRate(50, 100, 10, 4, 2)
	if !ok {
		t.Fatal("defined")
	}
	approx(t, "M(R,A)", m, 0.6)
	// S_L < S_R makes the second term negative: 40/2 + 1/(40·(1−6)) = 20 − 0.005 = 19.995.
	m, _ = ATSRASRemoteRate(40, 2, 1, 1, 6)
	approx(t, "M(R,A)", m, 19.995)
	for _, c := range [][5]float64{{0, 1, 1, 2, 1}, {1, 0, 1, 2, 1}, {1, 1, 1, 3, 3}} {
		if _, ok := ATSRASRemoteRate(c[0], c[1], c[2], c[3], c[4]); ok {
			t.Errorf("ATSRASRemoteRate%v: division by zero must be undefined", c)
		}
	}
}

func TestATSRASGainEquation2_1MigratesBestIncrease(t *testing.T) {
	// Local hosts ranks 0..3 of job j on 2 busy CPUs, the stealer hosts 4 and 5 and has one
	// CPU free. Both ranks: P=100 messages in T=10 s (M(L)=10/s), F=50 ms computing per
	// message at u=0.5 CPU here, c = T/P − F = 50 ms communicating.
	local := node("L", 2, 0, ids("j", 0, 1, 2, 3)...)
	remote := node("R", 2, 0.5, ids("j", 4, 5)...)
	rank := func(r int, peers ...PeerComm) RankProfile {
		return RankProfile{Job: "j", Rank: r, MessagesProcessed: 100, Window: 10 * time.Second,
			ComputePerMessage: 50 * time.Millisecond, CPUUse: 0.5, Peers: peers}
	}
	// Rank 0 sends 4 to rank 2 (here) and 2 to rank 4 (there): 2 cross now, 4 after.
	//   M(R) = 1/(0.05·0.5/1 + 0.05·5/3) = 9.2308 < 10: stays.
	a := rank(0, PeerComm{Rank: 2, Messages: 4}, PeerComm{Rank: 4, Messages: 2})
	// Rank 1 sends 1 to rank 3 (here) and 6 to ranks 4, 5 (there): 6 cross now, 1 after.
	//   M(R) = 1/(0.025 + 0.05·2/7) = 25.4545, G = 10 − 25.4545: 15.4545 msg/s faster there.
	b := rank(1, PeerComm{Rank: 3, Messages: 1}, PeerComm{Rank: 4, Messages: 2}, PeerComm{Rank: 5, Messages: 4})
	d := ATSRAS{}.Decide(DecisionInput{Local: local, Remote: remote, Ranks: []RankProfile{a, b}, Now: t0})
	if !d.Migrate || d.Rank != (RankID{"j", 1}) {
		t.Fatalf("want rank 1 migrated: %+v", d)
	}
	approx(t, "gain (−G)", d.Gain, 1/(0.025+0.05*2.0/7)-10)
	if !strings.Contains(d.Reason, "G=M(L)-M(R)") {
		t.Fatalf("reason should cite eq. 2.1: %q", d.Reason)
	}
	if d := (ATSRAS{}).Decide(DecisionInput{Local: local, Remote: remote, Ranks: []RankProfile{a}}); d.Migrate {
		t.Fatalf("rank faster locally must stay: %+v", d)
	}
	a.ComputePerMessage = 0 // F(A) unknown: eq. 2.3 undefined, the rank is skipped
	b.ComputePerMessage = 0
	if d := (ATSRAS{}).Decide(DecisionInput{Local: local, Remote: remote, Ranks: []RankProfile{a, b}}); d.Migrate {
		t.Fatalf("F(A) unknown: %+v", d)
	}
}

// Eq. 2.3, Fig. 3.4: actors that do not communicate ("unconnected"), all loaded onto one
// processor, are spread over the idle ones by ATS-RAS; once every rank has a CPU of its own,
// nothing moves.
func TestATSRASEquation2_3SpreadsUnconnectedActorsFromALoadedNode(t *testing.T) {
	p := Stabilize(mustPolicy(t, PolicyATSRAS), DefaultStability())
	rank := func(r int, cpu float64) RankProfile {
		return RankProfile{Job: "j", Rank: r, MessagesProcessed: 100, Window: 10 * time.Second,
			ComputePerMessage: 90 * time.Millisecond, CPUUse: cpu}
	}
	var four []RankProfile
	for r := 0; r < 4; r++ {
		four = append(four, rank(r, 0.5))
	}
	// 4 ranks on 2 CPUs: 0.5 CPU each; an idle 2-CPU node steals.
	//   M(L) = 10, M(R) = 1/(0.09·0.5 + 0.01) = 18.18.
	in := DecisionInput{Local: node("L", 2, 0, ids("j", 0, 1, 2, 3)...), Remote: node("R", 2, 1), Ranks: four, Now: t0}
	if d := p.Decide(in); !d.Migrate || d.Policy != PolicyATSRAS {
		t.Fatalf("loaded node keeps its unconnected ranks: %+v", d)
	}
	// Balanced: 2 ranks on each 2-CPU node, each with a CPU of its own; the stealer has none free.
	in = DecisionInput{Local: node("L", 2, 0, ids("j", 0, 1)...), Remote: node("R", 2, 0, ids("j", 2, 3)...),
		Ranks: []RankProfile{rank(0, 1), rank(1, 1)}, Now: t0}
	if d := p.Decide(in); d.Migrate {
		t.Fatalf("balanced placement changed: %+v", d)
	}
}

// Eq. 2.3, §2.2.1.2: ATS-RAS "co-locate[s] tightly coupled actors ... within the same theater":
// of two communication-bound ranks with the same CPU, the one whose messages go to the
// stealer's ranks moves there; the one that talks to its local neighbour stays.
func TestATSRASEquation2_3CoLocatesTightlyCoupledActors(t *testing.T) {
	local := node("L", 2, 0, ids("j", 0, 1)...)
	remote := node("R", 2, 0.5, ids("j", 2)...)
	rank := func(r int, peers ...PeerComm) RankProfile {
		return RankProfile{Job: "j", Rank: r, MessagesProcessed: 100, Window: 10 * time.Second,
			ComputePerMessage: 20 * time.Millisecond, CPUUse: 1, Peers: peers}
	}
	toRemote := rank(0, PeerComm{Rank: 2, Messages: 10}) // M(R) = 1/(0.02 + 0.08/11) = 36.7 > 10
	toLocal := rank(1, PeerComm{Rank: 0, Messages: 10})  // M(R) = 1/(0.02 + 0.08·11) = 1.1 < 10
	d := ATSRAS{}.Decide(DecisionInput{Local: local, Remote: remote, Ranks: []RankProfile{toRemote, toLocal}, Now: t0})
	if !d.Migrate || d.Rank != toRemote.ID() {
		t.Fatalf("want the rank that talks to R moved: %+v", d)
	}
	if d := (ATSRAS{}).Decide(DecisionInput{Local: local, Remote: remote, Ranks: []RankProfile{toLocal}, Now: t0}); d.Migrate {
		t.Fatalf("the rank that talks to its local neighbour moved: %+v", d)
	}
}

// --- Desell's thesis §2.2.1.3: FLC-RAS, tables 2.2 and 2.3 ---

func TestFLCRASGainMeasuresTable2_2(t *testing.T) {
	local := node("L", 4, 0, ids("j", 0, 1)...)
	remote := node("R", 4, 0.6, ids("j", 2)...)
	r := RankProfile{Job: "j", Rank: 0, CPUUse: 1, Peers: []PeerComm{{Rank: 1, Bytes: 3000}, {Rank: 2, Bytes: 1000}}}
	gc, gp := FLCRASGains(r, local, remote)
	// p_l = 100·1/4 = 25 %, p_f = 60 %: g_p = p_f − p_l = 35.
	approx(t, "g_p", gp, 35)
	// c_l = 3000 B (rank 1 local), c_f = 1000 B (rank 2 remote): moving turns 3000 B remote
	// and 1000 B local, benefit c_f − c_l = −2000 (see FLCRASGains on the printed sign).
	approx(t, "g_c", gc, -2000)
}

func TestFLCRASMembershipCutoffsTable2_3(t *testing.T) {
	// Figure 2.3: bad cutoff −2.5, good cutoff 2.5.
	c := FLCCutoffs{TBad: -2.5, TGood: 2.5}
	for _, tc := range []struct{ g, good float64 }{
		{-10, 0}, {-2.5, 0}, // below / at t_bad: definitely bad
		{0, 0.5},          // (0+2.5)/5
		{1.25, 0.75},      // (1.25+2.5)/5
		{2.5, 1}, {10, 1}, // at / above t_good: definitely good
	} {
		approx(t, "good", c.Good(tc.g), tc.good)
		approx(t, "bad", c.Bad(tc.g), 1-tc.good)
	}
	if _, err := NewFLCRAS(FLCRASConfig{Computation: FLCCutoffs{1, 1}, Communication: c, Threshold: .5}); err == nil {
		t.Fatal("t_good must exceed t_bad")
	}
}

func TestFLCRASFourRulesThreshold0_5(t *testing.T) {
	cfg := DefaultFLCRASConfig()
	cfg.Communication = FLCCutoffs{TBad: -2.5, TGood: 2.5}
	for _, tc := range []struct {
		gc, gp  float64
		out     float64
		rule    FLCRASRule
		migrate bool
	}{
		{-5, -5, 0, 1, false},  // c_bad ∧ p_bad = 1 → 0
		{5, -5, 0.5, 2, false}, // c_good ∧ p_bad = 1 → (1+0)/2 = 0.5, not > 0.5
		{-5, 5, 0.5, 3, false}, // c_bad ∧ p_good = 1 → (0+1)/2 = 0.5, not > 0.5
		{5, 5, 1, 4, true},     // c_good ∧ p_good = 1 → 1
		// c_good=.5 p_good=1: rules 3 and 4 both fire at .5; the earlier (rule 3) wins →
		// (.5+1)/2 = .75.
		{0, 5, 0.75, 3, true},
		// c_good=.75 p_good=.25: strengths .25,.75,.25,.25 → rule 2 → (.75+.25)/2 = .5.
		{1.25, -1.25, 0.5, 2, false},
		// c_good=.9 p_good=.5: strengths .1,.5,.1,.5 → tie, rule 2 → (.9+.5)/2 = .7.
		{2, 0, 0.7, 2, true},
	} {
		out, rule := FLCRASEvaluate(cfg, tc.gc, tc.gp)
		approx(t, "desirability", out, tc.out)
		if rule != tc.rule {
			t.Errorf("g_c=%v g_p=%v: rule %d, want %d", tc.gc, tc.gp, rule, tc.rule)
		}
		if (out > 0.5) != tc.migrate {
			t.Errorf("g_c=%v g_p=%v: migrate=%v, want %v", tc.gc, tc.gp, out > 0.5, tc.migrate)
		}
	}
	// Through the policy: the rank with c_f = c_l (g_c = 0) and g_p = 100−50 = 50 scores .75.
	p, err := NewFLCRAS(cfg)
	if err != nil {
		t.Fatal(err)
	}
	d := p.Decide(DecisionInput{Local: node("L", 2, 0.5, ids("j", 0)...), Remote: node("R", 2, 1), Ranks: []RankProfile{rankProfile("j", 0, 1)}})
	if !d.Migrate {
		t.Fatalf("%+v", d)
	}
	approx(t, "gain = desirability − 0.5", d.Gain, 0.25)
}

// Table 2.2's g_c with the default, relative cutoffs: the thesis's designer tunes the
// cutoffs per application (§2.2.1.3); dividing g_c by the bytes the actor sent makes one
// tuning fit every message size. An actor whose five neighbours are all local (a hypercube
// node started on one theater) may leave for an idle theater whatever its messages weigh:
// g_c = −1, good(−1) = (−1+2)/4 = .25, g_p definitely good → rule 3 → (.25+1)/2 = .625 > .5.
// With absolute cutoffs of ±2.5 MiB the same actor sending 32 KB × 100 to each neighbour is
// definitely bad and stays (rule 3 → .5, not above the threshold).
func TestFLCRASRelativeCommunicationCutoffsFitEveryMessageSize(t *testing.T) {
	def, err := NewFLCRAS(DefaultFLCRASConfig())
	if err != nil {
		t.Fatal(err)
	}
	abs := DefaultFLCRASConfig()
	abs.Communication, abs.RelativeCommunication = FLCCutoffs{TBad: -2.5 * (1 << 20), TGood: 2.5 * (1 << 20)}, false
	absolute, err := NewFLCRAS(abs)
	if err != nil {
		t.Fatal(err)
	}
	for _, size := range []int64{1 << 10, 32 << 10, 1 << 30} {
		r := rankProfile("h", 0, 0.25)
		for _, p := range []int{1, 2, 4, 8, 16} {
			r.Peers = append(r.Peers, PeerComm{Rank: p, Messages: 100, Bytes: 100 * size})
		}
		local := node("L", 2, 0, ids("h", 0, 1, 2, 4, 8, 16)...)
		in := DecisionInput{Local: local, Remote: node("R", 2, 1), Ranks: []RankProfile{r}}
		d := def.Decide(in)
		if !d.Migrate {
			t.Fatalf("%d-byte messages: %+v", size, d)
		}
		approx(t, "gain = .625 − .5", d.Gain, 0.125)
		if size >= 32<<10 {
			if d := absolute.Decide(in); d.Migrate {
				t.Fatalf("absolute cutoffs, %d-byte messages: %+v", size, d)
			}
		}
		// Between two busy theaters the sign of g_c decides: the actor does not leave its
		// neighbours for a theater where it has none.
		in.Remote, in.Exchange = node("R", 2, 0, ids("h", 17, 18, 19, 20, 21, 22, 23, 24)...), true
		if d := def.Decide(in); d.Migrate {
			t.Fatalf("%d-byte messages: left its neighbours for a busy theater: %+v", size, d)
		}
	}
}

// --- MPI/IOS paper, "reconfiguration policies" ---

func TestMPIIOSResourceDeltaNormalized(t *testing.T) {
	approx(t, "Δ(3,1)", MPIIOSResourceDelta(3, 1), 0.5)  // (3−1)/(3+1)
	approx(t, "Δ(0,.5)", MPIIOSResourceDelta(0, .5), -1) // nothing available: worst
	approx(t, "Δ(0,0)", MPIIOSResourceDelta(0, 0), 0)
}

func mpiiosCPUOnly(t *testing.T) MPIIOS {
	t.Helper()
	p, err := NewMPIIOS(MPIIOSConfig{WeightCPU: 1, DefaultBandwidthBps: 1e6})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestMPIIOSGainScalesWithLogRemainingLife(t *testing.T) {
	p := mpiiosCPUOnly(t)
	local := node("L", 2, 0, ids("j", 0, 1, 2)...)
	remote := node("R", 4, 0.75) // 3 free CPUs; each rank uses 1 → Δ_cpu = (3−1)/(3+1) = 0.5
	short := rankProfile("j", 0, 1)
	short.StateBytes, short.RemainingIterations = 0, 100 // L = 100 × 1 s
	long := short
	long.Rank, long.RemainingIterations = 1, 10000 // L = 10000 s
	dying := short
	dying.Rank, dying.RemainingIterations = 2, 1 // L = 1 s → log L = 0
	for _, c := range []struct {
		r    RankProfile
		gain float64
	}{
		{short, 0.5 * math.Log(100)},  // 0.5 × 4.60517 = 2.302585
		{long, 0.5 * math.Log(10000)}, // 0.5 × 9.21034 = 4.60517, twice the above
		{dying, 0},                    // no gain: never migrate a dying rank
	} {
		d := p.Decide(DecisionInput{Local: local, Remote: remote, Ranks: []RankProfile{c.r}})
		if c.gain == 0 {
			if d.Migrate {
				t.Fatalf("L=1s: %+v", d)
			}
			continue
		}
		approx(t, "Γ", d.Gain, c.gain)
	}
	d := p.Decide(DecisionInput{Local: local, Remote: remote, Ranks: []RankProfile{short, long, dying}})
	if d.Rank != long.ID() {
		t.Fatalf("the longest-lived rank gains most: %+v", d)
	}
}

func TestMPIIOSNoMigrationWhenCostExceedsGain(t *testing.T) {
	p := mpiiosCPUOnly(t)
	local := node("L", 2, 0, ids("j", 0)...)
	remote := node("R", 4, 0.75)
	link := &LinkProfile{From: "L", To: "R", BandwidthBps: 1e6, Samples: 1}
	r := rankProfile("j", 0, 1)
	r.RemainingIterations = 100 // Σw·Δ·ln L = 0.5·ln 100 = 2.302585
	r.StateBytes = 10e6         // cost 10e6 / 1e6 B/s = 10 s > 2.30
	if d := p.Decide(DecisionInput{Local: local, Remote: remote, Ranks: []RankProfile{r}, Link: link}); d.Migrate {
		t.Fatalf("cost exceeds gain: %+v", d)
	}
	r.StateBytes = 1e6 // cost 1 s: Γ = 2.302585 − 1 = 1.302585
	d := p.Decide(DecisionInput{Local: local, Remote: remote, Ranks: []RankProfile{r}, Link: link})
	if !d.Migrate {
		t.Fatalf("%+v", d)
	}
	approx(t, "Γ", d.Gain, 0.5*math.Log(100)-1)
	// Without a measured link the default bandwidth (here 1e6 B/s) prices the move.
	d = p.Decide(DecisionInput{Local: local, Remote: remote, Ranks: []RankProfile{r}})
	approx(t, "Γ default bandwidth", d.Gain, 0.5*math.Log(100)-1)
}

func TestMPIIOSNamedWeightsCombineResources(t *testing.T) {
	p, err := NewMPIIOS(DefaultMPIIOSConfig()) // w_cpu .8, w_mem .1, w_net .1
	if err != nil {
		t.Fatal(err)
	}
	local := node("L", 2, 0, ids("j", 0, 1)...)
	remote := node("R", 4, 0.75) // 3 free CPUs, 8 GiB free
	r := rankProfile("j", 0, 1)
	r.MemoryBytes = 1 << 30                                   // Δ_mem = (8−1)/(8+1) = 7/9
	r.Peers = []PeerComm{{Rank: 1, Bytes: 1e6, Messages: 10}} // 1e6 B / 10 s = 1e5 B/s
	// Δ_net = (1e6 − 1e5)/(1e6 + 1e5) = 9/11; Δ_cpu = 0.5.
	// Σ = .8·.5 + .1·7/9 + .1·9/11 = .4 + .0777… + .0818… = .559596
	approx(t, "Σw·Δ", p.Weighted(r, local, remote, 1e6), 0.4+0.1*7.0/9+0.1*9.0/11)
	if _, err := NewMPIIOS(MPIIOSConfig{DefaultBandwidthBps: 1}); err == nil {
		t.Fatal("all-zero weights must be rejected")
	}
	if _, err := NewMPIIOS(MPIIOSConfig{WeightCPU: -1, DefaultBandwidthBps: 1}); err == nil {
		t.Fatal("negative weight must be rejected")
	}
}

func TestPolicyByNameListsValidNames(t *testing.T) {
	for _, n := range PolicyNames() {
		p := mustPolicy(t, n)
		if p.Name() != n {
			t.Errorf("PolicyByName(%q).Name() = %q", n, p.Name())
		}
	}
	if p := mustPolicy(t, ""); p.Name() != DefaultPolicy {
		t.Errorf("default policy = %q", p.Name())
	}
	_, err := PolicyByName("greedy")
	if err == nil || !strings.Contains(err.Error(), "ars, atsras, crs, flcras, mpiios, none, nrs, nrs-ars, rhns, robinhood, rs, sheriff, sras") {
		t.Fatalf("error should list valid names: %v", err)
	}
}

func TestNonePolicyNeverMigrates(t *testing.T) {
	d := mustPolicy(t, PolicyNone).Decide(DecisionInput{Local: node("L", 1, 0, ids("j", 0, 1)...), Remote: node("R", 8, 1), Ranks: []RankProfile{rankProfile("j", 0, .5)}})
	if d.Migrate {
		t.Fatalf("%+v", d)
	}
}
