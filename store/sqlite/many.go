package sqlite

import (
	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/store"
)

// JobStartMany starts each lease with JobStart: statements here cost no round trip, so one
// per lease is as cheap as one for all.
func (t *tx) JobStartMany(ps []*store.JobStartParams) ([]bool, error) {
	started := make([]bool, len(ps))
	for i, p := range ps {
		var err error
		if started[i], err = t.JobStart(p); err != nil {
			return nil, err
		}
	}
	return started, nil
}

// JobReleaseMany releases each lease with JobRelease (see JobStartMany).
func (t *tx) JobReleaseMany(refs []job.LeaseRef) ([]bool, error) {
	released := make([]bool, len(refs))
	for i, r := range refs {
		var err error
		if released[i], err = t.JobRelease(r); err != nil {
			return nil, err
		}
	}
	return released, nil
}

// JobLockRows does nothing: a SQLite database has one writer at a time, whose transaction
// holds every row it writes.
func (t *tx) JobLockRows([]int64) error { return nil }
