package natsconn_test

import (
	"fmt"
	"strings"

	"github.com/mpios/mpios/internal/natsconn"
)

// A launcher passes its credentials and TLS files to the ranks through their environment,
// and a rank reads them back.
func ExampleOptions_Environ() {
	launcher := natsconn.Options{URL: "tls://nats.example:4222", CredsFile: "/home/alice/.config/mpios/alice.creds", CAFile: "/etc/nats/ca.pem"}
	env := launcher.Environ()
	fmt.Println(env)

	lookup := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		lookup[k] = v
	}
	rank := natsconn.FromEnviron(func(k string) string { return lookup[k] })
	fmt.Println(rank.CredsFile, rank.CAFile)
	// Output:
	// [MPIOS_NATS_CREDS=/home/alice/.config/mpios/alice.creds MPIOS_NATS_CA=/etc/nats/ca.pem]
	// /home/alice/.config/mpios/alice.creds /etc/nats/ca.pem
}

func ExampleRedactURL() {
	fmt.Println(natsconn.RedactURL("nats://alice:s3cret@nats1.example:4222,tls://nats2.example:4222"))
	// Output: nats://nats1.example:4222,tls://nats2.example:4222
}
