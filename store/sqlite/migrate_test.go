package sqlite

import (
	"context"
	"database/sql"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/store"
	"github.com/jobwire/jobwire/store/storetest"
)

// A database made before migration 005 keeps every job id, attempt and total; jobs inserted
// after it never take the id of a deleted job, and idempotency keys are scoped by type.
func TestMigrationKeepsIDsAndStopsReusingThem(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "old.db")
	old, err := sql.Open("sqlite", "file:"+path+"?_pragma=foreign_keys(1)")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := migrateTo(ctx, old, slog.New(slog.DiscardHandler), 7); err != nil {
		t.Fatalf("old schema: %v", err)
	}
	// Jobs 1..4 (4 dead, with an attempt), then 3 and 4 deleted: the old schema gives the next
	// job id 3 again.
	for i, st := range []job.State{job.StatePending, job.StateSucceeded, job.StateDead, job.StateDead} {
		key := sql.NullString{}
		if i == 0 {
			key = sql.NullString{String: "k", Valid: true}
		}
		if _, err := old.ExecContext(ctx, `INSERT INTO jobs (type, queue, payload, state, max_attempts, run_at,
			created_at, attempt_timeout_ns, idempotency_key) VALUES ('t', 'q', x'', ?, 3, 0, 0, 0, ?)`, int(st), key); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []int{2, 3, 4} {
		if _, err := old.ExecContext(ctx, `INSERT INTO attempts (job_id, number, worker_id, started_at, finished_at,
			outcome) VALUES (?, 1, 'w', 0, 0, 3)`, id); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := old.ExecContext(ctx, `DELETE FROM jobs WHERE id = 4`); err != nil {
		t.Fatal(err)
	}
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}

	st := openAt(t, path)
	for id, want := range map[int64]job.State{1: job.StatePending, 2: job.StateSucceeded, 3: job.StateDead} {
		j, err := st.JobGet(ctx, id)
		// A succeeded job also reports its successful attempt from its own row.
		if err != nil || j.State != want || len(j.History) != map[int64]int{1: 0, 2: 2, 3: 1}[id] {
			t.Fatalf("job %d after the migration: %+v, %v; want %s with its attempts", id, j, err, want)
		}
	}
	// The attempts still belong to their jobs: deleting job 3 deletes its attempt.
	if n := deleteDead(t, st, 3); n != 1 {
		t.Fatalf("deleted %d dead jobs, want 1", n)
	}
	var orphans int
	if err := st.r.QueryRowContext(ctx, `SELECT COUNT(*) FROM attempts WHERE job_id = 3`).Scan(&orphans); err != nil || orphans != 0 {
		t.Fatalf("attempts of deleted job 3: %d, %v", orphans, err)
	}
	// 4 was the largest id ever given out, but it was deleted before the migration, which could
	// not know of it; 3 was deleted after it, so the next job gets 4.
	if r := insert(t, st, "t", ""); r.ID != 4 {
		t.Fatalf("new job got id %d, want 4", r.ID)
	}
	// Key "k" of type "t" is job 1's; the same key is free for another type.
	if r := insert(t, st, "t", "k"); r.ID != 1 || !r.Duplicate {
		t.Fatalf("repeat of key k: %+v, want a duplicate of job 1", r)
	}
	if r := insert(t, st, "other", "k"); r.Duplicate || r.ID <= 4 {
		t.Fatalf("key k for another type: %+v, want a new job after 4", r)
	}
}

// Breakers stored before migration 011 are shut as their document's state says.
func TestMigrationShutsTheBreakersThatAreNotClosed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "old.db")
	old, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := migrateTo(ctx, old, slog.New(slog.DiscardHandler), 10); err != nil {
		t.Fatalf("old schema: %v", err)
	}
	for typ, data := range storetest.OldBreakerStates {
		if _, err := old.ExecContext(ctx, `INSERT INTO breakers (type, data) VALUES (?, ?)`, typ, []byte(data)); err != nil {
			t.Fatal(err)
		}
	}
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}
	storetest.WantShutFromState(t, openAt(t, path))
}

// After the jobs with the largest ids are deleted, a new job still gets an id never used.
func TestJobIDsAreNeverReused(t *testing.T) {
	t.Parallel()
	st := openAt(t, filepath.Join(t.TempDir(), "jobwire.db"))
	var last int64
	for range 3 {
		last = insert(t, st, "t", "").ID
	}
	if n := deleteFinished(t, st); n != 2 {
		t.Fatalf("deleted %d jobs, want 2", n)
	}
	if r := insert(t, st, "t", ""); r.ID != last+1 {
		t.Fatalf("new job got id %d, want %d: ids of deleted jobs must not come back", r.ID, last+1)
	}
}

func openAt(t *testing.T, path string) *Store {
	t.Helper()
	st, err := Open(context.Background(), path, Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

var testNow = time.Unix(1_800_000_000, 0)

func insert(t *testing.T, st *Store, typ, key string) store.JobInsertResult {
	t.Helper()
	var r store.JobInsertResult
	err := st.Write(context.Background(), "enqueue", func(tx store.Tx) error {
		rs, err := tx.JobInsertMany([]*store.JobInsertParams{{Type: typ, Queue: "q", MaxAttempts: 3,
			IdempotencyKey: key, RunAt: testNow, Now: testNow}})
		if err == nil {
			r = rs[0]
		}
		return err
	})
	if err != nil {
		t.Fatalf("insert: %v", err)
	}
	return r
}

func deleteDead(t *testing.T, st *Store, ids ...int64) int {
	t.Helper()
	var n int
	if err := st.Write(context.Background(), "purge", func(tx store.Tx) error {
		var err error
		n, err = tx.JobDeleteDead(ids)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return n
}

// deleteFinished finishes the jobs with the two largest ids and deletes them.
func deleteFinished(t *testing.T, st *Store) int {
	t.Helper()
	var n int
	if err := st.Write(context.Background(), "purge", func(w store.Tx) error {
		if _, err := w.(*tx).exec(`UPDATE jobs SET state = 5, finished_at = 0 WHERE id > (SELECT MIN(id) FROM jobs)`); err != nil {
			return err
		}
		if err := w.(*tx).addFinished("q", "t", job.StateSucceeded, 2); err != nil {
			return err
		}
		var err error
		n, err = w.JobDeleteFinished(&store.JobDeleteFinishedParams{States: []job.State{job.StateSucceeded},
			FinishedBefore: testNow, Limit: 10})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return n
}

// Every embedded migration has its own number; a shared number would leave one of the two
// unapplied on databases that already ran the other.
func TestMigrationNumbersAreUnique(t *testing.T) {
	ms, err := migrations()
	if err != nil {
		t.Fatal(err)
	}
	for i, m := range ms {
		if m.Version != i+1 {
			t.Fatalf("migration %s has number %d, want %d: numbers run 1, 2, 3 ... without gaps", m.Name, m.Version, i+1)
		}
	}
}
