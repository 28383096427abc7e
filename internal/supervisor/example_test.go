package supervisor_test

import (
	"fmt"
	"time"

	"github.com/mpios/mpios/internal/job"
	"github.com/mpios/mpios/internal/supervisor"
)

// The loop around a Machine: feed it what happened, carry out what it returns. Here a
// one-rank job starts, says hello and fails; as no other process runs, the failure is
// decided at once.
func ExampleMachine() {
	m, err := supervisor.New(supervisor.Config{JobID: "demo", NP: 1, RendezvousTimeout: time.Second, KillGrace: time.Second})
	if err != nil {
		fmt.Println(err)
		return
	}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	show := func(acts []supervisor.Action) {
		for _, a := range acts {
			switch a := a.(type) {
			case supervisor.StartRank:
				fmt.Printf("start rank %d\n", a.Rank)
			case supervisor.Reply:
				fmt.Printf("reply to %s\n", a.To)
			case supervisor.Log:
				fmt.Printf("log: %s\n", a.Line)
			case supervisor.Publish:
				fmt.Printf("publish on %s\n", a.Subject)
			}
		}
	}
	show(m.Step(now, supervisor.Launch{}))
	show(m.Step(now, supervisor.Started{Proc: 1, PID: 42}))
	hello, _ := job.Encode(job.Hello{Rank: 0, Addr: "127.0.0.1:5000", PID: 42})
	show(m.Step(now, supervisor.Hello{Reply: "inbox.1", Data: hello}))
	show(m.Step(now, supervisor.Exited{Proc: 1, Status: 3, Desc: "exited with status 3", At: now}))
	fmt.Println("done:", m.Done(), "status:", m.Failure().Code)
	// Output:
	// start rank 0
	// reply to inbox.1
	// log: rank 0 (pid 42) exited with status 3
	// publish on mpios.job.demo.event
	// done: true status: 3
}
