//go:build !linux

package ckptstore

import "os"

// memoryBacked reports that no store is known to be in memory on this system: pieces are
// not recycled (spare.go).
func memoryBacked(string) bool { return false }

func dataRanges(*os.File) ([][2]int64, error) { return nil, errNoSparse }

func punchHole(*os.File, int64, int64) error { return errNoSparse }
