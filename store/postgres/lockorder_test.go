package postgres

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/store"
)

// manyWrite is a write of many leases at once, by one broker, of the leases of jobs, listed in
// the order given.
type manyWrite struct {
	name  string
	write func(tx store.Tx, jobs []*job.Job, now time.Time) error
}

// manyWrites are the store's writes of many leases at once, each given its jobs in descending id
// order: each must lock them in ascending order all the same (the lock order, tx.go).
var manyWrites = []manyWrite{
	{"JobSucceedMany", func(tx store.Tx, jobs []*job.Job, now time.Time) error {
		return succeedAll(tx, jobs, now)
	}},
	{"JobLockRowsThenJobSucceedMany", func(tx store.Tx, jobs []*job.Job, now time.Time) error {
		// A writer's batch locks its jobs first (JobLockRows), and its write of many then locks
		// none.
		if err := tx.JobLockRows(ids(jobs)); err != nil {
			return err
		}
		return succeedAll(tx, jobs, now)
	}},
	{"JobSucceedManyAtCommit", func(tx store.Tx, jobs []*job.Job, now time.Time) error {
		return tx.JobSucceedManyAtCommit(successes(jobs, now), func([]bool, error) {})
	}},
	{"JobStartMany", func(tx store.Tx, jobs []*job.Job, now time.Time) error {
		ps := make([]*store.JobStartParams, len(jobs))
		for i, j := range jobs {
			ps[i] = &store.JobStartParams{Ref: ref(j), Attempt: 1, Now: now, LeaseUntil: now.Add(time.Hour),
				AttemptDeadline: now.Add(time.Hour)}
		}
		_, err := tx.JobStartMany(ps)
		return err
	}},
	{"JobReleaseMany", func(tx store.Tx, jobs []*job.Job, _ time.Time) error {
		_, err := tx.JobReleaseMany(refs(jobs))
		return err
	}},
	{"JobExtendLeases", func(tx store.Tx, jobs []*job.Job, now time.Time) error {
		_, err := tx.JobExtendLeases(refs(jobs), now, now.Add(2*time.Hour))
		return err
	}},
}

// succeedAll stores the successes of jobs with one JobSucceedMany. The successes, stored the
// same way while its locks waited, are applied: the write reads the jobs after its locks.
func succeedAll(tx store.Tx, jobs []*job.Job, now time.Time) error {
	applied, err := tx.JobSucceedMany(successes(jobs, now))
	if err == nil && !slices.Equal(applied, []bool{true, true}) {
		err = fmt.Errorf("successes stored already reported applied %v, want both", applied)
	}
	return err
}

func ref(j *job.Job) job.LeaseRef { return job.LeaseRef{JobID: j.ID, Token: j.LeaseToken} }

// refs are the leases of jobs, in the order of jobs.
func refs(jobs []*job.Job) []job.LeaseRef {
	out := make([]job.LeaseRef, len(jobs))
	for i, j := range jobs {
		out[i] = ref(j)
	}
	return out
}

// successes are the successes of jobs' first attempts, in the order of jobs.
func successes(jobs []*job.Job, now time.Time) []*store.JobFinishParams {
	ps := make([]*store.JobFinishParams, len(jobs))
	for i, j := range jobs {
		ps[i] = succeeded(j, now)
	}
	return ps
}

// succeeded is the success of j's first attempt.
func succeeded(j *job.Job, now time.Time) *store.JobFinishParams {
	return &store.JobFinishParams{Ref: ref(j), Queue: j.Queue, Type: j.Type, State: job.StateSucceeded,
		Attempt: job.Attempt{Number: 1, WorkerID: "w", StartedAt: now, FinishedAt: now, Outcome: job.OutcomeSucceeded},
		Now:     now}
}

// A broker that finishes two leased jobs one by one, in ascending id order (as the sweep of
// expired leases does, and as a batch of results may), and another broker that writes the
// same two leases with one statement of many, given them in the other order (a worker's
// result replayed at a second broker, a sweep racing a result), never wait for each other in a
// cycle: the write of many locks its jobs in ascending id order too, whatever the order of its
// leases. Before, its UPDATE locked them in the order of its array, and the two deadlocked.
func TestManyWritesLockJobsInIDOrder(t *testing.T) {
	t.Parallel()
	for _, w := range manyWrites {
		t.Run(w.name, func(t *testing.T) {
			t.Parallel()
			d := newDeadlockDB(t)
			brokers := []*Store{openBroker(t, d.url, nil), openBroker(t, d.url, nil)}
			now := time.Unix(1_700_000_000, 0)
			jobs := deadlockJobs(t, brokers[0], now, "q", "q")
			if jobs[0].ID > jobs[1].ID {
				jobs[0], jobs[1] = jobs[1], jobs[0]
			}
			finished, goOn := make(chan struct{}), make(chan struct{})
			errs := make([]error, 2)
			var wg sync.WaitGroup
			// Broker 0 finishes the first job, then, once broker 1 waits for a lock, the second.
			wg.Go(func() {
				first := true
				errs[0] = brokers[0].Write(context.Background(), "finish", func(tx store.Tx) error {
					if _, err := tx.JobFinish(succeeded(jobs[0], now)); err != nil {
						return err
					}
					if first {
						first = false
						close(finished)
						<-goOn
					}
					_, err := tx.JobFinish(succeeded(jobs[1], now))
					return err
				})
			})
			// Broker 1 writes both leases with one statement, the second job's listed first.
			wg.Go(func() {
				<-finished
				errs[1] = brokers[1].Write(context.Background(), w.name, func(tx store.Tx) error {
					return w.write(tx, []*job.Job{jobs[1], jobs[0]}, now)
				})
			})
			waitFor(t, "broker 1 to wait for a lock", func() bool { return d.waiting() > 0 })
			close(goOn)
			wg.Wait()
			for i, err := range errs {
				if err != nil {
					t.Fatalf("broker %d: %v", i, err)
				}
			}
			noStoreDeadlocks(t, brokers...)
			if n := d.deadlocks(brokers...); n != 0 {
				t.Errorf("the server broke %d deadlocks between a finish of one job at a time and %s, want none", n, w.name)
			}
		})
	}
}

// A requeue of dead jobs and a retention delete of the same jobs never wait for each other in
// a cycle: both lock the jobs in id order. Before, each locked them in the order of its plan's
// scan: the requeue, on a small table, in the table's order (the row written last, here the
// one with the smaller id, last), the delete in its own. A third transaction holds the job of
// the greater id, so that the requeue waits for it first, then the delete comes.
func TestRetentionAndRequeueLockJobsInIDOrder(t *testing.T) {
	t.Parallel()
	d := newDeadlockDB(t)
	brokers := []*Store{openBroker(t, d.url, nil), openBroker(t, d.url, nil)}
	now := time.Unix(1_700_000_000, 0)
	jobs := deadlockJobs(t, brokers[0], now, "q", "q")
	if jobs[0].ID > jobs[1].ID {
		jobs[0], jobs[1] = jobs[1], jobs[0]
	}
	// The job of the greater id is the older dead one, written first: its row's last version
	// comes first in the table.
	err := brokers[0].Write(context.Background(), "fail", func(tx store.Tx) error {
		return cmp.Or(failJob(tx, jobs[1], now.Add(-time.Second)), failJob(tx, jobs[0], now))
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	holder, err := pgx.Connect(ctx, d.url)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close(ctx)
	hold, err := holder.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := hold.Exec(ctx, `SELECT FROM jobs WHERE id = $1 FOR UPDATE`, jobs[1].ID); err != nil {
		t.Fatal(err)
	}
	errs := make([]error, 2)
	var wg sync.WaitGroup
	wg.Go(func() {
		errs[0] = brokers[0].Write(ctx, "requeue", func(tx store.Tx) error {
			_, err := tx.JobRequeue(&store.JobRequeueParams{IDs: []int64{jobs[0].ID, jobs[1].ID}, RunAt: now, Now: now})
			return err
		})
	})
	waitFor(t, "the requeue to wait for a lock", func() bool { return d.waiting() == 1 })
	wg.Go(func() {
		errs[1] = brokers[1].Write(ctx, "retention", func(tx store.Tx) error {
			_, err := tx.JobDeleteFinished(&store.JobDeleteFinishedParams{States: []job.State{job.StateDead},
				FinishedBefore: now.Add(time.Second), Limit: 10})
			return err
		})
	})
	waitFor(t, "the delete to wait for a lock", func() bool { return d.waiting() == 2 })
	if err := hold.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	_ = holder.Close(ctx) // its session too must end before the server's count is read
	for i, err := range errs {
		if err != nil {
			t.Fatalf("broker %d: %v", i, err)
		}
	}
	noStoreDeadlocks(t, brokers...)
	if n := d.deadlocks(brokers...); n != 0 {
		t.Errorf("the server broke %d deadlocks between a retention delete and a requeue, want none", n)
	}
}

// The promotion of due jobs locks them in id order too, whatever order its plan reads them in.
// The job of the greater id is here the first due and the first in the table, and another
// transaction holds it: the promotion, waiting for it, holds the job of the smaller id already.
func TestPromotionLocksJobsInIDOrder(t *testing.T) {
	t.Parallel()
	d := newDeadlockDB(t)
	s := openBroker(t, d.url, nil)
	ctx := context.Background()
	now := time.Unix(1_700_000_000, 0)
	scheduled := func(runAt time.Time) *store.JobInsertParams {
		return &store.JobInsertParams{Type: "t", Queue: "q", Payload: []byte(`{}`), MaxAttempts: 1,
			RunAt: runAt, Now: now.Add(-time.Hour), AttemptTimeout: time.Minute}
	}
	var rs []store.JobInsertResult
	err := s.Write(ctx, "insert", func(tx store.Tx) error {
		var err error
		rs, err = tx.JobInsertMany([]*store.JobInsertParams{scheduled(now.Add(-time.Second)), scheduled(now.Add(-2 * time.Second))})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	small, great := min(rs[0].ID, rs[1].ID), max(rs[0].ID, rs[1].ID)
	if rs[0].State != job.StateScheduled || rs[1].State != job.StateScheduled || rs[1].ID != great {
		t.Fatalf("inserted %+v, want two SCHEDULED jobs, the second of the greater id", rs)
	}
	// The job of the smaller id is rewritten, so that its row's last version comes last in the
	// table, after the other's.
	holder, err := pgx.Connect(ctx, d.url)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close(ctx)
	if _, err := holder.Exec(ctx, `UPDATE jobs SET priority = priority WHERE id = $1`, small); err != nil {
		t.Fatal(err)
	}
	hold, err := holder.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := hold.Exec(ctx, `SELECT FROM jobs WHERE id = $1 FOR UPDATE`, great); err != nil {
		t.Fatal(err)
	}
	var promoted int
	var promoteErr error
	var wg sync.WaitGroup
	wg.Go(func() {
		promoteErr = s.Write(ctx, "promote", func(tx store.Tx) error {
			var err error
			promoted, err = tx.JobPromoteScheduled(now)
			return err
		})
	})
	waitFor(t, "the promotion to wait for a lock", func() bool { return d.waiting() == 1 })
	probe, err := pgx.Connect(ctx, d.url)
	if err != nil {
		t.Fatal(err)
	}
	defer probe.Close(ctx)
	_, lockErr := probe.Exec(ctx, `SELECT FROM jobs WHERE id = $1 FOR UPDATE NOWAIT`, small)
	if err := hold.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if promoteErr != nil || promoted != 2 {
		t.Fatalf("promoted %d jobs, %v; want 2", promoted, promoteErr)
	}
	if lockErr == nil {
		t.Fatal("while the promotion waited for the job of the greater id, the one of the smaller id was free: it locks in its plan's order, not by id")
	}
}
