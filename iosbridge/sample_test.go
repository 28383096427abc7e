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

// inCgroup makes the tree's process a member of the root cgroup of a v2 hierarchy mounted at
// /sys/fs/cgroup (v=2) or of a v1 "cpu,cpuacct" one mounted at /sys/fs/cgroup/cpu,cpuacct.
func inCgroup(t *testing.T, root string, v int) {
	t.Helper()
	if v == 2 {
		writeFile(t, root, "proc/self/cgroup", "0::/\n")
		writeFile(t, root, "proc/self/mountinfo", "31 23 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n")
		return
	}
	writeFile(t, root, "proc/self/cgroup", "3:cpu,cpuacct:/\n")
	writeFile(t, root, "proc/self/mountinfo", "32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n")
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
	inCgroup(t, root, 2)
	s := &Sampler{Node: "n1", Root: root}
	p, err := s.Sample(t0, ids("j", 0))
	if err != nil {
		t.Fatal(err)
	}
	// First sample: since-boot utilization 1−850/1000 = 0.15 → 3.4 idle CPUs, clipped to the
	// 1.5 quota → availability 1.
	if p.Node != "n1" || p.CPUs != 4 || p.EffectiveCPUs != 1.5 || p.Load1 != 0.5 || len(p.Ranks) != 1 || !p.SampledAt.Equal(t0) || p.LoadSource != "/proc/stat (whole machine)" {
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
	inCgroup(t, root, 1)
	writeFile(t, root, "sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us", "200000\n")
	writeFile(t, root, "sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us", "100000\n")
	s = &Sampler{Node: "n", Root: root} // a Sampler finds its cgroup once
	if p, err = s.Sample(t0, nil); err != nil || p.EffectiveCPUs != 2 {
		t.Fatalf("v1 quota: %+v %v", p, err)
	}
	s2 := &Sampler{Node: "n", Root: t.TempDir()}
	if _, err := s2.Sample(t0, nil); err == nil || !strings.Contains(err.Error(), "proc/stat") {
		t.Fatalf("missing /proc/stat: err = %v", err)
	}
}
