package commit

import (
	"context"
	"errors"
	"log/slog"
	neturl "net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/store"
	"github.com/jobwire/jobwire/store/postgres"
	"github.com/jobwire/jobwire/store/postgres/pgtest"
)

// Two brokers' writers on one PostgreSQL database, each given a batch that fails one job alone
// and stores the other's success with the batch's successes, the two jobs in opposite roles,
// never wait for each other in a cycle. Applied in arrival order, broker 0 would lock the job
// it fails (b), broker 1 the job it fails (a), and then each the job of its success, held by the
// other: a deadlock. Each writer locks both jobs first, in id order, so broker 1 waits for
// broker 0 at its first statement.
func TestWritersLockJobsFirstInIDOrder(t *testing.T) {
	t.Parallel()
	url := withAppName(t, pgtest.URL(t), "jobwire_lock_first")
	var deadlocks atomic.Int64
	brokers := []*postgres.Store{openBroker(t, url, &deadlocks), openBroker(t, url, &deadlocks)}
	refs := leaseJobs(t, brokers[0], 2)
	a, b := refs[0], refs[1]
	if a.JobID > b.JobID {
		a, b = b, a
	}

	holds := make(chan struct{}) // broker 0 has applied its failure (of b)
	var applied1 atomic.Bool     // broker 1 has applied its failure (of a)
	var once0, once1 sync.Once
	// Broker 0 fails b, then waits for broker 1 to fail a or to wait for a lock.
	fail0 := newFailure(b, func() {
		once0.Do(func() {
			close(holds)
			waitFor(t, "broker 1 to fail its job or wait for a lock", func() bool {
				return applied1.Load() || lockWaits(t, url, "jobwire_lock_first") > 0
			})
		})
	})
	// Broker 1 fails a once broker 0 holds b.
	fail1 := newFailure(a, nil)
	fail1.before = func() { <-holds }
	fail1.after = func() { once1.Do(func() { applied1.Store(true) }) }

	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, batch := range [][]Op{{fail0, newSuccess(a)}, {fail1, newSuccess(b)}} {
		wg.Go(func() { errs[i] = commitOnce(t, brokers[i], batch) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("broker %d: %v", i, err)
		}
	}
	if n := deadlocks.Load(); n != 0 {
		t.Errorf("the server broke %d deadlocks between the two writers' batches, want none", n)
	}
}

// failure is a result that ends its lease as DEAD, written alone (a Finisher and no
// Succeeder); before and after, when set, run around its write.
type failure struct {
	p             *store.JobFinishParams
	before, after func()
}

func newFailure(ref job.LeaseRef, after func()) *failure {
	return &failure{after: after, p: &store.JobFinishParams{Ref: ref, Queue: "default", Type: "t",
		State: job.StateDead, DeadReason: job.DeadFatal, Now: testNow,
		Attempt: job.Attempt{Number: 1, WorkerID: "w", StartedAt: testNow, FinishedAt: testNow,
			Outcome: job.OutcomeFailed, Message: "no"}}}
}

func (o *failure) Name() string           { return "result" }
func (o *failure) Done(error)             {}
func (o *failure) Finishes() job.LeaseRef { return o.p.Ref }
func (o *failure) Apply(tx store.Tx) error {
	if o.before != nil {
		o.before()
	}
	if _, err := tx.JobFinish(o.p); err != nil {
		return err
	}
	if o.after != nil {
		o.after()
	}
	return nil
}

// commitOnce writes ops in one batch of a group-commit writer on s and returns its outcome.
func commitOnce(t *testing.T, s store.Store, ops []Op) error {
	t.Helper()
	stop := make(chan struct{})
	w := NewGrouped(Config{Store: s, Ctx: context.Background(), MaxBatch: 16, Owner: nobody{}, Stop: stop, LockJobs: true,
		Stopped: errors.New("stopped")})
	var tickets []*Ticket
	for _, o := range ops {
		tickets = append(tickets, w.Enter(o, time.Time{})) // queued before Run: one batch
	}
	done := make(chan struct{})
	go func() { w.Run(); close(done) }()
	var err error
	for _, tk := range tickets {
		err = errors.Join(err, <-tk.Answer())
	}
	close(stop)
	<-done
	return err
}

// openBroker opens a broker's store on url whose storage retries count the deadlocks the
// server broke (40P01) in deadlocks, and run each write again until it ends otherwise.
func openBroker(t *testing.T, url string, deadlocks *atomic.Int64) *postgres.Store {
	t.Helper()
	s, err := postgres.Open(context.Background(), url, postgres.Options{Logger: slog.New(slog.DiscardHandler),
		Retry: deadlockCounter{deadlocks}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// deadlockCounter is a storage retry policy for deadlocks only: it counts them and runs the
// write again.
type deadlockCounter struct{ n *atomic.Int64 }

func (d deadlockCounter) Do(ctx context.Context, _ string, fn func(context.Context) error) error {
	for {
		err := fn(ctx)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "40P01" {
			return err
		}
		d.n.Add(1)
	}
}

// withAppName is url with application_name app, by which lockWaits tells the sessions of the
// test's stores from those of other tests on the server.
func withAppName(t *testing.T, raw, app string) string {
	t.Helper()
	u, err := neturl.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("application_name", app)
	u.RawQuery = q.Encode()
	return u.String()
}

// lockWaits is the number of sessions named app waiting for a lock.
func lockWaits(t *testing.T, url, app string) int64 {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Error(err)
		return 0
	}
	defer conn.Close(ctx)
	var n int64
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'`,
		app).Scan(&n); err != nil {
		t.Error(err)
	}
	return n
}

// waitFor polls cond until it holds, failing t after a minute.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Errorf("timed out waiting for %s", what)
			return
		}
	}
}
