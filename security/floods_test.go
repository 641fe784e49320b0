package security

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/brokertest"
	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/store"
)

func enqueueOne(t *testing.T, b *brokertest.Bundle, spec *jobwirev1.JobSpec) int64 {
	t.Helper()
	res, err := b.Producer.Enqueue(context.Background(), &jobwirev1.EnqueueRequest{Job: spec})
	if err != nil {
		t.Fatalf("enqueue: %v", err)
	}
	return res.GetJob().GetId()
}

// names returns n distinct names with prefix.
func names(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%d", prefix, i)
	}
	return out
}

// A Hello naming 40,000 job types (or queues) once made every lease statement fail with "too
// many SQL variables", starving every honest worker. It is refused up front now.
func TestHelloNameFloods(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	for name, hello := range map[string]*jobwirev1.Hello{
		"40000 types":  {WorkerId: "flood", JobTypes: names("t", 40000), Capacity: 1},
		"1001 types":   {WorkerId: "flood", JobTypes: names("t", 1001), Capacity: 1},
		"40000 queues": {WorkerId: "flood", JobTypes: []string{"t"}, Queues: names("q", 40000), Capacity: 1},
	} {
		if _, err := b.ConnectOn(b.Workers, hello); status.Code(err) != codes.InvalidArgument {
			t.Fatalf("hello with %s: %v, want INVALID_ARGUMENT", name, err)
		}
	}
	// The most a Hello may name is served.
	w := b.Connect(&jobwirev1.Hello{WorkerId: "wide", JobTypes: names("t", 1000), Queues: names("q", 1000), Capacity: 1})
	id := enqueueOne(t, b, &jobwirev1.JobSpec{Type: "t999", Queue: "q999"})
	if a := w.Assignment(); a.GetJob().GetId() != id {
		t.Fatalf("assigned %v, want job %d", a, id)
	}
}

// A heartbeat may name at most the stream's capacity of leases: a flood of bogus refs ends the
// stream with INVALID_ARGUMENT instead of queueing a refusal for each.
func TestHeartbeatFloodOfBogusLeases(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	w := b.Connect(brokertest.Hello("w", 4, "t"))
	refs := make([]*jobwirev1.LeaseRef, 5000)
	for i := range refs {
		refs[i] = &jobwirev1.LeaseRef{JobId: int64(i + 1), LeaseToken: "1.00000000000000000000000000000000"}
	}
	w.Send(&jobwirev1.ConnectRequest{Message: &jobwirev1.ConnectRequest_Heartbeat{Heartbeat: &jobwirev1.Heartbeat{Leases: refs}}})
	if err := w.Err(); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("heartbeat naming 5000 leases at capacity 4: %v, want INVALID_ARGUMENT", err)
	}
	// Within capacity, bogus refs are refused one by one and the stream stays up.
	w2 := b.Connect(brokertest.Hello("w2", 4, "t"))
	w2.Send(&jobwirev1.ConnectRequest{Message: &jobwirev1.ConnectRequest_Heartbeat{Heartbeat: &jobwirev1.Heartbeat{Leases: refs[:4]}}})
	for range 4 {
		if r := w2.Next().GetRefused(); r == nil || codes.Code(r.GetCode()) != codes.FailedPrecondition {
			t.Fatalf("a bogus lease in a heartbeat was not refused as stale")
		}
	}
}

// Tens of thousands of paused queues once went into a NOT IN list in every lease statement: at
// 40,000 it failed outright ("too many SQL variables"), so workers serving every queue got no
// job, even after a restart. Paused queues are now left out by a join, whatever their number.
func TestPausedQueueFlood(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	ctx := context.Background()
	paused := names("paused-", 40000)
	// Pausing 40,000 queues one RPC at a time takes a while; the rows are what dispatch sees,
	// so most are written straight to the store and the broker restarted to load them, as
	// after a flood in an earlier run. The last ones go through the API.
	err := b.Store.Write(ctx, "seed", func(tx store.Tx) error {
		for _, q := range paused[:len(paused)-100] {
			if err := tx.QueueSetPaused(q, true); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	b.Restart()
	for _, q := range paused[len(paused)-100:] {
		if _, err := b.Admin.PauseQueue(ctx, &jobwirev1.PauseQueueRequest{Queue: q}); err != nil {
			t.Fatalf("pause %s: %v", q, err)
		}
	}
	held := enqueueOne(t, b, &jobwirev1.JobSpec{Type: "t", Queue: paused[7]})
	free := enqueueOne(t, b, &jobwirev1.JobSpec{Type: "t", Queue: "open"})
	every := b.Connect(brokertest.Hello("every-queue", 2, "t"))
	if a := every.Assignment(); a.GetJob().GetId() != free {
		t.Fatalf("a worker of every queue got %v, want job %d of the open queue", a, free)
	}
	named := brokertest.Hello("named", 2, "t")
	named.Queues = []string{paused[7], "open"}
	b.Connect(named)
	if _, err := b.Admin.ResumeQueue(ctx, &jobwirev1.ResumeQueueRequest{Queue: paused[7]}); err != nil {
		t.Fatal(err)
	}
	// Resumed, its job goes to one of the two workers.
	waitLeased(t, b, held)
	// Listing 40,000 queues would not fit in a response: the listing is capped.
	res, err := b.Admin.ListQueues(ctx, &jobwirev1.ListQueuesRequest{})
	if err != nil {
		t.Fatalf("ListQueues: %v", err)
	}
	if n := len(res.GetQueues()); n != 1000 || int(res.GetOmitted()) < len(paused)-1000 {
		t.Fatalf("ListQueues gave %d queues and omitted %d; want 1000 and the rest omitted", n, res.GetOmitted())
	}
}

// waitLeased waits until job id is handed to a worker.
func waitLeased(t *testing.T, b *brokertest.Bundle, id int64) {
	t.Helper()
	deadline := time.Now().Add(brokertest.WaitTimeout)
	for {
		res, err := b.Producer.GetJob(context.Background(), &jobwirev1.GetJobRequest{Id: id})
		if err != nil {
			t.Fatal(err)
		}
		if st := res.GetJob().GetState(); st == jobwirev1.JobState_JOB_STATE_LEASED || st == jobwirev1.JobState_JOB_STATE_RUNNING {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %d is still %s", id, res.GetJob().GetState())
		}
		time.Sleep(time.Millisecond)
	}
}

// At most broker.MaxCappedQueues queues may have a concurrency cap: full ones are listed by
// name in a lease statement.
func TestCappedQueueFlood(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	ctx := context.Background()
	qs := names("capped-", 1001)
	if err := b.Store.Write(ctx, "seed", func(tx store.Tx) error {
		for _, q := range qs {
			if err := tx.QueueSetPaused(q, true); err != nil {
				return err
			}
			if err := tx.QueueSetPaused(q, false); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for i, q := range qs {
		_, err := b.Admin.SetQueueLimit(ctx, &jobwirev1.SetQueueLimitRequest{Queue: q, Limit: 1})
		if i < 1000 && err != nil {
			t.Fatalf("cap %d: %v", i, err)
		}
		if i == 1000 && status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("cap 1001: %v, want RESOURCE_EXHAUSTED", err)
		}
	}
	// Changing an existing cap, or removing one, still works at the limit.
	for _, limit := range []int32{2, 0} {
		if _, err := b.Admin.SetQueueLimit(ctx, &jobwirev1.SetQueueLimitRequest{Queue: qs[0], Limit: limit}); err != nil {
			t.Fatalf("set an existing cap to %d: %v", limit, err)
		}
	}
	if _, err := b.Admin.SetQueueLimit(ctx, &jobwirev1.SetQueueLimitRequest{Queue: qs[1000], Limit: 1}); err != nil {
		t.Fatalf("a cap after one was removed: %v", err)
	}
}

// failLeaseStore makes every lease for one worker id fail, as a statement the store refuses:
// a round's, and an insert's that leases a job offered to it.
type failLeaseStore struct {
	store.Store
	worker string
}

func (s failLeaseStore) Write(ctx context.Context, name string, fn func(store.Tx) error) error {
	return s.Store.Write(ctx, name, func(tx store.Tx) error { return fn(failLeaseTx{Tx: tx, worker: s.worker}) })
}

type failLeaseTx struct {
	store.Tx
	worker string
}

func (t failLeaseTx) JobLease(p *store.JobLeaseParams) ([]*job.Job, error) {
	if p.WorkerID == t.worker {
		return nil, errors.New("SQL logic error: too many SQL variables")
	}
	return t.Tx.JobLease(p)
}

// JobInsertOfferedAtCommit fails as the lease does when a job is offered to the worker.
func (t failLeaseTx) JobInsertOfferedAtCommit(ps []*store.JobInsertParams, offers []*store.JobOffer,
	got func([]*job.Job, error)) ([]store.JobInsertResult, error) {
	for _, o := range offers {
		if o != nil && o.WorkerID == t.worker {
			return nil, errors.New("SQL logic error: too many SQL variables")
		}
	}
	return t.Tx.JobInsertOfferedAtCommit(ps, offers, got)
}

// One worker stream whose lease cannot be stored must not stall dispatch for the others.
func TestOneFailingGrantDoesNotStallOthers(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{WrapStore: func(s store.Store) store.Store {
		return failLeaseStore{Store: s, worker: "bad"}
	}})
	bad := b.Connect(brokertest.Hello("bad", 10, "t", "x")) // another scope: its grant is tried every round
	good := b.Connect(brokertest.Hello("good", 10, "t"))
	var ids []int64
	for range 5 {
		ids = append(ids, enqueueOne(t, b, &jobwirev1.JobSpec{Type: "t"}))
	}
	got := map[int64]bool{}
	for range ids {
		got[good.Assignment().GetJob().GetId()] = true
	}
	for _, id := range ids {
		if !got[id] {
			t.Fatalf("job %d did not reach the good worker (got %v)", id, got)
		}
	}
	_ = bad
}
