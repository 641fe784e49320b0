package postgres

import (
	"fmt"

	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/store"
)

// JobChangeWaiting locks the job (FOR UPDATE, as JobCancel: one job, lockorder.go) and writes
// the change under its condition (Cond), which the job as it is once locked meets or not. A lease of the job by another broker either committed before the lock, and the
// job is seen LEASED, or comes after it and skips the locked row (SKIP LOCKED), finding it
// changed or gone.
func (t *tx) JobChangeWaiting(c *store.WaitingChange) (*job.Job, bool, error) {
	jobs, err := t.queryJobs(`SELECT `+listColumns+` FROM jobs WHERE id = $1 FOR UPDATE`, c.ID)
	if err != nil {
		return nil, false, err
	}
	if len(jobs) == 0 {
		return nil, false, fmt.Errorf("job %d: %w", c.ID, store.ErrNotFound)
	}
	before := jobs[0]
	var n int64
	where := ` WHERE id = $2 AND ` + c.Cond()
	switch {
	case c.Delete:
		var d int
		d, err = t.deleteJobs(`SELECT id FROM jobs WHERE id = $1 AND `+c.Cond()+` FOR UPDATE`, c.ID)
		n = int64(d)
	case c.RunNow:
		n, err = t.exec(`UPDATE jobs SET state = 2, run_at = $1, priority = COALESCE($3, priority)`+where,
			nanos(c.Now), c.ID, priorityArg(c.Priority))
	default:
		n, err = t.exec(`UPDATE jobs SET priority = COALESCE($1, priority)`+where, priorityArg(c.Priority), c.ID)
	}
	return before, n == 1, err
}

func priorityArg(p *int) *int32 {
	if p == nil {
		return nil
	}
	v := int32(*p)
	return &v
}
