//go:build !race

package iossim

const raceDetector = false
