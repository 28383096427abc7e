package profiler

import (
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mpios/mpios/comm"
	"github.com/mpios/mpios/mpi"
)

// world attaches the n ranks of an in-process network without running them: the
// communicators are only used to label synthetic events, so no rank needs a goroutine.
func world(t testing.TB, n int) []*mpi.Comm {
	t.Helper()
	nw := comm.NewInProcNetwork(n)
	cs := make([]*mpi.Comm, n)
	for i := range cs {
		c, err := mpi.Attach(nw.Endpoint(i))
		if err != nil {
			t.Fatalf("attach rank %d: %v", i, err)
		}
		cs[i] = c
	}
	t.Cleanup(func() {
		for i := range cs {
			nw.Endpoint(i).Close()
		}
	})
	return cs
}

var t0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

func approx(t *testing.T, what string, got, want float64) {
	t.Helper()
	if math.Abs(got-want) > 1e-9 {
		t.Errorf("%s = %v, want %v", what, got, want)
	}
}

func byRank(t *testing.T, snaps []RankProfile, rank int) RankProfile {
	t.Helper()
	for _, s := range snaps {
		if s.Rank == rank {
			return s
		}
	}
	t.Fatalf("no profile of rank %d in %d profiles", rank, len(snaps))
	return RankProfile{}
}

// recorder is an interceptor that counts events, to check chaining.
type recorder struct{ n atomic.Int64 }

func (r *recorder) Observe(mpi.CallEvent) { r.n.Add(1) }
