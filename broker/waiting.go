package broker

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/store"
)

// Operations on waiting jobs: an operator runs a scheduled job now, retries now a job waiting
// out its backoff, deletes a job that waits, or changes its priority. Each is one job's write
// through the writer, applied by the store only while the job is still in the states the
// operation allows (store.WaitingChange), checked under the job's lock: a job another broker
// leased meanwhile is left alone, and the caller is told which state it found.

// ErrNotWaiting is matched by the error of an operation on a waiting job that found the job in
// a state the operation does not apply to: nothing was changed.
var ErrNotWaiting = errors.New("job is not waiting")

// notWaitingError says what the job's state is and what the operation needs.
type notWaitingError struct {
	id    int64
	state job.State
	need  string
}

func (e *notWaitingError) Error() string {
	return fmt.Sprintf("job %d is %s: %s", e.id, e.state, e.need)
}

func (e *notWaitingError) Is(target error) bool { return target == ErrNotWaiting }

// waiting are the states of a job that waits to run.
var waiting = []job.State{job.StateScheduled, job.StatePending}

// RunNow makes a SCHEDULED job ready now, whether it waits for its first run or a retry, and
// returns it as it is after.
func (b *Broker) RunNow(ctx context.Context, id int64) (*job.Job, error) {
	c := &store.WaitingChange{ID: id, From: []job.State{job.StateScheduled}, RunNow: true}
	return b.changeWaiting(ctx, c, AuditJobRunNow, "only a SCHEDULED job can be run now")
}

// RetryNow ends the backoff of a job waiting to retry (SCHEDULED, an attempt spent) and makes
// it ready now.
func (b *Broker) RetryNow(ctx context.Context, id int64) (*job.Job, error) {
	c := &store.WaitingChange{ID: id, From: []job.State{job.StateScheduled}, Retrying: true, RunNow: true}
	return b.changeWaiting(ctx, c, AuditJobRetryNow,
		"only a job waiting out a retry backoff (SCHEDULED after a failed attempt) can be retried now; run-now runs a scheduled job")
}

// DeleteWaiting deletes a job that waits (PENDING or SCHEDULED) with its attempts, and returns
// it as it was. A job leased or running is cancelled instead (Cancel).
func (b *Broker) DeleteWaiting(ctx context.Context, id int64) (*job.Job, error) {
	c := &store.WaitingChange{ID: id, From: waiting, Delete: true}
	return b.changeWaiting(ctx, c, AuditJobDelete,
		"only a PENDING or SCHEDULED job can be deleted; cancel a leased or running one")
}

// SetPriority changes the priority of a job that waits (PENDING or SCHEDULED) and returns it as
// it is after.
func (b *Broker) SetPriority(ctx context.Context, id int64, priority int) (*job.Job, error) {
	c := &store.WaitingChange{ID: id, From: waiting, Priority: &priority}
	return b.changeWaiting(ctx, c, AuditJobPriority, "only a PENDING or SCHEDULED job's priority can be changed")
}

// changeWaiting applies c with its audit event in one write, and returns the job after it (as
// it was, for a delete); need says what the operation needs, for a job found in another state.
func (b *Broker) changeWaiting(ctx context.Context, c *store.WaitingChange, action, need string) (*job.Job, error) {
	var before *job.Job
	var changed bool
	err := b.do(ctx, strings.ReplaceAll(action, ".", "_"), func(tx store.Tx) error {
		c.Now = b.now()
		var err error
		if before, changed, err = tx.JobChangeWaiting(c); err != nil || !changed {
			return err
		}
		if c.RunNow || (c.Priority != nil && before.State == job.StatePending) {
			tx.Publish(readyEvent) // a job ready now, or one that may now go first
		}
		return b.audit(ctx, tx, &store.AuditEvent{Action: action, Target: strconv.FormatInt(c.ID, 10),
			Detail: describeWaitingChange(c, before), Count: 1, JobIDs: []int64{c.ID}})
	})
	if err != nil {
		return nil, err
	}
	if !changed {
		return nil, &notWaitingError{id: c.ID, state: before.State, need: need}
	}
	if c.RunNow || c.Priority != nil {
		b.signal()
	}
	if c.Delete {
		return before, nil
	}
	return b.st.JobGet(ctx, c.ID)
}

// describeWaitingChange words a change for its audit event's detail.
func describeWaitingChange(c *store.WaitingChange, before *job.Job) string {
	d := "was " + before.State.String()
	if c.Priority != nil {
		d += fmt.Sprintf(" priority=%d (was %d)", *c.Priority, before.Priority)
	}
	if c.RunNow && before.State == job.StateScheduled {
		d += " run_at=" + before.RunAt.UTC().Format("2006-01-02T15:04:05Z")
	}
	return d
}
