package launch

import (
	"strings"
	"testing"

	"github.com/mpios/mpios/comm"
	"github.com/mpios/mpios/internal/job"
	"github.com/mpios/mpios/internal/rankproc"
)

type placedStarter struct {
	rankproc.Local
	place []string
}

func (p placedStarter) Placement() []string { return p.place }

func TestNodeRanks(t *testing.T) {
	place := []string{"n1", "n2", "n1", "n1"}
	cases := []struct {
		s    rankproc.Starter
		rank int
		want int
	}{
		{rankproc.Local{}, 0, 4},
		{rankproc.Local{}, 3, 4},
		{placedStarter{place: place}, 0, 3},
		{placedStarter{place: place}, 1, 1},
		{placedStarter{place: place}, 3, 3},
		{placedStarter{place: place}, 4, 0}, // not placed: unknown
	}
	for _, c := range cases {
		if got := nodeRanks(c.s, 4, c.rank); got != c.want {
			t.Errorf("nodeRanks(%T, rank %d) = %d, want %d", c.s, c.rank, got, c.want)
		}
	}
	hosts := []string{"n1", "", "n2", "n1"} // rank 1 is not running
	for _, c := range []struct {
		node       string
		rank, want int
	}{{"n1", 0, 2}, {"n1", 2, 3}, {"n2", 2, 1}, {"n3", 1, 1}} {
		if got := ranksOnNode(hosts, c.node, c.rank); got != c.want {
			t.Errorf("ranksOnNode(%q, rank %d) = %d, want %d", c.node, c.rank, got, c.want)
		}
	}
}

func TestSpecTellsRanksHowManyShareTheNode(t *testing.T) {
	r := &runner{cfg: Config{NP: 3, Starter: rankproc.Local{}, Env: []string{comm.EnvNodeRanks + "=99", "PATH=/bin"}}}
	spec := r.spec(1, "/bin/true", job.Env{JobID: "j", Size: 3, Rank: 1})
	last := ""
	for _, kv := range spec.Env {
		if name, _, _ := strings.Cut(kv, "="); name == comm.EnvNodeRanks {
			last = kv
		}
	}
	if want := comm.EnvNodeRanks + "=3"; last != want {
		t.Errorf("rank environment ends with %q, want %q (the launcher's count wins)", last, want)
	}
}
