package ckptstore_test

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/mpios/mpios/pcm/ckptstore"
	"github.com/mpios/mpios/pcm/state"
)

func Example() {
	dir, _ := os.MkdirTemp("", "ckpt")
	defer os.RemoveAll(dir)
	store, err := ckptstore.Open(dir, &ckptstore.Options{Node: "node1"})
	if err != nil {
		fmt.Println(err)
		return
	}

	// Checkpoint 7 at iteration 700: every rank writes its piece (in mpios, its serialized
	// pcm/state registry), then the coordinator commits the manifest.
	m := ckptstore.Manifest{Job: "heat", Seq: 7, Iteration: 700, Size: 2}
	for rank := range 2 {
		info, err := store.PutPiece("heat", 7, rank, strings.NewReader(fmt.Sprintf("state of rank %d", rank)))
		if err != nil {
			fmt.Println(err)
			return
		}
		m.Pieces = append(m.Pieces, info)
	}
	if err := store.CommitManifest(m); err != nil {
		fmt.Println(err)
		return
	}

	// On restart: find the newest checkpoint that verifies, and read a rank's piece.
	latest, skipped, err := store.LatestValid("heat")
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, s := range skipped {
		fmt.Printf("%v, falling back to checkpoint %d\n", s, latest.Seq)
	}
	rc, _, err := store.OpenPiece("heat", latest.Seq, 1)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer rc.Close()
	data, err := io.ReadAll(rc) // a damaged piece would end in a *CorruptError
	fmt.Printf("checkpoint %d, iteration %d: %q %v\n", latest.Seq, latest.Iteration, data, err)
	// Output: checkpoint 7, iteration 700: "state of rank 1" <nil>
}

func ExampleStore_LatestValid() {
	dir, _ := os.MkdirTemp("", "ckpt")
	defer os.RemoveAll(dir)
	store, _ := ckptstore.Open(dir, &ckptstore.Options{Node: "node1"})
	for seq := uint64(6); seq <= 7; seq++ {
		m := ckptstore.Manifest{Job: "heat", Seq: seq, Iteration: int64(seq) * 100, Size: 3}
		for rank := range 3 {
			info, _ := store.PutPiece("heat", seq, rank, strings.NewReader("piece data"))
			m.Pieces = append(m.Pieces, info)
		}
		_ = store.CommitManifest(m)
	}
	// Damage rank 2's piece of checkpoint 7 on disk.
	path := filepath.Join(dir, "heat", fmt.Sprintf("%020d", 7), "rank-2.piece")
	_ = os.WriteFile(path, []byte("piece DATA"), 0o600)

	latest, skipped, err := store.LatestValid("heat")
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, s := range skipped {
		fmt.Printf("%v, falling back to checkpoint %d\n", s, latest.Seq)
	}
	_ = store.Prune("heat", ckptstore.DefaultKeep)
	// Output: checkpoint 7 rank 2: checksum mismatch, falling back to checkpoint 6
}

func ExampleStore_PutPieceFrom() {
	dir, _ := os.MkdirTemp("", "ckpt")
	defer os.RemoveAll(dir)
	store, _ := ckptstore.Open(dir, &ckptstore.Options{Node: "node1"})

	// A rank's registered state goes straight into its piece.
	u, iter := []float64{1, 2, 3}, 41
	reg := state.NewRegistry()
	_ = reg.Register("u", &u)
	_ = reg.Register("iter", &iter)
	info, err := store.PutPieceFrom("heat", 1, 0, reg)
	if err != nil {
		fmt.Println(err)
		return
	}
	_ = store.CommitManifest(ckptstore.Manifest{Job: "heat", Seq: 1, Iteration: 41, Size: 1, Pieces: []ckptstore.PieceInfo{info}})

	// Restart: restore the registry from the verified piece.
	u, iter = nil, 0
	rc, _, err := store.OpenPiece("heat", 1, 0)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer rc.Close()
	if _, err := reg.ReadFrom(rc); err != nil {
		fmt.Println(err)
		return
	}
	// ReadFrom stops at the state trailer; reading on to EOF also checks the piece checksum.
	if _, err := io.Copy(io.Discard, rc); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(u, iter)
	// Output: [1 2 3] 41
}

// A buddy copy: node n2's store keeps a verified copy of n1's piece, and serves it once n1
// is gone.
func ExampleStore_PutCopy() {
	root, _ := os.MkdirTemp("", "ckpt")
	defer os.RemoveAll(root)
	n1, _ := ckptstore.Open(filepath.Join(root, "n1"), &ckptstore.Options{Node: "n1"})
	n2, _ := ckptstore.Open(filepath.Join(root, "n2"), &ckptstore.Options{Node: "n2"})
	info, err := n1.PutPiece("heat", 1, 0, strings.NewReader("state of rank 0"))
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := n2.PutCopy("heat", 1, info, strings.NewReader("state of rank 0")); err != nil {
		fmt.Println(err)
		return
	}
	info.Copies = []string{"n2"}
	m := ckptstore.Manifest{Job: "heat", Seq: 1, Size: 1, Pieces: []ckptstore.PieceInfo{info}}
	if err := n2.CommitManifest(m); err != nil {
		fmt.Println(err)
		return
	}
	os.RemoveAll(n1.Dir()) // n1 is lost with its disk
	rc, _, err := n2.OpenPiece("heat", 1, 0)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer rc.Close()
	data, err := io.ReadAll(rc)
	fmt.Printf("%q %v\n", data, err)
	fmt.Println(n2.PutCopy("heat", 2, info, strings.NewReader("damaged")) != nil)
	// Output:
	// "state of rank 0" <nil>
	// true
}
