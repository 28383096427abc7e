package mpi_test

import (
	"errors"
	"fmt"

	"github.com/mpios/mpios/mpi"
)

// After a resize, an operation on a communicator of the old world fails with a
// *StaleCommError, which matches ErrRevoked: the application re-creates the communicator
// from the new world.
func ExampleStaleCommError() {
	var err error = &mpi.StaleCommError{Op: "Send"}
	fmt.Println(errors.Is(err, mpi.ErrRevoked))
	fmt.Println(err)
	// Output:
	// true
	// mpi: Send: communicator of a world replaced by a resize: re-create it from the new world
}
