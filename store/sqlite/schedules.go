package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/jobwire/jobwire/store"
)

// This file holds the periodic schedules (store.ScheduleReader, store.ScheduleTx). The
// store's writers take turns, so reading a schedule in a write transaction holds it as well as
// a lock would.

// ScheduleList reads every schedule, by name.
func (s *Store) ScheduleList(ctx context.Context) ([]store.ScheduleRecord, error) {
	var out []store.ScheduleRecord
	err := s.read(ctx, "schedule_list", func(ctx context.Context) error {
		rows, err := s.r.QueryContext(ctx, `SELECT `+store.ScheduleColumns+` FROM schedules ORDER BY name`)
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
		r, err := store.ScanSchedule(s.r.QueryRowContext(ctx, `SELECT `+store.ScheduleColumns+` FROM schedules WHERE name = ?`, name))
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("schedule %q: %w", name, store.ErrNotFound)
		}
		out = r
		return err
	})
	return out, err
}

func (t *tx) ScheduleLock(name string) (*store.ScheduleRecord, error) {
	r, err := store.ScanSchedule(t.queryRow(`SELECT `+store.ScheduleColumns+` FROM schedules WHERE name = ?`, name))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("schedule %q: %w", name, store.ErrNotFound)
	}
	return r, err
}

func (t *tx) ScheduleSave(r *store.ScheduleRecord) error {
	_, err := t.exec(`INSERT INTO schedules (`+store.ScheduleColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (name) DO UPDATE SET spec = excluded.spec, from_config = excluded.from_config,
			paused = excluded.paused, note = excluded.note, next_fire_at = excluded.next_fire_at,
			last_fire_at = excluded.last_fire_at, last_job_id = excluded.last_job_id,
			buffered_fire_at = excluded.buffered_fire_at, updated_at = excluded.updated_at`,
		r.Name, r.Spec, r.FromConfig, r.Paused, r.Note, nanos(r.NextFireAt), nullNanos(r.LastFireAt), r.LastJobID,
		nullNanos(r.BufferedFireAt), nanos(r.CreatedAt), nanos(r.UpdatedAt))
	return err
}

func (t *tx) ScheduleDelete(name string) (bool, error) {
	if _, err := t.exec(`DELETE FROM schedule_occurrences WHERE schedule = ?`, name); err != nil {
		return false, err
	}
	n, err := t.exec(`DELETE FROM schedules WHERE name = ?`, name)
	return n > 0, err
}

func (t *tx) ScheduleOccurrenceAdd(name string, at time.Time, jobID int64) (bool, error) {
	n, err := t.exec(`INSERT INTO schedule_occurrences (schedule, fire_at, job_id) VALUES (?, ?, ?)
		ON CONFLICT DO NOTHING`, name, nanos(at), jobID)
	return n > 0, err
}

func (t *tx) ScheduleOccurrenceGet(name string, at time.Time) (int64, bool, error) {
	var id int64
	err := t.queryRow(`SELECT job_id FROM schedule_occurrences WHERE schedule = ? AND fire_at = ?`, name, nanos(at)).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, false, nil
	}
	return id, err == nil, err
}

func (t *tx) ScheduleOccurrenceDeleteBefore(name string, before time.Time) error {
	_, err := t.exec(`DELETE FROM schedule_occurrences WHERE schedule = ? AND fire_at < ?`, name, nanos(before))
	return err
}
