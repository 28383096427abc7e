package main

import (
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/mpios/mpios/internal/job"
	"github.com/mpios/mpios/internal/jobrecord"
	"github.com/mpios/mpios/internal/launch"
)

// remembered returns how the job named by --restart was started, when the command line
// leaves out what it needs (PROGRAM, or -np without --hosts); nil when it does not.
func remembered(c *cli.Context, remote bool) (*jobrecord.Launch, error) {
	if !c.IsSet("restart") || c.NArg() > 0 && (c.IsSet("np") || remote) {
		return nil, nil
	}
	id := c.String("restart")
	l, err := jobrecord.ReadLaunch(jobrecord.RuntimeDir(), id)
	if errors.Is(err, jobrecord.ErrNoLaunch) {
		what := "PROGRAM"
		if c.NArg() > 0 {
			what = "-np N"
		}
		return nil, &usageError{fmt.Sprintf("--restart %s: missing %s, and mpirun has no record of how job %s was started (%s)", id, what, id, launch.Message(err))}
	}
	if err != nil {
		return nil, &usageError{"--restart: " + launch.Message(err)}
	}
	return &l, nil
}

// recoveryFlags reads --no-recover, --max-recoveries, --hang-timeout and --migrate-timeout.
func recoveryFlags(c *cli.Context, cfg *launch.Config) error {
	n := c.Int("max-recoveries")
	if n < 0 {
		return &usageError{fmt.Sprintf("--max-recoveries %d: want N >= 0", n)}
	}
	cfg.NoRecover, cfg.MaxRecoveries = c.Bool("no-recover") || n == 0, n
	switch d := c.Duration("hang-timeout"); {
	case d < 0:
		return &usageError{"--hang-timeout must not be negative"}
	case d == 0:
		cfg.HangTimeout = -1 // off
	default:
		cfg.HangTimeout = d
	}
	cfg.MigrationTimeout = c.Duration("migrate-timeout")
	if cfg.MigrationTimeout <= 0 {
		return &usageError{"--migrate-timeout must be positive"}
	}
	return nil
}

// restartSecretEnv returns job.EnvRestartSecret set to the secret of job id, the job
// --restart names, from its launch record: the ranks read its checkpoints on the nodes as
// its processes, under its key. Only the job's owner can read the record (0600). Nothing
// when there is no record or it holds no secret: the ranks then ask under their own job's
// key, which only nodes that saw their spawns accept.
func restartSecretEnv(id string) []string {
	l, err := jobrecord.ReadLaunch(jobrecord.RuntimeDir(), id)
	if err != nil || l.Secret == "" {
		return nil
	}
	if b, err := hex.DecodeString(l.Secret); err != nil || len(b) == 0 {
		return nil
	}
	return []string{job.EnvRestartSecret + "=" + l.Secret}
}
