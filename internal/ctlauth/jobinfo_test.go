package ctlauth

import (
	"errors"
	"testing"
	"time"

	"github.com/mpios/mpios/internal/job"
)

// A job info reply counts only from the job's launcher, under its key, on the inbox it was
// sent to, describing that job: a node grows or shrinks a job its info calls malleable.
func TestAJobInfoCountsOnlyFromTheLauncherUnderTheJobKey(t *testing.T) {
	now := time.Now()
	secret := []byte("the secret of job j, 32 bytes..")
	keys, err := NewJobKeyring(Sender{Role: RoleNode, Node: "n1"}, 0, now)
	if err != nil {
		t.Fatal(err)
	}
	if err := keys.Learn("j", secret, ""); err != nil {
		t.Fatal(err)
	}
	channel := func(s []byte, from Sender) *JobChannel {
		c, err := NewJobChannel("j", s, from, now)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	launcher := channel(secret, Sender{Role: RoleLauncher})
	info := job.JobInfo{Job: "j", Size: 4, Malleable: true}
	good, err := launcher.Encode("_INBOX.a", info, now)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := keys.DecodeJobInfo("j", "_INBOX.a", good, now); err != nil || !got.Malleable || got.Size != 4 {
		t.Fatalf("mpirun's answer: %+v, %v", got, err)
	}
	key, _ := DeriveJobKey("j", secret)
	again, _ := launcher.Encode("_INBOX.c", info, now)
	if _, err := key.DecodeJobInfo("_INBOX.c", again, now); err != nil {
		t.Fatalf("the owner's check of mpirun's answer: %v", err)
	}
	clear, _ := job.Encode(info)
	forged, _ := channel([]byte("not the secret of job j at all.."), Sender{Role: RoleLauncher}).Encode("_INBOX.b", info, now)
	byRank, _ := channel(secret, Sender{Role: RoleRank, Rank: 1}).Encode("_INBOX.b", info, now)
	other, _ := launcher.Encode("_INBOX.b", job.JobInfo{Job: "k", Size: 4, Malleable: true}, now)
	for name, c := range map[string]struct {
		job, inbox string
		data       []byte
		want       error
	}{
		"in clear":                    {"j", "_INBOX.b", clear, ErrMalformed},
		"under another key":           {"j", "_INBOX.b", forged, ErrForged},
		"a replay to another inbox":   {"j", "_INBOX.b", good, ErrForged},
		"from a rank":                 {"j", "_INBOX.b", byRank, ErrForged},
		"of another job":              {"j", "_INBOX.b", other, ErrMalformed},
		"of a job the node never ran": {"k", "_INBOX.b", good, ErrUnknownJob},
	} {
		if _, err := keys.DecodeJobInfo(c.job, c.inbox, c.data, now); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", name, err, c.want)
		}
	}
	var none *JobKeyring
	if _, err := none.DecodeJobInfo("j", "_INBOX.a", good, now); !errors.Is(err, ErrNoJobKeys) {
		t.Errorf("without a keyring: %v", err)
	}
}
