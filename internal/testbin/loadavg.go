package testbin

import (
	"os"
	"strings"
)

// LoadAvg returns the machine's 1, 5 and 15 minute load averages as /proc/loadavg shows them,
// or "?": benchmarks report it, since a shared machine's load colours every timing.
func LoadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
