//go:build linux

package testbed

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/mpios/mpios/internal/nodecpu"
)

// cgroupFS is where the cpu controller is mounted.
type cgroupFS struct {
	version  int    // 1 or 2
	cpuRoot  string // mount point of the hierarchy with the cpu controller
	acctRoot string // v1: mount point of cpuacct ("" if none; cpuRoot if co-mounted); v2: ""
}

// detectCgroups finds the cgroup hierarchy holding the cpu controller: cgroup v2 if its
// cgroup.controllers lists cpu, else a v1 hierarchy mounted with the cpu controller.
func detectCgroups() (*cgroupFS, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("cgroups: %w", err)
	}
	var v1cpu, v1acct, v2 string
	for _, m := range nodecpu.ParseMountinfo(string(b)) {
		switch m.Version {
		case 2:
			b, err := os.ReadFile(filepath.Join(m.Point, "cgroup.controllers"))
			if err == nil && slices.Contains(strings.Fields(string(b)), "cpu") && v2 == "" {
				v2 = m.Point
			}
		case 1:
			if m.Has("cpu") && v1cpu == "" {
				v1cpu = m.Point
			}
			if m.Has("cpuacct") && v1acct == "" {
				v1acct = m.Point
			}
		}
	}
	switch {
	case v2 != "":
		return &cgroupFS{version: 2, cpuRoot: v2}, nil
	case v1cpu != "":
		return &cgroupFS{version: 1, cpuRoot: v1cpu, acctRoot: v1acct}, nil
	}
	return nil, errors.New("cgroups: no cgroup v1 or v2 hierarchy with the cpu controller is mounted")
}

// roots returns the hierarchy roots the testbed makes cgroups in.
func (fs *cgroupFS) roots() []string {
	if fs.acctRoot != "" && fs.acctRoot != fs.cpuRoot {
		return []string{fs.cpuRoot, fs.acctRoot}
	}
	return []string{fs.cpuRoot}
}

// prepare creates the testbed's parent cgroup (CgroupName) in every hierarchy, and on
// cgroup v2 enables the cpu controller for its descendants.
func (fs *cgroupFS) prepare() error {
	if fs.version == 2 {
		if err := enableCPU(fs.cpuRoot); err != nil {
			return err
		}
	}
	for _, r := range fs.roots() {
		if err := mkdirCgroup(filepath.Join(r, CgroupName)); err != nil {
			return err
		}
	}
	if fs.version == 2 {
		return enableCPU(filepath.Join(fs.cpuRoot, CgroupName))
	}
	return nil
}

// removeTop removes the testbed's parent cgroups (which must be empty of nodes).
func (fs *cgroupFS) removeTop() error {
	var errs []error
	for _, r := range fs.roots() {
		if err := rmdirCgroup(filepath.Join(r, CgroupName)); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// enableCPU makes the cpu controller available to the children of a v2 cgroup.
func enableCPU(dir string) error {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.subtree_control"))
	if err == nil && slices.Contains(strings.Fields(string(b)), "cpu") {
		return nil
	}
	return writeFile(filepath.Join(dir, "cgroup.subtree_control"), "+cpu")
}

func mkdirCgroup(dir string) error {
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("cgroups: create %s: %w", dir, err)
	}
	return nil
}

// rmdirCgroup removes an empty cgroup, retrying for a while: a cgroup whose last process
// just exited stays busy for a moment. A cgroup that does not exist is not an error.
func rmdirCgroup(dir string) error {
	deadline := time.Now().Add(3 * time.Second)
	for {
		err := syscall.Rmdir(dir)
		if err == nil || errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if !errors.Is(err, syscall.EBUSY) || time.Now().After(deadline) {
			return fmt.Errorf("cgroups: remove %s: %w", dir, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func writeFile(path, value string) error {
	if err := os.WriteFile(path, []byte(value), 0); err != nil {
		return fmt.Errorf("cgroups: write %q to %s: %w", value, path, err)
	}
	return nil
}

// Sub-cgroups of a node.
const (
	subWork = "work" // pcmd and its ranks
	subLoad = "load" // the load generator
)

// nodeCgroup is the cgroup tree of one node: CgroupName/NAME with children work and load.
type nodeCgroup struct {
	fs   *cgroupFS
	name string
}

// dir returns the node's cgroup (sub "") or a child's, in hierarchy root.
func (cg *nodeCgroup) dir(root, sub string) string {
	return filepath.Join(root, CgroupName, cg.name, sub)
}

// cpuDir is the node's cgroup (sub "") or child in the cpu hierarchy.
func (cg *nodeCgroup) cpuDir(sub string) string { return cg.dir(cg.fs.cpuRoot, sub) }

// procsFiles lists the cgroup.procs files a process joins to enter the child sub.
func (cg *nodeCgroup) procsFiles(sub string) []string {
	var files []string
	for _, r := range cg.fs.roots() {
		files = append(files, filepath.Join(cg.dir(r, sub), "cgroup.procs"))
	}
	return files
}

// create makes the node's cgroups and sets its quota: cpus CPUs per period (0: no quota).
func (cg *nodeCgroup) create(cpus float64, period time.Duration) error {
	for _, r := range cg.fs.roots() {
		if err := mkdirCgroup(cg.dir(r, "")); err != nil {
			return err
		}
	}
	if cg.fs.version == 2 {
		if err := enableCPU(cg.cpuDir("")); err != nil {
			return err
		}
	}
	for _, r := range cg.fs.roots() {
		for _, sub := range []string{subWork, subLoad} {
			if err := mkdirCgroup(cg.dir(r, sub)); err != nil {
				return err
			}
		}
	}
	return cg.setQuota("", cpus, period)
}

// setQuota limits the node (sub "") or a child to cpus CPUs per period; cpus <= 0 lifts the
// limit.
func (cg *nodeCgroup) setQuota(sub string, cpus float64, period time.Duration) error {
	dir := cg.cpuDir(sub)
	periodUS := period.Microseconds()
	quotaUS := int64(-1)
	if cpus > 0 {
		quotaUS = max(1000, int64(math.Round(cpus*float64(periodUS))))
	}
	if cg.fs.version == 2 {
		q := "max"
		if quotaUS > 0 {
			q = strconv.FormatInt(quotaUS, 10)
		}
		return writeFile(filepath.Join(dir, "cpu.max"), q+" "+strconv.FormatInt(periodUS, 10))
	}
	// v1 checks the new quota against the current period: lift the quota first.
	if err := writeFile(filepath.Join(dir, "cpu.cfs_quota_us"), "-1"); err != nil {
		return err
	}
	if err := writeFile(filepath.Join(dir, "cpu.cfs_period_us"), strconv.FormatInt(periodUS, 10)); err != nil {
		return err
	}
	return writeFile(filepath.Join(dir, "cpu.cfs_quota_us"), strconv.FormatInt(quotaUS, 10))
}

// setLoadShare splits the node's CPU between the work child and the load child: the load
// child gets weight share and a quota of share × nodeCPUs, the work child weight 1-share
// and a quota of the rest. share 0 restores equal weights and lifts the children's quotas.
func (cg *nodeCgroup) setLoadShare(share, nodeCPUs float64, period time.Duration) error {
	var wWork, wLoad string
	if cg.fs.version == 2 {
		// cpu.weight: 1 to 10000, default 100.
		wWork, wLoad = "100", "100"
		if share > 0 {
			wWork = strconv.Itoa(max(1, int(math.Round(1000*(1-share)))))
			wLoad = strconv.Itoa(max(1, int(math.Round(1000*share))))
		}
	} else {
		// cpu.shares: 2 and up, default 1024.
		wWork, wLoad = "1024", "1024"
		if share > 0 {
			wWork = strconv.Itoa(max(2, int(math.Round(1024*(1-share)))))
			wLoad = strconv.Itoa(max(2, int(math.Round(1024*share))))
		}
	}
	file := "cpu.shares"
	if cg.fs.version == 2 {
		file = "cpu.weight"
	}
	if err := writeFile(filepath.Join(cg.cpuDir(subWork), file), wWork); err != nil {
		return err
	}
	if err := writeFile(filepath.Join(cg.cpuDir(subLoad), file), wLoad); err != nil {
		return err
	}
	// Weights alone do not split a quota: they act per CPU, and a rank alone on another CPU
	// would run unopposed until the node's quota is spent. The quotas do: the load
	// generator always uses all of its quota, so capping the work child at the rest takes
	// nothing from the ranks that they could otherwise have had.
	work := 0.0
	if share > 0 {
		work = max(1-share, 0.001) * nodeCPUs
	}
	if err := cg.setQuota(subWork, work, period); err != nil {
		return err
	}
	return cg.setQuota(subLoad, share*nodeCPUs, period)
}

// usage returns the CPU time the node's processes (sub ""; pcmd, ranks and load generator)
// or those of a child have used since the cgroup was made.
func (cg *nodeCgroup) usage(sub string) (time.Duration, error) {
	if cg.fs.version == 2 {
		path := filepath.Join(cg.cpuDir(sub), "cpu.stat")
		b, err := os.ReadFile(path)
		if err != nil {
			return 0, fmt.Errorf("cgroups: %w", err)
		}
		st, err := nodecpu.ParseCPUStat(string(b))
		if err != nil || !st.HasUsage {
			return 0, fmt.Errorf("cgroups: %s has no usage_usec (%v)", path, err)
		}
		return st.Usage, nil
	}
	if cg.fs.acctRoot != "" {
		path := filepath.Join(cg.dir(cg.fs.acctRoot, sub), "cpuacct.usage")
		b, err := os.ReadFile(path)
		if err != nil {
			return 0, fmt.Errorf("cgroups: %w", err)
		}
		u, err := nodecpu.ParseCPUAcctUsage(string(b))
		if err != nil {
			return 0, fmt.Errorf("cgroups: %s: %w", path, err)
		}
		return u, nil
	}
	// No cpuacct: add up the live processes' times (those that exited are missed).
	var total time.Duration
	for _, pid := range treePids(cg.cpuDir(sub)) {
		total += procCPUTime(pid)
	}
	return total, nil
}

// pids lists the processes in the node's cgroups, in every hierarchy.
func (cg *nodeCgroup) pids() []int {
	var pids []int
	for _, r := range cg.fs.roots() {
		pids = append(pids, treePids(cg.dir(r, ""))...)
	}
	slices.Sort(pids)
	return slices.Compact(pids)
}

// killAll kills every process in the node's cgroups and waits (bounded) until they are gone.
func (cg *nodeCgroup) killAll(wait time.Duration) error {
	return killUntilEmpty(cg.pids, wait, "cgroup "+cg.cpuDir(""))
}

// remove removes the node's cgroups (children first) in every hierarchy.
func (cg *nodeCgroup) remove() error {
	var errs []error
	for _, r := range cg.fs.roots() {
		for _, sub := range []string{subWork, subLoad, ""} {
			if err := rmdirCgroup(cg.dir(r, sub)); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// treePids lists the processes of dir and its descendant cgroups.
func treePids(dir string) []int {
	var pids []int
	_ = filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if !d.IsDir() {
			return nil
		}
		b, err := os.ReadFile(filepath.Join(path, "cgroup.procs"))
		if err != nil {
			return nil
		}
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil && pid > 0 {
				pids = append(pids, pid)
			}
		}
		return nil
	})
	return pids
}

// killUntilEmpty sends SIGKILL to what list returns until it returns nothing or wait passes.
func killUntilEmpty(list func() []int, wait time.Duration, what string) error {
	deadline := time.Now().Add(wait)
	for {
		pids := list()
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("testbed: processes %v in %s survive SIGKILL", pids, what)
		}
		for _, pid := range pids {
			if pid != os.Getpid() {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// procCPUTime returns a process's user plus system time from /proc/PID/stat, 0 if unknown.
func procCPUTime(pid int) time.Duration {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	t, err := nodecpu.ParseProcPIDStat(string(b), os.Getpagesize())
	if err != nil {
		return 0
	}
	return t.CPU
}

// cleanupCgroups removes the testbed's cgroups left by a crashed run: it kills their
// processes and removes the cgroups, deepest first.
func cleanupCgroups(fs *cgroupFS) (removed []string, err error) {
	var errs []error
	for _, r := range fs.roots() {
		top := filepath.Join(r, CgroupName)
		if _, err := os.Stat(top); err != nil {
			continue
		}
		if err := killUntilEmpty(func() []int { return treePids(top) }, 5*time.Second, "cgroup "+top); err != nil {
			errs = append(errs, err)
		}
		var dirs []string
		_ = filepath.WalkDir(top, func(path string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, path)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			if err := rmdirCgroup(dirs[i]); err != nil {
				errs = append(errs, err)
			} else {
				removed = append(removed, dirs[i])
			}
		}
	}
	return removed, errors.Join(errs...)
}
