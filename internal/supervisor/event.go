package supervisor

import (
	"syscall"
	"time"
)

// ProcID names a process the Machine asked to start (StartRank). The loop maps it to the
// process it started; 0 names none.
type ProcID uint64

// Event is an input of the Machine: something that happened to the job. The loop feeds every
// event to Machine.Step together with the current time.
type Event interface{ event() }

// Launch starts the job: the Machine starts the ranks one after another (each StartRank
// waits for the Started of the one before) and arms the job timeout.
type Launch struct{}

// Started reports the outcome of a StartRank: the process runs (PID on Node, "" for this
// machine), or Err says why it could not be started.
type Started struct {
	Proc ProcID
	PID  int
	Node string
	Err  error
	// NodeGone says the process could not be started because its node is gone: the node is
	// lost, not the program at fault.
	NodeGone bool
	// NodeClosed says the node refused the start because it takes no new ranks (it is
	// draining or shutting down): the program is not at fault, and the node is taken as
	// draining (NodeDraining) until it says otherwise.
	NodeClosed bool
}

// Exited reports that a started process ended.
type Exited struct {
	Proc   ProcID
	Status int    // shell-style exit status: the code, or 128+signal
	Desc   string // "exited with status 3", "was killed by signal killed"
	// Err is set when the process's fate is unknown or could not be observed (its node is
	// gone, waiting failed); Status is then meaningless.
	Err error
	// NodeGone says the process was lost with its node: the likelier cause of its peers'
	// failures, as they fail because of it.
	NodeGone bool
	// At is when the exit was observed: among failures arriving together, the earliest is
	// usually the cause.
	At time.Time
}

// Hello is a rank's rendezvous request (a msgpack job.Hello) with its reply subject.
type Hello struct {
	Reply string
	Data  []byte
}

// Abort is a rank's mpi.Abort (a msgpack job.Abort).
type Abort struct{ Data []byte }

// Lost is a rank's report that it lost a peer abnormally (a msgpack job.Lost).
type Lost struct{ Data []byte }

// Control is a request to reconfigure the job (a msgpack job.ControlRequest) from pcmd or
// an IOS agent, authenticated by the loop as coming From (see AuthorizeControl).
type Control struct {
	Reply string
	Data  []byte
	From  Requester
}

// NodeChecked reports the outcome of a CheckNode action: Err says why the node cannot take
// ranks now.
type NodeChecked struct {
	Check uint64
	Err   error
}

// SuccessorRequest is a migrating rank, at the agreement point, asking for its successor (a
// msgpack job.MigrateRequest).
type SuccessorRequest struct {
	Reply string
	Data  []byte
}

// MigrateReport is a migrating rank's account of its migration (a msgpack job.MigrateReport).
type MigrateReport struct{ Data []byte }

// LogRequest asks for the reconfiguration log (ranks that subscribed late).
type LogRequest struct{ Reply string }

// InfoRequest asks for the job's job.JobInfo (pcmd status).
type InfoRequest struct{ Reply string }

// Signal is a signal mpirun received: the first stops the job, the next kills it.
type Signal struct {
	Sig syscall.Signal
}

// Cancel stops the job because the caller's context ended.
type Cancel struct{ Cause string }

// NodeGone reports that a node stopped responding, restarted or shut down: it takes no rank
// any more (its processes' exits are reported on their own).
type NodeGone struct {
	Node   string
	Reason string // e.g. "node n3 stopped responding (no heartbeat for 3s)"
}

// NodeDraining reports that a node began draining (pcmd drain: it takes no new ranks, and
// leaves once its ranks have moved), or, Draining false, that it takes ranks again. The ranks
// it runs go on; no recovery restarts a rank there while it drains.
type NodeDraining struct {
	Node     string
	Draining bool
}

// Tick tells the Machine that time passed; it acts on the deadlines that expired (see
// Machine.NextDeadline).
type Tick struct{}

func (Launch) event()           {}
func (Started) event()          {}
func (Exited) event()           {}
func (Hello) event()            {}
func (Abort) event()            {}
func (Lost) event()             {}
func (Control) event()          {}
func (NodeChecked) event()      {}
func (SuccessorRequest) event() {}
func (MigrateReport) event()    {}
func (LogRequest) event()       {}
func (InfoRequest) event()      {}
func (Signal) event()           {}
func (Cancel) event()           {}
func (NodeGone) event()         {}
func (NodeDraining) event()     {}
func (Tick) event()             {}

// Action is an output of the Machine: something the loop must do.
type Action interface{ action() }

// StartRank asks the loop to start a process for Rank and report it with Started. Node ""
// means where the starter placed the rank; otherwise the process is a successor started on
// Node, and Handover is where it finds its predecessor. The loop may start successors
// concurrently with other work; initial ranks are started in order.
type StartRank struct {
	Proc        ProcID
	Rank        int
	Node        string
	Incarnation int
	Handover    string
	// Join, for a process joining at a resize, is the resize's request number and Size the
	// new world's size; the process is started where Node says ("" where the starter places it).
	// For a restart Size is the job's size now (a resize or a shrinking recovery changed
	// it); 0 means the size the job started with.
	Join uint64
	Size int
	// Restart, set when the job is recovered, is the job whose newest committed checkpoint
	// the rank restarts from (on Node, "" for this machine); ReconfBase is the number of
	// reconfiguration log entries of the failed run, which the new process must not act on.
	Restart    string
	ReconfBase uint64
	// Replaces, for a successor of a joint move, are the job's ranks that leave Node in
	// the same move: the node may admit the successor in one of their slots.
	Replaces []int
}

// CheckNode asks the loop whether Node can take a rank now, and to report it with
// NodeChecked carrying Check.
type CheckNode struct {
	Check uint64
	Node  string
	// Leaving counts the job's ranks that leave Node in the same joint move: their slots
	// count as free for it.
	Leaving int
}

// SignalProc asks the loop to send Sig to a process.
type SignalProc struct {
	Proc ProcID
	Sig  syscall.Signal
}

// Reply answers a request: Msg, msgpack-encoded, to the reply subject To.
type Reply struct {
	To  string
	Msg any
}

// Publish sends Msg, msgpack-encoded, on Subject; Flush waits until the server has it, so
// it reaches the ranks before whatever the loop does next (e.g. SIGTERM).
type Publish struct {
	Subject string
	Msg     any
	Flush   bool
}

// Flush asks the loop for a round trip to the NATS server: every message published before
// a process exited is then queued for the Machine (a rank's Abort and Lost reports are
// flushed before it exits).
type Flush struct{}

// Log is one line of mpirun's own messages (the loop prefixes "mpirun: ").
type Log struct{ Line string }

func (StartRank) action()  {}
func (CheckNode) action()  {}
func (SignalProc) action() {}
func (Reply) action()      {}
func (Publish) action()    {}
func (Flush) action()      {}
func (Log) action()        {}
