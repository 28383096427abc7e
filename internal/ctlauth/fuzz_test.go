package ctlauth

import (
	"bytes"
	"reflect"
	"strings"
	"testing"

	"github.com/nats-io/nkeys"
)

func FuzzDecodeEnvelope(f *testing.F) {
	jw, _ := jobPair(f, Sender{Role: RoleRank, Rank: 2, Incarnation: 1, Node: "n1"}, ReplayOptions{})
	f.Add(wrap(f, jw, ctl, "body", t0))
	kp, _ := nkeys.CreateUser()
	kw, err := NewKeyWrapper(kp, Sender{Role: RoleLauncher}, 0)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(wrap(f, kw, spawnSubject, "spawn", t0))
	f.Add([]byte{0x80})
	f.Fuzz(func(t *testing.T, data []byte) {
		e, err := DecodeEnvelope(data)
		if err != nil {
			return
		}
		// Whatever decodes is well-formed and survives a round trip unchanged.
		if err := e.validate(); err != nil {
			t.Fatalf("decoded an invalid envelope: %v", err)
		}
		again, err := DecodeEnvelope(marshal(t, &e))
		if err != nil || !reflect.DeepEqual(normalize(again), normalize(e)) {
			t.Fatalf("round trip: %+v, %v; was %+v", again, err, e)
		}
	})
}

// normalize makes nil and empty bodies compare equal.
func normalize(e Envelope) Envelope {
	if len(e.Body) == 0 {
		e.Body = nil
	}
	return e
}

func FuzzJobVerify(f *testing.F) {
	from := Sender{Role: RoleRank, Rank: 2}
	jw, _ := jobPair(f, from, ReplayOptions{})
	f.Add(wrap(f, jw, ctl, "seed", t0))
	f.Fuzz(func(t *testing.T, data []byte) {
		_, v := jobPair(t, from, ReplayOptions{})
		m, err := v.Verify(ctl, data, t0)
		if err != nil {
			return
		}
		// Only what the key's holder wrapped verifies: the seed, however re-encoded.
		if m.From != from || string(m.Body) != "seed" || m.Seq != 1 || !m.Time.Equal(t0) {
			t.Fatalf("accepted a message the key never authenticated: %+v", m)
		}
	})
}

func FuzzParseAuthorizedKeys(f *testing.F) {
	const key = "UA23U7FF6V3A3MDBC7WUK23AYVKJD5CELOZ5EJB7OHTDCENXOHN3RAUR"
	f.Add("# comment\n" + key + " alice\n")
	f.Add(`jobs="a-*",programs="/opt/*" ` + key + ` bob` + "\n")
	f.Add(`jobs="a ` + key)
	f.Fuzz(func(t *testing.T, text string) {
		a, err := ParseAuthorizedKeys(strings.NewReader(text), "fuzz")
		if err != nil {
			return
		}
		for _, k := range a.Keys() {
			// Whatever is accepted is a user key whose options are usable patterns.
			if !nkeys.IsValidPublicUserKey(k.Key) {
				t.Fatalf("accepted %q", k.Key)
			}
			if got, ok := a.Lookup(k.Key); !ok || got.Line != k.Line {
				t.Fatalf("lookup of %s: %+v", k.Key, got)
			}
			for _, p := range k.Programs {
				if !strings.HasPrefix(p, "/") {
					t.Fatalf("relative program pattern %q", p)
				}
			}
			_ = k.Permits("job", "/opt/x")
		}
	})
}

// FuzzKeyringDecode: whatever a NATS client publishes on a node's piece, copy or manifest
// subjects reaches JobKeyring.Decode: it never panics and accepts nothing that was not
// made under the job's key.
func FuzzKeyringDecode(f *testing.F) {
	rank, err := NewJobChannel("job1", testSecret(1), Sender{Role: RoleRank, Rank: 1}, t0)
	if err != nil {
		f.Fatal(err)
	}
	good, err := rank.Encode(pieceSubject, pieceReq{Job: "job1", Rank: 1}, t0)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add([]byte{0x80})
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := NewJobKeyring(Sender{Role: RoleNode, Node: "n1"}, 0, t0)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Learn("job1", testSecret(1), ""); err != nil {
			t.Fatal(err)
		}
		var req pieceReq
		if _, err := r.Decode("job1", pieceSubject, data, &req, t0); err == nil && !bytes.Equal(data, good) {
			// Only the seed, or an encoding of the same envelope, carries a valid tag.
			e, derr := DecodeEnvelope(data)
			if derr != nil || e.Scheme != SchemeJobMAC {
				t.Fatalf("accepted %x", data)
			}
		}
		r.Decode("job2", pieceSubject, data, &req, t0)
	})
}
