// Package procstate answers questions about other processes of this machine by pid, such
// as whether a process recorded in a job record still runs. It is the one implementation
// shared by pcmd and the launcher.
package procstate
