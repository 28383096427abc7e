//go:build race

package iossim

// raceDetector: the race detector slows the simulator about tenfold, so the larger runs are
// left to the tests without it.
const raceDetector = true
