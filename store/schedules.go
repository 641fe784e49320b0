package store

import (
	"context"
	"time"
)

// ScheduleRecord is a periodic schedule as stored: its definition, which the broker encodes
// (schedule.Definition) and the store keeps as it is, and where it stands.
type ScheduleRecord struct {
	Name string
	// Spec is the encoded definition.
	Spec []byte
	// FromConfig marks a schedule declared in the configuration file: the file is its truth,
	// and a start without it there removes it.
	FromConfig bool
	Paused     bool
	// Note says why it was paused (or anything an operator wants to say about it).
	Note string
	// NextFireAt is the first occurrence not handled yet.
	NextFireAt time.Time
	// LastFireAt and LastJobID are the last occurrence enqueued and its job (zero: none yet).
	LastFireAt time.Time
	LastJobID  int64
	// BufferedFireAt is an occurrence kept back until the last one's job finishes (zero: none).
	BufferedFireAt time.Time
	CreatedAt      time.Time
	UpdatedAt      time.Time
}

// ScheduleReader reads the schedules outside a transaction.
type ScheduleReader interface {
	// ScheduleList reads every schedule, by name.
	ScheduleList(ctx context.Context) ([]ScheduleRecord, error)
	// ScheduleGet reads one schedule, or ErrNotFound.
	ScheduleGet(ctx context.Context, name string) (*ScheduleRecord, error)
}

// ScheduleTx writes the schedules and their occurrences.
//
// An occurrence is a schedule's name and a fire time. ScheduleOccurrenceAdd records it once:
// a transaction that enqueues an occurrence's job records it in the same transaction, and one
// that finds it recorded already enqueues nothing, so neither a second broker nor a write run
// again enqueues it twice.
type ScheduleTx interface {
	// ScheduleLock reads a schedule and holds its row locked until the transaction ends (a
	// store whose writers take turns, SQLite, only reads it); ErrNotFound when there is none.
	ScheduleLock(name string) (*ScheduleRecord, error)
	// ScheduleSave stores r, replacing the schedule of its name.
	ScheduleSave(r *ScheduleRecord) error
	// ScheduleDelete deletes a schedule with its recorded occurrences and reports whether
	// there was one.
	ScheduleDelete(name string) (bool, error)
	// ScheduleOccurrenceAdd records the occurrence (name, at) of job jobID and reports true,
	// or, when it was recorded before, changes nothing and reports false.
	ScheduleOccurrenceAdd(name string, at time.Time, jobID int64) (bool, error)
	// ScheduleOccurrenceGet reads the job of the occurrence (name, at), false when it is not
	// recorded.
	ScheduleOccurrenceGet(name string, at time.Time) (int64, bool, error)
	// ScheduleOccurrenceDeleteBefore forgets a schedule's occurrences older than t.
	ScheduleOccurrenceDeleteBefore(name string, t time.Time) error
}
