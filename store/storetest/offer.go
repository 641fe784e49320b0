package storetest

import (
	"bytes"
	"reflect"
	"testing"
	"time"

	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/store"
)

var _ = register(
	testCase{"InsertOffered", testInsertOffered},
	testCase{"InsertOfferedGoesAheadOfNothing", testInsertOfferedGoesAheadOfNothing},
	testCase{"InsertOfferedBehindItsWorkersQueues", testInsertOfferedBehindItsWorkersQueues},
	testCase{"InsertOfferedPastNoRule", testInsertOfferedPastNoRule},
	testCase{"InsertOfferedPastPausedJobs", testInsertOfferedPastPausedJobs},
	testCase{"InsertOfferedRefusesBadCalls", testInsertOfferedRefusesBadCalls},
)

// offerTo is an offer of a one-minute lease to worker "w" for owner "tok_1", its secret all
// fill bytes.
func (b *bundle) offerTo(fill byte) *store.JobOffer {
	return &store.JobOffer{WorkerID: "w", Owner: "tok_1", LeaseUntil: b.now.Add(time.Minute),
		Random: bytes.NewReader(bytes.Repeat([]byte{fill}, job.SecretSize))}
}

// insertOffered inserts ps with offers and returns their ids and what got was handed.
func (b *bundle) insertOffered(ps []*store.JobInsertParams, offers []*store.JobOffer) ([]int64, []*job.Job) {
	b.t.Helper()
	var leased []*job.Job
	var res []store.JobInsertResult
	called := 0
	b.write(func(tx store.Tx) error {
		var err error
		res, err = tx.JobInsertOfferedAtCommit(ps, offers, func(jobs []*job.Job, err error) {
			called++
			if err != nil {
				b.t.Errorf("reading the offered insert: %v", err)
			}
			leased = jobs
		})
		return err
	})
	if called != 1 || len(leased) != len(ps) {
		b.t.Fatalf("got called %d times with %d jobs, want once with %d", called, len(leased), len(ps))
	}
	ids := make([]int64, len(res))
	for i, r := range res {
		ids[i] = r.ID
	}
	return ids, leased
}

// An offered job is stored LEASED, with the offer's holder and deadline and a first token,
// exactly as a lease would leave it; a job without an offer stays PENDING. The leased job's
// token is current (JobStart), and no lease takes it again.
func testInsertOffered(t *testing.T, b *bundle) {
	// Every field a job may carry when offered, so that the job handed out is compared whole.
	full := b.job("t")
	full.Metadata, full.RateKey, full.Priority = map[string]string{"tenant": "a"}, "acct-1", 2
	stored, leased := b.insertOffered([]*store.JobInsertParams{full, b.job("t")},
		[]*store.JobOffer{b.offerTo(0xab), nil})
	want := job.LeaseToken{Seq: 1}
	copy(want.Secret[:], bytes.Repeat([]byte{0xab}, job.SecretSize))
	if leased[0] == nil || leased[1] != nil {
		t.Fatalf("leased %v, want the first job only", leased)
	}
	for _, j := range []*job.Job{leased[0], b.get(stored[0])} {
		if j.ID != stored[0] || j.State != job.StateLeased || j.LeaseToken != want || j.WorkerID != "w" ||
			j.LeaseOwner != "tok_1" || !j.LeaseExpiresAt.Equal(b.now.Add(time.Minute)) || j.Attempts != 0 ||
			string(j.Payload) != `{}` {
			t.Fatalf("offered job %+v: want job %d LEASED to w for tok_1 until %s with token %v, its payload, no attempt spent",
				j, stored[0], b.now.Add(time.Minute), want)
		}
	}
	if got := b.get(stored[0]); !reflect.DeepEqual(leased[0], got) {
		t.Fatalf("the offered job handed out\n%+v\nis not the job stored\n%+v", leased[0], got)
	}
	equal(t, "the job without an offer", b.state(stored[1]), job.StatePending)
	equal(t, "a lease after it", ids(b.lease(b.leaseParams(10, "t"))), []int64{stored[1]})
	b.start(refOf(leased[0]))
	equal(t, "the offered job once started", b.state(stored[0]), job.StateRunning)

	// A job offered alone (a store may store it leased at once) is stored the same way.
	alone, leasedAlone := b.insertOffered([]*store.JobInsertParams{b.job("t")}, []*store.JobOffer{b.offerTo(0xcd)})
	copy(want.Secret[:], bytes.Repeat([]byte{0xcd}, job.SecretSize))
	if leasedAlone[0] == nil {
		t.Fatal("a job offered alone, with nothing waiting, was not leased")
	}
	for _, j := range []*job.Job{leasedAlone[0], b.get(alone[0])} {
		if j.ID != alone[0] || j.State != job.StateLeased || j.LeaseToken != want || j.WorkerID != "w" ||
			j.LeaseOwner != "tok_1" || !j.LeaseExpiresAt.Equal(b.now.Add(time.Minute)) || j.Attempts != 0 ||
			string(j.Payload) != `{}` || j.Type != "t" {
			t.Fatalf("job offered alone %+v: want job %d LEASED to w for tok_1 until %s with token %v, its payload, no attempt spent",
				j, alone[0], b.now.Add(time.Minute), want)
		}
	}
	b.start(refOf(leasedAlone[0]))
	equal(t, "the job offered alone once started", b.state(alone[0]), job.StateRunning)
}

// An offer goes ahead of no job that waits: a ready job of the same or a higher priority,
// stored before, keeps the new job PENDING; one of a lower priority does not.
func testInsertOfferedGoesAheadOfNothing(t *testing.T, b *bundle) {
	low := b.job("t")
	low.Priority = -1
	b.insert(low)
	_, leased := b.insertOffered([]*store.JobInsertParams{b.job("t")}, []*store.JobOffer{b.offerTo(1)})
	if leased[0] == nil {
		t.Fatal("a job offered ahead of a lower priority's was not leased")
	}
	waiting := b.insert(b.job("other"))[0]
	behind, leased := b.insertOffered([]*store.JobInsertParams{b.job("t")}, []*store.JobOffer{b.offerTo(2)})
	if leased[0] != nil {
		t.Fatalf("a job offered while job %d of its priority waited was leased", waiting)
	}
	equal(t, "the job offered behind a waiting one", b.state(behind[0]), job.StatePending)
	urgent := b.job("t")
	urgent.Priority = 1
	if _, leased := b.insertOffered([]*store.JobInsertParams{urgent}, []*store.JobOffer{b.offerTo(3)}); leased[0] == nil {
		t.Fatal("a job offered ahead of lower priorities' was not leased")
	}
}

// A job waiting in a queue the offer's worker takes keeps the offer back, whether the worker
// names that queue among others or takes every queue. (Whether one waiting in a queue it does
// not take does too is the store's choice: JobOffer.Queues.)
func testInsertOfferedBehindItsWorkersQueues(t *testing.T, b *bundle) {
	b.insertIn("backlog", 1, 5) // one job waits in "backlog", at a higher priority
	for _, queues := range [][]string{{"default", "backlog"}, nil} {
		offer := b.offerTo(1)
		offer.Queues = queues
		stored, leased := b.insertOffered([]*store.JobInsertParams{b.job("t")}, []*store.JobOffer{offer})
		if leased[0] != nil || b.state(stored[0]) != job.StatePending {
			t.Errorf("a job offered to a worker of queues %q while a job of backlog waited: leased %v, state %s, want PENDING",
				queues, leased[0], b.state(stored[0]))
		}
	}
}

// An offer goes past no rule the database holds: a paused or capped queue, or a shut breaker
// of the job's type, keeps the job PENDING.
func testInsertOfferedPastNoRule(t *testing.T, b *bundle) {
	b.insertIn("paused", 1, -1) // the queues' rows; their jobs wait behind the offered ones
	b.insertIn("capped", 1, -1)
	b.write(func(tx store.Tx) error {
		if err := tx.QueueSetPaused("paused", true); err != nil {
			return err
		}
		if err := tx.QueueSetLimit("capped", 5); err != nil {
			return err
		}
		return tx.BreakerSave(store.BreakerRecord{Type: "shut", Data: []byte(`{}`), Shut: true})
	})
	paused, capped, shut, free := b.job("t"), b.job("t"), b.job("shut"), b.job("t")
	paused.Queue, capped.Queue = "paused", "capped"
	ps := []*store.JobInsertParams{paused, capped, shut, free}
	stored, leased := b.insertOffered(ps, []*store.JobOffer{b.offerTo(1), b.offerTo(2), b.offerTo(3), b.offerTo(4)})
	for i, what := range []string{"paused queue", "capped queue", "shut breaker"} {
		if leased[i] != nil || b.state(stored[i]) != job.StatePending {
			t.Errorf("the job offered in spite of a %s: leased %v, state %s, want PENDING", what, leased[i], b.state(stored[i]))
		}
	}
	if leased[3] == nil {
		t.Error("the job offered under no rule was not leased")
	}
}

// A paused queue's jobs do not wait for a worker: an offer goes ahead of a few of them
// (fewer than store.PausedBacklogMin at its priority or above), whatever its worker reads, but
// still of no job that waits in a queue not paused, however many paused ones come first.
func testInsertOfferedPastPausedJobs(t *testing.T, b *bundle) {
	b.insertIn("paused", 3, 5) // held ahead of the offered jobs: a higher priority
	b.write(func(tx store.Tx) error { return tx.QueueSetPaused("paused", true) })
	offers := func() []*store.JobOffer {
		every, typed, named := b.offerTo(1), b.offerTo(2), b.offerTo(3)
		typed.Types, named.Types, named.Queues = []string{"t"}, []string{"t"}, []string{"default", "paused"}
		return []*store.JobOffer{every, typed, named}
	}
	for _, o := range offers() {
		stored, leased := b.insertOffered([]*store.JobInsertParams{b.job("t")}, []*store.JobOffer{o})
		if leased[0] == nil {
			t.Errorf("a job offered to a worker of types %q, queues %q behind 3 jobs of a paused queue: state %s, want leased",
				o.Types, o.Queues, b.state(stored[0]))
		}
	}
	b.insertIn("paused", store.PausedBacklogMin, 5)
	b.insertIn("waiting", 1, 5) // behind them all in dispatch order, in a queue not paused
	for _, o := range offers() {
		o.Queues = append(o.Queues, "waiting")
		stored, leased := b.insertOffered([]*store.JobInsertParams{b.job("t")}, []*store.JobOffer{o})
		if leased[0] != nil {
			t.Errorf("a job offered to a worker of types %q, queues %q while a job waited behind %d paused ones: leased, want PENDING",
				o.Types, o.Queues, store.PausedBacklogMin+3)
		}
		equal(t, "the job offered behind the waiting one", b.state(stored[0]), job.StatePending)
	}
}

// Offers pair with jobs one to one, for jobs without idempotency keys that are ready now.
func testInsertOfferedRefusesBadCalls(t *testing.T, b *bundle) {
	keyed, later := b.job("t"), b.job("t")
	keyed.IdempotencyKey = "k"
	later.RunAt = b.now.Add(time.Hour)
	for _, c := range []struct {
		name   string
		ps     []*store.JobInsertParams
		offers []*store.JobOffer
	}{
		{"fewer offers than jobs", []*store.JobInsertParams{b.job("t"), b.job("t")}, []*store.JobOffer{b.offerTo(1)}},
		{"an idempotency key", []*store.JobInsertParams{keyed}, []*store.JobOffer{nil}},
		{"an offered job for later", []*store.JobInsertParams{later}, []*store.JobOffer{b.offerTo(1)}},
	} {
		err := b.s.Write(b.ctx, "storetest", func(tx store.Tx) error {
			_, err := tx.JobInsertOfferedAtCommit(c.ps, c.offers, func([]*job.Job, error) {})
			return err
		})
		if err == nil {
			t.Errorf("%s: taken", c.name)
		}
	}
	equal(t, "jobs stored by refused calls", len(b.counts()), 0)
}
