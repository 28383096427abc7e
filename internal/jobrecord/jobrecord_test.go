package jobrecord

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestWriteRefusesToReplaceALiveJobsRecord(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "rt")
	rec := Record{JobID: "a", NATSURL: "nats://u:p@127.0.0.1:1", PID: os.Getpid(), Started: time.Unix(1, 0).UTC(), NP: 2, Program: "prog"}
	path, err := Write(dir, rec)
	if err != nil {
		t.Fatal(err)
	}
	if path != RecordPath(dir, "a") {
		t.Errorf("path %s", path)
	}
	back, err := ReadRecord(path)
	if err != nil || back != rec {
		t.Fatalf("read %+v, %v; want %+v", back, err, rec)
	}
	for p, want := range map[string]os.FileMode{dir: 0o700, path: 0o600} {
		if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != want {
			t.Errorf("%s: mode %v, %v; want %v", p, fi.Mode().Perm(), err, want)
		}
	}
	// This process is alive: its job id is in use.
	if _, err := Write(dir, rec); !errors.Is(err, ErrJobIDInUse) {
		t.Errorf("second write: %v, want ErrJobIDInUse", err)
	}
	// A record left by a dead mpirun is replaced.
	stale := rec
	stale.PID = 1 << 30
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if _, err := Write(dir, stale); err != nil {
		t.Fatal(err)
	}
	if _, err := Write(dir, rec); err != nil {
		t.Errorf("replacing a dead job's record: %v", err)
	}
	if err := Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := Remove(path); err != nil {
		t.Errorf("removing a removed record: %v", err)
	}
}
