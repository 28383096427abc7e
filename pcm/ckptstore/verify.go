package ckptstore

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"math"
	"strings"

	"github.com/mpios/mpios/internal/crc32c"
)

// Checksum algorithms, used as the prefix of PieceInfo.Checksum ("sha256:<hex>").
const (
	SHA256 = "sha256"
	CRC32C = "crc32c" // faster, weaker: detects accidental damage only
)

var castagnoli = crc32c.Table

func newHash(algo string) (hash.Hash, error) {
	switch algo {
	case SHA256:
		return sha256.New(), nil
	case CRC32C:
		return crc32.New(castagnoli), nil
	}
	return nil, fmt.Errorf("unknown checksum algorithm %q", algo)
}

// parseChecksum splits "algo:hex" and checks the digest length.
func parseChecksum(s string) (algo string, sum []byte, err error) {
	algo, hx, ok := strings.Cut(s, ":")
	if !ok {
		return "", nil, fmt.Errorf("checksum %q: want algorithm:hex", s)
	}
	h, err := newHash(algo)
	if err != nil {
		return "", nil, err
	}
	sum, err = hex.DecodeString(hx)
	if err != nil || len(sum) != h.Size() {
		return "", nil, fmt.Errorf("checksum %q: want %d hex-encoded bytes", s, h.Size())
	}
	return algo, sum, nil
}

func formatChecksum(algo string, h hash.Hash) string {
	return algo + ":" + hex.EncodeToString(h.Sum(nil))
}

// PieceID names a piece: what a remote client asks a node's pcmd for.
type PieceID struct {
	Job  string `json:"job"`
	Seq  uint64 `json:"seq"`
	Rank int    `json:"rank"`
}

// String formats id as "job J checkpoint S rank R".
func (id PieceID) String() string {
	return fmt.Sprintf("job %s checkpoint %d rank %d", id.Job, id.Seq, id.Rank)
}

func (id PieceID) corrupt(reason string, err error) *CorruptError {
	return &CorruptError{Job: id.Job, Seq: id.Seq, Rank: id.Rank, Reason: reason, Err: err}
}

// PieceSource opens committed pieces. *Store implements it for local disk; a network client
// of another node's pcmd can implement it too, wrapping the received bytes with
// NewVerifyingReader.
type PieceSource interface {
	OpenPiece(job string, seq uint64, rank int) (io.ReadCloser, PieceInfo, error)
}

var _ PieceSource = (*Store)(nil)

// verifyingReader passes data through while hashing it and checks size and checksum at EOF.
type verifyingReader struct {
	r    io.Reader
	id   PieceID
	want PieceInfo
	sum  []byte
	h    hash.Hash
	n    int64
	err  error // sticky
}

// NewVerifyingReader returns a reader of r that checks the data against info: once r is
// exhausted it returns io.EOF only if exactly info.Size bytes with checksum info.Checksum
// were read, and a *CorruptError otherwise (also as soon as more than info.Size bytes
// arrive). Use it on the receiving end of a piece transferred from another node. The reader
// also has a Len() int method: the bytes still expected.
func NewVerifyingReader(r io.Reader, id PieceID, info PieceInfo) (io.Reader, error) {
	algo, sum, err := parseChecksum(info.Checksum)
	if err != nil {
		return nil, fmt.Errorf("ckptstore: verify %s: %w: %v", id, ErrInvalidManifest, err)
	}
	h, _ := newHash(algo)
	return &verifyingReader{r: r, id: id, want: info, sum: sum, h: h}, nil
}

// Len returns the number of bytes still expected, so that consumers which size buffers by
// the input remaining (such as state.Registry.ReadFrom) can do so.
func (v *verifyingReader) Len() int {
	return int(min(max(v.want.Size-v.n, 0), math.MaxInt))
}

func (v *verifyingReader) Read(p []byte) (int, error) {
	if v.err != nil {
		return 0, v.err
	}
	n, err := v.r.Read(p)
	v.h.Write(p[:n])
	v.n += int64(n)
	if v.n > v.want.Size {
		v.err = v.id.corrupt(fmt.Sprintf("longer than the recorded %d bytes", v.want.Size), nil)
		return n, v.err
	}
	if err == io.EOF {
		switch {
		case v.n < v.want.Size:
			v.err = v.id.corrupt(fmt.Sprintf("truncated: %d of %d bytes", v.n, v.want.Size), nil)
		case !bytes.Equal(v.h.Sum(nil), v.sum):
			v.err = v.id.corrupt("checksum mismatch", nil)
		default:
			v.err = io.EOF
		}
		return n, v.err
	}
	if err != nil {
		err = fmt.Errorf("ckptstore: read %s: %w", v.id, err)
	}
	return n, err
}
