package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobwire/jobwire/store"
)

// This file holds the periodic schedules (store.ScheduleReader, store.ScheduleTx). A
// transaction that fires a schedule locks its row first (ScheduleLock), so brokers firing one
// schedule at once take turns, and the second sees the occurrence the first recorded.

// ScheduleList reads every schedule, by name.
func (s *Store) ScheduleList(ctx context.Context) ([]store.ScheduleRecord, error) {
	var out []store.ScheduleRecord
	err := s.read(ctx, "schedule_list", func(ctx context.Context) error {
		rows, err := s.pool.Query(ctx, `SELECT `+store.ScheduleColumns+` FROM schedules ORDER BY name`)
		if err != nil {
			return err
		}
		defer rows.Close()
		out, err = store.CollectRows(rows, func(row store.Scanner) (store.ScheduleRecord, error) {
			r, err := store.ScanSchedule(row)
			if err != nil {
				return store.ScheduleRecord{}, err
			}
			return *r, nil
		})
		return err
	})
	return out, err
}

// ScheduleGet reads one schedule.
func (s *Store) ScheduleGet(ctx context.Context, name string) (*store.ScheduleRecord, error) {
	var out *store.ScheduleRecord
	err := s.read(ctx, "schedule_get", func(ctx context.Context) error {
		r, err := store.ScanSchedule(s.pool.QueryRow(ctx, `SELECT `+store.ScheduleColumns+` FROM schedules WHERE name = $1`, name))
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("schedule %q: %w", name, store.ErrNotFound)
		}
		out = r
		return err
	})
	return out, err
}

func (t *tx) ScheduleLock(name string) (*store.ScheduleRecord, error) {
	r, err := store.ScanSchedule(t.tx.QueryRow(t.ctx, `SELECT `+store.ScheduleColumns+` FROM schedules WHERE name = $1 FOR UPDATE`, name))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("schedule %q: %w", name, store.ErrNotFound)
	}
	return r, err
}

func (t *tx) ScheduleSave(r *store.ScheduleRecord) error {
	_, err := t.exec(`INSERT INTO schedules (`+store.ScheduleColumns+`) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
		ON CONFLICT (name) DO UPDATE SET spec = excluded.spec, from_config = excluded.from_config,
			paused = excluded.paused, note = excluded.note, next_fire_at = excluded.next_fire_at,
			last_fire_at = excluded.last_fire_at, last_job_id = excluded.last_job_id,
			buffered_fire_at = excluded.buffered_fire_at, updated_at = excluded.updated_at`,
		r.Name, r.Spec, r.FromConfig, r.Paused, r.Note, nanos(r.NextFireAt), nullNanos(r.LastFireAt), r.LastJobID,
		nullNanos(r.BufferedFireAt), nanos(r.CreatedAt), nanos(r.UpdatedAt))
	return err
}

func (t *tx) ScheduleDelete(name string) (bool, error) {
	if _, err := t.exec(`DELETE FROM schedule_occurrences WHERE schedule = $1`, name); err != nil {
		return false, err
	}
	n, err := t.exec(`DELETE FROM schedules WHERE name = $1`, name)
	return n > 0, err
}

func (t *tx) ScheduleOccurrenceAdd(name string, at time.Time, jobID int64) (bool, error) {
	n, err := t.exec(`INSERT INTO schedule_occurrences (schedule, fire_at, job_id) VALUES ($1, $2, $3)
		ON CONFLICT DO NOTHING`, name, nanos(at), jobID)
	return n > 0, err
}

func (t *tx) ScheduleOccurrenceGet(name string, at time.Time) (int64, bool, error) {
	var id int64
	err := t.tx.QueryRow(t.ctx, `SELECT job_id FROM schedule_occurrences WHERE schedule = $1 AND fire_at = $2`, name, nanos(at)).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	return id, err == nil, err
}

func (t *tx) ScheduleOccurrenceDeleteBefore(name string, before time.Time) error {
	_, err := t.exec(`DELETE FROM schedule_occurrences WHERE schedule = $1 AND fire_at < $2`, name, nanos(before))
	return err
}
