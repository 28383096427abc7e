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

	prev    CPUTimes
	hasPrev bool
}

func (s *Sampler) path(p string) string {
	root := s.Root
	if root == "" {
		root = "/"
	}
	return filepath.Join(root, p)
}

// Sample reads /proc/stat, /proc/meminfo, /proc/loadavg and the cgroup quota and returns a
// profile stamped with now. Utilization is measured since the previous Sample; the first
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
	p.MemTotalBytes, p.MemFreeBytes = mem.TotalBytes, mem.FreeBytes
	return p, nil
}

// readQuota tries cgroup v2 then v1; no file at all means no limit.
func (s *Sampler) readQuota() (float64, bool, error) {
	v2 := s.CgroupDir
	if v2 == "" {
		v2 = s.path("sys/fs/cgroup")
	}
	if b, err := os.ReadFile(filepath.Join(v2, "cpu.max")); err == nil {
		return ParseCgroupV2CPUMax(string(b))
	} else if !errors.Is(err, fs.ErrNotExist) {
		return 0, false, fmt.Errorf("iosbridge: sample: %w", err)
	}
	dirs := []string{s.CgroupDir}
	if s.CgroupDir == "" {
		dirs = []string{s.path("sys/fs/cgroup/cpu"), s.path("sys/fs/cgroup/cpu,cpuacct")}
	}
	for _, d := range dirs {
		q, err := os.ReadFile(filepath.Join(d, "cpu.cfs_quota_us"))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		} else if err != nil {
			return 0, false, fmt.Errorf("iosbridge: sample: %w", err)
		}
		per, err := os.ReadFile(filepath.Join(d, "cpu.cfs_period_us"))
		if err != nil {
			return 0, false, fmt.Errorf("iosbridge: sample: %w", err)
		}
		return ParseCgroupV1Quota(string(q), string(per))
	}
	return 0, false, nil
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
