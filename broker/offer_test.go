package broker

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jobwire/jobwire/internal/clock"
	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/store"
	"github.com/jobwire/jobwire/store/postgres"
	"github.com/jobwire/jobwire/store/postgres/pgtest"
	"github.com/jobwire/jobwire/store/sqlite"
	"github.com/jobwire/jobwire/store/sqlite/sqlitetest"
)

// leaseCalls is a store that lists the calls its writes make that lease jobs or make them
// known as ready: "lease" for JobLease and JobLeaseAtCommit, "offered insert" for
// JobInsertOfferedAtCommit, "ready" for publishing that jobs are ready.
type leaseCalls struct {
	store.Store
	mu    sync.Mutex
	calls []string
}

func (w *leaseCalls) Write(ctx context.Context, op string, fn func(store.Tx) error) error {
	return w.Store.Write(ctx, op, func(tx store.Tx) error { return fn(recordingTx{Tx: tx, w: w}) })
}

func (w *leaseCalls) note(call string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.calls = append(w.calls, call)
}

// since returns the calls after the first n.
func (w *leaseCalls) since(n int) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.calls[n:])
}

func (w *leaseCalls) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.calls)
}

// recordingTx notes its leasing calls in w.
type recordingTx struct {
	store.Tx
	w *leaseCalls
}

func (t recordingTx) JobLease(p *store.JobLeaseParams) ([]*job.Job, error) {
	t.w.note("lease")
	return t.Tx.JobLease(p)
}

func (t recordingTx) JobLeaseAtCommit(ps []*store.JobLeaseParams, got func([][]*job.Job, error)) error {
	t.w.note("lease")
	return t.Tx.JobLeaseAtCommit(ps, got)
}

func (t recordingTx) Publish(e store.Event) {
	if e.Kind == store.EventReady {
		t.w.note("ready")
	}
	t.Tx.Publish(e)
}

func (t recordingTx) JobInsertOfferedAtCommit(ps []*store.JobInsertParams, offers []*store.JobOffer,
	got func([]*job.Job, error)) ([]store.JobInsertResult, error) {
	t.w.note("offered insert")
	return t.Tx.JobInsertOfferedAtCommit(ps, offers, got)
}

// offerBroker starts a broker, its leasing calls listed: alone on a fresh SQLite file, or, in
// a cluster, one broker on a fresh PostgreSQL schema.
func offerBroker(t *testing.T, clustered bool) (*Broker, *leaseCalls) {
	t.Helper()
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	// The tests count the writes that lease: a cluster's poll, whose dispatch round leases
	// too, is kept beyond any time they move the clock (sweepUntil: 50 sweeps). At its default
	// of a second each sweep's move fires one, on a goroutine of its own, whose round could
	// land among the writes counted.
	opts := Options{Commit: testCommit, Config: DefaultConfig(), Logger: log, ClusterPoll: time.Hour,
		Clock: clock.NewFake(time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC))}
	var st store.Store
	if clustered {
		pg, err := postgres.Open(ctx, pgtest.URL(t), postgres.Options{Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		st, opts.Cluster = pg, pg
	} else {
		lite, err := sqlite.Open(ctx, sqlitetest.Path(t), sqlite.Options{})
		if err != nil {
			t.Fatal(err)
		}
		st = lite
	}
	w := &leaseCalls{Store: st}
	opts.Store = w
	b, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	startForTest(t, b, st.Close)
	return b, w
}

// bothWays runs test for a broker alone and for one of a cluster (offerBroker).
func bothWays(t *testing.T, test func(t *testing.T, clustered bool)) {
	for _, clustered := range []bool{false, true} {
		name := "alone"
		if clustered {
			name = "cluster"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			test(t, clustered)
		})
	}
}

// openPay opens a worker stream for payType with capacity slots.
func openPay(t *testing.T, b *Broker, capacity int) *Session {
	t.Helper()
	s, _, err := b.Open(context.Background(), Hello{WorkerID: "w", Types: []string{payType}, Capacity: capacity})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// settle waits until b has committed everything asked of it so far, hand-outs included.
func settle(t *testing.T, b *Broker) {
	t.Helper()
	for range 2 {
		if err := b.do(context.Background(), "barrier", func(store.Tx) error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
}

// A job enqueued while a worker has room is leased by the insert that stores it and handed
// out: no dispatch round leases it, and in a cluster the other brokers are not told it is ready.
func TestOfferedJobLeasedByItsInsert(t *testing.T) {
	t.Parallel()
	onlyGroupCommit(t) // the reference writer inserts alone and leases in a round
	bothWays(t, testOfferedJobLeasedByItsInsert)
}

func testOfferedJobLeasedByItsInsert(t *testing.T, clustered bool) {
	b, w := offerBroker(t, clustered)
	s := openPay(t, b, 4)
	settle(t, b)
	before := w.count()
	ids, err := b.Enqueue(context.Background(), []JobSpec{{Type: payType}})
	if err != nil {
		t.Fatal(err)
	}
	a := assignments(t, s, 1)[0]
	if a.Job.ID != ids[0].ID || a.Attempt != 1 || a.Token.Seq != 1 {
		t.Fatalf("assignment %+v (token %v), want job %d, attempt 1, first lease", a.Job, a.Token, ids[0].ID)
	}
	if calls := w.since(before); !slices.Equal(calls, []string{"offered insert"}) {
		t.Fatalf("calls after the enqueue: %q, want one offered insert, no lease and no word to other brokers", calls)
	}
	b.mu.Lock()
	offered := s.offered
	b.mu.Unlock()
	if offered != 0 {
		t.Fatalf("%d slots still promised after the offer was settled", offered)
	}
}

// Offers count against a worker's capacity until they are settled: enqueues at once of more
// jobs than it has slots never give it more jobs than its capacity.
func TestOffersKeepToCapacity(t *testing.T) {
	t.Parallel()
	bothWays(t, testOffersKeepToCapacity)
}

func testOffersKeepToCapacity(t *testing.T, clustered bool) {
	b, _ := offerBroker(t, clustered)
	s := openPay(t, b, 1)
	settle(t, b)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			if _, err := b.Enqueue(context.Background(), []JobSpec{{Type: payType}}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	settle(t, b)
	if n := assigned(s); n != 1 {
		t.Fatalf("a worker of one slot was handed %d jobs", n)
	}
}

// A job offered but left PENDING by the store (a job of its priority was waiting) is leased
// by the round its write then asks for, without anything else happening.
func TestOfferLeftPendingGetsARound(t *testing.T) {
	t.Parallel()
	bothWays(t, testOfferLeftPendingGetsARound)
}

func testOfferLeftPendingGetsARound(t *testing.T, clustered bool) {
	b, _ := offerBroker(t, clustered)
	if _, err := b.Enqueue(context.Background(), []JobSpec{{Type: "nobody"}}); err != nil {
		t.Fatal(err)
	}
	s := openPay(t, b, 4)
	settle(t, b)
	ids, err := b.Enqueue(context.Background(), []JobSpec{{Type: payType}})
	if err != nil {
		t.Fatal(err)
	}
	if a := assignments(t, s, 1)[0]; a.Job.ID != ids[0].ID {
		t.Fatalf("assigned job %d, want %d", a.Job.ID, ids[0].ID)
	}
}

// An enqueue of more jobs than the workers have room for offers what fits and leaves the rest
// ready: each slot its results free takes the next of them, though the round that the enqueue's
// commit carried found no room (the offers had taken it).
func TestOffersLeaveTheRestForFreedSlots(t *testing.T) {
	t.Parallel()
	bothWays(t, testOffersLeaveTheRestForFreedSlots)
}

func testOffersLeaveTheRestForFreedSlots(t *testing.T, clustered bool) {
	b, _ := offerBroker(t, clustered)
	s := openPay(t, b, 2)
	settle(t, b)
	specs := make([]JobSpec, 5) // under SeparateEnqueueJobs: the writer offers them
	for i := range specs {
		specs[i].Type = payType
	}
	ids, err := b.Enqueue(context.Background(), specs)
	if err != nil {
		t.Fatal(err)
	}
	var got []int64
	for len(got) < len(ids) {
		for _, a := range assignments(t, s, 1) {
			got = append(got, a.Job.ID)
			s.Result(job.LeaseRef{JobID: a.Job.ID, Token: a.Token}, nil)
		}
	}
	want := make([]int64, len(ids))
	for i, e := range ids {
		want[i] = e.ID
	}
	if !slices.Equal(got, want) {
		t.Fatalf("handed out %v, want every job in order %v", got, want)
	}
}

// Jobs waiting of a type no worker handles keep no offer back (alone, on SQLite, which counts
// only the jobs of the worker's types): a job enqueued beside them for a worker with room is
// still leased by its insert, with no round, which would lease it past them.
func TestOfferPassesABacklogOfAnotherType(t *testing.T) {
	t.Parallel()
	onlyGroupCommit(t)
	b, w := offerBroker(t, false)
	ctx := context.Background()
	if _, err := b.Enqueue(ctx, []JobSpec{{Type: "unserved", Priority: 5}, {Type: "unserved", Priority: 5}}); err != nil {
		t.Fatal(err)
	}
	s := openPay(t, b, 4)
	if calls := enqueueCalls(t, b, w, s); !slices.Equal(calls, []string{"offered insert"}) {
		t.Fatalf("calls after the enqueue beside the backlog: %q, want one offered insert and no lease", calls)
	}
}

// enqueueCalls enqueues a job of s's type once b has settled, and returns the calls its write
// and the rounds after it made, once s has it.
func enqueueCalls(t *testing.T, b *Broker, w *leaseCalls, s *Session) []string {
	t.Helper()
	settle(t, b)
	before := w.count()
	ids, err := b.Enqueue(context.Background(), []JobSpec{{Type: payType}})
	if err != nil {
		t.Fatal(err)
	}
	if a := assignments(t, s, 1)[0]; a.Job.ID != ids[0].ID {
		t.Fatalf("assigned job %d, want %d", a.Job.ID, ids[0].ID)
	}
	return w.since(before)
}
