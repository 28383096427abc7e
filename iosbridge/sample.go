package iosbridge

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/mpios/mpios/internal/nodecpu"
)

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

// ProcTimes is what the IOS profiling component reads of one process (see Sampler.Process).
type ProcTimes = nodecpu.ProcTimes

// Sampler reads the node's kernel files and produces NodeProfiles: the CPUs, their load and
// the memory. The CPU part is package nodecpu, which finds the process's cgroup (from
// /proc/self/cgroup and mountinfo) and measures its usage in whatever layout the node has;
// NodeProfile.LoadSource says which counter it used. Not safe for concurrent use.
type Sampler struct {
	// Node is copied into every profile.
	Node string
	// Root is where the node's "/" is ("" means "/"): tests and containers with /proc
	// mounted elsewhere point it at another tree. FS, if set, replaces Root.
	Root string
	FS   fs.FS
	// QuotaOnly judges the node by its cgroup quota and the cgroup's own usage alone,
	// ignoring the host's idle CPUs: for nodes that are cgroups sharing one machine (the
	// emulated cluster, containers), whose host counters include the other nodes.
	QuotaOnly bool

	reader *nodecpu.Reader
	meter  *nodecpu.Meter
}

func (s *Sampler) open() error {
	if s.reader != nil {
		return nil
	}
	fsys := s.FS
	if fsys == nil {
		root := s.Root
		if root == "" {
			root = "/"
		}
		fsys = os.DirFS(root)
	}
	r, err := nodecpu.New(fsys)
	if err != nil {
		return fmt.Errorf("iosbridge: sample: %w", err)
	}
	s.reader, s.meter = r, nodecpu.NewMeter(r, s.QuotaOnly)
	return nil
}

// Sample measures the node at now (see nodecpu.Measure: the idle share of the CPUs the
// node may use, its cgroup quota and own usage included) since the previous Sample (since
// boot the first time), reads the memory and the load average, and returns the profile;
// ranks is copied into it. A missing /proc/loadavg is not an error (Load1 0).
func (s *Sampler) Sample(now time.Time, ranks []RankID) (NodeProfile, error) {
	p := NodeProfile{Node: s.Node, SampledAt: now, Ranks: append([]RankID(nil), ranks...)}
	if err := s.open(); err != nil {
		return p, err
	}
	l, err := s.meter.Sample(now)
	if err != nil {
		return p, fmt.Errorf("iosbridge: sample: %w", err)
	}
	p.CPUs, p.EffectiveCPUs, p.Availability, p.LoadSource = l.Online, l.Capacity, l.Availability, l.Source.String()
	memText, err := fs.ReadFile(s.reader.FS(), "proc/meminfo")
	if err != nil {
		return p, fmt.Errorf("iosbridge: sample: %w", err)
	}
	mem, err := ParseMeminfo(string(memText))
	if err != nil {
		return p, err
	}
	p.MemTotalBytes, p.MemFreeBytes = mem.TotalBytes, mem.FreeBytes
	la, ok, err := s.reader.ReadLoadavg()
	if err != nil {
		return p, fmt.Errorf("iosbridge: sample: %w", err)
	}
	if ok {
		p.Load1 = la.Load1
	}
	return p, nil
}

// Process reads Root/proc/PID/stat: the CPU time and memory of one rank.
func (s *Sampler) Process(pid int) (ProcTimes, error) {
	if err := s.open(); err != nil {
		return ProcTimes{}, err
	}
	t, err := s.reader.Process(pid)
	if err != nil {
		return t, fmt.Errorf("iosbridge: process %d: %w", pid, err)
	}
	return t, nil
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
