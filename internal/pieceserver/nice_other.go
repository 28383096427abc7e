//go:build !linux

package pieceserver

// lowerPriority does nothing where threads have no priorities of their own.
func lowerPriority(int) bool { return false }
