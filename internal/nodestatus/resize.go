package nodestatus

import (
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/mpios/mpios/internal/reconf"
)

// writeResizes lists the resizes of the jobs (the newest 20 per job): sizes (marked when the
// request gave weights, or rebalanced the ranks in place), state, the boundary, the job's
// pause and the distributed data moved.
func (st Status) writeResizes(w io.Writer) {
	var rows []string
	for _, j := range st.Jobs {
		var rs []reconf.Reconfiguration
		for _, e := range j.Reconfigurations {
			if e.Kind == reconf.Resize {
				rs = append(rs, e)
			}
		}
		if len(rs) > 20 {
			rs = rs[len(rs)-20:]
		}
		for _, e := range rs {
			pause, iter, moved, why := "-", "-", "-", e.Reason
			if e.Pause > 0 {
				pause = e.Pause.Round(time.Millisecond).String()
			}
			if e.Iteration > 0 {
				iter = strconv.Itoa(e.Iteration)
			}
			if e.Bytes > 0 {
				moved = reconf.ByteSize(e.Bytes)
			}
			if e.Error != "" {
				why += " — " + e.Error
			}
			ranks := fmt.Sprintf("%d -> %d", e.OldNP, e.NP)
			switch {
			case e.OldNP == e.NP:
				ranks = fmt.Sprintf("%d rebalanced", e.NP)
			case e.Weights != nil:
				ranks += " weighted"
			}
			rows = append(rows, fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%s\t%s", j.Job, ranks, e.State, iter, pause, moved, short(why, 120)))
		}
	}
	if len(rows) == 0 {
		return
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "JOB\tRANKS\tRESIZE\tITERATION\tPAUSE\tMOVED\tREASON")
	for _, r := range rows {
		fmt.Fprintln(w, r)
	}
}
