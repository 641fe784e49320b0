package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"slices"

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

// JobProgressMany stores the latest progress report of each job, each with one compiled
// statement (see store.ProgressTx): a statement a report costs less than one statement reading
// them all from a JSON list, as for successes (JobSucceedMany; BenchmarkJobProgressMany).
func (t *tx) JobProgressMany(ps []*store.JobProgressParams) ([]bool, error) {
	applied := make([]bool, len(ps))
	if len(ps) == 0 {
		return applied, nil
	}
	latest, of := store.LatestProgress(ps)
	stored := make([]bool, len(latest))
	for i, p := range latest {
		var fraction sql.NullFloat64 // NULL: no fraction
		if p.Progress.HasFraction {
			fraction = sql.NullFloat64{Float64: p.Progress.Fraction, Valid: true}
		}
		n, err := t.exec(`UPDATE jobs SET progress_attempt = ?, progress_fraction = ?, progress_message = ?,
			progress_at = ? WHERE id = ? AND lease_token = ? AND lease_secret = ? AND state IN (3, 4)`,
			p.Progress.Attempt, fraction, p.Progress.Message, nanos(p.Progress.UpdatedAt),
			p.Ref.JobID, p.Ref.Token.Seq, p.Ref.Token.Secret[:])
		if err != nil {
			return nil, err
		}
		stored[i] = n == 1
	}
	for i := range ps {
		applied[i] = stored[of[i]]
	}
	return applied, nil
}

// JobVersions reads what watchers compare of each job (store.VersionReader), in one statement
// whatever their number: the ids go in as one JSON array, not a placeholder each.
func (s *Store) JobVersions(ctx context.Context, ids []int64) (map[int64]store.JobVersion, error) {
	out := make(map[int64]store.JobVersion, len(ids))
	err := s.read(ctx, "job_versions", func(ctx context.Context) error {
		clear(out)
		rows, err := s.r.QueryContext(ctx, `SELECT id, state, attempts, progress_at FROM jobs
			WHERE id IN (SELECT value FROM json_each(?))`, idsJSON(ids))
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

// FinalAmong counts the jobs of ids that exist and reads which are final (store.VersionReader):
// one row comes back, whatever the number of ids, so no job costs a row through the driver
// (about 1 µs a row of JobVersions). Ids that run on without a gap, as a batch's do, are looked
// up as ranges (idRanges).
func (s *Store) FinalAmong(ctx context.Context, ids []int64) (int, []int64, error) {
	var found int
	var final []int64
	err := s.read(ctx, "final_among", func(ctx context.Context) error {
		var list string
		q, arg := finalAmongSQL(ids)
		if err := s.r.QueryRowContext(ctx, q, arg).Scan(&found, &list); err != nil {
			return err
		}
		final = nil
		return json.Unmarshal([]byte(list), &final)
	})
	if err != nil {
		return 0, nil, err
	}
	slices.Sort(final)
	return found, final, nil
}

// finalAmongSQL is FinalAmong's statement for ids and its argument: a lookup of each id (a
// JSON array), or of each range of ids (a JSON array of [first, last] pairs) when they come
// in ranges of four ids or more on average, which SQLite walks as spans of the table rather
// than an id at a time: 10,000 ids of a batch take about a third of the time.
func finalAmongSQL(ids []int64) (string, string) {
	const agg = `SELECT count(*), json_group_array(jobs.id) FILTER (WHERE jobs.state IN (5, 6, 7)) FROM `
	ranges := idRanges(ids)
	if len(ranges)*4 > len(ids) {
		return agg + `jobs WHERE jobs.id IN (SELECT value FROM json_each(?))`, idsJSON(ids)
	}
	b, _ := json.Marshal(ranges)
	return agg + `json_each(?) AS r JOIN jobs ON jobs.id BETWEEN r.value ->> 0 AND r.value ->> 1`, string(b)
}

// idRanges is ids, sorted and each once, as [first, last] ranges without a gap.
func idRanges(ids []int64) [][2]int64 {
	sorted := slices.Compact(slices.Sorted(slices.Values(ids)))
	var ranges [][2]int64
	for _, id := range sorted {
		if n := len(ranges); n > 0 && ranges[n-1][1]+1 == id {
			ranges[n-1][1] = id
			continue
		}
		ranges = append(ranges, [2]int64{id, id})
	}
	return ranges
}

// resultArg is a success's result as a statement's argument: NULL when there is none.
func resultArg(result []byte) any {
	if len(result) == 0 {
		return nil
	}
	return result
}

// JobOutcomes reads jobs with their results and progress (store.VersionReader): the columns of
// a listing, the result and the progress of every job in one statement, the ids as one JSON
// array. Watchers read each job that finishes through it, so its cost per job is what a wait
// adds to a job's.
func (s *Store) JobOutcomes(ctx context.Context, ids []int64) ([]*job.Job, error) {
	byID := make(map[int64]*job.Job, len(ids))
	err := s.read(ctx, "job_outcomes", func(ctx context.Context) error {
		clear(byID)
		rows, err := s.r.QueryContext(ctx, `SELECT `+listColumns+`, result, `+store.ProgressColumns+`
			FROM jobs WHERE id IN (SELECT value FROM json_each(?))`, idsJSON(ids))
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

// scanFunc is a scanner that calls itself: a row with columns after those scanJob reads.
type scanFunc func(dest ...any) error

func (f scanFunc) Scan(dest ...any) error { return f(dest...) }
