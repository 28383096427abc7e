package profiler

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/mpios/mpios/iosbridge"
	"github.com/mpios/mpios/mpi"
)

// DefaultEvery is the publication period of a JobProfiler when JobOptions.Every is 0: the
// default of MPIOS_PROFILE_EVERY.
const DefaultEvery = time.Second

// JobOptions configures StartJob.
type JobOptions struct {
	// Publish sends one JSON-encoded RankProfile (one object per call); under mpirun it
	// publishes on job.ProfileSubject(JobID), where the IOS agent of the rank's node (pcmd)
	// listens. Required. It is called from the JobProfiler's own goroutine and from Close,
	// never concurrently, and never from an mpi call.
	Publish func(data []byte) error
	// JobID and Node label the profiles (MPIOS_JOB_ID, MPIOS_NODE).
	JobID, Node string
	// Every is the publication period; 0 means DefaultEvery.
	Every time.Duration
	// Policy is the job's IOS decision policy (mpirun --policy, MPIOS_POLICY): "" or one of
	// iosbridge.PolicyNames. It travels in every profile, and the agents apply it to this
	// job's ranks instead of their own.
	Policy string
	// OnError, if set, is told of every failed periodic publication; publishing continues.
	// With nil, failures are counted and Close reports them.
	OnError func(error)
}

// Annotation is what the rank knows about itself that mpi calls do not show; pcm reports it
// once its state is registered, and again when it changes.
type Annotation struct {
	// StateBytes is the size of the registered checkpoint state (the migration cost).
	StateBytes int64
	// Iterations is the total number of iterations planned; 0 means unknown.
	Iterations int
}

// JobProfiler profiles one rank of a job and publishes its profile periodically. Its
// methods are safe for concurrent use, and a nil *JobProfiler does nothing, so callers
// need no "profiling on?" checks.
type JobProfiler struct {
	prof    *Profiler
	release func() error
	rank    int
	pid     int
	opts    JobOptions

	mu  sync.Mutex // guards ann
	ann Annotation

	pubMu    sync.Mutex // serializes publications; guards the counters below
	sent     int64
	failures int64
	lastErr  error

	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
	closeErr  error
}

// StartJob starts profiling the calling rank of world: it installs the process's profiler
// as the mpi interceptor (mpi.SetInterceptor, through Profiler.Install), starts timing the
// rank's iterations (Begin) and publishes the rank's RankProfile every opts.Every until
// Close.
//
// One process normally hosts one rank. When several ranks of one job share a process
// (goroutine ranks in tests), they share one Profiler, installed once and uninstalled by the
// last Close. Ranks of different jobs in one process get profilers of their own, but the
// interceptor is process-wide and mpi does not say which world a communicator belongs to,
// so their counts mix: run one job per process.
func StartJob(world *mpi.Comm, opts JobOptions) (*JobProfiler, error) {
	switch {
	case world == nil:
		return nil, errors.New("profiler: start job: nil communicator")
	case opts.Publish == nil:
		return nil, errors.New("profiler: start job: no Publish function")
	case opts.Every < 0:
		return nil, fmt.Errorf("profiler: start job: period %v is negative", opts.Every)
	}
	if opts.Every == 0 {
		opts.Every = DefaultEvery
	}
	opts.Policy = strings.ToLower(strings.TrimSpace(opts.Policy))
	if opts.Policy != "" {
		if _, err := iosbridge.PolicyByName(opts.Policy); err != nil {
			return nil, fmt.Errorf("profiler: start job: %w", err)
		}
	}
	prof, release, err := acquire(opts.JobID, opts.Node)
	if err != nil {
		return nil, err
	}
	j := &JobProfiler{
		prof: prof, release: release, rank: world.WorldRank(world.Rank()), pid: os.Getpid(), opts: opts,
		stop: make(chan struct{}), done: make(chan struct{}),
	}
	if err := prof.Begin(j.rank, time.Now()); err != nil {
		_ = release()
		return nil, err
	}
	go j.loop()
	return j, nil
}

// shared is the profiler of the process's job, shared by its ranks.
var shared struct {
	mu   sync.Mutex
	p    *Profiler
	job  string
	refs int
}

// acquire returns the process's profiler for job, installing it on first use, and the
// function that gives it back.
func acquire(jobID, node string) (*Profiler, func() error, error) {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.p != nil && shared.job == jobID {
		shared.refs++
		return shared.p, releaseShared, nil
	}
	p := New(Options{Job: jobID, Node: node})
	if err := p.Install(); err != nil {
		return nil, nil, err
	}
	if shared.p != nil { // another job in this process: a profiler of its own
		return p, p.Uninstall, nil
	}
	shared.p, shared.job, shared.refs = p, jobID, 1
	return p, releaseShared, nil
}

func releaseShared() error {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.refs--; shared.refs > 0 {
		return nil
	}
	p := shared.p
	shared.p, shared.job = nil, ""
	return p.Uninstall()
}

// Iteration marks the end of iteration iter of the rank (pcm calls it at every iteration
// boundary): it closes the interval whose wall time, communication and computation the
// iteration-time estimate averages.
func (j *JobProfiler) Iteration(iter int) {
	if j == nil {
		return
	}
	// The only error is an interval ending before it started, impossible with time.Now's
	// monotonic clock.
	_ = j.prof.Iteration(j.rank, iter, time.Now())
}

// Annotate records the rank's state size and planned iterations for the next profiles.
func (j *JobProfiler) Annotate(a Annotation) {
	if j == nil {
		return
	}
	j.mu.Lock()
	j.ann = Annotation{StateBytes: max(0, a.StateBytes), Iterations: max(0, a.Iterations)}
	j.mu.Unlock()
}

// Profile returns the rank's profile now, as it would be published.
func (j *JobProfiler) Profile() RankProfile {
	if j == nil {
		return RankProfile{}
	}
	p, ok := j.prof.SnapshotRank(j.rank)
	if !ok {
		p = RankProfile{Rank: j.rank, At: time.Now()}
	}
	j.mu.Lock()
	a := j.ann
	j.mu.Unlock()
	p.Job, p.Node, p.PID, p.Policy = j.opts.JobID, j.opts.Node, j.pid, j.opts.Policy
	p.StateBytes, p.PlannedIterations = a.StateBytes, int64(a.Iterations)
	return p
}

// Published returns how many profiles were handed to Publish successfully.
func (j *JobProfiler) Published() int64 {
	if j == nil {
		return 0
	}
	j.pubMu.Lock()
	defer j.pubMu.Unlock()
	return j.sent
}

func (j *JobProfiler) publish() error {
	j.pubMu.Lock()
	defer j.pubMu.Unlock()
	data, err := json.Marshal(j.Profile())
	if err == nil {
		err = j.opts.Publish(data)
	}
	if err != nil {
		err = fmt.Errorf("profiler: job %s rank %d: publish profile: %w", j.opts.JobID, j.rank, err)
		j.failures++
		j.lastErr = err
		return err
	}
	j.sent++
	return nil
}

func (j *JobProfiler) loop() {
	defer close(j.done)
	t := time.NewTicker(j.opts.Every)
	defer t.Stop()
	for {
		select {
		case <-j.stop:
			return
		case <-t.C:
			if err := j.publish(); err != nil && j.opts.OnError != nil {
				j.opts.OnError(err)
			}
		}
	}
}

// Close stops the periodic publication, publishes the rank's final profile and, with the
// last rank of the process, uninstalls the interceptor. It returns the final publication's
// error, an uninstall error, and (when OnError is nil) a summary of failed periodic
// publications. Later calls return the same.
func (j *JobProfiler) Close() error {
	if j == nil {
		return nil
	}
	j.closeOnce.Do(func() {
		close(j.stop)
		<-j.done
		j.pubMu.Lock()
		failures, last := j.failures, j.lastErr
		j.pubMu.Unlock()
		var errs []error
		if failures > 0 && j.opts.OnError == nil {
			errs = append(errs, fmt.Errorf("profiler: job %s rank %d: %d profile publications failed, last: %w", j.opts.JobID, j.rank, failures, last))
		}
		if err := j.publish(); err != nil {
			errs = append(errs, err)
		}
		if err := j.release(); err != nil {
			errs = append(errs, err)
		}
		j.closeErr = errors.Join(errs...)
	})
	return j.closeErr
}
