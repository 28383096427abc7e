package supervisor

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mpios/mpios/internal/job"
	"github.com/mpios/mpios/internal/reconf"
)

// Exchanges between nodes (joint.go): each node sends its part, the Machine proposes one
// joint entry or refuses them all. Fake processes and clock, as the other tests.

// part is node's part of exchange n1/7 between n1 and n2: ranks to node to.
func part(to string, ranks ...int) job.ControlRequest {
	return job.ControlRequest{Kind: job.ControlMigrate, Rank: ranks[0], Ranks: ranks, To: to, Reason: "ios atsras: swap",
		Exchange: &job.ExchangePart{Origin: "n1", ID: 7, Parties: []string{"n1", "n2"}}}
}

// sendPart sends node's part and returns the actions and the reply subject.
func (j *fakeJob) sendPart(node string, c job.ControlRequest) ([]Action, string) {
	j.t.Helper()
	return j.controlFrom(Requester{Node: node}, c)
}

// A swap's two halves become one entry: n1's part waits for n2's; then both targets are
// checked, each counting the rank that leaves it, and one joint entry moves rank 0 to n2 and
// rank 1 to n1; both parts get the same answer.
func TestAnExchangeIsProposedAsOneJointEntryOnceEveryNodeSentItsPart(t *testing.T) {
	j := migratingJob(t) // ranks 0, 1, 2 on n1, n2, n1
	acts, r1 := j.sendPart("n1", part("n2", 0))
	if len(only[CheckNode](acts)) != 0 || len(j.sent[r1]) != 0 || len(j.published()) != 0 {
		t.Fatalf("one part alone was acted on: %+v", acts)
	}
	acts, r2 := j.sendPart("n2", part("n1", 1))
	checks := only[CheckNode](acts)
	if len(checks) != 2 || checks[0].Node != "n1" || checks[1].Node != "n2" || checks[0].Leaving != 1 || checks[1].Leaving != 1 {
		t.Fatalf("checks %+v, want n1 and n2 each counting the one rank that leaves it", checks)
	}
	j.step(NodeChecked{Check: checks[1].Check})
	if len(j.published()) != 0 {
		t.Fatal("proposed before every target was checked")
	}
	j.step(NodeChecked{Check: checks[0].Check})
	logs := j.published()
	if len(logs) != 1 || len(logs[0].Entries) != 1 {
		t.Fatalf("published %+v, want one log of one entry", logs)
	}
	e := logs[0].Entries[0]
	if !e.Joint || e.Kind != reconf.Migrate || !slices.Equal(e.Ranks, []int{0, 1}) || !slices.Equal(e.Targets, []string{"n2", "n1"}) ||
		e.Reason != "exchange n1/7: ios atsras: swap" {
		t.Fatalf("entry %+v", e)
	}
	if err := logs[0].Validate(); err != nil {
		t.Fatal(err)
	}
	for _, r := range []string{r1, r2} {
		if rep := j.lastReply(r); !rep.OK || !strings.Contains(rep.Message, "rank 0 to n2, rank 1 to n1") {
			t.Errorf("reply to %s: %+v", r, rep)
		}
	}
	if h := j.m.Info().Migrations; len(h) != 2 || h[0].From != "n1" || h[0].To != "n2" || h[1].From != "n2" || h[1].To != "n1" {
		t.Errorf("history %+v", h)
	}
}

// Each successor of the joint move is started with the rank it replaces on its target, so
// that a full node admits it in that rank's slot; a plain migration replaces nothing.
func TestTheSuccessorOfAJointMoveReplacesTheRankLeavingItsTarget(t *testing.T) {
	j := migratingJob(t)
	j.sendPart("n1", part("n2", 0))
	acts, _ := j.sendPart("n2", part("n1", 1))
	for _, c := range only[CheckNode](acts) {
		j.step(NodeChecked{Check: c.Check})
	}
	j.askSuccessor(1, 0, 40)
	if s := j.takeStart(); s.Node != "n2" || !slices.Equal(s.Replaces, []int{1}) {
		t.Errorf("rank 0's successor %+v, want it on n2 replacing rank 1", s)
	}
	j.askSuccessor(1, 1, 40)
	if s := j.takeStart(); s.Node != "n1" || !slices.Equal(s.Replaces, []int{0}) {
		t.Errorf("rank 1's successor %+v, want it on n1 replacing rank 0", s)
	}
	j.migrate("n3", nil, 2)
	j.askSuccessor(2, 2, 40)
	if s := j.takeStart(); len(s.Replaces) != 0 {
		t.Errorf("a plain migration's successor replaces %v", s.Replaces)
	}
}

// A part whose partner never comes is refused after JointTimeout: nothing is proposed, and
// the Machine asks to be woken for it.
func TestAnExchangePartAloneIsRefusedAfterTheJointTimeoutAndNothingMoves(t *testing.T) {
	j := migratingJob(t)
	_, r1 := j.sendPart("n1", part("n2", 0))
	if at, ok := j.m.NextDeadline(); !ok || !at.Equal(j.now.Add(JointTimeout)) {
		t.Fatalf("next deadline %v %v, want the part's timeout", at, ok)
	}
	j.advance(JointTimeout - time.Millisecond)
	if len(j.sent[r1]) != 0 {
		t.Fatal("refused before its timeout")
	}
	j.advance(time.Millisecond)
	if rep := j.lastReply(r1); rep.OK || !strings.Contains(rep.Error, "no part from n2 within") {
		t.Fatalf("reply %+v", rep)
	}
	if len(j.published()) != 0 || len(j.m.Info().Migrations) != 0 {
		t.Fatal("something was proposed")
	}
	// The late part starts a new wait of its own, and it too is refused alone.
	_, r2 := j.sendPart("n2", part("n1", 1))
	j.advance(JointTimeout)
	if rep := j.lastReply(r2); rep.OK || !strings.Contains(rep.Error, "no part from n1") {
		t.Fatalf("late part's reply %+v", rep)
	}
}

// A target that cannot take its ranks refuses the whole exchange, each part with the reason.
func TestAFailedTargetCheckRefusesEveryPartOfTheExchange(t *testing.T) {
	j := migratingJob(t)
	_, r1 := j.sendPart("n1", part("n2", 0))
	acts, r2 := j.sendPart("n2", part("n1", 1))
	checks := only[CheckNode](acts)
	j.step(NodeChecked{Check: checks[0].Check, Err: errors.New("node n1 is draining")})
	j.step(NodeChecked{Check: checks[1].Check}) // late: the exchange is gone
	for _, r := range []string{r1, r2} {
		if rep := j.lastReply(r); rep.OK || !strings.Contains(rep.Error, "node n1 is draining") || len(j.sent[r]) != 1 {
			t.Errorf("reply to %s: %+v (%d replies)", r, rep, len(j.sent[r]))
		}
	}
	if len(j.published()) != 0 {
		t.Fatal("a refused exchange was proposed")
	}
}

// Parts that do not fit together are refused, all of them: they name different nodes, the
// same rank twice, or ranks on a node outside the exchange; a node's ranks come in one part
// (two could be halves of what it gives).
func TestExchangePartsThatDoNotFitTogetherAreRefused(t *testing.T) {
	j := migratingJob(t)
	_, r1 := j.sendPart("n1", part("n2", 0))
	other := part("n1", 1)
	other.Exchange.Parties = []string{"n1", "n2", "n3"}
	_, r2 := j.sendPart("n2", other)
	for _, r := range []string{r1, r2} {
		if rep := j.lastReply(r); rep.OK || !strings.Contains(rep.Error, "its parts name different nodes") {
			t.Errorf("reply to %s: %+v", r, rep)
		}
	}
	_, r3 := j.sendPart("n1", part("n2", 0))
	_, r4 := j.sendPart("n1", part("n2", 2))
	_, r5 := j.sendPart("n2", part("n1", 1))
	for _, r := range []string{r3, r4} {
		if rep := j.lastReply(r); rep.OK || !strings.Contains(rep.Error, "node n1 sent two parts") {
			t.Errorf("parts of n1 sent in two: reply to %s %+v", r, rep)
		}
	}
	j.advance(JointTimeout)
	if rep := j.lastReply(r5); rep.OK {
		t.Errorf("n2's part accepted without n1's: %+v", rep)
	}
	outside := part("n2", 0)
	outside.Exchange.Parties = []string{"n2", "n3"}
	outside.Exchange.Origin = "n2"
	outside.To = "n3"
	_, r6 := j.sendPart("n1", outside)
	if rep := j.lastReply(r6); rep.OK || !strings.Contains(rep.Error, "not among its nodes") {
		t.Errorf("part of a node outside the exchange: %+v", rep)
	}
	if len(j.published()) != 0 {
		t.Fatal("something was proposed")
	}
}

// A node may send only its own ranks as its part (AuthorizeControl), as for any migration.
func TestAnExchangePartMovesOnlyTheSendersRanks(t *testing.T) {
	j := migratingJob(t)
	_, r := j.sendPart("n2", part("n2", 0))
	if rep := j.lastReply(r); rep.OK || !strings.Contains(rep.Error, "not authorized") {
		t.Errorf("n2 sent rank 0 of n1: %+v", rep)
	}
}
