// Package nodecpu reads what a node's CPUs offer this process and how loaded they are: the
// CPUs online and in the affinity mask, the CPU quota of the process's cgroup (v1 or v2), the
// CPU pressure, and the CPU the node uses, in every layout a Linux node has:
//
//   - a whole machine: /proc/stat;
//   - cgroup v2: cpu.max and cpu.stat usage_usec;
//   - cgroup v1 with cpu and cpuacct mounted together ("cpu,cpuacct") or apart: the quota in
//     cpu.cfs_quota_us / cpu.cfs_period_us, the usage in cpuacct.usage;
//   - cgroup v1 without cpuacct: the throttling counters of the cpu controller's cpu.stat;
//   - hybrid v1 + v2 mounts, nested cgroups and cgroup namespaces.
//
// The process's cgroup is found from /proc/self/cgroup and /proc/self/mountinfo, so a node
// that is a systemd unit, a container or an emulated testbed node sees its own quota and
// usage. Every read goes through an fs.FS rooted at "/" (os.DirFS("/") on a real node), and
// the tests run from recorded trees under testdata/.
//
// It is the one reader of these files in mpios: comm decides whether its readers poll
// (usable CPUs, CPU pressure), the IOS agent measures its node (Meter), and the testbed
// finds the hierarchies it creates node cgroups in.
package nodecpu
