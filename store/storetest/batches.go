package storetest

import (
	"errors"
	"strconv"
	"testing"

	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/store"
)

var _ = register(
	testCase{"BatchCompletesOnceWhenEveryJobIsFinal", testBatchCompletesOnce},
	testCase{"BatchAllSucceededRunsBothCallbacks", testBatchAllSucceeded},
	testCase{"BatchClosedWhenDoneCompletesAtClose", testBatchClosedWhenDone},
	testCase{"BatchAddRefusedWhenClosedOrMissing", testBatchAddRefused},
	testCase{"BatchListSelectsByState", testBatchList},
	testCase{"BatchCountsARequeuedJobAgain", testBatchRequeuedJob},
)

// batchOf creates a batch with both callbacks and n jobs of type "t" in it, closed when
// closed, and returns its id and its jobs' ids.
func (b *bundle) batchOf(n int, closed bool) (int64, []int64) {
	b.t.Helper()
	var id int64
	var jobs []int64
	b.write(func(tx store.Tx) error {
		var err error
		id, err = tx.BatchCreate(&store.BatchCreateParams{Description: "nightly", Now: b.now,
			OnSuccess:  &store.BatchCallback{Type: "on-success", Queue: "default", MaxAttempts: 1, Metadata: map[string]string{"k": "v"}},
			OnComplete: &store.BatchCallback{Type: "on-complete", Queue: "default", MaxAttempts: 1, Payload: []byte(`{"report":1}`)}})
		if err != nil {
			return err
		}
		var ps []*store.JobInsertParams
		for range n {
			ps = append(ps, b.job("t"))
		}
		res, err := tx.JobInsertMany(ps)
		if err != nil {
			return err
		}
		jobs = nil
		for _, r := range res {
			jobs = append(jobs, r.ID)
		}
		if err := tx.BatchAdd(id, jobs); err != nil {
			return err
		}
		if closed {
			_, err = tx.BatchClose(id, b.now)
		}
		return err
	})
	return id, jobs
}

func (b *bundle) batch(id int64) *store.Batch {
	b.t.Helper()
	got, err := b.s.BatchGet(b.ctx, id)
	if err != nil {
		b.t.Fatalf("BatchGet(%d): %v", id, err)
	}
	return got
}

// withBatch is p for a job of batch.
func withBatch(p *store.JobFinishParams, batch int64) *store.JobFinishParams {
	p.Batch = batch
	return p
}

func testBatchCompletesOnce(t *testing.T, b *bundle) {
	id, jobs := b.batchOf(4, true)
	equal(t, "job's batch", b.get(jobs[0]).BatchID, id)
	refs := b.lease(b.leaseParams(4, "t"))
	if len(refs) != 4 {
		t.Fatalf("leased %d jobs, want 4", len(refs))
	}
	ok := withBatch(b.finishParams(refOf(refs[0]), job.StateSucceeded), id)
	b.finish(ok)
	// The same success again (a repeated result) is applied, and counts nothing more.
	b.finish(ok)
	b.write(func(tx store.Tx) error {
		_, err := tx.JobSucceedMany([]*store.JobFinishParams{ok, withBatch(b.finishParams(refOf(refs[1]), job.StateSucceeded), id)})
		return err
	})
	b.finish(withBatch(b.finishParams(refOf(refs[2]), job.StateDead), id))
	got := b.batch(id)
	equal(t, "counts before the last", []int64{got.Total, got.Succeeded, got.Dead, got.Cancelled}, []int64{4, 2, 1, 0})
	equal(t, "complete before the last", got.Complete(), false)

	b.write(func(tx store.Tx) error { _, err := tx.JobCancel(refs[3].ID, b.now); return err })
	got = b.batch(id)
	equal(t, "counts", []int64{got.Total, got.Succeeded, got.Dead, got.Cancelled}, []int64{4, 2, 1, 1})
	equal(t, "complete", got.Complete(), true)
	equal(t, "success callback", got.SuccessJobID, int64(0))
	equal(t, "failed", got.FailedJobIDs, []int64{refs[2].ID, refs[3].ID})
	cb := b.get(got.CompleteJobID)
	equal(t, "callback type", cb.Type, "on-complete")
	equal(t, "callback state", cb.State, job.StatePending)
	equal(t, "callback payload", string(cb.Payload), `{"report":1}`)
	equal(t, "callback metadata", cb.Metadata, map[string]string{
		store.BatchMetaID: strconv.FormatInt(id, 10), store.BatchMetaCallback: "complete", store.BatchMetaTotal: "4",
		store.BatchMetaSucceeded: "2", store.BatchMetaDead: "1", store.BatchMetaCancelled: "1",
		store.BatchMetaFailed: strconv.FormatInt(refs[2].ID, 10) + "," + strconv.FormatInt(refs[3].ID, 10)})

	// A final write repeated after completion enqueues nothing again.
	b.finish(ok)
	b.write(func(tx store.Tx) error { _, err := tx.BatchClose(id, b.now); return err })
	again := b.batch(id)
	equal(t, "callback after repeats", again.CompleteJobID, got.CompleteJobID)
	equal(t, "jobs after repeats", len(b.lease(b.leaseParams(10, "on-complete", "on-success"))), 1)
}

func testBatchAllSucceeded(t *testing.T, b *bundle) {
	id, _ := b.batchOf(3, true)
	for _, j := range b.lease(b.leaseParams(3, "t")) {
		b.finish(withBatch(b.finishParams(refOf(j), job.StateSucceeded), id))
	}
	got := b.batch(id)
	if got.SuccessJobID == 0 || got.CompleteJobID == 0 {
		t.Fatalf("callbacks %d and %d, want both", got.SuccessJobID, got.CompleteJobID)
	}
	cb := b.get(got.SuccessJobID)
	equal(t, "success callback", []string{cb.Type, cb.Metadata["k"], cb.Metadata[store.BatchMetaSucceeded],
		cb.Metadata[store.BatchMetaFailed]}, []string{"on-success", "v", "3", ""})
}

func testBatchClosedWhenDone(t *testing.T, b *bundle) {
	id, _ := b.batchOf(2, false)
	for _, j := range b.lease(b.leaseParams(2, "t")) {
		b.finish(withBatch(b.finishParams(refOf(j), job.StateSucceeded), id))
	}
	got := b.batch(id)
	equal(t, "open batch", []any{got.Open(), got.Complete(), got.Total, got.Succeeded}, []any{true, false, int64(2), int64(2)})
	b.write(func(tx store.Tx) error { _, err := tx.BatchClose(id, b.now); return err })
	got = b.batch(id)
	equal(t, "closed batch complete", got.Complete(), true)
	if got.SuccessJobID == 0 {
		t.Fatal("no success callback")
	}
}

func testBatchAddRefused(t *testing.T, b *bundle) {
	id, _ := b.batchOf(1, true)
	add := func(batch int64) error {
		return b.s.Write(b.ctx, "storetest", func(tx store.Tx) error {
			res, err := tx.JobInsertMany([]*store.JobInsertParams{b.job("t")})
			if err != nil {
				return err
			}
			return tx.BatchAdd(batch, []int64{res[0].ID})
		})
	}
	if err := add(id); !errors.Is(err, store.ErrBatchClosed) {
		t.Fatalf("add to a closed batch: %v, want ErrBatchClosed", err)
	}
	if err := add(id + 1000); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("add to no batch: %v, want ErrNotFound", err)
	}
	if _, err := b.s.BatchGet(b.ctx, id+1000); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("BatchGet of no batch: %v, want ErrNotFound", err)
	}
	var closeErr error
	_ = b.s.Write(b.ctx, "storetest", func(tx store.Tx) error {
		_, closeErr = tx.BatchClose(id+1000, b.now)
		return nil
	})
	if !errors.Is(closeErr, store.ErrNotFound) {
		t.Fatalf("close of no batch: %v, want ErrNotFound", closeErr)
	}
}

func testBatchList(t *testing.T, b *bundle) {
	open, _ := b.batchOf(1, false)
	closed, _ := b.batchOf(1, true)
	done, _ := b.batchOf(0, true)
	list := func(p store.BatchListParams) []int64 {
		p.Limit = 10
		got, err := b.s.BatchList(b.ctx, &p)
		if err != nil {
			t.Fatal(err)
		}
		var out []int64
		for _, x := range got {
			out = append(out, x.ID)
		}
		return out
	}
	equal(t, "all", list(store.BatchListParams{}), []int64{done, closed, open})
	equal(t, "open", list(store.BatchListParams{Open: true}), []int64{open})
	equal(t, "closed", list(store.BatchListParams{Closed: true}), []int64{closed})
	equal(t, "complete", list(store.BatchListParams{Complete: true}), []int64{done})
	equal(t, "before", list(store.BatchListParams{Before: closed}), []int64{open})
}

// A dead job of a batch requeued from the dead-letter queue leaves the batch's dead count in
// the requeue's transaction, and is counted again by how its new run ends: the batch whose
// jobs then all succeeded runs both callbacks, once each.
func testBatchRequeuedJob(t *testing.T, b *bundle) {
	id, jobs := b.batchOf(2, true)
	first := b.leaseOne("t")
	b.finish(withBatch(b.finishParams(first, job.StateDead), id))
	equal(t, "dead", b.batch(id).Dead, int64(1))
	b.write(func(tx store.Tx) error {
		_, err := tx.JobRequeue(&store.JobRequeueParams{IDs: []int64{first.JobID}, RunAt: b.now, Now: b.now})
		return err
	})
	requeued := b.batch(id)
	equal(t, "counts after the requeue", []int64{requeued.Total, requeued.Succeeded, requeued.Dead}, []int64{2, 0, 0})
	for _, j := range b.lease(b.leaseParams(2, "t")) {
		b.finish(withBatch(b.finishParams(refOf(j), job.StateSucceeded), id))
	}
	got := b.batch(id)
	equal(t, "counts", []int64{got.Total, got.Succeeded, got.Dead}, []int64{2, 2, 0})
	equal(t, "complete", got.Complete(), true)
	equal(t, "requeued job", b.state(first.JobID), job.StateSucceeded)
	equal(t, "jobs", len(jobs), 2)
	equal(t, "callbacks", len(b.lease(b.leaseParams(10, "on-complete", "on-success"))), 2)
}
