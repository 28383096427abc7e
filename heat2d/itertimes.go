package main

import (
	"bufio"
	"fmt"
	"os"
	"time"
)

// iterTimes records how long each iteration of the timed loop took on this process, for
// -iter-times: benchmarks that must tell a few milliseconds at known iterations (a
// checkpoint's) from the noise of a whole loop. Recording is a clock read and a store into a
// slice allocated before the loop; the file is written after it.
type iterTimes struct {
	first int             // the number of the first recorded iteration
	last  time.Time       // the end of the previous iteration (or the loop's start)
	d     []time.Duration // d[k]: iteration first+k
}

// newIterTimes prepares the record of iterations startIter+1 … iters, the clock starting at
// start.
func newIterTimes(startIter, iters int, start time.Time) *iterTimes {
	return &iterTimes{first: startIter + 1, last: start, d: make([]time.Duration, 0, max(iters-startIter, 0))}
}

// done records the end of the next iteration.
func (t *iterTimes) done() {
	now := time.Now()
	t.d = append(t.d, now.Sub(t.last))
	t.last = now
}

// write writes one line "ITERATION SECONDS" per recorded iteration to path.
func (t *iterTimes) write(path string) (err error) {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("-iter-times: %w", err)
	}
	defer func() {
		if cerr := f.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("-iter-times: %w", cerr)
		}
	}()
	w := bufio.NewWriter(f)
	for k, d := range t.d {
		fmt.Fprintf(w, "%d %.9f\n", t.first+k, d.Seconds())
	}
	if err := w.Flush(); err != nil {
		return fmt.Errorf("-iter-times: %w", err)
	}
	return nil
}
