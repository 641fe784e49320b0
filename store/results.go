package store

import (
	"context"
	"time"

	"github.com/jobwire/jobwire/job"
)

// ProgressTx stores the progress running jobs report.
type ProgressTx interface {
	// JobProgressMany stores each report on its job, fenced by its lease (the job LEASED or
	// RUNNING under p.Ref's token), replacing the job's earlier progress, in one statement, and
	// says which it applied. A job named twice keeps the later report.
	JobProgressMany(ps []*JobProgressParams) (applied []bool, err error)
}

// JobProgressParams is one progress report.
type JobProgressParams struct {
	Ref      job.LeaseRef
	Progress job.Progress
}

// JobVersion is what a watcher compares to tell that a job changed: its state, its attempt
// count and when its progress last changed.
type JobVersion struct {
	State      job.State
	Attempts   int
	ProgressAt time.Time
}

// VersionOf is j's version.
func VersionOf(j *job.Job) JobVersion {
	v := JobVersion{State: j.State, Attempts: j.Attempts}
	if j.Progress != nil {
		v.ProgressAt = j.Progress.UpdatedAt
	}
	return v
}

// VersionReader reads the versions of many jobs at once (JobVersion), for a watch's backstop:
// one read for every watched job, not one per job.
type VersionReader interface {
	// JobVersions reads the version of each job of ids that exists.
	JobVersions(ctx context.Context, ids []int64) (map[int64]JobVersion, error)
	// FinalAmong counts the jobs of ids that exist and reads which of them are final, in id
	// order, in one statement: a wait's first look, which has no use for the version of a job
	// not final yet, and so reads no row of one (an id named twice counts once).
	FinalAmong(ctx context.Context, ids []int64) (found int, final []int64, err error)
	// JobOutcomes reads the jobs of ids that exist, without payload or history but with their
	// result and progress, in the order of ids: what watchers send, a statement or two for
	// many jobs rather than a read per job.
	JobOutcomes(ctx context.Context, ids []int64) ([]*job.Job, error)
}

// LatestProgress is the reports of ps to write, the last for each lease, and for each of ps the
// index in it of the report written for it: a lease reported twice in one call is written once.
func LatestProgress(ps []*JobProgressParams) (latest []*JobProgressParams, of []int) {
	at := make(map[job.LeaseRef]int, len(ps))
	for i, p := range ps {
		at[p.Ref] = i
	}
	index := make(map[int]int, len(at))
	for i, p := range ps {
		if at[p.Ref] == i {
			index[i] = len(latest)
			latest = append(latest, p)
		}
	}
	of = make([]int, len(ps))
	for i, p := range ps {
		of[i] = index[at[p.Ref]]
	}
	return latest, of
}

// ProgressColumns are the columns ScanProgress reads after the row's first ones.
const ProgressColumns = `progress_attempt, progress_fraction, progress_message, progress_at`

// ScanProgress reads dest from the row's first columns, then a job's progress from the columns
// ProgressColumns: nil when the job has reported none (progress_at NULL).
func ScanProgress(row Scanner, dest ...any) (*job.Progress, error) {
	var attempt, at *int64
	var fraction *float64
	var message *string
	if err := row.Scan(append(dest, &attempt, &fraction, &message, &at)...); err != nil || at == nil {
		return nil, err
	}
	p := &job.Progress{UpdatedAt: fromNanos(*at)}
	if attempt != nil {
		p.Attempt = int(*attempt)
	}
	if fraction != nil {
		p.Fraction, p.HasFraction = *fraction, true
	}
	if message != nil {
		p.Message = *message
	}
	return p, nil
}

// ScanVersion reads a job's id and version from the columns id, state, attempts, progress_at.
func ScanVersion(row Scanner) (int64, JobVersion, error) {
	var id, st int64
	var v JobVersion
	var at *int64
	if err := row.Scan(&id, &st, &v.Attempts, &at); err != nil {
		return 0, v, err
	}
	v.State, v.ProgressAt = job.State(st), fromNull(at)
	return id, v, nil
}
