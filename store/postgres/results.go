package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/store"
)

// progressManySQL stores progress reports fenced by their leases (see updateLeases).
const progressManySQL = `UPDATE jobs SET progress_attempt = u.attempt,
	progress_fraction = CASE WHEN u.has THEN u.fraction END, progress_message = u.message, progress_at = u.at
	FROM unnest($1::bigint[], $2::bigint[], $3::bytea[], $4::integer[], $5::boolean[], $6::float8[], $7::text[], $8::bigint[])
		AS u(id, seq, secret, attempt, has, fraction, message, at)
	WHERE jobs.id = u.id AND jobs.lease_token = u.seq AND jobs.lease_secret = u.secret AND jobs.state + 0 IN (3, 4)
	RETURNING jobs.id, jobs.lease_token, jobs.lease_secret`

// JobProgressMany stores progress reports with one statement (see store.ProgressTx).
func (t *tx) JobProgressMany(ps []*store.JobProgressParams) ([]bool, error) {
	applied := make([]bool, len(ps))
	if len(ps) == 0 {
		return applied, nil
	}
	latest, of := store.LatestProgress(ps)
	n := len(latest)
	ids, seqs, secrets := leaseArrays(n, func(i int) job.LeaseRef { return latest[i].Ref })
	attempts, has, fractions := make([]int32, n), make([]bool, n), make([]float64, n)
	messages, at := make([]string, n), make([]int64, n)
	for i, p := range latest {
		pr := p.Progress
		attempts[i], has[i], fractions[i], messages[i], at[i] = int32(pr.Attempt), pr.HasFraction, pr.Fraction,
			pr.Message, nanos(pr.UpdatedAt)
	}
	changed, err := t.updateLeases(progressManySQL, ids, seqs, secrets, attempts, has, fractions, messages, at)
	if err != nil {
		return nil, err
	}
	for i := range ps {
		applied[i] = changed[latest[of[i]].Ref]
	}
	return applied, nil
}

// readOutcome fills a job read by JobGet with its result and progress: they are read apart from
// jobColumns, which leases and listings share and need neither.
func readOutcome(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, j *job.Job) error {
	var err error
	j.Progress, err = store.ScanProgress(q.QueryRow(ctx, `SELECT result, `+store.ProgressColumns+`
		FROM jobs WHERE id = $1`, j.ID), &j.Result)
	return err
}

// JobVersions reads what watchers compare of each job (store.VersionReader).
func (s *Store) JobVersions(ctx context.Context, ids []int64) (map[int64]store.JobVersion, error) {
	out := make(map[int64]store.JobVersion, len(ids))
	err := s.read(ctx, "job_versions", func(ctx context.Context) error {
		clear(out) // a read run again starts afresh
		rows, err := s.pool.Query(ctx, `SELECT id, state, attempts, progress_at FROM jobs WHERE id = ANY($1)`, ids)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			id, v, err := store.ScanVersion(rows)
			if err != nil {
				return err
			}
			out[id] = v
		}
		return rows.Err()
	})
	return out, err
}

// FinalAmong counts the jobs of ids that exist and reads which are final (store.VersionReader),
// in one row whatever the number of ids.
func (s *Store) FinalAmong(ctx context.Context, ids []int64) (int, []int64, error) {
	var found int
	var final []int64
	err := s.read(ctx, "final_among", func(ctx context.Context) error {
		return s.pool.QueryRow(ctx, `SELECT count(*), coalesce(array_agg(id ORDER BY id) FILTER (WHERE state IN (5, 6, 7)), '{}')
			FROM jobs WHERE id = ANY($1)`, ids).Scan(&found, &final)
	})
	if err != nil {
		return 0, nil, err
	}
	return found, final, nil
}

// resultArg is a success's result as a statement's argument: NULL when there is none.
func resultArg(result []byte) []byte {
	if len(result) == 0 {
		return nil
	}
	return result
}

// resultsOf is succeedManySQL's results argument ($11): NULL for a success without one.
func resultsOf(ps []*store.JobFinishParams) [][]byte {
	out := make([][]byte, len(ps))
	for i, p := range ps {
		out[i] = resultArg(p.Result)
	}
	return out
}

// JobOutcomes reads jobs with their results and progress (store.VersionReader): the columns of
// a listing, the result and the progress of every job in one statement, so that each job is read
// as of one moment and a watch pays one statement for the jobs it reads together.
func (s *Store) JobOutcomes(ctx context.Context, ids []int64) ([]*job.Job, error) {
	byID := make(map[int64]*job.Job, len(ids))
	err := s.read(ctx, "job_outcomes", func(ctx context.Context) error {
		clear(byID) // a read run again starts afresh
		rows, err := s.pool.Query(ctx, `SELECT `+listColumns+`, result, `+store.ProgressColumns+`
			FROM jobs WHERE id = ANY($1)`, ids)
		if err != nil {
			return err
		}
		defer rows.Close()
		// One slice of destinations for every row, with room for the result and the progress
		// ScanProgress adds: not two more slices a row.
		buf := make([]any, 0, 48)
		for rows.Next() {
			var result []byte
			var progress *job.Progress
			j, err := scanJob(scanFunc(func(dest ...any) error {
				var err error
				buf = append(append(buf[:0], dest...), &result)
				progress, err = store.ScanProgress(rows, buf...)
				return err
			}))
			if err != nil {
				return err
			}
			j.Result, j.Progress = result, progress
			byID[j.ID] = j
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	return store.InIDOrder(ids, byID), nil
}

// scanFunc is a row that calls itself: a row with columns after those scanJob reads.
type scanFunc func(dest ...any) error

func (f scanFunc) Scan(dest ...any) error { return f(dest...) }
