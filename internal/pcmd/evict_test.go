package pcmd

import (
	"bytes"
	"io/fs"
	"log"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mpios/mpios/internal/job"
	"github.com/mpios/mpios/internal/testbin"
	"github.com/mpios/mpios/pcm/ckptstore"
)

func evictedJobs(plan []ckptstore.JobUsage) []string {
	var out []string
	for _, j := range plan {
		out = append(out, j.Job)
	}
	return out
}

const mib = 1 << 20

// commitMiB commits a checkpoint of job to st with a piece of 1 MiB, and dates the job's
// last change at changed.
func commitMiB(t *testing.T, st *ckptstore.Store, jobID string, changed time.Time) {
	t.Helper()
	info, err := st.PutPiece(jobID, 1, 0, bytes.NewReader(make([]byte, mib)))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.CommitManifest(ckptstore.Manifest{Job: jobID, Seq: 1, Size: 1, Pieces: []ckptstore.PieceInfo{info}}); err != nil {
		t.Fatal(err)
	}
	ageJob(t, st, jobID, changed)
}

// ageJob dates every directory of job in st at changed, as if nothing of it changed since.
func ageJob(t *testing.T, st *ckptstore.Store, jobID string, changed time.Time) {
	t.Helper()
	err := filepath.WalkDir(filepath.Join(st.Dir(), jobID), func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		return os.Chtimes(path, changed, changed)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// Below three quarters of the cap nothing is removed; above it, finished jobs go, those
// that changed longest ago first, until half the cap is used.
func TestAFullMemoryStoreRemovesTheJobsThatChangedLongestAgoDownToHalfItsCap(t *testing.T) {
	now := time.Date(2026, 11, 28, 6, 0, 0, 0, time.UTC)
	ago := func(d time.Duration) time.Time { return now.Add(-d) }
	jobs := []ckptstore.JobUsage{
		{Job: "new", Bytes: 20, LastChange: ago(2 * time.Minute)},
		{Job: "oldest", Bytes: 20, LastChange: ago(time.Hour)},
		{Job: "older", Bytes: 20, LastChange: ago(30 * time.Minute)},
		{Job: "old", Bytes: 20, LastChange: ago(10 * time.Minute)},
	}
	none := func(string) bool { return false }
	if plan := planEviction(jobs, 75, 100, 0, now, none); plan != nil {
		t.Errorf("75 of 100 used: removes %v, want nothing", evictedJobs(plan))
	}
	if got, want := evictedJobs(planEviction(jobs, 80, 100, 0, now, none)), []string{"oldest", "older"}; !slices.Equal(got, want) {
		t.Errorf("80 of 100 used: removes %v, want %v (down to 50)", got, want)
	}
	// A write that asks for room counts as used.
	if got, want := evictedJobs(planEviction(jobs, 60, 100, 20, now, none)), []string{"oldest", "older"}; !slices.Equal(got, want) {
		t.Errorf("60 used, 20 asked for: removes %v, want %v", got, want)
	}
	if plan := planEviction(jobs, 80, 0, 0, now, none); plan != nil {
		t.Errorf("no cap: removes %v", evictedJobs(plan))
	}
}

// A job with a rank on the node, or one that changed within evictIdle, is never removed,
// even if the store stays over the mark.
func TestAMemoryStoreNeverRemovesAJobThatRunsHereOrChangedRecently(t *testing.T) {
	now := time.Date(2026, 11, 28, 6, 0, 0, 0, time.UTC)
	jobs := []ckptstore.JobUsage{
		{Job: "running", Bytes: 40, LastChange: now.Add(-time.Hour)},
		{Job: "recent", Bytes: 40, LastChange: now.Add(-evictIdle + time.Second)},
		{Job: "finished", Bytes: 15, LastChange: now.Add(-evictIdle)},
	}
	plan := planEviction(jobs, 95, 100, 0, now, func(j string) bool { return j == "running" })
	if got, want := evictedJobs(plan), []string{"finished"}; !slices.Equal(got, want) {
		t.Errorf("removes %v, want %v", got, want)
	}
}

// The evictor acts on a real store: over the mark it removes finished jobs, those that
// changed longest ago first, and says so; a job with a rank here stays; with nothing left to
// remove it says so once per shortage and waits evictRetry before it lists the store again,
// unless a write asks for room.
func TestTheEvictorRemovesFinishedJobsFromAFullMemoryStoreAndSaysSo(t *testing.T) {
	dir := t.TempDir()
	st, err := ckptstore.Open(dir, &ckptstore.Options{Node: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	write := func(jobID string, changed time.Time) { t.Helper(); commitMiB(t, st, jobID, changed) }
	now := time.Date(2026, 11, 28, 6, 0, 0, 0, time.UTC)
	write("oldest", now.Add(-3*time.Hour))
	write("older", now.Add(-2*time.Hour))
	write("running", now.Add(-4*time.Hour))
	var logged testbin.Buffer
	e := &memEvictor{store: st, capacity: 4 * mib, log: log.New(&logged, "", 0), now: func() time.Time { return now },
		ranks: func() []job.RankInfo { return []job.RankInfo{{Job: "running", Rank: 0}} }}

	// 3 MiB and their manifests of 4: over three quarters; down to half means two go, but the
	// running job stays.
	if !e.makeRoom(0) {
		t.Fatalf("nothing removed; log:\n%s", logged.String())
	}
	left, err := st.Jobs()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, j := range left {
		names = append(names, j.Job)
	}
	if !slices.Equal(names, []string{"running"}) {
		t.Errorf("jobs left: %v, want only the running one", names)
	}
	for _, want := range []string{"removed the checkpoints of job oldest", "removed the checkpoints of job older"} {
		if !strings.Contains(logged.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, logged.String())
		}
	}

	// Over the mark again with only the running job: said once, then quiet until evictRetry.
	write("recent", now.Add(-time.Second))
	write("recent2", now.Add(-time.Second))
	before := strings.Count(logged.String(), "nothing to remove")
	if e.makeRoom(0) || e.makeRoom(0) {
		t.Error("removed a job that runs here or changed within evictIdle")
	}
	if n := strings.Count(logged.String(), "nothing to remove") - before; n != 1 {
		t.Errorf("said %d times that nothing could be removed, want once:\n%s", n, logged.String())
	}
	// The recent jobs are idle now (their times set back), but a routine check within
	// evictRetry does not list the store again; a write asking for room does.
	for _, j := range []string{"recent", "recent2"} {
		ageJob(t, st, j, now.Add(-time.Hour))
	}
	now = now.Add(evictRetry / 2)
	if e.makeRoom(0) {
		t.Error("a routine check listed the store again before evictRetry")
	}
	if !e.makeRoom(mib) {
		t.Errorf("a write asking for room removed nothing; log:\n%s", logged.String())
	}

	// Stuck again after a spell with room: said again.
	write("recent3", now)
	write("recent4", now)
	write("recent5", now)
	before = strings.Count(logged.String(), "nothing to remove")
	e.makeRoom(0)
	for _, j := range []string{"recent3", "recent4", "recent5"} {
		if err := st.RemoveJob(j); err != nil {
			t.Fatal(err)
		}
	}
	e.makeRoom(0) // room: the shortage is over
	write("recent6", now)
	write("recent7", now)
	write("recent8", now)
	e.makeRoom(0)
	if n := strings.Count(logged.String(), "nothing to remove") - before; n != 2 {
		t.Errorf("two shortages with room between said %d times that nothing could be removed, want twice:\n%s", n, logged.String())
	}
}

// A node whose memory store is past three quarters of its cap removes, at its heartbeat,
// the checkpoints of the jobs that have no rank on it and changed nothing for evictIdle.
func TestANodeMakesRoomInItsMemoryStoreAtItsHeartbeat(t *testing.T) {
	t.Parallel()
	url := testbin.NATSServer(t, "", "")
	nc := testbin.Connect(t, url)
	n := startNode(t, nc, Config{Node: "evict1", InsecureOpen: true, NATS: NATSOptions{URL: url}, CkptStore: StoreMem, CkptMemCap: 4 * mib})
	m := regexp.MustCompile(`checkpoints in memory \(([^,]+), cap 4 MiB\)`).FindStringSubmatch(n.log.String())
	if m == nil {
		t.Fatalf("no memory store in the node's log:\n%s", n.log.String())
	}
	st, err := ckptstore.Open(m[1], &ckptstore.Options{Node: "evict1"})
	if err != nil {
		t.Fatal(err)
	}
	long := time.Now().Add(-time.Hour)
	commitMiB(t, st, "oldest", long.Add(-time.Minute))
	commitMiB(t, st, "older", long)
	commitMiB(t, st, "newest", time.Now())
	deadline := time.Now().Add(5 * time.Second)
	for strings.Count(n.log.String(), "memory store: removed the checkpoints of job") < 2 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	jobs, err := st.Jobs()
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 1 || jobs[0].Job != "newest" {
		t.Errorf("jobs left in the store: %v, want the newest only; log:\n%s", jobs, n.log.String())
	}
}

// An idle job's spare piece files (a memory store keeps one checkpoint's pieces of each job
// for its next write, outside the usage count) are deleted by the routine check; a job with
// a rank here keeps them; deleting them does not make the job look recently changed.
func TestTheRoutineCheckDeletesTheSpareFilesOfIdleJobs(t *testing.T) {
	var sfs unix.Statfs_t
	if err := unix.Statfs(memRoot, &sfs); err != nil || int64(sfs.Type) != unix.TMPFS_MAGIC {
		t.Skip(memRoot, " is not a tmpfs: a store elsewhere keeps no spare files")
	}
	dir, err := os.MkdirTemp(memRoot, "mpios-evict-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	st, err := ckptstore.Open(dir, &ckptstore.Options{Node: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	spares := func(jobID string) int {
		ents, _ := os.ReadDir(filepath.Join(dir, jobID))
		n := 0
		for _, e := range ents {
			if strings.Contains(e.Name(), "spare") {
				n++
			}
		}
		return n
	}
	long := time.Now().Add(-time.Hour)
	for _, jobID := range []string{"done", "live"} {
		for seq := uint64(1); seq <= 3; seq++ {
			info, err := st.PutPiece(jobID, seq, 0, bytes.NewReader(bytes.Repeat([]byte{1}, 64<<10)))
			if err != nil {
				t.Fatal(err)
			}
			if err := st.CommitManifest(ckptstore.Manifest{Job: jobID, Seq: seq, Size: 1, Pieces: []ckptstore.PieceInfo{info}}); err != nil {
				t.Fatal(err)
			}
		}
		if err := st.Prune(jobID, 2); err != nil {
			t.Fatal(err)
		}
		if spares(jobID) != 1 {
			t.Fatalf("job %s: %d spare files after a prune, want 1", jobID, spares(jobID))
		}
		ageJob(t, st, jobID, long)
	}
	e := &memEvictor{store: st, capacity: 1 << 40, log: log.New(&testbin.Buffer{}, "", 0), now: time.Now,
		ranks: func() []job.RankInfo { return []job.RankInfo{{Job: "live"}} }}
	e.check()
	e.wait()
	if n := spares("done"); n != 0 {
		t.Errorf("the idle job keeps %d spare files", n)
	}
	if n := spares("live"); n != 1 {
		t.Errorf("the job with a rank here has %d spare files, want its 1", n)
	}
	jobs, err := st.Jobs()
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs {
		if j.Job == "done" && time.Since(j.LastChange) < evictIdle {
			t.Errorf("deleting its spare files made job done look changed %v ago", time.Since(j.LastChange))
		}
	}
}
