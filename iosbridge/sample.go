package iosbridge

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// CPUTimes is the aggregate "cpu" line of /proc/stat, in USER_HZ ticks. Only differences
// between two snapshots mean anything; CPUUtilization takes them.
type CPUTimes struct {
	// The first eight columns of the "cpu" line, in kernel order.
	User, Nice, System, Idle, IOWait, IRQ, SoftIRQ, Steal uint64
	// CPUs counts the per-CPU "cpuN" lines, i.e. online CPUs at snapshot time.
	CPUs int
}

// Total is every tick accounted, excluding guest time, which the kernel already folds into
// user and nice (counting it twice would understate utilization).
func (t CPUTimes) Total() uint64 {
	return t.User + t.Nice + t.System + t.Idle + t.IOWait + t.IRQ + t.SoftIRQ + t.Steal
}

// IdleTicks counts idle and iowait: a CPU waiting on I/O can run a migrated rank.
func (t CPUTimes) IdleTicks() uint64 { return t.Idle + t.IOWait }

// ParseProcStat extracts the aggregate CPU counters from the text of /proc/stat.
func ParseProcStat(text string) (CPUTimes, error) {
	var t CPUTimes
	found := false
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 || !strings.HasPrefix(f[0], "cpu") {
			continue
		}
		if f[0] != "cpu" {
			if _, err := strconv.Atoi(f[0][3:]); err == nil {
				t.CPUs++
			}
			continue
		}
		if len(f) < 5 {
			return t, fmt.Errorf("iosbridge: /proc/stat: cpu line has %d fields, want at least 5", len(f))
		}
		vals := make([]uint64, 8)
		for i := 1; i < len(f) && i <= 8; i++ {
			v, err := strconv.ParseUint(f[i], 10, 64)
			if err != nil {
				return t, fmt.Errorf("iosbridge: /proc/stat: cpu field %d %q: %w", i, f[i], err)
			}
			vals[i-1] = v
		}
		t.User, t.Nice, t.System, t.Idle = vals[0], vals[1], vals[2], vals[3]
		t.IOWait, t.IRQ, t.SoftIRQ, t.Steal = vals[4], vals[5], vals[6], vals[7]
		found = true
	}
	if err := sc.Err(); err != nil {
		return t, fmt.Errorf("iosbridge: /proc/stat: %w", err)
	}
	if !found {
		return t, errors.New("iosbridge: /proc/stat: no aggregate cpu line")
	}
	return t, nil
}

// CPUUtilization is the busy fraction (0..1) of all CPUs between two snapshots:
// 1 − Δidle/Δtotal. Equal snapshots or a counter reset (reboot, wrap) are errors, not 0,
// so the caller does not mistake missing data for an idle machine.
func CPUUtilization(prev, cur CPUTimes) (float64, error) {
	pt, ct := prev.Total(), cur.Total()
	pi, ci := prev.IdleTicks(), cur.IdleTicks()
	if ct <= pt || ci < pi {
		return 0, fmt.Errorf("iosbridge: cpu utilization: counters did not advance (total %d->%d, idle %d->%d)", pt, ct, pi, ci)
	}
	dt, di := float64(ct-pt), float64(ci-pi)
	return clamp01(1 - di/dt), nil
}

// ParseCgroupV1Quota converts cgroup v1 cpu.cfs_quota_us and cpu.cfs_period_us contents to
// a CPU count. limited is false for quota -1 (no limit).
func ParseCgroupV1Quota(quota, period string) (cpus float64, limited bool, err error) {
	q, err := strconv.ParseInt(strings.TrimSpace(quota), 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("iosbridge: cpu.cfs_quota_us %q: %w", strings.TrimSpace(quota), err)
	}
	if q < 0 {
		return 0, false, nil
	}
	p, err := strconv.ParseInt(strings.TrimSpace(period), 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("iosbridge: cpu.cfs_period_us %q: %w", strings.TrimSpace(period), err)
	}
	if p <= 0 || q == 0 {
		return 0, false, fmt.Errorf("iosbridge: cgroup v1 quota %d/period %d: want positive values", q, p)
	}
	return float64(q) / float64(p), true, nil
}

// ParseCgroupV2CPUMax converts the cgroup v2 cpu.max content ("$MAX $PERIOD", MAX may be
// "max") to a CPU count. limited is false for "max".
func ParseCgroupV2CPUMax(text string) (cpus float64, limited bool, err error) {
	f := strings.Fields(text)
	if len(f) == 0 || len(f) > 2 {
		return 0, false, fmt.Errorf("iosbridge: cpu.max %q: want \"$MAX [$PERIOD]\"", strings.TrimSpace(text))
	}
	if f[0] == "max" {
		return 0, false, nil
	}
	q, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("iosbridge: cpu.max quota %q: %w", f[0], err)
	}
	p := int64(100000) // kernel default period when only MAX is written back
	if len(f) == 2 {
		if p, err = strconv.ParseInt(f[1], 10, 64); err != nil {
			return 0, false, fmt.Errorf("iosbridge: cpu.max period %q: %w", f[1], err)
		}
	}
	if q <= 0 || p <= 0 {
		return 0, false, fmt.Errorf("iosbridge: cpu.max %d/%d: want positive values", q, p)
	}
	return float64(q) / float64(p), true, nil
}

// EffectiveCPUs is the capacity actually usable: the online CPUs, clipped by a cgroup quota
// when limited. A container limited to 1.5 CPUs on a 64-core host can host ~1.5 ranks.
func EffectiveCPUs(online int, quota float64, limited bool) float64 {
	c := float64(online)
	if limited && quota < c {
		c = quota
	}
	return math.Max(0, c)
}

// MemInfo holds the /proc/meminfo numbers the profile needs, in bytes.
type MemInfo struct {
	// TotalBytes is MemTotal; FreeBytes is MemAvailable (or its approximation).
	TotalBytes, FreeBytes uint64
}

// ParseMeminfo reads MemTotal and MemAvailable from /proc/meminfo text. Kernels older than
// 3.14 lack MemAvailable; then MemFree+Buffers+Cached approximates it.
func ParseMeminfo(text string) (MemInfo, error) {
	kv := map[string]uint64{}
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			continue
		}
		v, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil {
			return MemInfo{}, fmt.Errorf("iosbridge: /proc/meminfo %s %q: %w", name, f[0], err)
		}
		if len(f) > 1 && f[1] == "kB" {
			v *= 1024
		}
		kv[strings.TrimSpace(name)] = v
	}
	if err := sc.Err(); err != nil {
		return MemInfo{}, fmt.Errorf("iosbridge: /proc/meminfo: %w", err)
	}
	total, ok := kv["MemTotal"]
	if !ok {
		return MemInfo{}, errors.New("iosbridge: /proc/meminfo: no MemTotal")
	}
	free, ok := kv["MemAvailable"]
	if !ok {
		mf, ok := kv["MemFree"]
		if !ok {
			return MemInfo{}, errors.New("iosbridge: /proc/meminfo: neither MemAvailable nor MemFree")
		}
		free = mf + kv["Buffers"] + kv["Cached"]
	}
	if free > total {
		free = total
	}
	return MemInfo{TotalBytes: total, FreeBytes: free}, nil
}

// ParseLoadAvg returns the one-minute load average from /proc/loadavg text.
func ParseLoadAvg(text string) (float64, error) {
	f := strings.Fields(text)
	if len(f) == 0 {
		return 0, errors.New("iosbridge: /proc/loadavg: empty")
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil || !finite(v) || v < 0 {
		return 0, fmt.Errorf("iosbridge: /proc/loadavg %q: not a load average", f[0])
	}
	return v, nil
}

// Availability turns host utilization into the idle fraction of the effective capacity.
// Idle CPUs of the host count only up to the quota: free = min(effective, online×(1−util)).
// (The host counters include other tenants; the quota is ours alone.)
func Availability(online int, effective, utilization float64) float64 {
	if effective <= 0 {
		return 0
	}
	free := math.Min(effective, float64(online)*(1-clamp01(utilization)))
	return clamp01(free / effective)
}

// Sampler reads the real kernel files and produces NodeProfiles. It is the only part of the
// package that does I/O; file locations are injectable so tests (and containers with /proc
// mounted elsewhere) can point it at other trees. Not safe for concurrent use.
type Sampler struct {
	// Node is copied into every profile.
	Node string
	// Root prefixes the default paths; "" means "/".
	Root string
	// CgroupDir is the cgroup directory holding cpu.max (v2) or cpu.cfs_* (v1); "" means
	// Root/sys/fs/cgroup for v2 and Root/sys/fs/cgroup/cpu (then cpu,cpuacct) for v1.
	CgroupDir string
	// QuotaOnly judges the node by its cgroup quota and the cgroup's own usage alone,
	// ignoring the host's idle CPUs: for nodes that are cgroups sharing one machine (the
	// emulated cluster, containers), whose host counters include the other nodes.
	QuotaOnly bool

	prev    CPUTimes
	hasPrev bool

	// The cgroup's own CPU usage at the previous Sample, to measure what the cgroup uses of
	// its quota (host idle CPUs are no use to a cgroup that already uses its whole quota).
	prevUsage   time.Duration
	prevUsageAt time.Time
	hasUsage    bool
}

func (s *Sampler) path(p string) string {
	root := s.Root
	if root == "" {
		root = "/"
	}
	return filepath.Join(root, p)
}

// Sample reads /proc/stat, /proc/meminfo, /proc/loadavg and the cgroup quota and returns a
// profile stamped with now. Under a quota, the cgroup's own usage since the previous Sample
// (cpu.stat or cpuacct.usage, over the injected clock) also limits the availability. Utilization is measured since the previous Sample; the first
// call has no baseline and uses the since-boot average. ranks is copied into the profile.
// A missing cgroup quota or loadavg is not an error (unlimited / 0).
func (s *Sampler) Sample(now time.Time, ranks []RankID) (NodeProfile, error) {
	p := NodeProfile{Node: s.Node, SampledAt: now, Ranks: append([]RankID(nil), ranks...)}
	statText, err := os.ReadFile(s.path("proc/stat"))
	if err != nil {
		return p, fmt.Errorf("iosbridge: sample: %w", err)
	}
	cur, err := ParseProcStat(string(statText))
	if err != nil {
		return p, err
	}
	base := CPUTimes{}
	if s.hasPrev {
		base = s.prev
	}
	util, err := CPUUtilization(base, cur)
	if err != nil {
		// Sampling faster than the tick rate: keep the old baseline and report busy-ness
		// since boot rather than fail the whole profile.
		if util, err = CPUUtilization(CPUTimes{}, cur); err != nil {
			return p, err
		}
	} else {
		s.prev, s.hasPrev = cur, true
	}
	memText, err := os.ReadFile(s.path("proc/meminfo"))
	if err != nil {
		return p, fmt.Errorf("iosbridge: sample: %w", err)
	}
	mem, err := ParseMeminfo(string(memText))
	if err != nil {
		return p, err
	}
	if b, err := os.ReadFile(s.path("proc/loadavg")); err == nil {
		if p.Load1, err = ParseLoadAvg(string(b)); err != nil {
			return p, err
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return p, fmt.Errorf("iosbridge: sample: %w", err)
	}
	quota, limited, err := s.readQuota()
	if err != nil {
		return p, err
	}
	p.CPUs = cur.CPUs
	p.EffectiveCPUs = EffectiveCPUs(cur.CPUs, quota, limited)
	p.Availability = Availability(cur.CPUs, p.EffectiveCPUs, util)
	if limited {
		if used, ok := s.cgroupUse(now); ok {
			hostUtil := util
			if s.QuotaOnly {
				hostUtil = 0
			}
			p.Availability = CgroupAvailability(cur.CPUs, p.EffectiveCPUs, hostUtil, used)
		}
	}
	p.MemTotalBytes, p.MemFreeBytes = mem.TotalBytes, mem.FreeBytes
	return p, nil
}

// quotaDirs are the cgroup directories whose quota limits this node: CgroupDir and, when it
// lies below Root/sys/fs/cgroup, each of its ancestors up to that mount (a quota on a parent
// slice limits every child); by default the mount itself and the v1 cpu controller roots.
func (s *Sampler) quotaDirs() []string {
	mount := s.path("sys/fs/cgroup")
	if s.CgroupDir == "" {
		return []string{mount, filepath.Join(mount, "cpu"), filepath.Join(mount, "cpu,cpuacct")}
	}
	var dirs []string
	for d := filepath.Clean(s.CgroupDir); ; d = filepath.Dir(d) {
		dirs = append(dirs, d)
		if !strings.HasPrefix(d, mount+string(filepath.Separator)) {
			return dirs
		}
	}
}

// readQuota reads the cgroup v2 or v1 quota of every quotaDir; the smallest limit wins and no
// file at all means no limit.
func (s *Sampler) readQuota() (float64, bool, error) {
	best, limited := 0.0, false
	for _, d := range s.quotaDirs() {
		q, lim, err := readDirQuota(d)
		if err != nil {
			return 0, false, err
		}
		if lim && (!limited || q < best) {
			best, limited = q, true
		}
	}
	return best, limited, nil
}

// readDirQuota reads cpu.max (v2) or cpu.cfs_quota_us and cpu.cfs_period_us (v1) in dir.
func readDirQuota(dir string) (float64, bool, error) {
	if b, err := os.ReadFile(filepath.Join(dir, "cpu.max")); err == nil {
		return ParseCgroupV2CPUMax(string(b))
	} else if !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ENOTDIR) {
		return 0, false, fmt.Errorf("iosbridge: sample: %w", err)
	}
	q, err := os.ReadFile(filepath.Join(dir, "cpu.cfs_quota_us"))
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
		return 0, false, nil
	} else if err != nil {
		return 0, false, fmt.Errorf("iosbridge: sample: %w", err)
	}
	per, err := os.ReadFile(filepath.Join(dir, "cpu.cfs_period_us"))
	if err != nil {
		return 0, false, fmt.Errorf("iosbridge: sample: %w", err)
	}
	return ParseCgroupV1Quota(string(q), string(per))
}

// cgroupUse returns the CPUs the own cgroup used since the previous call (v2 cpu.stat
// usage_usec, v1 cpuacct.usage); ok is false on the first call, when time did not advance,
// or when the cgroup exposes no usage counter.
func (s *Sampler) cgroupUse(now time.Time) (cpus float64, ok bool) {
	usage, found := s.readUsage()
	if !found {
		return 0, false
	}
	prev, prevAt, had := s.prevUsage, s.prevUsageAt, s.hasUsage
	if had && !now.After(prevAt) {
		return 0, false // keep the baseline: no interval to measure over
	}
	s.prevUsage, s.prevUsageAt, s.hasUsage = usage, now, true
	if !had || usage < prev {
		return 0, false
	}
	return float64(usage-prev) / float64(now.Sub(prevAt)), true
}

func (s *Sampler) readUsage() (time.Duration, bool) {
	dir := s.CgroupDir
	if dir == "" {
		dir = s.path("sys/fs/cgroup")
	}
	if b, err := os.ReadFile(filepath.Join(dir, "cpu.stat")); err == nil {
		if u, err := ParseCgroupV2CPUStat(string(b)); err == nil {
			return u, true
		}
	}
	v1 := []string{dir}
	if s.CgroupDir == "" {
		v1 = []string{s.path("sys/fs/cgroup/cpuacct"), s.path("sys/fs/cgroup/cpu,cpuacct")}
	}
	for _, d := range v1 {
		if b, err := os.ReadFile(filepath.Join(d, "cpuacct.usage")); err == nil {
			if ns, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 63); err == nil {
				return time.Duration(ns), true
			}
		}
	}
	return 0, false
}

// ParseCgroupV2CPUStat returns usage_usec of a cgroup v2 cpu.stat file: the CPU time the
// cgroup's processes used.
func ParseCgroupV2CPUStat(text string) (time.Duration, error) {
	for _, line := range strings.Split(text, "\n") {
		f := strings.Fields(line)
		if len(f) == 2 && f[0] == "usage_usec" {
			v, err := strconv.ParseUint(f[1], 10, 63)
			if err != nil || v > math.MaxInt64/1000 {
				return 0, fmt.Errorf("iosbridge: cpu.stat usage_usec %q: not a count", f[1])
			}
			return time.Duration(v) * time.Microsecond, nil
		}
	}
	return 0, errors.New("iosbridge: cpu.stat: no usage_usec")
}

// CgroupAvailability is Availability for a cgroup with a quota that measured its own usage:
// the spare capacity is the smaller of what is left of the quota (effective − used) and the
// idle CPUs of the host, as a fraction of the quota.
func CgroupAvailability(online int, effective, utilization, used float64) float64 {
	if effective <= 0 {
		return 0
	}
	free := math.Min(effective-math.Max(0, used), float64(online)*(1-clamp01(utilization)))
	return clamp01(free / effective)
}

// OwnCgroupDir returns the cgroup directory of the calling process (from Root/proc/self/cgroup)
// under Root/sys/fs/cgroup: the unified (v2) directory, or the v1 cpu controller's. Give it
// to Sampler.CgroupDir so that a pcmd started in a cgroup (a systemd unit with CPUQuota, a
// container without a cgroup namespace) sees its own quota and its ancestors'. ok is false
// when the process is in no cgroup or the directory is missing.
func OwnCgroupDir(root string) (dir string, ok bool) {
	s := Sampler{Root: root}
	b, err := os.ReadFile(s.path("proc/self/cgroup"))
	if err != nil {
		return "", false
	}
	v2, v1 := ParseProcCgroup(string(b))
	exists := func(d string) bool {
		fi, err := os.Stat(d)
		return err == nil && fi.IsDir()
	}
	_, err = os.Stat(s.path("sys/fs/cgroup/cgroup.controllers"))
	unified := err == nil // not a hybrid hierarchy, whose v2 part is mounted elsewhere
	if v2 != "" && unified {
		if d := filepath.Join(s.path("sys/fs/cgroup"), v2); exists(d) {
			return d, true
		}
	}
	if v1 != "" {
		for _, ctl := range []string{"cpu,cpuacct", "cpu"} {
			if d := filepath.Join(s.path("sys/fs/cgroup"), ctl, v1); exists(d) {
				return d, true
			}
		}
	}
	return "", false
}

// ParseProcCgroup returns the unified (v2, "0::PATH") and the v1 cpu controller's cgroup
// paths from the text of /proc/PID/cgroup; missing ones are "".
func ParseProcCgroup(text string) (v2, v1cpu string) {
	for _, line := range strings.Split(text, "\n") {
		id, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		ctls, path, ok := strings.Cut(rest, ":")
		if !ok || !strings.HasPrefix(path, "/") || strings.Contains(path, "..") {
			continue
		}
		if id == "0" && ctls == "" {
			v2 = path
			continue
		}
		for _, c := range strings.Split(ctls, ",") {
			if c == "cpu" {
				v1cpu = path
			}
		}
	}
	return v2, v1cpu
}

// UserHZ is the unit of the CPU times in /proc/PID/stat (sysconf(_SC_CLK_TCK)); it is 100 on
// every Linux architecture Go supports.
const UserHZ = 100

// ProcTimes is what the IOS profiling component reads of one process from /proc/PID/stat.
type ProcTimes struct {
	// CPU is user plus system time; RSSBytes the resident set size.
	CPU      time.Duration
	RSSBytes int64
	// StartTicks is the process start time in clock ticks after boot: a pid that was reused
	// has a different one.
	StartTicks uint64
}

// ParseProcPIDStat reads utime, stime, starttime and rss from the text of /proc/PID/stat.
// The command name may contain spaces and parentheses, so fields are counted after the last
// ')'. pageSize converts rss from pages to bytes.
func ParseProcPIDStat(text string, pageSize int) (ProcTimes, error) {
	i := strings.LastIndexByte(text, ')')
	if i < 0 {
		return ProcTimes{}, errors.New("iosbridge: /proc/PID/stat: no command name")
	}
	f := strings.Fields(text[i+1:])
	// After ')': state(3) ppid ... utime(14) stime(15) ... starttime(22) vsize(23) rss(24).
	if len(f) < 22 {
		return ProcTimes{}, fmt.Errorf("iosbridge: /proc/PID/stat: %d fields after the command, want at least 22", len(f))
	}
	num := func(k int) (uint64, error) {
		v, err := strconv.ParseUint(f[k], 10, 63)
		if err != nil {
			return 0, fmt.Errorf("iosbridge: /proc/PID/stat field %d %q: %w", k+3, f[k], err)
		}
		return v, nil
	}
	var v [4]uint64
	for j, k := range []int{11, 12, 19, 21} {
		var err error
		if v[j], err = num(k); err != nil {
			return ProcTimes{}, err
		}
	}
	return ProcTimes{
		CPU:        time.Duration(v[0]+v[1]) * (time.Second / UserHZ),
		StartTicks: v[2],
		RSSBytes:   int64(v[3]) * int64(pageSize),
	}, nil
}

// Process reads Root/proc/PID/stat: the CPU time and memory of one rank.
func (s *Sampler) Process(pid int) (ProcTimes, error) {
	if pid <= 0 {
		return ProcTimes{}, fmt.Errorf("iosbridge: process %d: not a pid", pid)
	}
	b, err := os.ReadFile(s.path(filepath.Join("proc", strconv.Itoa(pid), "stat")))
	if err != nil {
		return ProcTimes{}, fmt.Errorf("iosbridge: process %d: %w", pid, err)
	}
	return ParseProcPIDStat(string(b), os.Getpagesize())
}

func clamp01(f float64) float64 {
	switch {
	case math.IsNaN(f) || f < 0:
		return 0
	case f > 1:
		return 1
	}
	return f
}
