package pcm_test

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mpios/mpios/internal/mpitest"
	"github.com/mpios/mpios/internal/testbin"
	"github.com/mpios/mpios/mpi"
	"github.com/mpios/mpios/pcm"
	"github.com/mpios/mpios/pcm/ckptstore"
	"github.com/mpios/mpios/pcm/state"
)

const (
	testRanks = 3
	testIters = 30
)

// undisturbed runs the solver without pcm checkpoints and returns every rank's final state.
func undisturbed(t *testing.T, n int) map[int]result {
	t.Helper()
	var want results[result]
	mpitest.Run(t, mpitest.InProc, n, func(c *mpi.Comm) error {
		r, _, err := run(c, runOpts{iters: testIters})
		want.set(c.Rank(), r)
		return err
	})
	return want.v
}

// firstRun runs job "first" with a checkpoint every 5 iterations and stops after 23, short
// of its 30 iterations: checkpoints of iterations 15 and 20 are left (Keep 2).
func firstRun(t *testing.T, dir string) {
	t.Helper()
	mpitest.Run(t, mpitest.InProc, testRanks, func(c *mpi.Comm) error {
		_, _, err := run(c, runOpts{iters: testIters, stop: 23,
			opts: pcm.Options{JobID: "first", Dir: dir, Every: 5, Node: "nodeA", Log: io.Discard}})
		return err
	})
}

func openStore(t *testing.T, dir string) *ckptstore.Store {
	t.Helper()
	s, err := ckptstore.Open(dir, &ckptstore.Options{Node: "nodeA"})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestCheckpointEveryK(t *testing.T) {
	dir := t.TempDir()
	// The state each rank had at iteration 12, to compare with the newest checkpoint.
	var at12 results[result]
	mpitest.Run(t, mpitest.InProc, testRanks, func(c *mpi.Comm) error {
		_, p, err := run(c, runOpts{iters: 14,
			opts: pcm.Options{JobID: "every", Dir: dir, Every: 4, Node: "nodeA", Log: io.Discard},
			hook: func(s *solver, _ *pcm.Process) error {
				if s.iter == 12 {
					at12.set(c.Rank(), s.result())
				}
				return nil
			}})
		if err == nil && p.Status() != pcm.New {
			err = fmt.Errorf("status %v, want new", p.Status())
		}
		return err
	})
	store := openStore(t, dir)
	ms, err := store.Checkpoints("every")
	if err != nil {
		t.Fatal(err)
	}
	// Iterations 4, 8 and 12 were checkpointed as 1, 2, 3; pruning keeps the newest two.
	if len(ms) != 2 || ms[0].Seq != 3 || ms[0].Iteration != 12 || ms[1].Seq != 2 || ms[1].Iteration != 8 {
		for _, m := range ms {
			t.Logf("checkpoint %d iteration %d", m.Seq, m.Iteration)
		}
		t.Fatalf("got %d checkpoints, want 3 (iteration 12) and 2 (iteration 8)", len(ms))
	}
	m := ms[0]
	if m.Job != "every" || m.Size != testRanks || len(m.Pieces) != testRanks || m.Meta["pcm.entries"] != "u,iter,stats" {
		t.Fatalf("manifest %+v", m)
	}
	for r, pi := range m.Pieces {
		if pi.Rank != r || pi.Node != "nodeA" || pi.Size <= 0 || !strings.HasPrefix(pi.Checksum, "crc32c:") {
			t.Errorf("piece %d: %+v", r, pi)
		}
		// The piece holds exactly the state of iteration 12.
		var u []float64
		var iter int
		var st stats
		reg := state.NewRegistry()
		for _, e := range []struct {
			n string
			p any
		}{{"u", &u}, {"iter", &iter}, {"stats", &st}} {
			if err := reg.Register(e.n, e.p); err != nil {
				t.Fatal(err)
			}
		}
		rc, _, err := store.OpenPiece("every", m.Seq, r)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := reg.ReadFrom(rc); err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(io.Discard, rc); err != nil {
			t.Fatal(err)
		}
		rc.Close()
		equalResults(t, r, result{u: u[1 : cellsPerRank+1], iter: iter, max: st.Max}, at12.get(r))
	}
}

func TestRestartBitwise(t *testing.T) {
	want := undisturbed(t, testRanks)
	for _, tr := range []mpitest.Transport{mpitest.InProc, mpitest.TCP} {
		t.Run(tr.String(), func(t *testing.T) {
			dir := t.TempDir()
			firstRun(t, dir)
			var log testbin.Buffer
			mpitest.Run(t, tr, testRanks, func(c *mpi.Comm) error {
				var loaded int
				got, p, err := run(c, runOpts{iters: testIters,
					opts: pcm.Options{JobID: "second", Restart: "first", Dir: dir, Every: 5, Node: "nodeA", Log: &log},
					hook: func(s *solver, p *pcm.Process) error {
						if loaded == 0 {
							loaded = s.iter
						}
						return nil
					}})
				if err != nil {
					return err
				}
				m, ok := p.Restored()
				if p.Status() != pcm.Restarted || !ok || m.Job != "first" || m.Iteration != 20 {
					return fmt.Errorf("status %v, restored %v %+v", p.Status(), ok, m)
				}
				if loaded != 21 {
					return fmt.Errorf("first iteration after restart ended at %d, want 21", loaded)
				}
				equalResults(t, c.Rank(), got, want[c.Rank()])
				return nil
			})
			if !strings.Contains(log.String(), "pcm: job second restarts from job first checkpoint 4 (iteration 20)") {
				t.Errorf("log: %q", log.String())
			}
			// The restarted job checkpointed under its own id, numbering from 1.
			ms, err := openStore(t, dir).Checkpoints("second")
			if err != nil || len(ms) != 2 || ms[0].Iteration != 30 || ms[0].Seq != 2 {
				t.Errorf("checkpoints of job second: %v %+v", err, ms)
			}
		})
	}
}

func TestRestartFallback(t *testing.T) {
	want := undisturbed(t, testRanks)
	piece := func(dir string, seq, rank int) string {
		return filepath.Join(dir, "first", fmt.Sprintf("%020d", seq), fmt.Sprintf("rank-%d.piece", rank))
	}
	for _, c := range []struct {
		name    string
		damage  func(t *testing.T, dir string)
		message string
	}{
		{"pieceChecksum", func(t *testing.T, dir string) {
			path := piece(dir, 4, 1)
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			b[len(b)/2] ^= 0x10
			if err := os.WriteFile(path, b, 0o600); err != nil {
				t.Fatal(err)
			}
		}, "pcm: checkpoint 4 rank 1: checksum mismatch"},
		{"pieceMissing", func(t *testing.T, dir string) {
			if err := os.Remove(piece(dir, 4, 2)); err != nil {
				t.Fatal(err)
			}
		}, "pcm: checkpoint 4 rank 2: piece missing, falling back to checkpoint 3"},
		{"pieceTruncated", func(t *testing.T, dir string) {
			if err := os.Truncate(piece(dir, 4, 0), 100); err != nil {
				t.Fatal(err)
			}
		}, "pcm: checkpoint 4 rank 0: truncated"},
		{"manifest", func(t *testing.T, dir string) {
			path := filepath.Join(dir, "first", fmt.Sprintf("%020d", 4), "manifest.json")
			if err := os.WriteFile(path, []byte("{not json"), 0o600); err != nil {
				t.Fatal(err)
			}
		}, "pcm: checkpoint 4: manifest unreadable, falling back to checkpoint 3\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			firstRun(t, dir)
			c.damage(t, dir)
			var log testbin.Buffer
			mpitest.Run(t, mpitest.InProc, testRanks, func(cm *mpi.Comm) error {
				got, p, err := run(cm, runOpts{iters: testIters,
					opts: pcm.Options{JobID: "second", Restart: "first", Dir: dir, Node: "nodeA", Log: &log}})
				if err != nil {
					return err
				}
				if m, _ := p.Restored(); m.Seq != 3 || m.Iteration != 15 {
					return fmt.Errorf("restored checkpoint %d (iteration %d), want 3 (15)", m.Seq, m.Iteration)
				}
				equalResults(t, cm.Rank(), got, want[cm.Rank()])
				return nil
			})
			out := log.String()
			if !strings.Contains(out, c.message) || !strings.Contains(out, ", falling back to checkpoint 3\n") ||
				strings.Count(out, "falling back") != 1 {
				t.Errorf("log does not report the fallback as %q:\n%s", c.message, out)
			}
		})
	}
}

func TestRestartNoCheckpoint(t *testing.T) {
	dir := t.TempDir()
	firstRun(t, dir)
	for _, seq := range []int{3, 4} {
		path := filepath.Join(dir, "first", fmt.Sprintf("%020d", seq), "rank-1.piece")
		if err := os.Truncate(path, 10); err != nil {
			t.Fatal(err)
		}
	}
	for _, job := range []string{"first", "nosuchjob"} {
		mpitest.Run(t, mpitest.InProc, testRanks, func(c *mpi.Comm) error {
			_, _, err := run(c, runOpts{iters: testIters,
				opts: pcm.Options{JobID: "second", Restart: job, Dir: dir, Node: "nodeA", Log: io.Discard}})
			if !errors.Is(err, pcm.ErrNoCheckpoint) {
				return fmt.Errorf("restart from %s: got %v, want ErrNoCheckpoint", job, err)
			}
			if job == "first" && !strings.Contains(err.Error(), "checkpoint 3 rank 1: truncated") {
				return fmt.Errorf("error does not say why checkpoint 3 was skipped: %v", err)
			}
			return nil
		})
	}
}

func TestRestartSizeMismatch(t *testing.T) {
	dir := t.TempDir()
	firstRun(t, dir)
	mpitest.Run(t, mpitest.InProc, 2, func(c *mpi.Comm) error {
		_, _, err := run(c, runOpts{iters: testIters,
			opts: pcm.Options{JobID: "second", Restart: "first", Dir: dir, Node: "nodeA", Log: io.Discard}})
		var se *pcm.SizeMismatchError
		if !errors.As(err, &se) || !errors.Is(err, pcm.ErrSizeMismatch) || se.Checkpoint != testRanks || se.World != 2 || se.Seq != 4 {
			return fmt.Errorf("got %v, want a *SizeMismatchError 3 vs 2", err)
		}
		if !strings.Contains(err.Error(), "the checkpoint has 3 ranks, this world has 2") {
			return fmt.Errorf("unclear message: %v", err)
		}
		return nil
	})
}

func TestRestartRegistryMismatch(t *testing.T) {
	dir := t.TempDir()
	firstRun(t, dir)
	mpitest.Run(t, mpitest.InProc, testRanks, func(c *mpi.Comm) error {
		p, err := pcm.InitWith(c, pcm.Options{JobID: "second", Restart: "first", Dir: dir, Node: "nodeA", Log: io.Discard})
		if err != nil {
			return err
		}
		var u []float64
		if err := p.Register("u", &u); err != nil {
			return err
		}
		if err := p.Load(); !errors.Is(err, state.ErrMismatch) {
			return fmt.Errorf("got %v, want state.ErrMismatch", err)
		}
		return nil
	})
}

func TestRestartRepeatedIteration(t *testing.T) {
	dir := t.TempDir()
	firstRun(t, dir)
	mpitest.Run(t, mpitest.InProc, testRanks, func(c *mpi.Comm) error {
		p, err := pcm.InitWith(c, pcm.Options{JobID: "second", Restart: "first", Dir: dir, Node: "nodeA", Log: io.Discard})
		if err != nil {
			return err
		}
		s := newSolver(c)
		if err := s.register(p); err != nil {
			return err
		}
		if err := p.Load(); err != nil {
			return err
		}
		// A loop that passes the restored counter without advancing it would redo iteration 20.
		if _, err := p.Reconfigure(s.iter); !errors.Is(err, pcm.ErrIteration) || !strings.Contains(err.Error(), "restarting from iteration 20") {
			return fmt.Errorf("got %v, want ErrIteration", err)
		}
		return nil
	})
}

func TestOnDemand(t *testing.T) {
	dir := t.TempDir()
	mpitest.Run(t, mpitest.InProc, testRanks, func(c *mpi.Comm) error {
		_, _, err := run(c, runOpts{iters: 20,
			opts: pcm.Options{JobID: "od", Dir: dir, OnDemand: true, PollEvery: 4, Node: "nodeA", Log: io.Discard},
			hook: func(s *solver, p *pcm.Process) error {
				// Polls are at calls 0, 4, 8, ...: iterations 1, 5, 9, ... A request by one
				// rank after iteration 6 is agreed, and taken by all, at iteration 9.
				if s.iter == 6 && c.Rank() == 2 {
					return p.RequestCheckpoint()
				}
				return nil
			}})
		return err
	})
	ms, err := openStore(t, dir).Checkpoints("od")
	if err != nil || len(ms) != 1 || ms[0].Iteration != 9 {
		t.Fatalf("got %v %+v, want one checkpoint at iteration 9", err, ms)
	}
	mpitest.Run(t, mpitest.InProc, 1, func(c *mpi.Comm) error {
		p, err := pcm.InitWith(c, pcm.Options{JobID: "x", Dir: dir, Every: 3, Log: io.Discard})
		if err != nil {
			return err
		}
		if err := p.RequestCheckpoint(); !errors.Is(err, pcm.ErrNotConfigured) {
			return fmt.Errorf("got %v, want ErrNotConfigured", err)
		}
		return nil
	})
}

// A piece that cannot be written makes every rank abandon the checkpoint with the same
// *CheckpointError: at the boundary itself with SyncCheckpoints, at a later agreement point
// (at the latest the next checkpoint, or Close) otherwise. The job goes on.
func TestCheckpointFailureAbandoned(t *testing.T) {
	for _, sync := range []bool{false, true} {
		t.Run(fmt.Sprintf("sync=%v", sync), func(t *testing.T) {
			dir := t.TempDir()
			mpitest.Run(t, mpitest.InProc, testRanks, func(c *mpi.Comm) error {
				p, err := pcm.InitWith(c, pcm.Options{JobID: "fail", Dir: dir, Every: 2, Node: "nodeA", Log: io.Discard, SyncCheckpoints: sync})
				if err != nil {
					return err
				}
				s := newSolver(c)
				extra := map[string]any{"ok": 1}
				if err := s.register(p); err != nil {
					return err
				}
				if err := p.Register("extra", &extra); err != nil {
					return err
				}
				if err := p.Load(); err != nil {
					return err
				}
				var failed []*pcm.CheckpointError
				reportedAt := 0
				check := func(err error) error {
					var ce *pcm.CheckpointError
					if errors.As(err, &ce) && errors.Is(err, pcm.ErrCheckpointFailed) {
						failed = append(failed, ce)
						reportedAt = s.iter
						return nil
					}
					return err
				}
				for s.iter < 8 {
					if err := s.step(); err != nil {
						return err
					}
					s.iter++
					if c.Rank() == 1 {
						if s.iter == 4 {
							extra["bad"] = func() {} // cannot be encoded: rank 1's piece fails
						} else {
							delete(extra, "bad")
						}
					}
					if _, err := p.Reconfigure(s.iter); check(err) != nil {
						return err
					}
				}
				if err := check(p.Close()); err != nil {
					return err
				}
				if len(failed) != 1 {
					return fmt.Errorf("got %d checkpoint errors %v, want 1", len(failed), failed)
				}
				ce := failed[0]
				if ce.Seq != 2 || ce.Iteration != 4 || ce.CommitFailed || len(ce.Failures) != 1 || ce.Failures[0].Rank != 1 ||
					!strings.Contains(ce.Failures[0].Reason, "unsupported func") || (ce.Err != nil) != (c.Rank() == 1) {
					return fmt.Errorf("checkpoint error %+v", ce)
				}
				if reportedAt < 4 || reportedAt > 6 || sync && reportedAt != 4 {
					return fmt.Errorf("the failure of the checkpoint of iteration 4 was reported at iteration %d", reportedAt)
				}
				return nil
			})
			ms, err := openStore(t, dir).Checkpoints("fail")
			if err != nil || len(ms) != 2 || ms[0].Seq != 4 || ms[0].Iteration != 8 || ms[1].Seq != 3 || ms[1].Iteration != 6 {
				t.Fatalf("got %v %+v, want checkpoints 4 (iteration 8) and 3 (6), none for iteration 4", err, ms)
			}
			if _, err := os.Stat(filepath.Join(dir, "fail", fmt.Sprintf("%020d", 2))); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("abandoned checkpoint 2 not pruned: %v", err)
			}
		})
	}
}

func TestReconfigurePending(t *testing.T) {
	for _, c := range []struct {
		name  string
		opts  pcm.Options
		agree bool // Reconfigure(1) is an agreement point: every rank reports the error
	}{
		{"agreement", pcm.Options{Every: 1}, true},
		{"noCommunication", pcm.Options{}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.opts.Dir, c.opts.JobID, c.opts.Log = t.TempDir(), "pend", io.Discard
			mpitest.Run(t, mpitest.InProc, 2, func(cm *mpi.Comm) error {
				p, err := pcm.InitWith(cm, c.opts)
				if err != nil {
					return err
				}
				x := []float64{0}
				if err := p.Register("x", &x); err != nil {
					return err
				}
				if err := p.Load(); err != nil {
					return err
				}
				var req *mpi.Request
				if cm.Rank() == 0 {
					if req, err = mpi.Irecv(cm, x, 1, 7); err != nil {
						return err
					}
				}
				_, err = p.Reconfigure(1)
				switch {
				case cm.Rank() == 0 && (!errors.Is(err, mpi.ErrPending) || !strings.Contains(err.Error(), "1 on this rank")):
					return fmt.Errorf("rank 0: got %v, want mpi.ErrPending", err)
				case cm.Rank() == 1 && c.agree && (!errors.Is(err, mpi.ErrPending) || !strings.Contains(err.Error(), "on rank 0")):
					return fmt.Errorf("rank 1: got %v, want mpi.ErrPending naming rank 0", err)
				case cm.Rank() == 1 && !c.agree && err != nil:
					return fmt.Errorf("rank 1: %v", err)
				}
				// Rank 1 sends only once rank 0 has seen the receive pending.
				if err := cm.Barrier(); err != nil {
					return err
				}
				if cm.Rank() == 1 {
					if err := mpi.Send(cm, []float64{42}, 0, 7); err != nil {
						return err
					}
				} else if _, err := req.Wait(); err != nil {
					return err
				}
				if _, err = p.Reconfigure(2); err != nil {
					return err
				}
				return p.Close() // commits the checkpoint of iteration 2
			})
		})
	}
}

func TestIterationChecks(t *testing.T) {
	mpitest.Run(t, mpitest.InProc, 2, func(c *mpi.Comm) error {
		p, err := pcm.InitWith(c, pcm.Options{JobID: "it", Dir: t.TempDir(), OnDemand: true, PollEvery: 1, Log: io.Discard})
		if err != nil {
			return err
		}
		if _, err := p.Reconfigure(1); !errors.Is(err, pcm.ErrCallOrder) {
			return fmt.Errorf("Reconfigure before Load: %v", err)
		}
		if err := p.Load(); err != nil {
			return err
		}
		if err := p.Load(); !errors.Is(err, pcm.ErrCallOrder) {
			return fmt.Errorf("Load twice: %v", err)
		}
		var x int
		if err := p.Register("x", &x); !errors.Is(err, pcm.ErrCallOrder) {
			return fmt.Errorf("Register after Load: %v", err)
		}
		// Ranks at different iterations are caught at the agreement.
		if _, err := p.Reconfigure(1 + c.Rank()); !errors.Is(err, pcm.ErrIteration) || !strings.Contains(err.Error(), "iterations 1 to 2") {
			return fmt.Errorf("different iterations: %v", err)
		}
		// Not increasing (local check, no communication).
		if _, err := p.Reconfigure(1); !errors.Is(err, pcm.ErrIteration) || !strings.Contains(err.Error(), "must increase") {
			return fmt.Errorf("repeated iteration: %v", err)
		}
		return nil
	})
}

func TestInitStoreFailure(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	mpitest.Run(t, mpitest.InProc, 3, func(c *mpi.Comm) error {
		d := dir
		if c.Rank() == 1 {
			d = filepath.Join(file, "sub") // cannot be created
		}
		_, err := pcm.InitWith(c, pcm.Options{JobID: "x", Dir: d, Every: 1, Log: io.Discard})
		switch {
		case c.Rank() == 1 && (err == nil || errors.Is(err, pcm.ErrPeer)):
			return fmt.Errorf("rank 1: %v", err)
		case c.Rank() != 1 && (!errors.Is(err, pcm.ErrPeer) || !strings.Contains(err.Error(), "rank(s) [1]")):
			return fmt.Errorf("got %v, want ErrPeer naming rank 1", err)
		}
		return nil
	})
}

func TestOptionsFromEnv(t *testing.T) {
	env := func(kv ...string) func(string) string {
		m := map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return func(k string) string { return m[k] }
	}
	o, err := pcm.OptionsFromEnv(env("MPIOS_JOB_ID", "j1", "MPIOS_CKPT_EVERY", "10", "MPIOS_CKPT_DIR", "/tmp/ck",
		"MPIOS_RESTART", "j0", "MPIOS_CKPT_KEEP", "3", "MPIOS_CKPT_POLL", "7", "MPIOS_CKPT_SYNC", "1"))
	if err != nil {
		t.Fatal(err)
	}
	if o.JobID != "j1" || o.Every != 10 || !o.OnDemand || o.Dir != "/tmp/ck" || o.Restart != "j0" || o.Keep != 3 || o.PollEvery != 7 || !o.SyncCheckpoints {
		t.Fatalf("got %+v", o)
	}
	o, err = pcm.OptionsFromEnv(env("MPIOS_CKPT_EVERY", "0"))
	if err != nil || o.Every != 0 || !o.OnDemand || o.Keep != 2 || o.JobID == "" || !strings.HasSuffix(o.Dir, filepath.Join("mpios", "ckpt")) {
		t.Fatalf("on demand: %v %+v", err, o)
	}
	o, err = pcm.OptionsFromEnv(env())
	if err != nil || o.Every != 0 || o.OnDemand || o.Restart != "" || o.Dir != "" || o.SyncCheckpoints {
		t.Fatalf("defaults: %v %+v", err, o)
	}
	for _, bad := range [][]string{
		{"MPIOS_CKPT_EVERY", "-1"}, {"MPIOS_CKPT_EVERY", "ten"}, {"MPIOS_CKPT_KEEP", "0"},
		{"MPIOS_CKPT_POLL", "-3"}, {"MPIOS_CKPT_POLL", "99999999"}, {"MPIOS_CKPT_SYNC", "yes please"}, {"MPIOS_RESTART", "a/b"}, {"MPIOS_JOB_ID", "x y"},
	} {
		_, err := pcm.OptionsFromEnv(env(bad...))
		if !errors.Is(err, pcm.ErrConfig) || (bad[0] != "MPIOS_JOB_ID" && !strings.Contains(err.Error(), bad[0])) {
			t.Errorf("%s=%s: got %v, want ErrConfig naming the variable", bad[0], bad[1], err)
		}
	}
	if _, err := pcm.InitWith(nil, pcm.Options{}); !errors.Is(err, pcm.ErrConfig) {
		t.Errorf("nil world: %v", err)
	}
}

// newestCommitted returns the iteration of job's newest committed checkpoint in dir, or -1.
func newestCommitted(dir, job string) (int64, error) {
	s, err := ckptstore.Open(dir, &ckptstore.Options{Node: "nodeA"})
	if err != nil {
		return 0, err
	}
	ms, err := s.Checkpoints(job)
	if err != nil || len(ms) == 0 {
		return -1, err
	}
	return ms[0].Iteration, nil
}

// By default the application does not wait for the disk: right after the boundary where a
// checkpoint is taken, it is not committed yet; it is by the next checkpoint (which
// settles it first), and the last one by Close. With SyncCheckpoints it is committed when
// Reconfigure returns.
func TestCheckpointCommittedAfterBoundary(t *testing.T) {
	for _, sync := range []bool{false, true} {
		t.Run(fmt.Sprintf("sync=%v", sync), func(t *testing.T) {
			dir := t.TempDir()
			mpitest.Run(t, mpitest.InProc, testRanks, func(c *mpi.Comm) error {
				_, _, err := run(c, runOpts{iters: 14,
					opts: pcm.Options{JobID: "bg", Dir: dir, Every: 4, Node: "nodeA", Log: io.Discard, SyncCheckpoints: sync},
					hook: func(s *solver, _ *pcm.Process) error {
						if s.iter%4 != 0 {
							return nil
						}
						got, err := newestCommitted(dir, "bg")
						want := int64(s.iter - 4) // the previous one
						if want == 0 {
							want = -1 // none yet
						}
						if sync {
							want = int64(s.iter)
						}
						if err != nil || got != want {
							return fmt.Errorf("after Reconfigure(%d): newest committed checkpoint is of iteration %d (%v), want %d", s.iter, got, err, want)
						}
						return nil
					}})
				return err
			})
			if got, err := newestCommitted(dir, "bg"); err != nil || got != 12 {
				t.Fatalf("after Close: newest committed checkpoint is of iteration %d (%v), want 12", got, err)
			}
		})
	}
}

// A job killed while a checkpoint is in flight (here: that gives it up with Abandon) restarts
// from the one before: a checkpoint whose pieces were not all durable and exchanged is never
// committed.
func TestKilledWithCheckpointInFlight(t *testing.T) {
	want := undisturbed(t, testRanks)
	dir := t.TempDir()
	mpitest.Run(t, mpitest.InProc, testRanks, func(c *mpi.Comm) error {
		_, _, err := run(c, runOpts{iters: testIters, stop: 20, kill: true,
			opts: pcm.Options{JobID: "first", Dir: dir, Every: 5, Node: "nodeA", Log: io.Discard}})
		return err
	})
	// The "killed" ranks' writers still run in this test process: let them finish, so that
	// they do not write into the directory while it is removed.
	for rank := range testRanks {
		path := filepath.Join(dir, "first", fmt.Sprintf("%020d", 4), fmt.Sprintf("rank-%d.piece", rank))
		for i := 0; ; i++ {
			if _, err := os.Stat(path); err == nil {
				break
			} else if i == 1000 {
				t.Fatalf("the piece of checkpoint 4 (iteration 20) never appeared: %v", err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	mpitest.Run(t, mpitest.InProc, testRanks, func(c *mpi.Comm) error {
		got, p, err := run(c, runOpts{iters: testIters,
			opts: pcm.Options{JobID: "second", Restart: "first", Dir: dir, Node: "nodeA", Log: io.Discard}})
		if err != nil {
			return err
		}
		if m, _ := p.Restored(); m.Iteration != 15 {
			return fmt.Errorf("restored iteration %d, want 15", m.Iteration)
		}
		equalResults(t, c.Rank(), got, want[c.Rank()])
		return nil
	})
}

// TestMemoryStoreDropsItsSpareFilesAtClose: a store in memory keeps the piece files of the
// checkpoints it prunes for the next ones to reuse (ckptstore's spare files); at the job's
// end, Close drops them, and the kept checkpoints are intact.
func TestMemoryStoreDropsItsSpareFilesAtClose(t *testing.T) {
	dir, err := os.MkdirTemp("/dev/shm", "pcm-test-spares-")
	if err != nil {
		t.Skipf("no /dev/shm: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	// Checkpoints at 2, 4, ..., 14: the last one's commit, at Close, prunes one more, whose
	// pieces become spare files that nothing reuses.
	mpitest.Run(t, mpitest.InProc, testRanks, func(c *mpi.Comm) error {
		_, _, err := run(c, runOpts{iters: 14, opts: pcm.Options{JobID: "spares", Dir: dir, Every: 2, Node: "nodeA", Log: io.Discard}})
		return err
	})
	ents, err := os.ReadDir(filepath.Join(dir, "spares"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".") {
			t.Errorf("%s left in the job's directory after Close", e.Name())
		}
	}
	store := openStore(t, dir)
	m, skipped, err := store.LatestValid("spares")
	if err != nil || len(skipped) != 0 || m.Iteration != 14 {
		t.Fatalf("newest valid checkpoint: iteration %d, skipped %v, %v", m.Iteration, skipped, err)
	}
	for r := range testRanks {
		if _, err := store.VerifyPiece("spares", m.Seq, r); err != nil {
			t.Fatal(err)
		}
	}
}
