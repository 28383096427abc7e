package testbin

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
)

// RankPID returns the pid of the process on this machine running rank of job jobID (found
// by its launch environment, MPIOS_JOB_ID and MPIOS_RANK), so tests and benchmarks can kill
// or stop one rank as a crash would.
func RankPID(jobID string, rank int) (int, bool) {
	want := [][]byte{[]byte("MPIOS_JOB_ID=" + jobID), []byte("MPIOS_RANK=" + strconv.Itoa(rank))}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		comm, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "comm"))
		if err != nil || bytes.HasPrefix(comm, []byte("mpirun")) {
			continue
		}
		if hasAll(bytes.Split(env, []byte{0}), want) {
			return pid, true
		}
	}
	return 0, false
}

func hasAll(vars, want [][]byte) bool {
	for _, w := range want {
		found := false
		for _, v := range vars {
			if bytes.Equal(v, w) {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}
