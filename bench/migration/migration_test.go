package main

import (
	"slices"
	"testing"
)

// The latencies of a trial split into the phases between its migrations, leaving out each
// migration's iteration and the first iterations of its successor.
func TestLatencySegmentsSplitAtMigrations(t *testing.T) {
	lats := map[int]float64{}
	for i := 1; i <= 30; i++ {
		lats[i] = float64(i)
	}
	segs := latSegments(lats, []int{10, 20})
	for k := range segs {
		slices.Sort(segs[k])
	}
	want := [][]float64{
		{1, 2, 3, 4, 5, 6, 7, 8, 9},
		{14, 15, 16, 17, 18, 19},
		{24, 25, 26, 27, 28, 29, 30},
	}
	for k := range want {
		if !slices.Equal(segs[k], want[k]) {
			t.Errorf("segment %d: %v, want %v", k, segs[k], want[k])
		}
	}
}
