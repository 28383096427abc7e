package natsembed

import "testing"

func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"nats://u:p@127.0.0.1:4222":            "nats://127.0.0.1:4222",
		"nats://tok@h:1,nats://a:b@h2:2":       "nats://h:1,nats://h2:2",
		"nats://127.0.0.1:4222":                "nats://127.0.0.1:4222",
		"user:secret@127.0.0.1:4222":           "127.0.0.1:4222",
		"tls://u:p%40x@host.example:4443/?a=b": "tls://host.example:4443/?a=b",
	} {
		if got := RedactURL(in); got != want {
			t.Errorf("RedactURL(%q) = %q, want %q", in, got, want)
		}
	}
}
