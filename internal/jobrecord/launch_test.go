package jobrecord

import (
	"errors"
	"os"
	"slices"
	"testing"
)

// A job's launch is kept for "mpirun --restart JOB": written, replaced by a later job of the
// same id, read back; a missing or damaged one is an error saying so.
func TestLaunchIsKeptForRestart(t *testing.T) {
	dir := t.TempDir()
	if _, err := ReadLaunch(dir, "j1"); !errors.Is(err, ErrNoLaunch) {
		t.Fatalf("missing launch: %v, want ErrNoLaunch", err)
	}
	l := Launch{JobID: "j1", Program: "/bin/heat2d", Args: []string{"-n", "5"}, NP: 3, Env: []string{"MPIOS_CKPT_EVERY=10"}}
	if err := WriteLaunch(dir, l); err != nil {
		t.Fatal(err)
	}
	l.NP = 4
	if err := WriteLaunch(dir, l); err != nil {
		t.Fatal(err)
	}
	got, err := ReadLaunch(dir, "j1")
	if err != nil || got.NP != 4 || got.Program != l.Program || !slices.Equal(got.Args, l.Args) || !slices.Equal(got.Env, l.Env) {
		t.Fatalf("read %+v, %v; want %+v", got, err, l)
	}
	if fi, err := os.Stat(LaunchPath(dir, "j1")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("launch file: %v %v, want private", fi, err)
	}
	if err := os.WriteFile(LaunchPath(dir, "j1"), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadLaunch(dir, "j1"); err == nil || errors.Is(err, ErrNoLaunch) {
		t.Errorf("damaged launch: %v", err)
	}
}
