package ckptstore

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// ManifestVersion is the manifest format version written by CommitManifest.
const ManifestVersion = 1

// maxManifestBytes bounds how much of a manifest file is read.
const maxManifestBytes = 64 << 20

// PieceInfo describes one rank's piece of a checkpoint.
type PieceInfo struct {
	Rank     int    `json:"rank"`
	Node     string `json:"node"`     // the node whose store holds the piece
	Size     int64  `json:"size"`     // bytes
	Checksum string `json:"checksum"` // "sha256:<hex>" or "crc32c:<hex>"
	// Copies names the other nodes whose stores hold a verified copy of the piece (a buddy,
	// as in Charm++'s double checkpointing): a restart reads one of them when Node is gone.
	Copies []string `json:"copies,omitempty"`
}

// Manifest describes a coordinated checkpoint. It is stored as indented JSON.
type Manifest struct {
	Version   int               `json:"version"` // ManifestVersion; 0 is filled in on commit
	Job       string            `json:"job"`
	Seq       uint64            `json:"seq"`            // checkpoint number, increasing per job
	Iteration int64             `json:"iteration"`      // application iteration the state belongs to
	Size      int               `json:"size"`           // number of ranks
	Time      time.Time         `json:"time"`           // commit time; zero is filled in on commit
	Pieces    []PieceInfo       `json:"pieces"`         // indexed by rank; len(Pieces) == Size
	Meta      map[string]string `json:"meta,omitempty"` // free-form annotations of the caller
}

// validate checks m's shape (not its pieces).
func (m *Manifest) validate() error {
	if err := validJob(m.Job); err != nil {
		return err
	}
	if m.Version != 0 && m.Version != ManifestVersion {
		return fmt.Errorf("%w: version %d, want %d", ErrInvalidManifest, m.Version, ManifestVersion)
	}
	if m.Size < 1 || m.Size > MaxRanks {
		return fmt.Errorf("%w: size %d", ErrInvalidManifest, m.Size)
	}
	if len(m.Pieces) != m.Size {
		return fmt.Errorf("%w: %d pieces for %d ranks", ErrInvalidManifest, len(m.Pieces), m.Size)
	}
	for i, p := range m.Pieces {
		if p.Rank != i {
			return fmt.Errorf("%w: pieces[%d] is rank %d", ErrInvalidManifest, i, p.Rank)
		}
		if err := validNode(p.Node); err != nil {
			return fmt.Errorf("%w: rank %d: %v", ErrInvalidManifest, i, err)
		}
		for _, c := range p.Copies {
			if err := validNode(c); err != nil {
				return fmt.Errorf("%w: rank %d: copy: %v", ErrInvalidManifest, i, err)
			}
		}
		if p.Size < 0 {
			return fmt.Errorf("%w: rank %d: size %d", ErrInvalidManifest, i, p.Size)
		}
		if _, _, err := parseChecksum(p.Checksum); err != nil {
			return fmt.Errorf("%w: rank %d: %v", ErrInvalidManifest, i, err)
		}
	}
	return nil
}

// CommitManifest makes checkpoint m.Seq of m.Job visible. Call it only once every piece is
// durable. The pieces m places on this node are checked first: a missing one gives
// ErrNotFound, one whose size or checksum differs a *CorruptError (pieces written by this
// Store and unchanged since are checked against what PutPiece computed; others are re-read,
// or only their size checked with Options.CommitSizeOnly).
// The manifest is then written atomically: temporary file, fsync, rename, directory fsync. A
// checkpoint commits once; committing it again gives ErrCommitted.
func (s *Store) CommitManifest(m Manifest) error {
	if err := s.commit(&m); err != nil {
		return fmt.Errorf("ckptstore: commit job %s checkpoint %d: %w", m.Job, m.Seq, err)
	}
	return nil
}

func (s *Store) commit(m *Manifest) error {
	if err := m.validate(); err != nil {
		return err
	}
	l := s.lockFor(m.Job)
	l.Lock()
	defer l.Unlock()
	if c, err := s.committed(m.Job, m.Seq); err != nil || c {
		if err == nil {
			err = ErrCommitted
		}
		return err
	}
	for _, p := range m.Pieces {
		if p.Node != s.node {
			continue
		}
		if err := s.checkPut(PieceID{Job: m.Job, Seq: m.Seq, Rank: p.Rank}, p, m); err != nil {
			return err
		}
	}
	m.Version = ManifestVersion
	if m.Time.IsZero() {
		m.Time = s.now()
	}
	m.Time = m.Time.UTC()
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	dir := s.seqDir(m.Job, m.Seq)
	if err := s.ensureDir(s.jobDir(m.Job)); err != nil {
		return err
	}
	if err := s.ensureDir(dir); err != nil {
		return err
	}
	if err := s.writeFileAtomic(dir, manifestFile, append(data, '\n')); err != nil {
		return err
	}
	s.forget(m.Job, func(seq uint64) bool { return seq == m.Seq })
	return nil
}

// checkPut verifies a local piece for commit, cheaply when this Store wrote it.
func (s *Store) checkPut(id PieceID, want PieceInfo, m *Manifest) error {
	s.mu.Lock()
	rec, ok := s.written[id]
	s.mu.Unlock()
	if ok {
		st, err := os.Stat(s.piecePath(id))
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("rank %d: piece file: %w", id.Rank, ErrNotFound)
		}
		if err == nil && st.ModTime().Equal(rec.modTime) && st.Size() == rec.info.Size {
			if rec.info.Size != want.Size || rec.info.Checksum != want.Checksum {
				return id.corrupt(fmt.Sprintf("manifest records %d bytes %s, piece has %d bytes %s",
					want.Size, want.Checksum, rec.info.Size, rec.info.Checksum), nil)
			}
			return nil
		}
	}
	if s.sizeOnly {
		return s.checkSize(id, want)
	}
	_, err := s.verifyPiece(id, m)
	if err != nil && !errors.As(err, new(*CorruptError)) {
		err = fmt.Errorf("rank %d: %w", id.Rank, err)
	}
	return err
}

// checkSize checks that piece id exists with the size the manifest records.
func (s *Store) checkSize(id PieceID, want PieceInfo) error {
	st, err := os.Stat(s.piecePath(id))
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("rank %d: piece file: %w", id.Rank, ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("rank %d: %w", id.Rank, err)
	}
	if st.Size() != want.Size {
		return id.corrupt(fmt.Sprintf("size %d, manifest says %d", st.Size(), want.Size), nil)
	}
	return nil
}

// forget drops PutPiece records of job's checkpoints selected by drop.
func (s *Store) forget(job string, drop func(seq uint64) bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id := range s.written {
		if id.Job == job && drop(id.Seq) {
			delete(s.written, id)
		}
	}
}

// writeFileAtomic writes dir/name through a fsynced temporary file and a rename, then fsyncs
// dir.
func (s *Store) writeFileAtomic(dir, name string, data []byte) (err error) {
	f, err := os.CreateTemp(dir, tmpPrefix+name+"-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if _, err = f.Write(data); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	if err = s.renameCounted(f.Name(), filepath.Join(dir, name), int64(len(data))); err != nil {
		return err
	}
	return syncDir(dir)
}

// readManifest reads and checks the committed manifest of job's checkpoint seq.
func (s *Store) readManifest(job string, seq uint64) (Manifest, error) {
	var m Manifest
	f, err := os.Open(filepath.Join(s.seqDir(job, seq), manifestFile))
	if errors.Is(err, fs.ErrNotExist) {
		return m, fmt.Errorf("manifest of checkpoint %d: %w", seq, ErrNotFound)
	}
	if err != nil {
		return m, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxManifestBytes+1))
	if err != nil {
		return m, err
	}
	bad := func(reason string, err error) error {
		return &CorruptError{Job: job, Seq: seq, Rank: -1, Reason: reason, Err: err}
	}
	if len(data) > maxManifestBytes {
		return m, bad("manifest too large", nil)
	}
	if err := json.Unmarshal(data, &m); err != nil {
		return m, bad("manifest unreadable", err)
	}
	if m.Version > ManifestVersion {
		return m, bad(fmt.Sprintf("manifest version %d is newer than %d", m.Version, ManifestVersion), nil)
	}
	if err := m.validate(); err != nil {
		return m, bad("manifest invalid", err)
	}
	if m.Job != job || m.Seq != seq {
		return m, bad(fmt.Sprintf("manifest is for job %s checkpoint %d", m.Job, m.Seq), nil)
	}
	return m, nil
}

// Manifest returns the committed manifest of job's checkpoint seq (ErrNotFound if there is
// none). Pieces are not verified.
func (s *Store) Manifest(job string, seq uint64) (Manifest, error) {
	if err := validJob(job); err != nil {
		return Manifest{}, fmt.Errorf("ckptstore: manifest: %w", err)
	}
	m, err := s.readManifest(job, seq)
	if err != nil {
		return m, fmt.Errorf("ckptstore: job %s: %w", job, err)
	}
	return m, nil
}

// candidate is a committed checkpoint directory: its manifest or why it cannot be read.
type candidate struct {
	seq uint64
	m   Manifest
	err error
}

// seqDirs lists job's checkpoint directories, newest first, with whether each is committed.
func (s *Store) seqDirs(job string) (seqs []uint64, committed map[uint64]bool, err error) {
	ents, err := os.ReadDir(s.jobDir(job))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	committed = make(map[uint64]bool)
	for _, e := range ents {
		seq, ok := parseSeqName(e.Name())
		if !ok || !e.IsDir() {
			continue
		}
		seqs = append(seqs, seq)
		c, err := s.committed(job, seq)
		if err != nil {
			return nil, nil, err
		}
		committed[seq] = c
	}
	slices.Sort(seqs)
	slices.Reverse(seqs)
	return seqs, committed, nil
}

// candidates returns job's committed checkpoints, newest first.
func (s *Store) candidates(job string) ([]candidate, error) {
	seqs, committed, err := s.seqDirs(job)
	if err != nil {
		return nil, err
	}
	var cs []candidate
	for _, seq := range seqs {
		if committed[seq] {
			m, err := s.readManifest(job, seq)
			cs = append(cs, candidate{seq: seq, m: m, err: err})
		}
	}
	return cs, nil
}

// Checkpoints returns job's committed checkpoints, newest first, without verifying pieces.
// Checkpoints whose manifest cannot be read are left out (LatestValid reports them). A job
// with no checkpoints gives an empty list.
func (s *Store) Checkpoints(job string) ([]Manifest, error) {
	if err := validJob(job); err != nil {
		return nil, fmt.Errorf("ckptstore: checkpoints: %w", err)
	}
	l := s.lockFor(job)
	l.RLock()
	defer l.RUnlock()
	cs, err := s.candidates(job)
	if err != nil {
		return nil, fmt.Errorf("ckptstore: checkpoints of job %s: %w", job, err)
	}
	var ms []Manifest
	for _, c := range cs {
		if c.err == nil {
			ms = append(ms, c.m)
		}
	}
	return ms, nil
}

// Latest returns the newest committed checkpoint of job whose local pieces verify, or an
// error matching ErrNoCheckpoint. Use LatestValid to learn what was skipped.
func (s *Store) Latest(job string) (Manifest, error) {
	m, _, err := s.LatestValid(job)
	return m, err
}

// LatestValid returns the newest committed checkpoint of job whose manifest reads and whose
// local pieces (those on this node) all verify by size and checksum, reading them in full.
// Newer checkpoints that fail are returned in skipped, newest first, one Skipped per bad
// manifest or bad piece, so that the caller can report e.g. "checkpoint 7 rank 2: checksum
// mismatch, falling back to checkpoint 6". If none verifies, the error matches
// ErrNoCheckpoint and skipped still says why.
func (s *Store) LatestValid(job string) (m Manifest, skipped []Skipped, err error) {
	if err := validJob(job); err != nil {
		return m, nil, fmt.Errorf("ckptstore: latest: %w", err)
	}
	// Hold off Prune and CommitManifest, so checkpoints do not vanish mid-verification.
	l := s.lockFor(job)
	l.RLock()
	defer l.RUnlock()
	cs, err := s.candidates(job)
	if err != nil {
		return m, nil, fmt.Errorf("ckptstore: latest of job %s: %w", job, err)
	}
	for _, c := range cs {
		if c.err != nil {
			skipped = append(skipped, skippedFrom(c.seq, -1, c.err))
			continue
		}
		problems := s.verifyLocal(&c.m)
		if len(problems) == 0 {
			return c.m, skipped, nil
		}
		skipped = append(skipped, problems...)
	}
	return m, skipped, fmt.Errorf("ckptstore: job %s: %w (%d committed checkpoints checked)", job, ErrNoCheckpoint, len(cs))
}

// verifyLocal verifies every piece of m stored on this node and describes each failure.
func (s *Store) verifyLocal(m *Manifest) []Skipped {
	var problems []Skipped
	for _, p := range m.Pieces {
		if p.Node != s.node {
			continue
		}
		// Any failure disqualifies the checkpoint, an unreadable file (permissions, I/O
		// error) as much as a corrupt one: restart must not depend on it.
		if _, err := s.verifyPiece(PieceID{Job: m.Job, Seq: m.Seq, Rank: p.Rank}, m); err != nil {
			problems = append(problems, skippedFrom(m.Seq, p.Rank, err))
		}
	}
	return problems
}

// Equal reports whether p and q describe the same piece in the same places.
func (p PieceInfo) Equal(q PieceInfo) bool {
	return p.Rank == q.Rank && p.Node == q.Node && p.Size == q.Size && p.Checksum == q.Checksum &&
		slices.Equal(p.Copies, q.Copies)
}
