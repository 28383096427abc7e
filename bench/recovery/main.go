// Command recovery measures how long mpirun takes to recover a job by itself (issue 16):
// from kill -9 of a rank to every rank computing again, per phase, for several state sizes,
// and prints a markdown table for docs/PERFORMANCE.md.
//
//	go run ./bench/recovery                       # sizes 16,64,256 MiB per rank, 3 repetitions
//	go run ./bench/recovery --sizes 16 --reps 1   # smoke run
//
// Each trial runs bench/migration/stateapp on 2 local ranks (mpirun -np 2 --ckpt-every K
// --ckpt-dir DIR), each holding S MiB of registered state, waits until a checkpoint is
// committed, kills rank 1 with SIGKILL and waits for mpirun's "recovered" line, whose phases
// are mpirun's own measurements:
//
//	detection  the first failed exit observed -> the decision to recover (the failure window
//	           gathering the peers' exits)
//	respawn    the decision -> every rank started again (the old ones killed first)
//	load       every rank started -> rank 0 reports every rank restored (the rendezvous,
//	           pcm's agreement on the checkpoint and reading S MiB per rank from the store)
//
// "total" is measured here, from the kill to the "recovered" line (it includes the time the
// kernel takes to report the death). The store is on disk (--store-dir, default a temporary
// directory), read back warm from the page cache as a recovery right after a checkpoint does.
// The machine is shared: compare runs of one session only.
package main

import (
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/mpios/mpios/internal/testbin"
	"github.com/mpios/mpios/pcm/ckptstore"
)

// recovered is mpirun's line when the ranks compute again.
var recovered = regexp.MustCompile(`recovered from the failure of rank 1: .* in (\S+) \(detection (\S+), respawn (\S+), load (\S+)\)`)

type trial struct{ total, detection, respawn, load time.Duration }

func main() {
	log.SetFlags(log.Ltime)
	log.SetPrefix("recovery: ")
	sizes := flag.String("sizes", "16,64,256", "state per rank, MiB, comma-separated")
	reps := flag.Int("reps", 3, "trials per size")
	storeDir := flag.String("store-dir", "", "checkpoint store root (default: a temporary directory)")
	flag.Parse()
	dir, err := os.MkdirTemp("", "recbench-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		log.Fatal(err)
	}
	if err := testbin.BuildE(bin, "./cmd/mpirun", "./bench/migration/stateapp"); err != nil {
		log.Fatal(err)
	}
	if *storeDir == "" {
		*storeDir = filepath.Join(dir, "store")
	}
	fmt.Println("| state per rank | detection | respawn | load | total (kill → computing) |")
	fmt.Println("|---:|---:|---:|---:|---:|")
	for _, f := range strings.Split(*sizes, ",") {
		mib, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || mib < 1 {
			log.Fatalf("--sizes: %q", f)
		}
		var ts []trial
		for rep := range *reps {
			t, err := run(bin, dir, *storeDir, mib, rep)
			if err != nil {
				log.Fatalf("%d MiB, trial %d: %v", mib, rep, err)
			}
			log.Printf("%d MiB trial %d: total %v (detection %v, respawn %v, load %v)", mib, rep, t.total, t.detection, t.respawn, t.load)
			ts = append(ts, t)
		}
		med := func(get func(trial) time.Duration) string {
			v := make([]time.Duration, len(ts))
			for i, t := range ts {
				v[i] = get(t)
			}
			slices.Sort(v)
			return v[len(v)/2].Round(time.Millisecond).String()
		}
		fmt.Printf("| %d MiB | %s | %s | %s | %s |\n", mib, med(func(t trial) time.Duration { return t.detection }),
			med(func(t trial) time.Duration { return t.respawn }), med(func(t trial) time.Duration { return t.load }),
			med(func(t trial) time.Duration { return t.total }))
	}
	fmt.Printf("\n(medians of %d trials; load average at the end %s)\n", *reps, testbin.LoadAvg())
}

// run is one trial.
func run(bin, dir, store string, mib, rep int) (trial, error) {
	id := fmt.Sprintf("rec%d-%d", mib, rep)
	stop := filepath.Join(dir, id+".stop")
	cmd := exec.Command(filepath.Join(bin, "mpirun"), "-np", "2", "--job-id", id, "--ckpt-every", "20", "--ckpt-dir", store,
		filepath.Join(bin, "stateapp"), "-mib", strconv.Itoa(mib), "-iters", "1000000", "-pace", "20ms", "-stop-file", stop, "-verify=false")
	var stderr testbin.Buffer
	cmd.Env = testbin.IsolatedEnv(filepath.Join(dir, "run"))
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return trial{}, err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer func() {
		os.WriteFile(stop, nil, 0o600)
		select {
		case <-done:
		case <-time.After(time.Minute):
			cmd.Process.Kill()
			<-done
		}
		os.RemoveAll(filepath.Join(store, id))
	}()
	wait := func(what string, cond func() bool) error {
		for deadline := time.Now().Add(3 * time.Minute); !cond(); time.Sleep(5 * time.Millisecond) {
			select {
			case err := <-done:
				done <- err
				return fmt.Errorf("mpirun ended (%v) before %s:\n%s", err, what, stderr.String())
			default:
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("no %s within 3m:\n%s", what, stderr.String())
			}
		}
		return nil
	}
	s, err := ckptstore.Open(store, nil)
	if err != nil {
		return trial{}, err
	}
	// A checkpoint's manifest is on disk a little before the ranks agree it is committed
	// and report it; once the second one is on disk, the first is surely reported (at most
	// one checkpoint is in flight).
	if err := wait("two committed checkpoints", func() bool { ms, _ := s.Checkpoints(id); return len(ms) > 1 }); err != nil {
		return trial{}, err
	}
	pid, ok := testbin.RankPID(id, 1)
	if !ok {
		return trial{}, fmt.Errorf("rank 1 not found")
	}
	killed := time.Now()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return trial{}, err
	}
	var m []string
	if err := wait(`"recovered" line`, func() bool { m = recovered.FindStringSubmatch(stderr.String()); return m != nil }); err != nil {
		return trial{}, err
	}
	t := trial{total: time.Since(killed)}
	for i, d := range []*time.Duration{&t.detection, &t.respawn, &t.load} {
		if *d, err = time.ParseDuration(m[i+2]); err != nil {
			return trial{}, fmt.Errorf("parse %q: %v", m[0], err)
		}
	}
	return t, nil
}
