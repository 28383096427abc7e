package pcm

import (
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/mpios/mpios/internal/job"
	"github.com/mpios/mpios/internal/natsconn"
	"github.com/nats-io/nats.go"
)

// control is a launched rank's link to its launcher's reconfiguration log (see
// job.ReconfLog): it collects the entries as they are published.
type control struct {
	env job.Env
	nc  *nats.Conn
	log io.Writer

	mu      sync.Mutex
	entries []job.Reconf // entries[i].Seq == i+1
}

// startControl connects to the job's control plane and fetches the log so far.
func startControl(env job.Env, log io.Writer) (*control, error) {
	// Credentials and TLS files beside the URL, as the launcher passes them (natsconn.Environ).
	auth, err := natsconn.FromEnviron(nil).AuthOptions()
	if err != nil {
		return nil, fmt.Errorf("pcm: connect to control plane: %w", err)
	}
	nc, err := nats.Connect(env.NATSURL, append(auth,
		nats.Name(fmt.Sprintf("mpios %s rank %d pcm", env.JobID, env.Rank)),
		nats.Timeout(10*time.Second),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250*time.Millisecond),
	)...)
	if err != nil {
		return nil, fmt.Errorf("pcm: connect to control plane: %w", err)
	}
	c := &control{env: env, nc: nc, log: log}
	if _, err := nc.Subscribe(job.ReconfSubject(env.JobID), func(m *nats.Msg) { c.take(m.Data) }); err != nil {
		nc.Close()
		return nil, fmt.Errorf("pcm: subscribe to reconfigurations: %w", err)
	}
	// Entries published before the subscription: ask for the log. A launcher that does
	// not answer (older, or busy) costs nothing: the next publication carries everything.
	if m, err := nc.Request(job.ReconfGetSubject(env.JobID), nil, 2*time.Second); err == nil {
		c.take(m.Data)
	}
	return c, nil
}

// take merges a published log.
func (c *control) take(data []byte) {
	var l job.ReconfLog
	if err := job.Decode(data, &l); err != nil {
		fmt.Fprintf(c.log, "pcm: rank %d: ignoring a malformed reconfiguration log: %v\n", c.env.Rank, err)
		return
	}
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

// between returns the entries numbered lo+1 to hi.
func (c *control) between(lo, hi uint64) []job.Reconf {
	c.mu.Lock()
	defer c.mu.Unlock()
	hi = min(hi, uint64(len(c.entries)))
	if lo >= hi {
		return nil
	}
	return append([]job.Reconf(nil), c.entries[lo:hi]...)
}

// spawnTimeout bounds the launcher's answer to a migrate request (it asks the target node).
const spawnTimeout = 20 * time.Second

// requestSuccessor asks the launcher to start this rank's successor.
func (c *control) requestSuccessor(req job.MigrateRequest) (job.MigrateReply, error) {
	data, err := job.Encode(req)
	if err != nil {
		return job.MigrateReply{}, err
	}
	m, err := c.nc.Request(job.MigrateSubject(c.env.JobID), data, spawnTimeout)
	if err != nil {
		if errors.Is(err, nats.ErrNoResponders) {
			return job.MigrateReply{}, errors.New("the launcher does not handle migrations")
		}
		return job.MigrateReply{}, fmt.Errorf("no answer from the launcher: %w", err)
	}
	var rep job.MigrateReply
	if err := job.Decode(m.Data, &rep); err != nil {
		return rep, err
	}
	if rep.Error != "" {
		return rep, errors.New(rep.Error)
	}
	return rep, nil
}

// watchSuccessor calls gone when the launcher reports that the successor of rank for
// request seq ended; stop ends the watch.
func (c *control) watchSuccessor(seq uint64, rank int, gone func(reason string)) (stop func()) {
	sub, err := c.nc.Subscribe(job.SuccessorGoneSubject(c.env.JobID), func(m *nats.Msg) {
		var g job.SuccessorGone
		if job.Decode(m.Data, &g) == nil && g.Seq == seq && g.Rank == rank {
			gone(g.Reason)
		}
	})
	if err != nil {
		return func() {}
	}
	c.nc.Flush()
	return func() { sub.Unsubscribe() }
}

// report tells the launcher how a migration ended.
func (c *control) report(r job.MigrateReport) {
	data, err := job.Encode(r)
	if err != nil {
		return
	}
	if c.nc.Publish(job.MigratedSubject(c.env.JobID), data) == nil {
		c.nc.FlushTimeout(2 * time.Second)
	}
}

func (c *control) close() {
	c.nc.Close()
}
