package storetest

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/store"
)

var _ = register(
	testCase{"LeaseOrder", testLeaseOrder},
	testCase{"LeaseScope", testLeaseScope},
	testCase{"LeaseCaps", testLeaseCaps},
	testCase{"LeaseMaxBytes", testLeaseMaxBytes},
	testCase{"LeaseAtCommit", testLeaseAtCommit},
	testCase{"LeaseManyAtCommit", testLeaseManyAtCommit},
	testCase{"LeaseExcludeShut", testLeaseExcludeShut},
	testCase{"LeaseTokens", testLeaseTokens},
	testCase{"JobStart", testJobStart},
	testCase{"JobFinish", testJobFinish},
	testCase{"JobFinishUnstarted", testJobFinishUnstarted},
	testCase{"JobSucceedMany", testJobSucceedMany},
	testCase{"JobRelease", testJobRelease},
	testCase{"JobExtendLeases", testJobExtendLeases},
	testCase{"JobExtendLeasesRunOut", testJobExtendLeasesRunOut},
	testCase{"JobGetHeld", testJobGetHeld},
	testCase{"JobCancel", testJobCancel},
	testCase{"JobPromoteScheduled", testJobPromoteScheduled},
	testCase{"JobHeldExpired", testJobHeldExpired},
	testCase{"JobReleaseAllLeasedAndListRunning", testJobReleaseAllLeasedAndListRunning},
)

// Dispatch order is highest priority first, then oldest run_at, then oldest id.
func testLeaseOrder(t *testing.T, b *bundle) {
	mk := func(priority int, runAt time.Duration) *store.JobInsertParams {
		p := b.job("t")
		p.Priority, p.RunAt = priority, b.now.Add(-runAt)
		return p
	}
	// ids:            0            1             2            3             4            5
	got := b.insert(mk(0, 0), mk(5, 0), mk(0, time.Hour), mk(5, time.Minute), mk(-1, 2*time.Hour), mk(0, 0))
	want := []int64{got[3], got[1], got[2], got[0], got[5], got[4]}
	var leased []int64
	for len(leased) < len(want) {
		jobs := b.lease(b.leaseParams(2, "t"))
		if len(jobs) == 0 {
			break
		}
		leased = append(leased, ids(jobs)...)
	}
	equal(t, "lease order", leased, want)
	if jobs := b.lease(b.leaseParams(2, "t")); len(jobs) != 0 {
		t.Fatalf("leased %v again while their leases are current", ids(jobs))
	}
	// Across types, one order: the highest priority of either type first.
	typed := func(typ string, priority int) *store.JobInsertParams {
		p := b.job(typ)
		p.Priority = priority
		return p
	}
	mixed := b.insert(typed("a", 0), typed("b", 3), typed("a", 5), typed("b", -2), typed("b", 3))
	equal(t, "lease order across types", ids(b.lease(b.leaseParams(4, "a", "b"))), []int64{mixed[2], mixed[1], mixed[4], mixed[0]})
	// A SCHEDULED job is not ready.
	later := b.job("t")
	later.RunAt = b.now.Add(time.Hour)
	b.insert(later)
	if jobs := b.lease(b.leaseParams(1, "t")); len(jobs) != 0 {
		t.Fatalf("leased a SCHEDULED job")
	}
}

// A lease takes only the types and queues asked for, never excluded or paused queues, never
// excluded types, and no more than the limit.
func testLeaseScope(t *testing.T, b *bundle) {
	in := func(typ, queue string) *store.JobInsertParams {
		p := b.job(typ)
		p.Queue = queue
		return p
	}
	got := b.insert(in("a", "q1"), in("b", "q1"), in("a", "q2"), in("a", "paused"), in("c", "q1"), in("a", "q3"))
	b.write(func(tx store.Tx) error { return tx.QueueSetPaused("paused", true) })
	try := func(name string, p *store.JobLeaseParams, want ...int64) {
		t.Helper()
		var jobs []*job.Job
		// Leased in a write that is rolled back, so each try sees every job ready.
		errUndo := errors.New("undo")
		err := b.s.Write(b.ctx, "storetest", func(tx store.Tx) error {
			var err error
			if jobs, err = tx.JobLease(p); err != nil {
				return err
			}
			return errUndo
		})
		if !errors.Is(err, errUndo) {
			t.Fatal(err)
		}
		if want == nil {
			want = []int64{}
		}
		equal(t, name, ids(jobs), want)
	}
	p := func(limit int, types ...string) *store.JobLeaseParams { return b.leaseParams(limit, types...) }
	try("types a and b", p(10, "a", "b"), got[0], got[1], got[2], got[3], got[5])
	try("limit", p(2, "a", "b"), got[0], got[1])
	q := p(10, "a")
	q.Queues = []string{"q2", "q3"}
	try("queues", q, got[2], got[5])
	q = p(10, "a", "b")
	q.ExcludeQueues = []string{"q1", "q3"}
	try("excluded queues", q, got[2], got[3])
	q = p(10, "a", "b", "c")
	q.ExcludeTypes = []string{"a", "c"}
	try("excluded types", q, got[1])
	q = p(10, "a")
	q.ExcludePaused = true
	try("paused left out", q, got[0], got[2], got[5])
	try("no types", p(10))
	try("no room", p(0, "a"))
	b.write(func(tx store.Tx) error { return tx.QueueSetPaused("paused", false) })
	q = p(10, "a")
	q.ExcludePaused = true
	try("resumed", q, got[0], got[2], got[3], got[5])
}

// A capped queue gives no more jobs than its room, which the lease counts down in the map it
// was given; the other queues' jobs are leased around it.
func testLeaseCaps(t *testing.T, b *bundle) {
	var ps []*store.JobInsertParams
	for i := range 6 {
		p := b.job("t")
		p.Queue = []string{"capped", "free"}[i/3]
		p.Priority = 10 - i // the capped queue's jobs come first
		ps = append(ps, p)
	}
	got := b.insert(ps...)
	caps := map[string]int{"capped": 2}
	p := b.leaseParams(10, "t")
	p.Caps = caps
	equal(t, "leased", ids(b.lease(p)), []int64{got[0], got[1], got[3], got[4], got[5]})
	equal(t, "room left", caps, map[string]int{"capped": 0})
	p = b.leaseParams(10, "t")
	p.Caps = map[string]int{"capped": 0}
	if jobs := b.lease(p); len(jobs) != 0 {
		t.Fatalf("a full queue gave %v", ids(jobs))
	}
	p.Caps = map[string]int{"capped": 5}
	p.Queues = []string{"capped"}
	equal(t, "with room again", ids(b.lease(p)), []int64{got[2]})
}

// insertTenBytes adds n jobs of type "t" with a payload of 10 bytes each, for the cases of
// MaxBytes, and returns their ids.
func (b *bundle) insertTenBytes(n int) []int64 {
	b.t.Helper()
	ps := make([]*store.JobInsertParams, n)
	for i := range ps {
		ps[i] = b.job("t")
		ps[i].Payload = []byte("0123456789")
	}
	return b.insert(ps...)
}

// A lease with MaxBytes stops once the leased payloads reach it, but always leases one job.
func testLeaseMaxBytes(t *testing.T, b *bundle) {
	got := b.insertTenBytes(4)
	for _, c := range []struct {
		maxBytes int
		want     []int64
	}{{15, got[:2]}, {5, got[:1]}, {20, got[:2]}, {21, got[:3]}, {0, got}} {
		for _, atCommit := range []bool{false, true} {
			p := b.leaseParams(10, "t")
			p.MaxBytes = c.maxBytes
			var jobs, rest []*job.Job
			errUndo := errors.New("undo")
			err := b.s.Write(b.ctx, "storetest", func(tx store.Tx) error {
				var err error
				if atCommit {
					err = tx.JobLeaseAtCommit([]*store.JobLeaseParams{p}, func(js [][]*job.Job, err error) { jobs = js[0] })
				} else {
					jobs, err = tx.JobLease(p)
				}
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			// The jobs past the limit are still ready, whatever the store did to stop there.
			err = b.s.Write(b.ctx, "storetest", func(tx store.Tx) error {
				var err error
				if rest, err = tx.JobLease(b.leaseParams(10, "t")); err != nil {
					return err
				}
				return errUndo
			})
			if !errors.Is(err, errUndo) {
				t.Fatal(err)
			}
			what := fmt.Sprintf("MaxBytes %d (at commit: %v)", c.maxBytes, atCommit)
			equal(t, "leased with "+what, ids(jobs), c.want)
			equal(t, "left ready by "+what, ids(rest), got[len(c.want):])
			b.write(func(tx store.Tx) error { // ready again for the next case
				refs := make([]job.LeaseRef, len(jobs))
				for i, j := range jobs {
					refs[i] = refOf(j)
				}
				_, err := tx.JobReleaseMany(refs)
				return err
			})
		}
	}
}

// JobLeaseAtCommit leases what JobLease would, in dispatch order with fresh tokens, and hands
// the jobs over before Write returns; a write that fails after it leases nothing.
func testLeaseAtCommit(t *testing.T, b *bundle) {
	low := b.insert(b.job("t"))
	p := b.job("t")
	p.Priority = 5
	high := b.insert(p)
	errUndo := errors.New("undo")
	called := false
	err := b.s.Write(b.ctx, "storetest", func(tx store.Tx) error {
		return errors.Join(tx.JobLeaseAtCommit([]*store.JobLeaseParams{b.leaseParams(10, "t")}, func([][]*job.Job, error) {
			called = true
		}), errUndo)
	})
	if !errors.Is(err, errUndo) {
		t.Fatal(err)
	}
	if st := b.state(low[0]); st != job.StatePending {
		t.Fatalf("a failed write's lease at commit left job %d %v (got called: %v)", low[0], st, called)
	}
	var jobs []*job.Job
	var gotErr error
	calls := 0
	b.write(func(tx store.Tx) error {
		return tx.JobLeaseAtCommit([]*store.JobLeaseParams{b.leaseParams(10, "t")}, func(js [][]*job.Job, err error) {
			jobs, gotErr = js[0], err
			calls++
		})
	})
	if calls != 1 || gotErr != nil {
		t.Fatalf("got called %d times, last with %v; want once, without error", calls, gotErr)
	}
	equal(t, "leased at commit", ids(jobs), []int64{high[0], low[0]})
	for _, j := range jobs {
		stored := b.get(j.ID)
		if j.State != job.StateLeased || stored.State != job.StateLeased || stored.LeaseToken != j.LeaseToken ||
			j.LeaseToken.Seq != 1 || j.WorkerID != "w" {
			t.Fatalf("job %d handed over as %v %v, stored %v %v", j.ID, j.State, j.LeaseToken, stored.State, stored.LeaseToken)
		}
	}
	// Nothing to lease: got hears so, and no job.
	calls = 0
	b.write(func(tx store.Tx) error {
		return tx.JobLeaseAtCommit([]*store.JobLeaseParams{b.leaseParams(10, "t")}, func(js [][]*job.Job, err error) {
			jobs, gotErr = js[0], err
			calls++
		})
	})
	if calls != 1 || len(jobs) != 0 || gotErr != nil {
		t.Fatalf("an empty lease at commit: got called %d times with %v, %v", calls, ids(jobs), gotErr)
	}
}

// Several leases of one scope at commit share the ready jobs in dispatch order, the first the
// first ones, each up to its limit and payload bound, each with its own holder; leases of
// different scopes are refused.
func testLeaseManyAtCommit(t *testing.T, b *bundle) {
	got := b.insertTenBytes(7)
	first, second, third := b.leaseParams(2, "t"), b.leaseParams(4, "t"), b.leaseParams(4, "t")
	first.WorkerID, second.WorkerID, third.WorkerID = "w1", "w2", "w3"
	second.MaxBytes = 25 // three jobs: the third starts at 20 bytes
	third.Owner = "tok_3"
	var leased [][]*job.Job
	b.write(func(tx store.Tx) error {
		return tx.JobLeaseAtCommit([]*store.JobLeaseParams{first, second, third}, func(js [][]*job.Job, err error) {
			leased = js
			if err != nil {
				t.Errorf("got %v", err)
			}
		})
	})
	if len(leased) != 3 {
		t.Fatalf("got the jobs of %d leases, want 3", len(leased))
	}
	equal(t, "first lease", ids(leased[0]), got[:2])
	equal(t, "second lease, bounded by its bytes", ids(leased[1]), got[2:5])
	// The third lease's slice of the dispatch order starts after the second's whole limit: the
	// job the second's bytes left is ready for the next round.
	equal(t, "third lease", ids(leased[2]), got[6:7])
	for i, want := range []string{"w1", "w2", "w3"} {
		for _, j := range leased[i] {
			stored := b.get(j.ID)
			if stored.WorkerID != want || stored.State != job.StateLeased || stored.LeaseToken != j.LeaseToken {
				t.Fatalf("job %d of lease %d stored as %s %v %v, want leased to %s with %v", j.ID, i+1,
					stored.WorkerID, stored.State, stored.LeaseToken, want, j.LeaseToken)
			}
		}
	}
	if j := b.get(leased[2][0].ID); j.LeaseOwner != "tok_3" {
		t.Fatalf("third lease's owner %q, want tok_3", j.LeaseOwner)
	}
	equal(t, "left ready", b.state(got[5]), job.StatePending)
	other := b.leaseParams(1, "other")
	err := b.s.Write(b.ctx, "storetest", func(tx store.Tx) error {
		return tx.JobLeaseAtCommit([]*store.JobLeaseParams{b.leaseParams(1, "t"), other}, func([][]*job.Job, error) {})
	})
	if err == nil {
		t.Fatal("leases of two scopes at commit in one call were taken")
	}
}

// ExcludeShut leaves out the types whose stored breaker is shut, and only those: a type with
// no stored breaker, or one saved open again, is leased.
func testLeaseExcludeShut(t *testing.T, b *bundle) {
	shut, open, none := b.insert(b.job("shut"))[0], b.insert(b.job("open"))[0], b.insert(b.job("none"))[0]
	b.write(func(tx store.Tx) error {
		if err := tx.BreakerSave(store.BreakerRecord{Type: "shut", Data: []byte(`{}`), Shut: true}); err != nil {
			return err
		}
		return tx.BreakerSave(store.BreakerRecord{Type: "open", Data: []byte(`{}`)})
	})
	p := b.leaseParams(10, "shut", "open", "none")
	p.ExcludeShut = true
	got := ids(b.lease(p))
	slices.Sort(got)
	equal(t, "leased with ExcludeShut", got, []int64{open, none})
	b.write(func(tx store.Tx) error {
		return tx.BreakerSave(store.BreakerRecord{Type: "shut", Data: []byte(`{}`)})
	})
	equal(t, "leased once the breaker is saved open", ids(b.lease(p)), []int64{shut})
}

// Each lease gets a new token: the job's lease count as Seq and a secret from p.Random; the
// lease's holder, owner and deadline are stored with it.
func testLeaseTokens(t *testing.T, b *bundle) {
	id := b.insert(b.job("t"))[0]
	p := b.leaseParams(1, "t")
	p.Owner = "tok_1"
	p.Random = bytes.NewReader(bytes.Repeat([]byte{0xab}, job.SecretSize))
	jobs := b.lease(p)
	want := job.LeaseToken{Seq: 1}
	copy(want.Secret[:], bytes.Repeat([]byte{0xab}, job.SecretSize))
	if len(jobs) != 1 || jobs[0].LeaseToken != want {
		t.Fatalf("leased %v, want job %d with token %v", jobs, id, want)
	}
	for _, j := range []*job.Job{jobs[0], b.get(id)} {
		if j.State != job.StateLeased || j.LeaseToken != want || j.WorkerID != "w" || j.LeaseOwner != "tok_1" ||
			!j.LeaseExpiresAt.Equal(b.now.Add(time.Minute)) || j.Attempts != 0 {
			t.Fatalf("leased job %+v: want LEASED to w for tok_1 until %s with token %v and no attempt spent",
				j, b.now.Add(time.Minute), want)
		}
	}
	b.write(func(tx store.Tx) error { _, err := tx.JobRelease(refOf(jobs[0])); return err })
	again := b.lease(b.leaseParams(1, "t"))
	if len(again) != 1 || again[0].LeaseToken.Seq != 2 || again[0].LeaseToken.Secret == want.Secret {
		t.Fatalf("second lease token %v: want Seq 2 and a fresh secret", again[0].LeaseToken)
	}
	if j := b.get(id); j.LeaseToken != again[0].LeaseToken || j.LeaseOwner != "" {
		t.Fatalf("stored token %v owner %q, want %v and no owner", j.LeaseToken, j.LeaseOwner, again[0].LeaseToken)
	}
}

// JobStart moves a LEASED job to RUNNING and spends an attempt; stored again, it is reported
// applied and spends nothing more; for another attempt number it is stale.
func testJobStart(t *testing.T, b *bundle) {
	id := b.insert(b.job("t"))[0]
	ref := b.leaseOne("t")
	p := b.startParams(ref)
	p.Now = b.now.Add(time.Second)
	p.LeaseUntil, p.AttemptDeadline = b.now.Add(2*time.Minute), b.now.Add(3*time.Minute)
	for run := range 2 {
		b.write(func(tx store.Tx) error {
			ok, err := tx.JobStart(p)
			if err == nil && !ok {
				t.Errorf("start run %d refused", run+1)
			}
			return err
		})
		j := b.get(id)
		if j.State != job.StateRunning || j.Attempts != 1 || !j.StartedAt.Equal(p.Now) || !j.LeaseExpiresAt.Equal(p.LeaseUntil) {
			t.Fatalf("after start run %d: %s attempts %d started %s lease until %s", run+1, j.State, j.Attempts, j.StartedAt, j.LeaseExpiresAt)
		}
	}
	p.Attempt = 2
	b.write(func(tx store.Tx) error {
		ok, err := tx.JobStart(p)
		if ok {
			t.Errorf("start of attempt 2 over a stored start of attempt 1 applied")
		}
		return err
	})
	// The attempt deadline is what JobHeldExpired reads for a RUNNING job.
	b.write(func(tx store.Tx) error {
		for _, c := range []struct {
			at   time.Time
			want []int64
		}{{b.now.Add(3*time.Minute - time.Second), nil}, {b.now.Add(3 * time.Minute), []int64{id}}} {
			p.LeaseUntil = b.now.Add(time.Hour)
			if _, err := tx.JobExtendLeases([]job.LeaseRef{ref}, b.now, p.LeaseUntil); err != nil {
				return err
			}
			jobs, err := tx.JobHeldExpired(c.at, 10)
			if err != nil {
				return err
			}
			if c.want == nil {
				c.want = []int64{}
			}
			equal(t, "expired at "+c.at.String(), ids(jobs), c.want)
		}
		return nil
	})
}

// JobFinish records the attempt and moves the job on: a success to SUCCEEDED with the attempt
// in its history, a failure to its next state with the error kept, a death with its reason.
// Stored again after it applied, it is reported applied and counts once.
func testJobFinish(t *testing.T, b *bundle) {
	got := b.insert(b.job("t"), b.job("t"), b.job("t"))
	refs := make([]job.LeaseRef, 3)
	for i := range refs {
		refs[i] = b.leaseOne("t")
		b.start(refs[i])
	}
	success := b.finishParams(refs[0], job.StateSucceeded)
	success.Attempt.FinishedAt, success.Now = b.now.Add(time.Second), b.now.Add(time.Second)
	retry := b.finishParams(refs[1], job.StateScheduled)
	retry.Attempt.Details = "stack"
	dead := b.finishParams(refs[2], job.StateDead)
	for range 2 {
		for _, p := range []*store.JobFinishParams{success, retry, dead} {
			b.finish(p)
		}
	}
	j := b.get(got[0])
	if j.State != job.StateSucceeded || !j.FinishedAt.Equal(success.Now) || j.Attempts != 1 || len(j.History) != 1 {
		t.Fatalf("succeeded job: %s finished %s attempts %d history %v", j.State, j.FinishedAt, j.Attempts, j.History)
	}
	equal(t, "successful attempt", j.History[0], job.Attempt{Number: 1, WorkerID: "w", StartedAt: b.now,
		FinishedAt: success.Now, Outcome: job.OutcomeSucceeded})

	j = b.get(got[1])
	if j.State != job.StateScheduled || !j.RunAt.Equal(retry.RunAt) || !j.FinishedAt.IsZero() || j.LastErrorType != "Timeout" ||
		j.LastErrorMessage != "upstream timed out" || j.Attempts != 1 {
		t.Fatalf("retried job: %+v", j)
	}
	equal(t, "failed attempt", j.History, []job.Attempt{{Number: 1, WorkerID: "w", StartedAt: b.now, FinishedAt: b.now,
		Outcome: job.OutcomeFailed, FailureKind: job.KindTransient, ErrorType: "Timeout", Message: "upstream timed out", Details: "stack"}})

	j = b.get(got[2])
	if j.State != job.StateDead || j.DeadReason != job.DeadMaxAttemptsExhausted || !j.FinishedAt.Equal(b.now) || len(j.History) != 1 {
		t.Fatalf("dead job: %+v", j)
	}
	equal(t, "counts", b.counts(), []store.StateCount{
		{Queue: "default", Type: "t", State: job.StateScheduled, Count: 1},
		{Queue: "default", Type: "t", State: job.StateSucceeded, Count: 1},
		{Queue: "default", Type: "t", State: job.StateDead, Count: 1},
	})
	// A failure without an error type keeps the last one known; a retry to PENDING sets run_at.
	b.write(func(tx store.Tx) error { _, err := tx.JobPromoteScheduled(b.now.Add(time.Hour)); return err })
	ref := b.leaseOne("t")
	p := b.startParams(ref)
	p.Attempt = 2
	b.write(func(tx store.Tx) error { _, err := tx.JobStart(p); return err })
	again := b.finishParams(ref, job.StatePending)
	again.Attempt.Number, again.Attempt.ErrorType, again.Attempt.Message = 2, "", ""
	again.Attempt.Outcome = job.OutcomeLeaseExpired
	again.RunAt = b.now.Add(2 * time.Hour)
	b.finish(again)
	j = b.get(got[1])
	if j.State != job.StatePending || !j.RunAt.Equal(again.RunAt) || j.LastErrorType != "Timeout" || j.Attempts != 2 || len(j.History) != 2 ||
		j.History[1].Outcome != job.OutcomeLeaseExpired {
		t.Fatalf("job retried a second time: %+v", j)
	}
}

// A job whose user code never ran under its lease (JobFinishParams.Unstarted) goes dead
// without an attempt record: its count stays, its error is the job's last one, and the
// totals count it dead. Repeated, the write finds itself applied.
func testJobFinishUnstarted(t *testing.T, b *bundle) {
	id := b.insert(b.job("t"))[0]
	p := b.finishParams(b.leaseOne("t"), job.StateDead)
	p.Unstarted, p.DeadReason = true, job.DeadFatal
	p.Attempt = job.Attempt{Number: 0, WorkerID: "w", FinishedAt: b.now, Outcome: job.OutcomeFailed,
		FailureKind: job.KindFatal, ErrorType: "AssignmentTooLarge", Message: "too large"}
	b.finish(p)
	b.finish(p)
	j := b.get(id)
	if j.State != job.StateDead || j.DeadReason != job.DeadFatal || j.Attempts != 0 || len(j.History) != 0 ||
		j.LastErrorType != "AssignmentTooLarge" || j.LastErrorMessage != "too large" || !j.FinishedAt.Equal(b.now) {
		t.Fatalf("job dead unstarted: %s (%v) attempts %d history %+v, last error %s: %s, finished %s",
			j.State, j.DeadReason, j.Attempts, j.History, j.LastErrorType, j.LastErrorMessage, j.FinishedAt)
	}
	equal(t, "counts", b.counts(), []store.StateCount{{Queue: "default", Type: "t", State: job.StateDead, Count: 1}})
}

// JobSucceedMany applies the results under current leases and reports which; the totals count
// each applied result once, however the batch is made up.
func testJobSucceedMany(t *testing.T, b *bundle) {
	for i, n := range []int{1, 3, 6, 40, 1, 3, 6, 40} {
		atCommit := i >= 4 // the same through JobSucceedManyAtCommit
		succeedMany := func(batch []*store.JobFinishParams) (applied []bool) {
			calls := 0
			b.write(func(tx store.Tx) error {
				if !atCommit {
					var err error
					applied, err = tx.JobSucceedMany(batch)
					return err
				}
				return tx.JobSucceedManyAtCommit(batch, func(a []bool, err error) {
					applied, calls = a, calls+1
					if err != nil {
						t.Errorf("JobSucceedManyAtCommit: %v", err)
					}
				})
			})
			if atCommit && calls != 1 {
				t.Fatalf("JobSucceedManyAtCommit called got %d times, want once", calls)
			}
			return applied
		}
		var ps []*store.JobInsertParams
		for range n {
			ps = append(ps, b.job("t"))
		}
		b.insert(ps...)
		jobs := b.lease(b.leaseParams(n, "t"))
		var fs []*store.JobFinishParams
		for i, j := range jobs {
			if i%2 == 0 {
				b.start(refOf(j))
			}
			fs = append(fs, b.finishParams(refOf(j), job.StateSucceeded))
		}
		stale := b.finishParams(job.LeaseRef{JobID: jobs[0].ID, Token: job.LeaseToken{Seq: 9}}, job.StateSucceeded)
		batch := append([]*store.JobFinishParams{stale}, fs...)
		applied := succeedMany(batch)
		want := make([]bool, len(batch))
		for i := 1; i < len(want); i++ {
			want[i] = true
		}
		equal(t, "applied", applied, want)
		// The same batch again: acknowledged, counted once.
		equal(t, "applied again", succeedMany(batch), want)
		for _, j := range jobs {
			if got := b.get(j.ID); got.State != job.StateSucceeded || got.Attempts != 1 {
				t.Fatalf("job %d after JobSucceedMany: %s attempts %d", j.ID, got.State, got.Attempts)
			}
		}
	}
	equal(t, "counts", b.counts(), []store.StateCount{{Queue: "default", Type: "t", State: job.StateSucceeded, Count: 100}})
}

// JobRelease hands a LEASED job back without spending an attempt; a RUNNING one is not
// released.
func testJobRelease(t *testing.T, b *bundle) {
	got := b.insert(b.job("t"), b.job("t"))
	leased := b.leaseOne("t")
	running := b.leaseOne("t")
	b.start(running)
	for run := range 2 {
		b.write(func(tx store.Tx) error {
			ok, err := tx.JobRelease(leased)
			if err == nil && !ok {
				t.Errorf("release run %d refused", run+1)
			}
			return err
		})
	}
	if j := b.get(got[0]); j.State != job.StatePending || j.Attempts != 0 || !j.LeaseExpiresAt.IsZero() || j.WorkerID != "" {
		t.Fatalf("released job: %s attempts %d lease until %s worker %q", j.State, j.Attempts, j.LeaseExpiresAt, j.WorkerID)
	}
	b.write(func(tx store.Tx) error {
		ok, err := tx.JobRelease(running)
		if ok {
			t.Errorf("a RUNNING job was released")
		}
		return err
	})
	if st := b.state(got[1]); st != job.StateRunning {
		t.Fatalf("running job is %s after a refused release", st)
	}
}

// JobExtendLeases moves the deadline of every current lease it is given, and reports those.
func testJobExtendLeases(t *testing.T, b *bundle) {
	got := b.insert(b.job("t"), b.job("t"), b.job("t"))
	leased, running, done := b.leaseOne("t"), b.leaseOne("t"), b.leaseOne("t")
	b.start(running)
	b.start(done)
	b.finish(b.finishParams(done, job.StateSucceeded))
	until := b.now.Add(time.Hour)
	stale := leased
	stale.Token.Secret[0] ^= 1
	var out []job.LeaseRef
	b.write(func(tx store.Tx) error {
		var err error
		out, err = tx.JobExtendLeases([]job.LeaseRef{leased, stale, running, done}, b.now, until)
		return err
	})
	equal(t, "extended", out, []job.LeaseRef{leased, running})
	for _, id := range got[:2] {
		if j := b.get(id); !j.LeaseExpiresAt.Equal(until) {
			t.Fatalf("job %d lease until %s, want %s", id, j.LeaseExpiresAt, until)
		}
	}
	b.write(func(tx store.Tx) error {
		out, err := tx.JobExtendLeases(nil, b.now, until)
		if len(out) != 0 {
			t.Errorf("extending no leases extended %v", out)
		}
		return err
	})
}

// JobExtendLeases leaves a lease that ran out as it is: at its deadline or after it, the lease
// is over (JobHeldExpired lists it from that moment), even while no sweep has ended it yet, so
// an extension read late revives nothing. A nanosecond before the deadline it is extended.
func testJobExtendLeasesRunOut(t *testing.T, b *bundle) {
	got := b.insert(b.job("t"), b.job("t"), b.job("t"))
	// Each lease, and the start, runs until a minute from b.now.
	leased, long, running := b.leaseOne("t"), b.leaseOne("t"), b.leaseOne("t")
	b.start(running)
	deadline := b.now.Add(time.Minute)
	extend := func(now, until time.Time, refs ...job.LeaseRef) []job.LeaseRef {
		t.Helper()
		var out []job.LeaseRef
		b.write(func(tx store.Tx) error {
			var err error
			out, err = tx.JobExtendLeases(refs, now, until)
			return err
		})
		return out
	}
	// long's lease is extended well past the others' deadline, so that each batch below mixes a
	// current lease with run-out ones.
	equal(t, "extended at the start", extend(b.now, b.now.Add(2*time.Hour), long), []job.LeaseRef{long})
	before := map[int64]*job.Job{got[0]: b.get(got[0]), got[2]: b.get(got[2])}
	for _, at := range []time.Time{deadline, deadline.Add(time.Nanosecond), deadline.Add(time.Hour)} {
		late := at.Sub(deadline)
		equal(t, fmt.Sprintf("extended %s after the deadline", late),
			extend(at, at.Add(2*time.Hour), leased, long, running), []job.LeaseRef{long})
		for id, was := range before {
			if j := b.get(id); !reflect.DeepEqual(j, was) {
				t.Fatalf("job %d changed by an extension %s after its lease ran out:\n got %+v\nwant %+v",
					id, late, j, was)
			}
		}
	}
	until := deadline.Add(time.Hour)
	equal(t, "extended just before the deadline", extend(deadline.Add(-time.Nanosecond), until, leased, running),
		[]job.LeaseRef{leased, running})
	for _, id := range []int64{got[0], got[2]} {
		if j := b.get(id); !j.LeaseExpiresAt.Equal(until) || !j.State.Held() {
			t.Fatalf("job %d: %s, lease until %s; want held until %s", id, j.State, j.LeaseExpiresAt, until)
		}
	}
}

// JobGetHeld reads a job only under its current lease.
func testJobGetHeld(t *testing.T, b *bundle) {
	id := b.insert(b.job("t"))[0]
	ref := b.leaseOne("t")
	b.write(func(tx store.Tx) error {
		j, err := tx.JobGetHeld(ref)
		if err != nil {
			return err
		}
		if j.ID != id || j.State != job.StateLeased || j.LeaseToken != ref.Token || string(j.Payload) != `{}` {
			t.Errorf("JobGetHeld: %+v", j)
		}
		if _, err := tx.JobGetHeld(job.LeaseRef{JobID: id + 1, Token: ref.Token}); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("JobGetHeld of another job: %v, want ErrNotFound", err)
		}
		return nil
	})
	b.start(ref)
	b.finish(b.finishParams(ref, job.StateSucceeded))
	b.write(func(tx store.Tx) error {
		if _, err := tx.JobGetHeld(ref); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("JobGetHeld of a finished job: %v, want ErrNotFound", err)
		}
		return nil
	})
}

// JobCancel cancels an unfinished job and returns it as it was; a running job's attempt is
// recorded as cancelled; a finished job is returned unchanged; a missing one is ErrNotFound.
func testJobCancel(t *testing.T, b *bundle) {
	later := b.job("t")
	later.RunAt = b.now.Add(time.Hour)
	got := b.insert(b.job("t"), b.job("t"), later)
	running := b.leaseOne("t")
	b.start(running)
	at := b.now.Add(time.Second)
	b.write(func(tx store.Tx) error {
		for i, want := range []job.State{job.StateRunning, job.StatePending, job.StateScheduled} {
			before, err := tx.JobCancel(got[i], at)
			if err != nil {
				return err
			}
			if before.ID != got[i] || before.State != want {
				t.Errorf("JobCancel(%d) returned %d in %s, want it as it was, %s", got[i], before.ID, before.State, want)
			}
		}
		again, err := tx.JobCancel(got[1], at.Add(time.Second))
		if err == nil && (again.State != job.StateCancelled || !again.FinishedAt.Equal(at)) {
			t.Errorf("cancel of a cancelled job returned %s finished %s, want it unchanged", again.State, again.FinishedAt)
		}
		if _, err := tx.JobCancel(got[2]+100, at); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("cancel of a missing job: %v, want ErrNotFound", err)
		}
		return err
	})
	for _, id := range got {
		if j := b.get(id); j.State != job.StateCancelled || !j.FinishedAt.Equal(at) {
			t.Fatalf("job %d: %s finished %s, want CANCELLED at %s", id, j.State, j.FinishedAt, at)
		}
	}
	equal(t, "cancelled attempt", b.get(got[0]).History, []job.Attempt{{Number: 1, WorkerID: "w", StartedAt: b.now,
		FinishedAt: at, Outcome: job.OutcomeCancelled, Message: "cancelled while running"}})
	// The lease of a cancelled job is gone: its result is stale.
	b.write(func(tx store.Tx) error {
		ok, err := tx.JobFinish(b.finishParams(running, job.StateSucceeded))
		if ok {
			t.Errorf("a result for a cancelled job applied")
		}
		return err
	})
	equal(t, "counts", b.counts(), []store.StateCount{{Queue: "default", Type: "t", State: job.StateCancelled, Count: 3}})
}

// JobPromoteScheduled makes SCHEDULED jobs whose run_at has come PENDING; JobNextScheduledAt
// is the earliest run_at still waiting.
func testJobPromoteScheduled(t *testing.T, b *bundle) {
	at := func(d time.Duration) *store.JobInsertParams {
		p := b.job("t")
		p.RunAt = b.now.Add(d)
		return p
	}
	got := b.insert(at(2*time.Minute), at(time.Minute), at(time.Hour), b.job("t"))
	step := func(now time.Time, wantPromoted int, wantNext time.Time) {
		t.Helper()
		b.write(func(tx store.Tx) error {
			n, err := tx.JobPromoteScheduled(now)
			if err != nil {
				return err
			}
			if n != wantPromoted {
				t.Errorf("promoted %d at %s, want %d", n, now, wantPromoted)
			}
			next, ok, err := tx.JobNextScheduledAt()
			if ok != !wantNext.IsZero() || !next.Equal(wantNext) {
				t.Errorf("next scheduled at %s (%v), want %s", next, ok, wantNext)
			}
			return err
		})
	}
	step(b.now, 0, b.now.Add(time.Minute))
	step(b.now.Add(time.Minute), 1, b.now.Add(2*time.Minute))
	step(b.now.Add(10*time.Minute), 1, b.now.Add(time.Hour))
	equal(t, "ready in order", ids(b.lease(b.leaseParams(5, "t"))), []int64{got[3], got[1], got[0]})
	step(b.now.Add(time.Hour), 1, time.Time{})
	if st := b.state(got[2]); st != job.StatePending {
		t.Fatalf("promoted job is %s", st)
	}
}

// JobHeldExpired lists held jobs whose lease ran out, or whose attempt deadline passed while
// RUNNING, in id order and at most limit.
func testJobHeldExpired(t *testing.T, b *bundle) {
	got := b.insert(b.job("t"), b.job("t"), b.job("t"), b.job("t"))
	short := b.leaseParams(1, "t")
	short.LeaseUntil = b.now.Add(10 * time.Second)
	l0 := b.lease(short)[0]
	b.leaseOne("t")
	r2 := b.leaseOne("t")
	p := b.startParams(r2)
	p.LeaseUntil, p.AttemptDeadline = b.now.Add(time.Hour), b.now.Add(20*time.Second)
	b.write(func(tx store.Tx) error { _, err := tx.JobStart(p); return err })
	expired := func(now time.Time, limit int) []int64 {
		t.Helper()
		var out []int64
		b.write(func(tx store.Tx) error {
			jobs, err := tx.JobHeldExpired(now, limit)
			out = ids(jobs)
			return err
		})
		return out
	}
	equal(t, "before any deadline", expired(b.now, 10), []int64{})
	equal(t, "lease ran out", expired(b.now.Add(10*time.Second), 10), []int64{l0.ID})
	equal(t, "attempt deadline passed", expired(b.now.Add(30*time.Second), 10), []int64{got[0], got[2]})
	equal(t, "all", expired(b.now.Add(time.Minute), 10), []int64{got[0], got[1], got[2]})
	equal(t, "limit", expired(b.now.Add(time.Minute), 2), []int64{got[0], got[1]})
	if j := b.get(got[3]); j.State != job.StatePending {
		t.Fatalf("unleased job is %s", j.State)
	}
}

// JobReleaseAllLeased hands back every LEASED job; JobListRunning lists the RUNNING ones.
func testJobReleaseAllLeasedAndListRunning(t *testing.T, b *bundle) {
	got := b.insert(b.job("t"), b.job("t"), b.job("t"), b.job("t"))
	b.leaseOne("t")
	b.leaseOne("t")
	running := b.leaseOne("t")
	b.start(running)
	b.write(func(tx store.Tx) error {
		n, err := tx.JobReleaseAllLeased()
		if err != nil {
			return err
		}
		if n != 2 {
			t.Errorf("released %d, want 2", n)
		}
		jobs, err := tx.JobListRunning()
		if err != nil {
			return err
		}
		equal(t, "running", ids(jobs), []int64{got[2]})
		if jobs[0].State != job.StateRunning || jobs[0].LeaseToken != running.Token || len(jobs[0].Payload) != 0 {
			t.Errorf("running job %+v: want RUNNING under its token, without payload", jobs[0])
		}
		return nil
	})
	equal(t, "states", []job.State{b.state(got[0]), b.state(got[1]), b.state(got[2]), b.state(got[3])},
		[]job.State{job.StatePending, job.StatePending, job.StateRunning, job.StatePending})
}
