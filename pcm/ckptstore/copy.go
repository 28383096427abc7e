package ckptstore

import (
	"fmt"
	"io"
	"os"
)

// PutCopy stores a copy of a piece that another node's store holds (want, as that store's
// PutPiece returned it): a buddy's copy, so that losing the other node loses no committed
// checkpoint. r is read to EOF and must yield exactly want.Size bytes with want.Checksum:
// the copy is verified as it is written and only renamed into place, durable, if it
// matches; otherwise nothing is left and the error is a *CorruptError. The copy is stored
// like a piece of this node (the manifest, committed here too, lists this node in
// want.Copies), so OpenPiece and restart read it as any local piece.
func (s *Store) PutCopy(job string, seq uint64, want PieceInfo, r io.Reader) error {
	id := PieceID{Job: job, Seq: seq, Rank: want.Rank}
	algo, _, err := parseChecksum(want.Checksum)
	if err != nil {
		return fmt.Errorf("ckptstore: put copy of %s: %w: %v", id, ErrInvalidManifest, err)
	}
	vr, err := NewVerifyingReader(r, id, want)
	if err != nil {
		return err
	}
	h, _ := newHash(algo)
	// Every byte is written, so a recycled file's old data needs no clearing.
	_, err = s.putPieceWith(id, h, want.Size, func(f *os.File, _ *oldData) (int64, error) {
		bp := chunkPool.Get().(*[]byte)
		defer chunkPool.Put(bp)
		return io.CopyBuffer(f, vr, *bp)
	})
	if err != nil {
		return fmt.Errorf("ckptstore: put copy of %s: %w", id, err)
	}
	return nil
}
