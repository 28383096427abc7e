package job_test

import (
	"strings"
	"testing"

	"github.com/mpios/mpios/internal/job"
)

// An exchange part names its origin among two to eight distinct nodes, and its migration's
// target among them; a spawn request replaces only other ranks. Anything else is refused
// with a reason before the supervisor or pcmd sees it.
func TestExchangePartsAndReplacedRanksAreValidated(t *testing.T) {
	part := func(to string, x job.ExchangePart) job.ControlRequest {
		return job.ControlRequest{Kind: job.ControlMigrate, Rank: 1, To: to, Exchange: &x}
	}
	ok := job.ExchangePart{Origin: "n1", ID: 3, Parties: []string{"n1", "n2"}}
	if err := part("n2", ok).Validate(); err != nil {
		t.Fatalf("a valid part: %v", err)
	}
	for _, tc := range []struct {
		req  job.ControlRequest
		want string
	}{
		{part("n3", ok), "target n3 is not among its nodes"},
		{part("n2", job.ExchangePart{Origin: "n1", Parties: []string{"n1"}}), "among 1 nodes"},
		{part("n2", job.ExchangePart{Origin: "n3", Parties: []string{"n1", "n2"}}), "its origin is not among its nodes"},
		{part("n2", job.ExchangePart{Origin: "n1", Parties: []string{"n1", "n2", "n1"}}), "names node n1 twice"},
		{part("n2", job.ExchangePart{Origin: "n1", Parties: []string{"n1", "a b"}}), "exchange party"},
		{part("n2", job.ExchangePart{Origin: "", Parties: []string{"n1", "n2"}}), "exchange origin"},
	} {
		if err := tc.req.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error with %q", *tc.req.Exchange, err, tc.want)
		}
	}
	spawn := job.SpawnRequest{Job: "j", Rank: 1, Path: "/bin/x", Replaces: []int{2}}
	if err := spawn.Validate(); err != nil {
		t.Fatalf("a successor replacing rank 2: %v", err)
	}
	for _, bad := range [][]int{{1}, {-1}} {
		spawn.Replaces = bad
		if err := spawn.Validate(); err == nil || !strings.Contains(err.Error(), "replaces rank") {
			t.Errorf("replaces %v: %v", bad, err)
		}
	}
}
