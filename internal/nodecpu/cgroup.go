package nodecpu

import (
	"bufio"
	"path"
	"slices"
	"strconv"
	"strings"
)

// Mount is one cgroup hierarchy mount of /proc/self/mountinfo.
type Mount struct {
	// Version is 1 or 2. Controllers are a v1 hierarchy's controllers ("cpu", "cpuacct",
	// "name=systemd", ...), with its other mount options; a v2 mount lists none here (see
	// its cgroup.controllers).
	Version     int
	Controllers []string
	// Root is the cgroup the mount shows, relative to the reader's cgroup namespace ("/" for
	// the hierarchy's root, "/docker/abc" for a container's bind mount); Point is where it is
	// mounted.
	Root, Point string
}

// ParseMountinfo returns the cgroup mounts of a /proc/PID/mountinfo text, in order. Lines of
// other file systems and malformed lines are skipped.
func ParseMountinfo(text string) []Mount {
	var out []Mount
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		// ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPEROPTIONS
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		pf, qf := strings.Fields(pre), strings.Fields(post)
		if len(pf) < 5 || len(qf) < 1 {
			continue
		}
		m := Mount{Root: unescapeMount(pf[3]), Point: unescapeMount(pf[4])}
		switch qf[0] {
		case "cgroup2":
			m.Version = 2
		case "cgroup":
			m.Version = 1
			if len(qf) < 3 {
				continue
			}
			// The super options hold the hierarchy's controllers among mount options.
			for _, o := range strings.Split(qf[2], ",") {
				if o != "rw" && o != "ro" {
					m.Controllers = append(m.Controllers, o)
				}
			}
		default:
			continue
		}
		out = append(out, m)
	}
	return out
}

// Has reports whether the mount's hierarchy has the v1 controller c.
func (m Mount) Has(c string) bool { return slices.Contains(m.Controllers, c) }

// unescapeMount undoes the octal escapes (\040 for a space) of mountinfo.
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// Membership is one line of /proc/PID/cgroup: the process's cgroup in one hierarchy.
type Membership struct {
	// ID is the hierarchy id (0 for v2); Controllers its v1 controllers (none for v2).
	ID          int
	Controllers []string
	// Path is the cgroup, relative to the reader's cgroup namespace.
	Path string
}

// ParseProcCgroup parses /proc/PID/cgroup ("hierarchy-ID:controller-list:path" per line).
// Malformed lines are skipped.
func ParseProcCgroup(text string) []Membership {
	var out []Membership
	for _, line := range strings.Split(text, "\n") {
		f := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(f) != 3 || !strings.HasPrefix(f[2], "/") {
			continue
		}
		id, err := strconv.Atoi(f[0])
		if err != nil {
			continue
		}
		m := Membership{ID: id, Path: f[2]}
		if f[1] != "" {
			m.Controllers = strings.Split(f[1], ",")
		}
		out = append(out, m)
	}
	return out
}

// Cgroup is where the process's CPU files are: directories are paths of the fs.FS (no
// leading slash), "" when absent.
type Cgroup struct {
	// Version is the version of the hierarchy holding the cpu controller (0: none found).
	Version int
	// CPU is the process's cgroup in that hierarchy: cpu.max or cpu.cfs_quota_us, and v2's or
	// v1's cpu.stat. CPUMount is the hierarchy's mount point: the quota of every directory
	// from CPU up to it limits the process (above it nothing is visible).
	CPU, CPUMount string
	// Acct is the process's cgroup in the v1 hierarchy with cpuacct: CPU itself when
	// "cpu,cpuacct" are mounted together, another directory when apart, "" without cpuacct.
	Acct string
	// AcctMount and UnifiedMount are the mount points of Acct's and Unified's hierarchies.
	AcctMount, UnifiedMount string
	// Unified is the process's v2 cgroup when the cpu controller is on v1 (a hybrid
	// layout); v2 keeps usage_usec in cpu.stat even without the cpu controller.
	Unified string
	// UnifiedSamePath says whether Unified names the same cgroup path as CPU, so that its
	// usage is the same processes' usage.
	UnifiedSamePath bool
}

// LocateCgroup finds the process's cgroups from the texts of /proc/self/cgroup and
// /proc/self/mountinfo.
//
// A cgroup at Path in a hierarchy mounted with root Root at Point is the directory
// Point + (Path without the Root prefix). That covers the hierarchy's root mounted on the
// host (Root "/"), a container's bind mount of its own cgroup (Root "/docker/abc", Path
// "/docker/abc" or below) and a cgroup namespace (Path and Root relative to the namespace).
// A Path outside Root (a process moved out of the cgroup a container mounted) maps to
// Point: the nearest cgroup the process can see.
func LocateCgroup(procCgroup, mountinfo string) Cgroup {
	mounts := ParseMountinfo(mountinfo)
	var cg Cgroup
	var cpuPath, v2Path string
	hasV1CPU := false
	for _, m := range mounts {
		if m.Version == 1 && m.Has("cpu") {
			hasV1CPU = true
		}
	}
	for _, mem := range ParseProcCgroup(procCgroup) {
		v2 := mem.ID == 0 && len(mem.Controllers) == 0
		var m Mount
		var dir string
		found := false
		for _, c := range mounts {
			if v2 != (c.Version == 2) || !v2 && !subset(mem.Controllers, c.Controllers) {
				continue
			}
			d, exact := resolve(c, mem.Path)
			if !found || exact {
				m, dir, found = c, d, true
			}
			if exact {
				break
			}
		}
		switch {
		case !found:
		case v2 && hasV1CPU:
			cg.Unified, cg.UnifiedMount, v2Path = dir, fsPath(m.Point), mem.Path
		case v2:
			cg.Version, cg.CPU, cg.CPUMount = 2, dir, fsPath(m.Point)
		default:
			if m.Has("cpu") && cg.Version != 1 {
				cg.Version, cg.CPU, cg.CPUMount, cpuPath = 1, dir, fsPath(m.Point), mem.Path
			}
			if m.Has("cpuacct") && cg.Acct == "" {
				cg.Acct, cg.AcctMount = dir, fsPath(m.Point)
			}
		}
	}
	cg.UnifiedSamePath = cg.Version == 1 && cg.Unified != "" && path.Clean(cpuPath) == path.Clean(v2Path)
	return cg
}

// subset reports whether every element of a is in b.
func subset(a, b []string) bool {
	for _, x := range a {
		if !slices.Contains(b, x) {
			return false
		}
	}
	return true
}

// resolve maps a cgroup path to its directory under mount m (see LocateCgroup). exact is
// false when m shows only a part of the hierarchy that does not contain p: dir is then m's
// mount point, the nearest cgroup visible, and another mount of the hierarchy may do better.
func resolve(m Mount, p string) (dir string, exact bool) {
	outside := strings.HasPrefix(p, "/..") // outside the cgroup namespace's view
	p, root := path.Clean(p), path.Clean(m.Root)
	rel, exact := "/", true
	switch {
	case outside:
	case root == "/":
		rel = p
	case p == root:
	case strings.HasPrefix(p, root+"/"):
		rel = p[len(root):]
	default:
		exact = false
	}
	return path.Join(fsPath(m.Point), rel), exact
}

// fsPath turns an absolute path into an fs.FS path rooted at "/".
func fsPath(abs string) string {
	p := strings.TrimPrefix(path.Clean("/"+abs), "/")
	if p == "" {
		return "."
	}
	return p
}

// ancestors returns dir and its parents up to and including mount (dir itself alone when
// it is not below mount).
func ancestors(dir, mount string) []string {
	out := []string{dir}
	for d := dir; strings.HasPrefix(d, mount+"/"); {
		d = path.Dir(d)
		out = append(out, d)
	}
	return out
}

// levelsUp counts the steps from dir up to anc (-1 if anc is not dir or above it).
func levelsUp(dir, anc string) int {
	for n := 0; ; n++ {
		if dir == anc {
			return n
		}
		if !strings.HasPrefix(dir, anc+"/") {
			return -1
		}
		dir = path.Dir(dir)
	}
}

// up returns the n-th parent of dir, or "" if that would leave mount.
func up(dir, mount string, n int) string {
	for ; n > 0; n-- {
		if dir == mount || !strings.HasPrefix(dir, mount+"/") {
			return ""
		}
		dir = path.Dir(dir)
	}
	return dir
}
