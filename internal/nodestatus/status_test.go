package nodestatus

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mpios/mpios/internal/ctlauth"
	"github.com/mpios/mpios/internal/job"
	"github.com/mpios/mpios/internal/jobrecord"
	"github.com/mpios/mpios/internal/testbin"
)

func TestCollectGone(t *testing.T) {
	t.Parallel()
	beat := time.Second
	n2 := job.NodeInfo{Name: "n2", Slots: 2, Used: 1, Interval: beat, Ranks: []job.RankInfo{{Job: "j", Rank: 1, PID: 9}}}
	views := []job.NodeView{
		{Self: job.NodeInfo{Name: "n1", Slots: 2, Interval: beat}, Peers: []job.PeerInfo{{Info: n2, Age: 10 * time.Second}}},
		{Self: job.NodeInfo{Name: "n3", Slots: 2, Interval: beat}, Peers: []job.PeerInfo{{Info: n2, Age: 4 * time.Second}}},
	}
	st := Collect(views)
	if len(st.Nodes) != 3 || st.Nodes[1].Name != "n2" || st.Nodes[1].State != StateGone || st.Nodes[1].LastBeat != 4 {
		t.Errorf("nodes %+v, want n2 gone since 4s", st.Nodes)
	}
	if len(st.Ranks) != 0 {
		t.Errorf("ranks of a gone node are listed: %+v", st.Ranks)
	}
	views[1].Peers[0].Age = 2 * time.Second // within 3 beats: alive
	if st := Collect(views); st.Nodes[1].State != StateAlive || len(st.Ranks) != 1 || st.Ranks[0].Node != "n2" {
		t.Errorf("n2 heard 2s ago: %+v", st)
	}
}

func TestNewestRecord(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	now := time.Now()
	write := func(id string, pid int, started time.Time) {
		b, _ := json.Marshal(jobrecord.Record{JobID: id, NATSURL: "nats://" + id, PID: pid, Started: started})
		if err := os.WriteFile(jobrecord.RecordPath(dir, id), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("old", os.Getpid(), now.Add(-time.Hour))
	write("new", os.Getpid(), now)
	write("dead", 1<<22+12345, now.Add(time.Hour)) // newest, but its mpirun is gone
	if err := os.WriteFile(filepath.Join(dir, "broken.json"), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	rec, path, err := NewestRecord(dir)
	if err != nil || rec.JobID != "new" || path != jobrecord.RecordPath(dir, "new") {
		t.Errorf("NewestRecord = %+v, %q, %v; want job new", rec, path, err)
	}
	if _, _, err := NewestRecord(t.TempDir()); !errors.Is(err, ErrNoRecord) {
		t.Errorf("empty dir: %v, want ErrNoRecord", err)
	}
}

func TestControl(t *testing.T) {
	t.Parallel()
	url := testbin.NATSServer(t, "", "")
	nc := testbin.Connect(t, url)
	req := job.ControlRequest{Kind: job.ControlMigrate, Rank: 1, To: "n2"}
	key, err := ctlauth.DeriveJobKey("j", []byte("0123456789abcdef"))
	if err != nil {
		t.Fatal(err)
	}
	owner, err := ctlauth.NewJobWrapper(key, ctlauth.Sender{Role: ctlauth.RoleTool}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Control(nc, "j", req, owner, OwnerReplies(key), time.Second); !errors.Is(err, ErrNoController) || !strings.Contains(err.Error(), "mpios.job.j.ctl") {
		t.Errorf("no responder: %v", err)
	}
	if _, err := Control(nc, "j", job.ControlRequest{Kind: "explode"}, owner, OwnerReplies(key), time.Second); err == nil {
		t.Error("an invalid kind was sent")
	}
	// Stand in for mpirun, which answers under the job key; an outsider answers first, in
	// clear, and is skipped.
	var got job.ControlRequest
	verifier, err := ctlauth.NewJobVerifier(key, ctlauth.ReplayOptions{})
	if err != nil {
		t.Fatal(err)
	}
	launcher, err := ctlauth.NewJobWrapper(key, ctlauth.Sender{Role: ctlauth.RoleLauncher}, 0)
	if err != nil {
		t.Fatal(err)
	}
	outsider := testbin.Connect(t, url)
	if _, err := outsider.Subscribe(job.ControlSubject("j"), func(m *nats.Msg) {
		b, _ := job.Encode(job.ControlReply{OK: false, Error: "forged refusal"})
		_ = m.Respond(b)
	}); err != nil {
		t.Fatal(err)
	}
	outsider.Flush()
	if _, err := nc.Subscribe(job.ControlSubject("j"), func(m *nats.Msg) {
		if msg, err := verifier.Verify(m.Subject, m.Data, time.Now()); err == nil && msg.From.Role == ctlauth.RoleTool {
			_ = job.Decode(msg.Body, &got)
		}
		time.Sleep(50 * time.Millisecond)
		body, _ := job.Encode(job.ControlReply{OK: true, Message: "migrating at iteration 12"})
		b, _ := launcher.Wrap(m.Reply, body, time.Now())
		_ = m.Respond(b)
	}); err != nil {
		t.Fatal(err)
	}
	rep, err := Control(nc, "j", req, owner, OwnerReplies(key), 2*time.Second)
	if err != nil || !rep.OK || rep.Message != "migrating at iteration 12" || !reflect.DeepEqual(got, req) {
		t.Errorf("Control = %+v, %v; request seen %+v", rep, err, got)
	}
	// A node without the job's key reads the answer unverified: the first one.
	if rep, err := Control(nc, "j", req, owner, JobReplies(nil, "j"), 2*time.Second); err != nil || rep.Error != "forged refusal" {
		t.Errorf("Control read unverified = %+v, %v; want the first answer", rep, err)
	}
}

func ExampleCollect() {
	beat := time.Second
	n2 := job.NodeInfo{Name: "n2", Slots: 4, Used: 1, Interval: beat, Ranks: []job.RankInfo{{Job: "j", Rank: 0, PID: 4242}}}
	views := []job.NodeView{
		// n1 answered itself, and last heard n2 five seconds ago: n2 missed 3 beats.
		{Self: job.NodeInfo{Name: "n1", Slots: 2, Interval: beat}, Peers: []job.PeerInfo{{Info: n2, Age: 5 * time.Second}}},
	}
	st := Collect(views)
	for _, n := range st.Nodes {
		fmt.Printf("%s %s %d/%d\n", n.Name, n.State, n.Used, n.Slots)
	}
	fmt.Println(len(st.Ranks), "ranks on alive nodes")
	// Output:
	// n1 alive 0/2
	// n2 gone 1/4
	// 0 ranks on alive nodes
}
