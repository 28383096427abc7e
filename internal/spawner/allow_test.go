package spawner

import (
	"fmt"
	"testing"
)

func TestAllowed(t *testing.T) {
	t.Parallel()
	pats := []string{"/opt/mpios/bin/*", "/home/*/mpios/heat2d"}
	cases := map[string]bool{
		"/opt/mpios/bin/heat2d":                true,
		"/opt/mpios/bin/sub/heat2d":            false, // '*' does not cross '/'
		"/opt/mpios/bin/../../../bin/sh":       false,
		"/opt/mpios/bin/./heat2d":              true,
		"opt/mpios/bin/heat2d":                 false,
		"../../opt/mpios/bin/heat2d":           false,
		"/home/ann/mpios/heat2d":               true,
		"/home/ann/../../bin/sh":               false,
		"/opt/mpios/bin/heat2d\x00/../../bash": false,
	}
	for path, want := range cases {
		if got := Allowed(pats, path); got != want {
			t.Errorf("Allowed(%q) = %v, want %v", path, got, want)
		}
	}
}

func ExampleAllowed() {
	allow := []string{"/opt/mpios/bin/*"}
	fmt.Println(Allowed(allow, "/opt/mpios/bin/heat2d"))
	fmt.Println(Allowed(allow, "/opt/mpios/bin/../../../bin/sh")) // cleaned to /bin/sh
	fmt.Println(Allowed(allow, "../../bin/sh"))                   // relative: never
	// Output:
	// true
	// false
	// false
}
