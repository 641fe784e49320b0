package sqlite

import (
	"fmt"

	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/store"
)

// JobChangeWaiting reads the job and writes the change under its condition (Cond): one writer
// at a time, so what it read is what the write sees.
func (t *tx) JobChangeWaiting(c *store.WaitingChange) (*job.Job, bool, error) {
	jobs, err := t.queryJobs(`SELECT `+listColumns+` FROM jobs WHERE id = ?`, c.ID)
	if err != nil {
		return nil, false, err
	}
	if len(jobs) == 0 {
		return nil, false, fmt.Errorf("job %d: %w", c.ID, store.ErrNotFound)
	}
	before := jobs[0]
	var n int64
	where := ` WHERE id = ? AND ` + c.Cond()
	switch {
	case c.Delete:
		var d int
		d, err = t.deleteJobs(`id = ? AND `+c.Cond(), c.ID)
		n = int64(d)
	case c.RunNow:
		n, err = t.exec(`UPDATE jobs SET state = 2, run_at = ?, priority = COALESCE(?, priority)`+where,
			nanos(c.Now), priorityArg(c.Priority), c.ID)
	default:
		n, err = t.exec(`UPDATE jobs SET priority = COALESCE(?, priority)`+where, priorityArg(c.Priority), c.ID)
	}
	return before, n == 1, err
}

func priorityArg(p *int) any {
	if p == nil {
		return nil
	}
	return *p
}
