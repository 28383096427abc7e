package procstate

import (
	"fmt"
	"os"
	"os/exec"
	"testing"
)

func TestAlive(t *testing.T) {
	if !Alive(os.Getpid()) {
		t.Error("this process is not alive")
	}
	for _, pid := range []int{0, -1} {
		if Alive(pid) {
			t.Errorf("Alive(%d) = true", pid)
		}
	}
	// A process that has exited and been reaped is gone.
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Skip(err)
	}
	if Alive(cmd.Process.Pid) {
		t.Errorf("reaped pid %d is alive", cmd.Process.Pid)
	}
}

func ExampleAlive() {
	fmt.Println(Alive(os.Getpid()))
	fmt.Println(Alive(0))
	// Output:
	// true
	// false
}
