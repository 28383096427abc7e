// Package solverkit is what the example solvers (heat2d, jacobi) share and the comparison
// suite's C programs mirror: the row-block decomposition, result files of raw float64 values,
// and the hidden test flag that simulates a crashed rank.
package solverkit

import (
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"time"

	"github.com/mpios/mpios/pcm"
)

// BlockRange returns the first global row and the row count of rank r when n rows are split
// over p ranks as evenly as possible: the first n%p ranks get one extra row.
func BlockRange(n, p, r int) (start, count int) {
	base, rem := n/p, n%p
	count = base
	if r < rem {
		count++
	}
	return r*base + min(r, rem), count
}

// BlockCounts returns the row count of every rank (the counts of a Gatherv/Allgatherv).
func BlockCounts(n, p int) []int {
	counts := make([]int, p)
	for r := range counts {
		_, counts[r] = BlockRange(n, p, r)
	}
	return counts
}

// WriteFloats writes xs to path as raw little-endian float64 values, the format of -dump.
func WriteFloats(path string, xs []float64) error {
	buf := make([]byte, 8*len(xs))
	for i, x := range xs {
		binary.LittleEndian.PutUint64(buf[8*i:], math.Float64bits(x))
	}
	if err := os.WriteFile(path, buf, 0o644); err != nil {
		return fmt.Errorf("dump: %w", err)
	}
	return nil
}

// ReadFloats reads a file written by WriteFloats.
func ReadFloats(path string) ([]float64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if len(b)%8 != 0 {
		return nil, fmt.Errorf("%s: %d bytes is not a whole number of float64", path, len(b))
	}
	xs := make([]float64, len(b)/8)
	for i := range xs {
		xs[i] = math.Float64frombits(binary.LittleEndian.Uint64(b[8*i:]))
	}
	return xs, nil
}

// CrashFlag is the test-only flag with which a solver makes one rank exit with status 1 after
// a given iteration, as if it had died; Usage leaves it out of -help.
const CrashFlag = "crash-after"

// PaceFlag is the test-only flag with which a solver sleeps a given duration per iteration,
// so that a test can reconfigure a running job in time whatever the machine's speed. It
// changes no result.
const PaceFlag = "pace"

// NoPCMFlag is the benchmark-only flag with which a solver never reaches pcm.Reconfigure:
// the baseline against which PCM's overhead is measured. It changes no result.
const NoPCMFlag = "no-pcm"

// InitFlag is the benchmark-only flag with which heat2d starts its interior at a given value
// instead of 0, so that its state has no zeros (whole blocks of zeros cost a checkpoint
// nothing to write). It changes the results.
const InitFlag = "init"

// Usage prints the flags of fs except the test-only ones.
func Usage(fs *flag.FlagSet) {
	shown := flag.NewFlagSet(fs.Name(), flag.ContinueOnError)
	shown.SetOutput(fs.Output())
	fs.VisitAll(func(f *flag.Flag) {
		if f.Name != CrashFlag && f.Name != PaceFlag && f.Name != NoPCMFlag && f.Name != InitFlag {
			shown.Var(f.Value, f.Name, f.Usage)
		}
	})
	fmt.Fprintf(fs.Output(), "Usage of %s:\n", fs.Name())
	shown.PrintDefaults()
}

// Hooks are a solver's hidden test and benchmark flags (CrashFlag, PaceFlag, NoPCMFlag).
type Hooks struct {
	Name       string        // the program, for warnings
	CrashAfter int           // rank min(1, size-1) exits with status 1 after this iteration; 0: never
	Pace       time.Duration // sleep this long per iteration
	NoPCM      bool          // never call pcm.Reconfigure (the overhead benchmark's baseline)
}

// Boundary ends iteration iter (iter iterations are complete): pcm's reconfiguration point,
// where a lost checkpoint is only a warning, then the hooks. It returns pcm's action: Leave
// when this process handed its rank over (or was merged away) and must return without
// touching the world, or the resize to adapt to.
func Boundary(p *pcm.Process, iter, rank, size int, h Hooks) (pcm.Action, error) {
	act := pcm.Continue
	if !h.NoPCM {
		var err error
		act, err = p.Reconfigure(iter)
		if errors.Is(err, pcm.ErrCheckpointFailed) {
			// Losing one checkpoint is no reason to stop computing.
			fmt.Fprintf(os.Stderr, "%s: rank %d: warning: %v\n", h.Name, rank, err)
		} else if err != nil {
			return act, err
		}
		if act == pcm.Leave {
			return act, nil
		}
	}
	if h.Pace > 0 {
		time.Sleep(h.Pace)
	}
	if iter == h.CrashAfter && rank == min(1, size-1) {
		os.Exit(1) // test only: die without finalizing, like a crashed rank
	}
	return act, nil
}

// Close closes p at the end of a solver's run; defer it with the run's error. After a
// failure it gives up a checkpoint still in flight (the other ranks may not be there to
// commit it); otherwise it commits it, and a failed last checkpoint is a warning, as in
// Boundary.
func Close(p *pcm.Process, name string, rank int, err *error) {
	if *err != nil {
		p.Abandon()
	}
	cerr := p.Close()
	if errors.Is(cerr, pcm.ErrCheckpointFailed) {
		fmt.Fprintf(os.Stderr, "%s: rank %d: warning: %v\n", name, rank, cerr)
	} else if cerr != nil && *err == nil {
		*err = cerr
	}
}
