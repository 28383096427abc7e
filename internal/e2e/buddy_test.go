package e2e

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mpios/mpios/internal/job"
	"github.com/mpios/mpios/internal/nodestatus"
	"github.com/mpios/mpios/pcm/ckptstore"
)

// buddiesOf returns the newest committed checkpoint of job id in node's store (Seq 0: none).
func (c *cluster) buddiesOf(node, id string) ckptstore.Manifest {
	c.t.Helper()
	s, err := ckptstore.Open(c.stores[node], &ckptstore.Options{Node: node})
	if err != nil {
		c.t.Fatal(err)
	}
	m, _ := s.Latest(id)
	return m
}

// buddiesWrong says how the pieces of m differ from double checkpointing on nodes: size
// pieces, on those nodes, each copied to the node after its own in their sorted list; ""
// if they do not.
func buddiesWrong(m ckptstore.Manifest, size int, nodes ...string) string {
	slices.Sort(nodes)
	var on []string
	var wrong []string
	for _, p := range m.Pieces {
		on = append(on, p.Node)
		i, _ := slices.BinarySearch(nodes, p.Node)
		if want := nodes[(i+1)%len(nodes)]; !slices.Equal(p.Copies, []string{want}) {
			wrong = append(wrong, fmt.Sprintf("rank %d on %s copied to %v, want %s", p.Rank, p.Node, p.Copies, want))
		}
	}
	slices.Sort(on)
	if on = slices.Compact(on); len(m.Pieces) != size || !slices.Equal(on, nodes) {
		return fmt.Sprintf("%d pieces on %v, want %d on %v", len(m.Pieces), on, size, nodes)
	}
	return strings.Join(wrong, "; ")
}

// waitBuddies waits until a checkpoint of job j newer than after, committed in the store of
// nodes[0], is double checkpointed on nodes with size ranks, and returns its number.
func (c *cluster) waitBuddies(j *bgJob, after uint64, size int, nodes ...string) uint64 {
	c.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		m := c.buddiesOf(nodes[0], j.id)
		wrong := buddiesWrong(m, size, nodes...)
		if m.Seq > after && wrong == "" {
			return m.Seq
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("newest checkpoint on %s: %d: %s; want one after %d\nstderr:\n%s", nodes[0], m.Seq, wrong, after, j.stderr.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// ranksOn returns the ranks of job id on node.
func (c *cluster) ranksOn(id, node string) []int {
	var ranks []int
	for i, r := range c.jobInfo(id).Ranks {
		if r.Node == node {
			ranks = append(ranks, i)
		}
	}
	return ranks
}

// TestBuddiesAreChosenAgainAfterAMigrationAndAResize: "each committed piece lives on its own
// node and on a buddy node" (issue 16), the next node in the sorted list of the job's nodes.
// The ranks choose their buddies once and keep the choice while the job's nodes stay the
// same; a migration and a resize change them, and every rank chooses again (the successors
// and joiners, who know no choice, together with the others). n2's ranks move to n3, then
// the job grows onto n2 again: each time the newest checkpoints' copies are on the new
// buddies, and the result is the undisturbed run's.
func TestBuddiesAreChosenAgainAfterAMigrationAndAResize(t *testing.T) {
	args := []string{"heat2d", "-n", "48", "-iters", "8000"}
	want := referenceDump(t, args...)
	c := newCluster(t, "n1", "n2", "n3")
	dump := filepath.Join(t.TempDir(), "out.bin")
	j := c.start(t, "bud1", nil, "--hosts", "n1:2,n2:2", "--ckpt-every", "20",
		prog("heat2d"), "-n", "48", "-iters", "8000", "-dump", dump, "-pace", "2ms")
	c.waitRunning(t, j.id)
	seq := c.waitBuddies(j, 0, 4, "n1", "n2")

	c.migrate(j, "n3", 2, c.ranksOn(j.id, "n2")...)
	seq = c.waitBuddies(j, seq, 4, "n1", "n3")

	c.resize(j, 6, 1, job.NodeSlots{Node: "n2", Slots: 2})
	c.waitBuddies(j, seq, 6, "n1", "n2", "n3")

	if code := j.wait(180 * time.Second); code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, j.stdout.String(), j.stderr.String())
	}
	j.sameDump(dump, want)
}

// pcmdStatus runs pcmd status --json against the cluster and decodes it.
func (c *cluster) pcmdStatus() nodestatus.Status {
	c.t.Helper()
	cmd := exec.Command(prog("pcmd"), "status", "--json", "--nats", c.url, "--wait", "300ms")
	cmd.Env = c.env
	out, err := cmd.Output()
	if err != nil {
		c.t.Fatalf("pcmd status: %v\n%s", err, out)
	}
	var st nodestatus.Status
	if err := json.Unmarshal(out, &st); err != nil {
		c.t.Fatalf("pcmd status --json: %v\n%s", err, out)
	}
	return st
}

// TestBuddyCopiesMeasureTheBandwidthPcmdStatusShows: the buddy copies of a job's checkpoint
// pieces are the bulk transfers between pcmd nodes, and each node's IOS agent measures its
// link to the sender with them (issue 17: ATS-RAS from measured quantities). A job on n1
// and n2, each the other's buddy, with pieces of about 1.4 MB: once a checkpoint is double,
// pcmd status --json shows each node's bandwidth from the other (peer_bandwidth_bps), next
// to the round trips of its pings.
func TestBuddyCopiesMeasureTheBandwidthPcmdStatusShows(t *testing.T) {
	c := newCluster(t, "n1", "n2")
	j := c.start(t, "bw1", nil, "--hosts", "n1:1,n2:1", "--ckpt-every", "40",
		prog("heat2d"), "-n", "600", "-init", "1", "-iters", "1000", "-pace", "2ms")
	c.waitRunning(t, j.id)
	c.waitBuddies(j, 0, 2, "n1", "n2")
	from := map[string]string{"n1": "n2", "n2": "n1"}
	deadline := time.Now().Add(30 * time.Second)
	for {
		var missing []string
		st := c.pcmdStatus()
		for _, n := range st.Nodes {
			peer, ok := from[n.Name]
			if !ok {
				continue
			}
			switch {
			case n.IOS == nil:
				missing = append(missing, n.Name+": no ios")
			case !(n.IOS.PeerBandwidth[peer] > 0):
				missing = append(missing, fmt.Sprintf("%s: bandwidths %v, round trips %v", n.Name, n.IOS.PeerBandwidth, n.IOS.PeerBaseRTT))
			}
		}
		if len(missing) == 0 && len(st.Nodes) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pcmd status never showed the buddies' bandwidths: %s (%d nodes)", strings.Join(missing, "; "), len(st.Nodes))
		}
		time.Sleep(200 * time.Millisecond)
	}
	if code := j.wait(120 * time.Second); code != 0 {
		t.Fatalf("exit %d\nstderr:\n%s", code, j.stderr.String())
	}
}
