package agentdriver

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mpios/mpios/internal/ctlauth"
	"github.com/mpios/mpios/internal/job"
	"github.com/mpios/mpios/internal/testbin"
	"github.com/mpios/mpios/iosbridge"
)

// The agents time their heartbeats' echoes over NATS, so NRS sees real latencies: an idle
// NRS node steals from a loaded one once it has measured it (here a local peer: the NATS
// server is on this machine), and both report the round trip in their state.
func TestAgentNRSStealsAfterTimingItsPeer(t *testing.T) {
	t.Parallel()
	nc, ctl, table, _ := busyAndIdle(t, iosbridge.PolicyNRS, iosbridge.PolicyNRS, job.ControlReply{OK: true, Message: "moving"})
	publishProfiles(t, nc, "B", "", table)

	req := ctl.awaitRequest(t, func() string { return fmt.Sprintf("no migration request; A's state %+v", iosState(t, nc, "A")) })
	if req.To != "A" || !strings.HasPrefix(req.Reason, "ios nrs: ") {
		t.Fatalf("control request %+v", req)
	}
	// NRS classifies a peer by its round trip, so the stealer (A) timed B before stealing.
	if rtt, ok := iosState(t, nc, "A").PeerRTT["B"]; !ok || rtt <= 0 || rtt > 10*time.Second {
		t.Errorf("A stole before timing B: round trip %v (%v)", rtt, ok)
	}
	// The giver times the stealer on its own schedule, which a loaded machine may put after
	// the steal.
	var rtt time.Duration
	testbin.WaitFor(t, 10*time.Second, "B to time its round trip to A", func() bool {
		var ok bool
		rtt, ok = iosState(t, nc, "B").PeerRTT["A"]
		return ok
	})
	if rtt <= 0 || rtt > 10*time.Second {
		t.Errorf("B: round trip to A %v", rtt)
	}
}

// Robin-Hood over NATS: the overloaded node pushes a rank to the idle one, which never
// steals (robinhood alone only pushes).
func TestAgentRobinHoodPushesFromAnOverloadedNode(t *testing.T) {
	t.Parallel()
	nc, ctl, table, _ := busyAndIdle(t, iosbridge.PolicyRobinHood, iosbridge.PolicyRobinHood, job.ControlReply{OK: true, Message: "moving"})
	publishProfiles(t, nc, "B", "", table)

	req := ctl.awaitRequest(t, func() string { return fmt.Sprintf("no migration request; B's state %+v", iosState(t, nc, "B")) })
	if req.To != "A" || !strings.Contains(req.Reason, "robin-hood: overloaded") {
		t.Fatalf("control request %+v", req)
	}
	testbin.WaitFor(t, 5*time.Second, "B to count its push", func() bool {
		return iosState(t, nc, "B").Stats.RanksPushed > 0
	})
	if sa := iosState(t, nc, "A"); sa.Stats.StealsSent != 0 {
		t.Errorf("robinhood node A stole: %+v", sa.Stats)
	}
}

// CRS over NATS: the node's --cluster travels in its profile and its state.
func TestAgentReportsItsCluster(t *testing.T) {
	t.Parallel()
	url := testbin.NATSServer(t, "", "")
	nc := testbin.Connect(t, url)
	cfg := fastIOS(iosbridge.PolicyCRS)
	cfg.Cluster = "east"
	startAgentT(t, url, "A", cfg, 1, nil)
	if st := iosState(t, nc, "A"); st.Cluster != "east" || st.Policy != "crs" {
		t.Fatalf("state %+v", st)
	}
	cfg.Cluster = strings.Repeat("x", iosbridge.MaxClusterName+1)
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "--cluster") {
		t.Fatalf("long cluster name: %v", err)
	}
}

// Desell's hierarchical policy over NATS (§2.2.2): an idle node joins a job's node; both
// compute the same plan, the job's manager (B, the node its ranks run on: the one mpirun
// lets move them) finds the data split diverged from the nodes'
// processing power ("available and idle") and asks the job to move the ranks above the
// busy node's share to the idle one, in one request. The policy sheriff (equal nodes) moves
// nothing by itself.
func TestAgentHierarchicalManagerMovesRanksToAnIdleNode(t *testing.T) {
	t.Parallel()
	url := testbin.NATSServer(t, "", "")
	nc := testbin.Connect(t, url)
	ctl := newController(t, nc, "j", job.ControlReply{OK: true, Message: "moving"})
	table := loadedRanks("j", 4)
	cfg := fastIOS(iosbridge.PolicySheriff)
	cfg.Hierarchical = true
	startAgentT(t, url, "B", cfg, 0, table, "A")
	startAgentT(t, url, "A", cfg, 1, nil, "B")
	publishProfiles(t, nc, "B", "", table)

	req := ctl.awaitRequest(t, func() string { return fmt.Sprintf("no request; B's state %+v", iosState(t, nc, "B")) })
	if req.Kind != job.ControlMigrate || req.To != "A" || len(req.Ranks) != 2 || req.Ranks[0] != 2 || req.Ranks[1] != 3 ||
		!strings.HasPrefix(req.Reason, "ios hierarchical: manager B: ") || !strings.Contains(req.Reason, "available and idle") {
		t.Fatalf("control request %+v", req)
	}
	testbin.WaitFor(t, 5*time.Second, "B to record the accepted request", func() bool {
		return iosState(t, nc, "B").Stats.MigrationsOK > 0
	})
	// One request per cooldown (a minute): the job was not asked again meanwhile.
	if n := ctl.count(); n != 1 {
		t.Fatalf("%d requests", n)
	}
}

// The same join for a malleable job (its launcher's JobInfo says so, under the job's key):
// the manager grows the job onto the idle node by its free slots, in one resize request
// (§2.2.2: the decisions become resize requests), instead of moving ranks.
func TestAgentHierarchicalManagerGrowsAMalleableJobOntoAJoinedNode(t *testing.T) {
	t.Parallel()
	url := testbin.NATSServer(t, "", "")
	nc := testbin.Connect(t, url)
	ctl := newController(t, nc, "j", job.ControlReply{OK: true, Message: "growing"})
	secret := []byte("the secret of job j, 32 bytes..")
	launcher := jobJChannel(t, secret, ctlauth.RoleLauncher)
	ctl.answerUnder(launcher)
	if _, err := nc.Subscribe(job.JobInfoSubject("j"), func(m *nats.Msg) {
		data, _ := launcher.Encode(m.Reply, job.JobInfo{Job: "j", Size: 4, Malleable: true}, time.Now())
		_ = m.Respond(data)
	}); err != nil {
		t.Fatal(err)
	}
	startManagerOfJobJ(t, url, nc, secret)

	req := ctl.awaitRequest(t, func() string { return fmt.Sprintf("no request; B's state %+v", iosState(t, nc, "B")) })
	if req.Kind != job.ControlResize || req.NP != 6 || len(req.On) != 1 || req.On[0] != (job.NodeSlots{Node: "A", Slots: 2}) ||
		req.Weights != nil || !strings.HasPrefix(req.Reason, "ios hierarchical: manager B: ") || !strings.Contains(req.Reason, "grow 4 -> 6") {
		t.Fatalf("control request %+v", req)
	}
	testbin.WaitFor(t, 5*time.Second, "B to record the accepted resize", func() bool {
		for _, e := range iosState(t, nc, "B").Events {
			if e.Kind == job.IOSResizeOK && strings.Contains(e.Reason, "grow to 6 ranks on A:2") {
				return true
			}
		}
		return false
	})
	if n := ctl.count(); n != 1 {
		t.Fatalf("%d requests", n)
	}
}

// A forged JobInfo (Issue 14, item 7): another NATS client answers the manager's info
// request first, in clear or under a key that is not the job's, calling the job malleable.
// The manager verifies the answer with the key its node learnt from the job's spawns,
// ignores it and takes the job as rigid: it moves ranks to the joined node, as for any
// rigid job, and never asks the job to grow.
func TestAgentHierarchicalManagerIgnoresAForgedJobInfo(t *testing.T) {
	t.Parallel()
	url := testbin.NATSServer(t, "", "")
	nc := testbin.Connect(t, url)
	ctl := newController(t, nc, "j", job.ControlReply{OK: true, Message: "moving"})
	secret := []byte("the secret of job j, 32 bytes..")
	forger := jobJChannel(t, []byte("not the secret of job j at all.."), ctlauth.RoleLauncher)
	var asked atomic.Int32
	if _, err := nc.Subscribe(job.JobInfoSubject("j"), func(m *nats.Msg) {
		info := job.JobInfo{Job: "j", Size: 4, Malleable: true}
		data, _ := job.Encode(info) // in clear, as mpirun answered before
		if asked.Add(1)%2 == 0 {
			data, _ = forger.Encode(m.Reply, info, time.Now()) // under the wrong key
		}
		_ = m.Respond(data)
	}); err != nil {
		t.Fatal(err)
	}
	b := startManagerOfJobJ(t, url, nc, secret)

	req := ctl.awaitRequest(t, func() string { return fmt.Sprintf("no request; B's state %+v", iosState(t, nc, "B")) })
	if req.Kind != job.ControlMigrate || req.To != "A" {
		t.Fatalf("control request %+v: the forged info was believed", req)
	}
	if asked.Load() == 0 || !strings.Contains(b.log.String(), "ignoring job j's info (taken as rigid)") {
		t.Fatalf("%d info requests; B's log:\n%s", asked.Load(), b.log)
	}
}

// startManagerOfJobJ starts nodes B (the manager, running job j's four loaded ranks, no free
// slot) and A (idle, two free slots), both knowing job j's key, and publishes the ranks'
// profiles under that key. It returns B.
func startManagerOfJobJ(t *testing.T, url string, nc *nats.Conn, secret []byte) *testAgent {
	t.Helper()
	ranks := jobJChannel(t, secret, ctlauth.RoleRank)
	table := loadedRanks("j", 4)
	cfg := fastIOS(iosbridge.PolicySheriff)
	cfg.Hierarchical = true
	cfg.FreeSlots = func() map[string]int { return map[string]int{"A": 2, "B": 0} }
	cfg.Jobs = knowingJob(t, "B", "j", secret)
	b := startAgentT(t, url, "B", cfg, 0, table, "A")
	cfg.Jobs = knowingJob(t, "A", "j", secret)
	startAgentT(t, url, "A", cfg, 1, nil, "B")
	publishProfilesUnder(t, nc, ranks, "B", "", table)
	return b
}

// jobJChannel is job j's channel under secret for a sender of role.
func jobJChannel(t *testing.T, secret []byte, role ctlauth.Role) *ctlauth.JobChannel {
	t.Helper()
	ch, err := ctlauth.NewJobChannel("j", secret, ctlauth.Sender{Role: role}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

// knowingJob is the keyring of node, which learnt job jobID's key from a spawn.
func knowingJob(t *testing.T, node, jobID string, secret []byte) *ctlauth.JobKeyring {
	t.Helper()
	keys, err := ctlauth.NewJobKeyring(ctlauth.Sender{Role: ctlauth.RoleNode, Node: node}, 0, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := keys.Learn(jobID, secret, ""); err != nil {
		t.Fatal(err)
	}
	return keys
}
