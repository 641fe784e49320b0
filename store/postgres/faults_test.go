package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/store"
	"github.com/jobwire/jobwire/store/postgres/pgtest"
	"github.com/jobwire/jobwire/store/storeretry"
)

// The classifier reads SQLSTATEs and pgconn's own errors, never message text.
func TestClassify(t *testing.T) {
	t.Parallel()
	pg := func(code string) error {
		return fmt.Errorf("insert: %w", &pgconn.PgError{Severity: "ERROR", Code: code})
	}
	for _, c := range []struct {
		name      string
		err       error
		code      string
		transient bool
	}{
		{"serialization failure", pg("40001"), "40001", true},
		{"deadlock detected", pg("40P01"), "40P01", true},
		{"lock timeout", pg("55P03"), "55P03", true},
		{"admin shutdown", pg("57P01"), "57P01", true},
		{"crash shutdown", pg("57P02"), "57P02", true},
		{"cannot connect now", pg("57P03"), "57P03", true},
		{"too many connections", pg("53300"), "53300", true},
		{"connection failure", pg("08006"), "08006", true},
		{"connection does not exist", pg("08003"), "08003", true},
		{"unique violation", pg("23505"), "23505", false},
		{"syntax error", pg("42601"), "42601", false},
		{"disk full", pg("53100"), "53100", false},
		{"query canceled", pg("57014"), "57014", false},
		{"connection closed by the driver", fmt.Errorf("commit: %w", pgconn.ErrConnClosed), CodeConnectionLost, true},
		{"connection cut", fmt.Errorf("read: %w", io.ErrUnexpectedEOF), CodeConnectionLost, true},
		{"network error", &net.OpError{Op: "read", Err: errors.New("connection reset by peer")}, CodeConnectionLost, true},
		{"context cancelled", fmt.Errorf("query: %w", context.Canceled), "", false},
		{"context deadline", context.DeadlineExceeded, "", false},
		{"not a storage error", errors.New("boom"), "", false},
		{"no rows", pgx.ErrNoRows, "", false},
		{"idempotency conflict", &store.IdempotencyConflictError{Key: "k"}, "", false},
	} {
		code, transient := Classify(c.err)
		if code != c.code || transient != c.transient {
			t.Errorf("%s: Classify = %q, %v; want %q, %v", c.name, code, transient, c.code, c.transient)
		}
	}
}

// faultBundle is a store whose retry policy retries at once and counts, and a connection of
// the test's own to the same schema.
type faultBundle struct {
	s      *Store
	policy *storeretry.Policy
	other  *pgx.Conn
	url    string
}

func setupFaults(t *testing.T, params ...string) *faultBundle {
	t.Helper()
	u := pgtest.URL(t)
	policy, err := storeretry.New(storeretry.Config{Options: storeretry.Options{MaxTransientRetries: 3, CommandTimeout: 30 * time.Second},
		Classify: Classify, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	su := u
	if len(params) > 0 {
		su += "&" + strings.Join(params, "&")
	}
	s, err := Open(context.Background(), su, Options{Retry: policy, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	other, err := pgx.Connect(context.Background(), u)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Close(context.Background()) })
	return &faultBundle{s: s, policy: policy, other: other, url: u}
}

// insertRetried runs a write that inserts one job and calls inject on its first run, before the
// insert, and checks that the storage fault inject causes is retried: the write succeeds, its
// function runs twice, one job is stored and the retry is counted under one of codes.
func (fb *faultBundle) insertRetried(t *testing.T, inject func(tx *tx) error, codes ...string) {
	t.Helper()
	var runs atomic.Int32
	err := fb.s.Write(context.Background(), "test", func(stx store.Tx) error {
		if runs.Add(1) == 1 {
			if err := inject(stx.(*tx)); err != nil {
				return err
			}
		}
		_, err := stx.JobInsertMany([]*store.JobInsertParams{{Type: "t", Queue: "default", Payload: []byte(`{}`),
			MaxAttempts: 3, RunAt: time.Unix(1, 0), Now: time.Unix(1, 0), AttemptTimeout: time.Minute}})
		return err
	})
	if err != nil {
		t.Fatalf("write with an injected fault: %v, want it retried", err)
	}
	if n := runs.Load(); n != 2 {
		t.Fatalf("the write's function ran %d times, want 2", n)
	}
	counts, err := fb.s.JobCounts(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(counts) != 1 || counts[0].Count != 1 || counts[0].State != job.StatePending {
		t.Fatalf("after the retried write: %v, want one pending job", counts)
	}
	retries := fb.policy.Counters()
	total := int64(0)
	for _, c := range codes {
		total += retries[c]
	}
	if total != 1 {
		t.Fatalf("retries counted %v, want one under %v", retries, codes)
	}
}

// Each transient class, raised by the server itself inside a write, is retried without the
// write failing. The server raises the SQLSTATE with RAISE: the error reaches the store through
// the driver exactly as a real one would. The classes that can be caused for real here are
// also injected for real below (lock timeout, deadlock, a terminated backend); too many
// connections and a failing network cannot be, short of starving the shared test server.
func TestRaisedTransientFaultsAreRetried(t *testing.T) {
	t.Parallel()
	for _, code := range []string{"40001", "40P01", "55P03", "57P01", "53300", "08006"} {
		t.Run(code, func(t *testing.T) {
			t.Parallel()
			fb := setupFaults(t)
			fb.insertRetried(t, func(tx *tx) error {
				_, err := tx.tx.Exec(tx.ctx, `DO $$ BEGIN RAISE EXCEPTION 'injected' USING ERRCODE = '`+code+`'; END $$`)
				if err == nil {
					err = errors.New("RAISE raised nothing")
				}
				return err
			}, code)
		})
	}
}

// A fault that is not transient fails the write at once, with nothing stored.
func TestPermanentFaultFailsTheWrite(t *testing.T) {
	t.Parallel()
	fb := setupFaults(t)
	var runs atomic.Int32
	err := fb.s.Write(context.Background(), "test", func(stx store.Tx) error {
		runs.Add(1)
		_, err := stx.(*tx).tx.Exec(context.Background(), `DO $$ BEGIN RAISE EXCEPTION 'injected' USING ERRCODE = '23505'; END $$`)
		return err
	})
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "23505" || runs.Load() != 1 {
		t.Fatalf("write with a unique violation: %v after %d runs, want it failed after one", err, runs.Load())
	}
}

// A database that cannot be used for a reason an operator must fix (a full disk, a standby that
// only reads, permissions) fails the write at once as store.ErrUnavailable, which callers hear
// as UNAVAILABLE: come back later.
func TestUnavailableDatabaseFailsAsUnavailable(t *testing.T) {
	t.Parallel()
	for _, code := range []string{"53100", "25006", "42501", "58030", "28P01"} {
		t.Run(code, func(t *testing.T) {
			t.Parallel()
			fb := setupFaults(t)
			var runs atomic.Int32
			err := fb.s.Write(context.Background(), "test", func(stx store.Tx) error {
				runs.Add(1)
				_, err := stx.(*tx).tx.Exec(context.Background(), `DO $$ BEGIN RAISE EXCEPTION 'injected' USING ERRCODE = '`+code+`'; END $$`)
				return err
			})
			if !errors.Is(err, store.ErrUnavailable) || runs.Load() != 1 || !strings.Contains(err.Error(), code) {
				t.Fatalf("write failing with %s: %v after %d runs, want store.ErrUnavailable naming the code after one", code, err, runs.Load())
			}
		})
	}
}

// A session ended by pg_terminate_backend (an operator, a failover) is retried on a new
// connection.
func TestTerminatedSessionIsRetried(t *testing.T) {
	t.Parallel()
	fb := setupFaults(t)
	fb.insertRetried(t, func(tx *tx) error {
		var pid int32
		if err := tx.tx.QueryRow(tx.ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
			return err
		}
		var ok bool
		if err := fb.other.QueryRow(context.Background(), `SELECT pg_terminate_backend($1, 10000)`, pid).Scan(&ok); err != nil || !ok {
			return fmt.Errorf("terminate backend %d: %v, %v", pid, ok, err)
		}
		return nil
	}, "57P01", CodeConnectionLost)
}

// A row lock held by another session past lock_timeout fails the write with 55P03, which is
// retried once the other session lets go.
func TestLockTimeoutIsRetried(t *testing.T) {
	t.Parallel()
	fb := setupFaults(t, "lock_timeout=100ms")
	ctx := context.Background()
	if err := fb.s.Write(ctx, "test", func(tx store.Tx) error { return tx.QueueSetPaused("q", true) }); err != nil {
		t.Fatal(err)
	}
	holder, err := fb.other.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = holder.Rollback(ctx) }()
	if _, err := holder.Exec(ctx, `SELECT * FROM queues WHERE name = 'q' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int32
	err = fb.s.Write(ctx, "test", func(tx store.Tx) error {
		if runs.Add(1) == 2 {
			if err := holder.Commit(ctx); err != nil {
				return err
			}
		}
		return tx.QueueSetLimit("q", 3)
	})
	if err != nil || runs.Load() != 2 {
		t.Fatalf("write behind a held lock: %v after %d runs, want it done on the second", err, runs.Load())
	}
	if n := fb.policy.Counters()["55P03"]; n != 1 {
		t.Fatalf("retries %v, want one 55P03", fb.policy.Counters())
	}
}

// A deadlock between a write and another session: the server picks the write (its
// deadlock_timeout is the shorter), which is retried once the other session is through.
func TestDeadlockIsRetried(t *testing.T) {
	t.Parallel()
	fb := setupFaults(t, "deadlock_timeout=20ms")
	ctx := context.Background()
	if _, err := fb.other.Exec(ctx, `SET deadlock_timeout = '10s'`); err != nil {
		t.Fatal(err)
	}
	if err := fb.s.Write(ctx, "test", func(tx store.Tx) error {
		if err := tx.BreakerSave(store.BreakerRecord{Type: "a", Data: []byte("0")}); err != nil {
			return err
		}
		return tx.BreakerSave(store.BreakerRecord{Type: "b", Data: []byte("0")})
	}); err != nil {
		t.Fatal(err)
	}
	holder, err := fb.other.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = holder.Rollback(ctx) }()
	if _, err := holder.Exec(ctx, `UPDATE breakers SET data = '1' WHERE type = 'b'`); err != nil {
		t.Fatal(err)
	}
	var holderPID int32
	if err := holder.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&holderPID); err != nil {
		t.Fatal(err)
	}
	watcher, err := pgx.Connect(ctx, fb.url)
	if err != nil {
		t.Fatal(err)
	}
	defer watcher.Close(ctx)
	holderDone := make(chan error, 1)
	var runs atomic.Int32
	err = fb.s.Write(ctx, "test", func(stx store.Tx) error {
		if runs.Add(1) == 1 {
			// Lock a, let the other session wait for a while holding b, then ask for b (the
			// save is sent with COMMIT).
			if _, err := stx.BreakerLock("a", []byte("0")); err != nil {
				return err
			}
			go func() {
				_, err := holder.Exec(ctx, `UPDATE breakers SET data = '1' WHERE type = 'a'`)
				if err == nil {
					err = holder.Commit(ctx)
				}
				holderDone <- err
			}()
			if err := waitForLockWait(ctx, watcher, holderPID); err != nil {
				return err
			}
		}
		return stx.BreakerSave(store.BreakerRecord{Type: "b", Data: []byte("2")})
	})
	if err != nil || runs.Load() != 2 {
		t.Fatalf("write in a deadlock: %v after %d runs, want it done on the second", err, runs.Load())
	}
	if err := <-holderDone; err != nil {
		t.Fatalf("the other session: %v", err)
	}
	if n := fb.policy.Counters()["40P01"]; n != 1 {
		t.Fatalf("retries %v, want one 40P01", fb.policy.Counters())
	}
}

// waitForLockWait waits until the session pid waits for a lock.
func waitForLockWait(ctx context.Context, watcher *pgx.Conn, pid int32) error {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		var waiting bool
		if err := watcher.QueryRow(ctx, `SELECT COALESCE(wait_event_type = 'Lock', false) FROM pg_stat_activity WHERE pid = $1`, pid).Scan(&waiting); err != nil {
			return err
		}
		if waiting {
			return nil
		}
		time.Sleep(5 * time.Millisecond)
	}
	return fmt.Errorf("session %d never waited for a lock", pid)
}
