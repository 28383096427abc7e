package iosbridge

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const (
	statPrev = "cpu  100 0 50 800 50 0 0 0 0 0\ncpu0 50 0 25 400 25 0 0 0 0 0\ncpu1 50 0 25 400 25 0 0 0 0 0\nintr 12345\nctxt 999\n"
	// Guest time (9th field, 100) is already inside user and must not be counted twice.
	statCur  = "cpu  400 0 150 1100 150 0 0 0 100 0\ncpu0 200 0 75 550 75 0 0 0 50 0\ncpu1 200 0 75 550 75 0 0 0 50 0\n"
	statBusy = "cpu  700 0 150 900 50 0 0 0 0 0\ncpu0 1 0 0 0 0 0 0 0 0 0\ncpu1 1 0 0 0 0 0 0 0 0 0\ncpu2 1 0 0 0 0 0 0 0 0 0\ncpu3 1 0 0 0 0 0 0 0 0 0\n"
	meminfo  = "MemTotal:       16384000 kB\nMemFree:         1024000 kB\nMemAvailable:    8192000 kB\nBuffers:          100000 kB\nCached:          2000000 kB\n"
)

func TestParseProcStatAggregateAndCPUCount(t *testing.T) {
	ct, err := ParseProcStat(statPrev)
	if err != nil {
		t.Fatal(err)
	}
	// total = 100+0+50+800+50 = 1000, idle+iowait = 850.
	if ct.Total() != 1000 || ct.IdleTicks() != 850 || ct.CPUs != 2 {
		t.Fatalf("got total %d idle %d cpus %d", ct.Total(), ct.IdleTicks(), ct.CPUs)
	}
	for _, bad := range []string{"", "intr 1\n", "cpu 1 2 x 4\n", "cpu 1 2\n"} {
		if _, err := ParseProcStat(bad); err == nil {
			t.Errorf("ParseProcStat(%q): want error", bad)
		}
	}
}

func TestCPUUtilizationFromTwoSnapshots(t *testing.T) {
	prev, _ := ParseProcStat(statPrev)
	cur, _ := ParseProcStat(statCur)
	// Δtotal = 1800−1000 = 800 (guest excluded), Δidle = (1100+150)−(800+50) = 400,
	// utilization = 1 − 400/800 = 0.5.
	u, err := CPUUtilization(prev, cur)
	if err != nil {
		t.Fatal(err)
	}
	approx(t, "utilization", u, 0.5)
	if _, err := CPUUtilization(cur, cur); err == nil {
		t.Fatal("equal snapshots: want error, not an idle machine")
	}
	if _, err := CPUUtilization(cur, prev); err == nil {
		t.Fatal("counter reset: want error")
	}
}

func TestCgroupQuotaParsers(t *testing.T) {
	cases := []struct {
		name         string
		cpus         float64
		limited, err bool
		f            func() (float64, bool, error)
	}{
		{"v1 2 cpus", 2, true, false, func() (float64, bool, error) { return ParseCgroupV1Quota("200000\n", "100000\n") }},
		{"v1 unlimited", 0, false, false, func() (float64, bool, error) { return ParseCgroupV1Quota("-1", "100000") }},
		{"v1 garbage", 0, false, true, func() (float64, bool, error) { return ParseCgroupV1Quota("lots", "100000") }},
		{"v1 zero period", 0, false, true, func() (float64, bool, error) { return ParseCgroupV1Quota("5", "0") }},
		{"v2 1.5 cpus", 1.5, true, false, func() (float64, bool, error) { return ParseCgroupV2CPUMax("150000 100000\n") }},
		{"v2 max", 0, false, false, func() (float64, bool, error) { return ParseCgroupV2CPUMax("max 100000\n") }},
		{"v2 quota only", 0.5, true, false, func() (float64, bool, error) { return ParseCgroupV2CPUMax("50000") }},
		{"v2 empty", 0, false, true, func() (float64, bool, error) { return ParseCgroupV2CPUMax("") }},
		{"v2 negative", 0, false, true, func() (float64, bool, error) { return ParseCgroupV2CPUMax("-5 100000") }},
	}
	for _, c := range cases {
		cpus, lim, err := c.f()
		if (err != nil) != c.err || cpus != c.cpus || lim != c.limited {
			t.Errorf("%s: got %v %v %v", c.name, cpus, lim, err)
		}
	}
	if got := EffectiveCPUs(8, 1.5, true); got != 1.5 {
		t.Errorf("EffectiveCPUs(8, 1.5 quota) = %v", got)
	}
	if got := EffectiveCPUs(8, 0, false); got != 8 {
		t.Errorf("EffectiveCPUs(8, unlimited) = %v", got)
	}
	if got := EffectiveCPUs(2, 4, true); got != 2 {
		t.Errorf("EffectiveCPUs(2, quota 4) = %v (quota above online CPUs must not add CPUs)", got)
	}
}

func TestParseMeminfo(t *testing.T) {
	m, err := ParseMeminfo(meminfo)
	if err != nil {
		t.Fatal(err)
	}
	if m.TotalBytes != 16384000*1024 || m.FreeBytes != 8192000*1024 {
		t.Fatalf("got %+v", m)
	}
	// Pre-3.14 kernels: MemFree+Buffers+Cached = 1024000+100000+2000000 kB.
	old := strings.Replace(meminfo, "MemAvailable:    8192000 kB\n", "", 1)
	m, err = ParseMeminfo(old)
	if err != nil {
		t.Fatal(err)
	}
	if m.FreeBytes != 3124000*1024 {
		t.Fatalf("fallback free = %d", m.FreeBytes)
	}
	if _, err := ParseMeminfo("MemFree: 1 kB\n"); err == nil {
		t.Fatal("no MemTotal: want error")
	}
	if _, err := ParseMeminfo("MemTotal: x kB\n"); err == nil {
		t.Fatal("bad number: want error")
	}
}

func TestAvailabilityClipsHostIdleToQuota(t *testing.T) {
	// 4 CPUs at 87.5% busy: 0.5 idle CPUs; quota 1.5 → 0.5/1.5 = 1/3.
	approx(t, "availability", Availability(4, 1.5, 0.875), 1.0/3)
	// 4 CPUs at 15% busy: 3.4 idle CPUs but only 1.5 usable → fully available.
	approx(t, "availability", Availability(4, 1.5, 0.15), 1)
	approx(t, "availability", Availability(4, 0, 0.15), 0)
}

func writeFile(t *testing.T, root, rel, content string) {
	t.Helper()
	p := filepath.Join(root, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestSamplerReadsFilesUnderRoot(t *testing.T) {
	root := t.TempDir()
	writeFile(t, root, "proc/stat", strings.Replace(statPrev, "cpu1", "cpu1 1 1 1 1\ncpu2 1 1 1 1\ncpu3", 1))
	writeFile(t, root, "proc/meminfo", meminfo)
	writeFile(t, root, "proc/loadavg", "0.50 0.40 0.30 1/200 1234\n")
	writeFile(t, root, "sys/fs/cgroup/cpu.max", "150000 100000\n")
	s := &Sampler{Node: "n1", Root: root}
	p, err := s.Sample(t0, ids("j", 0))
	if err != nil {
		t.Fatal(err)
	}
	// First sample: since-boot utilization 1−850/1000 = 0.15 → 3.4 idle CPUs, clipped to the
	// 1.5 quota → availability 1.
	if p.Node != "n1" || p.CPUs != 4 || p.EffectiveCPUs != 1.5 || p.Load1 != 0.5 || len(p.Ranks) != 1 || !p.SampledAt.Equal(t0) {
		t.Fatalf("profile %+v", p)
	}
	approx(t, "first availability", p.Availability, 1)
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	// Second sample: Δtotal 800, Δidle 100 → 87.5% busy → 0.5 idle CPUs → 0.5/1.5.
	writeFile(t, root, "proc/stat", statBusy)
	p, err = s.Sample(t0, nil)
	if err != nil {
		t.Fatal(err)
	}
	approx(t, "second availability", p.Availability, 1.0/3)
}

func TestSamplerCgroupV1AndUnlimited(t *testing.T) {
	root := t.TempDir()
	writeFile(t, root, "proc/stat", statBusy)
	writeFile(t, root, "proc/meminfo", meminfo)
	s := &Sampler{Node: "n", Root: root}
	p, err := s.Sample(t0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if p.EffectiveCPUs != 4 || p.Load1 != 0 {
		t.Fatalf("no cgroup, no loadavg: %+v", p)
	}
	writeFile(t, root, "sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us", "200000\n")
	writeFile(t, root, "sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us", "100000\n")
	if p, err = s.Sample(t0, nil); err != nil || p.EffectiveCPUs != 2 {
		t.Fatalf("v1 quota: %+v %v", p, err)
	}
	s2 := &Sampler{Node: "n", Root: t.TempDir()}
	if _, err := s2.Sample(t0, nil); err == nil || !strings.Contains(err.Error(), "proc/stat") {
		t.Fatalf("missing /proc/stat: err = %v", err)
	}
}
