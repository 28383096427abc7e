package launch

import (
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mpios/mpios/internal/job"
	"github.com/mpios/mpios/internal/jobrecord"
	"github.com/mpios/mpios/internal/natsembed"
	"github.com/mpios/mpios/internal/nodeclient"
	"github.com/mpios/mpios/internal/rankproc"
)

// Names that moved out of this package when it was split by concept, kept while their users
// outside mpirun (internal/pcmd, cmd/pcmd) move to the new packages.

// Process is a started rank.
//
// Deprecated: use rankproc.Process.
type Process = rankproc.Process

// Spec describes one rank to start.
//
// Deprecated: use rankproc.Spec.
type Spec = rankproc.Spec

// Stream names one of a rank's output streams.
//
// Deprecated: use rankproc.Stream.
type Stream = rankproc.Stream

// Local is the Starter for ranks on this machine.
//
// Deprecated: use rankproc.Local.
type Local = rankproc.Local

// Record describes a running job.
//
// Deprecated: use jobrecord.Record.
type Record = jobrecord.Record

// RuntimeDir returns the per-user directory holding job records.
//
// Deprecated: use jobrecord.RuntimeDir.
func RuntimeDir() string { return jobrecord.RuntimeDir() }

// RecordPath is the record file of job id in dir.
//
// Deprecated: use jobrecord.RecordPath.
func RecordPath(dir, id string) string { return jobrecord.RecordPath(dir, id) }

// ReadRecord reads a record file.
//
// Deprecated: use jobrecord.ReadRecord.
func ReadRecord(path string) (Record, error) { return jobrecord.ReadRecord(path) }

// RedactURL returns a NATS URL without its credentials.
//
// Deprecated: use natsembed.RedactURL.
func RedactURL(s string) string { return natsembed.RedactURL(s) }

// DiscoverNodes asks every pcmd for its view of the nodes.
//
// Deprecated: use nodeclient.DiscoverNodes.
func DiscoverNodes(nc *nats.Conn, wait time.Duration) ([]job.NodeView, error) {
	return nodeclient.DiscoverNodes(nc, wait)
}
