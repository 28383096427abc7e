//go:build !unix

package pcmd

// processAlive cannot check without signals; records are trusted.
func processAlive(pid int) bool { return pid > 0 }
