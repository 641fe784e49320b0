package commit

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/store"
	"github.com/jobwire/jobwire/store/sqlite"
	"github.com/jobwire/jobwire/store/storeretry"
	sqlite3 "modernc.org/sqlite/lib"
)

// manyCounter is a transaction that counts its calls of the writes of many.
type manyCounter struct {
	store.Tx
	calls map[string][]int // method: the length of each call
}

func (c *manyCounter) JobStartMany(ps []*store.JobStartParams) ([]bool, error) {
	c.calls["JobStartMany"] = append(c.calls["JobStartMany"], len(ps))
	return c.Tx.JobStartMany(ps)
}

func (c *manyCounter) JobSucceedMany(ps []*store.JobFinishParams) ([]bool, error) {
	c.calls["JobSucceedMany"] = append(c.calls["JobSucceedMany"], len(ps))
	return c.Tx.JobSucceedMany(ps)
}

func (c *manyCounter) JobSucceedManyAtCommit(ps []*store.JobFinishParams, got func([]bool, error)) error {
	c.calls["JobSucceedMany"] = append(c.calls["JobSucceedMany"], len(ps))
	return c.Tx.JobSucceedManyAtCommit(ps, got)
}

func (c *manyCounter) JobStart(p *store.JobStartParams) (bool, error) {
	c.calls["JobStart"] = append(c.calls["JobStart"], 1)
	return c.Tx.JobStart(p)
}

func (c *manyCounter) JobInsertMany(ps []*store.JobInsertParams) ([]store.JobInsertResult, error) {
	c.calls["JobInsertMany"] = append(c.calls["JobInsertMany"], len(ps))
	return c.Tx.JobInsertMany(ps)
}

func (c *manyCounter) JobInsertOfferedAtCommit(ps []*store.JobInsertParams, offers []*store.JobOffer,
	got func([]*job.Job, error)) ([]store.JobInsertResult, error) {
	c.calls["JobInsertOfferedAtCommit"] = append(c.calls["JobInsertOfferedAtCommit"], len(ps))
	return c.Tx.JobInsertOfferedAtCommit(ps, offers, got)
}

// countingStore hands its writes a manyCounter.
type countingStore struct {
	store.Store
	counter *manyCounter
}

func (s countingStore) Write(ctx context.Context, op string, fn func(store.Tx) error) error {
	return s.Store.Write(ctx, op, func(tx store.Tx) error {
		s.counter.Tx = tx
		return fn(s.counter)
	})
}

// writeBatch writes ops as one batch of a grouped writer over st, as its loop does after
// holding starts back, and returns the calls of many its transaction made.
func writeBatch(t *testing.T, st store.Store, ops ...Op) map[string][]int {
	t.Helper()
	counter := &manyCounter{calls: map[string][]int{}}
	w := NewGrouped(Config{Store: countingStore{st, counter}, Ctx: context.Background(), MaxBatch: 16, Owner: nobody{}})
	batch := make([]*Ticket, len(ops))
	for i, o := range ops {
		batch[i] = &Ticket{op: o, waited: true}
	}
	markSuperseded(batch)
	w.commit(batch, w.opsOf(batch))
	return counter.calls
}

// A batch's starts and successes are written one call per kind, each op gets its own outcome
// (a stale lease is refused alone), and a superseded start writes nothing.
func TestGroupedWritesOneCallPerKind(t *testing.T) {
	t.Parallel()
	st := openStore(t, sqlite.Options{})
	ref := leaseJobs(t, st, 7)
	stale := ref[0]
	stale.Token.Seq += 5
	superseded := newStart(ref[6])
	// Each op can also write alone, so that one left out of its group shows in the counts.
	batch := []Op{newStart(ref[0]), newStart(ref[1]), newStart(ref[2]), newSuccess(ref[3]), newStart(ref[4]),
		newStart(stale), newSuccess(ref[5]), superseded, newSuccess(ref[6])}
	calls := writeBatch(t, st, batch...)
	want := map[string][]int{"JobStartMany": {5}, "JobSucceedMany": {3}}
	for m, n := range want {
		if !slices.Equal(calls[m], n) {
			t.Errorf("%s calls %v, want %v", m, calls[m], n)
		}
	}
	if len(calls) != len(want) {
		t.Errorf("calls %v, want only %v", calls, want)
	}
	var outcomes []bool
	for _, o := range batch {
		switch o := o.(type) {
		case *startOp:
			outcomes = append(outcomes, o.applied)
		case *successOp:
			outcomes = append(outcomes, o.succeeded && o.unread == nil)
		}
	}
	if wantOut := []bool{true, true, true, true, true, false, true, true, true}; !slices.Equal(outcomes, wantOut) {
		t.Fatalf("outcomes %v, want %v (only the stale start refused)", outcomes, wantOut)
	}
}

// The jobs of a batch's enqueues are inserted with one call, and each enqueue gets the results
// of its own jobs, in its order.
func TestGroupedEnqueuesInsertWithOneCall(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := openStore(t, sqlite.Options{})
	a, b := newInsert("a1", "a2"), newInsert("b1", "b2", "b3")
	calls := writeBatch(t, st, a, b)
	if want := map[string][]int{"JobInsertMany": {5}}; !slices.Equal(calls["JobInsertMany"], want["JobInsertMany"]) || len(calls) != 1 {
		t.Fatalf("calls %v, want %v", calls, want)
	}
	for _, c := range []struct {
		o     *insertOp
		types []string
	}{{a, []string{"a1", "a2"}}, {b, []string{"b1", "b2", "b3"}}} {
		if len(c.o.results) != len(c.types) {
			t.Fatalf("results %v for jobs %v", c.o.results, c.types)
		}
		for i, r := range c.o.results {
			j, err := st.JobGet(ctx, r.ID)
			if err != nil || j.Type != c.types[i] {
				t.Fatalf("result %d of %v is job %d (%v, %v)", i, c.types, r.ID, j, err)
			}
		}
	}
}

// In a batch whose enqueues offer some of their jobs, each offer goes with its own job: one
// insert leases the offered jobs, and each enqueue is told of its own leased jobs only.
func TestGroupedOffersGoWithTheirJobs(t *testing.T) {
	t.Parallel()
	st := openStore(t, sqlite.Options{})
	plain, offering := newInsert("p1", "p2"), newOffer("o1")
	calls := writeBatch(t, st, plain, offering)
	if want := []int{3}; !slices.Equal(calls["JobInsertOfferedAtCommit"], want) || len(calls) != 1 {
		t.Fatalf("calls %v, want JobInsertOfferedAtCommit of 3 jobs alone", calls)
	}
	ctx := context.Background()
	states := map[string]job.State{}
	for _, r := range append(plain.results, offering.results...) {
		j, err := st.JobGet(ctx, r.ID)
		if err != nil {
			t.Fatal(err)
		}
		states[j.Type] = j.State
	}
	want := map[string]job.State{"p1": job.StatePending, "p2": job.StatePending, "o1": job.StateLeased}
	if !maps.Equal(states, want) {
		t.Errorf("states %v, want %v", states, want)
	}
	if len(offering.leased) != 1 || offering.leased[0] == nil || offering.leased[0].Type != "o1" {
		t.Errorf("the offering enqueue was told it leased %v, want its job o1", offering.leased)
	}
}

// busyBatches is a Retrier whose writes of several ops together ("batch") fail with
// SQLITE_BUSY, through the real retry policy (whose waits are an hour).
type busyBatches struct{ p *storeretry.Policy }

type busyCode struct{}

func (busyCode) Error() string { return "injected: database is locked" }
func (busyCode) Code() int     { return sqlite3.SQLITE_BUSY }

func (r busyBatches) Do(ctx context.Context, op string, fn func(context.Context) error) error {
	return r.p.Do(ctx, op, func(ctx context.Context) error {
		if op == "batch" {
			return busyCode{}
		}
		return fn(ctx)
	})
}

// When busy storage stops a batch's retries at the deadline of one caller, that caller is told,
// and the ops without a deadline in the same batch are committed again with the whole budget.
func TestDeadlineStopFailsOnlyTheOpsWithADeadline(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p, err := storeretry.New(storeretry.Config{Classify: sqlite.Classify, Logger: slog.New(slog.DiscardHandler),
		Options: storeretry.Options{MaxTransientRetries: 3, TransientRetryBaseDelay: time.Hour, CommandTimeout: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	st := openStore(t, sqlite.Options{Retry: busyBatches{p}})
	errs := make([]error, 2)
	insert := func(typ string, i int) Op {
		return &funcOp{name: "enqueue", done: func(err error) { errs[i] = err }, apply: func(tx store.Tx) error {
			_, err := tx.JobInsertMany([]*store.JobInsertParams{jobParams(typ)})
			return err
		}}
	}
	w := NewGrouped(Config{Store: st, Ctx: ctx, MaxBatch: 16, Owner: nobody{}})
	batch := []*Ticket{{op: insert("caller", 0), deadline: time.Now().Add(10 * time.Second)}, {op: insert("worker", 1)}}
	w.commit(batch, w.opsOf(batch))

	var busy *storeretry.BusyError
	if !errors.As(errs[0], &busy) || !busy.StoppedForDeadline() {
		t.Errorf("op with a deadline: %v; want retries stopped for the deadline", errs[0])
	}
	if errs[1] != nil {
		t.Errorf("op without a deadline: %v; want it committed", errs[1])
	}
	jobs, err := st.JobList(ctx, &store.JobListParams{Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 1 || jobs[0].Type != "worker" {
		t.Fatalf("stored %v, want only the op without a deadline's job", jobs)
	}
}

// boundOp is an op that stands or falls with its batch.
type boundOp struct {
	funcOp
}

func (boundOp) BoundToBatch() bool { return true }

// A batch that fails for one op's sake is written again op by op, so that only that op fails,
// except an op bound to its batch (a lease that counted the slots the batch's results free): it
// fails with the batch and is never written alone.
func TestGroupedBatchBoundOpFallsWithItsBatch(t *testing.T) {
	t.Parallel()
	st := openStore(t, sqlite.Options{})
	refused := errors.New("refused")
	var errs [3]error
	var bound int
	ops := []Op{
		&funcOp{name: "good", done: func(err error) { errs[1] = err }},
		&boundOp{funcOp{name: "lease", apply: func(store.Tx) error { bound++; return nil }, done: func(err error) { errs[2] = err }}},
		&funcOp{name: "bad", apply: func(store.Tx) error { return refused }, done: func(err error) { errs[0] = err }},
	}
	writeBatch(t, st, ops...)
	if !errors.Is(errs[0], refused) || errs[1] != nil || !errors.Is(errs[2], refused) {
		t.Fatalf("told %v, want the faulty op and the bound one failed, the other written", errs)
	}
	if bound != 1 {
		t.Fatalf("the bound op applied %d times, want once (with its batch, never alone)", bound)
	}
}

// waitingSuccess is a success that may wait for a producer's next enqueue (Deferrer) when may.
type waitingSuccess struct {
	*successOp
	may bool
}

func (o *waitingSuccess) MayWait() bool { return o.may }

// deferWriter runs a grouped writer over st whose windows last an hour on the clock now, and
// returns it with the events of its batches: each batch committed as its number of ops, each
// batch deferred as "deferred".
func deferWriter(t *testing.T, st store.Store, now *atomic.Int64) (*Grouped, <-chan string) {
	t.Helper()
	events := make(chan string, 16)
	stop := make(chan struct{})
	w := NewGrouped(Config{Store: st, Ctx: context.Background(), MaxBatch: 16, Owner: nobody{}, Stop: stop,
		Stopped: errors.New("stopped"), Now: func() time.Time { return time.Unix(0, now.Load()) }, Window: time.Hour,
		Observe: func(ops int, _ time.Duration, _ error) { events <- strconv.Itoa(ops) }})
	w.deferred = func() { events <- "deferred" }
	done := make(chan struct{})
	go func() { w.Run(); close(done) }()
	t.Cleanup(func() { close(stop); <-done })
	return w, events
}

// answered waits for tk's answer.
func answered(t *testing.T, tk *Ticket) {
	t.Helper()
	if err := <-tk.Answer(); err != nil {
		t.Fatal(err)
	}
}

// A result that may wait, taken alone while a producer is enqueueing (an insert committed
// within the window), is deferred and shares the commit of the next op; one that may not, or
// one taken once the window since the last insert has passed, is committed at once.
func TestGroupedDefersLoneResultToNextEnqueue(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		may   bool
		after time.Duration // the clock's move between the insert's commit and the result
		other bool          // an op that inserts nothing is committed after that move
		want  []string      // the writer's events (deferWriter)
	}{
		{name: "deferred", may: true, want: []string{"1", "deferred", "2"}},
		{name: "may not wait", may: false, want: []string{"1", "1", "1"}},
		{name: "no producer", may: true, after: time.Hour, want: []string{"1", "1", "1"}},
		{name: "no producer, other writes", may: true, after: time.Hour, other: true, want: []string{"1", "1", "1", "1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			st := openStore(t, sqlite.Options{})
			ref := leaseJobs(t, st, 1)[0]
			var now atomic.Int64
			now.Store(testNow.UnixNano())
			w, events := deferWriter(t, st, &now)
			answered(t, w.Enter(newInsert("a"), time.Time{}))
			got := []string{<-events}
			now.Add(int64(tt.after))
			if tt.other {
				answered(t, w.Enter(&funcOp{name: "other"}, time.Time{}))
				got = append(got, <-events)
			}
			result := &waitingSuccess{successOp: newSuccess(ref), may: tt.may}
			rt := w.Enter(result, time.Time{})
			got = append(got, <-events) // the result's batch, deferred or committed
			answered(t, w.Enter(newInsert("b"), time.Time{}))
			answered(t, rt)
			got = append(got, <-events)
			if !slices.Equal(got, tt.want) {
				t.Fatalf("writer's events %v, want %v", got, tt.want)
			}
			if !result.succeeded {
				t.Fatal("the result did not apply")
			}
		})
	}
}

// refusingOffers is a store whose inserts that lease offered jobs fail, as when it refuses the
// statement of the leases.
type refusingOffers struct{ store.Store }

func (s refusingOffers) Write(ctx context.Context, op string, fn func(store.Tx) error) error {
	return s.Store.Write(ctx, op, func(tx store.Tx) error { return fn(refusingOffersTx{tx}) })
}

type refusingOffersTx struct{ store.Tx }

func (refusingOffersTx) JobInsertOfferedAtCommit([]*store.JobInsertParams, []*store.JobOffer,
	func([]*job.Job, error)) ([]store.JobInsertResult, error) {
	return nil, errors.New("injected: the offered jobs' leases refused")
}

// An enqueue alone in its batch whose offered insert fails is written again without its
// offers: the failed lease leaves its jobs PENDING, for a round, and does not fail the enqueue.
func TestGroupedLoneOfferedEnqueueOutlivesItsOffers(t *testing.T) {
	t.Parallel()
	st := openStore(t, sqlite.Options{})
	w := NewGrouped(Config{Store: refusingOffers{st}, Ctx: context.Background(), MaxBatch: 16, Owner: nobody{}})
	o := newOffer("o1")
	ticket := &Ticket{op: o, waited: true, answer: make(chan error, 1)}
	w.commit([]*Ticket{ticket}, w.opsOf([]*Ticket{ticket}))
	if err := <-ticket.Answer(); err != nil {
		t.Fatalf("the enqueue failed with its offers: %v", err)
	}
	if len(o.results) != 1 {
		t.Fatalf("results %v, want the one job stored", o.results)
	}
	j, err := st.JobGet(context.Background(), o.results[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	if j.State != job.StatePending {
		t.Fatalf("the job is %s, want PENDING", j.State)
	}
}

// TestCrowded: the writer yields before its next batch only after one that carried a crowd of
// producers' enqueues, never after a lone producer's, a batch of jobs or a run of results.
func TestCrowded(t *testing.T) {
	enqueues := func(n int, offered bool) []Op {
		var ops []Op
		for range n {
			if offered {
				ops = append(ops, newOffer("t"))
			} else {
				ops = append(ops, newInsert("t"))
			}
		}
		return ops
	}
	results := func(n int) []Op {
		var ops []Op
		for i := range n {
			ops = append(ops, newSuccess(job.LeaseRef{JobID: int64(i + 1)}))
		}
		return ops
	}
	many := make([]string, 100)
	for i := range many {
		many[i] = "t"
	}
	tests := []struct {
		name string
		ops  []Op
		want bool
	}{
		{"a lone enqueue", enqueues(1, false), false},
		{"one short of a crowd, among results", append(enqueues(crowdInserts-1, false), results(50)...), false},
		{"a crowd of enqueues", enqueues(crowdInserts, false), true},
		{"a crowd of offered enqueues", enqueues(crowdInserts, true), true},
		{"a batch of a hundred jobs", []Op{newInsert(many...)}, false},
		{"results only", results(200), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := enqueuesIn(tt.ops) >= crowdInserts; got != tt.want {
				t.Errorf("crowded = %v, want %v", got, tt.want)
			}
		})
	}
}
