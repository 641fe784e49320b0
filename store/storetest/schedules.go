package storetest

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/jobwire/jobwire/store"
)

var _ = register(
	testCase{"ScheduleSaveListGetDelete", testScheduleSaveListGetDelete},
	testCase{"ScheduleOccurrenceRecordedOnce", testScheduleOccurrenceRecordedOnce},
	testCase{"ScheduleRollsBackWithItsJob", testScheduleRollsBackWithItsJob},
)

func (b *bundle) scheduleRecord(name string) *store.ScheduleRecord {
	return &store.ScheduleRecord{Name: name, Spec: []byte(`{"cron":"@hourly"}`), NextFireAt: b.now.Add(time.Hour),
		CreatedAt: b.now, UpdatedAt: b.now}
}

// A schedule is stored whole, replaced by its name, listed by name, read alone and locked in a
// write, and deleted with its occurrences.
func testScheduleSaveListGetDelete(t *testing.T, b *bundle) {
	full := b.scheduleRecord("b-report")
	full.FromConfig, full.Paused, full.Note = true, true, "upstream down, ticket 42"
	full.LastFireAt, full.LastJobID, full.BufferedFireAt = b.now.Add(-time.Hour), 7, b.now.Add(-time.Minute)
	b.write(func(tx store.Tx) error {
		if err := tx.ScheduleSave(b.scheduleRecord("a-sync")); err != nil {
			return err
		}
		return tx.ScheduleSave(full)
	})
	list, err := b.s.ScheduleList(b.ctx)
	if err != nil || len(list) != 2 || list[0].Name != "a-sync" || !reflect.DeepEqual(list[1], *full) {
		t.Fatalf("ScheduleList = %+v, %v; want a-sync then %+v", list, err, *full)
	}
	if !list[0].LastFireAt.IsZero() || !list[0].BufferedFireAt.IsZero() || list[0].LastJobID != 0 {
		t.Errorf("a schedule never fired reads %+v", list[0])
	}
	changed := *full
	changed.Paused, changed.Note, changed.NextFireAt, changed.BufferedFireAt = false, "", b.now.Add(2*time.Hour), time.Time{}
	b.write(func(tx store.Tx) error {
		locked, err := tx.ScheduleLock("b-report")
		if err != nil || !reflect.DeepEqual(*locked, *full) {
			t.Errorf("ScheduleLock = %+v, %v", locked, err)
		}
		return tx.ScheduleSave(&changed)
	})
	got, err := b.s.ScheduleGet(b.ctx, "b-report")
	if err != nil || !reflect.DeepEqual(*got, changed) {
		t.Fatalf("after a save, ScheduleGet = %+v, %v; want %+v", got, err, changed)
	}
	if _, err := b.s.ScheduleGet(b.ctx, "nope"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("ScheduleGet of none = %v, want ErrNotFound", err)
	}
	b.write(func(tx store.Tx) error {
		if _, err := tx.ScheduleLock("nope"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("ScheduleLock of none = %v, want ErrNotFound", err)
		}
		if _, err := tx.ScheduleOccurrenceAdd("b-report", b.now, 7); err != nil {
			return err
		}
		for _, want := range []bool{true, false} {
			if ok, err := tx.ScheduleDelete("b-report"); err != nil || ok != want {
				t.Errorf("ScheduleDelete = %v, %v; want %v", ok, err, want)
			}
		}
		_, found, err := tx.ScheduleOccurrenceGet("b-report", b.now)
		if found {
			t.Error("an occurrence outlived its schedule")
		}
		return err
	})
}

// An occurrence is recorded once: a second record of the same schedule and time changes
// nothing and says so; old ones are forgotten by time.
func testScheduleOccurrenceRecordedOnce(t *testing.T, b *bundle) {
	b.write(func(tx store.Tx) error {
		if err := tx.ScheduleSave(b.scheduleRecord("s")); err != nil {
			return err
		}
		for i, c := range []struct {
			at   time.Time
			job  int64
			want bool
		}{{b.now, 1, true}, {b.now, 2, false}, {b.now.Add(time.Nanosecond), 3, true}, {b.now.Add(-time.Hour), 4, true}} {
			ok, err := tx.ScheduleOccurrenceAdd("s", c.at, c.job)
			if err != nil || ok != c.want {
				t.Errorf("add %d = %v, %v; want %v", i, ok, err, c.want)
			}
		}
		if id, ok, err := tx.ScheduleOccurrenceGet("s", b.now); err != nil || !ok || id != 1 {
			t.Errorf("occurrence at now = %d, %v, %v; want job 1 (the first record)", id, ok, err)
		}
		if err := tx.ScheduleOccurrenceDeleteBefore("s", b.now); err != nil {
			return err
		}
		if _, ok, _ := tx.ScheduleOccurrenceGet("s", b.now.Add(-time.Hour)); ok {
			t.Error("an occurrence older than the cut is still recorded")
		}
		if _, ok, _ := tx.ScheduleOccurrenceGet("s", b.now); !ok {
			t.Error("the occurrence at the cut was forgotten")
		}
		return nil
	})
}

// A write that fails records neither its occurrence nor its schedule's new state.
func testScheduleRollsBackWithItsJob(t *testing.T, b *bundle) {
	b.write(func(tx store.Tx) error { return tx.ScheduleSave(b.scheduleRecord("s")) })
	boom := errors.New("boom")
	err := b.s.Write(b.ctx, "storetest", func(tx store.Tx) error {
		r, err := tx.ScheduleLock("s")
		if err != nil {
			return err
		}
		r.NextFireAt = b.now.Add(5 * time.Hour)
		if err := tx.ScheduleSave(r); err != nil {
			return err
		}
		if _, err := tx.ScheduleOccurrenceAdd("s", b.now, 1); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Write = %v, want boom", err)
	}
	got, err := b.s.ScheduleGet(b.ctx, "s")
	if err != nil || !got.NextFireAt.Equal(b.now.Add(time.Hour)) {
		t.Errorf("after a rollback, ScheduleGet = %+v, %v", got, err)
	}
	b.write(func(tx store.Tx) error {
		_, ok, err := tx.ScheduleOccurrenceGet("s", b.now)
		if ok {
			t.Error("a rolled back occurrence is recorded")
		}
		return err
	})
}
