package pcm

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/mpios/mpios/internal/ctlauth"
	"github.com/mpios/mpios/internal/ctlplane"
	"github.com/mpios/mpios/internal/job"
	"github.com/mpios/mpios/internal/reconf"
	"github.com/mpios/mpios/internal/rewire"
	"github.com/nats-io/nats.go"
)

// control is a launched rank's link to its supervisor (mpirun): it collects the entries of
// the job's reconfiguration log (reconf.Log) as they are published, and carries a
// migration's requests and reports (rankreconf.Control). It uses the process's one
// control-plane connection, which mpi owns.
type control struct {
	env  job.Env
	nc   *nats.Conn
	auth *ctlauth.JobChannel // nil: messages in clear (a world mpi did not launch)
	sub  *nats.Subscription
	log  io.Writer

	mu      sync.Mutex
	entries []reconf.Reconfiguration // entries[i].Seq == i+1
}

// startControl subscribes to the job's reconfiguration log and fetches the log so far.
func startControl(l *rewire.Launched, log io.Writer) (*control, error) {
	c := &control{env: l.Env, nc: l.Conn, auth: l.Auth, log: log}
	sub, err := c.nc.Subscribe(job.ReconfSubject(c.env.JobID), func(m *nats.Msg) { c.take(m.Subject, m.Data) })
	if err != nil {
		return nil, fmt.Errorf("pcm: subscribe to reconfigurations: %w", err)
	}
	c.sub = sub
	// Entries published before the subscription: ask for the log. A launcher that does
	// not answer (older, or busy) costs nothing: the next publication carries everything.
	_ = ctlplane.Request(c.nc, job.ReconfGetSubject(c.env.JobID), nil, 2*time.Second, func(m *nats.Msg) error {
		var l reconf.Log
		if err := c.decode(m.Subject, m.Data, &l); err != nil {
			return err // anyone can answer first: only the launcher's log counts
		}
		c.merge(l)
		return nil
	})
	return c, nil
}

// take merges a published log.
func (c *control) take(subject string, data []byte) {
	var l reconf.Log
	if err := c.decode(subject, data, &l); err != nil {
		fmt.Fprintf(c.log, "pcm: rank %d: ignoring a malformed reconfiguration log: %v\n", c.env.Rank, err)
		return
	}
	c.merge(l)
}

// merge takes the entries of l, a log the launcher published, if it knows more than this
// rank does.
func (c *control) merge(l reconf.Log) {
	if err := l.Validate(); err != nil {
		fmt.Fprintf(c.log, "pcm: rank %d: ignoring a reconfiguration log: %v\n", c.env.Rank, err)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(l.Entries) > len(c.entries) {
		c.entries = l.Entries
	}
}

// have returns how many entries this rank knows.
func (c *control) have() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return uint64(len(c.entries))
}

// known returns the entries this rank knows. The slice is never modified, only replaced.
func (c *control) known() []reconf.Reconfiguration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.entries
}

// spawnTimeout bounds the launcher's answer to a migrate request (it asks the target node).
const spawnTimeout = 20 * time.Second

// StartSuccessor asks the launcher to start this rank's successor.
func (c *control) StartSuccessor(req job.MigrateRequest) (job.MigrateReply, error) {
	data, err := c.encode(job.MigrateSubject(c.env.JobID), req)
	if err != nil {
		return job.MigrateReply{}, err
	}
	// Only the launcher's answer, under the job key, counts: anyone can answer first.
	var rep job.MigrateReply
	err = ctlplane.Request(c.nc, job.MigrateSubject(c.env.JobID), data, spawnTimeout, func(m *nats.Msg) error {
		var got job.MigrateReply
		if err := c.decode(m.Subject, m.Data, &got); err != nil {
			return err
		}
		rep = got
		return nil
	})
	if err != nil {
		if errors.Is(err, nats.ErrNoResponders) {
			return job.MigrateReply{}, errors.New("the launcher does not handle migrations")
		}
		return job.MigrateReply{}, fmt.Errorf("no answer from the launcher: %w", err)
	}
	if rep.Error != "" {
		// The launcher's own messages start with "mpirun: ", which the rank's would repeat.
		return rep, errors.New(strings.TrimPrefix(rep.Error, "mpirun: "))
	}
	return rep, nil
}

// WatchSuccessor calls gone when the launcher reports that the successor of rank for
// request seq ended; stop ends the watch.
func (c *control) WatchSuccessor(seq uint64, rank int, gone func(reason string)) (stop func()) {
	sub, err := c.nc.Subscribe(job.SuccessorGoneSubject(c.env.JobID), func(m *nats.Msg) {
		var g job.SuccessorGone
		if c.decode(m.Subject, m.Data, &g) == nil && g.Seq == seq && g.Rank == rank {
			gone(g.Reason)
		}
	})
	if err != nil {
		return func() {}
	}
	c.nc.Flush()
	return func() { sub.Unsubscribe() }
}

// Report tells the launcher how a migration ended.
func (c *control) Report(r job.MigrateReport) {
	data, err := c.encode(job.MigratedSubject(c.env.JobID), r)
	if err != nil {
		return
	}
	if c.nc.Publish(job.MigratedSubject(c.env.JobID), data) == nil {
		c.nc.FlushTimeout(2 * time.Second)
	}
}

// close stops following the log; the connection stays open for mpi.
func (c *control) close() {
	if c.sub != nil {
		c.sub.Unsubscribe()
	}
}

// encode encodes v for subject, under the job key when the rank has it.
func (c *control) encode(subject string, v any) ([]byte, error) {
	if c.auth == nil {
		return job.Encode(v)
	}
	return c.auth.Encode(subject, v, time.Now())
}

// decode verifies data received on subject under the job key, when the rank has it, and
// decodes it into v: a forged or replayed log entry must not make the ranks act.
func (c *control) decode(subject string, data []byte, v any) error {
	if c.auth == nil {
		return job.Decode(data, v)
	}
	_, err := c.auth.Decode(subject, data, v, time.Now())
	return err
}
