// Command diskload writes to disk the way a rank's background checkpoints do, without any
// application: every -every it writes -mib MiB of non-zero data to a new file with direct I/O,
// optionally fsyncs it, renames it into place and fsyncs the directory. bench/migration runs it
// beside heat2d -no-pcm to tell what the disk's work costs the machine's CPUs from what pcm
// itself costs (part "disk").
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
	flag.Parse()
	if *dir == "" || *mib < 0 || *every <= 0 {
		log.Fatal("diskload: -dir is required; -mib must be >= 0 and -every > 0")
	}
	if err := os.MkdirAll(*dir, 0o700); err != nil {
		log.Fatal(err)
	}
	data := alignedData(int(*mib*(1<<20)+4095) &^ 4095)
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, os.Interrupt)
	tick := time.NewTicker(*every)
	defer tick.Stop()
	for round := 0; ; round++ {
		if err := writeRound(*dir, round, data, *fsync); err != nil {
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
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY|syscall.O_DIRECT, 0o600)
	if errors.Is(err, syscall.EINVAL) { // no direct I/O on this file system
		f, err = os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	}
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
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
