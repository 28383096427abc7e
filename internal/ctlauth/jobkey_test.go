package ctlauth

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

var t0 = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)

func testSecret(b byte) []byte { return bytes.Repeat([]byte{b}, 32) }

func jobKey(t testing.TB, id string, secret []byte) JobKey {
	t.Helper()
	k, err := DeriveJobKey(id, secret)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func jobPair(t testing.TB, from Sender, opts ReplayOptions) (*JobWrapper, *JobVerifier) {
	t.Helper()
	k := jobKey(t, "job1", testSecret(7))
	w, err := NewJobWrapper(k, from, 0)
	if err != nil {
		t.Fatal(err)
	}
	v, err := NewJobVerifier(k, opts)
	if err != nil {
		t.Fatal(err)
	}
	return w, v
}

func wrap(t testing.TB, w interface {
	Wrap(string, []byte, time.Time) ([]byte, error)
}, subject, body string, now time.Time) []byte {
	t.Helper()
	data, err := w.Wrap(subject, []byte(body), now)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

const ctl = "mpios.job.job1.ctl"

func TestJobMessageFromAJobProcessIsAccepted(t *testing.T) {
	from := Sender{Role: RoleRank, Rank: 3, Incarnation: 1, Node: "n2"}
	w, v := jobPair(t, from, ReplayOptions{})
	m, err := v.Verify(ctl, wrap(t, w, ctl, "migrate 3", t0), t0.Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if m.From != from || string(m.Body) != "migrate 3" || m.Seq != 1 || !m.Time.Equal(t0) || m.Key != "" {
		t.Errorf("message %+v", m)
	}
}

func TestForgedOrAlteredJobMessageIsRefused(t *testing.T) {
	w, v := jobPair(t, Sender{Role: RoleLauncher}, ReplayOptions{})
	good := wrap(t, w, ctl, "checkpoint", t0)
	var e Envelope
	if err := msgpack.Unmarshal(good, &e); err != nil {
		t.Fatal(err)
	}
	alter := map[string]func(*Envelope){
		"body":        func(e *Envelope) { e.Body = []byte("migrate 0 to evil") },
		"sender":      func(e *Envelope) { e.From = Sender{Role: RoleRank, Rank: 1} },
		"sequence":    func(e *Envelope) { e.Seq++ },
		"time":        func(e *Envelope) { e.Time++ },
		"tag":         func(e *Envelope) { e.Auth[0] ^= 1 },
		"made up tag": func(e *Envelope) { e.Auth = bytes.Repeat([]byte{1}, macSize) },
	}
	for name, f := range alter {
		c := e
		c.Auth = append([]byte(nil), e.Auth...)
		f(&c)
		data, _ := msgpack.Marshal(&c)
		if _, err := v.Verify(ctl, data, t0); !errors.Is(err, ErrForged) {
			t.Errorf("altered %s: %v, want ErrForged", name, err)
		}
	}
	// The unaltered message still passes: the failures consumed no sequence number.
	if _, err := v.Verify(ctl, good, t0); err != nil {
		t.Errorf("original after forgeries: %v", err)
	}
}

func TestJobMessageMovedToAnotherSubjectIsRefused(t *testing.T) {
	w, v := jobPair(t, Sender{Role: RoleLauncher}, ReplayOptions{})
	data := wrap(t, w, "mpios.job.job1.event", "abort", t0)
	for _, subject := range []string{"mpios.job.job1.ctl", "mpios.job.job2.event", "mpios.job.job1.event."} {
		if _, err := v.Verify(subject, data, t0); !errors.Is(err, ErrForged) {
			t.Errorf("on %s: %v, want ErrForged", subject, err)
		}
	}
	if _, err := v.Verify("mpios.job.job1.event", data, t0); err != nil {
		t.Errorf("on its own subject: %v", err)
	}
}

func TestAnotherJobsKeyVerifiesNothing(t *testing.T) {
	mine := jobKey(t, "job1", testSecret(7))
	keys := map[string]JobKey{
		"same secret, other job": jobKey(t, "job2", testSecret(7)),
		"same job, other secret": jobKey(t, "job1", testSecret(8)),
	}
	v, err := NewJobVerifier(mine, ReplayOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for name, k := range keys {
		w, err := NewJobWrapper(k, Sender{Role: RoleLauncher}, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := v.Verify(ctl, wrap(t, w, ctl, "x", t0), t0); !errors.Is(err, ErrForged) {
			t.Errorf("%s: %v, want ErrForged", name, err)
		}
	}
}

func TestReplayedJobMessageIsRefused(t *testing.T) {
	w, v := jobPair(t, Sender{Role: RoleRank, Rank: 0}, ReplayOptions{})
	data := wrap(t, w, ctl, "x", t0)
	if _, err := v.Verify(ctl, data, t0); err != nil {
		t.Fatal(err)
	}
	if _, err := v.Verify(ctl, data, t0.Add(time.Second)); !errors.Is(err, ErrReplay) {
		t.Errorf("replay: %v, want ErrReplay", err)
	}
}

func TestReorderedMessagesWithinTheWindowAreAcceptedOnce(t *testing.T) {
	w, v := jobPair(t, Sender{Role: RoleRank, Rank: 0}, ReplayOptions{Window: 64})
	msgs := make([][]byte, 100)
	for i := range msgs {
		msgs[i] = wrap(t, w, ctl, "x", t0)
	}
	// Newest first, then the 63 before it in any order: all accepted.
	order := []int{99}
	for i := 36; i < 99; i++ {
		order = append(order, i)
	}
	for _, i := range order {
		if _, err := v.Verify(ctl, msgs[i], t0); err != nil {
			t.Fatalf("message %d: %v", i+1, err)
		}
	}
	// Each again, and one that fell out of the window: refused.
	for _, i := range append(order, 35, 0) {
		if _, err := v.Verify(ctl, msgs[i], t0); !errors.Is(err, ErrReplay) {
			t.Errorf("message %d again: %v, want ErrReplay", i+1, err)
		}
	}
}

func TestStaleOrFutureJobMessageIsRefused(t *testing.T) {
	w, v := jobPair(t, Sender{Role: RoleLauncher}, ReplayOptions{MaxSkew: 10 * time.Second, NotBefore: t0.Add(-5 * time.Second)})
	cases := map[string]time.Time{
		"older than the skew":  t0.Add(-11 * time.Second),
		"beyond the skew":      t0.Add(11 * time.Second),
		"before the receiver ": t0.Add(-6 * time.Second),
	}
	for name, sent := range cases {
		if _, err := v.Verify(ctl, wrap(t, w, ctl, "x", sent), t0); !errors.Is(err, ErrStale) {
			t.Errorf("%s: %v, want ErrStale", name, err)
		}
	}
	if _, err := v.Verify(ctl, wrap(t, w, ctl, "x", t0.Add(-4*time.Second)), t0); err != nil {
		t.Errorf("within the skew: %v", err)
	}
}

func TestSendersAreDistinctReplayWindows(t *testing.T) {
	k := jobKey(t, "job1", testSecret(7))
	v, _ := NewJobVerifier(k, ReplayOptions{})
	// Two incarnations of rank 2 both start at 1: neither refuses the other.
	for inc := range 2 {
		w, _ := NewJobWrapper(k, Sender{Role: RoleRank, Rank: 2, Incarnation: inc}, 0)
		if _, err := v.Verify(ctl, wrap(t, w, ctl, "x", t0), t0); err != nil {
			t.Errorf("incarnation %d: %v", inc, err)
		}
	}
}

func TestReplayGuardForgetsOnlyStaleSenders(t *testing.T) {
	g, err := NewReplayGuard(ReplayOptions{MaxSenders: 2, MaxSkew: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(g.Accept("a", 1, t0, t0))
	must(g.Accept("b", 1, t0.Add(5*time.Second), t0.Add(5*time.Second)))
	if err := g.Accept("c", 1, t0.Add(5*time.Second), t0.Add(5*time.Second)); !errors.Is(err, ErrTooManySenders) {
		t.Fatalf("third active sender: %v, want ErrTooManySenders", err)
	}
	// At t0+11s a's last message is stale: a is forgotten to make room, b is kept.
	now := t0.Add(11 * time.Second)
	must(g.Accept("c", 1, now, now))
	if err := g.Accept("b", 1, now, now); !errors.Is(err, ErrReplay) {
		t.Errorf("b after eviction: %v, want ErrReplay", err)
	}
	// a's old message cannot come back: it is stale.
	if err := g.Accept("a", 1, t0, now); !errors.Is(err, ErrStale) {
		t.Errorf("a's old message: %v, want ErrStale", err)
	}
}

func TestReplayGuardRestartedSenderMustNumberAbove(t *testing.T) {
	g, _ := NewReplayGuard(ReplayOptions{})
	first := uint64(t0.UnixNano())
	for i := range uint64(3) {
		if err := g.Accept("node n1", first+i, t0, t0); err != nil {
			t.Fatal(err)
		}
	}
	// Restarted a second later, numbering from its new start time: accepted.
	if err := g.Accept("node n1", uint64(t0.Add(time.Second).UnixNano()), t0.Add(time.Second), t0.Add(time.Second)); err != nil {
		t.Error(err)
	}
}

func TestReplayOptionsAreValidated(t *testing.T) {
	for _, o := range []ReplayOptions{{MaxSkew: -1}, {Window: -1}, {Window: maxWindow + 1}, {MaxSenders: -1}} {
		if _, err := NewReplayGuard(o); err == nil {
			t.Errorf("options %+v accepted", o)
		}
	}
	g, _ := NewReplayGuard(ReplayOptions{Window: 100})
	if g.Options().Window != 128 || g.Options().MaxSkew != DefaultMaxSkew {
		t.Errorf("options %+v", g.Options())
	}
}

func TestJobKeyAndWrapperInputsAreChecked(t *testing.T) {
	if _, err := DeriveJobKey("a.b", testSecret(1)); err == nil {
		t.Error("bad job id accepted")
	}
	if _, err := DeriveJobKey("a", testSecret(1)[:15]); err == nil || !strings.Contains(err.Error(), "at least 16") {
		t.Errorf("short secret: %v", err)
	}
	if _, err := NewJobWrapper(JobKey{}, Sender{Role: RoleLauncher}, 0); err == nil {
		t.Error("zero key accepted")
	}
	k := jobKey(t, "j", testSecret(1))
	for _, s := range []Sender{{}, {Role: 9}, {Role: RoleNode}, {Role: RoleLauncher, Rank: 2}, {Role: RoleRank, Rank: -1}, {Role: RoleRank, Node: "a.b"}} {
		if _, err := NewJobWrapper(k, s, 0); !errors.Is(err, ErrMalformed) {
			t.Errorf("sender %+v: %v", s, err)
		}
	}
	w, _ := NewJobWrapper(k, Sender{Role: RoleLauncher}, 0)
	if _, err := w.Wrap("", nil, t0); err == nil {
		t.Error("empty subject accepted")
	}
}

func TestMalformedEnvelopesAreRefused(t *testing.T) {
	w, v := jobPair(t, Sender{Role: RoleLauncher}, ReplayOptions{})
	var e Envelope
	_ = msgpack.Unmarshal(wrap(t, w, ctl, "x", t0), &e)
	bad := map[string]func(*Envelope){
		"version":    func(e *Envelope) { e.Version = 2 },
		"scheme":     func(e *Envelope) { e.Scheme = 7 },
		"short tag":  func(e *Envelope) { e.Auth = e.Auth[:16] },
		"key in MAC": func(e *Envelope) { e.Key = "U" },
		"seq 0":      func(e *Envelope) { e.Seq = 0 },
		"role":       func(e *Envelope) { e.From.Role = 0 },
	}
	for name, f := range bad {
		c := e
		f(&c)
		data, _ := msgpack.Marshal(&c)
		if _, err := v.Verify(ctl, data, t0); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", name, err)
		}
	}
	for _, data := range [][]byte{nil, []byte("garbage"), {0x80}} {
		if _, err := v.Verify(ctl, data, t0); !errors.Is(err, ErrMalformed) {
			t.Errorf("%q: %v, want ErrMalformed", data, err)
		}
	}
}

func BenchmarkJobWrapVerify(b *testing.B) {
	w, v := jobPair(b, Sender{Role: RoleRank, Rank: 1}, ReplayOptions{})
	body := make([]byte, 256)
	b.ReportAllocs()
	for b.Loop() {
		data, err := w.Wrap(ctl, body, t0)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := v.Verify(ctl, data, t0); err != nil {
			b.Fatal(err)
		}
	}
}

func marshal(t testing.TB, v any) []byte {
	t.Helper()
	data, err := msgpack.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// The owner's tools run at once (a script starting several "pcmd checkpoint"): each numbers
// its messages from its own start time, so the later one's numbers are far above the
// earlier one's. As separate senders (Sender.Tool), both are taken in either order; as one
// sender, the earlier would be refused as a replay. A tool still cannot replay itself.
func TestConcurrentToolsOfTheOwnerAreSeparateSenders(t *testing.T) {
	k := jobKey(t, "job1", testSecret(7))
	v, err := NewJobVerifier(k, ReplayOptions{})
	if err != nil {
		t.Fatal(err)
	}
	first, err := NewJobWrapper(k, Sender{Role: RoleTool, Tool: "vm/100"}, uint64(t0.UnixNano()))
	if err != nil {
		t.Fatal(err)
	}
	second, err := NewJobWrapper(k, Sender{Role: RoleTool, Tool: "vm/101"}, uint64(t0.Add(time.Millisecond).UnixNano()))
	if err != nil {
		t.Fatal(err)
	}
	a, b := wrap(t, first, ctl, "x", t0), wrap(t, second, ctl, "x", t0)
	for _, m := range [][]byte{b, a} {
		if _, err := v.Verify(ctl, m, t0); err != nil {
			t.Fatalf("a concurrent tool's request refused: %v", err)
		}
	}
	if _, err := v.Verify(ctl, a, t0); !errors.Is(err, ErrReplay) {
		t.Errorf("replayed: %v, want ErrReplay", err)
	}
}

func TestSenderToolIsOnlyForTools(t *testing.T) {
	for _, s := range []Sender{{Role: RoleLauncher, Tool: "vm/1"}, {Role: RoleTool, Tool: "a b"}, {Role: RoleTool, Tool: strings.Repeat("x", 129)}} {
		if err := s.Validate(); !errors.Is(err, ErrMalformed) {
			t.Errorf("%+v: %v, want ErrMalformed", s, err)
		}
	}
	if s := (Sender{Role: RoleTool, Tool: ToolInstance()}); s.Validate() != nil || !strings.HasPrefix(s.String(), "tool ") {
		t.Errorf("%+v: %v, %q", s, s.Validate(), s)
	}
}
