package sqlite

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/jobwire/jobwire/store"
	"github.com/jobwire/jobwire/store/storeretry"
	sqlite3 "modernc.org/sqlite/lib"
)

// fault is a CodedError built by hand, as fault-injection tests elsewhere build them.
type fault struct{ code int }

func (f fault) Error() string { return fmt.Sprintf("injected fault %d", f.code) }
func (f fault) Code() int     { return f.code }

func TestClassifyCodedErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		err           error
		wantCode      string
		wantTransient bool
	}{
		{fault{sqlite3.SQLITE_BUSY}, "SQLITE_BUSY", true},
		{fmt.Errorf("batch: %w", fault{sqlite3.SQLITE_BUSY_SNAPSHOT}), "SQLITE_BUSY_SNAPSHOT", true},
		{fault{sqlite3.SQLITE_LOCKED}, "SQLITE_LOCKED", true},
		{fault{sqlite3.SQLITE_CONSTRAINT_UNIQUE}, "SQLITE_CONSTRAINT_UNIQUE", false},
		{fault{sqlite3.SQLITE_READONLY}, "SQLITE_READONLY", false},
		{fault{sqlite3.SQLITE_FULL}, "SQLITE_FULL", false},
		{errors.Join(context.Canceled, fault{sqlite3.SQLITE_CORRUPT}), "SQLITE_CORRUPT", false},
	}
	for _, tt := range tests {
		if code, transient := Classify(tt.err); code != tt.wantCode || transient != tt.wantTransient {
			t.Errorf("Classify(%v) = %q, %v; want %q, %v", tt.err, code, transient, tt.wantCode, tt.wantTransient)
		}
	}
}

// insertJob is a write the tests below run through Store.Write.
func insertJob(ctx context.Context, st *Store, key string) (store.JobInsertResult, error) {
	var r store.JobInsertResult
	now := time.Unix(1_800_000_000, 0)
	err := st.Write(ctx, "enqueue", func(tx store.Tx) error {
		var err error
		rs, err := tx.JobInsertMany([]*store.JobInsertParams{{Type: "t", Queue: "default", MaxAttempts: 3,
			IdempotencyKey: key, RunAt: now, Now: now, AttemptTimeout: time.Minute}})
		if err == nil {
			r = rs[0]
		}
		return err
	})
	return r, err
}

// holdWriteLock takes the database's write lock from a second connection, as another process
// would, and returns the function that lets it go.
func holdWriteLock(t *testing.T, path string) (release func()) {
	t.Helper()
	holder := conn(t, openDB(t, fileDSN(path)))
	mustExec(t, holder, `BEGIN IMMEDIATE`)
	return func() { mustExec(t, holder, `ROLLBACK`) }
}

// A store opened without a Retrier still retries SQLITE_BUSY: the default policy waits out a
// writer that holds the lock for longer than the busy timeout, and counts the retries.
func TestOpenDefaultsToRetryPolicy(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "jobwire.db")
	st, err := Open(ctx, path, Options{BusyTimeout: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	if got := st.StorageRetries(); len(got) != 0 {
		t.Fatalf("StorageRetries() before any fault = %v, want empty", got)
	}

	release := holdWriteLock(t, path)
	// The first try gives up after the 20ms busy timeout and is counted; the lock goes once
	// that count shows, while the default policy waits at least 200ms before the second try.
	released := make(chan struct{})
	go func() {
		defer close(released)
		for st.StorageRetries()["SQLITE_BUSY"] == 0 {
			time.Sleep(time.Millisecond)
		}
		release()
	}()
	_, err = insertJob(ctx, st, "")
	<-released
	if err != nil {
		t.Fatalf("insert while another connection held the lock = %v, want it retried until the lock went", err)
	}
	if got := st.StorageRetries()["SQLITE_BUSY"]; got < 1 {
		t.Errorf("StorageRetries() = %v, want SQLITE_BUSY counted", st.StorageRetries())
	}
}

// When the lock outlives every retry, Write returns an error that matches storeretry.ErrBusy,
// and the store works again once the lock is released.
func TestWriteExhaustedThenRecovers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "jobwire.db")
	policy, err := storeretry.New(storeretry.Config{Classify: Classify, Logger: slog.New(slog.DiscardHandler),
		Options: storeretry.Options{MaxTransientRetries: 2, CommandTimeout: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	st, err := Open(ctx, path, Options{BusyTimeout: 10 * time.Millisecond, Retry: policy})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })

	release := holdWriteLock(t, path)
	_, err = insertJob(ctx, st, "k1")
	var be *storeretry.BusyError
	if !errors.As(err, &be) || !errors.Is(err, storeretry.ErrBusy) {
		t.Fatalf("insert under a held lock = %v, want a *storeretry.BusyError", err)
	}
	if be.Op != "enqueue" || be.Code != "SQLITE_BUSY" || be.Tries != 3 {
		t.Errorf("BusyError = %+v, want op enqueue, SQLITE_BUSY, 3 tries", be)
	}
	if got := st.StorageRetries()["SQLITE_BUSY"]; got != 2 {
		t.Errorf("StorageRetries() = %v, want SQLITE_BUSY: 2", st.StorageRetries())
	}
	release()

	r, err := insertJob(ctx, st, "k1")
	if err != nil || r.Duplicate {
		t.Fatalf("insert after the lock went = %+v, %v; want a new job", r, err)
	}
	again, err := insertJob(ctx, st, "k1")
	if err != nil || !again.Duplicate || again.ID != r.ID {
		t.Fatalf("insert with the same key = %+v, %v; want duplicate of job %d", again, err, r.ID)
	}
}

// retryOnce runs each operation once and counts nothing.
type retryOnce struct{}

func (retryOnce) Do(ctx context.Context, _ string, fn func(ctx context.Context) error) error {
	return fn(ctx)
}

func TestStorageRetriesWithoutCounter(t *testing.T) {
	t.Parallel()
	st, err := Open(context.Background(), filepath.Join(t.TempDir(), "jobwire.db"), Options{Retry: retryOnce{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	if got := st.StorageRetries(); got == nil || len(got) != 0 {
		t.Fatalf("StorageRetries() = %#v, want an empty map", got)
	}
}

// afterCommitOnce runs the real retry policy and reports the first try of every operation as
// failed with SQLITE_BUSY after it committed: the commit went through, its acknowledgement was
// lost.
type afterCommitOnce struct {
	p      *storeretry.Policy
	failed map[string]bool
}

func (f *afterCommitOnce) Do(ctx context.Context, op string, fn func(ctx context.Context) error) error {
	return f.p.Do(ctx, op, func(ctx context.Context) error {
		if err := fn(ctx); err != nil || f.failed[op] {
			return err
		}
		f.failed[op] = true
		return fault{sqlite3.SQLITE_BUSY}
	})
}

// Write runs its function again only when no earlier try committed: after a commit reported
// as failed, the retry finds the write's receipt and returns the first try's results.
func TestWriteRunsAgainOnlyWhenNothingCommitted(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		afterCommit bool // else the first run fails inside its transaction, which rolls back
		runs        int
	}{{"rolled back", false, 2}, {"committed, reported failed", true, 1}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			policy, err := storeretry.New(storeretry.Config{Classify: Classify, Logger: slog.New(slog.DiscardHandler),
				Options: storeretry.Options{MaxTransientRetries: 3, CommandTimeout: time.Minute}})
			if err != nil {
				t.Fatal(err)
			}
			var retry Retrier = policy
			if tc.afterCommit {
				retry = &afterCommitOnce{p: policy, failed: map[string]bool{}}
			}
			path := filepath.Join(t.TempDir(), "jobwire.db")
			st, err := Open(ctx, path, Options{Retry: retry})
			if err != nil {
				t.Fatal(err)
			}
			runs := 0
			var id int64
			err = st.Write(ctx, "enqueue", func(tx store.Tx) error {
				runs++
				now := time.Unix(1_800_000_000, 0)
				rs, err := tx.JobInsertMany([]*store.JobInsertParams{{Type: "t", Queue: "default", MaxAttempts: 3,
					RunAt: now, Now: now, AttemptTimeout: time.Minute}})
				if err != nil {
					return err
				}
				id = rs[0].ID
				if !tc.afterCommit && runs == 1 {
					return fault{sqlite3.SQLITE_BUSY}
				}
				return nil
			})
			if err != nil || runs != tc.runs {
				t.Fatalf("Write = %v after %d runs of its function, want nil after %d", err, runs, tc.runs)
			}
			jobs, err := st.JobList(ctx, &store.JobListParams{Limit: 10})
			if err != nil || len(jobs) != 1 || jobs[0].ID != id {
				t.Fatalf("jobs %v (%v), want only job %d: the write applied once and answered with it", jobs, err, id)
			}

			// Receipt numbers go on across a restart, so an old receipt is never taken for a
			// new write's.
			last := st.receipts.Load()
			if err := st.Close(); err != nil {
				t.Fatal(err)
			}
			again, err := Open(ctx, path, Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer again.Close()
			if got := again.receipts.Load(); got != last || got == 0 {
				t.Fatalf("receipts after reopening start at %d, want %d", got, last)
			}
		})
	}
}
