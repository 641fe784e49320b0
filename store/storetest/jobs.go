package storetest

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/store"
)

var _ = register(
	testCase{"InsertAndGet", testInsertAndGet},
	testCase{"InsertIDsNeverReused", testInsertIDsNeverReused},
	testCase{"IdempotencyKeys", testIdempotencyKeys},
	testCase{"IdempotencyConflictInOneCall", testIdempotencyConflictInOneCall},
	testCase{"WriteRollsBackOnError", testWriteRollsBackOnError},
	testCase{"Isolated", testIsolated},
	testCase{"JobList", testJobList},
	testCase{"JobGetManyAndStates", testJobGetManyAndStates},
)

// Every field of an insert is stored and read back; a job due later is SCHEDULED.
func testInsertAndGet(t *testing.T, b *bundle) {
	due := b.job("email.send")
	due.Queue, due.Payload, due.Priority, due.MaxAttempts, due.AttemptTimeout = "mail", []byte(`{"to":"ada"}`), 7, 5, 90*time.Second
	due.Metadata = map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "tenant": "é"}
	later := b.job("email.send")
	later.RunAt = b.now.Add(time.Hour)
	empty := b.job("t")
	empty.Payload = nil
	var res []store.JobInsertResult
	b.write(func(tx store.Tx) error {
		var err error
		res, err = tx.JobInsertMany([]*store.JobInsertParams{due, later, empty})
		return err
	})
	if len(res) != 3 || !(res[0].ID < res[1].ID && res[1].ID < res[2].ID) {
		t.Fatalf("results %+v: want three ids, increasing in insert order", res)
	}
	equal(t, "first result", res[0], store.JobInsertResult{ID: res[0].ID, State: job.StatePending, RunAt: b.now})
	equal(t, "second result", res[1], store.JobInsertResult{ID: res[1].ID, State: job.StateScheduled, RunAt: later.RunAt})

	j := b.get(res[0].ID)
	want := job.Job{ID: res[0].ID, Type: "email.send", Queue: "mail", Payload: []byte(`{"to":"ada"}`), Priority: 7,
		State: job.StatePending, MaxAttempts: 5, RunAt: b.now, CreatedAt: b.now, AttemptTimeout: 90 * time.Second,
		Metadata: due.Metadata}
	equal(t, "stored job", *j, want)
	if j := b.get(res[1].ID); j.State != job.StateScheduled || !j.RunAt.Equal(later.RunAt) {
		t.Fatalf("job due later: state %s run_at %s, want SCHEDULED at %s", j.State, j.RunAt, later.RunAt)
	}
	leased := b.lease(b.leaseParams(1, "email.send"))
	if len(leased) != 1 || !reflect.DeepEqual(leased[0].Metadata, due.Metadata) {
		t.Fatalf("leased %+v: want the job with its metadata", leased)
	}
	if j := b.get(res[2].ID); j.Payload == nil || len(j.Payload) != 0 || j.Metadata != nil {
		t.Fatalf("job inserted without payload reads %q, want an empty, non-nil payload", j.Payload)
	}
	if _, err := b.s.JobGet(b.ctx, res[2].ID+100); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("JobGet of a missing job: %v, want ErrNotFound", err)
	}
	// Many jobs in one call (more than a store's multi-row chunk) keep the order of the call,
	// and each id names its own job.
	var many []*store.JobInsertParams
	for i := range 70 {
		p := b.job("bulk")
		p.Payload, p.Priority = fmt.Appendf(nil, `{"n":%d}`, i), i
		many = append(many, p)
	}
	got := b.insert(many...)
	for i := 1; i < len(got); i++ {
		if got[i] <= got[i-1] {
			t.Fatalf("ids of one call %v: want increasing", got)
		}
	}
	for i, id := range got {
		if j := b.get(id); !bytes.Equal(j.Payload, many[i].Payload) || j.Priority != i {
			t.Fatalf("job %d, the call's job %d: payload %s, priority %d; want %s, %d", id, i, j.Payload, j.Priority, many[i].Payload, i)
		}
	}
}

// A job id is never handed out twice, even after the job with the largest id was deleted.
func testInsertIDsNeverReused(t *testing.T, b *bundle) {
	first := b.insert(b.job("t"), b.job("t"))
	for range first {
		ref := b.leaseOne("t")
		b.start(ref)
		b.finish(b.finishParams(ref, job.StateSucceeded))
	}
	b.write(func(tx store.Tx) error {
		n, err := tx.JobDeleteFinished(&store.JobDeleteFinishedParams{States: []job.State{job.StateSucceeded},
			FinishedBefore: b.now.Add(time.Second), Limit: 10})
		if err == nil && n != 2 {
			t.Errorf("deleted %d jobs, want 2", n)
		}
		return err
	})
	next := b.insert(b.job("t"))
	if next[0] <= first[1] {
		t.Fatalf("a job inserted after job %d was deleted got id %d: ids must never be reused", first[1], next[0])
	}
}

// An idempotency key names one job of each type: the same request again is a duplicate
// answered with the job; other content under the key is a conflict; another type is free.
func testIdempotencyKeys(t *testing.T, b *bundle) {
	p := b.job("email.send")
	p.IdempotencyKey = "welcome-ada"
	id := b.insert(p)[0]

	again := *p
	again.Now, again.RunAt = b.now.Add(time.Second), b.now.Add(time.Second) // a schedule is not compared
	var res []store.JobInsertResult
	b.write(func(tx store.Tx) error {
		var err error
		res, err = tx.JobInsertMany([]*store.JobInsertParams{&again})
		return err
	})
	equal(t, "repeated insert", res[0], store.JobInsertResult{ID: id, Duplicate: true, State: job.StatePending, RunAt: b.now})

	other := *p
	other.Type = "sms.send"
	if got := b.insert(&other)[0]; got == id {
		t.Fatalf("the same key under another type answered with job %d, want a new job", id)
	}

	changed := *p
	changed.Payload, changed.Priority = []byte(`{"to":"bob"}`), 3
	before := b.counts()
	extra := b.job("t")
	err := b.s.Write(b.ctx, "storetest", func(tx store.Tx) error {
		if _, err := tx.JobInsertMany([]*store.JobInsertParams{extra}); err != nil {
			return err
		}
		_, err := tx.JobInsertMany([]*store.JobInsertParams{&changed})
		return err
	})
	var conflict *store.IdempotencyConflictError
	if !errors.As(err, &conflict) || !errors.Is(err, store.ErrIdempotencyConflict) {
		t.Fatalf("insert of other content under a taken key: %v, want an *IdempotencyConflictError", err)
	}
	equal(t, "conflict", *conflict, store.IdempotencyConflictError{Index: 0, Type: "email.send", Key: "welcome-ada",
		JobID: id, Fields: []string{"payload", "priority"}})
	equal(t, "counts after the failed write", b.counts(), before)

	// A key is free again once its job is gone.
	ref := b.leaseOne("email.send")
	b.start(ref)
	b.finish(b.finishParams(ref, job.StateSucceeded))
	b.write(func(tx store.Tx) error {
		_, err := tx.JobDeleteFinished(&store.JobDeleteFinishedParams{States: []job.State{job.StateSucceeded},
			FinishedBefore: b.now.Add(time.Second), Limit: 10})
		return err
	})
	if got := b.insert(&changed)[0]; got == id {
		t.Fatalf("key reused after its job was deleted answered with the deleted job %d", id)
	}
}

// A conflict is found between two inserts of one call too, and names the insert's position.
func testIdempotencyConflictInOneCall(t *testing.T, b *bundle) {
	p, q, r := b.job("t"), b.job("t"), b.job("t")
	q.IdempotencyKey, r.IdempotencyKey = "k", "k"
	r.Queue = "other"
	err := b.s.Write(b.ctx, "storetest", func(tx store.Tx) error {
		_, err := tx.JobInsertMany([]*store.JobInsertParams{p, q, r})
		return err
	})
	var conflict *store.IdempotencyConflictError
	if !errors.As(err, &conflict) || conflict.Index != 2 || conflict.Key != "k" || len(conflict.Fields) != 1 || conflict.Fields[0] != "queue" {
		t.Fatalf("conflict inside one call: %v (%+v), want index 2 and the queue named", err, conflict)
	}
	if c := b.counts(); len(c) != 0 {
		t.Fatalf("a write that failed left jobs behind: %v", c)
	}
	// Without the conflict, the same key twice in one call is one job and a duplicate.
	var res []store.JobInsertResult
	b.write(func(tx store.Tx) error {
		var err error
		res, err = tx.JobInsertMany([]*store.JobInsertParams{p, q, q})
		return err
	})
	if res[2].ID != res[1].ID || !res[2].Duplicate || res[1].Duplicate {
		t.Fatalf("the same key twice in one call: %+v, want the second a duplicate of the first", res)
	}
}

// A write whose function fails leaves nothing behind, and returns the function's error.
func testWriteRollsBackOnError(t *testing.T, b *bundle) {
	boom := errors.New("boom")
	err := b.s.Write(b.ctx, "storetest", func(tx store.Tx) error {
		if _, err := tx.JobInsertMany([]*store.JobInsertParams{b.job("t")}); err != nil {
			return err
		}
		if err := tx.QueueSetPaused("held", true); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Write = %v, want the function's error", err)
	}
	if c := b.counts(); len(c) != 0 {
		t.Fatalf("rolled back write left jobs: %v", c)
	}
	qs, err := b.s.QueueLoadAll(b.ctx)
	if err != nil || len(qs) != 0 {
		t.Fatalf("rolled back write left queues: %v, %v", qs, err)
	}
}

// Isolated undoes only its own part when it fails; the rest of the transaction commits.
func testIsolated(t *testing.T, b *bundle) {
	boom := errors.New("boom")
	var kept, undone []store.JobInsertResult
	b.write(func(tx store.Tx) error {
		var err error
		if kept, err = tx.JobInsertMany([]*store.JobInsertParams{b.job("kept")}); err != nil {
			return err
		}
		err = tx.Isolated(func() error {
			var err error
			if undone, err = tx.JobInsertMany([]*store.JobInsertParams{b.job("undone")}); err != nil {
				return err
			}
			return boom
		})
		var iso *store.IsolatedError
		if !errors.As(err, &iso) || !errors.Is(err, boom) {
			t.Errorf("Isolated = %v, want an *IsolatedError wrapping the part's error", err)
		}
		// A part that fails with a conflict is undone the same way.
		p := b.job("kept")
		p.IdempotencyKey = "k"
		q := *p
		q.Priority = 1
		if err := tx.Isolated(func() error { _, err := tx.JobInsertMany([]*store.JobInsertParams{p, &q}); return err }); !errors.As(err, &iso) {
			t.Errorf("Isolated with a conflict inside = %v, want an *IsolatedError", err)
		}
		// A queue first used by a part that failed is not remembered as existing.
		ghost := b.job("kept")
		ghost.Queue = "ghost"
		if err := tx.Isolated(func() error { _, _ = tx.JobInsertMany([]*store.JobInsertParams{ghost}); return boom }); !errors.As(err, &iso) {
			t.Errorf("Isolated = %v, want an *IsolatedError", err)
		}
		return tx.Isolated(func() error { return tx.QueueSetPaused("held", true) })
	})
	ghost := b.job("later")
	ghost.Queue = "ghost"
	b.insert(ghost)
	b.get(kept[0].ID)
	if len(undone) != 1 {
		t.Fatalf("the isolated part's insert gave %v", undone)
	}
	// What the failed parts wrote is gone: the counts hold no job of type "undone".
	equal(t, "counts", b.counts(), []store.StateCount{{Queue: "default", Type: "kept", State: job.StatePending, Count: 1},
		{Queue: "ghost", Type: "later", State: job.StatePending, Count: 1}})
	qs, err := b.s.QueueLoadAll(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	equal(t, "queues", qs, []store.QueueRecord{{Name: "default"}, {Name: "ghost"}, {Name: "held", Paused: true}})
}

// JobList filters by state, queue and type, lists newest first unless asked otherwise, pages by
// creation time and id, and leaves out payloads and history.
func testJobList(t *testing.T, b *bundle) {
	var ps []*store.JobInsertParams
	for i := range 6 {
		p := b.job([]string{"a", "b"}[i%2])
		p.Metadata = map[string]string{"k": "v"}
		p.Queue = []string{"q1", "q2", "q3"}[i%3]
		ps = append(ps, p)
	}
	all := b.insert(ps...)
	ref := b.leaseOne("a")
	list := func(p store.JobListParams) []int64 {
		t.Helper()
		if p.Limit == 0 {
			p.Limit = 100
		}
		p.Order.Asc = true
		jobs, err := b.s.JobList(b.ctx, &p)
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range jobs {
			if len(j.Payload) != 0 || j.History != nil || j.Metadata != nil {
				t.Fatalf("listed job %d carries a payload, metadata or history", j.ID)
			}
		}
		return ids(jobs)
	}
	newest, err := b.s.JobList(b.ctx, &store.JobListParams{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	equal(t, "newest first by default", ids(newest), []int64{all[5], all[4], all[3], all[2], all[1], all[0]})
	equal(t, "all, oldest first", list(store.JobListParams{}), all)
	equal(t, "page", list(store.JobListParams{After: &store.ListCursor{Int: b.now.UnixNano(), ID: all[1]}, Limit: 2}), all[2:4])
	equal(t, "type b", list(store.JobListParams{Type: "b"}), []int64{all[1], all[3], all[5]})
	equal(t, "queue q1", list(store.JobListParams{Queue: "q1"}), []int64{all[0], all[3]})
	equal(t, "leased", list(store.JobListParams{State: job.StateLeased}), []int64{ref.JobID})
	equal(t, "type a in q3", list(store.JobListParams{Type: "a", Queue: "q3"}), []int64{all[2]})

	// Lists are in creation order, not id order: brokers sharing a database draw ids in blocks,
	// so a job created later can have a smaller id than one created earlier on another broker.
	later, earlier := b.job("c"), b.job("c")
	later.Now, earlier.Now = b.now.Add(2*time.Second), b.now.Add(time.Second)
	c := append(b.insert(later), b.insert(earlier)...) // later gets the smaller id
	equal(t, "created in another order than their ids", list(store.JobListParams{Type: "c"}), []int64{c[1], c[0]})
	equal(t, "page after the one created first",
		list(store.JobListParams{Type: "c", After: &store.ListCursor{Int: earlier.Now.UnixNano(), ID: c[1]}}), []int64{c[0]})
}

// JobGetMany reads in the order asked, leaves out missing ids and lists a repeated one once;
// JobStates reads the state of each job that exists.
func testJobGetManyAndStates(t *testing.T, b *bundle) {
	got := b.insert(b.job("t"), b.job("t"), b.job("t"))
	b.leaseOne("t")
	ask := []int64{got[2], got[0] + 1000, got[0], got[2]}
	jobs, err := b.s.JobGetMany(b.ctx, ask)
	if err != nil {
		t.Fatal(err)
	}
	equal(t, "Store.JobGetMany", ids(jobs), []int64{got[2], got[0]})
	b.write(func(tx store.Tx) error {
		jobs, err := tx.JobGetMany(ask)
		if err != nil {
			return err
		}
		equal(t, "Tx.JobGetMany", ids(jobs), []int64{got[2], got[0]})
		states, err := tx.JobStates(append(ask, got[1]))
		equal(t, "JobStates", states, map[int64]job.State{got[0]: job.StateLeased, got[1]: job.StatePending, got[2]: job.StatePending})
		return err
	})
}
