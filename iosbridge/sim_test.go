package iosbridge

import (
	"fmt"
	"sort"
	"testing"
	"time"
)

// A small deterministic cluster: every rank wants one CPU; a node with k ranks on c CPUs has
// availability max(0, c−k)/c and gives each rank min(1, c/k) CPUs. Messages are delivered
// in FIFO order within each one-second round; migrations complete instantly.
type simCluster struct {
	t      *testing.T
	now    time.Time
	cpus   map[string]int
	hosted map[string][]RankID
	moved  map[RankID]time.Time
	nodes  map[string]*Node
	queue  []Message
	// delay is how long a migration takes (checkpoint + transfer); 0 = instant.
	delay    time.Duration
	inFlight []simMove
	// migrations per round
	history []int
}

type simMove struct {
	rank     RankID
	from, to string
	done     time.Time
}

func newSim(t *testing.T, policy string, layout map[string][]int, cpus int) *simCluster {
	s := &simCluster{t: t, now: t0, cpus: map[string]int{}, hosted: map[string][]RankID{}, moved: map[RankID]time.Time{}, nodes: map[string]*Node{}}
	for i, name := range sortedKeys(layout) {
		s.addNode(name, cpus, uint64(i+1), policy, ids("heat", layout[name]...))
	}
	return s
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func (s *simCluster) addNode(name string, cpus int, seed uint64, policy string, ranks []RankID) {
	s.cpus[name], s.hosted[name] = cpus, ranks
	n := mustNode(s.t, Config{ID: name, Policy: mustPolicy(s.t, policy), Rand: newRand(seed)})
	s.nodes[name] = n
	var seeds []string
	for _, other := range sortedKeys(s.nodes) {
		if other != name {
			seeds = append(seeds, other)
			break // bootstrap through a single known node; the rest is learned
		}
	}
	s.update(name)
	n.Join(s.now, seeds)
	s.collect(n)
}

func (s *simCluster) update(name string) {
	c, k := s.cpus[name], len(s.hosted[name])
	avail := float64(max(0, c-k)) / float64(c)
	prof := NodeProfile{Node: name, CPUs: c, EffectiveCPUs: float64(c), Availability: avail,
		MemFreeBytes: 8 << 30, MemTotalBytes: 16 << 30, Ranks: append([]RankID(nil), s.hosted[name]...), SampledAt: s.now}
	var rs []RankProfile
	for _, id := range s.hosted[name] {
		share := min(1, float64(c)/float64(k))
		rs = append(rs, RankProfile{Job: id.Job, Rank: id.Rank, Node: name, CPUUse: share,
			IterationTime: time.Duration(float64(time.Second) / share), RemainingIterations: 10000,
			StateBytes: 1 << 20, Window: 10 * time.Second, LastMigration: s.moved[id]})
	}
	if err := s.nodes[name].Update(s.now, prof, rs); err != nil {
		s.t.Fatal(err)
	}
}

func (s *simCluster) collect(n *Node) int {
	r := n.Ready()
	s.queue = append(s.queue, r.Messages...)
	for _, m := range r.Migrations {
		if _, ok := s.nodes[m.To]; ok {
			s.inFlight = append(s.inFlight, simMove{rank: m.Rank, from: n.ID(), to: m.To, done: s.now.Add(s.delay)})
		}
	}
	s.land()
	return len(r.Migrations)
}

// land completes the migrations whose time has come: the rank leaves the giver's list and
// appears on the receiver's, where the profiler reports its arrival time.
func (s *simCluster) land() {
	rest := s.inFlight[:0]
	for _, mv := range s.inFlight {
		if s.now.Before(mv.done) {
			rest = append(rest, mv)
			continue
		}
		kept := s.hosted[mv.from][:0:0]
		for _, id := range s.hosted[mv.from] {
			if id != mv.rank {
				kept = append(kept, id)
			}
		}
		s.hosted[mv.from] = kept
		s.hosted[mv.to] = append(s.hosted[mv.to], mv.rank)
		s.moved[mv.rank] = s.now
	}
	s.inFlight = rest
}

func (s *simCluster) round() {
	migs := 0
	s.land()
	for _, name := range sortedKeys(s.nodes) {
		s.update(name)
		s.nodes[name].Tick(s.now)
		migs += s.collect(s.nodes[name])
	}
	for steps := 0; len(s.queue) > 0; steps++ {
		if steps > 100000 {
			s.t.Fatal("message storm")
		}
		m := s.queue[0]
		s.queue = s.queue[1:]
		n, ok := s.nodes[m.To]
		if !ok {
			continue
		}
		if err := n.Step(s.now, m); err != nil {
			s.t.Fatalf("step %+v: %v", m, err)
		}
		migs += s.collect(n)
	}
	s.history = append(s.history, migs)
	s.now = s.now.Add(time.Second)
}

func (s *simCluster) run(rounds int) {
	for i := 0; i < rounds; i++ {
		s.round()
	}
}

func (s *simCluster) counts() []int {
	var c []int
	for _, name := range sortedKeys(s.hosted) {
		c = append(c, len(s.hosted[name]))
	}
	return c
}

func (s *simCluster) migrations(from, to int) (n int) {
	for _, m := range s.history[from:to] {
		n += m
	}
	return n
}

var simPolicies = []string{PolicyMPIIOS, PolicySRAS, PolicyFLCRAS}

func TestSimLoadedNodeDrainsToIdleNodesAndSettles(t *testing.T) {
	for _, tc := range []struct {
		pol   string
		delay time.Duration
	}{
		{PolicyMPIIOS, 0}, {PolicySRAS, 0}, {PolicyFLCRAS, 0},
		// Migrations taking 3 s: profiles lag, the bookings must prevent over-giving.
		{PolicyMPIIOS, 3 * time.Second}, {PolicySRAS, 3 * time.Second}, {PolicyFLCRAS, 3 * time.Second},
	} {
		pol := tc.pol
		t.Run(fmt.Sprintf("%s/delay=%v", pol, tc.delay), func(t *testing.T) {
			// 8 single-CPU-hungry ranks on n0; four 2-CPU nodes.
			s := newSim(t, pol, map[string][]int{"n0": {0, 1, 2, 3, 4, 5, 6, 7}, "n1": nil, "n2": nil, "n3": nil}, 2)
			s.delay = tc.delay
			s.run(400)
			if got := fmt.Sprint(s.counts()); got != "[2 2 2 2]" {
				t.Fatalf("final placement %s, history %v", got, s.history)
			}
			if late := s.migrations(200, 400); late != 0 {
				t.Fatalf("%d migrations after balance; history %v", late, s.history)
			}
			total := s.migrations(0, 400)
			if total < 6 || total > 10 {
				t.Fatalf("%d migrations to move 6 ranks", total)
			}
			t.Logf("%s: %d migrations, last at round %d", pol, total, lastNonZero(s.history))
		})
	}
}

func lastNonZero(h []int) int {
	for i := len(h) - 1; i >= 0; i-- {
		if h[i] != 0 {
			return i
		}
	}
	return -1
}

func TestSimIdleHomogeneousClusterHasZeroMigrations(t *testing.T) {
	for _, pol := range append(simPolicies, PolicyATSRAS, PolicyNone) {
		for _, layout := range []map[string][]int{
			{"n0": {0}, "n1": {1}, "n2": {2}, "n3": {3}},                // half idle everywhere
			{"n0": {0, 1}, "n1": {2, 3}, "n2": {4, 5}, "n3": {6, 7}},    // fully, evenly used
			{"n0": nil, "n1": nil, "n2": nil},                           // no work at all
			{"n0": {0, 1, 2}, "n1": {3, 4}, "n2": {5, 6}, "n3": {7, 8}}, // best possible for 9
		} {
			s := newSim(t, pol, layout, 2)
			before := fmt.Sprint(s.counts())
			s.run(200)
			if n := s.migrations(0, 200); n != 0 || fmt.Sprint(s.counts()) != before {
				t.Errorf("%s %v: %d migrations, %s -> %v", pol, layout, n, before, s.counts())
			}
			var sent, failed uint64
			for _, n := range s.nodes {
				sent += n.Stats().StealsSent
				failed += n.Stats().StealsFailed
			}
			if len(layout["n0"]) < 2 && (sent == 0 || failed == 0) {
				t.Errorf("%s %v: idle nodes should keep trying and failing (sent %d, failed %d)", pol, layout, sent, failed)
			}
		}
	}
}

func TestSimJoiningNodeAttractsRanks(t *testing.T) {
	// The MPI/IOS scenario: a processor joins the virtual network, starts stealing, and
	// processes migrate to it.
	s := newSim(t, PolicyMPIIOS, map[string][]int{"n0": {0, 1, 2}, "n1": {3, 4, 5}, "n2": {6, 7, 8}}, 2)
	s.run(100)
	if n := s.migrations(0, 100); n != 0 {
		t.Fatalf("overloaded but equal nodes should not trade ranks: %d", n)
	}
	s.addNode("n3", 2, 99, PolicyMPIIOS, nil)
	s.run(300)
	c := s.counts()
	if c[3] != 2 || c[0]+c[1]+c[2] != 7 {
		t.Fatalf("after join: %v", c)
	}
	if late := s.migrations(250, 400); late != 0 {
		t.Fatalf("not settled: %v", s.history)
	}
}

func TestSimHeterogeneousNodesPreferTheBigOne(t *testing.T) {
	// One 1-CPU node with 4 ranks, one idle 8-CPU node: ranks flow to the big node until the
	// small one is no longer worse off; nothing flows back.
	s := &simCluster{t: t, now: t0, cpus: map[string]int{}, hosted: map[string][]RankID{}, moved: map[RankID]time.Time{}, nodes: map[string]*Node{}}
	s.addNode("big", 8, 1, PolicyMPIIOS, nil)
	s.addNode("small", 1, 2, PolicyMPIIOS, ids("heat", 0, 1, 2, 3))
	s.run(300)
	if got := fmt.Sprint(s.counts()); got != "[4 0]" {
		t.Fatalf("placement %s, history %v", got, s.history)
	}
	if late := s.migrations(150, 300); late != 0 {
		t.Fatalf("not settled: %v", s.history)
	}
}
