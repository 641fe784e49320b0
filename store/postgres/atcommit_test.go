package postgres

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/store"
	"github.com/jobwire/jobwire/store/storetest"
)

// Breakers stored before migration 005 are shut as their document's state says.
func TestMigrationShutsTheBreakersThatAreNotClosed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := open(t)
	defer s.Close()
	// The schema as it was before 005, with a breaker in each state.
	for _, sql := range []string{`ALTER TABLE breakers DROP COLUMN shut`, `ALTER TABLE brokers DROP COLUMN workers`,
		`DROP TABLE audit_events`, `DELETE FROM schema_migrations WHERE version >= 5`} {
		if _, err := s.pool.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	for typ, data := range storetest.OldBreakerStates {
		if _, err := s.pool.Exec(ctx, `INSERT INTO breakers (type, data) VALUES ($1, $2)`, typ, []byte(data)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.migrate(ctx); err != nil {
		t.Fatal(err)
	}
	storetest.WantShutFromState(t, s)
}

// atCommitLease is a lease of up to limit jobs of type "a" for worker, as a cluster's dispatch
// asks for them at commit.
func atCommitLease(worker string, limit int) *store.JobLeaseParams {
	now := time.Unix(1_700_000_000, 0)
	return &store.JobLeaseParams{Types: []string{"a"}, Limit: limit, WorkerID: worker, Now: now,
		LeaseUntil: now.Add(time.Minute), EnforceQueues: true, SkipCapped: true, ExcludeShut: true, MaxBytes: 1 << 20}
}

// What a dispatch round and its results write rides with COMMIT: a write that inserts a job,
// stores the successes of the jobs the last one leased, reads the shut breakers and leases
// costs the round trips of the insert alone, and turns planner settings off twice and never
// back.
func TestWritesAtCommitCostNoRoundTrip(t *testing.T) {
	t.Parallel()
	b := setupPipe(t)
	ctx := context.Background()
	var leased []*job.Job
	write := func(atCommit bool) (trips int64) {
		t.Helper()
		before := b.trips.n.Load()
		var applied []bool
		err := b.s.Write(ctx, "test", func(tx store.Tx) error {
			if err := b.insert(tx, "a"); err != nil || !atCommit {
				return err
			}
			var successes []*store.JobFinishParams
			for _, j := range leased {
				successes = append(successes, &store.JobFinishParams{Ref: job.LeaseRef{JobID: j.ID, Token: j.LeaseToken},
					Queue: j.Queue, Type: j.Type, State: job.StateSucceeded, Now: j.RunAt,
					Attempt: job.Attempt{Number: 1, StartedAt: j.RunAt, FinishedAt: j.RunAt, Outcome: job.OutcomeSucceeded}})
			}
			if err := tx.JobSucceedManyAtCommit(successes, func(a []bool, err error) { applied = a }); err != nil {
				return err
			}
			if err := tx.BreakerShutAtCommit([]string{"a"}, func([]store.BreakerRecord, error) {}); err != nil {
				return err
			}
			return tx.JobLeaseAtCommit([]*store.JobLeaseParams{atCommitLease("w", 4)}, func(jobs [][]*job.Job, err error) {
				leased = jobs[0]
			})
		})
		if err != nil {
			t.Fatal(err)
		}
		if slices.Contains(applied, false) {
			t.Fatalf("successes at commit applied: %v", applied)
		}
		return b.trips.n.Load() - before
	}
	write(true) // the statements are prepared on first use
	write(true)
	alone := write(false)
	sentBefore := len(b.trips.statements())
	with := write(true)
	if with != alone {
		t.Fatalf("an insert with successes, a breaker read and a lease at commit took %d round trips, the insert alone %d", with, alone)
	}
	// The planner settings: turned off for the successes, the lease adds its own, and nothing
	// is turned back (the statements after them and COMMIT need none).
	var settings []string
	for _, sql := range b.trips.statements()[sentBefore:] {
		if strings.Contains(sql, "jobwire.kept_") {
			settings = append(settings, sql)
		}
	}
	if want := []string{plannerSQL(true, keyJoinOff), plannerSQL(true, []string{"enable_sort"})}; !slices.Equal(settings, want) {
		t.Fatalf("planner settings sent with the write: %q, want %q", settings, want)
	}
	if len(leased) != 2 {
		t.Fatalf("leased %d jobs at commit, want the 2 ready", len(leased))
	}
}

// A statement sent with COMMIT that fails fails the write with the server's error, and
// nothing of the write is stored.
func TestLaterStatementFailureFailsTheWrite(t *testing.T) {
	t.Parallel()
	b := setupPipe(t)
	err := b.s.Write(context.Background(), "test", func(stx store.Tx) error {
		if err := b.insert(stx, "a"); err != nil {
			return err
		}
		p := stx.(*tx).tx.(*pipeTx)
		p.later(`SELECT 1 / 0`, nil, func(rows pgx.Rows) error {
			rows.Close()
			return rows.Err()
		})
		return nil
	})
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "22012" {
		t.Fatalf("write with a failing later statement: %v, want the server's division by zero", err)
	}
	if got := b.types(t); len(got) != 0 {
		t.Fatalf("jobs stored by a failed write: %v", got)
	}
}

// plannerOff turns settings off for what follows and puts back what they were, the server's
// value or one the transaction set itself.
func TestPlannerOffRestoresTheSettings(t *testing.T) {
	t.Parallel()
	s := open(t)
	defer s.Close()
	var seen [][]string
	err := s.Write(context.Background(), "test", func(stx store.Tx) error {
		t := stx.(*tx)
		show := func() error { return t.showSettings(&seen, "enable_sort", "jit") }
		steps := []func() error{
			func() error { _, err := t.tx.Exec(t.ctx, `SET LOCAL jit = off`); return err },
			show,
			func() error { return t.plannerOff(true, "enable_sort", "jit") },
			show,
			func() error { return t.plannerOff(false, "enable_sort", "jit") },
			show,
		}
		for _, step := range steps {
			if err := step(); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := [][]string{{"on", "off"}, {"off", "off"}, {"on", "off"}}
	if !reflect.DeepEqual(seen, want) {
		t.Fatalf("enable_sort and jit: %v, want %v", seen, want)
	}
}

// showSettings appends the current values of the settings names to seen.
func (t *tx) showSettings(seen *[][]string, names ...string) error {
	var values []string
	err := t.tx.QueryRow(t.ctx, `SELECT array_agg(current_setting(n) ORDER BY i) FROM unnest($1::text[]) WITH ORDINALITY AS u(n, i)`,
		names).Scan(&values)
	*seen = append(*seen, values)
	return err
}

// In a write, turning settings back waits for the next statement they could change: a setting
// turned off again meanwhile costs no statement, and neither does one followed only by
// statements no setting changes (plannerNeutral) or COMMIT.
func TestPlannerSettingsWaitToBeTurnedBack(t *testing.T) {
	t.Parallel()
	s := open(t)
	defer s.Close()
	var seen [][]string
	err := s.Write(context.Background(), "test", func(stx store.Tx) error {
		x := stx.(*tx)
		p := x.tx.(*pipeTx)
		show := func() error { return x.showSettings(&seen, "enable_sort", "jit", "enable_seqscan") }
		held := func(step string, want ...string) {
			var sqls []string
			for _, h := range p.held {
				sqls = append(sqls, h.sql)
			}
			if !reflect.DeepEqual(sqls, want) {
				t.Errorf("%s: held %q, want %q", step, sqls, want)
			}
		}
		_ = x.plannerOff(true, "enable_sort", "jit")
		_ = x.plannerOff(false, "enable_sort", "jit")
		_ = x.plannerOff(true, "jit", "enable_seqscan")
		held("turned off again", "BEGIN", plannerSQL(true, []string{"enable_sort", "jit"}),
			plannerSQL(false, []string{"enable_sort"}), plannerSQL(true, []string{"enable_seqscan"}))
		if err := show(); err != nil {
			return err
		}
		_ = x.plannerOff(false, "jit", "enable_seqscan")
		if err := x.hold(notifySQL, "jobwire_test", []string{}); err != nil {
			return err
		}
		held("a statement no setting changes", notifySQL)
		if err := show(); err != nil {
			return err
		}
		_ = x.plannerOff(true, "enable_sort")
		_ = x.plannerOff(false, "enable_sort")
		held("turned back at commit only", plannerSQL(true, []string{"enable_sort"}))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := [][]string{{"on", "off", "off"}, {"on", "on", "on"}}
	if !reflect.DeepEqual(seen, want) {
		t.Fatalf("enable_sort, jit and enable_seqscan: %v, want %v", seen, want)
	}
}

// The leases of a round's worker streams go as one statement: a round of many streams costs
// the server one lease, not one per stream.
func TestLeasesAtCommitShareOneStatement(t *testing.T) {
	t.Parallel()
	b := setupPipe(t)
	ctx := context.Background()
	ps := []*store.JobLeaseParams{atCommitLease("w1", 2), atCommitLease("w2", 2), atCommitLease("w3", 2)}
	var leased [][]*job.Job
	before := len(b.trips.statements())
	err := b.s.Write(ctx, "test", func(tx store.Tx) error {
		for range 5 {
			if err := b.insert(tx, "a"); err != nil {
				return err
			}
		}
		return tx.JobLeaseAtCommit(ps, func(jobs [][]*job.Job, err error) { leased = jobs })
	})
	if err != nil {
		t.Fatal(err)
	}
	leases := 0
	for _, sql := range b.trips.statements()[before:] {
		if strings.HasPrefix(sql, "WITH picked AS") {
			leases++
		}
	}
	if leases != 1 {
		t.Fatalf("three leases at commit sent %d lease statements, want 1", leases)
	}
	if len(leased) != 3 || len(leased[0]) != 2 || len(leased[1]) != 2 || len(leased[2]) != 1 {
		t.Fatalf("leased %v jobs per lease, want 2, 2 and 1", leased)
	}
}

// A success a cluster counts in its type's breaker (broker's resultOp.SucceedingInTx) rides
// the breaker's lock, whose call returns with the success's answer read, and the breaker's
// save rides COMMIT: the transaction of a lone success costs two round trips, where waiting
// for the success and sending the save each cost one more. Saved without the lock, if still
// stored as the writer left it (BreakerSaveIf, the broker's breakersSeen), it costs one: all
// of it rides COMMIT.
func TestCountedSuccessRidesTheBreakersLock(t *testing.T) {
	t.Parallel()
	b := setupPipe(t)
	ctx := context.Background()
	if err := b.s.Write(ctx, "insert", func(tx store.Tx) error {
		for range 4 {
			if err := b.insert(tx, "a"); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	var leased []*job.Job
	if err := b.s.Write(ctx, "lease", func(tx store.Tx) error {
		var err error
		leased, err = tx.JobLease(atCommitLease("w", 4))
		return err
	}); err != nil || len(leased) != 4 {
		t.Fatalf("leased %d jobs: %v, want 4", len(leased), err)
	}
	data := []byte(`{"calls":0}`)
	succeed := func(j *job.Job, locked bool) (trips int64) {
		t.Helper()
		before := b.trips.n.Load()
		var applied []bool
		ref := job.LeaseRef{JobID: j.ID, Token: j.LeaseToken}
		next := []byte(fmt.Sprintf(`{"calls":%d}`, j.ID))
		err := b.s.Write(ctx, "result", func(tx store.Tx) error {
			err := tx.JobSucceedManyAtCommit([]*store.JobFinishParams{{Ref: ref,
				Queue: j.Queue, Type: j.Type, State: job.StateSucceeded, Now: j.RunAt,
				Attempt: job.Attempt{Number: 1, StartedAt: j.RunAt, FinishedAt: j.RunAt, Outcome: job.OutcomeSucceeded}}},
				func(a []bool, err error) { applied = a })
			if err != nil {
				return err
			}
			if !locked {
				return tx.BreakerSaveIf(store.BreakerRecord{Type: "a", Data: next}, data, []job.LeaseRef{ref})
			}
			if _, err := tx.BreakerLock("a", []byte(`{}`)); err != nil {
				return err
			}
			if !slices.Equal(applied, []bool{true}) {
				t.Errorf("the breaker's lock returned with the success's answer %v, want [true]", applied)
			}
			return tx.BreakerSave(store.BreakerRecord{Type: "a", Data: next})
		})
		if err != nil {
			t.Fatal(err)
		}
		trips = b.trips.n.Load() - before
		var stored []byte
		if err := b.s.pool.QueryRow(ctx, `SELECT data FROM breakers WHERE type = 'a'`).Scan(&stored); err != nil || !bytes.Equal(stored, next) {
			t.Fatalf("breaker stored: %q, %v, want %q", stored, err, next)
		}
		data = next
		return trips
	}
	succeed(leased[0], true) // the statements are prepared on first use
	if n := succeed(leased[1], true); n != 2 {
		t.Fatalf("a success counted in its locked breaker took %d round trips, want 2 (the breaker's lock, COMMIT)", n)
	}
	succeed(leased[2], false)
	if n := succeed(leased[3], false); n != 1 {
		t.Fatalf("a success counted in its breaker saved without the lock took %d round trips, want 1 (COMMIT)", n)
	}
}
