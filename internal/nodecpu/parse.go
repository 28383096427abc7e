package nodecpu

import (
	"bufio"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// DefaultPeriod is the kernel's default CFS bandwidth period (100 ms).
const DefaultPeriod = 100 * time.Millisecond

// Quota is a cgroup CPU bandwidth limit: Limited is false when there is none.
type Quota struct {
	// CPUs is quota/period: how many CPUs' worth of time the cgroup may use.
	CPUs    float64
	Limited bool
	// Period is the enforcement period (DefaultPeriod when the file did not say).
	Period time.Duration
	// Dir is the cgroup directory whose limit this is (Reader.Quota: the tightest on the
	// path to the root); "" for no limit.
	Dir string
}

// ParseCPUMax parses a cgroup v2 cpu.max: "$MAX $PERIOD", MAX a number of µs or "max".
//
// The kernel always prints both fields, but accepts a write of MAX alone (keeping the
// period), and hand-made or recorded files carry that one-field form too. It is read the way
// the kernel would apply it: "max" is no limit, "N" is N µs per DefaultPeriod, the period a
// cgroup gets unless one is written. (comm once read "N" as no limit and the IOS agent as
// N/100000; both now read it here.)
func ParseCPUMax(text string) (Quota, error) {
	f := strings.Fields(text)
	if len(f) == 0 || len(f) > 2 {
		return Quota{}, fmt.Errorf("nodecpu: cpu.max %q: want \"$MAX [$PERIOD]\"", strings.TrimSpace(text))
	}
	period := int64(DefaultPeriod / time.Microsecond)
	if len(f) == 2 {
		p, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil || p <= 0 {
			return Quota{}, fmt.Errorf("nodecpu: cpu.max period %q: want a positive number of µs", f[1])
		}
		period = p
	}
	if f[0] == "max" {
		return Quota{Period: time.Duration(period) * time.Microsecond}, nil
	}
	q, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil || q <= 0 {
		return Quota{}, fmt.Errorf("nodecpu: cpu.max quota %q: want \"max\" or a positive number of µs", f[0])
	}
	return Quota{CPUs: float64(q) / float64(period), Limited: true, Period: time.Duration(period) * time.Microsecond}, nil
}

// ParseCFSQuota parses cgroup v1 cpu.cfs_quota_us (-1: no limit) and cpu.cfs_period_us.
func ParseCFSQuota(quota, period string) (Quota, error) {
	q, err := strconv.ParseInt(strings.TrimSpace(quota), 10, 64)
	if err != nil {
		return Quota{}, fmt.Errorf("nodecpu: cpu.cfs_quota_us %q: not a number", strings.TrimSpace(quota))
	}
	p, err := strconv.ParseInt(strings.TrimSpace(period), 10, 64)
	if err != nil || p <= 0 {
		return Quota{}, fmt.Errorf("nodecpu: cpu.cfs_period_us %q: want a positive number", strings.TrimSpace(period))
	}
	per := time.Duration(p) * time.Microsecond
	switch {
	case q < 0:
		return Quota{Period: per}, nil
	case q == 0:
		return Quota{}, errors.New("nodecpu: cpu.cfs_quota_us 0: want -1 or a positive number")
	}
	return Quota{CPUs: float64(q) / float64(p), Limited: true, Period: per}, nil
}

// tighter returns the smaller of two limits (no limit is the largest).
func (q Quota) tighter(o Quota) Quota {
	if !o.Limited || q.Limited && q.CPUs <= o.CPUs {
		return q
	}
	return o
}

// CPUTimes is the aggregate "cpu" line of /proc/stat, in USER_HZ ticks. Only differences
// between two snapshots mean anything (see HostUtilization).
type CPUTimes struct {
	// The first eight columns of the "cpu" line, in kernel order.
	User, Nice, System, Idle, IOWait, IRQ, SoftIRQ, Steal uint64
	// CPUs counts the per-CPU "cpuN" lines: the online CPUs at snapshot time.
	CPUs int
}

// Total is every tick accounted, excluding guest time, which the kernel already folds into
// user and nice (counting it twice would understate utilization).
func (t CPUTimes) Total() uint64 {
	return t.User + t.Nice + t.System + t.Idle + t.IOWait + t.IRQ + t.SoftIRQ + t.Steal
}

// IdleTicks counts idle and iowait: a CPU waiting on I/O can run another process.
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
			return t, fmt.Errorf("nodecpu: /proc/stat: cpu line has %d fields, want at least 5", len(f))
		}
		var vals [8]uint64
		for i := 1; i < len(f) && i <= 8; i++ {
			v, err := strconv.ParseUint(f[i], 10, 64)
			if err != nil {
				return t, fmt.Errorf("nodecpu: /proc/stat: cpu field %d %q: not a count", i, f[i])
			}
			vals[i-1] = v
		}
		t.User, t.Nice, t.System, t.Idle = vals[0], vals[1], vals[2], vals[3]
		t.IOWait, t.IRQ, t.SoftIRQ, t.Steal = vals[4], vals[5], vals[6], vals[7]
		found = true
	}
	if err := sc.Err(); err != nil {
		return t, fmt.Errorf("nodecpu: /proc/stat: %w", err)
	}
	if !found {
		return t, errors.New("nodecpu: /proc/stat: no aggregate cpu line")
	}
	return t, nil
}

// HostUtilization is the busy fraction (0..1) of all CPUs between two snapshots:
// 1 − Δidle/Δtotal. Equal snapshots or a counter reset are errors, not 0, so that missing
// data is not mistaken for an idle machine.
func HostUtilization(prev, cur CPUTimes) (float64, error) {
	pt, ct := prev.Total(), cur.Total()
	pi, ci := prev.IdleTicks(), cur.IdleTicks()
	if ct <= pt || ci < pi {
		return 0, fmt.Errorf("nodecpu: cpu utilization: counters did not advance (total %d->%d, idle %d->%d)", pt, ct, pi, ci)
	}
	return min(1, max(0, 1-float64(ci-pi)/float64(ct-pt))), nil
}

// CPUStat is what mpios reads of a cgroup's cpu.stat: v2 has Usage (usage_usec) and the
// throttling counters when the cpu controller is enabled; v1 has the throttling counters only.
type CPUStat struct {
	// Usage is usage_usec; HasUsage says whether the file had it.
	Usage    time.Duration
	HasUsage bool
	// Periods (nr_periods) counts enforcement periods in which the cgroup had runnable
	// threads, Throttled (nr_throttled) those in which it used up its quota, ThrottledTime
	// (v1 throttled_time in ns, v2 throttled_usec) how long its threads waited for the next.
	Periods, Throttled uint64
	ThrottledTime      time.Duration
	HasThrottling      bool
}

// ParseCPUStat parses a cgroup cpu.stat file (v1 or v2).
func ParseCPUStat(text string) (CPUStat, error) {
	var s CPUStat
	for _, line := range strings.Split(text, "\n") {
		f := strings.Fields(line)
		if len(f) != 2 {
			continue
		}
		v, err := strconv.ParseUint(f[1], 10, 63)
		if err != nil {
			return CPUStat{}, fmt.Errorf("nodecpu: cpu.stat %s %q: not a count", f[0], f[1])
		}
		switch f[0] {
		case "usage_usec":
			if v > math.MaxInt64/1000 {
				return CPUStat{}, fmt.Errorf("nodecpu: cpu.stat usage_usec %d: out of range", v)
			}
			s.Usage, s.HasUsage = time.Duration(v)*time.Microsecond, true
		case "nr_periods":
			s.Periods, s.HasThrottling = v, true
		case "nr_throttled":
			s.Throttled = v
		case "throttled_time":
			s.ThrottledTime = time.Duration(v)
		case "throttled_usec":
			s.ThrottledTime = time.Duration(v) * time.Microsecond
		}
	}
	if !s.HasUsage && !s.HasThrottling {
		return CPUStat{}, errors.New("nodecpu: cpu.stat: neither usage_usec nor nr_periods")
	}
	return s, nil
}

// ParseCPUAcctUsage parses cgroup v1 cpuacct.usage: the CPU time used, in ns.
func ParseCPUAcctUsage(text string) (time.Duration, error) {
	v, err := strconv.ParseUint(strings.TrimSpace(text), 10, 63)
	if err != nil {
		return 0, fmt.Errorf("nodecpu: cpuacct.usage %q: not a count of ns", strings.TrimSpace(text))
	}
	return time.Duration(v), nil
}

// Loadavg is the content of /proc/loadavg.
type Loadavg struct {
	// Load1, Load5 and Load15 are the load averages; Running the runnable threads now
	// (including the reader), Threads all threads.
	Load1, Load5, Load15 float64
	Running, Threads     int
}

// ParseLoadavg parses /proc/loadavg ("0.15 1.16 2.80 2/91 30864").
func ParseLoadavg(text string) (Loadavg, error) {
	f := strings.Fields(text)
	if len(f) < 4 {
		return Loadavg{}, fmt.Errorf("nodecpu: /proc/loadavg %q: want 5 fields", strings.TrimSpace(text))
	}
	var l Loadavg
	for i, p := range []*float64{&l.Load1, &l.Load5, &l.Load15} {
		v, err := strconv.ParseFloat(f[i], 64)
		if err != nil || math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
			return Loadavg{}, fmt.Errorf("nodecpu: /proc/loadavg %q: not a load average", f[i])
		}
		*p = v
	}
	run, all, ok := strings.Cut(f[3], "/")
	r, err1 := strconv.Atoi(run)
	a, err2 := strconv.Atoi(all)
	if !ok || err1 != nil || err2 != nil || r < 0 || a < 0 {
		return Loadavg{}, fmt.Errorf("nodecpu: /proc/loadavg: runnable threads in %q", f[3])
	}
	l.Running, l.Threads = r, a
	return l, nil
}

// ParsePressureTotal extracts total= (µs) of the "some" line of a PSI file such as
// /proc/pressure/cpu: the time in which some runnable thread waited for a CPU.
func ParsePressureTotal(text string) (uint64, error) {
	line, _, _ := strings.Cut(text, "\n")
	if !strings.HasPrefix(line, "some ") {
		return 0, fmt.Errorf("nodecpu: pressure file: no 'some' line in %q", text)
	}
	_, v, ok := strings.Cut(line, "total=")
	if !ok {
		return 0, fmt.Errorf("nodecpu: pressure file: no total in %q", line)
	}
	t, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("nodecpu: pressure file: total %q: not a count", strings.TrimSpace(v))
	}
	return t, nil
}

// ParseCPUList counts the CPUs of a kernel CPU list such as "0-3,8,10-11"; 0 if malformed.
func ParseCPUList(s string) int {
	n := 0
	for _, part := range strings.Split(strings.TrimSpace(s), ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil || a < 0 {
			return 0
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a {
				return 0
			}
		}
		n += b - a + 1
	}
	return n
}

// parseAffinity counts the CPUs of Cpus_allowed_list in /proc/PID/status; 0 if absent.
func parseAffinity(status string) int {
	for _, line := range strings.Split(status, "\n") {
		if v, ok := strings.CutPrefix(line, "Cpus_allowed_list:"); ok {
			return ParseCPUList(v)
		}
	}
	return 0
}

// UserHZ is the unit of the CPU times in /proc/PID/stat (sysconf(_SC_CLK_TCK)); it is 100 on
// every Linux architecture Go supports.
const UserHZ = 100

// ProcTimes is what mpios reads of one process from /proc/PID/stat.
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
		return ProcTimes{}, errors.New("nodecpu: /proc/PID/stat: no command name")
	}
	f := strings.Fields(text[i+1:])
	// After ')': state(3) ppid ... utime(14) stime(15) ... starttime(22) vsize(23) rss(24).
	if len(f) < 22 {
		return ProcTimes{}, fmt.Errorf("nodecpu: /proc/PID/stat: %d fields after the command, want at least 22", len(f))
	}
	var v [4]uint64
	for j, k := range []int{11, 12, 19, 21} {
		x, err := strconv.ParseUint(f[k], 10, 63)
		if err != nil {
			return ProcTimes{}, fmt.Errorf("nodecpu: /proc/PID/stat field %d %q: not a count", k+3, f[k])
		}
		v[j] = x
	}
	return ProcTimes{
		CPU:        time.Duration(v[0]+v[1]) * (time.Second / UserHZ),
		StartTicks: v[2],
		RSSBytes:   int64(v[3]) * int64(pageSize),
	}, nil
}
