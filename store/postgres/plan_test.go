package postgres

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/store"
	"github.com/jobwire/jobwire/store/postgres/pgtest"
)

// The writes of many jobs probe jobs' primary key once per job, whatever the planner thought
// of the table when it planned them. The trap is the one a new database sets: the server keeps
// a prepared statement's generic plan, made while the table was nearly empty, as the table
// grows; under joinByKey that plan still probes the primary key.
func TestManyWritesProbeThePrimaryKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := open(t)
	defer s.Close()
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := conn.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	ids, seqs, secrets := make([]int64, 100), make([]int64, 100), make([][]byte, 100)
	ints, times := make([]int32, 100), make([]int64, 100)
	for i := range ids {
		ids[i], secrets[i] = int64(2400+2*i), make([]byte, 16)
	}
	writes := []struct {
		name string
		sql  string
		args []any
	}{
		{"lease", leaseSQL, []any{ids, seqs, secrets, int64(1), "w", "o"}},
		{"start", startManySQL, []any{ids, seqs, secrets, times, times, times}},
		{"release", releaseManySQL, []any{ids, seqs, secrets}},
		{"success", succeedManySQL, []any{ids, seqs, secrets, ints, times, times, []string{}, []string{}, []int16{}, []int64{}, make([][]byte, len(ids))}},
		{"heartbeat", extendLeasesSQL, []any{ids, seqs, secrets, int64(1), int64(0)}},
		{"lock", lockLeasesSQL, []any{ids, seqs, secrets}},
	}
	// Plan each write once, on the empty table, and keep the plan.
	exec(`SET plan_cache_mode = force_generic_plan`)
	tx := &tx{ctx: ctx, tx: nil}
	for i, w := range writes {
		tx.tx, err = conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := tx.joinByKey(true); err != nil {
			t.Fatal(err)
		}
		if _, err := tx.tx.Prepare(ctx, w.name, w.sql); err != nil {
			t.Fatal(err)
		}
		if _, err := tx.tx.Exec(ctx, w.name, writes[i].args...); err != nil {
			t.Fatalf("%s: %v", w.name, err)
		}
		if err := tx.tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	exec(`INSERT INTO jobs (type, queue, payload, state, max_attempts, run_at, created_at, attempt_timeout_ns)
		SELECT 't', 'default', '\x7b7d', 2, 3, 1, 1, 60000000000 FROM generate_series(1, 20000)`)
	for _, w := range writes {
		plan := explain(t, conn, `EXPLAIN EXECUTE `+w.name+`(`+placeholders(len(w.args))+`)`,
			append([]any{pgx.QueryExecModeSimpleProtocol}, w.args...)...)
		if !strings.Contains(plan, "Index Scan using jobs_pkey") || strings.Contains(plan, "Seq Scan on jobs") ||
			strings.Contains(plan, "Bitmap") || strings.Contains(plan, "Hash Join") {
			t.Errorf("%s does not probe the primary key once per job:\n%s", w.name, plan)
		}
	}
}

// The writes of many jobs keep their plan: the server plans each once, not anew on every call.
// Without plan_cache_mode in joinByKey's settings it plans a write of one job afresh (its kept
// plan, costed for a hundred, looks dearer than one made for one job), which at 1,000 jobs/s
// cost the server more than running the statements.
func TestManyWritesKeepTheirPlan(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openOneConn(t) // every write's statements are prepared where this test looks
	now := time.Unix(1_700_000_000, 0)
	ref := job.LeaseRef{JobID: 1 << 40, Token: job.LeaseToken{Seq: 1}}
	const writes = 12
	for range writes {
		err := s.Write(ctx, "test", func(tx store.Tx) error {
			if _, err := tx.JobSucceedMany([]*store.JobFinishParams{{Ref: ref, Queue: "default", Type: "t",
				State: job.StateSucceeded, Now: now, Attempt: job.Attempt{Number: 1, StartedAt: now, FinishedAt: now,
					Outcome: job.OutcomeSucceeded}}}); err != nil {
				return err
			}
			if _, err := tx.JobReleaseMany([]job.LeaseRef{ref}); err != nil {
				return err
			}
			if _, err := tx.JobExtendLeases([]job.LeaseRef{ref}, now, now); err != nil {
				return err
			}
			_, err := tx.JobInsertOfferedAtCommit([]*store.JobInsertParams{{Type: "t", Queue: "default", MaxAttempts: 1,
				RunAt: now, Now: now}}, []*store.JobOffer{{WorkerID: "w", LeaseUntil: now}}, func([]*job.Job, error) {})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, st := range []struct {
		name string
		sql  string
		runs int64 // per write
	}{
		{"success", succeedManySQL, 1}, {"release", releaseManySQL, 1}, {"heartbeat", extendLeasesSQL, 1},
		{"offered insert", offeredInsertSQL, 1}, {"lock", lockLeasesSQL, 3}, // before each write of many leases
	} {
		var custom, generic int64
		err := s.pool.QueryRow(ctx, `SELECT custom_plans, generic_plans FROM pg_prepared_statements WHERE statement = $1`,
			st.sql).Scan(&custom, &generic)
		if err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		if custom != 0 || generic != st.runs*writes {
			t.Errorf("%s: %d custom plans and %d runs of the kept plan in %d writes, want 0 and %d", st.name, custom, generic,
				writes, st.runs*writes)
		}
	}
}

// A writer's batch locks its jobs (JobLockRows) through the primary key, whatever the plan the
// server kept for it: one made on the empty table read the whole table, 3 ms a batch beside
// 10,000 jobs.
func TestLockRowsProbesThePrimaryKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openOneConn(t) // the plan kept is on the connection this test looks at
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := s.pool.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	// Keep the first plan made, as the server keeps the generic plan it chose after five runs.
	exec(`SET plan_cache_mode = force_generic_plan`)
	ids := []int64{1, 2}
	lock := func() {
		t.Helper()
		if err := s.Write(ctx, "test", func(tx store.Tx) error { return tx.JobLockRows(ids) }); err != nil {
			t.Fatal(err)
		}
	}
	lock() // on the empty table
	exec(`INSERT INTO jobs (type, queue, payload, state, max_attempts, run_at, created_at, attempt_timeout_ns)
		SELECT 't', 'default', '\x7b7d', 3, 3, 1, 1, 60000000000 FROM generate_series(1, 20000)`)
	lock()
	var name string
	if err := s.pool.QueryRow(ctx, `SELECT name FROM pg_prepared_statements WHERE statement = $1`, lockRowsSQL).Scan(&name); err != nil {
		t.Fatalf("the lock's prepared statement: %v", err)
	}
	if plan := explain(t, s.pool, `EXPLAIN EXECUTE `+name+`($1)`, pgx.QueryExecModeSimpleProtocol, ids); !strings.Contains(plan, "jobs_pkey") || strings.Contains(plan, "Seq Scan") {
		t.Errorf("the lock of a batch's jobs does not probe the primary key:\n%s", plan)
	}
}

// The stats reads count the unfinished jobs through the partial indexes of their states, not by
// reading the finished history, and keep no plan made on the empty table of a new database.
func TestStatsReadTheOpenJobsOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openOneConn(t) // a statement kept would be where this test looks
	read := func() {
		t.Helper()
		if _, err := s.JobCounts(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := s.QueueStats(ctx, ""); err != nil {
			t.Fatal(err)
		}
		if _, err := s.RecentCounts(ctx, time.Unix(0, 1)); err != nil {
			t.Fatal(err)
		}
		if _, err := s.ConcurrencyStats(ctx); err != nil {
			t.Fatal(err)
		}
	}
	read() // on the empty table
	execAll(t, s,
		`INSERT INTO jobs (type, queue, payload, state, max_attempts, run_at, created_at, finished_at, attempt_timeout_ns)
			SELECT 't', 'default', '\x7b7d', 5, 3, 1, 1, n, 60000000000 FROM generate_series(1, 20000) AS n`,
		`INSERT INTO jobs (type, queue, payload, state, max_attempts, run_at, created_at, attempt_timeout_ns, concurrency_key)
			SELECT 't', 'default', '\x7b7d', 2, 3, 1, 1, 60000000000, 'k' FROM generate_series(1, 5)`,
		`ANALYZE jobs`,
	)
	read()
	for _, st := range []struct {
		name string
		sql  string
		args []any
	}{
		{"job counts", jobCountsSQL, nil},
		{"queue depth", queueDepthSQL, []any{""}},
		{"oldest ready", oldestReadySQL, []any{""}},
		{"recent counts", recentCountsSQL, []any{int64(19990), int16(3), int16(4), int16(5)}},
		{"concurrency stats", concurrencyStatsSQL, nil},
	} {
		var kept int
		if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM pg_prepared_statements WHERE statement = $1`,
			st.sql).Scan(&kept); err != nil || kept != 0 {
			t.Errorf("%s: kept on the connection %d times (%v), want 0", st.name, kept, err)
		}
		if plan := explain(t, s.pool, `EXPLAIN `+st.sql, append([]any{pgx.QueryExecModeExec}, st.args...)...); strings.Contains(plan, "Seq Scan on jobs") {
			t.Errorf("%s reads the whole table:\n%s", st.name, plan)
		}
	}
}

// execAll runs each of sqls on s's pool, in order: a test's setup.
func execAll(t *testing.T, s *Store, sqls ...string) {
	t.Helper()
	for _, sql := range sqls {
		if _, err := s.pool.Exec(context.Background(), sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
}

// explain returns the plan the server gives for sql (an EXPLAIN), one line per row of it.
func explain(t *testing.T, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, sql string, args ...any) string {
	t.Helper()
	rows, err := q.Query(context.Background(), sql, args...)
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return strings.Join(lines, "\n")
}

// explainPrepared returns the plan the server runs sql with for args under plan_cache_mode
// mode, after setup (a statement, or none): prepared, as pgx prepares it, and explained as the
// server runs it, in a transaction rolled back after. EXPLAIN of the statement itself would
// plan it for these arguments only.
func explainPrepared(t *testing.T, conn interface {
	Begin(context.Context) (pgx.Tx, error)
}, mode, setup, sql string, args ...any) string {
	t.Helper()
	ctx := context.Background()
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	for _, stmt := range []string{`SET LOCAL plan_cache_mode = ` + mode, setup, `PREPARE explained AS ` + sql} {
		if stmt == "" {
			continue
		}
		if _, err := tx.Exec(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	plan := explain(t, tx, `EXPLAIN EXECUTE explained(`+placeholders(len(args))+`)`,
		append([]any{pgx.QueryExecModeSimpleProtocol}, args...)...)
	if _, err := tx.Exec(ctx, `DEALLOCATE explained`); err != nil { // a prepared statement outlives its transaction
		t.Fatal(err)
	}
	return plan
}

// placeholders lists n parameters: $1, $2, ...
func placeholders(n int) string {
	ps := make([]string, n)
	for i := range ps {
		ps[i] = "$" + strconv.Itoa(i+1)
	}
	return strings.Join(ps, ", ")
}

// The shut-breaker read, sent with every lease's COMMIT, reads the few shut breakers through
// their index (migration 006), not the row of every job type.
func TestShutBreakerReadUsesItsIndex(t *testing.T) {
	t.Parallel()
	s := open(t)
	defer s.Close()
	execAll(t, s,
		`INSERT INTO breakers (type, data, shut) SELECT 't' || n, '{}', n % 1000 = 0 FROM generate_series(1, 5000) AS n`,
		`ANALYZE breakers`,
	)
	if plan := explain(t, s.pool, `EXPLAIN `+breakerShutSQL); !strings.Contains(plan, "breakers_shut") {
		t.Fatalf("the shut-breaker read does not use breakers_shut:\n%s", plan)
	}
}

// Whether keyed jobs exist, asked every poll from the broker's start, is planned at each call:
// no plan made on the empty table is kept on the connection (it read the whole table beside a
// million waiting jobs), and planned with the table grown, it reads the partial indexes of keyed
// jobs only.
func TestConcurrencyKeyedIsPlannedAtEachCall(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openOneConn(t) // a statement kept would be where this test looks
	keyed := func() {
		t.Helper()
		if k, err := s.ConcurrencyKeyed(ctx); err != nil || k {
			t.Fatalf("ConcurrencyKeyed: %t, %v; want false", k, err)
		}
	}
	keyed() // on the empty table
	if _, err := s.pool.Exec(ctx, `INSERT INTO jobs (type, queue, payload, state, max_attempts, run_at, created_at,
		attempt_timeout_ns) SELECT 't', 'backlog', '\x7b7d', 2, 3, 1, 1, 60000000000 FROM generate_series(1, 20000)`); err != nil {
		t.Fatal(err)
	}
	keyed()
	var kept int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM pg_prepared_statements WHERE statement = $1`,
		concurrencyKeyedSQL).Scan(&kept); err != nil || kept != 0 {
		t.Fatalf("the statement is kept on the connection %d times (%v), want 0", kept, err)
	}
	if plan := explain(t, s.pool, `EXPLAIN `+concurrencyKeyedSQL, pgx.QueryExecModeSimpleProtocol); !strings.Contains(plan, "jobs_ready_keyed") || !strings.Contains(plan, "jobs_held_keyed") ||
		strings.Contains(plan, "Seq Scan") {
		t.Errorf("the check does not read the keyed jobs' indexes:\n%s", plan)
	}
}

// openOneConn opens a store of one connection, closed when the test ends, so that the
// statements a test runs are kept on the connection its queries look at.
func openOneConn(t *testing.T) *Store {
	t.Helper()
	s, err := Open(context.Background(), pgtest.URL(t), Options{Logger: slog.New(slog.DiscardHandler), MaxConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// explainingTx explains each query it is asked for before running it, and keeps the plans.
type explainingTx struct {
	pgx.Tx
	t     *testing.T
	plans []string
}

func (e *explainingTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	e.plans = append(e.plans, explain(e.t, e.Tx, "EXPLAIN "+sql, args...))
	return e.Tx.Query(ctx, sql, args...)
}

// The sweep reads the held jobs through their index, where the planner would take a bitmap
// scan of a table it holds no statistics of: an index scan passes over the entries of the
// dead versions the scans before it found, a bitmap scan visits the table for every one of
// them at every sweep (readHeldByIndex).
func TestSweepReadsTheHeldIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := open(t)
	defer s.Close()
	// A drain of most of a backlog, each job held and then finished, leaving two dead versions
	// in the held index, with no vacuum or analyze to give the planner statistics.
	execAll(t, s,
		`ALTER TABLE jobs SET (autovacuum_enabled = false)`,
		`INSERT INTO jobs (type, queue, payload, state, max_attempts, run_at, created_at, attempt_timeout_ns)
		SELECT 't', 'default', '\x7b7d', 2, 3, 1, 1, 60000000000 FROM generate_series(1, 100000)`,
		`UPDATE jobs SET state = 3, lease_expires_at = 1`,
		`UPDATE jobs SET state = 4, attempt_deadline = 9000000000000000000`,
		`UPDATE jobs SET state = 5 WHERE id > 500`)
	begun, err := s.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = begun.Rollback(ctx) }()
	ex := &explainingTx{Tx: begun, t: t}
	held, err := (&tx{ctx: ctx, tx: ex}).JobHeldExpired(time.Unix(1_700_000_000, 0), 1000)
	if err != nil {
		t.Fatal(err)
	}
	if len(held) != 500 {
		t.Errorf("read %d held jobs whose lease ran out, want the 500", len(held))
	}
	if len(ex.plans) != 1 || !strings.Contains(ex.plans[0], "Index Scan using jobs_held_queue") ||
		strings.Contains(ex.plans[0], "Bitmap") {
		t.Errorf("the sweep's read of the held jobs does not scan their index:\n%s", strings.Join(ex.plans, "\n\n"))
	}
}
