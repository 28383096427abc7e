package pcm

import (
	"encoding/binary"
	"fmt"
	"io"
	"slices"
	"testing"

	"github.com/mpios/mpios/internal/mpitest"
	"github.com/mpios/mpios/mpi"
	"github.com/mpios/mpios/pcm/redist"
)

// items is an application's own structure: a list of numbers.
type items struct{ v []int64 }

func (it *items) Len() int { return len(it.v) }

func (it *items) Give(n int, end End) ([]byte, error) {
	if n > len(it.v) {
		return nil, fmt.Errorf("give %d of %d", n, len(it.v))
	}
	var out []int64
	if end == Front {
		out, it.v = it.v[:n], it.v[n:]
	} else {
		out, it.v = it.v[len(it.v)-n:], it.v[:len(it.v)-n]
	}
	b := make([]byte, 0, 8*n)
	for _, x := range out {
		b = binary.LittleEndian.AppendUint64(b, uint64(x))
	}
	return b, nil
}

func (it *items) Receive(data []byte, end End) error {
	got := make([]int64, len(data)/8)
	for i := range got {
		got[i] = int64(binary.LittleEndian.Uint64(data[8*i:]))
	}
	if end == Front {
		it.v = append(got, it.v...)
	} else {
		it.v = append(it.v, got...)
	}
	return nil
}

// TestMalleableActorRedistribution drives the MalleableActor interface through a split
// 4 -> 6 and a merge 6 -> 3: ordered items (Algorithms 2–4) stay in global order with each
// rank holding its share, unordered ones (Algorithm 1) end with the right counts and no item
// lost or duplicated.
func TestMalleableActorRedistribution(t *testing.T) {
	const total = 50
	for _, ordered := range []bool{true, false} {
		t.Run(fmt.Sprint("ordered=", ordered), func(t *testing.T) {
			var final [6][]int64
			mpitest.Run(t, mpitest.InProc, 6, func(c *mpi.Comm) error {
				me := c.Rank()
				p, err := InitWith(c, Options{Log: io.Discard})
				if err != nil {
					return err
				}
				it := &items{}
				if err := p.RegisterMalleable("stars", it, ordered); err != nil {
					return err
				}
				if err := p.Load(); err != nil {
					return err
				}
				if me < 4 {
					four, _ := redist.Blocks(total, nil, 4)
					for x := four[me].Lo; x < four[me].Hi; x++ {
						it.v = append(it.v, int64(x))
					}
				}
				if err := resize(p, c, 4, []int{0, 1, 2, 3, 4, 5}, 6, []float64{1, 1, 2, 2, 1, 1}); err != nil {
					return err
				}
				shares, _ := redist.Shares(total, []float64{1, 1, 2, 2, 1, 1}, 6)
				if it.Len() != shares[me] {
					return fmt.Errorf("after the split: %d items, want %d", it.Len(), shares[me])
				}
				newRank := []int{-1, 0, 1, -1, 2, -1}
				if err := resize(p, c, 6, newRank, 3, nil); err != nil {
					return err
				}
				want := 0
				if newRank[me] >= 0 {
					s3, _ := redist.Shares(total, nil, 3)
					want = s3[newRank[me]]
				}
				if it.Len() != want {
					return fmt.Errorf("after the merge: %d items, want %d", it.Len(), want)
				}
				final[me] = it.v
				return nil
			})
			var all []int64
			for _, w := range []int{1, 2, 4} { // new ranks 0, 1, 2
				all = append(all, final[w]...)
			}
			if !ordered {
				slices.Sort(all)
			}
			for i, x := range all {
				if x != int64(i) {
					t.Fatalf("items after the merge, in new rank order: %v", all)
				}
			}
			if len(all) != total {
				t.Fatalf("%d items after the merge, want %d", len(all), total)
			}
		})
	}
}
