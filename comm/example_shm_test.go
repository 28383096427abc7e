package comm_test

import (
	"fmt"

	"github.com/mpios/mpios/comm"
)

// A launcher removes the shared-memory rings that crashed ranks of a job left on its node
// when it reaps the job (or one of its ranks). It is a no-op for a job that left nothing.
func ExampleRemoveJobSegments() {
	if err := comm.RemoveJobSegments("job-42"); err != nil {
		fmt.Println("cleanup:", err)
		return
	}
	fmt.Println("no rings of job-42 left on", comm.ShmDir)
	// Output: no rings of job-42 left on /dev/shm
}
