package ckptstore

import (
	"errors"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// memoryBacked reports whether dir is on a tmpfs, whose files are pages of memory: the
// stores whose pieces are recycled (spare.go).
func memoryBacked(dir string) bool {
	var st unix.Statfs_t
	return unix.Statfs(dir, &st) == nil && int64(st.Type) == unix.TMPFS_MAGIC
}

// dataRanges lists the ranges of f that hold data (lseek SEEK_DATA and SEEK_HOLE); a file
// system without them gives the whole file.
func dataRanges(f *os.File) ([][2]int64, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	size := st.Size()
	var out [][2]int64
	for off := int64(0); off < size; {
		start, err := f.Seek(off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break // only a hole is left
		}
		if errors.Is(err, unix.EINVAL) {
			return [][2]int64{{off, size}}, nil
		}
		if err != nil {
			return nil, err
		}
		end, err := f.Seek(start, unix.SEEK_HOLE)
		if err != nil {
			return nil, err
		}
		out = append(out, [2]int64{start, end})
		off = end
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	return out, nil
}

// punchHole makes [from, to) of f read as zeros, freeing the whole blocks in it.
func punchHole(f *os.File, from, to int64) error {
	if to <= from {
		return nil
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) {
		ferr = unix.Fallocate(int(fd), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, from, to-from)
	}); err != nil {
		return err
	}
	if ferr != nil {
		return &os.PathError{Op: "punch hole", Path: f.Name(), Err: ferr}
	}
	return nil
}
