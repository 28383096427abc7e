package rewire

import (
	"errors"
	"fmt"
	"time"

	"github.com/mpios/mpios/internal/ctlauth"
	"github.com/mpios/mpios/internal/ctlplane"
	"github.com/mpios/mpios/internal/job"
	"github.com/nats-io/nats.go"
)

// ResizeWait bounds the wait for a resize's address table: the launcher answers once every
// member of the new world reached the boundary, joiners included, which start meanwhile.
const ResizeWait = 2 * time.Minute

// AskResizeTable says hello to the launcher of job jobID as a member of a resize's new world
// and returns the new world's address table, or why the launcher gave the resize up. Both
// travel under auth's job key (nil: in clear, see Seal).
func AskResizeTable(nc *nats.Conn, auth *ctlauth.JobChannel, jobID string, h job.ResizeHello) ([]string, error) {
	data, err := Seal(auth, job.ResizeSubject(jobID), h)
	if err != nil {
		return nil, err
	}
	// Only the launcher's answer, under the job key, counts: anyone can answer first.
	var t job.Table
	err = ctlplane.Request(nc, job.ResizeSubject(jobID), data, ResizeWait, func(m *nats.Msg) error {
		var got job.Table
		if err := Unseal(auth, m.Subject, m.Data, &got); err != nil {
			return err
		}
		t = got
		return nil
	})
	if err != nil {
		if errors.Is(err, nats.ErrNoResponders) {
			return nil, errors.New("resize: the launcher does not handle resizes")
		}
		return nil, fmt.Errorf("resize: no address table from the launcher: %w", err)
	}
	if t.Error != "" {
		return nil, &ResizeRefusedError{Reason: t.Error}
	}
	return t.Addrs, nil
}

// ResizeRefusedError is the launcher's refusal of a resize (a joiner did not start, ...).
type ResizeRefusedError struct{ Reason string }

func (e *ResizeRefusedError) Error() string { return e.Reason }
