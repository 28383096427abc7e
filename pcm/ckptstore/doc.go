// Package ckptstore is the durable storage of coordinated checkpoints on one node's disk.
//
// A coordinated checkpoint of a job is a set of pieces, one per rank, plus a manifest that
// ties them together. Each rank's piece is written with PutPiece (which returns its size and
// checksum); once every piece is durable, the coordinating code gathers the PieceInfos into a
// Manifest and calls CommitManifest. Only committed checkpoints are visible: a crash at any
// point before the manifest's rename leaves at most invisible leftovers that Prune removes.
// Restart uses LatestValid, which verifies the newest checkpoint and falls back to older ones,
// reporting why each newer one was skipped.
//
// # Several nodes
//
// Pieces may live on different nodes: each PieceInfo records the node that stores it, and a
// Store only reads, verifies and refuses on account of the pieces whose node is its own (see
// Options.Node). Commit the same Manifest on every node that holds a piece (each verifies its
// own pieces), then any node's pcmd can serve OpenPiece for its pieces over the network.
// PieceSource is the interface a remote client can implement; the receiving end verifies the
// transferred bytes with NewVerifyingReader against the PieceInfo from the manifest.
//
// # Layout
//
//	<root>/<job>/<seq, 20 digits>/rank-<rank>.piece   a rank's piece
//	<root>/<job>/<seq, 20 digits>/manifest.json       present only once committed
//	<root>/<job>/<seq, 20 digits>/.tmp-*              files being written
//	<root>/<job>/.trash-*                             checkpoints being removed by Prune
//
// Every file is written to a temporary name, fsynced, renamed into place, and its directory
// fsynced. Directories are created 0700 and files 0600.
//
// A Store is safe for concurrent use by multiple goroutines; different ranks may write their
// pieces at once. Several processes may share a root as long as a single one commits and
// prunes each job.
package ckptstore
