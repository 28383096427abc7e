package ctlauth_test

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/mpios/mpios/internal/ctlauth"
)

// A rank authenticates a control request with its job's key; the launcher verifies it, and
// refuses the same bytes when an attacker replays them.
func ExampleJobWrapper() {
	secret := []byte("0123456789abcdef0123456789abcdef") // the job's MPIOS_SECRET
	key, _ := ctlauth.DeriveJobKey("job7", secret)
	rank, _ := ctlauth.NewJobWrapper(key, ctlauth.Sender{Role: ctlauth.RoleRank, Rank: 3}, 0)
	launcher, _ := ctlauth.NewJobVerifier(key, ctlauth.ReplayOptions{})

	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	subject := "mpios.job.job7.ctl"
	data, _ := rank.Wrap(subject, []byte("checkpoint"), now)

	m, err := launcher.Verify(subject, data, now.Add(10*time.Millisecond))
	fmt.Println(m.From, string(m.Body), err)
	_, err = launcher.Verify(subject, data, now.Add(time.Second))
	fmt.Println(errors.Is(err, ctlauth.ErrReplay))
	// Output:
	// rank 3.0 checkpoint <nil>
	// true
}

// A node operator lists the launchers allowed to start ranks on the node.
func ExampleParseAuthorizedKeys() {
	file := `# /etc/mpios/authorized_launchers
jobs="alice-*",programs="/opt/mpios/bin/*" UA23U7FF6V3A3MDBC7WUK23AYVKJD5CELOZ5EJB7OHTDCENXOHN3RAUR alice
`
	keys, err := ctlauth.ParseAuthorizedKeys(strings.NewReader(file), "authorized_launchers")
	if err != nil {
		fmt.Println(err)
		return
	}
	alice, _ := keys.Lookup("UA23U7FF6V3A3MDBC7WUK23AYVKJD5CELOZ5EJB7OHTDCENXOHN3RAUR")
	fmt.Println(alice.Comment, alice.Permits("alice-1", "/opt/mpios/bin/heat2d"))
	fmt.Println(alice.Permits("bob-1", "/opt/mpios/bin/heat2d") != nil)

	_, err = ctlauth.ParseAuthorizedKeys(strings.NewReader("UNOTAKEY bob\n"), "authorized_launchers")
	fmt.Println(err)
	// Output:
	// alice <nil>
	// true
	// ctlauth: authorized_launchers line 1: "UNOTAKEY" is not an NKey public key (want a user key, starting with U)
}
