package solverkit

import (
	"flag"
	"path/filepath"
	"strings"
	"testing"
)

func TestBlockRangeCoversRowsFirstRanksGetExtra(t *testing.T) {
	for n := 1; n <= 20; n++ {
		for p := 1; p <= n; p++ {
			next := 0
			for r := 0; r < p; r++ {
				start, count := BlockRange(n, p, r)
				want := n / p
				if r < n%p {
					want++
				}
				if start != next || count != want {
					t.Fatalf("n=%d p=%d r=%d: [%d,+%d), want [%d,+%d)", n, p, r, start, count, next, want)
				}
				next += count
			}
			if next != n {
				t.Fatalf("n=%d p=%d: rows cover %d", n, p, next)
			}
		}
	}
	if c := BlockCounts(7, 3); c[0] != 3 || c[1] != 2 || c[2] != 2 {
		t.Fatalf("BlockCounts(7,3) = %v", c)
	}
}

func TestFloatsRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x")
	want := []float64{0, -1.5, 1e300, 3}
	if err := WriteFloats(path, want); err != nil {
		t.Fatal(err)
	}
	got, err := ReadFloats(path)
	if err != nil || len(got) != len(want) {
		t.Fatal(got, err)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("%d: %v", i, got[i])
		}
	}
}

func TestUsageHidesTestAndBenchmarkFlags(t *testing.T) {
	fs := flag.NewFlagSet("solver", flag.ContinueOnError)
	var out strings.Builder
	fs.SetOutput(&out)
	fs.Int("n", 10, "grid size")
	for _, name := range []string{CrashFlag, PaceFlag, NoPCMFlag, InitFlag} {
		fs.String(name, "", "hidden")
	}
	Usage(fs)
	if !strings.Contains(out.String(), "-n int") {
		t.Errorf("usage lacks -n:\n%s", out.String())
	}
	for _, name := range []string{CrashFlag, PaceFlag, NoPCMFlag, InitFlag} {
		if strings.Contains(out.String(), "-"+name) {
			t.Errorf("usage shows the hidden -%s:\n%s", name, out.String())
		}
	}
}
