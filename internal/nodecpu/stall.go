package nodecpu

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"time"
)

// Stall counts, cumulatively, the microseconds in which some runnable thread of the node
// waited for a CPU: the "some" total of /proc/pressure/cpu (Linux 4.20+ with PSI), else an
// estimate integrated from the runnable threads of /proc/loadavg. Reading it costs one pread
// of a /proc file. Not safe for concurrent use.
type Stall struct {
	src   Source
	file  *rereader
	clock func() time.Duration

	cpus   int     // online CPUs (runnable counts are node-wide)
	stall  float64 // µs, for SourceLoadavg
	lastAt time.Duration
}

// ErrNoStallSource is returned by OpenStall on a node with neither PSI nor /proc/loadavg.
var ErrNoStallSource = errors.New("nodecpu: neither /proc/pressure/cpu nor /proc/loadavg is readable")

// OpenStall opens the node's stall counter. clock is the monotonic time the loadavg estimate
// integrates over (nil: time since OpenStall).
func (r *Reader) OpenStall(clock func() time.Duration) (*Stall, error) {
	if clock == nil {
		start := time.Now()
		clock = func() time.Duration { return time.Since(start) }
	}
	if f, err := openRereader(r.fsys, "proc/pressure/cpu"); err == nil {
		s := &Stall{src: SourcePressure, file: f, clock: clock}
		if _, err := s.Read(); err == nil { // with PSI switched off, the file exists but reads fail
			return s, nil
		}
		f.Close()
	}
	f, err := openRereader(r.fsys, "proc/loadavg")
	if err != nil {
		return nil, ErrNoStallSource
	}
	cpus, err := r.OnlineCPUs()
	if err != nil || cpus <= 0 {
		f.Close()
		return nil, fmt.Errorf("nodecpu: stall from /proc/loadavg: online CPUs unknown: %v", err)
	}
	s := &Stall{src: SourceLoadavg, file: f, clock: clock, cpus: cpus, lastAt: clock()}
	if _, err := s.Read(); err != nil {
		f.Close()
		return nil, err
	}
	return s, nil
}

// Source is SourcePressure or SourceLoadavg.
func (s *Stall) Source() Source { return s.src }

// Read returns the cumulative stall in µs.
func (s *Stall) Read() (uint64, error) {
	text, err := s.file.read()
	if err != nil {
		return 0, err
	}
	if s.src == SourcePressure {
		return ParsePressureTotal(text)
	}
	l, err := ParseLoadavg(text)
	if err != nil {
		return 0, err
	}
	now := s.clock()
	s.stall += float64((now - s.lastAt).Microseconds()) * RunnableExcess(l.Running, s.cpus)
	s.lastAt = now
	return uint64(s.stall), nil
}

// Close releases the file.
func (s *Stall) Close() error { return s.file.Close() }

// RunnableExcess estimates the share of time some thread waits for a CPU from one sample of
// the number of runnable threads (which includes the sampling thread): 0 while they fit the
// CPUs, else the share of them that cannot run.
func RunnableExcess(running, cpus int) float64 {
	if running <= cpus || running <= 0 {
		return 0
	}
	return float64(running-cpus) / float64(running)
}

// rereader reads a file from its start again and again: with pread when the fs.FS file
// supports it (os.DirFS does), else by opening it again.
type rereader struct {
	fsys fs.FS
	name string
	f    fs.File
	buf  []byte
}

func openRereader(fsys fs.FS, name string) (*rereader, error) {
	f, err := fsys.Open(name)
	if err != nil {
		return nil, err
	}
	return &rereader{fsys: fsys, name: name, f: f, buf: make([]byte, 256)}, nil
}

func (r *rereader) read() (string, error) {
	if ra, ok := r.f.(io.ReaderAt); ok {
		n, err := ra.ReadAt(r.buf, 0)
		if n == 0 && err != nil {
			return "", fmt.Errorf("nodecpu: %s: %w", r.name, err)
		}
		return string(r.buf[:n]), nil
	}
	b, err := fs.ReadFile(r.fsys, r.name)
	if err != nil {
		return "", fmt.Errorf("nodecpu: %w", err)
	}
	return string(b), nil
}

func (r *rereader) Close() error { return r.f.Close() }
