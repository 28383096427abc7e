package ckptstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/mpios/mpios/internal/crc32c"
	"github.com/mpios/mpios/internal/job"
)

// MaxRanks bounds the rank numbers and manifest sizes the store accepts.
const MaxRanks = 1 << 20

const (
	manifestFile = "manifest.json"
	tmpPrefix    = ".tmp-"
	trashPrefix  = ".trash-"
	copyBufSize  = 1 << 20
)

// Options configure a Store.
type Options struct {
	// Node names this node in PieceInfo.Node; pieces recorded under other nodes are not
	// expected on this disk. Default: the host name.
	Node string
	// Checksum is the algorithm PutPiece uses: SHA256 (default) or CRC32C.
	Checksum string
	// Now returns the current time, for Manifest.Time. Default: time.Now.
	Now func() time.Time
	// CommitSizeOnly makes CommitManifest check only the size of local pieces that another
	// Store wrote (another rank's process), instead of re-reading them to verify their
	// checksum. Their writer computed the checksum from the data it wrote, and every load
	// verifies it, so damage is still caught, at restart rather than at commit. It spares the
	// committing process a read of every other rank's piece per checkpoint.
	CommitSizeOnly bool
}

// Store keeps checkpoints under a root directory on local disk.
type Store struct {
	root     string
	node     string
	algo     string
	now      func() time.Time
	sizeOnly bool // Options.CommitSizeOnly
	mem      bool // the store is in memory (a tmpfs): pieces are recycled (spare.go)

	mu      sync.Mutex
	jobLock map[string]*sync.RWMutex // per job: Put's rename (read) vs Commit and Prune (write)
	durable map[string]bool          // directories whose entry in their parent was fsynced
	written map[PieceID]putRecord    // pieces written by this Store, to skip re-hashing on Commit
}

// putRecord remembers what PutPiece wrote, and the file's identity to detect later changes.
type putRecord struct {
	info    PieceInfo
	modTime time.Time
}

// Open returns a Store rooted at dir, creating it (mode 0700) if missing. opts may be nil.
func Open(dir string, opts *Options) (*Store, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Node == "" {
		h, err := os.Hostname()
		if err != nil {
			return nil, fmt.Errorf("ckptstore: open %q: node name: %w", dir, err)
		}
		o.Node = h
	}
	if err := validNode(o.Node); err != nil {
		return nil, fmt.Errorf("ckptstore: open %q: %w", dir, err)
	}
	if o.Checksum == "" {
		o.Checksum = SHA256
	}
	if _, err := newHash(o.Checksum); err != nil {
		return nil, fmt.Errorf("ckptstore: open %q: %w", dir, err)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("ckptstore: open %q: %w", dir, err)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("ckptstore: open %q: %w", dir, err)
	}
	return &Store{
		root: abs, node: o.Node, algo: o.Checksum, now: o.Now, sizeOnly: o.CommitSizeOnly, mem: memoryBacked(abs),
		jobLock: make(map[string]*sync.RWMutex), durable: make(map[string]bool),
		written: make(map[PieceID]putRecord),
	}, nil
}

// Dir returns the store's root directory.
func (s *Store) Dir() string { return s.root }

// Node returns the node name the store records in PieceInfo.Node.
func (s *Store) Node() string { return s.node }

func validJob(id string) error {
	if err := job.ValidateID(id); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidName, err)
	}
	return nil
}

func validNode(node string) error {
	if node == "" || len(node) > 255 {
		return fmt.Errorf("%w: node %q: want 1 to 255 characters", ErrInvalidName, node)
	}
	for _, r := range node {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("%w: node %q: control character", ErrInvalidName, node)
		}
	}
	return nil
}

func validID(id PieceID) error {
	if err := validJob(id.Job); err != nil {
		return err
	}
	if id.Rank < 0 || id.Rank >= MaxRanks {
		return fmt.Errorf("%w: rank %d out of range", ErrInvalidName, id.Rank)
	}
	return nil
}

func seqName(seq uint64) string { return fmt.Sprintf("%020d", seq) }

// parseSeqName is the inverse of seqName; ok is false for anything else.
func parseSeqName(name string) (uint64, bool) {
	if len(name) != 20 {
		return 0, false
	}
	seq, err := strconv.ParseUint(name, 10, 64)
	return seq, err == nil
}

func pieceName(rank int) string { return "rank-" + strconv.Itoa(rank) + ".piece" }

func (s *Store) jobDir(job string) string { return filepath.Join(s.root, job) }

func (s *Store) seqDir(job string, seq uint64) string {
	return filepath.Join(s.root, job, seqName(seq))
}

func (s *Store) piecePath(id PieceID) string {
	return filepath.Join(s.seqDir(id.Job, id.Seq), pieceName(id.Rank))
}

func (s *Store) lockFor(job string) *sync.RWMutex {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.jobLock[job]
	if l == nil {
		l = new(sync.RWMutex)
		s.jobLock[job] = l
	}
	return l
}

// ensureDir creates dir (0700) if needed and makes its entry in parent durable. The parent's
// fsync is done once per directory per Store, by whoever gets there first, after the
// directory surely exists, so concurrent creators cannot skip it.
func (s *Store) ensureDir(dir string) error {
	s.mu.Lock()
	done := s.durable[dir]
	s.mu.Unlock()
	if done {
		return nil
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	if err := syncDir(filepath.Dir(dir)); err != nil {
		return err
	}
	s.mu.Lock()
	s.durable[dir] = true
	s.mu.Unlock()
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// committed reports whether seq has a manifest.
func (s *Store) committed(job string, seq uint64) (bool, error) {
	_, err := os.Stat(filepath.Join(s.seqDir(job, seq), manifestFile))
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	return err == nil, err
}

// PutPiece stores rank's piece of checkpoint seq of job, reading r to EOF. The data goes to a
// temporary file that is fsynced and then renamed into place (replacing an earlier,
// uncommitted attempt), and the directory is fsynced, so when PutPiece returns the piece is
// durable. The returned PieceInfo (size, checksum, this node) goes into the Manifest.
// Pieces of a committed checkpoint cannot be replaced (ErrCommitted).
func (s *Store) PutPiece(job string, seq uint64, rank int, r io.Reader) (PieceInfo, error) {
	id := PieceID{Job: job, Seq: seq, Rank: rank}
	info, err := s.putPiece(id, r)
	if err != nil {
		return PieceInfo{}, fmt.Errorf("ckptstore: put %s: %w", id, err)
	}
	return info, nil
}

// PutPieceFrom is PutPiece for a source that writes itself, such as a pcm/state Registry:
// src.WriteTo streams straight into the piece file, without a pipe.
func (s *Store) PutPieceFrom(job string, seq uint64, rank int, src io.WriterTo) (PieceInfo, error) {
	return s.PutPiece(job, seq, rank, writerToReader{src})
}

// writerToReader makes an io.WriterTo acceptable to PutPiece; io.Copy uses its WriteTo.
type writerToReader struct{ io.WriterTo }

func (writerToReader) Read([]byte) (int, error) {
	return 0, errors.New("writerToReader: Read called; use WriteTo")
}

// PutPieceBytes is PutPiece for a piece held in memory, such as a PieceBuffer's: it is meant
// to run in the background while the application computes. Two things spare the machine:
// blocks of DirectAlign zero bytes are not written (the file has holes there, which read as
// zeros; the checksum covers every byte), and when data starts at a DirectAlign boundary (a
// PieceBuffer's always does) and the file system allows it, the rest goes to disk with
// direct I/O, without the CPU copying it into the page cache first. data must not change
// until PutPieceBytes returns.
func (s *Store) PutPieceBytes(job string, seq uint64, rank int, data []byte) (PieceInfo, error) {
	id := PieceID{Job: job, Seq: seq, Rank: rank}
	h, _ := newHash(s.algo)
	// Each block is checksummed and tested for zeros while it is in the cache: one pass.
	summed := 0
	zero := func(off int) bool {
		b := data[off : off+DirectAlign]
		if off == summed {
			h.Write(b)
			summed += DirectAlign
		}
		return crc32c.IsZero(b)
	}
	info, err := s.putPieceWith(id, h, int64(len(data)), func(f *os.File, old *oldData) (int64, error) {
		err := writeSparse(f, data, zero, old)
		h.Write(data[len(data)&^(DirectAlign-1):])
		return int64(len(data)), err
	})
	if err != nil {
		return PieceInfo{}, fmt.Errorf("ckptstore: put %s: %w", id, err)
	}
	return info, nil
}

// PutPieceBuffer is PutPieceBytes for a PieceBuffer, which already knows its zero blocks and
// its CRC-32C: when the store checksums with CRC32C, the piece goes to disk without the CPU
// reading the buffer at all (with direct I/O, the disk reads it). b must not change until
// PutPieceBuffer returns.
func (s *Store) PutPieceBuffer(job string, seq uint64, rank int, b *PieceBuffer) (PieceInfo, error) {
	if s.algo != CRC32C {
		return s.PutPieceBytes(job, seq, rank, b.Bytes())
	}
	id := PieceID{Job: job, Seq: seq, Rank: rank}
	data := b.Bytes()
	info, err := s.putPieceWith(id, crcSum(b.CRC32C()), int64(len(data)), func(f *os.File, old *oldData) (int64, error) {
		return int64(len(data)), writeSparse(f, data, func(off int) bool { return b.zeroBlock(off / DirectAlign) }, old)
	})
	if err != nil {
		return PieceInfo{}, fmt.Errorf("ckptstore: put %s: %w", id, err)
	}
	return info, nil
}

// crcSum is a CRC-32C computed beforehand, in the shape of the hash.Hash that computes it.
type crcSum uint32

func (c crcSum) Write(p []byte) (int, error) { return len(p), nil }
func (c crcSum) Sum(b []byte) []byte         { return binary.BigEndian.AppendUint32(b, uint32(c)) }
func (c crcSum) Reset()                      {}
func (c crcSum) Size() int                   { return crc32.Size }
func (c crcSum) BlockSize() int              { return 1 }

// maxRun bounds one write of consecutive non-zero blocks.
const maxRun = 8 << 20

// writeSparse writes data to the file f, leaving holes in the file where the whole block at
// offset off is zero (zero(off), called for every block in order, some blocks twice), and
// counts the piece in directWrites when direct I/O was used. f is empty, or a recycled file
// of len(data) bytes that still holds old (its zero blocks are punched out).
func writeSparse(f *os.File, data []byte, zero func(off int) bool, old *oldData) error {
	whole := len(data) &^ (DirectAlign - 1)
	direct := false
	if whole > 0 && isAligned(data) {
		direct = setDirect(f, true)
	}
	for off := 0; off < whole; {
		if zero(off) {
			end := off + DirectAlign
			for end < whole && zero(end) {
				end += DirectAlign
			}
			if err := old.clear(int64(off), int64(end)); err != nil {
				return err
			}
			off = end
			continue
		}
		end := off + DirectAlign
		for end < whole && end-off < maxRun && !zero(end) {
			end += DirectAlign
		}
		if _, err := f.WriteAt(data[off:end], int64(off)); err != nil {
			if direct && errors.Is(err, syscall.EINVAL) {
				// The file system took the flag but not the I/O: do it plainly.
				if direct = !setDirect(f, false); direct {
					return err
				}
				continue
			}
			return err
		}
		off = end
	}
	if direct {
		if !setDirect(f, false) {
			return errors.New("cannot turn direct I/O off for the last block")
		}
		directWrites.Add(1)
	}
	if tail := data[whole:]; !crc32c.IsZero(tail) {
		if _, err := f.WriteAt(tail, int64(whole)); err != nil {
			return err
		}
	} else if err := old.clear(int64(whole), int64(len(data))); err != nil {
		return err
	}
	return f.Truncate(int64(len(data)))
}

// directWrites counts the pieces written with direct I/O, for tests.
var directWrites atomic.Int64

func (s *Store) putPiece(id PieceID, r io.Reader) (PieceInfo, error) {
	h, _ := newHash(s.algo)
	return s.putPieceWith(id, h, -1, func(f *os.File, _ *oldData) (int64, error) {
		return io.CopyBuffer(io.MultiWriter(f, h), r, make([]byte, copyBufSize))
	})
}

// putPieceWith stores piece id, whose data write puts into the temporary file f; h holds
// the data's checksum once write returns. A piece of known size (size >= 0) in a memory
// store may be written into a recycled file (spare.go): then old, given to write, tells
// what that file still holds; a new, empty file has a nil old.
func (s *Store) putPieceWith(id PieceID, h hash.Hash, size int64, write func(f *os.File, old *oldData) (int64, error)) (info PieceInfo, err error) {
	if err := validID(id); err != nil {
		return info, err
	}
	if c, err := s.committed(id.Job, id.Seq); err != nil || c {
		if err == nil {
			err = ErrCommitted
		}
		return info, err
	}
	dir := s.seqDir(id.Job, id.Seq)
	if err := s.ensureDir(s.jobDir(id.Job)); err != nil {
		return info, err
	}
	if err := s.ensureDir(dir); err != nil {
		return info, err
	}
	var f *os.File
	var old *oldData
	if s.mem && size >= 0 {
		if f = s.takeSpare(id, dir, size); f != nil {
			if old, err = recycledData(f); err != nil {
				f.Close()
				os.Remove(f.Name())
				f, old = nil, nil
			}
		}
	}
	if f == nil {
		if f, err = os.CreateTemp(dir, tmpPrefix+pieceName(id.Rank)+"-*"); err != nil {
			return info, err
		}
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
		}
	}()
	n, err := write(f, old)
	if err != nil {
		return info, err
	}
	if err = f.Sync(); err != nil {
		return info, err
	}
	if err = f.Close(); err != nil {
		return info, err
	}
	info = PieceInfo{Rank: id.Rank, Node: s.node, Size: n, Checksum: formatChecksum(s.algo, h)}

	// The commit check and the rename must not interleave with CommitManifest, or a commit
	// could verify a piece that is then replaced.
	l := s.lockFor(id.Job)
	l.RLock()
	defer l.RUnlock()
	if c, err2 := s.committed(id.Job, id.Seq); err2 != nil || c {
		if err2 == nil {
			err2 = ErrCommitted
		}
		return info, err2
	}
	final := s.piecePath(id)
	if err = s.renameCounted(tmp, final, n); err != nil {
		return info, err
	}
	if err = syncDir(dir); err != nil {
		return info, err
	}
	if st, err2 := os.Stat(final); err2 == nil {
		s.mu.Lock()
		s.written[id] = putRecord{info: info, modTime: st.ModTime()}
		s.mu.Unlock()
	}
	return info, nil
}

// OpenPiece opens rank's piece of the committed checkpoint seq of job. The returned reader
// verifies the data against the manifest: it returns io.EOF only if size and checksum match
// and a *CorruptError otherwise. A piece the manifest places on another node and that is not
// on this disk gives ErrNotLocal; a missing local one ErrNotFound. A piece whose size already
// differs from the manifest's is reported as a *CorruptError without opening it. The reader
// also has a Len() int method (bytes still expected), which state.Registry.ReadFrom uses to
// size its buffers; note that ReadFrom stops at the state trailer, so read on to EOF to have
// the piece checksum checked as well.
func (s *Store) OpenPiece(job string, seq uint64, rank int) (io.ReadCloser, PieceInfo, error) {
	id := PieceID{Job: job, Seq: seq, Rank: rank}
	rc, info, err := s.openPiece(id, nil)
	if err != nil {
		return nil, info, fmt.Errorf("ckptstore: open %s: %w", id, err)
	}
	return rc, info, nil
}

// OpenPieceOf is OpenPiece for a checkpoint whose manifest the caller already has (read from
// another node's store): the piece is checked against m's entry.
func (s *Store) OpenPieceOf(m Manifest, rank int) (io.ReadCloser, PieceInfo, error) {
	id := PieceID{Job: m.Job, Seq: m.Seq, Rank: rank}
	rc, info, err := s.openPiece(id, &m)
	if err != nil {
		return nil, info, fmt.Errorf("ckptstore: open %s: %w", id, err)
	}
	return rc, info, nil
}

// openPiece opens id, checking it against m's entry (m is read from disk if nil).
func (s *Store) openPiece(id PieceID, m *Manifest) (io.ReadCloser, PieceInfo, error) {
	if err := validID(id); err != nil {
		return nil, PieceInfo{}, err
	}
	if m == nil {
		mm, err := s.readManifest(id.Job, id.Seq)
		if err != nil {
			return nil, PieceInfo{}, err
		}
		m = &mm
	}
	if id.Rank >= len(m.Pieces) {
		return nil, PieceInfo{}, fmt.Errorf("%w: rank %d, checkpoint has %d ranks", ErrNotFound, id.Rank, len(m.Pieces))
	}
	info := m.Pieces[id.Rank]
	f, err := os.Open(s.piecePath(id))
	if errors.Is(err, fs.ErrNotExist) {
		if info.Node != s.node {
			return nil, info, fmt.Errorf("on node %q: %w", info.Node, ErrNotLocal)
		}
		return nil, info, fmt.Errorf("piece file: %w", ErrNotFound)
	}
	if err != nil {
		return nil, info, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, info, err
	}
	if st.Size() != info.Size {
		f.Close()
		reason := fmt.Sprintf("size %d, manifest says %d", st.Size(), info.Size)
		if st.Size() < info.Size {
			reason = fmt.Sprintf("truncated: %d of %d bytes", st.Size(), info.Size)
		}
		return nil, info, id.corrupt(reason, nil)
	}
	vr, err := NewVerifyingReader(f, id, info)
	if err != nil {
		f.Close()
		return nil, info, err
	}
	return pieceReader{vr.(*verifyingReader), f}, info, nil
}

// pieceReader is what OpenPiece returns: a verifying reader (with Len, which lets
// state.Registry.ReadFrom size its buffers) that closes the file.
type pieceReader struct {
	*verifyingReader
	f *os.File
}

func (p pieceReader) Close() error { return p.f.Close() }

// VerifyPiece reads rank's piece of the committed checkpoint seq of job in full and checks
// its size and checksum against the manifest. Errors are as for OpenPiece.
func (s *Store) VerifyPiece(job string, seq uint64, rank int) (PieceInfo, error) {
	id := PieceID{Job: job, Seq: seq, Rank: rank}
	info, err := s.verifyPiece(id, nil)
	if err != nil {
		return info, fmt.Errorf("ckptstore: verify %s: %w", id, err)
	}
	return info, nil
}

func (s *Store) verifyPiece(id PieceID, m *Manifest) (PieceInfo, error) {
	rc, info, err := s.openPiece(id, m)
	if err != nil {
		return info, err
	}
	defer rc.Close()
	// Not io.Copy: io.Discard's ReadFrom would read in small pieces.
	buf := make([]byte, copyBufSize)
	for {
		_, err := rc.Read(buf)
		if err == io.EOF {
			return info, nil
		}
		if err != nil {
			return info, err
		}
	}
}

// isTemp reports whether a directory entry is a temporary file of this package.
func isTemp(name string) bool { return strings.HasPrefix(name, tmpPrefix) }
