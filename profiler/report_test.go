package profiler

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/mpios/mpios/mpi"
)

// sampleProfiler returns a profiler holding two ranks with traffic, ops and iterations.
func sampleProfiler(t *testing.T) *Profiler {
	cs := world(t, 2)
	p := New(Options{Job: "job-1", Node: "node-a", Now: func() time.Time { return t0.Add(time.Second) }})
	for _, c := range cs {
		p.Observe(mpi.CallEvent{Op: "Sendrecv", Comm: c, Peer: 1 - c.Rank(), Bytes: 64, Start: t0, Dur: ms(2)})
		p.Observe(mpi.CallEvent{Op: "Bcast", Comm: c, Peer: -1, Bytes: 8, Start: t0, Dur: ms(1)})
		if err := p.Iteration(c.Rank(), 1, t0.Add(ms(10))); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

func TestJSONLRoundTrip(t *testing.T) {
	snaps := sampleProfiler(t).Snapshot()
	var buf bytes.Buffer
	ts := t0.Add(2 * time.Second)
	if err := WriteJSONL(&buf, snaps, ts); err != nil {
		t.Fatal(err)
	}
	if lines := strings.Count(buf.String(), "\n"); lines != len(snaps) {
		t.Fatalf("%d lines for %d profiles:\n%s", lines, len(snaps), buf.String())
	}
	if !strings.Contains(buf.String(), `"ts":"2025-03-01T12:00:02Z"`) {
		t.Errorf("no flat timestamp in %s", buf.String())
	}
	recs, err := ReadJSONL(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != len(snaps) {
		t.Fatalf("read %d records, want %d", len(recs), len(snaps))
	}
	for i, rec := range recs {
		if !rec.TS.Equal(ts) {
			t.Errorf("record %d stamped %v, want %v", i, rec.TS, ts)
		}
		if !reflect.DeepEqual(rec.RankProfile, snaps[i]) {
			t.Errorf("record %d:\n got %+v\nwant %+v", i, rec.RankProfile, snaps[i])
		}
	}
	if _, err := ReadJSONL(strings.NewReader("{\"rank\":1}\nnot json\n")); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("bad line: err %v", err)
	}
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestWriteJSONLError(t *testing.T) {
	err := WriteJSONL(failingWriter{}, []RankProfile{{Rank: 1}}, t0)
	if err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Errorf("err %v", err)
	}
}

func TestJSONLFileSink(t *testing.T) {
	p := sampleProfiler(t)
	path := filepath.Join(t.TempDir(), "profile.jsonl")
	sink, err := OpenJSONL(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for range 2 {
		if err := sink.Report(ctx, p.Snapshot()); err != nil {
			t.Fatal(err)
		}
	}
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}
	if err := sink.Report(ctx, p.Snapshot()); err == nil {
		t.Error("report after Close succeeded")
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	recs, err := ReadJSONL(f)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 4 || recs[3].Rank != 1 || recs[3].SentTo(0).Bytes != 64 {
		t.Errorf("file holds %d records: %+v", len(recs), recs)
	}
	if _, err := OpenJSONL(filepath.Join(t.TempDir(), "missing", "x.jsonl")); err == nil {
		t.Error("opening in a missing directory succeeded")
	}
}

func TestReporter(t *testing.T) {
	p := sampleProfiler(t)
	got := make(chan []RankProfile, 100)
	r := &Reporter{Profiler: p, Interval: 5 * time.Millisecond, Sink: SinkFunc(func(ctx context.Context, s []RankProfile) error {
		got <- s
		return nil
	})}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	for range 2 {
		select {
		case s := <-got:
			if len(s) != 2 {
				t.Errorf("report of %d ranks, want 2", len(s))
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no periodic report")
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if len(got) == 0 {
		t.Error("no final report at cancellation")
	}
}

func TestReporterErrors(t *testing.T) {
	p := New(Options{})
	boom := errors.New("nats down")
	failing := SinkFunc(func(context.Context, []RankProfile) error { return boom })
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // only the final report runs
	if err := (&Reporter{Profiler: p, Sink: failing, Interval: time.Second}).Run(ctx); !errors.Is(err, boom) {
		t.Errorf("Run = %v, want the sink error", err)
	}
	var seen []error
	r := &Reporter{Profiler: p, Sink: failing, Interval: time.Second, OnError: func(err error) { seen = append(seen, err) }}
	if err := r.Run(ctx); err != nil || len(seen) != 1 {
		t.Errorf("Run = %v with %d errors reported, want nil and 1", err, len(seen))
	}
	for _, bad := range []*Reporter{{Sink: failing, Interval: time.Second}, {Profiler: p, Interval: time.Second}, {Profiler: p, Sink: failing}} {
		if err := bad.Run(ctx); err == nil {
			t.Errorf("invalid reporter %+v accepted", bad)
		}
	}
}
