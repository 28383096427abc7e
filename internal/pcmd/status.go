package pcmd

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mpios/mpios/internal/job"
	"github.com/mpios/mpios/internal/launch"
)

// Node states in Status.
const (
	StateAlive = "alive"
	StateGone  = "gone" // missed job.MissedBeats heartbeats
)

// Status is the cluster as its pcmd nodes see it.
type Status struct {
	NATS  string       `json:"nats"` // the server asked, without credentials
	Nodes []NodeStatus `json:"nodes"`
	Ranks []RankStatus `json:"ranks"` // of alive nodes
}

// NodeStatus is one node in Status.
type NodeStatus struct {
	Name      string     `json:"name"`
	State     string     `json:"state"` // StateAlive or StateGone
	Slots     int        `json:"slots"`
	Used      int        `json:"used"`
	Load      [3]float64 `json:"load"`
	LastBeat  float64    `json:"last_beat_age_s"` // seconds since its last heartbeat (0: it answered)
	Advertise string     `json:"advertise"`
	PID       int        `json:"pid"`
	Version   string     `json:"version"`
}

// RankStatus is one rank in Status.
type RankStatus struct {
	Job     string    `json:"job"`
	Rank    int       `json:"rank"`
	Node    string    `json:"node"`
	PID     int       `json:"pid"`
	Started time.Time `json:"started"`
}

// DiscoverStatus asks every pcmd on nc's server for its view, waiting wait for replies.
func DiscoverStatus(nc *nats.Conn, wait time.Duration) (Status, error) {
	views, err := launch.DiscoverNodes(nc, wait)
	if err != nil {
		return Status{}, err
	}
	st := Collect(views)
	st.NATS = launch.RedactURL(nc.ConnectedUrl())
	return st, nil
}

// Collect merges node views: a node that answered itself is alive; one only its peers know
// is alive if some peer heard it within job.MissedBeats of its heartbeat interval, and gone
// otherwise. Each node is described by its freshest report.
func Collect(views []job.NodeView) Status {
	type seen struct {
		info job.NodeInfo
		age  time.Duration
	}
	best := make(map[string]seen)
	note := func(info job.NodeInfo, age time.Duration) {
		if b, ok := best[info.Name]; !ok || age < b.age {
			best[info.Name] = seen{info, age}
		}
	}
	for _, v := range views {
		note(v.Self, 0)
		for _, p := range v.Peers {
			note(p.Info, p.Age)
		}
	}
	st := Status{Nodes: []NodeStatus{}, Ranks: []RankStatus{}}
	for _, b := range best {
		n := NodeStatus{
			Name: b.info.Name, State: StateAlive, Slots: b.info.Slots, Used: b.info.Used, Load: b.info.Load,
			LastBeat: b.age.Seconds(), Advertise: b.info.Advertise, PID: b.info.PID, Version: b.info.Version,
		}
		if b.age > b.info.GoneAfter() {
			n.State = StateGone
		}
		st.Nodes = append(st.Nodes, n)
		if n.State != StateAlive {
			continue // its ranks died with it, or their fate is unknown
		}
		for _, r := range b.info.Ranks {
			st.Ranks = append(st.Ranks, RankStatus{Job: r.Job, Rank: r.Rank, Node: n.Name, PID: r.PID, Started: r.Started})
		}
	}
	slices.SortFunc(st.Nodes, func(a, b NodeStatus) int { return strings.Compare(a.Name, b.Name) })
	slices.SortFunc(st.Ranks, func(a, b RankStatus) int {
		if c := strings.Compare(a.Job, b.Job); c != 0 {
			return c
		}
		return a.Rank - b.Rank
	})
	return st
}

// WriteJSON writes st as indented JSON.
func (st Status) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(st)
}

// WriteText writes st as two aligned tables, nodes then ranks.
func (st Status) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if len(st.Nodes) == 0 {
		fmt.Fprintf(tw, "no pcmd node answered on %s\n", st.NATS)
		return tw.Flush()
	}
	fmt.Fprintln(tw, "NODE\tSTATE\tSLOTS\tLOAD\tLAST BEAT\tADVERTISE\tPID\tVERSION")
	for _, n := range st.Nodes {
		fmt.Fprintf(tw, "%s\t%s\t%d/%d\t%.2f %.2f %.2f\t%s\t%s\t%d\t%s\n", n.Name, n.State, n.Used, n.Slots,
			n.Load[0], n.Load[1], n.Load[2], ago(n.LastBeat), n.Advertise, n.PID, n.Version)
	}
	fmt.Fprintln(tw)
	if len(st.Ranks) == 0 {
		fmt.Fprintln(tw, "no ranks running")
		return tw.Flush()
	}
	fmt.Fprintln(tw, "JOB\tRANK\tNODE\tPID\tRUNNING FOR")
	for _, r := range st.Ranks {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%v\n", r.Job, r.Rank, r.Node, r.PID, time.Since(r.Started).Round(time.Second))
	}
	return tw.Flush()
}

func ago(sec float64) string {
	if sec == 0 {
		return "now"
	}
	return (time.Duration(sec * float64(time.Second))).Round(100*time.Millisecond).String() + " ago"
}

// ErrNoRecord reports that no running mpirun left a job record to take the NATS URL from.
var ErrNoRecord = errors.New("no running mpirun found")

// NewestRecord returns the most recently started job record in dir (launch.RuntimeDir) whose
// mpirun is still running, and its path.
func NewestRecord(dir string) (launch.Record, string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return launch.Record{}, "", fmt.Errorf("pcmd: job records: %w", err)
	}
	var (
		best     launch.Record
		bestPath string
	)
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || strings.HasPrefix(name, ".") || !strings.HasSuffix(name, ".json") {
			continue
		}
		path := filepath.Join(dir, name)
		rec, err := launch.ReadRecord(path)
		if err != nil || rec.NATSURL == "" || !processAlive(rec.PID) {
			continue // unreadable, or a leftover of an mpirun that was killed
		}
		if bestPath == "" || rec.Started.After(best.Started) {
			best, bestPath = rec, path
		}
	}
	if bestPath == "" {
		return best, "", fmt.Errorf("pcmd: %w (no live job record in %s)", ErrNoRecord, dir)
	}
	return best, bestPath, nil
}

// ErrNoController reports that no process of the job answers control requests: the job is
// not running, or its ranks do not handle them yet.
var ErrNoController = errors.New("nobody answers control requests")

// Control sends a control request to a job on job.ControlSubject and waits up to timeout
// for the reply.
func Control(nc *nats.Conn, jobID string, req job.ControlRequest, timeout time.Duration) (job.ControlReply, error) {
	var rep job.ControlReply
	if err := job.ValidateID(jobID); err != nil {
		return rep, fmt.Errorf("pcmd: %w", trimJob(err))
	}
	if err := req.Validate(); err != nil {
		return rep, fmt.Errorf("pcmd: %w", trimJob(err))
	}
	data, err := job.Encode(req)
	if err != nil {
		return rep, fmt.Errorf("pcmd: %w", err)
	}
	subj := job.ControlSubject(jobID)
	msg, err := nc.Request(subj, data, timeout)
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return rep, fmt.Errorf("pcmd: job %s: %w on %s (the job is not running, or its ranks do not handle %s requests yet)",
			jobID, ErrNoController, subj, req.Kind)
	case errors.Is(err, nats.ErrTimeout):
		return rep, fmt.Errorf("pcmd: job %s: no reply on %s within %v", jobID, subj, timeout)
	case err != nil:
		return rep, fmt.Errorf("pcmd: job %s: %w", jobID, err)
	}
	if err := job.Decode(msg.Data, &rep); err != nil {
		return rep, fmt.Errorf("pcmd: job %s: malformed reply: %w", jobID, trimJob(err))
	}
	return rep, nil
}
