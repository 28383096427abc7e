package job_test

import (
	"testing"
	"time"

	"github.com/mpios/mpios/internal/job"
)

// The decoders of the remaining messages: buddy copies, the ranks' recovery reports
// (liveness, committed, restored), resizes, malleability and drains.

func FuzzDecodePieceCopyRequest(f *testing.F) {
	fuzzDecode(f, func(r job.PieceCopyRequest) error { return r.Validate() },
		job.PieceCopyRequest{PieceRequest: job.PieceRequest{Job: "j", Seq: 2, Rank: 1}, Size: 4096, Checksum: "crc32c:01020304", Sparse: true, From: "n1"})
}

func FuzzDecodeAlive(f *testing.F) {
	fuzzDecode(f, func(a job.Alive) error { return a.Validate(4) }, job.Alive{Rank: 3, PID: 100, Iteration: 7}, job.Alive{Rank: 0, Done: true, Iteration: -1})
}

func FuzzDecodeCommitted(f *testing.F) {
	fuzzDecode[job.Committed](f, nil, job.Committed{Seq: 2, Iteration: 16, Bytes: 1 << 20, Applied: 3})
}

func FuzzDecodeRestored(f *testing.F) {
	fuzzDecode[job.Restored](f, nil, job.Restored{From: "j", Seq: 2, Iteration: 16}, job.Restored{Error: "no checkpoint"})
}

func FuzzDecodeResizeHello(f *testing.F) {
	fuzzDecode(f, func(h job.ResizeHello) error { return h.Validate(6, 4) }, job.ResizeHello{Seq: 3, Rank: 5, OldRank: -1, Addr: "10.0.0.2:7000", PID: 42, Iteration: 9})
}

func FuzzDecodeResizeReport(f *testing.F) {
	fuzzDecode[job.ResizeReport](f, nil, job.ResizeReport{Seq: 4, OK: true, Iteration: 10, Pause: 200 * time.Millisecond, Bytes: 1 << 26})
}

func FuzzDecodeResizeGone(f *testing.F) {
	fuzzDecode[job.ResizeGone](f, nil, job.ResizeGone{Seq: 4, Reason: "joiner died"})
}

func FuzzDecodeMalleable(f *testing.F) {
	fuzzDecode[job.Malleable](f, nil, job.Malleable{Distributed: true})
}

func FuzzDecodeDrainRequest(f *testing.F) {
	fuzzDecode(f, job.DrainRequest.Validate, job.DrainRequest{Reason: "maintenance"})
}

func FuzzDecodeDrainReply(f *testing.F) {
	fuzzDecode(f, job.DrainReply.Validate, job.DrainReply{Node: "n1", Moves: []job.DrainMove{{Job: "j", Ranks: []int{0, 2}, To: "n2", Accepted: true}}}, job.DrainReply{Node: "n1", Error: "x"})
}
