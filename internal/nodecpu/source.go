package nodecpu

// Source says where a load measurement comes from.
type Source int

// The sources, from the whole machine to the cgroup counters and the pressure counters.
const (
	// SourceNone: nothing measured yet, or no readable source.
	SourceNone Source = iota
	// SourceProcStat: the busy ticks of the whole machine (/proc/stat), for a node without a
	// CPU quota.
	SourceProcStat
	// SourceCgroupV2: the cgroup's usage_usec (cgroup v2 cpu.stat).
	SourceCgroupV2
	// SourceCPUAcct: the cgroup's cpuacct.usage (cgroup v1, cpuacct with or apart from cpu).
	SourceCPUAcct
	// SourceThrottling: the periods in which the cgroup exhausted its quota (cgroup v1
	// cpu.stat nr_throttled), where no usage counter is exposed.
	SourceThrottling
	// SourcePressure: the time runnable threads waited for a CPU (/proc/pressure/cpu).
	SourcePressure
	// SourceLoadavg: the runnable threads of /proc/loadavg, where PSI is missing.
	SourceLoadavg
)

// String names the source as status pages show it.
func (s Source) String() string {
	switch s {
	case SourceNone:
		return "none"
	case SourceProcStat:
		return "/proc/stat (whole machine)"
	case SourceCgroupV2:
		return "cgroup v2 cpu.stat usage_usec"
	case SourceCPUAcct:
		return "cgroup v1 cpuacct.usage"
	case SourceThrottling:
		return "cgroup v1 cpu.stat throttling"
	case SourcePressure:
		return "/proc/pressure/cpu"
	case SourceLoadavg:
		return "/proc/loadavg runnable threads"
	}
	return "unknown source"
}
