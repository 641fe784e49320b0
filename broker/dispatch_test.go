package broker

import (
	"context"
	"reflect"
	"testing"

	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/store"
)

// A grant that stops at its MaxBytes (its session's outbox is almost full) leaves jobs ready:
// another session's grant of the same scope in the same round still gets them.
func TestLeaseRoundGrantStoppedByBytesLeavesScopeOpen(t *testing.T) {
	t.Parallel()
	b := newRaceBroker(t)
	ctx := context.Background()
	payload := make([]byte, 100)
	if _, err := b.Enqueue(ctx, []JobSpec{{Type: "t", Payload: payload}, {Type: "t", Payload: payload},
		{Type: "t", Payload: payload}}); err != nil {
		t.Fatal(err)
	}
	session := func(id string) *Session {
		return &Session{b: b, id: id, workerID: id, types: []string{"t"}, capacity: 5,
			out: newOutbox(b.now), held: map[int64]*lease{}}
	}
	byBytes := &grant{sess: session("w1"), params: b.leaseParams(session("w1"), []string{"t"}, 5, b.now(), false)}
	byBytes.params.MaxBytes = 1 // stops after the first job
	other := &grant{sess: session("w2"), params: b.leaseParams(session("w2"), []string{"t"}, 5, b.now(), false)}
	other.params.MaxBytes = OutboxGrantBytes

	// The sessions are not the dispatcher's: what the lease hands them out stays on their streams.
	if err := b.doOp(ctx, b.newLeaseOp([]*grant{byBytes, other})); err != nil {
		t.Fatal(err)
	}
	if len(byBytes.leased) != 1 || len(other.leased) != 2 {
		t.Fatalf("leased %d and %d jobs, want 1 and 2", len(byBytes.leased), len(other.leased))
	}
}

// atCommitTx records the leases asked for at commit, and gives each lease its limit in jobs.
type atCommitTx struct {
	store.Tx
	calls [][]*store.JobLeaseParams
}

func (tx *atCommitTx) JobLeaseAtCommit(ps []*store.JobLeaseParams, got func([][]*job.Job, error)) error {
	tx.calls = append(tx.calls, ps)
	out := make([][]*job.Job, len(ps))
	for i, p := range ps {
		for range p.Limit {
			out[i] = append(out[i], &job.Job{ID: int64(len(tx.calls)*100 + i*10 + len(out[i]))})
		}
	}
	got(out, nil)
	return nil
}

// The grants of a round that lease at commit go to the store as one call per scope, in the
// round's order, so that a round of many worker streams costs one statement per scope; probes
// and capped leases are left to lease one by one.
func TestLeaseAtCommitOneCallPerScope(t *testing.T) {
	t.Parallel()
	newGrant := func(sess string, limit int, types ...string) *grant {
		return &grant{sess: &Session{id: sess}, params: store.JobLeaseParams{Types: types, Limit: limit, WorkerID: sess,
			EnforceQueues: true, SkipCapped: true, ExcludeShut: true}}
	}
	a1, b1, a2, a3 := newGrant("w1", 1, "a"), newGrant("w2", 2, "b"), newGrant("w3", 4, "a"), newGrant("w4", 8, "a")
	probe := newGrant("w5", 1, "a")
	probe.probe = true
	capped := newGrant("w6", 1, "a")
	capped.params.SkipCapped = false
	tx := &atCommitTx{}
	// As the writer asks for them (commit.Grouped): one call per group of the op's reads.
	r := (&leaseOp{grants: []*grant{a1, b1, probe, a2, capped, a3}}).AtCommit()
	for i, ps := range r.Leases {
		if err := tx.JobLeaseAtCommit(ps, func(jobs [][]*job.Job, err error) { r.Leased(i, jobs, err) }); err != nil {
			t.Fatal(err)
		}
	}
	var workers [][]string
	for _, call := range tx.calls {
		var ws []string
		for _, p := range call {
			ws = append(ws, p.WorkerID)
		}
		workers = append(workers, ws)
	}
	if want := [][]string{{"w1", "w3", "w4"}, {"w2"}}; !reflect.DeepEqual(workers, want) {
		t.Fatalf("leases at commit asked for %v, want %v", workers, want)
	}
	for _, g := range []*grant{a1, b1, a2, a3} {
		if len(g.leased) != g.params.Limit {
			t.Errorf("grant of %s got %d jobs, want its %d", g.params.WorkerID, len(g.leased), g.params.Limit)
		}
	}
	if probe.leased != nil || capped.leased != nil {
		t.Errorf("a probe or a capped lease went at commit")
	}
}

// A lease keeps its job's payload only while it is small: the worker is sent every payload
// whole, and the broker does not hold a large one for as long as the attempt runs.
func TestLeaseKeepsOnlyASmallPayload(t *testing.T) {
	t.Parallel()
	b := newRaceBroker(t)
	ctx := context.Background()
	small, large := make([]byte, leasePayloadKept), make([]byte, leasePayloadKept+1)
	res, err := b.Enqueue(ctx, []JobSpec{{Type: "t", Payload: small}, {Type: "t", Payload: large}})
	if err != nil {
		t.Fatal(err)
	}
	s := &Session{b: b, id: "w1", workerID: "w1", types: []string{"t"}, capacity: 2,
		out: newOutbox(b.now), held: map[int64]*lease{}}
	g := &grant{sess: s, params: b.leaseParams(s, []string{"t"}, 2, b.now(), false)}
	if err := b.do(ctx, "lease", func(tx store.Tx) error {
		var err error
		g.leased, err = tx.JobLease(&g.params)
		return err
	}); err != nil || len(g.leased) != 2 {
		t.Fatalf("lease: %v, %d jobs", err, len(g.leased))
	}
	b.handOut([]*grant{g})

	sent := map[int64]int{}
	for _, m := range pendingMessages(s) {
		if a, ok := m.(Assignment); ok {
			sent[a.Job.ID] = len(a.Job.Payload)
		}
	}
	b.mu.Lock()
	kept := map[int64]int{}
	for id, l := range b.table.leases {
		kept[id] = len(l.job.Payload)
	}
	b.mu.Unlock()
	smallID, largeID := res[0].ID, res[1].ID
	if want := map[int64]int{smallID: len(small), largeID: len(large)}; !reflect.DeepEqual(sent, want) {
		t.Errorf("payload bytes sent by job: %v, want %v", sent, want)
	}
	if want := map[int64]int{smallID: len(small), largeID: 0}; !reflect.DeepEqual(kept, want) {
		t.Errorf("payload bytes the leases keep by job: %v, want %v", kept, want)
	}
}
