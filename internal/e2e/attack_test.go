//go:build linux

package e2e

import (
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/mpios/mpios/internal/testbin"
)

// "Nothing received from NATS is trusted until it is authenticated", and nothing an
// outsider sends first wins: a client of the same NATS server answers every request it sees
// on mpios.> at once — the nodes' descriptions and spawns, the ranks' hellos, the buddy
// copies and piece requests, the signals of a recovery — with garbage and with a forged "no
// responders" status. The job starts, checkpoints, recovers from a killed rank and ends with
// the undisturbed result: every requester waits for the answer it can authenticate.
func TestAnAttackerAnsweringEveryRequestFirstChangesNothing(t *testing.T) {
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
	killRankOnNodesAndRecover(t, c, "attacked")
	attacker.Flush()
	if answered.Load() == 0 {
		t.Error("the attacker saw no request to answer")
	}
}
