package agentdriver

import (
	"slices"
	"testing"

	"github.com/mpios/mpios/internal/supervisor"
	"github.com/mpios/mpios/iosbridge"
)

// A pair swap's two ranks go to their job in one request (ControlRequest.Ranks), which moves
// both at one iteration boundary or neither, so the job cannot carry out half of the pair;
// migrations of another request, target or job stay separate requests.
func TestPairSwapRanksGoToTheJobInOneRequest(t *testing.T) {
	mig := func(job string, rank int, to string, id uint64) iosbridge.Migration {
		return iosbridge.Migration{Rank: iosbridge.RankID{Job: job, Rank: rank}, To: to, RequestID: id}
	}
	in := []iosbridge.Migration{
		mig("j", 0, "B", 7), mig("j", 1, "B", 7), // a pair swap's two ranks
		mig("j", 2, "C", 7),                      // another target
		mig("k", 3, "C", 7),                      // another job
		mig("k", 4, "C", 8),                      // another request
		mig("k", 5, "C", 0), mig("k", 6, "C", 0), // pushes (no request): one by one
		mig("k", 9, "C", 9), mig("k", 10, "C", 9), // parts of two exchanges of one number
	}
	in[len(in)-2].Origin, in[len(in)-1].Origin = "A", "B"
	var got [][]int
	for _, b := range batches(in) {
		got = append(got, rankList(b))
	}
	want := [][]int{{0, 1}, {2}, {3}, {4}, {5}, {6}, {9}, {10}}
	if !slices.EqualFunc(got, want, func(a, b []int) bool { return slices.Equal(a, b) }) {
		t.Fatalf("batches %v, want %v", got, want)
	}
}

// An exchange part waits at the job for the other nodes' parts (supervisor.JointTimeout):
// the agent must wait longer for the answer, or it would free a rank the job still moves.
func TestTheAgentWaitsLongerForAnExchangesAnswerThanTheJobWaitsForItsParts(t *testing.T) {
	if DefaultControlTimeout <= supervisor.JointTimeout {
		t.Fatalf("control timeout %v, the job holds an exchange part up to %v", DefaultControlTimeout, supervisor.JointTimeout)
	}
}
