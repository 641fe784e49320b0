package commit

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/store"
	"github.com/jobwire/jobwire/store/sqlite"
	"github.com/jobwire/jobwire/store/sqlite/sqlitetest"
)

var testNow = time.Unix(1_700_000_000, 0)

// openStore opens a SQLite store in t's temporary directory, closed when t ends.
func openStore(t *testing.T, opts sqlite.Options) store.Store {
	t.Helper()
	opts.Logger = slog.New(slog.DiscardHandler)
	st, err := sqlite.Open(context.Background(), sqlitetest.Path(t), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// jobParams is a job of type typ, ready at testNow.
func jobParams(typ string) *store.JobInsertParams {
	return &store.JobInsertParams{Type: typ, Queue: "default", Payload: []byte(`{}`), MaxAttempts: 3,
		RunAt: testNow, Now: testNow, AttemptTimeout: time.Minute}
}

// leaseJobs stores n jobs of type "t" and leases them to worker "w".
func leaseJobs(t *testing.T, st store.Store, n int) []job.LeaseRef {
	t.Helper()
	var leased []*job.Job
	err := st.Write(context.Background(), "setup", func(tx store.Tx) error {
		var ps []*store.JobInsertParams
		for range n {
			ps = append(ps, jobParams("t"))
		}
		if _, err := tx.JobInsertMany(ps); err != nil {
			return err
		}
		var err error
		leased, err = tx.JobLease(&store.JobLeaseParams{Types: []string{"t"}, Limit: n, WorkerID: "w", Now: testNow,
			LeaseUntil: testNow.Add(time.Minute)})
		return err
	})
	if err != nil || len(leased) != n {
		t.Fatalf("leased %d jobs: %v", len(leased), err)
	}
	refs := make([]job.LeaseRef, n)
	for i, j := range leased {
		refs[i] = job.LeaseRef{JobID: j.ID, Token: j.LeaseToken}
	}
	return refs
}

// funcOp is an op that runs apply and hands its outcome to done (either may be nil).
type funcOp struct {
	name  string
	apply func(tx store.Tx) error
	done  func(err error)
}

func (o *funcOp) Name() string { return o.name }
func (o *funcOp) Apply(tx store.Tx) error {
	if o.apply == nil {
		return nil
	}
	return o.apply(tx)
}
func (o *funcOp) Done(err error) {
	if o.done != nil {
		o.done(err)
	}
}

// startOp starts a lease (Starter).
type startOp struct {
	p       store.JobStartParams
	applied bool
}

func newStart(ref job.LeaseRef) *startOp {
	return &startOp{p: store.JobStartParams{Ref: ref, Attempt: 1, Now: testNow, LeaseUntil: testNow.Add(time.Minute),
		AttemptDeadline: testNow.Add(time.Minute)}}
}

func (o *startOp) Name() string                       { return "start" }
func (o *startOp) Done(error)                         {}
func (o *startOp) StartParams() *store.JobStartParams { return &o.p }
func (o *startOp) Started(applied bool)               { o.applied = applied }
func (o *startOp) Apply(tx store.Tx) (err error) {
	o.applied, err = tx.JobStart(&o.p)
	return err
}

// successOp stores a success (Finisher, Succeeder).
type successOp struct {
	p         *store.JobFinishParams
	succeeded bool
	unread    error
}

func newSuccess(ref job.LeaseRef) *successOp {
	return &successOp{p: &store.JobFinishParams{Ref: ref, Queue: "default", Type: "t", State: job.StateSucceeded,
		Now: testNow, Attempt: job.Attempt{Number: 1, WorkerID: "w", StartedAt: testNow, FinishedAt: testNow,
			Outcome: job.OutcomeSucceeded}}}
}

func (o *successOp) Name() string                         { return "result" }
func (o *successOp) Done(error)                           {}
func (o *successOp) Finishes() job.LeaseRef               { return o.p.Ref }
func (o *successOp) Success() *store.JobFinishParams      { return o.p }
func (o *successOp) Succeeded(applied bool, unread error) { o.succeeded, o.unread = applied, unread }
func (o *successOp) Apply(tx store.Tx) (err error) {
	o.unread = nil
	o.succeeded, err = tx.JobFinish(o.p)
	return err
}

// toldInsert is an insertOp that calls told when it is told how its write ended.
type toldInsert struct {
	*insertOp
	told func(error)
}

func (o *toldInsert) Done(err error) { o.told(err) }

// insertOp stores jobs (Inserter, Readier).
type insertOp struct {
	ps      []*store.JobInsertParams
	results []store.JobInsertResult
}

func newInsert(types ...string) *insertOp {
	o := &insertOp{}
	for _, typ := range types {
		o.ps = append(o.ps, jobParams(typ))
	}
	return o
}

func (o *insertOp) Name() string                     { return "enqueue" }
func (o *insertOp) Done(error)                       {}
func (o *insertOp) Readies() bool                    { return true }
func (o *insertOp) Insert() []*store.JobInsertParams { return o.ps }
func (o *insertOp) Inserted(_ store.Tx, rs []store.JobInsertResult) {
	o.results = rs
}
func (o *insertOp) Apply(tx store.Tx) error {
	rs, err := tx.JobInsertMany(o.ps)
	o.results = rs
	return err
}

// offerOp stores jobs and offers each to worker "w" (Offerer), nil where offers is false.
type offerOp struct {
	insertOp
	offers []*store.JobOffer
	leased []*job.Job
}

func newOffer(types ...string) *offerOp {
	o := &offerOp{insertOp: *newInsert(types...)}
	for range types {
		o.offers = append(o.offers, &store.JobOffer{WorkerID: "w", LeaseUntil: testNow.Add(time.Minute)})
	}
	return o
}

func (o *offerOp) Offers() []*store.JobOffer { return o.offers }
func (o *offerOp) Leased(jobs []*job.Job)    { o.leased = jobs }

// nobody owns a writer's batches with nothing to add.
type nobody struct{}

func (nobody) Round([]Op, bool, bool) Op { return nil }
func (nobody) Begin(store.Tx, []Op)      {}
func (nobody) Flush(store.Tx) error      { return nil }
func (nobody) Written([]Op, error)       {}
