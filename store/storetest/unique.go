package storetest

import (
	"testing"
	"time"

	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/job/unique"
	"github.com/jobwire/jobwire/store"
)

var _ = register(
	testCase{"UniqueKeyHeldWhileInItsStates", testUniqueKeyHeldWhileInItsStates},
	testCase{"UniqueKeyKeptAfterFinishWhenItsStatesSay", testUniqueKeyKeptAfterFinish},
	testCase{"UniqueKeyAfterIdempotencyKey", testUniqueAfterIdempotency},
	testCase{"UniqueKeyOfRequeuedJobAlreadyTaken", testUniqueRequeueTaken},
	testCase{"UniqueKeyInALargeInsert", testUniqueLargeInsert},
)

// Jobs with a unique key are never inserted many to a statement, which would skip the key:
// among many inserts of one key in one call, the first is stored and the rest answered with it.
func testUniqueLargeInsert(t *testing.T, b *bundle) {
	ps := make([]*store.JobInsertParams, 70)
	for i := range ps {
		ps[i] = b.uniqueJob("k", waitingMask)
		if i%2 == 1 {
			ps[i] = b.job("t")
		}
	}
	res := b.insertResults(ps...)
	stored := 0
	for i, r := range res {
		if i%2 == 0 && i > 0 && (!r.Duplicate || r.ID != res[0].ID) {
			t.Fatalf("insert %d of the key: %+v, want a duplicate of job %d", i, r, res[0].ID)
		}
		if !r.Duplicate {
			stored++
		}
	}
	equal(t, "jobs stored", stored, 36)
}

// waitingMask is the states a unique job holds its key in by default: while it waits or runs.
// maskOf is states as a store keeps them with a job.
func maskOf(states []job.State) int { return int(unique.MaskOf(states)) }

var waitingMask = maskOf([]job.State{job.StateScheduled, job.StatePending, job.StateLeased, job.StateRunning})

// uniqueJob is an insert of a job of type "t" with unique key key, held in the states of mask.
func (b *bundle) uniqueJob(key string, mask int) *store.JobInsertParams {
	p := b.job("t")
	p.UniqueKey, p.UniqueStates = key, mask
	return p
}

// insertResults inserts ps in one call and returns what became of each.
func (b *bundle) insertResults(ps ...*store.JobInsertParams) []store.JobInsertResult {
	b.t.Helper()
	var res []store.JobInsertResult
	b.write(func(tx store.Tx) error {
		var err error
		res, err = tx.JobInsertMany(ps)
		return err
	})
	return res
}

// A job holds its unique key while it waits, is leased or runs, whatever the content of a
// later insert: that insert is answered with it. Once it succeeds, the key is free again.
func testUniqueKeyHeldWhileInItsStates(t *testing.T, b *bundle) {
	first := b.uniqueJob("k1", waitingMask)
	id := b.insert(first)[0]
	j := b.get(id)
	equal(t, "stored unique key", j.UniqueKey, "k1")
	equal(t, "stored unique states", j.UniqueStates, unique.Mask(waitingMask).States())

	other := b.uniqueJob("k1", waitingMask)
	other.Payload, other.Priority = []byte(`{"other":true}`), 9
	other.RunAt = b.now.Add(time.Hour)
	want := store.JobInsertResult{ID: id, Duplicate: true, Unique: true, State: job.StatePending, RunAt: b.now}
	equal(t, "insert of a held key", b.insertResults(other)[0], want)

	// Within one call too, and beside a job of another key and one of none.
	k2 := b.uniqueJob("k2", waitingMask)
	k2.Type = "u"
	res := b.insertResults(k2, k2, b.job("u"))
	equal(t, "second insert of a key in one call", res[1], store.JobInsertResult{ID: res[0].ID, Duplicate: true,
		Unique: true, State: job.StatePending, RunAt: b.now})
	if res[0].Duplicate || res[2].Duplicate || res[2].ID == res[0].ID {
		t.Fatalf("results %+v: want the first and the last stored", res)
	}

	ref := b.leaseOne("t")
	if ref.JobID != id {
		t.Fatalf("leased job %d, want %d", ref.JobID, id)
	}
	want.State = job.StateLeased
	equal(t, "insert while the holder is LEASED", b.insertResults(b.uniqueJob("k1", waitingMask))[0], want)
	b.start(ref)
	want.State = job.StateRunning
	equal(t, "insert while the holder is RUNNING", b.insertResults(b.uniqueJob("k1", waitingMask))[0], want)

	// A retry keeps the key: the job goes back to SCHEDULED, in its states.
	b.finish(b.finishParams(ref, job.StateScheduled))
	want.State, want.RunAt = job.StateScheduled, b.now.Add(time.Minute)
	equal(t, "insert while the holder waits to retry", b.insertResults(b.uniqueJob("k1", waitingMask))[0], want)

	b.write(func(tx store.Tx) error { _, err := tx.JobPromoteScheduled(b.now.Add(time.Minute)); return err })
	b.now = b.now.Add(time.Minute)
	ref = b.leaseOne("t")
	b.start(ref)
	p := b.finishParams(ref, job.StateSucceeded)
	p.Attempt.Number = 2
	b.finish(p)
	next := b.insertResults(b.uniqueJob("k1", waitingMask))[0]
	if next.Duplicate || next.ID == id {
		t.Fatalf("insert after the holder succeeded: %+v, want a new job", next)
	}
}

// A key held in final states too stays taken once its job finished.
func testUniqueKeyKeptAfterFinish(t *testing.T, b *bundle) {
	all := maskOf([]job.State{job.StateScheduled, job.StatePending, job.StateLeased, job.StateRunning,
		job.StateSucceeded, job.StateDead, job.StateCancelled})
	id := b.insert(b.uniqueJob("k", all))[0]
	ref := b.leaseOne("t")
	b.start(ref)
	b.finish(b.finishParams(ref, job.StateSucceeded))
	got := b.insertResults(b.uniqueJob("k", all))[0]
	equal(t, "insert after the holder succeeded", got, store.JobInsertResult{ID: id, Duplicate: true, Unique: true,
		State: job.StateSucceeded, RunAt: b.now})
}

// An insert with both keys is a repeat of its request first: the idempotency key answers.
// Another request for the same work is answered by the unique key.
func testUniqueAfterIdempotency(t *testing.T, b *bundle) {
	p := b.uniqueJob("k", waitingMask)
	p.IdempotencyKey = "req-1"
	id := b.insert(p)[0]
	again := *p
	equal(t, "repeat of the request", b.insertResults(&again)[0], store.JobInsertResult{ID: id, Duplicate: true,
		State: job.StatePending, RunAt: b.now})
	other := *p
	other.IdempotencyKey = "req-2"
	equal(t, "another request for the same work", b.insertResults(&other)[0], store.JobInsertResult{ID: id,
		Duplicate: true, Unique: true, State: job.StatePending, RunAt: b.now})
}

// A dead job requeued while another job holds its unique key runs without the key, rather
// than failing the requeue or not running; of two dead jobs of one key requeued together,
// the first (by id) keeps it.
func testUniqueRequeueTaken(t *testing.T, b *bundle) {
	kill := func() int64 {
		ref := b.leaseOne("t")
		b.start(ref)
		b.finish(b.finishParams(ref, job.StateDead))
		return ref.JobID
	}
	b.insert(b.uniqueJob("k", waitingMask))
	dead1 := kill()
	b.insert(b.uniqueJob("k", waitingMask))
	dead2 := kill()
	b.insert(b.uniqueJob("free", waitingMask))
	dead3 := kill()
	holder := b.insert(b.uniqueJob("k", waitingMask))[0]

	var n int
	b.write(func(tx store.Tx) error {
		var err error
		n, err = tx.JobRequeue(&store.JobRequeueParams{IDs: []int64{dead1, dead2, dead3}, RunAt: b.now, Now: b.now})
		return err
	})
	equal(t, "requeued", n, 3)
	equal(t, "the holder's key", b.get(holder).UniqueKey, "k")
	equal(t, "the requeued jobs' keys", []string{b.get(dead1).UniqueKey, b.get(dead2).UniqueKey, b.get(dead3).UniqueKey},
		[]string{"", "", "free"})
	for _, id := range []int64{dead1, dead2, dead3} {
		equal(t, "state of a requeued job", b.state(id), job.StatePending)
	}

	// Two dead jobs of a key no job holds: the first keeps it.
	z := func() int64 {
		p := b.uniqueJob("z", waitingMask)
		p.Type = "z"
		b.insert(p)
		ref := b.leaseOne("z")
		b.start(ref)
		fp := b.finishParams(ref, job.StateDead)
		fp.Type = "z"
		b.finish(fp)
		return ref.JobID
	}
	z1, z2 := z(), z()
	b.write(func(tx store.Tx) error {
		_, err := tx.JobRequeue(&store.JobRequeueParams{IDs: []int64{z2, z1}, RunAt: b.now, Now: b.now})
		return err
	})
	equal(t, "keys of two dead jobs of one key requeued together", []string{b.get(z1).UniqueKey, b.get(z2).UniqueKey}, []string{"z", ""})
}
