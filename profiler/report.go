package profiler

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// Record is one line of the JSON-lines format: a rank's profile and when it was written.
type Record struct {
	TS time.Time `json:"ts" msgpack:"ts"`
	RankProfile
}

// WriteJSONL writes one JSON object per profile, each a Record stamped now. The lines are
// written with a single Write so that concurrent appenders to one file do not interleave
// within a snapshot.
func WriteJSONL(w io.Writer, snaps []RankProfile, now time.Time) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	for _, s := range snaps {
		if err := enc.Encode(Record{TS: now, RankProfile: s}); err != nil {
			return fmt.Errorf("profiler: encode profile of rank %d: %w", s.Rank, err)
		}
	}
	if _, err := w.Write(buf.Bytes()); err != nil {
		return fmt.Errorf("profiler: write %d profiles: %w", len(snaps), err)
	}
	return nil
}

// ReadJSONL parses what WriteJSONL wrote, skipping blank lines.
func ReadJSONL(r io.Reader) ([]Record, error) {
	var out []Record
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20) // a profile of a large job is one long line
	for line := 1; sc.Scan(); line++ {
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		var rec Record
		if err := json.Unmarshal(b, &rec); err != nil {
			return out, fmt.Errorf("profiler: jsonl line %d: %w", line, err)
		}
		out = append(out, rec)
	}
	if err := sc.Err(); err != nil {
		return out, fmt.Errorf("profiler: read jsonl: %w", err)
	}
	return out, nil
}

// Sink receives the periodic snapshots of a Reporter: a JSON-lines file, a NATS subject, the
// IOS agent. Report must honour ctx and may keep nothing of snaps after it returns.
type Sink interface {
	Report(ctx context.Context, snaps []RankProfile) error
}

// SinkFunc adapts a function to Sink.
type SinkFunc func(ctx context.Context, snaps []RankProfile) error

// Report implements Sink.
func (f SinkFunc) Report(ctx context.Context, snaps []RankProfile) error { return f(ctx, snaps) }

// JSONLFile is a Sink appending JSON lines to a file.
type JSONLFile struct {
	mu  sync.Mutex
	f   *os.File
	now func() time.Time
}

// OpenJSONL opens (creating or appending to) the JSON-lines file at path.
func OpenJSONL(path string) (*JSONLFile, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("profiler: open profile log: %w", err)
	}
	return &JSONLFile{f: f, now: time.Now}, nil
}

// Report implements Sink: it appends one line per rank, stamped with the current time.
func (j *JSONLFile) Report(ctx context.Context, snaps []RankProfile) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("profiler: jsonl report: %w", err)
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.f == nil {
		return errors.New("profiler: jsonl report: file closed")
	}
	if err := WriteJSONL(j.f, snaps, j.now()); err != nil {
		return fmt.Errorf("%w (%s)", err, j.f.Name())
	}
	return nil
}

// Close closes the file; later Reports fail.
func (j *JSONLFile) Close() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.f == nil {
		return nil
	}
	err := j.f.Close()
	j.f = nil
	if err != nil {
		return fmt.Errorf("profiler: close profile log: %w", err)
	}
	return nil
}

// Reporter sends snapshots of a Profiler to a Sink every Interval.
type Reporter struct {
	Profiler *Profiler
	Sink     Sink
	Interval time.Duration
	// Timeout bounds one Report; 0 means Interval.
	Timeout time.Duration
	// OnError is told of every failed report; reporting continues. With nil, failures are
	// only summarized in Run's result.
	OnError func(error)
}

// Run reports every Interval until ctx is done, then makes a last report (so that the end of
// a run is not lost) and returns. It returns an error for an invalid configuration and, if
// OnError is nil, the last failure of the run.
func (r *Reporter) Run(ctx context.Context) error {
	switch {
	case r.Profiler == nil || r.Sink == nil:
		return errors.New("profiler: reporter: needs a Profiler and a Sink")
	case r.Interval <= 0:
		return fmt.Errorf("profiler: reporter: interval %v not positive", r.Interval)
	}
	timeout := r.Timeout
	if timeout <= 0 {
		timeout = r.Interval
	}
	var failures int
	var last error
	report := func(ctx context.Context) {
		rctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		if err := r.Sink.Report(rctx, r.Profiler.Snapshot()); err != nil {
			failures++
			last = err
			if r.OnError != nil {
				r.OnError(err)
			}
		}
	}
	tick := time.NewTicker(r.Interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			report(context.WithoutCancel(ctx))
			if last != nil && r.OnError == nil {
				return fmt.Errorf("profiler: reporter: %d failed reports, last: %w", failures, last)
			}
			return nil
		case <-tick.C:
			report(ctx)
		}
	}
}
