//go:build !linux

package pcm

// inBackground runs work on its own goroutine.
func inBackground(work func()) { go work() }
