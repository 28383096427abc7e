package iosbridge_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"time"

	"github.com/mpios/mpios/iosbridge"
)

// A loaded node (B) and an idle one (A) find each other and B gives A a rank. This is the
// loop pcmd runs: Update on every profile sample, Tick on a timer, Step on every message
// from NATS, and after each call Ready: publish the messages, execute the migrations.
func ExampleNode() {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	a, _ := iosbridge.NewNode(iosbridge.Config{ID: "A", Rand: rand.New(rand.NewPCG(1, 1))})
	b, _ := iosbridge.NewNode(iosbridge.Config{ID: "B", Rand: rand.New(rand.NewPCG(2, 2))})
	nodes := map[string]*iosbridge.Node{"A": a, "B": b}

	_ = a.Update(now, iosbridge.NodeProfile{Node: "A", CPUs: 2, EffectiveCPUs: 2, Availability: 1}, nil)
	var ranks []iosbridge.RankProfile
	var hosted []iosbridge.RankID
	for r := 0; r < 4; r++ {
		ranks = append(ranks, iosbridge.RankProfile{Job: "heat", Rank: r, CPUUse: 0.5,
			IterationTime: 2 * time.Second, RemainingIterations: 500, StateBytes: 8 << 20})
		hosted = append(hosted, iosbridge.RankID{Job: "heat", Rank: r})
	}
	_ = b.Update(now, iosbridge.NodeProfile{Node: "B", CPUs: 2, EffectiveCPUs: 2, Availability: 0, Ranks: hosted}, ranks)

	deliver := func(n *iosbridge.Node) {
		for queue := []*iosbridge.Node{n}; len(queue) > 0; queue = queue[1:] {
			rd := queue[0].Ready()
			for _, m := range rd.Migrations {
				fmt.Printf("%s: migrate %s to %s\n", queue[0].ID(), m.Rank, m.To)
			}
			for _, m := range rd.Messages {
				fmt.Printf("%s -> %s: %s\n", m.From, m.To, m.Kind)
				_ = nodes[m.To].Step(now, m)
				queue = append(queue, nodes[m.To])
			}
		}
	}
	a.Join(now, []string{"B"})
	deliver(a)
	a.Tick(now) // A is idle: it heartbeats B and sends a steal request
	deliver(a)
	// Output:
	// A -> B: join
	// B -> A: announce
	// A -> B: heartbeat
	// A -> B: steal_request
	// B: migrate heat/0 to A
	// B -> A: steal_accept
}

func ExamplePolicyByName() {
	p, err := iosbridge.PolicyByName("flcras")
	fmt.Println(p.Name(), err)
	_, err = iosbridge.PolicyByName("roundrobin")
	fmt.Println(err)
	// Output:
	// flcras <nil>
	// iosbridge: unknown policy "roundrobin" (valid: ars, atsras, crs, flcras, mpiios, none, nrs, nrs-ars, rhns, robinhood, rs, sheriff, sras)
}

func ExampleMPIIOSGain() {
	// A rank that would get Δ = 0.5 more CPU, with 1000 iterations of 1 s left, and an
	// 8 MB checkpoint over a 12.5 MB/s link: Γ = 0.5·ln(1000) − 0.64 s.
	fmt.Printf("%.3f\n", iosbridge.MPIIOSGain(0.5, 1000, 8e6/12.5e6))
	// Output: 2.814
}

func ExampleSampler() {
	// In production Root is "" (the real /proc and /sys/fs/cgroup); here a fake tree.
	root, _ := os.MkdirTemp("", "iosbridge")
	defer os.RemoveAll(root)
	write := func(rel, s string) {
		_ = os.MkdirAll(filepath.Dir(filepath.Join(root, rel)), 0o755)
		_ = os.WriteFile(filepath.Join(root, rel), []byte(s), 0o644)
	}
	write("proc/stat", "cpu  0 0 0 1000 0 0 0 0 0 0\ncpu0 0 0 0 500 0 0 0 0 0 0\ncpu1 0 0 0 500 0 0 0 0 0 0\n")
	write("proc/meminfo", "MemTotal: 2048 kB\nMemAvailable: 1024 kB\n")
	write("proc/self/cgroup", "0::/\n")
	write("proc/self/mountinfo", "31 23 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n")
	write("sys/fs/cgroup/cpu.max", "100000 100000\n")

	s := &iosbridge.Sampler{Node: "n1", Root: root}
	p, err := s.Sample(time.Unix(0, 0), nil)
	fmt.Println(p.CPUs, p.EffectiveCPUs, p.Availability, p.MemFreeBytes, err)
	// Output: 2 1 1 1048576 <nil>
}

func ExampleATSRASRemoteEstimate() {
	// A rank processed 100 messages in 10 s (M(L) = 10/s), computing 50 ms per message at
	// half a CPU; of the 7 messages it sent, 6 went to the stealer's ranks and 1 to a rank
	// here. With a whole CPU free there, it would process about 25 messages per second
	// (no round trip measured: all of its time in mpi calls is taken as communication).
	m, ok := iosbridge.ATSRASRemoteEstimate(0.05, 100, 10, 7, 1, 6, 0.5, 1, 0)
	fmt.Printf("%.2f %v\n", m, ok)
	// Output: 25.45 true
}

// The thesis's Table 2.4: 10 GB over three processors in proportion to their clock rates.
func ExampleDistributeData() {
	powers := []float64{
		iosbridge.ProcessingPower([]iosbridge.Processor{{GHz: 0.8, Available: 1}}),
		iosbridge.ProcessingPower([]iosbridge.Processor{{GHz: 1.7, Available: 1}}),
		iosbridge.ProcessingPower([]iosbridge.Processor{{GHz: 2.2, Available: 1}}),
	}
	norm, data, err := iosbridge.DistributeData(powers, 10, iosbridge.LinearCost{A: 2})
	if err != nil {
		fmt.Println(err)
		return
	}
	for i := range data {
		fmt.Printf("p'=%.2f d=%.1fGB\n", norm[i], data[i])
	}
	// Output:
	// p'=0.17 d=1.7GB
	// p'=0.36 d=3.6GB
	// p'=0.47 d=4.7GB
}
