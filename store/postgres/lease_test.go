package postgres

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/store"
	"github.com/jobwire/jobwire/store/postgres/pgtest"
)

// Two transactions leasing at once take different jobs, and the second does not wait for the
// first: the lease skips rows another transaction has locked. This is what lets several
// writers (and, later, several brokers) lease from one table without handing a job out twice.
// A lease of several types, which locks each job its reads merge (leaseQuery), skips them too.
func TestConcurrentLeasesSkipLockedJobs(t *testing.T) {
	t.Parallel()
	for _, types := range [][]string{{"t"}, {"t", "u"}} {
		t.Run(strings.Join(types, ","), func(t *testing.T) {
			t.Parallel()
			concurrentLeasesSkipLocked(t, types)
		})
	}
}

// concurrentLeasesSkipLocked runs TestConcurrentLeasesSkipLockedJobs for leases of types, the
// jobs of each type in turn.
func concurrentLeasesSkipLocked(t *testing.T, types []string) {
	u := pgtest.URL(t)
	ctx := context.Background()
	s, err := Open(ctx, u, Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	now := time.Unix(1_700_000_000, 0)
	var ps []*store.JobInsertParams
	for i := range 4 {
		ps = append(ps, &store.JobInsertParams{Type: types[i%len(types)], Queue: "default", Payload: []byte(`{}`), MaxAttempts: 3,
			RunAt: now, Now: now, AttemptTimeout: time.Minute})
	}
	if err := s.Write(ctx, "insert", func(tx store.Tx) error { _, err := tx.JobInsertMany(ps); return err }); err != nil {
		t.Fatal(err)
	}
	lease := func(tx store.Tx) ([]*job.Job, error) {
		return tx.JobLease(&store.JobLeaseParams{Types: types, Limit: 2, WorkerID: "w", Now: now, LeaseUntil: now.Add(time.Minute)})
	}
	holding, release := make(chan []int64, 1), make(chan struct{})
	firstDone := make(chan error, 1)
	go func() {
		firstDone <- s.Write(ctx, "first", func(tx store.Tx) error {
			jobs, err := lease(tx)
			if err != nil {
				return err
			}
			ids := make([]int64, len(jobs))
			for i, j := range jobs {
				ids[i] = j.ID
			}
			holding <- ids
			<-release // keep the rows locked until the second lease is done
			return nil
		})
	}()
	first := <-holding
	var second []int64
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	err = s.Write(sctx, "second", func(tx store.Tx) error {
		jobs, err := lease(tx)
		second = nil
		for _, j := range jobs {
			second = append(second, j.ID)
		}
		return err
	})
	close(release)
	if err != nil {
		t.Fatalf("second lease while the first holds its rows: %v, want it done without waiting", err)
	}
	if err := <-firstDone; err != nil {
		t.Fatal(err)
	}
	if len(first) != 2 || len(second) != 2 || slices.ContainsFunc(second, func(id int64) bool { return slices.Contains(first, id) }) {
		t.Fatalf("first leased %v, second %v: want two jobs each, none twice", first, second)
	}
}

// The lease reads ready jobs through jobs_ready, in dispatch order, and stops at its limit,
// even on a table whose statistics saw no ready job: planned from such statistics, it read and
// sorted every ready job and every dead index entry on each lease (7 to 9 ms a lease with
// 2,500 jobs ready, against 0.1 ms through the index).
func TestLeaseReadsTheReadyIndexInOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, sent := openTraced(t)
	now := time.Unix(1_700_000_000, 0)
	// Statistics taken while no job was ready, then a backlog, half of it leased already.
	if _, err := s.pool.Exec(ctx, `ANALYZE jobs`); err != nil {
		t.Fatal(err)
	}
	var ps []*store.JobInsertParams
	for range 3000 {
		ps = append(ps, &store.JobInsertParams{Type: "t", Queue: "default", Payload: []byte(`{}`), MaxAttempts: 3,
			RunAt: now, Now: now, AttemptTimeout: time.Minute})
	}
	params := &store.JobLeaseParams{Types: []string{"t"}, Limit: 128, WorkerID: "w", Now: now, LeaseUntil: now.Add(time.Minute)}
	var plan, sortAfter string
	err := s.Write(ctx, "test", func(stx store.Tx) error {
		if _, err := stx.JobInsertMany(ps); err != nil {
			return err
		}
		for range 12 {
			if _, err := stx.JobLease(params); err != nil {
				return err
			}
		}
		tx := stx.(*tx)
		if err := tx.tx.QueryRow(ctx, `SELECT current_setting('enable_sort')`).Scan(&sortAfter); err != nil {
			return err
		}
		if err := tx.readInDispatchOrder(true); err != nil {
			return err
		}
		q := leaseQuery(params, params.Limit, nil, jobColumns)
		plan = explain(t, tx.tx, `EXPLAIN `+q.sql.String(), q.args...)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(plan, "Index Scan using jobs_ready") || strings.Contains(plan, "Sort") {
		t.Fatalf("the lease's plan does not read jobs_ready in order:\n%s", plan)
	}
	// JobLease reads under that setting, and puts the server's back before the next statement
	// it could change; leases one after another turn it off once.
	if sortAfter != "on" {
		t.Fatalf("enable_sort after the leases: %s, want the server's on", sortAfter)
	}
	var order []string
	for _, sql := range sent.statements() {
		switch {
		case strings.HasPrefix(sql, "SELECT set_config('jobwire.kept_'") && strings.Contains(sql, "enable_sort"):
			order = append(order, "sort off")
		case strings.HasPrefix(sql, "SELECT set_config(n, current_setting('jobwire.kept_'") && strings.Contains(sql, "enable_sort"):
			order = append(order, "sort back")
		case strings.HasPrefix(sql, "SELECT "+jobColumns), strings.HasPrefix(sql, "WITH picked AS (SELECT "):
			order = append(order, "lease")
		}
	}
	want := "sort off, " + strings.Repeat("lease, ", 12) + "sort back"
	if got := strings.Join(order[:14], ", "); got != want {
		t.Fatalf("JobLease sent %v, want %s first", order, want)
	}
}

// A lease for a worker that names one queue reads that queue's ready jobs through
// jobs_ready_queue_type, in dispatch order, and none of the jobs waiting in other queues: read from
// jobs_ready, it passed over every one of them, so a queue nobody serves slowed every lease as
// it grew. The generic plan, which the server keeps for a prepared statement, must read the same,
// even when the statistics know of the backlog's queue alone: the generic plan's guess for a
// queue it cannot see is then all the ready jobs, and it read jobs_ready, 280-900 ms a lease
// beside a million jobs waiting in a queue no worker served (auto_explain).
func TestLeaseOfOneQueueReadsOnlyItsQueue(t *testing.T) {
	t.Parallel()
	leaseReadsOnly(t, "jobs_ready_queue_type", `'t', 'backlog'`, "t", "q",
		&store.JobLeaseParams{Types: []string{"t"}, Queues: []string{"q"}})
}

// A lease for a worker of one type and every queue reads that type's ready jobs through
// jobs_ready_type, in dispatch order, and none of the jobs of another type waiting in the same
// queue: read from jobs_ready, it passed over every one of them, so a backlog of a type no
// worker handles slowed every lease as it grew. The generic plan must read the same.
func TestLeaseOfOneTypeReadsOnlyItsType(t *testing.T) {
	t.Parallel()
	leaseReadsOnly(t, "jobs_ready_type", `'unhandled', 'default'`, "t", "default",
		&store.JobLeaseParams{Types: []string{"t"}})
}

// A lease for a worker of several types reads each type's ready jobs through jobs_ready_type,
// or each type in each of the queues it names through jobs_ready_queue_type, and none of another
// type's or queue's: read from jobs_ready, it passed over a backlog of a type no worker handles,
// as it did for one type, over the jobs of a type whose breaker is open, which the lease leaves
// out, and over a queue nobody serves. The reads' jobs are merged, each locked as the merge
// reaches it (leaseQuery): the lease locks no job it does not take.
func TestLeaseOfSeveralTypesReadsOnlyTheirTypes(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, index, backlog, queue string
		params                      *store.JobLeaseParams
	}{
		{"unhandled", "jobs_ready_type", `'unhandled', 'default'`, "default",
			&store.JobLeaseParams{Types: []string{"t", "u", "v"}}},
		{"breaker open", "jobs_ready_type", `'backlog', 'default'`, "default",
			&store.JobLeaseParams{Types: []string{"t", "backlog", "u"}, ExcludeTypes: []string{"backlog"}}},
		{"breaker open, one left", "jobs_ready_type", `'backlog', 'default'`, "default",
			&store.JobLeaseParams{Types: []string{"backlog", "t"}, ExcludeTypes: []string{"backlog"}}},
		{"queue named", "jobs_ready_queue_type", `'unhandled', 'q'`, "q",
			&store.JobLeaseParams{Types: []string{"t", "u"}, Queues: []string{"q"}}},
		{"queues named", "jobs_ready_queue_type", `'t', 'backlog'`, "q",
			&store.JobLeaseParams{Types: []string{"t"}, Queues: []string{"q", "r"}}},
		{"queues named, breaker open", "jobs_ready_queue_type", `'backlog', 'q'`, "q",
			&store.JobLeaseParams{Types: []string{"t", "backlog"}, Queues: []string{"q", "r"}, ExcludeTypes: []string{"backlog"}}},
		// Past store.MaxReads types the lease keeps those with ready jobs (readyTypes).
		{"many types", "jobs_ready_type", `'unhandled', 'default'`, "default",
			&store.JobLeaseParams{Types: append(manyTypes(store.MaxReads+8), "t")}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			leaseReadsOnly(t, c.index, c.backlog, "t", c.queue, c.params)
		})
	}
}

// A lease of several types takes their ready jobs in dispatch order across the types, as one
// read of them all would (priority, then run time, then id), whether it leases in one statement
// or read by read (a capped queue), and stops at its limit.
func TestLeaseOfSeveralTypesTakesThemInDispatchOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := open(t)
	defer s.Close()
	now := time.Unix(1_700_000_000, 0)
	jobs := []struct {
		typ      string
		priority int
		late     time.Duration
	}{
		{"a", 0, 1}, {"b", 0, 2}, {"c", 9, 0}, {"a", 0, 3}, {"b", 5, 9}, {"a", 5, 9}, {"b", 0, 0}, {"c", 0, 0}, {"a", 1, 8},
	}
	ps := make([]*store.JobInsertParams, len(jobs))
	for i, j := range jobs {
		ps[i] = &store.JobInsertParams{Type: j.typ, Queue: "default", Payload: []byte(`{}`), MaxAttempts: 3,
			Priority: j.priority, RunAt: now.Add((j.late - 10) * time.Second), Now: now, AttemptTimeout: time.Minute}
	}
	ids := insertIDs(t, s, ps)
	// Of types a and b in dispatch order: a and b of priority 5 (same run time, by id), a of 1,
	// then b at -10 s, a at -9 s, b at -8 s, a at -7 s. The c jobs are not theirs.
	want := []int64{ids[4], ids[5], ids[8], ids[6], ids[0], ids[1], ids[3]}
	for _, c := range []struct {
		name string
		caps map[string]int
	}{{"one statement", nil}, {"read by read", map[string]int{"default": 100}}} {
		t.Run(c.name, func(t *testing.T) {
			var got []int64
			err := s.Write(ctx, "test", func(stx store.Tx) error {
				leased, err := stx.JobLease(&store.JobLeaseParams{Types: []string{"a", "b"}, Limit: 5, Caps: c.caps,
					WorkerID: "w", Now: now, LeaseUntil: now.Add(time.Minute)})
				for _, j := range leased {
					got = append(got, j.ID)
				}
				if err == nil {
					err = errRollback
				}
				return err
			})
			if !errors.Is(err, errRollback) {
				t.Fatal(err)
			}
			if !slices.Equal(got, want[:5]) {
				t.Fatalf("leased %v, want %v", got, want[:5])
			}
		})
	}
}

// A lease of several types locks each job its reads merge by a scan of that one row, whatever
// the statistics say. Locked by id, in the benchmark's batches of 100 on a fresh schema, the
// generic plan read all of jobs_ready_type for each job, by the id in its last column (1.5 ms
// a job); here the statement is planned beside statistics taken before any job was ready.
func TestLeaseOfSeveralTypesLocksEachJobByItsRow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := open(t)
	defer s.Close()
	if _, err := s.pool.Exec(ctx, `ANALYZE jobs`); err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_700_000_000, 0)
	ps := make([]*store.JobInsertParams, 3000)
	for i := range ps {
		ps[i] = &store.JobInsertParams{Type: []string{"t", "u"}[i%2], Queue: "default", Payload: []byte(`{}`), MaxAttempts: 3,
			RunAt: now, Now: now, AttemptTimeout: time.Minute}
	}
	lease := &store.JobLeaseParams{Types: []string{"t", "u", "v"}, Limit: 128, WorkerID: "w", Now: now, LeaseUntil: now.Add(time.Minute)}
	var plan string
	err := s.Write(ctx, "test", func(stx store.Tx) error {
		if _, err := stx.JobInsertMany(ps); err != nil {
			return err
		}
		tx := stx.(*tx)
		sql, args, _, err := leaseAtOnceSQL(lease, []*store.JobLeaseParams{lease}, nil)
		if err != nil {
			return err
		}
		if err := tx.leaseSettings(true); err != nil {
			return err
		}
		plan = explain(t, tx.tx, `EXPLAIN `+sql, args...)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(plan, `(id = "*SELECT*`) || !strings.Contains(plan, "Tid Scan on jobs") {
		t.Fatalf("the lease does not lock each job by its row:\n%s", plan)
	}
}

// leaseReadsOnly checks that a lease of params (scope only) reads its jobs through index, by
// its key and in dispatch order, in the plan the server makes for the lease's prepared
// statement and in the generic one, beside 200,000 ready jobs of backlog (the type and queue
// of each, as SQL), analysed; and that it leases 16 of the 30 jobs of type typ in queue queue.
func leaseReadsOnly(t *testing.T, index, backlog, typ, queue string, params *store.JobLeaseParams) {
	t.Helper()
	ctx := context.Background()
	s := open(t)
	defer s.Close()
	now := time.Unix(1_700_000_000, 0)
	execAll(t, s,
		`INSERT INTO jobs (type, queue, payload, state, max_attempts, run_at, created_at, attempt_timeout_ns)
			SELECT `+backlog+`, '\x7b7d', 2, 3, 1, 1, 60000000000 FROM generate_series(1, 200000)`,
		`ANALYZE jobs`,
	)
	ps := make([]*store.JobInsertParams, 30)
	for i := range ps {
		ps[i] = &store.JobInsertParams{Type: typ, Queue: queue, Payload: []byte(`{}`), MaxAttempts: 3,
			RunAt: now, Now: now, AttemptTimeout: time.Minute}
	}
	if err := s.Write(ctx, "test", func(stx store.Tx) error { _, err := stx.JobInsertMany(ps); return err }); err != nil {
		t.Fatal(err)
	}
	params.Limit, params.WorkerID, params.Now, params.LeaseUntil = 16, "w", now, now.Add(time.Minute)
	params.EnforceQueues, params.SkipCapped, params.ExcludeShut = true, true, true
	scope := leaseScopeOf(t, s, params)
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	for _, mode := range []string{"auto", "force_generic_plan"} {
		q := leaseQuery(scope, params.Limit, nil, jobColumns)
		plan := explainPrepared(t, conn, mode, plannerSQL(true, []string{"enable_sort"}), q.sql.String(), q.args...)
		if !strings.Contains(plan, "Index Scan using "+index) || !strings.Contains(plan, "Index Cond: (") ||
			sortNode.MatchString(plan) {
			t.Errorf("plan_cache_mode %s: the lease does not read %s by its key in order:\n%s", mode, index, plan)
		}
	}
	var leased []*job.Job
	var lockedReady int
	err = s.Write(ctx, "test", func(stx store.Tx) error {
		var err error
		if leased, err = stx.JobLease(params); err != nil {
			return err
		}
		// The lease locks the jobs it takes and no other: a ready row it locked and left is
		// one a lease of another transaction must pass over.
		return stx.(*tx).tx.QueryRow(ctx, `SELECT count(*) FROM jobs WHERE state = 2 AND xmax <> '0'::xid`).Scan(&lockedReady)
	})
	if err != nil {
		t.Fatal(err)
	}
	if lockedReady != 0 {
		t.Errorf("the lease locked %d ready jobs it did not take", lockedReady)
	}
	if len(leased) != 16 {
		t.Fatalf("leased %d jobs of type %s in queue %s, want 16", len(leased), typ, queue)
	}
	for _, j := range leased {
		if j.Type != typ || j.Queue != queue {
			t.Fatalf("leased job %d of type %s in queue %q, want %s in %s", j.ID, j.Type, j.Queue, typ, queue)
		}
	}
}

// leaseScopeOf is the scope a lease of params reads, the queues' rules applied, as JobLease
// and JobLeaseAtCommit read it.
func leaseScopeOf(t *testing.T, s *Store, params *store.JobLeaseParams) *store.JobLeaseParams {
	t.Helper()
	var scope *store.JobLeaseParams
	err := s.Write(context.Background(), "test", func(stx store.Tx) error {
		var err error
		scope, _, err = stx.(*tx).leaseScope(params)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return scope
}

// sortNode matches a sort in a plan: a Sort or Incremental Sort node, not a Merge Append's
// sort key.
var sortNode = regexp.MustCompile(`Sort  \(cost`)

// errRollback ends a transaction of a test without committing it.
var errRollback = errors.New("rolled back by the test")

// A lease of every queue, while a queue is paused, names the queues with ready jobs that are
// not paused and reads each: read by type in every queue, it passed over the paused queue's
// backlog of the same type, and beside 100,000 such jobs enqueue to start took seconds. Past
// store.MaxNamedQueues queues, or without PausedBacklog, it reads every queue and still leaves the
// paused one out.
func TestLeaseOfEveryQueueNamesThoseNotPaused(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name          string
		queues        int // ready queues besides the paused one
		pausedBacklog bool
		named         bool
	}{
		{"paused known", 3, true, true},
		{"paused not known", 3, false, false},
		{"too many queues", store.MaxNamedQueues + 1, true, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s, sent := openTraced(t)
			now := time.Unix(1_700_000_000, 0)
			var ps []*store.JobInsertParams
			for i := range 2000 {
				ps = append(ps, &store.JobInsertParams{Type: "t", Queue: "paused", Payload: []byte(`{}`), MaxAttempts: 3,
					RunAt: now.Add(-time.Hour), Now: now, AttemptTimeout: time.Minute})
				if i < c.queues {
					ps = append(ps, &store.JobInsertParams{Type: "t", Queue: fmt.Sprintf("q%02d", i), Payload: []byte(`{}`),
						MaxAttempts: 3, RunAt: now, Now: now, AttemptTimeout: time.Minute})
				}
			}
			err := s.Write(ctx, "test", func(tx store.Tx) error {
				if _, err := tx.JobInsertMany(ps); err != nil {
					return err
				}
				return tx.QueueSetPaused("paused", true)
			})
			if err != nil {
				t.Fatal(err)
			}
			var leased []*job.Job
			err = s.Write(ctx, "test", func(tx store.Tx) error {
				var err error
				leased, err = tx.JobLease(&store.JobLeaseParams{Types: []string{"t"}, Limit: 64, WorkerID: "w", Now: now,
					LeaseUntil: now.Add(time.Minute), EnforceQueues: true, SkipCapped: true, PausedBacklog: c.pausedBacklog})
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			if len(leased) != c.queues || slices.ContainsFunc(leased, func(j *job.Job) bool { return j.Queue == "paused" }) {
				t.Fatalf("leased %d jobs, of queues %v; want the %d of the queues not paused", len(leased), queuesOf(leased), c.queues)
			}
			named := slices.ContainsFunc(sent.statements(), func(sql string) bool {
				return strings.Contains(sql, "FROM jobs WHERE state = 2 AND queue = $")
			})
			if named != c.named {
				t.Errorf("the lease read named queues: %v, want %v", named, c.named)
			}
		})
	}
}

// openTraced opens a store on a new database whose statements the returned counter records.
func openTraced(t *testing.T) (*Store, *tripCounter) {
	t.Helper()
	sent := &tripCounter{}
	s, err := Open(context.Background(), pgtest.URL(t), Options{Logger: slog.New(slog.DiscardHandler), tracer: sent})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, sent
}

// queuesOf lists the queues of jobs, in their order.
func queuesOf(jobs []*job.Job) []string {
	qs := make([]string, len(jobs))
	for i, j := range jobs {
		qs[i] = j.Queue
	}
	return qs
}

// manyTypes returns n job types, none of which has a job.
func manyTypes(n int) []string {
	types := make([]string, n)
	for i := range types {
		types[i] = "n" + strconv.Itoa(i)
	}
	return types
}

// A lease of more types than it reads one by one first keeps those with ready jobs, a probe of
// jobs_ready_type each, in the plan the server keeps as in one made for the arguments: never a
// read of jobs_ready, past a backlog of another type.
func TestReadyTypesProbeEachType(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := open(t)
	defer s.Close()
	execAll(t, s,
		`INSERT INTO jobs (type, queue, payload, state, max_attempts, run_at, created_at, attempt_timeout_ns)
			SELECT 'unhandled', 'default', '\x7b7d', 2, 3, 1, 1, 60000000000 FROM generate_series(1, 200000)`,
		// The statistics know of the backlog's type only, as after a backlog built up.
		`ANALYZE jobs`,
		`INSERT INTO jobs (type, queue, payload, state, max_attempts, run_at, created_at, attempt_timeout_ns)
			VALUES ('n3', 'default', '\x7b7d', 2, 3, 2, 2, 60000000000), ('n7', 'other', '\x7b7d', 2, 3, 2, 2, 60000000000)`,
	)
	types := manyTypes(store.MaxReads + 8)
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	for _, mode := range []string{"auto", "force_generic_plan"} {
		plan := explainPrepared(t, conn, mode, "", readyTypesSQL, types)
		if !strings.Contains(plan, "using jobs_ready_type") || !strings.Contains(plan, "Index Cond: (") ||
			strings.Contains(plan, "jobs_ready ") || strings.Contains(plan, "Seq Scan on jobs") {
			t.Errorf("plan_cache_mode %s: the probes do not read jobs_ready_type by type:\n%s", mode, plan)
		}
	}
	var ready []string
	err = s.Write(ctx, "test", func(stx store.Tx) error {
		ready, err = stx.(*tx).readyTypes(append(types, "unhandled"))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"n3", "n7", "unhandled"}; !slices.Equal(ready, want) {
		t.Fatalf("ready types %q, want %q in the order asked", ready, want)
	}
}

// A lease of more types than it reads one by one, none of which has a ready job, stops at the
// probe of its types: beside a backlog of another type, no read of the ready jobs follows, on
// the paths that lease one stream at a time (keyed) as on the one that leases a round at once.
func TestLeaseOfManyTypesNoneReadyReadsNoJobs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, sent := openTraced(t)
	if _, err := s.pool.Exec(ctx, `INSERT INTO jobs (type, queue, payload, state, max_attempts, run_at, created_at, attempt_timeout_ns)
		SELECT 'unhandled', 'default', '\x7b7d', 2, 3, 1, 1, 60000000000 FROM generate_series(1, 100)`); err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_700_000_000, 0)
	for _, keyed := range []bool{false, true} {
		lease := func() *store.JobLeaseParams {
			return &store.JobLeaseParams{Types: manyTypes(store.MaxReads + 8), Limit: 10, Now: now,
				LeaseUntil: now.Add(time.Minute), WorkerID: "w", Keyed: keyed}
		}
		before := len(sent.statements())
		err := s.Write(ctx, "test", func(stx store.Tx) error {
			leased, err := stx.JobLease(lease())
			if err == nil && len(leased) > 0 {
				err = fmt.Errorf("leased %d jobs of types it does not take", len(leased))
			}
			if err != nil {
				return err
			}
			return stx.JobLeaseAtCommit([]*store.JobLeaseParams{lease(), lease()}, func(out [][]*job.Job, err error) {
				if err == nil && (len(out) != 2 || len(out[0])+len(out[1]) > 0) {
					t.Errorf("leases at commit got %v", out)
				}
			})
		})
		if err != nil {
			t.Fatalf("keyed %v: %v", keyed, err)
		}
		for _, sql := range sent.statements()[before:] {
			if strings.Contains(sql, "FROM jobs") && sql != readyTypesSQL {
				t.Errorf("keyed %v: a lease with no type ready read the jobs:\n%s", keyed, sql)
			}
		}
	}
}
