package postgres

import (
	"context"
	"errors"
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/store"
	"github.com/jobwire/jobwire/store/postgres/pgtest"
)

// Breakers stored before migration 005 are shut as their document's state says: every state
// but CLOSED (1) holds its type back.
func TestMigrationShutsTheBreakersThatAreNotClosed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	u := pgtest.URL(t)
	s, err := Open(ctx, u, Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// The schema as it was before 005, with a breaker in each state.
	for _, sql := range []string{
		`ALTER TABLE breakers DROP COLUMN shut`,
		`DELETE FROM schema_migrations WHERE version >= 5`,
		`INSERT INTO breakers (type, data) VALUES ('closed', '{"State":1}'), ('open', '{"State":2}'),
			('half', '{"State":3,"Generation":4}')`,
	} {
		if _, err := s.pool.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.migrate(ctx); err != nil {
		t.Fatal(err)
	}
	recs, err := s.BreakerLoadAll(ctx)
	if err != nil {
		t.Fatal(err)
	}
	shut := map[string]bool{}
	for _, r := range recs {
		shut[r.Type] = r.Shut
	}
	if want := map[string]bool{"closed": false, "open": true, "half": true}; !reflect.DeepEqual(shut, want) {
		t.Fatalf("shut after the migration: %v, want %v", shut, want)
	}
}

// A dispatch round's lease rides with COMMIT: a write that inserts a job and leases it at
// commit costs the round trips of the insert alone.
func TestLeaseAtCommitCostsNoRoundTrip(t *testing.T) {
	t.Parallel()
	b := setupPipe(t)
	ctx := context.Background()
	now := time.Unix(1_700_000_000, 0)
	lease := &store.JobLeaseParams{Types: []string{"a"}, Limit: 4, WorkerID: "w", Now: now, LeaseUntil: now.Add(time.Minute),
		EnforceQueues: true, SkipCapped: true, ExcludeShut: true, MaxBytes: 1 << 20}
	write := func(leasing bool) (trips int64, leased []*job.Job) {
		before := b.trips.n.Load()
		err := b.s.Write(ctx, "test", func(tx store.Tx) error {
			if err := b.insert(tx, "a"); err != nil {
				return err
			}
			if !leasing {
				return nil
			}
			return tx.JobLeaseAtCommit([]*store.JobLeaseParams{lease}, func(jobs [][]*job.Job, err error) { leased = jobs[0] })
		})
		if err != nil {
			t.Fatal(err)
		}
		return b.trips.n.Load() - before, leased
	}
	write(true) // the statements are prepared on first use
	write(false)
	alone, _ := write(false)
	with, leased := write(true)
	if with != alone {
		t.Fatalf("an insert and a lease at commit took %d round trips, the insert alone %d", with, alone)
	}
	if len(leased) != 3 {
		t.Fatalf("leased %d jobs at commit, want the 3 ready", len(leased))
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
	s, err := Open(context.Background(), pgtest.URL(t), Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var seen [][2]string
	err = s.Write(context.Background(), "test", func(stx store.Tx) error {
		t := stx.(*tx)
		show := func() error {
			var sort, jit string
			err := t.tx.QueryRow(t.ctx, `SELECT current_setting('enable_sort'), current_setting('jit')`).Scan(&sort, &jit)
			seen = append(seen, [2]string{sort, jit})
			return err
		}
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
	want := [][2]string{{"on", "off"}, {"off", "off"}, {"on", "off"}}
	if !reflect.DeepEqual(seen, want) {
		t.Fatalf("enable_sort and jit: %v, want %v", seen, want)
	}
}

// The leases of a round's worker streams go as one statement: a round of many streams costs
// the server one lease, not one per stream.
func TestLeasesAtCommitShareOneStatement(t *testing.T) {
	t.Parallel()
	b := setupPipe(t)
	ctx := context.Background()
	now := time.Unix(1_700_000_000, 0)
	var ps []*store.JobLeaseParams
	for _, w := range []string{"w1", "w2", "w3"} {
		ps = append(ps, &store.JobLeaseParams{Types: []string{"a"}, Limit: 2, WorkerID: w, Now: now,
			LeaseUntil: now.Add(time.Minute), EnforceQueues: true, SkipCapped: true, ExcludeShut: true})
	}
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
