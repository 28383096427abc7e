package nodecpu

import (
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"testing/fstest"
	"time"
)

// loadTree reads a recorded tree (testdata/LAYOUT/tN) into memory, and the time it was
// recorded at from its uptime file.
func loadTree(t *testing.T, dir string) (fstest.MapFS, time.Time) {
	t.Helper()
	m := fstest.MapFS{}
	var at time.Time
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if rel == "uptime" {
			s, err := strconv.ParseFloat(strings.TrimSpace(string(b)), 64)
			if err != nil {
				return err
			}
			at = time.Unix(0, 0).Add(time.Duration(s * float64(time.Second)))
			return nil
		}
		m[filepath.ToSlash(rel)] = &fstest.MapFile{Data: b}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return m, at
}

// dropLines removes the lines containing any of subs from a file of m.
func dropLines(m fstest.MapFS, name string, subs ...string) {
	var keep []string
	for _, line := range strings.Split(string(m[name].Data), "\n") {
		drop := false
		for _, s := range subs {
			drop = drop || strings.Contains(line, s)
		}
		if !drop {
			keep = append(keep, line)
		}
	}
	m[name] = &fstest.MapFile{Data: []byte(strings.Join(keep, "\n"))}
}

func approx(t *testing.T, what string, got, want float64) {
	t.Helper()
	if math.Abs(got-want) > 1e-3 {
		t.Errorf("%s = %.4f, want %.4f", what, got, want)
	}
}

// The load of a node in every layout, measured between two recorded snapshots.
func TestLoadInEveryLayout(t *testing.T) {
	// Recorded: Δcpuacct.usage 606887548 ns and Δusage_usec 620275 µs (unified) in 1.09 s
	// against a 0.5-CPU quota; 10 of the periods throttled; the host was fully busy.
	noAcct := func(m fstest.MapFS) {
		dropLines(m, "proc/self/mountinfo", "cpuacct")
		dropLines(m, "proc/self/cgroup", "cpuacct")
	}
	cases := []struct {
		name, dir string
		edit      func(fstest.MapFS)
		quotaOnly bool
		source    Source
		quota     float64 // 0: no limit
		capacity  float64
		used      float64
		avail     float64
	}{
		{name: "whole machine (process in the root cgroup, no quota)", dir: "v1-hybrid",
			edit: func(m fstest.MapFS) {
				m["proc/self/cgroup"] = &fstest.MapFile{Data: []byte("2:cpuacct:/\n1:cpu:/\n0::/\n")}
			},
			source: SourceProcStat, capacity: 2, used: 2, avail: 0},
		{name: "v1 cpu and cpuacct apart (recorded)", dir: "v1-hybrid", quotaOnly: true,
			source: SourceCPUAcct, quota: 0.5, capacity: 0.5, used: 0.606887548 / 1.09, avail: 0},
		{name: "v1 apart, host counters too", dir: "v1-hybrid",
			source: SourceCPUAcct, quota: 0.5, capacity: 0.5, used: 0.606887548 / 1.09, avail: 0},
		{name: "hybrid, no cpuacct: v2 usage of the same path", dir: "v1-hybrid", edit: noAcct, quotaOnly: true,
			source: SourceCgroupV2, quota: 0.5, capacity: 0.5, used: 0.620275 / 1.09, avail: 0},
		{name: "v1 cpu alone: throttling counters", dir: "v1-hybrid", quotaOnly: true,
			edit:   func(m fstest.MapFS) { noAcct(m); dropLines(m, "proc/self/mountinfo", "cgroup2") },
			source: SourceThrottling, quota: 0.5, capacity: 0.5, used: 0.5 * 10 / 10.9, avail: 1 - 10/10.9},
		{name: "v1 cpu,cpuacct together in a container", dir: "v1-comounted",
			source: SourceCPUAcct, quota: 1, capacity: 1, used: 0.25, avail: 0.75},
		{name: "v2, quota on a parent slice", dir: "v2-nested",
			source: SourceCgroupV2, quota: 1.5, capacity: 1.5, used: 0.75, avail: 0.5},
		{name: "v2 in a cgroup namespace, affinity 2 of 8 CPUs", dir: "v2-cgroupns",
			source: SourceCgroupV2, quota: 2, capacity: 2, used: 1, avail: 0.5},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fs0, t0 := loadTree(t, filepath.Join("testdata", c.dir, "t0"))
			fs1, t1 := loadTree(t, filepath.Join("testdata", c.dir, "t1"))
			if c.edit != nil {
				c.edit(fs0)
				c.edit(fs1)
			}
			r0, err := New(fs0)
			if err != nil {
				t.Fatal(err)
			}
			r1, err := New(fs1)
			if err != nil {
				t.Fatal(err)
			}
			c0, err := r0.Counters(t0)
			if err != nil {
				t.Fatal(err)
			}
			c1, err := r1.Counters(t1)
			if err != nil {
				t.Fatal(err)
			}
			if c1.Quota.Limited != (c.quota > 0) || c.quota > 0 && c1.Quota.CPUs != c.quota {
				t.Errorf("quota %+v, want %v CPUs", c1.Quota, c.quota)
			}
			l, err := Measure(c0, c1, c.quotaOnly)
			if err != nil {
				t.Fatal(err)
			}
			if l.Source != c.source {
				t.Errorf("source %v, want %v (cgroup %+v)", l.Source, c.source, r1.Cgroup())
			}
			approx(t, "capacity", l.Capacity, c.capacity)
			approx(t, "used", l.Used, c.used)
			approx(t, "availability", l.Availability, c.avail)
			if u, err := r1.UsableCPUs(); err != nil || u != c.capacity {
				t.Errorf("UsableCPUs = %v, %v; want %v", u, err, c.capacity)
			}
		})
	}
}

func TestLocateCgroup(t *testing.T) {
	v1 := "32 31 0:29 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n" +
		"33 31 0:30 / /sys/fs/cgroup/cpuacct rw - cgroup cgroup rw,cpuacct\n" +
		"41 31 0:38 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n"
	cases := []struct {
		name, self, mountinfo string
		want                  Cgroup
	}{
		{"v1 apart, hybrid", "2:cpuacct:/a/b\n1:cpu:/a/b\n0::/a/b\n", v1, Cgroup{Version: 1,
			CPU: "sys/fs/cgroup/cpu/a/b", CPUMount: "sys/fs/cgroup/cpu",
			Acct: "sys/fs/cgroup/cpuacct/a/b", AcctMount: "sys/fs/cgroup/cpuacct",
			Unified: "sys/fs/cgroup/unified/a/b", UnifiedMount: "sys/fs/cgroup/unified", UnifiedSamePath: true}},
		{"v1 co-mounted, ordering of controllers differs", "4:cpuacct,cpu:/x\n",
			"1 0 0:1 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n", Cgroup{Version: 1,
				CPU: "sys/fs/cgroup/cpu,cpuacct/x", CPUMount: "sys/fs/cgroup/cpu,cpuacct",
				Acct: "sys/fs/cgroup/cpu,cpuacct/x", AcctMount: "sys/fs/cgroup/cpu,cpuacct"}},
		{"v2 only", "0::/user.slice/u.service\n", "1 0 0:1 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n",
			Cgroup{Version: 2, CPU: "sys/fs/cgroup/user.slice/u.service", CPUMount: "sys/fs/cgroup"}},
		{"bind mount of a container's cgroup", "0::/docker/abc/sub\n", "1 0 0:1 /docker/abc /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n",
			Cgroup{Version: 2, CPU: "sys/fs/cgroup/sub", CPUMount: "sys/fs/cgroup"}},
		{"moved out of the mounted part: the nearest visible cgroup", "0::/elsewhere\n", "1 0 0:1 /docker/abc /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n",
			Cgroup{Version: 2, CPU: "sys/fs/cgroup", CPUMount: "sys/fs/cgroup"}},
		{"outside the cgroup namespace", "0::/../../x\n", "1 0 0:1 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n",
			Cgroup{Version: 2, CPU: "sys/fs/cgroup", CPUMount: "sys/fs/cgroup"}},
		{"escaped mount point", "0::/\n", `1 0 0:1 / /mnt/cg\040v2 rw - cgroup2 cgroup2 rw` + "\n",
			Cgroup{Version: 2, CPU: "mnt/cg v2", CPUMount: "mnt/cg v2"}},
		{"no cgroup file system", "0::/\n", "1 0 0:1 / / rw - ext4 /dev/vda rw\n", Cgroup{}},
	}
	for _, c := range cases {
		if got := LocateCgroup(c.self, c.mountinfo); got != c.want {
			t.Errorf("%s:\n got %+v\nwant %+v", c.name, got, c.want)
		}
	}
}

func TestQuotaParsers(t *testing.T) {
	cases := []struct {
		name    string
		q       func() (Quota, error)
		cpus    float64
		limited bool
		err     bool
	}{
		{"v2 1.5 CPUs", func() (Quota, error) { return ParseCPUMax("150000 100000\n") }, 1.5, true, false},
		{"v2 max", func() (Quota, error) { return ParseCPUMax("max 100000\n") }, 0, false, false},
		{"v2 one field max", func() (Quota, error) { return ParseCPUMax("max") }, 0, false, false},
		{"v2 one field N: the default period", func() (Quota, error) { return ParseCPUMax("50000") }, 0.5, true, false},
		{"v2 empty", func() (Quota, error) { return ParseCPUMax("") }, 0, false, true},
		{"v2 negative", func() (Quota, error) { return ParseCPUMax("-5 100000") }, 0, false, true},
		{"v2 garbage", func() (Quota, error) { return ParseCPUMax("garbage") }, 0, false, true},
		{"v2 three fields", func() (Quota, error) { return ParseCPUMax("1 2 3") }, 0, false, true},
		{"v1 2 CPUs", func() (Quota, error) { return ParseCFSQuota("200000\n", "100000\n") }, 2, true, false},
		{"v1 no limit", func() (Quota, error) { return ParseCFSQuota("-1", "100000") }, 0, false, false},
		{"v1 garbage", func() (Quota, error) { return ParseCFSQuota("lots", "100000") }, 0, false, true},
		{"v1 zero period", func() (Quota, error) { return ParseCFSQuota("5", "0") }, 0, false, true},
	}
	for _, c := range cases {
		q, err := c.q()
		if (err != nil) != c.err || q.CPUs != c.cpus || q.Limited != c.limited {
			t.Errorf("%s: %+v, %v", c.name, q, err)
		}
	}
}

func TestTightestQuotaOnThePathWins(t *testing.T) {
	m := fstest.MapFS{
		"proc/self/cgroup":              {Data: []byte("0::/jobs/j1\n")},
		"proc/self/mountinfo":           {Data: []byte("1 0 0:1 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n")},
		"sys/fs/cgroup/jobs/cpu.max":    {Data: []byte("150000 100000\n")},
		"sys/fs/cgroup/jobs/j1/cpu.max": {Data: []byte("max 100000\n")},
		"sys/fs/cgroup/other/cpu.max":   {Data: []byte("10000 100000\n")},
	}
	r, err := New(m)
	if err != nil {
		t.Fatal(err)
	}
	q, err := r.Quota()
	if err != nil || !q.Limited || q.CPUs != 1.5 || q.Dir != "sys/fs/cgroup/jobs" {
		t.Fatalf("quota %+v, %v", q, err)
	}
	m["sys/fs/cgroup/jobs/j1/cpu.max"] = &fstest.MapFile{Data: []byte("bogus\n")}
	if _, err := r.Quota(); err == nil || !strings.Contains(err.Error(), "jobs/j1") {
		t.Fatalf("malformed cpu.max: %v", err)
	}
}

func TestCounterParsers(t *testing.T) {
	if _, err := ParseProcStat("intr 1\n"); err == nil {
		t.Error("/proc/stat without a cpu line accepted")
	}
	for _, bad := range []string{"", "cpu 1 2\n", "cpu 1 2 x 4\n"} {
		if _, err := ParseProcStat(bad); err == nil {
			t.Errorf("ParseProcStat(%q) accepted", bad)
		}
	}
	a, _ := ParseProcStat("cpu  100 0 50 800 50 0 0 0 0 0\ncpu0 1\ncpu1 1\n")
	// Guest time (9th field) is inside user already.
	b, _ := ParseProcStat("cpu  400 0 150 1100 150 0 0 0 100 0\n")
	if u, err := HostUtilization(a, b); err != nil || u != 0.5 || a.CPUs != 2 {
		t.Errorf("utilization %v, %v (cpus %d)", u, err, a.CPUs)
	}
	if _, err := HostUtilization(b, a); err == nil {
		t.Error("counter reset: want an error, not an idle machine")
	}
	if s, err := ParseCPUStat("nr_periods 5\nnr_throttled 2\nthrottled_time 7\n"); err != nil || !s.HasThrottling || s.HasUsage || s.Throttled != 2 || s.ThrottledTime != 7 {
		t.Errorf("v1 cpu.stat: %+v, %v", s, err)
	}
	if _, err := ParseCPUStat("nr_bursts 0\n"); err == nil {
		t.Error("cpu.stat without usage or periods accepted")
	}
	if _, err := ParseCPUStat("usage_usec x\n"); err == nil {
		t.Error("cpu.stat with a bad number accepted")
	}
	if d, err := ParseCPUAcctUsage("1500\n"); err != nil || d != 1500 {
		t.Errorf("cpuacct.usage: %v, %v", d, err)
	}
	if _, err := ParseCPUAcctUsage("-1"); err == nil {
		t.Error("negative cpuacct.usage accepted")
	}
	if l, err := ParseLoadavg("0.15 1.16 2.80 3/91 30864\n"); err != nil || l.Running != 3 || l.Threads != 91 || l.Load1 != 0.15 {
		t.Errorf("loadavg %+v, %v", l, err)
	}
	for _, bad := range []string{"0.15 1.16", "x 1 2 3/4 5", "1 1 1 3 5"} {
		if _, err := ParseLoadavg(bad); err == nil {
			t.Errorf("ParseLoadavg(%q) accepted", bad)
		}
	}
	psi := "some avg10=1.22 avg60=1.42 avg300=17.99 total=3395547653\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
	if v, err := ParsePressureTotal(psi); err != nil || v != 3395547653 {
		t.Errorf("pressure total %v, %v", v, err)
	}
	for _, bad := range []string{"", "full total=3\n", "some avg10=1\n", "some total=x\n"} {
		if _, err := ParsePressureTotal(bad); err == nil {
			t.Errorf("ParsePressureTotal(%q) accepted", bad)
		}
	}
	for s, want := range map[string]int{"0-1": 2, "0": 1, "0-3,8,10-11\n": 7, "": 0, "3-1": 0, "a": 0} {
		if got := ParseCPUList(s); got != want {
			t.Errorf("ParseCPUList(%q) = %d, want %d", s, got, want)
		}
	}
	for _, c := range []struct {
		running, cpus int
		want          float64
	}{{1, 2, 0}, {2, 2, 0}, {3, 2, 1.0 / 3}, {8, 2, 0.75}, {0, 2, 0}} {
		if got := RunnableExcess(c.running, c.cpus); got != c.want {
			t.Errorf("RunnableExcess(%d, %d) = %v, want %v", c.running, c.cpus, got, c.want)
		}
	}
	stat := "4242 (a) b (c)) S 1 2 3 4 5 6 7 8 9 10 150 50 0 0 20 0 1 0 777 123456 10 18446744073709551615"
	if p, err := ParseProcPIDStat(stat, 4096); err != nil || p.CPU != 2*time.Second || p.StartTicks != 777 || p.RSSBytes != 40960 {
		t.Errorf("/proc/PID/stat: %+v, %v", p, err)
	}
	if _, err := ParseProcPIDStat("1 (x) S 1 2", 4096); err == nil {
		t.Error("short /proc/PID/stat accepted")
	}
}

func TestStallFromPressureElseLoadavg(t *testing.T) {
	m, _ := loadTree(t, filepath.Join("testdata", "v2-nested", "t0"))
	r, _ := New(m)
	s, err := r.OpenStall(nil)
	if err != nil || s.Source() != SourcePressure {
		t.Fatalf("stall %v, %v", s, err)
	}
	if v, err := s.Read(); err != nil || v != 5000000 {
		t.Errorf("pressure total %v, %v", v, err)
	}
	s.Close()
	// Without PSI: 3 runnable threads on 4 CPUs wait for nothing, 6 do a third of the time.
	delete(m, "proc/pressure/cpu")
	now := time.Duration(0)
	s, err = r.OpenStall(func() time.Duration { return now })
	if err != nil || s.Source() != SourceLoadavg {
		t.Fatalf("stall %v, %v", s, err)
	}
	now = time.Second
	if v, _ := s.Read(); v != 0 {
		t.Errorf("stall with 3 runnable on 4 CPUs: %d µs", v)
	}
	m["proc/loadavg"].Data = []byte("1 1 1 6/100 1\n") // the open file reads it again
	now = 2 * time.Second
	if v, _ := s.Read(); v != 333333 {
		t.Errorf("stall with 6 runnable on 4 CPUs for 1 s: %d µs, want 333333", v)
	}
	delete(m, "proc/loadavg")
	if _, err := r.OpenStall(nil); err != ErrNoStallSource {
		t.Errorf("no source: %v", err)
	}
}

// This machine's files read without error, whatever its layout.
func TestThisMachine(t *testing.T) {
	r, err := New(nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat("/proc/stat"); err != nil {
		t.Skip("no /proc")
	}
	if u, err := r.UsableCPUs(); err != nil || u <= 0 {
		t.Errorf("usable CPUs %v, %v", u, err)
	}
	m := NewMeter(r, false)
	if _, err := m.Sample(time.Now()); err != nil {
		t.Fatal(err)
	}
	if l, err := m.Sample(time.Now()); err != nil || l.Source == SourceNone || l.Capacity <= 0 {
		t.Errorf("load %+v, %v", l, err)
	}
	if s, err := r.OpenStall(nil); err == nil {
		a, err1 := s.Read()
		b, err2 := s.Read()
		if err1 != nil || err2 != nil || b < a {
			t.Errorf("stall counter: %v, %v; %d then %d", err1, err2, a, b)
		}
		s.Close()
	}
}

func TestRanksOnANode(t *testing.T) {
	place := []string{"a", "b", "a", "c", "a"}
	if n := RanksOn(place, "a"); n != 3 {
		t.Errorf("RanksOn a = %d, want 3", n)
	}
	if n := RanksOn(place, "z"); n != 0 {
		t.Errorf("RanksOn z = %d, want 0", n)
	}
	// mpirun placed 2, 3 run now (one extra arrived), 1 of another job.
	if n := RanksSharing(2, 3, 1); n != 4 {
		t.Errorf("RanksSharing = %d, want 4", n)
	}
}

// When the tightest quota moves to another cgroup (the testbed's emulated load gives the
// ranks' cgroup a quota of its own), the usage counters of two cgroups are not compared.
func TestQuotaMovingToAnotherCgroupRestartsTheMeasure(t *testing.T) {
	m := fstest.MapFS{
		"proc/self/cgroup":                 {Data: []byte("0::/node/work\n")},
		"proc/self/mountinfo":              {Data: []byte("1 0 0:1 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n")},
		"proc/stat":                        {Data: []byte("cpu  100 0 0 100 0 0 0 0 0 0\ncpu0 1\ncpu1 1\n")},
		"sys/fs/cgroup/node/cpu.max":       {Data: []byte("50000 100000\n")},
		"sys/fs/cgroup/node/cpu.stat":      {Data: []byte("usage_usec 9000000\n")},
		"sys/fs/cgroup/node/work/cpu.max":  {Data: []byte("max 100000\n")},
		"sys/fs/cgroup/node/work/cpu.stat": {Data: []byte("usage_usec 1000000\n")},
	}
	r, err := New(m)
	if err != nil {
		t.Fatal(err)
	}
	meter := NewMeter(r, true)
	if _, err := meter.Sample(time.Unix(10, 0)); err != nil {
		t.Fatal(err)
	}
	// The load starts: work gets 0.1 CPU; in 1 s work used 0.1 CPU (9 s below node's count).
	m["sys/fs/cgroup/node/work/cpu.max"] = &fstest.MapFile{Data: []byte("10000 100000\n")}
	m["sys/fs/cgroup/node/work/cpu.stat"] = &fstest.MapFile{Data: []byte("usage_usec 1100000\n")}
	m["proc/stat"] = &fstest.MapFile{Data: []byte("cpu  300 0 0 100 0 0 0 0 0 0\ncpu0 1\ncpu1 1\n")}
	l, err := meter.Sample(time.Unix(11, 0))
	if err != nil {
		t.Fatal(err)
	}
	if l.Source != SourceNone || l.Capacity != 0.1 {
		t.Fatalf("first sample after the quota moved: %+v", l)
	}
	m["sys/fs/cgroup/node/work/cpu.stat"] = &fstest.MapFile{Data: []byte("usage_usec 1200000\n")}
	m["proc/stat"] = &fstest.MapFile{Data: []byte("cpu  500 0 0 100 0 0 0 0 0 0\ncpu0 1\ncpu1 1\n")}
	if l, err = meter.Sample(time.Unix(12, 0)); err != nil || l.Source != SourceCgroupV2 || l.Availability != 0 {
		t.Fatalf("second sample: %+v, %v", l, err)
	}
}
