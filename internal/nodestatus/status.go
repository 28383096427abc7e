// Package nodestatus is the client side of the pcmd nodes: it asks every node and IOS
// agent on a NATS server for its view (DiscoverStatus), merges the views into one picture
// of the cluster (Collect) and prints it (Status.WriteText, Status.WriteJSON) for "pcmd
// status". It also sends a job control requests (Control), as "pcmd migrate" and the IOS
// agents do, and finds the NATS server of the newest running mpirun (NewestRecord).
package nodestatus

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mpios/mpios/internal/ctlauth"
	"github.com/mpios/mpios/internal/ctlplane"
	"github.com/mpios/mpios/internal/job"
	"github.com/mpios/mpios/internal/jobrecord"
	"github.com/mpios/mpios/internal/natsconn"
	"github.com/mpios/mpios/internal/nodeclient"
	"github.com/mpios/mpios/internal/procstate"
	"github.com/mpios/mpios/profiler"
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
	// Jobs are the running jobs whose mpirun answered: where each rank runs and every
	// migration asked for, with its reason, outcome and pause.
	Jobs []job.JobInfo `json:"jobs"`
	// Unauthenticated are the jobs of Jobs whose answer was not verified: the caller holds
	// no record of them (jobrecord: only a job's owner can verify its mpirun's answer),
	// so any NATS client could have given it. Shown, labeled, never acted on.
	Unauthenticated []string `json:"unauthenticated_jobs,omitempty"`
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
	// Draining: the node takes no new ranks and leaves once its ranks moved (pcmd drain).
	Draining bool `json:"draining,omitempty"`
	// IOS is the node's IOS agent; nil if it did not answer (agent off, or an older pcmd).
	IOS *IOSStatus `json:"ios,omitempty"`
}

// IOSStatus is a node's IOS agent in Status: its policy, the resources it last sampled, its
// outstanding steal, its recent decisions with their reasons and its ranks' latest profiles.
type IOSStatus struct {
	Policy         string            `json:"policy"`
	JobPolicies    map[string]string `json:"job_policies,omitempty"`
	StealThreshold float64           `json:"steal_threshold"`
	PeriodSeconds  float64           `json:"period_s"`
	SampledAt      time.Time         `json:"sampled_at"`
	CPUs           int               `json:"cpus"`
	EffectiveCPUs  float64           `json:"effective_cpus"`
	Availability   float64           `json:"availability"`
	FreeCPUs       float64           `json:"free_cpus"` // EffectiveCPUs × Availability
	MemFreeBytes   uint64            `json:"mem_free_bytes"`
	MemTotalBytes  uint64            `json:"mem_total_bytes"`
	Load1          float64           `json:"load1"`
	SampleError    string            `json:"sample_error,omitempty"`
	LoadSource     string            `json:"load_source,omitempty"` // what Availability is measured with
	// Steal is the outstanding steal request (null: none).
	Steal *job.IOSSteal `json:"steal"`
	Peers []string      `json:"peers"`
	// PeerRTT and PeerBaseRTT are the smoothed and base round trips of the heartbeat pings
	// to each peer that answered, PeerBandwidth the smoothed bandwidth (bytes per second) of
	// the buddy copies received from each peer that sent one large enough to measure.
	PeerRTT       map[string]time.Duration `json:"peer_rtt_ns,omitempty"`
	PeerBaseRTT   map[string]time.Duration `json:"peer_base_rtt_ns,omitempty"`
	PeerBandwidth map[string]float64       `json:"peer_bandwidth_bps,omitempty"`
	Stats         job.IOSStats             `json:"stats"`
	// Decisions are the agent's recent decisions and their outcomes, oldest first.
	Decisions []job.IOSEvent `json:"decisions"`
	// Profiles are the latest profiles of the node's ranks, as the ranks published them.
	Profiles        []profiler.RankProfile `json:"profiles"`
	ProfilesOmitted int                    `json:"profiles_omitted,omitempty"`
}

// RankStatus is one rank in Status.
type RankStatus struct {
	Job     string    `json:"job"`
	Rank    int       `json:"rank"`
	Node    string    `json:"node"`
	PID     int       `json:"pid"`
	Started time.Time `json:"started"`
}

// DiscoverStatus asks every pcmd on nc's server for its view, and every IOS agent for its
// state, waiting wait for replies. A view counts only signed by its node, under a key that
// keys trusts (nil: any key its node's own card names; see nodeclient.DiscoverNodes).
func DiscoverStatus(nc *nats.Conn, wait time.Duration, keys ctlauth.KeySet) (Status, error) {
	var (
		iosMsgs []*nats.Msg
		iosErr  error
		done    = make(chan struct{})
	)
	go func() {
		defer close(done)
		iosMsgs, iosErr = gatherIOS(nc, wait)
	}()
	views, err := nodeclient.DiscoverNodes(nc, wait, keys)
	<-done
	if err != nil {
		return Status{}, err
	}
	if iosErr != nil {
		return Status{}, iosErr
	}
	st := Collect(views)
	st.AttachIOS(verifyIOS(iosMsgs, keysOfViews(views)))
	st.NATS = natsconn.RedactURL(nc.ConnectedUrl())
	st.Jobs, st.Unauthenticated = jobInfos(nc, st.Ranks, wait, jobrecord.RuntimeDir())
	return st, nil
}

// jobInfos asks the mpirun of every job that has ranks for its JobInfo, in parallel. An
// answer is verified under the job's key when records (jobrecord.RuntimeDir) holds the
// caller's record of the job, and dropped if it does not verify; without a record it is
// read unverified and its job listed in the second result.
func jobInfos(nc *nats.Conn, ranks []RankStatus, wait time.Duration, records string) ([]job.JobInfo, []string) {
	var ids []string
	for _, r := range ranks {
		if !slices.Contains(ids, r.Job) {
			ids = append(ids, r.Job)
		}
	}
	slices.Sort(ids)
	infos := make([]*job.JobInfo, len(ids))
	unverified := make([]bool, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// The owner takes only the launcher's answer under the job key (anyone can
			// answer first); others take the first that decodes, labeled unverified.
			_ = ctlplane.Request(nc, job.JobInfoSubject(id), nil, max(wait, 500*time.Millisecond), func(m *nats.Msg) error {
				info, verified, err := readJobInfo(id, m, records)
				if err == nil {
					infos[i], unverified[i] = &info, !verified
				}
				return err
			})
		}()
	}
	wg.Wait()
	var (
		out  []job.JobInfo
		open []string
	)
	for i, in := range infos {
		if in != nil {
			out = append(out, *in)
			if unverified[i] {
				open = append(open, in.Job)
			}
		}
	}
	return out, open
}

// readJobInfo reads mpirun's answer m to a job info request: verified under the job key
// of the caller's record of job id in records, or, without a record, unverified (the
// envelope's body, or an older mpirun's answer in clear).
func readJobInfo(id string, m *nats.Msg, records string) (info job.JobInfo, verified bool, err error) {
	if rec, rerr := jobrecord.ReadJob(records, id); rerr == nil {
		if key, kerr := rec.Key(); kerr == nil {
			info, err = key.DecodeJobInfo(m.Subject, m.Data, time.Now())
			return info, err == nil, err
		}
	}
	if err := ctlauth.DecodeUnverified(m.Data, &info); err != nil {
		return job.JobInfo{}, false, err
	}
	if info.Job != id {
		return job.JobInfo{}, false, fmt.Errorf("pcmd: job %s's info describes job %.64q", id, info.Job)
	}
	return info, false, nil
}

// DiscoverIOS asks every IOS agent on nc's server for its state (job.IOSDiscoverSubject),
// collecting replies for wait. A state counts only signed by its node under a key that keys
// trusts (nil: any key); malformed, invalid and unsigned replies are skipped.
func DiscoverIOS(nc *nats.Conn, wait time.Duration, keys ctlauth.KeySet) ([]job.IOSState, error) {
	msgs, err := gatherIOS(nc, wait)
	return verifyIOS(msgs, keys), err
}

// gatherIOS collects the raw replies to an IOS discovery for wait.
func gatherIOS(nc *nats.Conn, wait time.Duration) ([]*nats.Msg, error) {
	msgs, err := ctlplane.Gather(nc, job.IOSDiscoverSubject, nil, wait)
	if err != nil {
		err = fmt.Errorf("pcmd: discover IOS agents: %w", err)
	}
	return msgs, err
}

// verifyIOS keeps the states among msgs signed by the node they describe, under a key that
// keys trusts (nil: any).
func verifyIOS(msgs []*nats.Msg, keys ctlauth.KeySet) []job.IOSState {
	if keys == nil {
		keys = ctlauth.AnyKey{}
	}
	var out []job.IOSState
	for _, msg := range msgs {
		m, err := ctlauth.VerifyStatement(msg.Subject, msg.Data, keys)
		if err != nil {
			continue
		}
		var st job.IOSState
		if job.Decode(m.Body, &st) != nil || st.Validate() != nil || m.From.Role != ctlauth.RoleNode || m.From.Node != st.Node {
			continue
		}
		out = append(out, st)
	}
	return out
}

// viewKeys trusts each node's signature under the key its verified discovery view's card
// names: an IOS state is believed only from the node that answered discovery.
type viewKeys map[string]string

func keysOfViews(views []job.NodeView) viewKeys {
	k := viewKeys{}
	for _, v := range views {
		cm, err := ctlauth.VerifyStatement(job.NodeCardSubject(v.Self.Name), v.Self.Card, ctlauth.AnyKey{})
		if err != nil {
			continue
		}
		if card, err := ctlauth.CardFromMessage(cm); err == nil && card.Node == v.Self.Name {
			k[card.Node] = card.SigningKey
		}
	}
	return k
}

// Trust implements ctlauth.KeySet.
func (k viewKeys) Trust(publicKey string, s ctlauth.Sender) error {
	if s.Role != ctlauth.RoleNode || k[s.Node] == "" || k[s.Node] != publicKey {
		return fmt.Errorf("not the key of node %s's discovery view", s.Node)
	}
	return nil
}

// AttachIOS adds the agents' states to the alive nodes they describe.
func (st *Status) AttachIOS(states []job.IOSState) {
	for _, s := range states {
		if s.Validate() != nil {
			continue
		}
		for i := range st.Nodes {
			n := &st.Nodes[i]
			if n.Name != s.Node || n.State != StateAlive {
				continue
			}
			is := &IOSStatus{
				Policy: s.Policy, JobPolicies: s.JobPolicies, StealThreshold: s.StealThreshold,
				PeriodSeconds: s.Period.Seconds(), SampledAt: s.SampledAt, CPUs: s.CPUs,
				EffectiveCPUs: s.EffectiveCPUs, Availability: s.Availability, FreeCPUs: s.EffectiveCPUs * s.Availability,
				MemFreeBytes: s.MemFreeBytes, MemTotalBytes: s.MemTotalBytes, Load1: s.Load1, SampleError: s.SampleError, LoadSource: s.LoadSource,
				Steal: s.Steal, Peers: s.Peers, Stats: s.Stats, Decisions: s.Events,
				PeerRTT: s.PeerRTT, PeerBaseRTT: s.PeerBaseRTT, PeerBandwidth: s.PeerBandwidth,
				Profiles: []profiler.RankProfile{}, ProfilesOmitted: s.ProfilesOmitted,
			}
			if is.Peers == nil {
				is.Peers = []string{}
			}
			if is.Decisions == nil {
				is.Decisions = []job.IOSEvent{}
			}
			for _, raw := range s.Profiles {
				var p profiler.RankProfile
				if json.Unmarshal(raw, &p) != nil {
					is.ProfilesOmitted++
					continue
				}
				is.Profiles = append(is.Profiles, p)
			}
			n.IOS = is
		}
	}
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
			Draining: b.info.Draining,
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

// rankKey names a rank of a job.
type rankKey struct {
	job  string
	rank int
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
		state := n.State
		if n.Draining && n.State == StateAlive {
			state = "draining"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d/%d\t%.2f %.2f %.2f\t%s\t%s\t%d\t%s\n", n.Name, state, n.Used, n.Slots,
			n.Load[0], n.Load[1], n.Load[2], ago(n.LastBeat), n.Advertise, n.PID, n.Version)
	}
	fmt.Fprintln(tw)
	profiles := map[rankKey]profiler.RankProfile{}
	if st.writeIOS(tw) {
		fmt.Fprintln(tw)
		for _, n := range st.Nodes {
			if n.IOS != nil {
				for _, p := range n.IOS.Profiles {
					profiles[rankKey{p.Job, p.Rank}] = p
				}
			}
		}
	}
	if len(st.Ranks) == 0 {
		fmt.Fprintln(tw, "no ranks running")
		return tw.Flush()
	}
	fmt.Fprintln(tw, "JOB\tRANK\tNODE\tPID\tRUNNING FOR\tITERATION\tS/ITER\tCOMM")
	for _, r := range st.Ranks {
		iter, per, comm := "-", "-", "-"
		if p, ok := profiles[rankKey{r.Job, r.Rank}]; ok {
			iter = strconv.FormatInt(p.Iteration, 10)
			if p.PlannedIterations > 0 {
				iter += "/" + strconv.FormatInt(p.PlannedIterations, 10)
			}
			if p.MeanIterSeconds > 0 {
				per = strconv.FormatFloat(p.MeanIterSeconds, 'g', 3, 64)
			}
			if p.ElapsedSeconds > 0 {
				comm = fmt.Sprintf("%.0f%%", 100*p.CommSeconds/p.ElapsedSeconds)
			}
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%v\t%s\t%s\t%s\n", r.Job, r.Rank, r.Node, r.PID,
			time.Since(r.Started).Round(time.Second), iter, per, comm)
	}
	st.writeMigrations(tw)
	st.writeResizes(tw)
	if len(st.Unauthenticated) > 0 {
		fmt.Fprintf(tw, "\nunauthenticated: the migrations and resizes of job %s are as some NATS client answered "+
			"(no job record of yours to verify them with; only the job's owner can)\n", strings.Join(st.Unauthenticated, ", "))
	}
	return tw.Flush()
}

// writeMigrations lists the migrations of the jobs (the newest 20 per job).
func (st Status) writeMigrations(w io.Writer) {
	var rows []string
	for _, j := range st.Jobs {
		ms := j.Migrations
		if len(ms) > 20 {
			ms = ms[len(ms)-20:]
		}
		for _, m := range ms {
			pause, iter, why := "-", "-", m.Reason
			if m.Pause > 0 {
				pause = m.Pause.Round(time.Millisecond).String()
			}
			if m.Iteration > 0 {
				iter = strconv.Itoa(m.Iteration)
			}
			if m.Error != "" {
				why += " — " + m.Error
			}
			rows = append(rows, fmt.Sprintf("%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s", j.Job, m.Rank, m.From, m.To, m.State, iter, pause, short(why, 120)))
		}
	}
	if len(rows) == 0 {
		return
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "JOB\tRANK\tFROM\tTO\tMIGRATION\tITERATION\tPAUSE\tREASON")
	for _, r := range rows {
		fmt.Fprintln(w, r)
	}
}

// writeIOS writes one line per node with an IOS agent; it reports whether there was one.
func (st Status) writeIOS(w io.Writer) bool {
	any := false
	for _, n := range st.Nodes {
		if n.IOS == nil {
			continue
		}
		if !any {
			fmt.Fprintln(w, "NODE\tPOLICY\tFREE CPUS\tLOAD FROM\tSTEAL\tPEERS\tGIVEN/OK/FAILED\tLAST DECISION")
			any = true
		}
		is := n.IOS
		free := fmt.Sprintf("%.2f of %.2f", is.FreeCPUs, is.EffectiveCPUs)
		if is.SampleError != "" {
			free = "? (" + short(is.SampleError, 30) + ")"
		}
		steal := "-"
		if is.Steal != nil {
			steal = fmt.Sprintf("#%d to %s", is.Steal.ID, is.Steal.Target)
		}
		policy := is.Policy
		if len(is.JobPolicies) > 0 {
			var jp []string
			for j, p := range is.JobPolicies {
				jp = append(jp, j+"="+p)
			}
			slices.Sort(jp)
			policy += " (" + strings.Join(jp, " ") + ")"
		}
		last := "-"
		if k := len(is.Decisions); k > 0 {
			e := is.Decisions[k-1]
			what := e.Kind
			if e.Job != "" {
				what += fmt.Sprintf(" %s/%d", e.Job, e.Rank)
			}
			if e.Peer != "" {
				what += " (" + e.Peer + ")"
			}
			last = fmt.Sprintf("%s ago %s: %s", time.Since(e.At).Round(time.Second), what, short(e.Reason, 80))
		}
		source := is.LoadSource
		if source == "" {
			source = "-"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%d\t%d/%d/%d\t%s\n", n.Name, policy, free, source, steal, len(is.Peers),
			is.Stats.RanksGiven, is.Stats.MigrationsOK, is.Stats.MigrationsFailed, last)
	}
	return any
}

func short(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}

func ago(sec float64) string {
	if sec == 0 {
		return "now"
	}
	return (time.Duration(sec * float64(time.Second))).Round(100*time.Millisecond).String() + " ago"
}

// ErrNoRecord reports that no running mpirun left a job record to take the NATS URL from.
var ErrNoRecord = errors.New("no running mpirun found")

// NewestRecord returns the most recently started job record in dir (jobrecord.RuntimeDir) whose
// mpirun is still running, and its path.
func NewestRecord(dir string) (jobrecord.Record, string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return jobrecord.Record{}, "", fmt.Errorf("pcmd: job records: %w", err)
	}
	var (
		best     jobrecord.Record
		bestPath string
	)
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || strings.HasPrefix(name, ".") || !strings.HasSuffix(name, ".json") {
			continue
		}
		path := filepath.Join(dir, name)
		rec, err := jobrecord.ReadRecord(path)
		if err != nil || rec.NATSURL == "" || !procstate.Alive(rec.PID) {
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

// ReplyOpener verifies data, an answer received on subject, and decodes it into v.
type ReplyOpener func(subject string, data []byte, v any) error

// OwnerReplies opens mpirun's answers with the job's key, as its owner holds it
// (jobrecord.Record.Key).
func OwnerReplies(key ctlauth.JobKey) ReplyOpener {
	return func(subject string, data []byte, v any) error {
		from, err := key.Decode(subject, data, v, time.Now())
		if err == nil && from.Role != ctlauth.RoleLauncher {
			err = fmt.Errorf("an answer from %s, not the job's launcher", from)
		}
		return err
	}
}

// JobReplies opens the answers of job jobID's mpirun with the key a node learnt from the
// job's spawns (keys). A node that holds no key for the job (one that only joined it) reads
// them unverified: nil keys, or a job keys does not know.
func JobReplies(keys *ctlauth.JobKeyring, jobID string) ReplyOpener {
	return func(subject string, data []byte, v any) error {
		if keys == nil {
			return ctlauth.DecodeUnverified(data, v)
		}
		if _, known := keys.Owner(jobID); !known {
			return ctlauth.DecodeUnverified(data, v)
		}
		from, err := keys.Decode(jobID, subject, data, v, time.Now())
		if err == nil && from.Role != ctlauth.RoleLauncher {
			err = fmt.Errorf("an answer from %s, not the job's launcher", from)
		}
		return err
	}
}

// Control sends a control request to a job on job.ControlSubject, authenticated by sign (the
// job owner's jobrecord.Record.OwnerWrapper, or a node's key), and waits up to timeout for
// mpirun's answer, under the job's key: open verifies it (OwnerReplies, JobReplies), and
// answers it refuses are skipped while the wait lasts (anyone can answer first).
func Control(nc *nats.Conn, jobID string, req job.ControlRequest, sign ctlauth.Wrapper, open ReplyOpener, timeout time.Duration) (job.ControlReply, error) {
	var rep job.ControlReply
	if err := job.ValidateID(jobID); err != nil {
		return rep, fmt.Errorf("pcmd: %s", job.TrimPrefix(err).Error())
	}
	if err := req.Validate(); err != nil {
		return rep, fmt.Errorf("pcmd: %s", job.TrimPrefix(err).Error())
	}
	subj := job.ControlSubject(jobID)
	body, err := job.Encode(req)
	if err != nil {
		return rep, fmt.Errorf("pcmd: %w", err)
	}
	data, err := sign.Wrap(subj, body, time.Now())
	if err != nil {
		return rep, fmt.Errorf("pcmd: %w", err)
	}
	err = ctlplane.Request(nc, subj, data, timeout, func(m *nats.Msg) error {
		var got job.ControlReply
		if err := open(m.Subject, m.Data, &got); err != nil {
			return err
		}
		rep = got
		return nil
	})
	return rep, requestError("job "+jobID, subj, timeout, err,
		fmt.Errorf("pcmd: job %s: %w on %s (the job is not running, or its ranks do not handle %s requests yet)", jobID, ErrNoController, subj, req.Kind))
}

// requestError says why a ctlplane.Request to who on subj got no answer within timeout
// (nil if err is nil); noResponders is the error when nobody listens on subj.
func requestError(who, subj string, timeout time.Duration, err, noResponders error) error {
	var refused *ctlplane.RefusedError
	switch {
	case err == nil:
		return nil
	case errors.Is(err, nats.ErrNoResponders):
		return noResponders
	case errors.As(err, &refused):
		return fmt.Errorf("pcmd: %s: no authenticated answer on %s within %v: %v", who, subj, timeout, refused.Last)
	case errors.Is(err, nats.ErrTimeout):
		return fmt.Errorf("pcmd: %s: no reply on %s within %v", who, subj, timeout)
	}
	return fmt.Errorf("pcmd: %s: %w", who, err)
}

// Drain asks the pcmd of node to leave gracefully (job.NodeDrainSubject) and waits up to
// timeout for its reply, which it sends once the jobs of its ranks answered. sign (the
// node's own key; nil: unsigned, which only --insecure-open nodes take) authenticates it.
// The reply counts only signed by the node: with sign, by the key sign holds (the node's
// own); without, by any key signing as the node. Other replies (anyone can answer first)
// are skipped while the wait lasts.
func Drain(nc *nats.Conn, node string, req job.DrainRequest, sign *ctlauth.KeyWrapper, timeout time.Duration) (job.DrainReply, error) {
	var rep job.DrainReply
	if err := job.ValidateNode(node); err != nil {
		return rep, fmt.Errorf("pcmd: %s", job.TrimPrefix(err).Error())
	}
	if err := req.Validate(); err != nil {
		return rep, fmt.Errorf("pcmd: %s", job.TrimPrefix(err).Error())
	}
	subj := job.NodeDrainSubject(node)
	data, err := job.Encode(req)
	keys := ctlauth.NodeKey{Node: node, AnyKey: true}
	if err == nil && sign != nil {
		data, err = sign.Wrap(subj, data, time.Now())
		keys = ctlauth.NodeKey{Node: node, Key: sign.PublicKey()}
	}
	if err != nil {
		return rep, fmt.Errorf("pcmd: %w", err)
	}
	var refusal job.DrainReply // signed as the node by another key than sign's
	err = ctlplane.Request(nc, subj, data, timeout, func(msg *nats.Msg) error {
		m, err := ctlauth.VerifyStatement(msg.Subject, msg.Data, keys)
		var other error
		if errors.Is(err, ctlauth.ErrUntrusted) {
			// A node refuses a drain signed by a key not its own, under its own: the
			// requester, who knows only the key it signed with, takes the refusal if no
			// answer under that key comes.
			other = err
			m, err = ctlauth.VerifyStatement(msg.Subject, msg.Data, ctlauth.NodeKey{Node: node, AnyKey: true})
		}
		if err != nil {
			return err
		}
		var got job.DrainReply
		if err := job.Decode(m.Body, &got); err != nil {
			return err
		}
		if err := got.Validate(); err != nil {
			return err
		}
		if other != nil {
			if got.Error == "" || len(got.Moves) > 0 {
				return other
			}
			refusal = got
			refusal.Error += fmt.Sprintf(" (answered under key %s, not the one --node-key holds: is it this node's seed?)", m.Key)
			// Anyone can sign such a refusal: it stands only if the node's own answer, which
			// waits for the jobs', does not come meanwhile.
			return &ctlplane.Tentative{Err: errors.New(refusal.Error), Wait: 2 * time.Second}
		}
		rep = got
		return nil
	})
	if tentative := (*ctlplane.Tentative)(nil); errors.As(err, &tentative) {
		return refusal, nil
	}
	return rep, requestError("node "+node, subj, timeout, err,
		fmt.Errorf("pcmd: node %s: no pcmd answers on %s (unknown node, or a pcmd without drain)", node, subj))
}
