package store

import (
	"strconv"
	"strings"
	"time"

	"github.com/jobwire/jobwire/job"
)

// WaitingChange is an operator's change of one job that waits to run (Tx.JobChangeWaiting):
// run it now, retry it now, delete it or change its priority. It applies only while the job
// is in one of From (and, with Retrying, has spent an attempt): the store checks it in the
// write, so a job another broker leased meanwhile is left alone.
type WaitingChange struct {
	ID int64
	// From are the states the job must be in.
	From []job.State
	// Retrying asks, besides, that the job wait for a retry: it has spent an attempt.
	Retrying bool
	// RunNow makes the job PENDING with its run_at Now.
	RunNow bool
	// Priority, when set, is the job's new priority.
	Priority *int
	// Delete deletes the job and its attempts.
	Delete bool
	Now    time.Time
}

// Cond is c's condition on a job's row in SQL, which the store's write applies under: the
// states of From and, with Retrying, an attempt spent. It holds only numbers.
func (c *WaitingChange) Cond() string {
	states := make([]string, len(c.From))
	for i, s := range c.From {
		states[i] = strconv.Itoa(int(s))
	}
	cond := "state IN (" + strings.Join(states, ", ") + ")"
	if len(states) == 0 {
		cond = "false"
	}
	if c.Retrying {
		cond += " AND attempts > 0"
	}
	return cond
}
