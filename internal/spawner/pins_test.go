package spawner

import (
	"strings"
	"testing"
)

// "A way to pin arguments" (issue 14): an allowed program that --pin-args names runs only
// with the arguments a pin allows; heat2d -dump FILE can no longer overwrite FILE.
func TestPinnedArgumentsAreTheOnlyOnesAllowed(t *testing.T) {
	pins, err := parsePins([]string{
		"/opt/mpios/bin/heat2d -n * -iters *",
		"/opt/mpios/bin/heat2d -n *",
		"/opt/mpios/bin/probe", // no argument at all
	})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		prog string
		args []string
		ok   bool
	}{
		{"/opt/mpios/bin/heat2d", []string{"-n", "96", "-iters", "50"}, true},
		{"/opt/mpios/bin/heat2d", []string{"-n", "96"}, true},
		{"/opt/mpios/bin/heat2d", nil, false},
		{"/opt/mpios/bin/heat2d", []string{"-n", "96", "-dump", "/etc/passwd"}, false},
		{"/opt/mpios/bin/heat2d", []string{"-n", "96", "-iters", "50", "-dump", "x"}, false},
		{"/opt/mpios/bin/heat2d", []string{"-n", "a/b"}, false}, // '*' does not cross '/'
		{"/opt/mpios/bin/probe", nil, true},
		{"/opt/mpios/bin/probe", []string{"-v"}, false},
		{"/opt/mpios/bin/jacobi", []string{"-dump", "/anywhere"}, true}, // not pinned: the --allow risk
	}
	for _, c := range cases {
		why := checkArgs(pins, c.prog, c.args)
		if (why == "") != c.ok {
			t.Errorf("%s %q: %q, want allowed %v", c.prog, c.args, why, c.ok)
		}
		if !c.ok && !strings.Contains(why, "--pin-args allows only") {
			t.Errorf("%s %q: refusal %q does not name the pins", c.prog, c.args, why)
		}
	}
}

func TestPinArgsErrors(t *testing.T) {
	for spec, want := range map[string]string{
		"":                  "want an absolute program pattern",
		"bin/heat2d -n *":   "want an absolute program pattern",
		"/opt/heat2d -n [":  "syntax error in pattern",
		"/opt/[/heat2d -n ": "syntax error in pattern",
	} {
		if _, err := parsePins([]string{spec}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("--pin-args %q: %v, want %q", spec, err, want)
		}
	}
}
