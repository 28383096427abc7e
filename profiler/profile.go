package profiler

import (
	"fmt"
	"time"

	"github.com/mpios/mpios/iosbridge"
)

// PeerTraffic is the traffic between a rank and one peer (a world rank of the same job): an
// edge of the weighted communication graph.
type PeerTraffic struct {
	Rank     int   `json:"rank" msgpack:"rank"`
	Messages int64 `json:"messages" msgpack:"messages"`
	Bytes    int64 `json:"bytes" msgpack:"bytes"`
}

// OpStat aggregates the completed calls of one mpi operation on one rank.
type OpStat struct {
	Op string `json:"op" msgpack:"op"`
	// Collective marks collective operations (Bcast, Allreduce, ...).
	Collective bool  `json:"collective,omitempty" msgpack:"collective,omitempty"`
	Calls      int64 `json:"calls" msgpack:"calls"`
	Errors     int64 `json:"errors,omitempty" msgpack:"errors,omitempty"`
	// Bytes is what mpi.CallEvent reported: sent bytes for sends and collectives (this rank's
	// contribution), received bytes for receives and Waits.
	Bytes   int64   `json:"bytes" msgpack:"bytes"`
	Seconds float64 `json:"seconds" msgpack:"seconds"`
}

// RankProfile is the profile of one rank at one instant. Counters and totals cover
// [Since, At]; the Window* fields cover the last closed iterations (Options.Window of them).
// Durations are float seconds so that JSON consumers need no unit convention.
type RankProfile struct {
	Job  string `json:"job" msgpack:"job"`
	Rank int    `json:"rank" msgpack:"rank"`
	Node string `json:"node,omitempty" msgpack:"node,omitempty"`
	// Since is when profiling of the rank began (its first mpi call or mark); At is when the
	// snapshot was taken.
	Since time.Time `json:"since" msgpack:"since"`
	At    time.Time `json:"at" msgpack:"at"`
	// ElapsedSeconds is At-Since, CommSeconds the time spent inside mpi calls in it and
	// CompSeconds the rest (never negative).
	ElapsedSeconds float64 `json:"elapsed_seconds" msgpack:"elapsed_seconds"`
	CommSeconds    float64 `json:"comm_seconds" msgpack:"comm_seconds"`
	CompSeconds    float64 `json:"comp_seconds" msgpack:"comp_seconds"`

	// Iteration is the number of the last iteration reported closed; Iterations how many
	// iterations were timed (an Iteration call that advances the number by k counts k).
	Iteration  int64 `json:"iteration" msgpack:"iteration"`
	Iterations int64 `json:"iterations" msgpack:"iterations"`
	// LastIterSeconds is the time per iteration of the last closed interval, MeanIterSeconds
	// the mean over the window: the current iteration-time estimate of the policies.
	LastIterSeconds float64 `json:"last_iter_seconds" msgpack:"last_iter_seconds"`
	MeanIterSeconds float64 `json:"mean_iter_seconds" msgpack:"mean_iter_seconds"`
	// WindowIterations iterations took WindowSeconds, of which WindowCommSeconds inside mpi
	// calls and WindowCompSeconds outside.
	WindowIterations  int64   `json:"window_iterations" msgpack:"window_iterations"`
	WindowSeconds     float64 `json:"window_seconds" msgpack:"window_seconds"`
	WindowCommSeconds float64 `json:"window_comm_seconds" msgpack:"window_comm_seconds"`
	WindowCompSeconds float64 `json:"window_comp_seconds" msgpack:"window_comp_seconds"`

	// Calls and Errors count every observed mpi call of the rank.
	Calls  int64 `json:"calls" msgpack:"calls"`
	Errors int64 `json:"errors,omitempty" msgpack:"errors,omitempty"`
	// Sent and Received are the per-peer point-to-point traffic, sorted by Rank; collectives
	// are not included (mpi does not report their internal messages).
	Sent     []PeerTraffic `json:"sent" msgpack:"sent"`
	Received []PeerTraffic `json:"received" msgpack:"received"`
	// ReceivedMessages counts every point-to-point message received, including Sendrecv
	// receives, whose source mpi does not report: the P(A) of the IOS policies.
	ReceivedMessages int64 `json:"received_messages" msgpack:"received_messages"`
	// Ops has one entry per operation called, sorted by name.
	Ops []OpStat `json:"ops" msgpack:"ops"`

	// The fields below are set by JobProfiler (StartJob) for the IOS agent of the rank's
	// node; a bare Profiler leaves them zero.

	// PID is the rank's process id, which the agent matches against its node's rank table.
	PID int `json:"pid,omitempty" msgpack:"pid,omitempty"`
	// Policy is the job's IOS decision policy (mpirun --policy, MPIOS_POLICY); "" leaves the
	// choice to the nodes.
	Policy string `json:"policy,omitempty" msgpack:"policy,omitempty"`
	// StateBytes is the size of the rank's registered checkpoint state, the numerator of the
	// migration cost; 0 when unknown.
	StateBytes int64 `json:"state_bytes,omitempty" msgpack:"state_bytes,omitempty"`
	// PlannedIterations is the total number of iterations the rank will run (0: unknown),
	// so that the remaining life is (PlannedIterations − Iteration) × MeanIterSeconds.
	PlannedIterations int64 `json:"planned_iterations,omitempty" msgpack:"planned_iterations,omitempty"`
}

// RemainingIterations is PlannedIterations − Iteration, or 0 when unknown or done.
func (r RankProfile) RemainingIterations() int64 {
	if r.PlannedIterations <= 0 {
		return 0
	}
	return max(0, r.PlannedIterations-r.Iteration)
}

// SentTo returns the traffic sent to world rank peer (zero if none).
func (r RankProfile) SentTo(peer int) PeerTraffic { return find(r.Sent, peer) }

// ReceivedFrom returns the traffic received from world rank peer (zero if none).
func (r RankProfile) ReceivedFrom(peer int) PeerTraffic { return find(r.Received, peer) }

// Op returns the statistics of operation op (zero Calls if never called).
func (r RankProfile) Op(op string) OpStat {
	for _, s := range r.Ops {
		if s.Op == op {
			return s
		}
	}
	return OpStat{Op: op}
}

func find(ts []PeerTraffic, peer int) PeerTraffic {
	for _, t := range ts {
		if t.Rank == peer {
			return t
		}
	}
	return PeerTraffic{Rank: peer}
}

// Delta returns the profile of the interval between two snapshots of the same rank: counters
// and totals are differences, Since is prev.At, and the iteration and window fields are cur's.
// IOS resets its profiles periodically so that rates follow the application; Delta gives the
// same without resetting the profiler.
func Delta(prev, cur RankProfile) (RankProfile, error) {
	if prev.Job != cur.Job || prev.Rank != cur.Rank {
		return RankProfile{}, fmt.Errorf("profiler: delta: snapshots of different ranks %s/%d and %s/%d", prev.Job, prev.Rank, cur.Job, cur.Rank)
	}
	if cur.At.Before(prev.At) {
		return RankProfile{}, fmt.Errorf("profiler: delta of %s/%d: current snapshot (%v) older than previous (%v)", cur.Job, cur.Rank, cur.At, prev.At)
	}
	d := cur
	d.Since = prev.At
	d.ElapsedSeconds = cur.At.Sub(prev.At).Seconds()
	d.CommSeconds = max(0, cur.CommSeconds-prev.CommSeconds)
	d.CompSeconds = max(0, d.ElapsedSeconds-d.CommSeconds)
	d.Calls -= prev.Calls
	d.Errors -= prev.Errors
	d.ReceivedMessages -= prev.ReceivedMessages
	d.Sent = deltaTraffic(prev.Sent, cur.Sent)
	d.Received = deltaTraffic(prev.Received, cur.Received)
	d.Ops = make([]OpStat, 0, len(cur.Ops))
	for _, s := range cur.Ops {
		p := prev.Op(s.Op)
		s.Calls -= p.Calls
		s.Errors -= p.Errors
		s.Bytes -= p.Bytes
		s.Seconds = max(0, s.Seconds-p.Seconds)
		if s.Calls > 0 {
			d.Ops = append(d.Ops, s)
		}
	}
	return d, nil
}

func deltaTraffic(prev, cur []PeerTraffic) []PeerTraffic {
	out := make([]PeerTraffic, 0, len(cur))
	for _, t := range cur {
		p := find(prev, t.Rank)
		t.Messages -= p.Messages
		t.Bytes -= p.Bytes
		if t.Messages > 0 {
			out = append(out, t)
		}
	}
	return out
}

// IOS converts r to the agent's profile type. RemainingIterations, StateBytes and Policy come
// from what the rank announced (JobProfiler.Annotate, JobOptions.Policy), ComputePerMessage
// (F(A) of ATS-RAS, eq. 2.3) is the computation time per received message; the fields the
// profiler cannot know (MemoryBytes, CPUUse, LastMigration) are left zero for pcmd to fill.
// Counters cover r's whole interval, so pass a Delta to give the agent recent rates; the
// iteration time is the window mean.
func (r RankProfile) IOS() iosbridge.RankProfile {
	p := iosbridge.RankProfile{
		Job:                 r.Job,
		Rank:                r.Rank,
		Node:                r.Node,
		Iteration:           r.Iteration,
		RemainingIterations: r.RemainingIterations(),
		StateBytes:          max(0, r.StateBytes),
		Policy:              r.Policy,
		IterationTime:       seconds(r.MeanIterSeconds),
		CommTime:            seconds(r.CommSeconds),
		CompTime:            seconds(r.CompSeconds),
		Window:              seconds(r.ElapsedSeconds),
		MessagesProcessed:   r.ReceivedMessages,
		Peers:               make([]iosbridge.PeerComm, 0, len(r.Sent)),
	}
	if r.ReceivedMessages > 0 && r.CompSeconds > 0 {
		p.ComputePerMessage = seconds(r.CompSeconds / float64(r.ReceivedMessages))
	}
	for _, t := range r.Sent {
		p.Peers = append(p.Peers, iosbridge.PeerComm{Rank: t.Rank, Bytes: t.Bytes, Messages: t.Messages})
	}
	return p
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
