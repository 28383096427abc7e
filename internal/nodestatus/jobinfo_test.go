package nodestatus

import (
	"encoding/hex"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mpios/mpios/internal/ctlauth"
	"github.com/mpios/mpios/internal/job"
	"github.com/mpios/mpios/internal/jobrecord"
	"github.com/mpios/mpios/internal/testbin"
)

// pcmd status and job info (issue 14): a job's owner verifies its mpirun's answer with the
// job record, so a forged answer never shows; a job without the caller's record shows what
// its launcher (or anyone) answered, listed as unauthenticated.
func TestStatusVerifiesJobInfoWithTheOwnersRecord(t *testing.T) {
	t.Parallel()
	url := testbin.NATSServer(t, "", "")
	nc := testbin.Connect(t, url)
	records := t.TempDir()
	secret := []byte("the secret of job mine, 32 bytes")
	if _, err := jobrecord.Write(records, jobrecord.Record{JobID: "mine", PID: os.Getpid(), NP: 2, Secret: hex.EncodeToString(secret)}); err != nil {
		t.Fatal(err)
	}
	answer := func(id string, data func(inbox string) []byte) {
		if _, err := nc.Subscribe(job.JobInfoSubject(id), func(m *nats.Msg) { _ = m.Respond(data(m.Reply)) }); err != nil {
			t.Fatal(err)
		}
	}
	launcher := func(id string, s []byte) func(string) []byte {
		ch, err := ctlauth.NewJobChannel(id, s, ctlauth.Sender{Role: ctlauth.RoleLauncher}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return func(inbox string) []byte {
			data, _ := ch.Encode(inbox, job.JobInfo{Job: id, Size: 2, Policy: "genuine"}, time.Now())
			return data
		}
	}
	answer("mine", launcher("mine", secret))
	forged, err := job.Encode(job.JobInfo{Job: "forged", Size: 2, Policy: "forged"})
	if err != nil {
		t.Fatal(err)
	}
	answer("forged", func(string) []byte { return forged })
	answer("theirs", launcher("theirs", []byte("the secret of another user's job")))
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	// "forged" poses as the owner's job: a record that does not match the answer drops it.
	if _, err := jobrecord.Write(records, jobrecord.Record{JobID: "forged", PID: os.Getpid(), NP: 2, Secret: hex.EncodeToString(secret)}); err != nil {
		t.Fatal(err)
	}
	ranks := []RankStatus{{Job: "mine"}, {Job: "forged"}, {Job: "theirs"}}
	infos, open := jobInfos(nc, ranks, time.Second, records)
	var got []string
	for _, in := range infos {
		got = append(got, in.Job+":"+in.Policy)
	}
	if want := []string{"mine:genuine", "theirs:genuine"}; !slices.Equal(got, want) {
		t.Errorf("job infos %q, want %q", got, want)
	}
	if want := []string{"theirs"}; !slices.Equal(open, want) {
		t.Errorf("unauthenticated %q, want %q", open, want)
	}
}
