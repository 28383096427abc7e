package pcmd

import "testing"

func TestNodeRanks(t *testing.T) {
	for _, c := range []struct{ placed, same, other, want int }{
		{2, 1, 0, 2}, // the first of two ranks mpirun placed here
		{2, 2, 0, 2},
		{0, 1, 0, 1}, // a launcher that did not count
		{1, 2, 0, 2}, // a successor joined a rank of its job here
		{2, 1, 3, 5}, // another job runs three ranks here
	} {
		if got := nodeRanks(c.placed, c.same, c.other); got != c.want {
			t.Errorf("nodeRanks(placed %d, same %d, other %d) = %d, want %d", c.placed, c.same, c.other, got, c.want)
		}
	}
}
