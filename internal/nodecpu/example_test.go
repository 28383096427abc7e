package nodecpu_test

import (
	"fmt"
	"testing/fstest"
	"time"

	"github.com/mpios/mpios/internal/nodecpu"
)

// A node that is a cgroup v2 with a quota of 1.5 CPUs on a 4-CPU machine: between two
// snapshots one second apart it used 0.75 CPU, half of its quota.
func ExampleMeasure() {
	tree := func(usageUsec, busy, idle int) fstest.MapFS {
		return fstest.MapFS{
			"proc/self/cgroup":                   {Data: []byte("0::/mpios.slice\n")},
			"proc/self/mountinfo":                {Data: []byte("31 23 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n")},
			"sys/devices/system/cpu/online":      {Data: []byte("0-3\n")},
			"proc/stat":                          {Data: []byte(fmt.Sprintf("cpu  %d 0 0 %d 0 0 0 0 0 0\n", busy, idle))},
			"sys/fs/cgroup/mpios.slice/cpu.max":  {Data: []byte("150000 100000\n")},
			"sys/fs/cgroup/mpios.slice/cpu.stat": {Data: []byte(fmt.Sprintf("usage_usec %d\n", usageUsec))},
		}
	}
	at := time.Unix(1000, 0)
	r0, _ := nodecpu.New(tree(1_000_000, 100, 300))
	r1, _ := nodecpu.New(tree(1_750_000, 260, 540))
	c0, _ := r0.Counters(at)
	c1, _ := r1.Counters(at.Add(time.Second))
	l, err := nodecpu.Measure(c0, c1, true)
	fmt.Println(l.Source, l.Capacity, l.Used, l.Availability, err)
	// Output: cgroup v2 cpu.stat usage_usec 1.5 0.75 0.5 <nil>
}
