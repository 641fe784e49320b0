package postgres

import (
	"context"
	"regexp"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/store"
)

// An offered job goes ahead of no ready job its worker could take, and of no other: beside a
// backlog its worker does not take (a type no worker handles, a queue it does not name, a type
// it does not handle) it is
// leased by its insert, where counted against every ready job it waited for a dispatch round
// whenever any job waited. The plan the server keeps for the statement, made on the empty
// table before the backlog came, reads the worker's jobs through the indexes by queue and
// type and by type, not past the backlog in jobs_ready.
func TestOfferPassesWhatItsWorkerDoesNotTake(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openOneConn(t) // the plan kept is on the connection this test looks at
	exec := func(sql string) {
		t.Helper()
		if _, err := s.pool.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	exec(`SET plan_cache_mode = force_generic_plan`) // the first plan made is kept
	now := time.Unix(1_700_000_000, 0)
	offered := func(types, queues []string) bool {
		t.Helper()
		var leased []*job.Job
		err := s.Write(ctx, "test", func(tx store.Tx) error {
			_, err := tx.JobInsertOfferedAtCommit([]*store.JobInsertParams{{Type: "t", Queue: "default", Payload: []byte(`{}`),
				MaxAttempts: 3, RunAt: now, Now: now, AttemptTimeout: time.Minute}},
				[]*store.JobOffer{{WorkerID: "w", LeaseUntil: now.Add(time.Minute), Types: types, Queues: queues}},
				func(jobs []*job.Job, err error) { leased = jobs })
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return leased[0] != nil
	}
	if !offered([]string{"t"}, nil) {
		t.Fatal("a job offered on the empty table was not leased")
	}
	// Ahead of the offered jobs in dispatch order: jobs of a type no worker handles in their
	// queue, and of a type w in a queue elsewhere.
	exec(`INSERT INTO jobs (type, queue, payload, priority, state, max_attempts, run_at, created_at, attempt_timeout_ns)
		SELECT CASE WHEN g % 2 = 0 THEN 'unhandled' ELSE 'w' END, CASE WHEN g % 2 = 0 THEN 'default' ELSE 'elsewhere' END,
			'\x7b7d', 5, 2, 3, 1, 1, 60000000000 FROM generate_series(1, 100000) g`)
	for _, c := range []struct {
		name          string
		types, queues []string
		leased        bool
	}{
		// The ones leased first: a job left PENDING would wait ahead of the next.
		{"its type in its queue", []string{"t"}, []string{"default"}, true},
		{"its types in its queues", []string{"t", "v"}, []string{"default", "other"}, true},
		{"its type in every queue", []string{"t"}, nil, true},
		{"its types in every queue", []string{"t", "v"}, nil, true},
		// Past store.MaxReads types, those with ready jobs count (store.NarrowsTypes).
		{"many types", append(manyTypes(store.MaxReads+8), "t"), nil, true},
		{"w, not in its queue", []string{"t", "w"}, []string{"default"}, true},
		{"the unhandled type too", []string{"t", "unhandled"}, []string{"default"}, false},
		{"w in every queue", []string{"t", "w"}, nil, false},
		{"w in its queues", []string{"t", "w"}, []string{"default", "elsewhere"}, false},
		{"types unknown", nil, []string{"default"}, false},
		{"many types, the unhandled type too", append(manyTypes(store.MaxReads+8), "t", "unhandled"), nil, false},
	} {
		if got := offered(c.types, c.queues); got != c.leased {
			t.Errorf("%s (types %q, queues %q): leased %v, want %v", c.name, c.types, c.queues, got, c.leased)
		}
	}
	var name string
	if err := s.pool.QueryRow(ctx, `SELECT name FROM pg_prepared_statements WHERE statement = $1`, offeredInsertSQL).Scan(&name); err != nil {
		t.Fatalf("the offered insert's prepared statement: %v", err)
	}
	// The kept plan, whatever the arguments: empty arrays of the parameters' types.
	args := []any{pgx.QueryExecModeSimpleProtocol, []int64{}, []string{}, []string{}, [][]byte{}, []int32{}, []int16{},
		[]int32{}, []int64{}, []int64{}, []int64{}, []string{}, []bool{}, []int64{}, []string{}, []string{}, []byte{},
		[]string{}, []int64{}, []string{}, []string{}}
	plan := explain(t, s.pool, `EXPLAIN EXECUTE `+name+`(`+placeholders(len(args)-1)+`)`, args...)
	// The job's checks run once for it, not once for each column the insert takes from them.
	if n := len(workerReads.FindAllString(plan, -1)); n != 1 {
		t.Errorf("the kept plan reads the workers' reads %d times, want once:\n%s", n, plan)
	}
	// Each read of a ready index is by its first column: none reads an index whole.
	reads := readyIndexRead.FindAllStringSubmatch(plan, -1)
	used := map[string]bool{}
	for _, r := range reads {
		used[r[1]] = true
		// jobs_ready is read from its first entry, in order, down to the job's priority; the
		// others by their key.
		if first := map[string]string{"jobs_ready": "priority", "jobs_ready_type": "type",
			"jobs_ready_queue_type": "queue"}[r[1]]; r[2] != first {
			t.Errorf("the kept plan reads %s by %q, not as %q:\n%s", r[1], r[2], first, plan)
		}
	}
	for _, index := range []string{"jobs_ready_queue_type", "jobs_ready_type", "jobs_ready"} {
		if !used[index] {
			t.Errorf("the kept plan does not read %s:\n%s", index, plan)
		}
	}
}

// workerReads matches a plan's scan of the offers' reads (offerScope).
var workerReads = regexp.MustCompile(`Function Scan on s(_\d+)? `)

// readyIndexRead matches a plan's scan of a ready index (its name) and the first column of its
// index condition (none: a read in order from the start).
var readyIndexRead = regexp.MustCompile(`Scan using (jobs_ready\w*) on jobs \w+[^\n]*\n(?:\s*Index Cond: \(\(?(\w+))?`)
