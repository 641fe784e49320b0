package sqlite

import (
	"context"
	"database/sql"
	"encoding/hex"
	"encoding/json"

	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/store"
)

// readOutcome fills a job read by JobGet with its result and progress: they are read apart from
// jobColumns, which leases and listings share and need neither.
func readOutcome(ctx context.Context, db *sql.DB, j *job.Job) error {
	var err error
	j.Progress, err = store.ScanProgress(db.QueryRowContext(ctx, `SELECT result, `+store.ProgressColumns+`
		FROM jobs WHERE id = ?`, j.ID), &j.Result)
	return err
}

// JobProgressMany stores progress reports with one statement (see store.ProgressTx).
func (t *tx) JobProgressMany(ps []*store.JobProgressParams) ([]bool, error) {
	applied := make([]bool, len(ps))
	if len(ps) == 0 {
		return applied, nil
	}
	latest, of := store.LatestProgress(ps)
	rows := make([][]any, len(latest))
	for i, p := range latest {
		var fraction any // JSON null: no fraction
		if p.Progress.HasFraction {
			fraction = p.Progress.Fraction
		}
		rows[i] = []any{i, p.Ref.JobID, p.Ref.Token.Seq, hex.EncodeToString(p.Ref.Token.Secret[:]),
			p.Progress.Attempt, fraction, p.Progress.Message, nanos(p.Progress.UpdatedAt)}
	}
	list, err := json.Marshal(rows)
	if err != nil {
		return nil, err
	}
	res, err := t.query(`UPDATE jobs SET progress_attempt = f.value ->> 4, progress_fraction = f.value ->> 5,
		progress_message = f.value ->> 6, progress_at = f.value ->> 7
		FROM json_each(?) AS f
		WHERE jobs.id = f.value ->> 1 AND jobs.lease_token = f.value ->> 2
		AND jobs.lease_secret = unhex(f.value ->> 3) AND jobs.state IN (3, 4)
		RETURNING jobs.id, jobs.lease_token`, string(list))
	if err != nil {
		return nil, err
	}
	defer res.Close()
	stored := make(map[[2]int64]bool, len(ps))
	for res.Next() {
		var id, seq int64
		if err := res.Scan(&id, &seq); err != nil {
			return nil, err
		}
		stored[[2]int64{id, seq}] = true
	}
	if err := res.Err(); err != nil {
		return nil, err
	}
	// The secret matched in the statement: a job and sequence it changed name these leases.
	for i := range ps {
		p := latest[of[i]]
		applied[i] = stored[[2]int64{p.Ref.JobID, p.Ref.Token.Seq}]
	}
	return applied, nil
}

// JobVersions reads what watchers compare of each job (store.VersionReader).
func (s *Store) JobVersions(ctx context.Context, ids []int64) (map[int64]store.JobVersion, error) {
	out := make(map[int64]store.JobVersion, len(ids))
	err := s.read(ctx, "job_versions", func(ctx context.Context) error {
		return chunks(ids, func(part []int64) error {
			rows, err := s.r.QueryContext(ctx, `SELECT id, state, attempts, progress_at FROM jobs WHERE id IN (`+
				placeholders(len(part))+`)`, idArgs(part)...)
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
	})
	return out, err
}

// resultArg is a success's result as a statement's argument: NULL when there is none.
func resultArg(result []byte) any {
	if len(result) == 0 {
		return nil
	}
	return result
}

// JobOutcomes reads jobs with their results and progress (store.VersionReader).
func (s *Store) JobOutcomes(ctx context.Context, ids []int64) ([]*job.Job, error) {
	jobs, err := s.JobGetMany(ctx, ids)
	if err != nil || len(jobs) == 0 {
		return jobs, err
	}
	byID := make(map[int64]*job.Job, len(jobs))
	for _, j := range jobs {
		byID[j.ID] = j
	}
	err = s.read(ctx, "job_outcomes", func(ctx context.Context) error {
		return chunks(ids, func(part []int64) error {
			rows, err := s.r.QueryContext(ctx, `SELECT id, result, `+store.ProgressColumns+`
				FROM jobs WHERE id IN (`+placeholders(len(part))+`)`, idArgs(part)...)
			if err != nil {
				return err
			}
			defer rows.Close()
			for rows.Next() {
				var id int64
				var result []byte
				progress, err := store.ScanProgress(rows, &id, &result)
				if err != nil {
					return err
				}
				if j := byID[id]; j != nil {
					j.Result, j.Progress = result, progress
				}
			}
			return rows.Err()
		})
	})
	return jobs, err
}
