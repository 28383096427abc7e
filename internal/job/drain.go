package job

import (
	"errors"
	"fmt"
)

// NodeDrainSubject: request DrainRequest, reply DrainReply, answered by node's pcmd (pcmd
// drain): the node takes no new ranks, asks the jobs of its ranks to move them to peers with
// free slots, and exits once it runs none.
func NodeDrainSubject(node string) string { return "mpios.node." + node + ".drain" }

// DrainRequest asks a node to leave gracefully.
type DrainRequest struct {
	Reason string `msgpack:"reason,omitempty"` // who asked and why, for the logs of the node and the jobs
}

// maxDrainReason bounds DrainRequest.Reason; the node adds its own words to it in a
// ControlRequest.Reason, which is bounded too.
const maxDrainReason = 512

// Validate checks a DrainRequest's form.
func (d DrainRequest) Validate() error {
	if len(d.Reason) > maxDrainReason {
		return fmt.Errorf("job: drain: reason longer than %d bytes", maxDrainReason)
	}
	return nil
}

// DrainMove is one migration a draining node asked a job for: Ranks of Job to node To, and
// the job's answer. Or, with ShrinkTo set and no To, a shrink: no peer has room, so the
// malleable job goes on with ShrinkTo ranks and Ranks, the job's ranks on the node, leave.
type DrainMove struct {
	Job      string `msgpack:"job"`
	Ranks    []int  `msgpack:"ranks"`
	To       string `msgpack:"to"`
	ShrinkTo int    `msgpack:"shrink_to,omitempty"`
	Accepted bool   `msgpack:"accepted"`
	Answer   string `msgpack:"answer,omitempty"` // the job's message, or why it refused or did not answer
}

// DrainReply is a node's answer to a DrainRequest. A drain that cannot place every rank
// of the node on a peer's free slot is refused (Error), and the node goes on as before.
type DrainReply struct {
	Node  string      `msgpack:"node"`
	Moves []DrainMove `msgpack:"moves,omitempty"`
	Error string      `msgpack:"error,omitempty"`
}

// Validate checks a DrainReply received from the network.
func (d DrainReply) Validate() error {
	if err := ValidateNode(d.Node); err != nil {
		return err
	}
	if len(d.Moves) > MaxSlots {
		return errors.New("job: drain reply: too many moves")
	}
	for _, m := range d.Moves {
		if err := ValidateID(m.Job); err != nil {
			return err
		}
		if m.ShrinkTo > 0 && m.To == "" {
			continue // a shrink
		}
		if err := ValidateNode(m.To); err != nil {
			return err
		}
	}
	return nil
}
