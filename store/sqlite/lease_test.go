package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/store"
)

// A lease is fenced by its whole token: the statements that act on a lease find it only by the
// job's lease number and its secret, each compared for equality.
func TestLeaseFencingComparesTheSecret(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, now := openTemp(t)
	var err error
	if _, err := insertJob(ctx, s, ""); err != nil {
		t.Fatal(err)
	}
	var leased []*job.Job
	random := rand.NewChaCha8([32]byte{7})
	err = s.Write(ctx, "lease", func(tx store.Tx) error {
		leased, err = tx.JobLease(&store.JobLeaseParams{Types: []string{"t"}, Limit: 1, WorkerID: "w",
			Now: now, LeaseUntil: now.Add(time.Minute), Random: random})
		return err
	})
	if err != nil || len(leased) != 1 {
		t.Fatalf("lease: %v %v", leased, err)
	}
	tok := leased[0].LeaseToken
	want := job.LeaseToken{Seq: 1}
	if _, err := rand.NewChaCha8([32]byte{7}).Read(want.Secret[:]); err != nil {
		t.Fatal(err)
	}
	if tok != want {
		t.Fatalf("token = %v, want %v: the secret comes from the injected source", tok, want)
	}
	id := leased[0].ID
	wrong := tok
	wrong.Secret[15] ^= 0x80
	for _, ref := range []job.LeaseRef{{JobID: id, Token: wrong}, {JobID: id, Token: job.LeaseToken{Seq: tok.Seq}}} {
		err := s.Write(ctx, "fenced", func(tx store.Tx) error {
			if _, err := tx.JobGetHeld(ref); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("JobGetHeld(%v) = %v, want ErrNotFound", ref.Token, err)
			}
			if ext, err := tx.JobExtendLeases([]job.LeaseRef{ref}, now, now.Add(time.Hour)); err != nil || len(ext) != 0 {
				t.Errorf("JobExtendLeases(%v) = %v, %v; want nothing extended", ref.Token, ext, err)
			}
			if ok, err := tx.JobStart(&store.JobStartParams{Ref: ref, Now: now}); err != nil || ok {
				t.Errorf("JobStart(%v) = %v, %v; want refused", ref.Token, ok, err)
			}
			if ok, err := tx.JobRelease(ref); err != nil || ok {
				t.Errorf("JobRelease(%v) = %v, %v; want refused", ref.Token, ok, err)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	// A batch of successes with one wrong token among them applies exactly the right ones.
	const batchOfFour = 4
	var refs []job.LeaseRef
	for range batchOfFour {
		if _, err := insertJob(ctx, s, ""); err != nil {
			t.Fatal(err)
		}
	}
	err = s.Write(ctx, "lease", func(tx store.Tx) error {
		leased, err = tx.JobLease(&store.JobLeaseParams{Types: []string{"t"}, Limit: batchOfFour, WorkerID: "w",
			Now: now, LeaseUntil: now.Add(time.Minute)})
		return err
	})
	if err != nil || len(leased) != batchOfFour {
		t.Fatalf("lease: %v %v", leased, err)
	}
	var ps []*store.JobFinishParams
	for i, j := range leased {
		ref := job.LeaseRef{JobID: j.ID, Token: j.LeaseToken}
		if i == 1 {
			ref.Token.Secret[0] ^= 1
		}
		refs = append(refs, ref)
		ps = append(ps, &store.JobFinishParams{Ref: ref, Queue: j.Queue, Type: j.Type, State: job.StateSucceeded,
			Now: now, Attempt: job.Attempt{Number: 1, StartedAt: now, FinishedAt: now, Outcome: job.OutcomeSucceeded}})
	}
	var applied []bool
	if err := s.Write(ctx, "succeed", func(tx store.Tx) error {
		applied, err = tx.JobSucceedMany(ps)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	for i, ok := range applied {
		if ok != (i != 1) {
			t.Errorf("success %d (token %v) applied = %v", i, refs[i].Token, ok)
		}
	}
}

// Leases granted before migration 006 carry guessable integer tokens: after it they are still
// leased (nothing is lost, the sweep ends them when they expire), but no integer-only token
// names them any more.
func TestMigrationGivesOldLeasesSecrets(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "jobwire.db")
	db, err := sql.Open("sqlite", fileDSN(path))
	if err != nil {
		t.Fatal(err)
	}
	ms, err := migrations()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if strings.HasSuffix(m.Name, "_lease_secrets.up.sql") {
			break
		}
		if _, err := db.ExecContext(ctx, m.SQL); err != nil {
			t.Fatalf("%s: %v", m.Name, err)
		}
		if _, err := db.ExecContext(ctx, `INSERT INTO schema_migrations VALUES (?, ?)`, m.Version, m.Name); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO jobs (id, type, queue, payload, priority, state, attempts, max_attempts, run_at, created_at,
			attempt_timeout_ns, lease_token, lease_expires_at, worker_id, started_at)
		VALUES (1, 't', 'default', x'', 0, 4, 1, 5, 0, 0, 1000000000, 3, 9000000000000000000, 'w', 0),
		       (2, 't', 'default', x'', 0, 3, 0, 5, 0, 0, 1000000000, 1, 9000000000000000000, 'w', NULL),
		       (3, 't', 'default', x'', 0, 2, 0, 5, 0, 0, 1000000000, 2, NULL, '', NULL)`); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	s, err := Open(ctx, path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var running []*job.Job
	err = s.Write(ctx, "check", func(tx store.Tx) error {
		for _, ref := range []job.LeaseRef{{JobID: 1, Token: job.LeaseToken{Seq: 3}}, {JobID: 2, Token: job.LeaseToken{Seq: 1}}} {
			if _, err := tx.JobGetHeld(ref); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("job %d: its integer token still names the lease (%v)", ref.JobID, err)
			}
		}
		running, err = tx.JobListRunning()
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(running) != 1 || running[0].ID != 1 || running[0].LeaseToken.Seq != 3 || running[0].LeaseToken.Secret == ([job.SecretSize]byte{}) {
		t.Fatalf("running after the migration = %+v, want job 1 still leased, with its number and a secret", running)
	}
}

// A lease of every queue but the paused and excluded ones names the queues with ready jobs that
// are left, so that it reads them through jobs_ready_queue_type and never passes over the jobs of a
// paused queue, where a backlog waits; past store.MaxNamedQueues queues it reads its type's ready jobs
// (jobs_ready_type), of every queue.
func TestLeaseOfEveryQueueButSomeNamesTheRest(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, now := openTemp(t)
	insert := func(queues ...string) {
		t.Helper()
		var ps []*store.JobInsertParams
		for _, q := range queues {
			ps = append(ps, &store.JobInsertParams{Type: "t", Queue: q, MaxAttempts: 1, RunAt: now,
				Now: now, AttemptTimeout: time.Minute})
		}
		if err := s.Write(ctx, "insert", func(tx store.Tx) error { _, err := tx.JobInsertMany(ps); return err }); err != nil {
			t.Fatal(err)
		}
	}
	// The paused queue's jobs come first in dispatch order (same priority and time: by id).
	insert("paused", "paused", "paused", "excluded", "b", "a", "b")
	// read reports whether a lease read index: its statement is in the writer's cache once
	// it ran.
	read := func(index string) bool {
		found := false
		err := s.Write(ctx, "look", func(stx store.Tx) error {
			for q := range stx.(*tx).cache.stmts {
				found = found || strings.HasPrefix(q, `SELECT `+jobColumns+` FROM jobs INDEXED BY `+index+` WHERE state = 2`)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return found
	}
	lease := func(limit int) (leased []*job.Job, named []string, ok bool) {
		t.Helper()
		p := &store.JobLeaseParams{Types: []string{"t"}, ExcludeQueues: []string{"excluded"}, ExcludePaused: true,
			Limit: limit, WorkerID: "w", Now: now, LeaseUntil: now.Add(time.Minute)}
		err := s.Write(ctx, "lease", func(stx store.Tx) error {
			if err := stx.QueueSetPaused("paused", true); err != nil {
				return err
			}
			var err error
			if named, ok, err = stx.(*tx).readyQueuesBut(p); err != nil {
				return err
			}
			leased, err = stx.JobLease(p)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return leased, named, ok
	}
	leased, named, ok := lease(2)
	if !ok || strings.Join(named, ",") != "a,b" {
		t.Fatalf("named %q (ok %v), want a,b", named, ok)
	}
	if len(leased) != 2 || leased[0].Queue != "b" || leased[1].Queue != "a" {
		t.Fatalf("leased %v, want the first of b then a, in dispatch order", leased)
	}
	if read("jobs_ready_type") || !read("jobs_ready_queue_type") {
		t.Fatal("the lease read its type's jobs, past the paused queue's, not the queues it named")
	}
	leased, _, _ = lease(8)
	if len(leased) != 1 || leased[0].Queue != "b" {
		t.Fatalf("leased %v, want the last job of b and nothing of the paused or excluded queues", leased)
	}
	if leased, named, ok = lease(8); !ok || len(named) != 0 || len(leased) != 0 {
		t.Fatalf("named %q (ok %v), leased %v; want no queue and nothing", named, ok, leased)
	}
	many := make([]string, store.MaxNamedQueues+1)
	for i := range many {
		many[i] = "q" + strconv.Itoa(i)
	}
	insert(many...)
	if leased, named, ok = lease(1); ok || named != nil || len(leased) != 1 || leased[0].Queue != "q0" {
		t.Fatalf("named %q (ok %v), leased %v; want no names past %d queues, and the lease still in order", named, ok,
			leased, store.MaxNamedQueues)
	}
	if !read("jobs_ready_type") {
		t.Fatal("past store.MaxNamedQueues queues the lease did not read its type's jobs")
	}
}

// A lease naming the most queues and types a worker may (1,000 each) runs: read queue by queue it
// would bind the types once a queue, past SQLite's limit on variables, and 600 queues' reads,
// or 1,000 types' for a worker of every queue, are past its limit of 500 terms in a union.
// Past store.MaxNamedQueues queues it reads each type, past store.MaxReads types with ready jobs
// jobs_open once (each of the 1,000 types has one here), and so it does for fewer whose reads
// would bind too many names.
func TestLeaseOfManyNamedQueuesRuns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, now := openTemp(t)
	var err error
	names := func(prefix string, n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = prefix + strconv.Itoa(i)
		}
		return out
	}
	err = s.Write(ctx, "insert", func(tx store.Tx) error {
		var ps []*store.JobInsertParams
		for _, typ := range names("t", 1000) {
			ps = append(ps, &store.JobInsertParams{Type: typ, Queue: "q7", MaxAttempts: 1, RunAt: now, Now: now,
				AttemptTimeout: time.Minute})
		}
		_, err := tx.JobInsertMany(ps)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name                    string
		types, queues, excluded int
	}{
		{"1000 queues of 1000 types", 1000, 1000, 0},
		{"600 queues of one type", 1, 600, 0}, // a union of 600 reads binds 1,200 names
		{"16 queues of 3000 types", 3000, store.MaxNamedQueues, 0},
		{"every queue, 1000 types", 1000, 0, 0},
		{"every queue but 1100, 32 types", 32, 0, 1100}, // 32 reads bind 35,264 names
	} {
		p := &store.JobLeaseParams{Types: names("t", c.types), Queues: names("q", c.queues), Limit: 1,
			ExcludeQueues: names("x", c.excluded), WorkerID: "w", Now: now, LeaseUntil: now.Add(time.Minute)}
		var leased []*job.Job
		err := s.Write(ctx, "lease", func(tx store.Tx) error {
			leased, err = tx.JobLease(p)
			if err == nil && len(leased) == 1 {
				err = errRollback // leave the job ready for the next case
			}
			return err
		})
		if !errors.Is(err, errRollback) {
			t.Fatalf("%s: leased %v, %v; want the job", c.name, leased, err)
		}
	}
}

var errRollback = errors.New("roll back")

// A lease of more types than it reads one by one keeps those with ready jobs first
// (store.NarrowsTypes) and reads each through jobs_ready_type, in dispatch order, so that it
// never passes over a backlog of a type it does not handle; with more of its types ready than
// that, it reads jobs_open, still in dispatch order.
func TestLeaseOfManyTypesReadsThoseWithReadyJobs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, now := openTemp(t)
	types := make([]string, store.MaxReads+8)
	for i := range types {
		types[i] = "t" + strconv.Itoa(i)
	}
	insert := func(typ string, priority, n int) {
		t.Helper()
		ps := make([]*store.JobInsertParams, n)
		for i := range ps {
			ps[i] = &store.JobInsertParams{Type: typ, Queue: "default", Priority: priority, MaxAttempts: 1, RunAt: now,
				Now: now, AttemptTimeout: time.Minute}
		}
		if err := s.Write(ctx, "insert", func(tx store.Tx) error { _, err := tx.JobInsertMany(ps); return err }); err != nil {
			t.Fatal(err)
		}
	}
	// statements are the lease statements the writer has run (its cache), by the index they read.
	statements := func() (byType, open int) {
		err := s.Write(ctx, "look", func(stx store.Tx) error {
			for q := range stx.(*tx).cache.stmts {
				switch {
				case strings.HasPrefix(q, `SELECT `+jobColumns+` FROM jobs INDEXED BY jobs_ready_type WHERE state = 2`):
					byType++
				case strings.HasPrefix(q, `SELECT `+jobColumns+` FROM jobs WHERE `+openState):
					open++
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return byType, open
	}
	lease := func(limit int) []string {
		t.Helper()
		var leased []*job.Job
		err := s.Write(ctx, "lease", func(tx store.Tx) error {
			var err error
			leased, err = tx.JobLease(&store.JobLeaseParams{Types: types, Limit: limit, WorkerID: "w", Now: now,
				LeaseUntil: now.Add(time.Minute)})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		got := make([]string, len(leased))
		for i, j := range leased {
			got[i] = j.Type
		}
		return got
	}
	if got := lease(5); len(got) != 0 {
		t.Fatalf("leased %q with no job ready, want nothing", got)
	}
	insert("unserved", 10, 50) // first in dispatch order, of a type the lease does not take
	insert("t3", 0, 2)
	insert("t39", 5, 1)
	if got := lease(5); !slices.Equal(got, []string{"t39", "t3", "t3"}) {
		t.Fatalf("leased %q, want the jobs of t39 and t3 in dispatch order", got)
	}
	if byType, open := statements(); byType != 1 || open != 0 {
		t.Fatalf("the lease ran %d reads of jobs_ready_type and %d of jobs_open, want one of its two ready types and none of every ready job",
			byType, open)
	}
	// More of its types ready than it reads one by one: one read of every ready job, in order.
	for i, typ := range types[:store.MaxReads+1] {
		insert(typ, -i, 1)
	}
	got := lease(3)
	if !slices.Equal(got, types[:3]) {
		t.Fatalf("leased %q, want %q in dispatch order", got, types[:3])
	}
	if _, open := statements(); open != 1 {
		t.Fatalf("the lease of %d types with ready jobs ran %d reads of jobs_open, want one", store.MaxReads+1, open)
	}
}
