//go:build linux

package e2e

import (
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mpios/mpios/internal/job"
	"github.com/mpios/mpios/internal/testbin"
)

// "Nothing received from NATS is trusted until it is authenticated", and nothing an
// outsider sends first wins: a client of the same NATS server answers every request it sees
// on mpios.> at once — the nodes' descriptions and spawns, the ranks' hellos, the buddy
// copies and piece requests, the signals of a recovery — with garbage and with a forged "no
// responders" status. The job starts, checkpoints, recovers from a killed rank and ends with
// the undisturbed result: every requester waits for the answer it can authenticate.
func TestAnAttackerAnsweringEveryRequestFirstChangesNothing(t *testing.T) {
	want := referenceDump(t, heat2dRecovery...)
	c := newCluster(t, "n1", "n2")
	attacker := testbin.Connect(t, c.url)
	var answered atomic.Int64
	if _, err := attacker.Subscribe("mpios.>", func(m *nats.Msg) {
		if m.Reply == "" {
			return
		}
		answered.Add(1)
		attacker.Publish(m.Reply, []byte("\x81\xa5error\xa6forged"))
		status := nats.NewMsg(m.Reply)
		status.Header.Set("Status", "503")
		attacker.PublishMsg(status)
	}); err != nil {
		t.Fatal(err)
	}
	if err := attacker.Flush(); err != nil {
		t.Fatal(err)
	}
	committed, err := c.nc.SubscribeSync(job.CommittedSubject("attacked"))
	if err != nil {
		t.Fatal(err)
	}
	dump := filepath.Join(t.TempDir(), "out.bin")
	args := append([]string{"--hosts", "n1:2,n2:2", "--ckpt-every", "10", prog(heat2dRecovery[0])}, heat2dRecovery[1:]...)
	j := c.start(t, "attacked", nil, append(args, "-pace", "10ms", "-dump", dump)...)
	if _, err := committed.NextMsg(60 * time.Second); err != nil {
		t.Fatalf("no committed checkpoint reported: %v\n%s", err, j.stderr.String())
	}
	if err := syscall.Kill(rankPID(t, j.id, 1), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if code := j.wait(120 * time.Second); code != 0 {
		t.Fatalf("exit %d\nstderr:\n%s", code, j.stderr.String())
	}
	j.waitLog(`recovered from the failure of rank 1`, 1, time.Second)
	j.sameDump(dump, want)
	attacker.Flush()
	if answered.Load() == 0 {
		t.Error("the attacker saw no request to answer")
	}
}
