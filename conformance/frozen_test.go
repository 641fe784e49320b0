package conformance

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/jobwire/jobwire/job"
)

// frozenSlack is how long past the lease the scenario waits for a worker to give up a lease
// whose broker is frozen: room for a loaded machine, not for a worker that waits on the broker.
const frozenSlack = 5 * time.Second

// brokerFrozenPastLease: a broker frozen (SIGSTOP) while a handler runs can send no Cancel, so
// the worker must stop the handler by itself, with reason lease_lost, once the lease has run out
// on its own clock, and must not report the handler's outcome. When the broker is back
// (SIGCONT) the attempt ends LEASE_EXPIRED and the job runs again.
func brokerFrozenPastLease(e *env) {
	lease := e.cfg.lease
	if lease == 0 {
		lease = defaultLease
	}
	id := e.lang.name + "-1"
	e.startWorker(id)
	jobID := e.enqueue("wait_cancel", nil)
	e.waitRunning(jobID, 1, id)

	broker := e.broker.p
	broker.signal(e.t, syscall.SIGSTOP)
	stopped := time.Now()
	// The broker extended the lease last before it stopped, so the lease ends by this.
	leaseEnd := stopped.Add(lease)
	marker := fmt.Sprintf("cancelled-%d", jobID)
	reason, at, seen := e.waitMarkerFor(marker, leaseEnd.Add(frozenSlack))
	broker.signal(e.t, syscall.SIGCONT)
	if seen {
		e.t.Logf("the handler stopped %s after the broker froze, %s past the latest end of the lease (%s)",
			at.Sub(stopped).Round(time.Millisecond), at.Sub(leaseEnd).Round(time.Millisecond), lease)
		if reason != "lease_lost" {
			e.t.Errorf("the handler saw cancel reason %q, want lease_lost", reason)
		}
	} else {
		e.t.Errorf("the handler was not cancelled within %s of the broker freezing (lease %s)", lease+frozenSlack, lease)
		// How long it really ran on: until the broker, back, cancelled it.
		data := e.readMarker(marker)
		if at, err := markerTime(filepath.Join(e.dir, marker)); err == nil {
			e.t.Logf("the handler stopped (%s) %s past the latest end of the lease, once the broker was back",
				data, at.Sub(leaseEnd).Round(time.Millisecond))
		}
	}

	// The attempt ended as the broker saw it: a lease that ran out, not the handler's success
	// reported afterwards. The next attempt runs on the same worker.
	j := e.waitRunning(jobID, 2, id)
	if a := j.History[0]; a.Outcome != job.OutcomeLeaseExpired {
		e.t.Errorf("attempt 1 = %s, want LEASE_EXPIRED", describeAttempt(a))
	}
	if _, err := e.c.Cancel(e.t.Context(), jobID); err != nil {
		e.t.Fatal(err)
	}
	j = e.waitState(jobID, job.StateCancelled)
	e.checkAttempts(j, []wantAttempt{{outcome: job.OutcomeLeaseExpired}, {outcome: job.OutcomeCancelled}})
}

// waitMarkerFor waits until deadline for a marker file and returns its content and when the
// worker wrote it; seen is false if it did not appear in time.
func (e *env) waitMarkerFor(name string, deadline time.Time) (data string, at time.Time, seen bool) {
	e.t.Helper()
	path := filepath.Join(e.dir, name)
	for {
		b, err := os.ReadFile(path)
		if err == nil {
			at, err := markerTime(path)
			if err != nil {
				e.t.Fatal(err)
			}
			return string(b), at, true
		}
		if !errors.Is(err, os.ErrNotExist) {
			e.t.Fatal(err)
		}
		if time.Now().After(deadline) {
			return "", time.Time{}, false
		}
		time.Sleep(pollInterval)
	}
}

// markerTime is when a marker file was written.
func markerTime(path string) (time.Time, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return time.Time{}, err
	}
	return fi.ModTime(), nil
}
