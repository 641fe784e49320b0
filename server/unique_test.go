package server_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/brokertest"
)

// uniqueSpec is a job of type "report" with payload and unique options u.
func uniqueSpec(payload string, u *jobwirev1.UniqueOptions) *jobwirev1.JobSpec {
	return &jobwirev1.JobSpec{Type: "report", Payload: []byte(payload), Unique: u}
}

func enqueued(t *testing.T, b *brokertest.Bundle, spec *jobwirev1.JobSpec) *jobwirev1.EnqueuedJob {
	t.Helper()
	res, err := b.Producer.Enqueue(context.Background(), &jobwirev1.EnqueueRequest{Job: spec})
	if err != nil {
		t.Fatalf("enqueue: %v", err)
	}
	return res.GetJob()
}

// wantDuplicate fails unless got names job id as a duplicate by its unique key.
func wantDuplicate(t *testing.T, got *jobwirev1.EnqueuedJob, id int64) {
	t.Helper()
	if !got.GetDuplicate() || got.GetId() != id || got.GetDuplicateBy() != jobwirev1.DuplicateBy_DUPLICATE_BY_UNIQUE {
		t.Fatalf("enqueue answered %v, want job %d as a duplicate by its unique key", got, id)
	}
}

func wantNew(t *testing.T, got *jobwirev1.EnqueuedJob, not int64) {
	t.Helper()
	if got.GetDuplicate() || got.GetId() == not || got.GetDuplicateBy() != jobwirev1.DuplicateBy_DUPLICATE_BY_UNSPECIFIED {
		t.Fatalf("enqueue answered %v, want a new job", got)
	}
}

// A job with a producer's key holds it while it waits or runs, whatever the content of a later
// enqueue; once it succeeded the key is free, and a new job is stored.
func TestUniqueKeyAnswersWithTheWaitingJobUntilItFinishes(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	u := &jobwirev1.UniqueOptions{Key: "customer-7"}
	first := enqueued(t, b, uniqueSpec(`{"n":1}`, u))
	wantDuplicate(t, enqueued(t, b, uniqueSpec(`{"n":2}`, u)), first.GetId())
	wantNew(t, enqueued(t, b, uniqueSpec(`{"n":1}`, &jobwirev1.UniqueOptions{Key: "customer-8"})), first.GetId())
	other := uniqueSpec(`{"n":1}`, u)
	other.Queue = "elsewhere"
	wantNew(t, enqueued(t, b, other), first.GetId())

	j := getJob(t, b, first.GetId())
	if len(j.GetUniqueKey()) != 64 || len(j.GetUniqueStates()) != 4 {
		t.Fatalf("stored unique key %q, states %v: want a 64-digit hash and the 4 waiting and running states", j.GetUniqueKey(), j.GetUniqueStates())
	}

	w := b.Connect(brokertest.Hello("w1", 1, "report"))
	got := w.Assignment()
	w.Started(got)
	b.WaitState(got.GetJob().GetId(), jobwirev1.JobState_JOB_STATE_RUNNING)
	wantDuplicate(t, enqueued(t, b, uniqueSpec(`{}`, u)), first.GetId())
	ack(t, w.Succeed(got))
	b.WaitState(first.GetId(), jobwirev1.JobState_JOB_STATE_SUCCEEDED)
	wantNew(t, enqueued(t, b, uniqueSpec(`{}`, u)), first.GetId())
}

// Uniqueness by payload fields compares only those fields; by the whole payload, every byte.
func TestUniqueByPayloadFieldsAndByPayload(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	byCustomer := &jobwirev1.UniqueOptions{Fields: []string{"payload.customer.id"}}
	first := enqueued(t, b, uniqueSpec(`{"customer":{"id":42},"month":"may"}`, byCustomer))
	wantDuplicate(t, enqueued(t, b, uniqueSpec(`{"customer":{"id":42},"month":"june"}`, byCustomer)), first.GetId())
	wantNew(t, enqueued(t, b, uniqueSpec(`{"customer":{"id":43}}`, byCustomer)), first.GetId())

	byPayload := &jobwirev1.UniqueOptions{ByPayload: true, AcrossQueues: true}
	p := enqueued(t, b, uniqueSpec(`{"a":1}`, byPayload))
	inOther := uniqueSpec(`{"a":1}`, byPayload)
	inOther.Queue = "other"
	wantDuplicate(t, enqueued(t, b, inOther), p.GetId())
	wantNew(t, enqueued(t, b, uniqueSpec(`{"a":2}`, byPayload)), p.GetId())
}

// With a period, a key is held for the rest of its window, whatever becomes of the job, and
// the next window admits a new job; a job's window is the one its run time falls in.
func TestUniqueWithinAPeriod(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	hourly := &jobwirev1.UniqueOptions{Key: "digest", Period: durationpb.New(time.Hour)}
	first := enqueued(t, b, uniqueSpec(`{}`, hourly))
	if _, err := b.Producer.CancelJob(context.Background(), &jobwirev1.CancelJobRequest{Id: first.GetId()}); err != nil {
		t.Fatal(err)
	}
	got := enqueued(t, b, uniqueSpec(`{}`, hourly))
	wantDuplicate(t, got, first.GetId())
	if got.GetState() != jobwirev1.JobState_JOB_STATE_CANCELLED {
		t.Fatalf("duplicate's state %s, want the holder's, CANCELLED", got.GetState())
	}
	// A job due in the next window is in that window's key, however early it is enqueued.
	tomorrow := uniqueSpec(`{}`, hourly)
	tomorrow.Schedule = &jobwirev1.JobSpec_Delay{Delay: durationpb.New(time.Hour)}
	next := enqueued(t, b, tomorrow)
	wantNew(t, next, first.GetId())
	b.Advance(time.Hour)
	wantDuplicate(t, enqueued(t, b, uniqueSpec(`{}`, hourly)), next.GetId())
}

// Unique options that cannot work are refused, naming the field.
func TestUniqueOptionsAreValidated(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	for _, tc := range []struct {
		u    *jobwirev1.UniqueOptions
		text string
	}{
		{&jobwirev1.UniqueOptions{States: []jobwirev1.JobState{jobwirev1.JobState_JOB_STATE_PENDING}}, "job.unique: states must include SCHEDULED, PENDING and RUNNING"},
		{&jobwirev1.UniqueOptions{Fields: []string{"type"}}, "job.unique: fields[0] is \"type\""},
		{&jobwirev1.UniqueOptions{Fields: []string{"payload."}}, "job.unique: fields[0]"},
		{&jobwirev1.UniqueOptions{Period: durationpb.New(time.Millisecond)}, "job.unique: period must be 1s..8784h0m0s"},
	} {
		_, err := b.Producer.Enqueue(context.Background(), &jobwirev1.EnqueueRequest{Job: uniqueSpec(`{}`, tc.u)})
		wantCode(t, err, codes.InvalidArgument, tc.text)
	}
}

// Two brokers on one database enqueue the same unique job at the same time, many times over:
// the database's index admits one job, and every answer names it.
func TestClusterUniqueKeyAdmitsOneJobAcrossBrokers(t *testing.T) {
	t.Parallel()
	a, b := twoBrokers(t)
	const each = 8
	u := &jobwirev1.UniqueOptions{Key: "sync-customer-1"}
	var wg sync.WaitGroup
	answers := make(chan *jobwirev1.EnqueuedJob, 2*each)
	for i := range 2 * each {
		on := a
		if i%2 == 1 {
			on = b
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := on.Producer.Enqueue(context.Background(), &jobwirev1.EnqueueRequest{Job: uniqueSpec(`{}`, u)})
			if err != nil {
				t.Errorf("enqueue: %v", err)
				return
			}
			answers <- res.GetJob()
		}()
	}
	wg.Wait()
	close(answers)
	ids, stored := map[int64]bool{}, 0
	for r := range answers {
		ids[r.GetId()] = true
		if !r.GetDuplicate() {
			stored++
		}
	}
	if len(ids) != 1 || stored != 1 {
		t.Fatalf("answers named jobs %v, %d of them new: want one job, stored once", ids, stored)
	}
	res, err := a.Admin.ListJobs(context.Background(), &jobwirev1.ListJobsRequest{Type: "report"})
	if err != nil || len(res.GetJobs()) != 1 {
		t.Fatalf("jobs of type report: %v, %v; want one", res.GetJobs(), err)
	}
}

// Two brokers enqueue batches holding the same two unique keys in opposite orders, round after
// round: each insert may wait for the other broker's uncommitted insert of its key, so the two
// transactions can wait for each other. PostgreSQL breaks such a cycle by failing one, whose
// storage retry runs it again: both batches are answered, and each key names one job.
func TestClusterUniqueKeysInOppositeOrders(t *testing.T) {
	t.Parallel()
	a, b := twoBrokers(t)
	for round := range 10 {
		k1 := &jobwirev1.UniqueOptions{Key: fmt.Sprintf("r%d-first", round)}
		k2 := &jobwirev1.UniqueOptions{Key: fmt.Sprintf("r%d-second", round)}
		var wg sync.WaitGroup
		var resA, resB *jobwirev1.EnqueueBatchResponse
		var errA, errB error
		wg.Add(2)
		go func() {
			defer wg.Done()
			resA, errA = a.Producer.EnqueueBatch(context.Background(), &jobwirev1.EnqueueBatchRequest{
				Jobs: []*jobwirev1.JobSpec{uniqueSpec(`{}`, k1), uniqueSpec(`{}`, k2)}})
		}()
		go func() {
			defer wg.Done()
			resB, errB = b.Producer.EnqueueBatch(context.Background(), &jobwirev1.EnqueueBatchRequest{
				Jobs: []*jobwirev1.JobSpec{uniqueSpec(`{}`, k2), uniqueSpec(`{}`, k1)}})
		}()
		wg.Wait()
		if errA != nil || errB != nil {
			t.Fatalf("round %d: %v, %v", round, errA, errB)
		}
		ja, jb := resA.GetJobs(), resB.GetJobs()
		if ja[0].GetId() != jb[1].GetId() || ja[1].GetId() != jb[0].GetId() || ja[0].GetId() == ja[1].GetId() {
			t.Fatalf("round %d: a answered %v, b %v; want each key's one job named by both", round, ja, jb)
		}
	}
}

// A unique key, and a waiting job's new priority, outlive a restart of the broker: they are the
// store's, not the broker's memory.
func TestUniqueKeyAndPrioritySurviveARestart(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	u := &jobwirev1.UniqueOptions{Key: "nightly"}
	first := enqueued(t, b, uniqueSpec(`{}`, u))
	if _, err := b.Admin.SetJobPriority(context.Background(), &jobwirev1.SetJobPriorityRequest{Id: first.GetId(), Priority: 9}); err != nil {
		t.Fatal(err)
	}
	b.Restart()
	wantDuplicate(t, enqueued(t, b, uniqueSpec(`{}`, u)), first.GetId())
	if p := getJob(t, b, first.GetId()).GetPriority(); p != 9 {
		t.Fatalf("priority after a restart %d, want 9", p)
	}
}
