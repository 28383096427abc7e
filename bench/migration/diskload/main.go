// Command diskload writes to disk the way a rank's background checkpoints do, without any
// application: every -every it writes -mib MiB of non-zero data to a new file with direct I/O,
// optionally fsyncs it, renames it into place and fsyncs the directory. With -inplace it
// overwrites one of three files written once at the start instead (no block allocation, no
// rename, fdatasync only), which tells the cost of the file system's metadata from the cost of
// the bytes. bench/migration runs it beside heat2d -no-pcm to tell what the disk's work costs
// the machine's CPUs from what pcm itself costs (part "disk").
package main

import (
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"
	"unsafe"
)

func main() {
	dir := flag.String("dir", "", "directory for the files (required)")
	mib := flag.Float64("mib", 2, "MiB written per round, rounded up to 4 KiB")
	every := flag.Duration("every", 100*time.Millisecond, "one round every this")
	fsync := flag.Bool("fsync", true, "fsync the file and the directory (durable), as checkpoints do")
	inPlace := flag.Bool("inplace", false, "overwrite one of three preallocated files each round (fdatasync only) instead of writing a new one")
	flag.Parse()
	if *dir == "" || *mib < 0 || *every <= 0 {
		log.Fatal("diskload: -dir is required; -mib must be >= 0 and -every > 0")
	}
	if err := os.MkdirAll(*dir, 0o700); err != nil {
		log.Fatal(err)
	}
	data := alignedData(int(*mib*(1<<20)+4095) &^ 4095)
	write := func(round int) error { return writeRound(*dir, round, data, *fsync) }
	if *inPlace {
		slots, err := preallocate(*dir, data)
		if err != nil {
			log.Fatalf("diskload: %v", err)
		}
		write = func(round int) error { return overwrite(slots[round%len(slots)], data, *fsync) }
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, os.Interrupt)
	tick := time.NewTicker(*every)
	defer tick.Stop()
	for round := 0; ; round++ {
		if err := write(round); err != nil {
			log.Fatalf("diskload: %v", err)
		}
		select {
		case <-stop:
			return
		case <-tick.C:
		}
	}
}

// alignedData returns n bytes of non-zero data starting at a 4 KiB boundary, for direct I/O.
func alignedData(n int) []byte {
	raw := make([]byte, n+4096)
	off := 0
	if r := int(uintptr(unsafe.Pointer(unsafe.SliceData(raw))) & 4095); r != 0 {
		off = 4096 - r
	}
	b := raw[off : off+n]
	for i := range b {
		b[i] = byte(i | 1)
	}
	return b
}

func writeRound(dir string, round int, data []byte, durable bool) error {
	final := filepath.Join(dir, fmt.Sprintf("piece-%d", round%3))
	tmp := final + ".tmp"
	f, err := openDirect(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY)
	if err != nil {
		return err
	}
	if len(data) > 0 {
		if _, err := f.WriteAt(data, 0); err != nil {
			f.Close()
			return err
		}
	}
	if durable {
		if err := f.Sync(); err != nil {
			f.Close()
			return err
		}
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, final); err != nil {
		return err
	}
	if !durable {
		return nil
	}
	return syncDir(dir)
}

// preallocate writes data once to each of three files and makes them durable, so that later
// rounds overwrite blocks that are already allocated.
func preallocate(dir string, data []byte) ([]*os.File, error) {
	slots := make([]*os.File, 3)
	for i := range slots {
		f, err := openDirect(filepath.Join(dir, fmt.Sprintf("slot-%d", i)), os.O_CREATE|os.O_RDWR)
		if err != nil {
			return nil, err
		}
		if err := overwrite(f, data, true); err != nil {
			return nil, err
		}
		slots[i] = f
	}
	return slots, syncDir(dir)
}

// overwrite writes data at the start of f and, if durable, fdatasyncs it.
func overwrite(f *os.File, data []byte, durable bool) error {
	if len(data) > 0 {
		if _, err := f.WriteAt(data, 0); err != nil {
			return err
		}
	}
	if !durable {
		return nil
	}
	return syscall.Fdatasync(int(f.Fd()))
}

// openDirect opens name with direct I/O where the file system has it.
func openDirect(name string, flags int) (*os.File, error) {
	f, err := os.OpenFile(name, flags|syscall.O_DIRECT, 0o600)
	if errors.Is(err, syscall.EINVAL) { // no direct I/O on this file system
		f, err = os.OpenFile(name, flags, 0o600)
	}
	return f, err
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
