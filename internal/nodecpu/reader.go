package nodecpu

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path"
	"strconv"
	"syscall"
	"time"
)

// Reader reads the node's CPU files for the calling process. Make it with New; it is safe for
// concurrent use (it keeps no state after New).
type Reader struct {
	fsys fs.FS
	cg   Cgroup
}

// New locates the calling process's cgroups in fsys, a file system rooted at "/"
// (nil: os.DirFS("/"), the real one). A node without cgroups (or without /proc/self/cgroup)
// is not an error: it is measured as a whole machine.
func New(fsys fs.FS) (*Reader, error) {
	if fsys == nil {
		fsys = os.DirFS("/")
	}
	r := &Reader{fsys: fsys}
	self, err := r.readOptional("proc/self/cgroup")
	if err != nil {
		return nil, err
	}
	mi, err := r.readOptional("proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	r.cg = LocateCgroup(self, mi)
	return r, nil
}

// Cgroup returns where New found the process's cgroups.
func (r *Reader) Cgroup() Cgroup { return r.cg }

// read returns the content of a file of the fs.FS.
func (r *Reader) read(name string) (string, error) {
	b, err := fs.ReadFile(r.fsys, name)
	if err != nil {
		return "", fmt.Errorf("nodecpu: %w", err)
	}
	return string(b), nil
}

// readOptional is read where a missing file (or a missing directory on its path) means "not
// on this node": it returns "" and no error then.
func (r *Reader) readOptional(name string) (string, error) {
	s, err := r.read(name)
	if missing(err) {
		return "", nil
	}
	return s, err
}

func missing(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR)
}

// Quota returns the tightest CPU quota on the path from the process's cgroup up to its
// hierarchy's mount point (a quota on a parent slice limits every child). No cgroup, or no
// quota file, is no limit.
func (r *Reader) Quota() (Quota, error) {
	q := Quota{Period: DefaultPeriod}
	if r.cg.Version == 0 {
		return q, nil
	}
	for _, dir := range ancestors(r.cg.CPU, r.cg.CPUMount) {
		var dq Quota
		if r.cg.Version == 2 {
			s, err := r.readOptional(path.Join(dir, "cpu.max"))
			if err != nil {
				return Quota{}, err
			}
			if s == "" { // the root, or a cgroup whose parent did not enable cpu
				continue
			}
			if dq, err = ParseCPUMax(s); err != nil {
				return Quota{}, fmt.Errorf("%w (%s)", err, dir)
			}
		} else {
			qs, err := r.readOptional(path.Join(dir, "cpu.cfs_quota_us"))
			if err != nil {
				return Quota{}, err
			}
			if qs == "" {
				continue
			}
			ps, err := r.read(path.Join(dir, "cpu.cfs_period_us"))
			if err != nil {
				return Quota{}, err
			}
			if dq, err = ParseCFSQuota(qs, ps); err != nil {
				return Quota{}, fmt.Errorf("%w (%s)", err, dir)
			}
		}
		if dq.Limited {
			dq.Dir = dir
		}
		q = q.tighter(dq)
	}
	return q, nil
}

// OnlineCPUs is the number of CPUs of the node (/sys/devices/system/cpu/online, else the
// cpuN lines of /proc/stat).
func (r *Reader) OnlineCPUs() (int, error) {
	if s, err := r.readOptional("sys/devices/system/cpu/online"); err != nil {
		return 0, err
	} else if n := ParseCPUList(s); n > 0 {
		return n, nil
	}
	s, err := r.read("proc/stat")
	if err != nil {
		return 0, err
	}
	t, err := ParseProcStat(s)
	if err != nil {
		return 0, err
	}
	return t.CPUs, nil
}

// Affinity is the number of CPUs the process may run on (Cpus_allowed_list of
// /proc/self/status); 0 when unknown.
func (r *Reader) Affinity() (int, error) {
	s, err := r.readOptional("proc/self/status")
	return parseAffinity(s), err
}

// UsableCPUs is the CPUs the process may use: the online CPUs, clipped by its affinity mask
// and by its cgroup's quota.
func (r *Reader) UsableCPUs() (float64, error) {
	online, err := r.OnlineCPUs()
	if err != nil {
		return 0, err
	}
	aff, err := r.Affinity()
	if err != nil {
		return 0, err
	}
	q, err := r.Quota()
	if err != nil {
		return 0, err
	}
	return capacity(online, aff, q), nil
}

// capacity is online clipped by the affinity (0: unknown) and the quota.
func capacity(online, affinity int, q Quota) float64 {
	c := float64(online)
	if affinity > 0 && float64(affinity) < c {
		c = float64(affinity)
	}
	if q.Limited && q.CPUs < c {
		c = q.CPUs
	}
	return math.Max(0, c)
}

// Process reads /proc/PID/stat: the CPU time and memory of one process.
func (r *Reader) Process(pid int) (ProcTimes, error) {
	if pid <= 0 {
		return ProcTimes{}, fmt.Errorf("nodecpu: process %d: not a pid", pid)
	}
	s, err := r.read(path.Join("proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return ProcTimes{}, err
	}
	return ParseProcPIDStat(s, os.Getpagesize())
}

// Counters is one snapshot of the node's cumulative CPU counters; Measure compares two.
type Counters struct {
	// At is when they were read (the caller's clock).
	At time.Time
	// Host is the whole machine; Online its CPUs, Affinity the process's mask (0: unknown).
	Host             CPUTimes
	Online, Affinity int
	// Quota is the cgroup's limit. Source says which cgroup counter below was read
	// (SourceProcStat when none is needed or readable).
	Quota  Quota
	Source Source
	// Usage is the cgroup's CPU time (SourceCgroupV2, SourceCPUAcct); Stat the cpu.stat
	// throttling counters (SourceThrottling).
	Usage time.Duration
	Stat  CPUStat
}

// Counters reads a snapshot stamped with now. The cgroup's own counter is read only under
// a quota: without one the node is the whole machine, measured by /proc/stat.
func (r *Reader) Counters(now time.Time) (Counters, error) {
	c := Counters{At: now, Source: SourceProcStat}
	s, err := r.read("proc/stat")
	if err != nil {
		return c, err
	}
	if c.Host, err = ParseProcStat(s); err != nil {
		return c, err
	}
	if c.Online, err = r.OnlineCPUs(); err != nil {
		return c, err
	}
	if c.Affinity, err = r.Affinity(); err != nil {
		return c, err
	}
	if c.Quota, err = r.Quota(); err != nil || !c.Quota.Limited {
		return c, err
	}
	return c, r.cgroupCounter(&c)
}

// cgroupCounter reads the usage of the cgroup whose quota limits the process (Quota.Dir,
// mapped into the accounting hierarchy by as many levels up from the process's cgroup): v2
// usage_usec; v1 cpuacct.usage (cpuacct mounted with cpu or apart); in a hybrid layout, v2's
// usage_usec of the same cgroup path; else the throttling counters of v1's cpu.stat.
func (r *Reader) cgroupCounter(c *Counters) error {
	stat := func(dir string) (CPUStat, bool, error) {
		if dir == "" {
			return CPUStat{}, false, nil
		}
		s, err := r.readOptional(path.Join(dir, "cpu.stat"))
		if err != nil || s == "" {
			return CPUStat{}, false, err
		}
		st, err := ParseCPUStat(s)
		if err != nil {
			return CPUStat{}, false, fmt.Errorf("%w (%s)", err, dir)
		}
		return st, true, nil
	}
	cg := r.cg
	levels := max(0, levelsUp(cg.CPU, c.Quota.Dir))
	if cg.Version == 2 {
		st, ok, err := stat(c.Quota.Dir)
		if err != nil || !ok || !st.HasUsage {
			return err
		}
		c.Source, c.Usage, c.Stat = SourceCgroupV2, st.Usage, st
		return nil
	}
	if acct := up(cg.Acct, cg.AcctMount, levels); acct != "" {
		s, err := r.readOptional(path.Join(acct, "cpuacct.usage"))
		if err != nil {
			return err
		}
		if s != "" {
			u, err := ParseCPUAcctUsage(s)
			if err != nil {
				return fmt.Errorf("%w (%s)", err, acct)
			}
			c.Source, c.Usage = SourceCPUAcct, u
			return nil
		}
	}
	if cg.UnifiedSamePath {
		if st, ok, err := stat(up(cg.Unified, cg.UnifiedMount, levels)); err != nil {
			return err
		} else if ok && st.HasUsage {
			c.Source, c.Usage = SourceCgroupV2, st.Usage
			return nil
		}
	}
	st, ok, err := stat(c.Quota.Dir)
	if err != nil || !ok || !st.HasThrottling {
		return err
	}
	c.Source, c.Stat = SourceThrottling, st
	return nil
}

// Load is what Measure found between two snapshots.
type Load struct {
	// Source is the counter the node's usage came from.
	Source Source
	// Online is the node's CPUs; Capacity the CPUs it may use (online clipped by the
	// affinity mask and the quota).
	Online   int
	Capacity float64
	// HostUtilization is the busy fraction of the whole machine; Used the CPUs the cgroup
	// used (with a cgroup source) or the machine's busy CPUs (SourceProcStat).
	HostUtilization, Used float64
	// Free is the spare capacity in CPUs (see Measure); Availability is Free/Capacity.
	Free, Availability float64
}

// Measure compares two snapshots of the same Reader (prev zero: since boot).
//
// Without a quota the node is the whole machine: Free = min(capacity, online × (1 − host
// utilization)). Under a quota what is left of it counts, and no more than the host's idle
// CPUs: Free = min(capacity − used, online × (1 − host utilization)); quotaOnly drops the
// host term, for nodes that are cgroups sharing one machine (an emulated cluster, containers),
// whose host counters include the other nodes. The cgroup's used CPUs are
// Δusage / Δt for a usage counter, and, from throttling counters,
// quota × Δnr_throttled / (Δt / period): a period in which the quota ran out used all of it,
// so the estimate is a lower bound, exact for a cgroup that wants more than its quota, the
// case a balancer must see. Without a usable previous snapshot under a quota (the first one,
// a source or a quota cgroup that changed) the host term alone decides, as without a quota.
func Measure(prev, cur Counters, quotaOnly bool) (Load, error) {
	l := Load{Source: cur.Source, Online: cur.Online, Capacity: capacity(cur.Online, cur.Affinity, cur.Quota)}
	if l.Online <= 0 {
		l.Online = cur.Host.CPUs
		l.Capacity = capacity(l.Online, cur.Affinity, cur.Quota)
	}
	util, err := HostUtilization(prev.Host, cur.Host)
	if err != nil {
		// Sampled faster than the tick rate: busy-ness since boot rather than no answer.
		if util, err = HostUtilization(CPUTimes{}, cur.Host); err != nil {
			return l, err
		}
	}
	l.HostUtilization = util
	hostFree := float64(l.Online) * (1 - util)
	l.Used = float64(l.Online) * util
	l.Free = math.Min(l.Capacity, hostFree)
	// The counters compare only when they are of the same cgroup: the tightest quota moves
	// to another one when a quota is set or lifted (the testbed does so to emulate load).
	if cur.Source != SourceProcStat && prev.Source == cur.Source && prev.Quota.Dir == cur.Quota.Dir && cur.At.After(prev.At) {
		dt := cur.At.Sub(prev.At)
		used, ok := 0.0, false
		switch cur.Source {
		case SourceCgroupV2, SourceCPUAcct:
			if cur.Usage >= prev.Usage {
				used, ok = float64(cur.Usage-prev.Usage)/float64(dt), true
			}
		case SourceThrottling:
			if cur.Stat.Throttled >= prev.Stat.Throttled && cur.Quota.Limited && cur.Quota.Period > 0 {
				periods := float64(dt) / float64(cur.Quota.Period)
				used, ok = cur.Quota.CPUs*math.Min(1, float64(cur.Stat.Throttled-prev.Stat.Throttled)/periods), true
			}
		}
		if ok {
			l.Used = used
			free := l.Capacity - math.Max(0, used)
			if !quotaOnly {
				free = math.Min(free, hostFree)
			}
			l.Free = free
		}
	} else if cur.Source != SourceProcStat && quotaOnly {
		l.Source = SourceNone // nothing the cgroup's own counters can say yet
	}
	l.Free = math.Max(0, l.Free)
	if l.Capacity > 0 {
		l.Availability = min(1, l.Free/l.Capacity) // Free is not negative
	}
	return l, nil
}

// Meter measures the node's load between its successive Samples. It is not safe for
// concurrent use.
type Meter struct {
	// QuotaOnly: see Measure.
	QuotaOnly bool

	r    *Reader
	prev Counters
	has  bool
}

// NewMeter returns a Meter reading through r.
func NewMeter(r *Reader, quotaOnly bool) *Meter { return &Meter{r: r, QuotaOnly: quotaOnly} }

// Sample reads the counters at now and measures the load since the previous Sample (since
// boot the first time). A snapshot taken too soon after the previous one to tell anything
// is measured but does not replace the baseline.
func (m *Meter) Sample(now time.Time) (Load, error) {
	cur, err := m.r.Counters(now)
	if err != nil {
		return Load{}, err
	}
	prev := Counters{}
	if m.has {
		prev = m.prev
	}
	l, err := Measure(prev, cur, m.QuotaOnly)
	if err != nil {
		return l, err
	}
	if !m.has || cur.Host.Total() > m.prev.Host.Total() || cur.At.After(m.prev.At) && cur.Source != SourceProcStat {
		m.prev, m.has = cur, true
	}
	return l, nil
}

// ReadLoadavg reads /proc/loadavg; ok is false where it does not exist.
func (r *Reader) ReadLoadavg() (l Loadavg, ok bool, err error) {
	s, err := r.readOptional("proc/loadavg")
	if err != nil || s == "" {
		return Loadavg{}, false, err
	}
	l, err = ParseLoadavg(s)
	return l, err == nil, err
}

// FS is the file system the Reader reads, for callers that read other files of the node
// from the same tree.
func (r *Reader) FS() fs.FS { return r.fsys }
