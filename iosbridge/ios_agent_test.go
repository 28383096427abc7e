package iosbridge

import (
	"strings"
	"testing"
	"time"
)

// Tests of what the pcmd IOS agent relies on beyond the protocol: per-job policies, the
// decision log, and the profiling component's process and cgroup readers.

// MPI/IOS: "reconfiguration policies ... application characteristics" decide, and mpirun
// --policy chooses a job's policy; a job started with "none" is never moved, whatever the
// node's own policy.
func TestJobPolicyNoneIsNeverMigrated(t *testing.T) {
	b := busyNode(t, "B", "A")
	var rs []RankProfile
	for i := 0; i < 4; i++ {
		r := rankProfile("j", i, 0.5)
		r.Policy = PolicyNone
		rs = append(rs, r)
	}
	if err := b.Update(t0, node("B", 2, 0, ids("j", 0, 1, 2, 3)...), rs); err != nil {
		t.Fatal(err)
	}
	req := Message{Kind: KindStealRequest, From: "A", To: "B", Origin: "A", ID: 1, TTL: 0, Profile: ptr(node("A", 2, 1))}
	if err := b.Step(t0, req); err != nil {
		t.Fatal(err)
	}
	r := b.Ready()
	if len(r.Migrations) != 0 || len(r.Decisions) != 1 || r.Decisions[0].Decision.Migrate {
		t.Fatalf("job policy none: %+v", r)
	}
	if !strings.Contains(r.Decisions[0].Decision.Reason, "policy none never migrates") {
		t.Errorf("reason %q", r.Decisions[0].Decision.Reason)
	}
	only(t, Ready{Messages: r.Messages}, KindStealFail)
}

// The other way round: a node that runs "none" still moves the ranks of a job that asked for
// a policy of its own, and the decision names that policy.
func TestJobPolicyOverridesNodePolicy(t *testing.T) {
	b := mustNode(t, Config{ID: "B", Policy: mustPolicy(t, PolicyNone)})
	var rs []RankProfile
	for i := 0; i < 4; i++ {
		r := rankProfile("j", i, 0.5)
		if i >= 2 {
			r.Job = "k"
			r.Policy = PolicySRAS
		}
		rs = append(rs, r)
	}
	hosted := append(ids("j", 0, 1), ids("k", 2, 3)...)
	if err := b.Update(t0, node("B", 2, 0, hosted...), rs); err != nil {
		t.Fatal(err)
	}
	connect(t, t0, b, "A")
	req := Message{Kind: KindStealRequest, From: "A", To: "B", Origin: "A", ID: 1, TTL: 2, Profile: ptr(node("A", 2, 1))}
	if err := b.Step(t0, req); err != nil {
		t.Fatal(err)
	}
	r := b.Ready()
	if len(r.Migrations) != 1 || r.Migrations[0].Rank.Job != "k" || r.Migrations[0].Policy != PolicySRAS {
		t.Fatalf("migrations %+v", r.Migrations)
	}
	if b.PolicyName() != PolicyNone {
		t.Errorf("node policy %q", b.PolicyName())
	}
}

func TestPerRankOrderAndDefaultPath(t *testing.T) {
	local := node("B", 2, 0, ids("j", 0, 1, 2)...)
	remote := node("A", 2, 1)
	r0, r1, r2 := rankProfile("j", 0, 0.5), rankProfile("j", 1, 0.5), rankProfile("j", 2, 0.5)
	r1.Policy, r2.Policy = PolicyNone, PolicySRAS
	pr := PerRank(mustPolicy(t, PolicyMPIIOS))
	if pr.Name() != PolicyMPIIOS {
		t.Fatal(pr.Name())
	}
	// Only default ranks: exactly the default policy's answer.
	in := DecisionInput{Local: local, Remote: remote, Ranks: []RankProfile{r0}, Now: t0}
	if got, want := pr.Decide(in), mustPolicy(t, PolicyMPIIOS).Decide(in); got != want {
		t.Fatalf("default path %+v, want %+v", got, want)
	}
	// Default first: mpiios gives rank 0 before S-RAS is asked about rank 2.
	in.Ranks = []RankProfile{r2, r1, r0}
	if d := pr.Decide(in); !d.Migrate || d.Rank.Rank != 0 || d.Policy != PolicyMPIIOS {
		t.Fatalf("mixed %+v", d)
	}
	// Without rank 0: none declines rank 1, S-RAS gives rank 2.
	in.Ranks = []RankProfile{r1, r2}
	if d := pr.Decide(in); !d.Migrate || d.Rank.Rank != 2 || d.Policy != PolicySRAS {
		t.Fatalf("none then sras %+v", d)
	}
	in.Ranks = []RankProfile{r1}
	if d := pr.Decide(in); d.Migrate || !strings.Contains(d.Reason, "none (1 rank(s))") {
		t.Fatalf("none only %+v", d)
	}
	bad := r0
	bad.Policy = "roundrobin"
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "unknown policy") {
		t.Fatalf("unknown job policy accepted: %v", err)
	}
}

// Thesis §2.2.1: the protocol "will send the profiling information from the steal request to
// the decision module"; every answer of the decision module is logged with its reason.
func TestDecisionModuleAnswersAreRecorded(t *testing.T) {
	b := busyNode(t, "B", "A", "C")
	req := Message{Kind: KindStealRequest, From: "C", To: "B", Origin: "A", ID: 7, TTL: 2, Profile: ptr(node("A", 2, 1))}
	if err := b.Step(t0, req); err != nil {
		t.Fatal(err)
	}
	if !b.HasReady() {
		t.Fatal("nothing ready after a decision")
	}
	r := b.Ready()
	if len(r.Decisions) != 1 {
		t.Fatalf("decisions %+v", r.Decisions)
	}
	d := r.Decisions[0]
	if d.Origin != "A" || d.From != "C" || d.RequestID != 7 || d.Candidates != 4 || !d.At.Equal(t0) || !d.Decision.Migrate || d.Decision.Reason == "" {
		t.Fatalf("record %+v", d)
	}
	// A node's own request coming back is not a decision.
	a := idleNode(t, "A", "B")
	a.Tick(t0)
	s := ofKind(a.Ready(), KindStealRequest)[0]
	s.From, s.To, s.TTL = "B", "A", 1
	if err := a.Step(t0, s); err != nil {
		t.Fatal(err)
	}
	if r := a.Ready(); len(r.Decisions) != 0 {
		t.Fatalf("own request decided: %+v", r.Decisions)
	}
}

func ptr[T any](v T) *T { return &v }

// MPI/IOS: "application entity profiles: processing, communication, data accesses, memory
// usage". The agent reads a rank's CPU time and resident memory from /proc/PID/stat.
func TestSamplerProcess(t *testing.T) {
	// A command name with spaces and parentheses; utime 250, stime 50, starttime 4242, rss 300.
	line := "1234 (my (odd) prog) S 1 1234 1234 0 -1 4194304 99 0 0 0 250 50 0 0 20 0 1 0 4242 3133440 300 18446744073709551615 0\n"
	root := t.TempDir()
	writeFile(t, root, "proc/77/stat", line)
	s := &Sampler{Root: root}
	if pt, err := s.Process(77); err != nil || pt.CPU != 3*time.Second || pt.StartTicks != 4242 {
		t.Fatalf("Process: %+v %v", pt, err)
	}
	if _, err := s.Process(78); err == nil {
		t.Fatal("missing process: want error")
	}
}

// "resource profiling ... available cpu power ... measured periodically": a pcmd in a
// systemd unit with CPUQuota sees its own cgroup's quota, and a smaller one of a parent slice.
func TestSamplerOwnCgroupQuotaAndAncestors(t *testing.T) {
	root := t.TempDir()
	writeFile(t, root, "proc/stat", statBusy) // 4 CPUs
	writeFile(t, root, "proc/meminfo", meminfo)
	writeFile(t, root, "proc/self/cgroup", "0::/mpios.slice/pcmd.service\n")
	writeFile(t, root, "proc/self/mountinfo", "31 23 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n")
	writeFile(t, root, "sys/fs/cgroup/mpios.slice/cpu.max", "300000 100000\n")
	writeFile(t, root, "sys/fs/cgroup/mpios.slice/pcmd.service/cpu.max", "max 100000\n")
	s := &Sampler{Node: "n", Root: root}
	p, err := s.Sample(t0, nil)
	if err != nil || p.EffectiveCPUs != 3 {
		t.Fatalf("parent slice quota: %+v %v", p, err)
	}
	writeFile(t, root, "sys/fs/cgroup/mpios.slice/pcmd.service/cpu.max", "150000 100000\n")
	if p, err = s.Sample(t0, nil); err != nil || p.EffectiveCPUs != 1.5 {
		t.Fatalf("own quota: %+v %v", p, err)
	}
	// A hybrid layout uses the v1 cpu controller, and cpuacct mounted apart for the usage.
	root2 := t.TempDir()
	writeFile(t, root2, "proc/stat", statBusy)
	writeFile(t, root2, "proc/meminfo", meminfo)
	writeFile(t, root2, "proc/self/cgroup", "2:cpuacct:/job\n1:cpu:/job\n0::/\n")
	writeFile(t, root2, "proc/self/mountinfo", "32 31 0:29 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n"+
		"33 31 0:30 / /sys/fs/cgroup/cpuacct rw - cgroup cgroup rw,cpuacct\n41 31 0:38 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n")
	writeFile(t, root2, "sys/fs/cgroup/cpu/job/cpu.cfs_quota_us", "100000\n")
	writeFile(t, root2, "sys/fs/cgroup/cpu/job/cpu.cfs_period_us", "100000\n")
	writeFile(t, root2, "sys/fs/cgroup/cpuacct/job/cpuacct.usage", "0\n")
	s = &Sampler{Node: "n", Root: root2}
	if p, err = s.Sample(t0, nil); err != nil || p.EffectiveCPUs != 1 || p.LoadSource != "cgroup v1 cpuacct.usage" {
		t.Fatalf("hybrid: %+v %v", p, err)
	}
}

// Host idle CPUs do not help a cgroup that already uses its whole quota.
func TestSamplerCgroupUsageLimitsAvailability(t *testing.T) {
	root := t.TempDir()
	writeFile(t, root, "proc/stat", statPrev) // 2 CPUs, 15% busy since boot
	writeFile(t, root, "proc/meminfo", meminfo)
	inCgroup(t, root, 2)
	writeFile(t, root, "sys/fs/cgroup/cpu.max", "100000 100000\n") // 1 CPU
	writeFile(t, root, "sys/fs/cgroup/cpu.stat", "usage_usec 1000000\nuser_usec 1\n")
	s := &Sampler{Node: "n", Root: root}
	if p, err := s.Sample(t0, nil); err != nil || p.Availability != 1 {
		t.Fatalf("first sample (no usage baseline): %+v %v", p, err)
	}
	// 0.75 s of CPU in 1 s: a quarter of the 1-CPU quota is left although the host is idle.
	writeFile(t, root, "proc/stat", statCur)
	writeFile(t, root, "sys/fs/cgroup/cpu.stat", "usage_usec 1750000\n")
	p, err := s.Sample(t0.Add(time.Second), nil)
	if err != nil {
		t.Fatal(err)
	}
	approx(t, "availability under a used quota", p.Availability, 0.25)
	if p.LoadSource != "cgroup v2 cpu.stat usage_usec" {
		t.Errorf("load source %q", p.LoadSource)
	}
}

// A migration the job refused frees the rank (MigrationFailed) but, with Cooldown, the node
// does not offer the same rank again until the cooldown has passed.
func TestCooldownAfterRefusedMigration(t *testing.T) {
	b := mustNode(t, Config{ID: "B", Policy: mustPolicy(t, PolicySRAS), Rand: fixedRand{0}})
	var rs []RankProfile
	for i := 0; i < 4; i++ {
		rs = append(rs, rankProfile("j", i, 0.5))
	}
	if err := b.Update(t0, node("B", 2, 0, ids("j", 0, 1, 2, 3)...), rs); err != nil {
		t.Fatal(err)
	}
	steal := func(at time.Time, id uint64) RankID {
		t.Helper()
		req := Message{Kind: KindStealRequest, From: "A", To: "B", Origin: "A", ID: id, TTL: 0, Profile: ptr(node("A", 2, 1))}
		if err := b.Step(at, req); err != nil {
			t.Fatal(err)
		}
		r := b.Ready()
		if len(r.Migrations) != 1 {
			t.Fatalf("steal %d at %v: %+v", id, at, r)
		}
		return r.Migrations[0].Rank
	}
	first := steal(t0, 1)
	b.MigrationFailed(first)
	b.Cooldown(t0, first)
	if got := steal(t0.Add(time.Second), 2); got == first {
		t.Fatalf("refused rank %s offered again within the cooldown", got)
	} else {
		b.MigrationFailed(got)
	}
	if got := steal(t0.Add(DefaultStability().Cooldown+time.Second), 3); got != first {
		t.Fatalf("after the cooldown: %s, want %s again", got, first)
	}
}
