package supervisor

import (
	"errors"
	"strings"
	"testing"

	"github.com/mpios/mpios/internal/job"
)

// The job of these tests: ranks 0 and 1 on n1 (the manager: first by name), 2 and 3 on n2.
var authzView = ControlView{RankNodes: []string{"n1", "n1", "n2", "n2"}}

func TestAuthorizeControl(t *testing.T) {
	owner, n1, n2, evil := Requester{Owner: true}, Requester{Node: "n1"}, Requester{Node: "n2"}, Requester{Node: "evil"}
	none := ControlView{RankNodes: authzView.RankNodes, PolicyNone: true}
	migrate := func(to string, ranks ...int) job.ControlRequest {
		return job.ControlRequest{Kind: job.ControlMigrate, Rank: ranks[0], Ranks: ranks, To: to}
	}
	resize := func(np int, on ...string) job.ControlRequest {
		c := job.ControlRequest{Kind: job.ControlResize, NP: np}
		for _, n := range on {
			c.On = append(c.On, job.NodeSlots{Node: n})
		}
		return c
	}
	drain := migrate("n1", 2, 3)
	drain.Drain = true
	checkpoint := job.ControlRequest{Kind: job.ControlCheckpoint}
	for _, c := range []struct {
		name string
		from Requester
		req  job.ControlRequest
		view ControlView
		ok   bool
	}{
		{"the owner checkpoints", owner, checkpoint, authzView, true},
		{"the owner moves any rank", owner, migrate("n1", 3), authzView, true},
		{"the owner resizes anywhere, also under --policy none", owner, resize(6, "n3"), none, true},
		{"an unauthenticated sender is refused", Requester{}, checkpoint, authzView, false},
		{"a node may not checkpoint", n1, checkpoint, authzView, false},
		{"a node moves its own rank", n2, migrate("n1", 2), authzView, true},
		{"a node moves its own ranks together", n2, migrate("n3", 2, 3), authzView, true},
		{"a node may not move another node's rank", n2, migrate("n2", 0), authzView, false},
		{"a node may not move a mix of ranks", n2, migrate("n3", 1, 2), authzView, false},
		{"a rank outside the job belongs to no node", n2, migrate("n3", 7), authzView, false},
		{"a node the job does not use moves nothing", evil, migrate("evil", 0), authzView, false},
		{"the manager moves any rank", n1, migrate("n1", 3), authzView, true},
		{"the manager may not move another node's rank under --policy none", n1, migrate("n1", 3), none, false},
		{"an IOS move of a node's own rank is refused under --policy none", n2, migrate("n1", 2), none, false},
		{"a drain moves a node's own ranks under --policy none", n2, drain, none, true},
		{"a drain moves only the node's own ranks", n1, drain, none, false},
		{"a node shrinks the job off itself", n2, resize(2, "n2"), authzView, true},
		{"a shrink off itself is allowed under --policy none", n2, resize(2, "n2"), none, true},
		{"a node may not shrink the job off another", n2, resize(2, "n1"), authzView, false},
		{"a node may not shrink off itself and another", n2, resize(0+1, "n2", "n1"), authzView, false},
		{"a node may not shrink without naming itself", n2, resize(2), authzView, false},
		{"a node grows the job onto itself", n2, resize(6, "n2"), authzView, true},
		{"a node may not grow the job onto itself under --policy none", n2, resize(6, "n2"), none, false},
		{"a node may not grow the job onto another", n2, resize(6, "n3"), authzView, false},
		{"a node the job does not use may grow it onto itself (a joined node)", evil, resize(6, "evil"), authzView, true},
		{"a node the job does not use may not grow it onto itself under --policy none", evil, resize(6, "evil"), none, false},
		{"a node the job does not use may not shrink it", evil, resize(2, "evil"), authzView, false},
		{"the manager resizes anywhere", n1, resize(6, "n3"), authzView, true},
		{"the manager shrinks by the highest ranks", n1, resize(3), authzView, true},
		{"the manager may not resize under --policy none", n1, resize(6, "n3"), none, false},
	} {
		err := AuthorizeControl(c.from, c.req, c.view)
		if (err == nil) != c.ok {
			t.Errorf("%s: %v, want allowed=%v", c.name, err, c.ok)
		}
		if err != nil && !errors.Is(err, ErrNotAuthorized) {
			t.Errorf("%s: %v does not wrap ErrNotAuthorized", c.name, err)
		}
	}
}

func TestManagerNodeIsTheFirstNodeByName(t *testing.T) {
	for _, c := range []struct {
		nodes []string
		want  string
	}{
		{[]string{"n2", "n10", "n1"}, "n1"},
		{[]string{"b", "a", "b"}, "a"},
		{[]string{"local", "local"}, ""},
		{nil, ""},
	} {
		if got := ManagerNode(c.nodes); got != c.want {
			t.Errorf("ManagerNode(%q) = %q, want %q", c.nodes, got, c.want)
		}
	}
}

// The Machine asks AuthorizeControl with its own view of the placement: a node's request to
// move another node's rank is refused before any node is checked, and the refusal is logged.
func TestMachineRefusesANodesRequestForAnotherNodesRank(t *testing.T) {
	j := newFakeJob(t, Config{Migrations: true}, "n1", "n1", "n2", "n2")
	j.launch()
	acts, to := j.controlFrom(Requester{Node: "n2"}, job.ControlRequest{Kind: job.ControlMigrate, Rank: 0, To: "n2"})
	for _, a := range acts {
		if _, ok := a.(CheckNode); ok {
			t.Fatalf("the Machine checked a node for a refused request: %v", acts)
		}
	}
	if rep := j.lastReply(to); rep.OK || !strings.Contains(rep.Error, "not authorized") || !strings.Contains(rep.Error, "rank 0") {
		t.Errorf("reply %+v, want a refusal naming rank 0", rep)
	}
	// Its own rank may move: the Machine goes on to check the target.
	acts, _ = j.controlFrom(Requester{Node: "n2"}, job.ControlRequest{Kind: job.ControlMigrate, Rank: 2, To: "n1"})
	checked := false
	for _, a := range acts {
		_, isCheck := a.(CheckNode)
		checked = checked || isCheck
	}
	if !checked {
		t.Errorf("a node's request for its own rank was not taken: %v", acts)
	}
}

// FuzzAuthorizeControl feeds the decision every request a sender could encode: it never
// panics, the owner is always allowed, and a node is never allowed a checkpoint, a job it
// runs no rank of, or a move of a rank that runs elsewhere unless it is the manager.
func FuzzAuthorizeControl(f *testing.F) {
	for _, c := range []job.ControlRequest{
		{Kind: job.ControlMigrate, Rank: 2, To: "n1"},
		{Kind: job.ControlMigrate, Rank: 0, Ranks: []int{0, 3}, To: "n2", Drain: true},
		{Kind: job.ControlResize, NP: 2, On: []job.NodeSlots{{Node: "n2"}}},
		{Kind: job.ControlCheckpoint},
	} {
		data, err := job.Encode(c)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data, "n2", false)
	}
	f.Fuzz(func(t *testing.T, data []byte, node string, none bool) {
		var c job.ControlRequest
		if job.Decode(data, &c) != nil || c.Validate() != nil {
			return
		}
		v := ControlView{RankNodes: authzView.RankNodes, PolicyNone: none}
		if err := AuthorizeControl(Requester{Owner: true}, c, v); err != nil {
			t.Fatalf("the owner was refused %+v: %v", c, err)
		}
		err := AuthorizeControl(Requester{Node: node}, c, v)
		if err == nil {
			switch {
			case c.Kind == job.ControlCheckpoint:
				t.Fatalf("node %q allowed a checkpoint", node)
			case node != "n1" && node != "n2" && (c.Kind != job.ControlResize || c.NP <= len(v.RankNodes) || none):
				t.Fatalf("node %q, running no rank, allowed %+v", node, c)
			case c.Kind == job.ControlMigrate && (node != "n1" || none):
				ranks := c.Ranks
				if len(ranks) == 0 {
					ranks = []int{c.Rank}
				}
				for _, r := range ranks {
					if r < 0 || r >= len(v.RankNodes) || v.RankNodes[r] != node {
						t.Fatalf("node %q allowed to move rank %d: %+v", node, r, c)
					}
				}
			}
		} else if !errors.Is(err, ErrNotAuthorized) {
			t.Fatalf("refusal %v does not wrap ErrNotAuthorized", err)
		}
	})
}
