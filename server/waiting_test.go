package server_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/brokertest"
)

func delayed(typ string, d time.Duration) *jobwirev1.JobSpec {
	return &jobwirev1.JobSpec{Type: typ, Payload: []byte(`{}`), Schedule: &jobwirev1.JobSpec_Delay{Delay: durationpb.New(d)}}
}

// wantJobAudit fails unless the newest audit event of action names job id with detail.
func wantJobAudit(t *testing.T, b *brokertest.Bundle, action string, id int64, detail string) {
	t.Helper()
	res, err := b.Admin.ListAuditEvents(context.Background(), &jobwirev1.ListAuditEventsRequest{Action: action})
	if err != nil || len(res.GetEvents()) == 0 {
		t.Fatalf("audit events of %s: %v, %v", action, res.GetEvents(), err)
	}
	e := res.GetEvents()[0]
	if e.GetCount() != 1 || len(e.GetJobIds()) != 1 || e.GetJobIds()[0] != id || e.GetDetail() != detail {
		t.Fatalf("audit event %v, want job %d with detail %q", e, id, detail)
	}
}

// A job scheduled an hour ahead runs now when asked, without the clock moving; a job that is
// not SCHEDULED is refused, naming its state.
func TestRunJobNowStartsAScheduledJob(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	ctx := context.Background()
	id := enqueue(t, b, delayed("t", time.Hour))
	w := b.Connect(brokertest.Hello("w1", 1, "t"))
	res, err := b.Admin.RunJobNow(ctx, &jobwirev1.RunJobNowRequest{Id: id})
	if err != nil || res.GetJob().GetState() != jobwirev1.JobState_JOB_STATE_PENDING &&
		res.GetJob().GetState() != jobwirev1.JobState_JOB_STATE_LEASED {
		t.Fatalf("run now: %v, %v; want the job ready", res.GetJob(), err)
	}
	got := w.Assignment()
	if got.GetJob().GetId() != id {
		t.Fatalf("the worker got job %d, want %d", got.GetJob().GetId(), id)
	}
	wantJobAudit(t, b, "job.run_now", id, "was SCHEDULED run_at="+getJob(t, b, id).GetCreatedAt().AsTime().Add(time.Hour).UTC().Format(time.RFC3339))
	_, err = b.Admin.RunJobNow(ctx, &jobwirev1.RunJobNowRequest{Id: id})
	wantCode(t, err, codes.FailedPrecondition, "is LEASED: only a SCHEDULED job can be run now")
	_, err = b.Admin.RunJobNow(ctx, &jobwirev1.RunJobNowRequest{Id: 9999})
	wantCode(t, err, codes.NotFound, "9999")
	_, err = b.Admin.RunJobNow(ctx, &jobwirev1.RunJobNowRequest{})
	wantCode(t, err, codes.InvalidArgument, "id: must be a positive job id")
}

// A job waiting out its backoff is retried at once; a job scheduled for its first run is not a
// retry, and the refusal says to run it now instead.
func TestRetryJobNowEndsTheBackoff(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	ctx := context.Background()
	first := enqueue(t, b, delayed("t", time.Hour))
	_, err := b.Admin.RetryJobNow(ctx, &jobwirev1.RetryJobNowRequest{Id: first})
	wantCode(t, err, codes.FailedPrecondition, "is SCHEDULED: only a job waiting out a retry backoff")

	w := b.Connect(brokertest.Hello("w1", 1, "t"))
	id := enqueue(t, b, spec("t"))
	got := w.Assignment()
	w.Started(got)
	if r := ack(t, w.Fail(got, brokertest.Transient("Timeout", time.Hour))); r.GetDecision() != jobwirev1.Decision_DECISION_RETRY {
		t.Fatalf("decision %s, want RETRY", r.GetDecision())
	}
	b.WaitState(id, jobwirev1.JobState_JOB_STATE_SCHEDULED)
	if _, err := b.Admin.RetryJobNow(ctx, &jobwirev1.RetryJobNowRequest{Id: id}); err != nil {
		t.Fatal(err)
	}
	again := w.Assignment()
	if again.GetJob().GetId() != id || again.GetAttempt() != 2 {
		t.Fatalf("the worker got job %d attempt %d, want job %d attempt 2", again.GetJob().GetId(), again.GetAttempt(), id)
	}
	wantJobAudit(t, b, "job.retry_now", id, "was SCHEDULED run_at="+getJob(t, b, id).GetAttemptHistory()[0].GetFinishedAt().AsTime().Add(time.Hour).UTC().Format(time.RFC3339))
}

// A pending job is deleted and is gone; a running one is refused, naming its state.
func TestDeleteJobDeletesOnlyAWaitingJob(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	ctx := context.Background()
	id := enqueue(t, b, spec("t"))
	res, err := b.Admin.DeleteJob(ctx, &jobwirev1.DeleteJobRequest{Id: id})
	if err != nil || res.GetJob().GetId() != id || res.GetJob().GetState() != jobwirev1.JobState_JOB_STATE_PENDING {
		t.Fatalf("delete: %v, %v; want the job as it was, PENDING", res.GetJob(), err)
	}
	_, err = b.Producer.GetJob(ctx, &jobwirev1.GetJobRequest{Id: id})
	wantCode(t, err, codes.NotFound, "not found")
	wantJobAudit(t, b, "job.delete", id, "was PENDING")

	w := b.Connect(brokertest.Hello("w1", 1, "t"))
	running, _ := runJob(t, b, w)
	_, err = b.Admin.DeleteJob(ctx, &jobwirev1.DeleteJobRequest{Id: running})
	wantCode(t, err, codes.FailedPrecondition, "is RUNNING: only a PENDING or SCHEDULED job can be deleted; cancel")
	b.WaitState(running, jobwirev1.JobState_JOB_STATE_RUNNING)
}

// A waiting job's new priority puts it ahead of the jobs enqueued before it.
func TestSetJobPriorityReordersDispatch(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	ctx := context.Background()
	first, second := enqueue(t, b, spec("t")), enqueue(t, b, spec("t"))
	res, err := b.Admin.SetJobPriority(ctx, &jobwirev1.SetJobPriorityRequest{Id: second, Priority: 10})
	if err != nil || res.GetJob().GetPriority() != 10 {
		t.Fatalf("set priority: %v, %v", res.GetJob(), err)
	}
	wantJobAudit(t, b, "job.priority", second, "was PENDING priority=10 (was 0)")
	w := b.Connect(brokertest.Hello("w1", 1, "t"))
	if got := w.Assignment(); got.GetJob().GetId() != second {
		t.Fatalf("first assignment is job %d, want %d (raised) before %d", got.GetJob().GetId(), second, first)
	}
	_, err = b.Admin.SetJobPriority(ctx, &jobwirev1.SetJobPriorityRequest{Id: second, Priority: 1})
	wantCode(t, err, codes.FailedPrecondition, "is LEASED")
	_, err = b.Admin.SetJobPriority(ctx, &jobwirev1.SetJobPriorityRequest{Id: first, Priority: 5000})
	wantCode(t, err, codes.InvalidArgument, "priority: must be -1000..1000, got 5000")
}

// A job leased through another broker is not deleted nor changed: the write checks the state
// in the database, not in the answering broker's memory. A job run now through one broker is
// started by a worker of the other at once.
func TestClusterWaitingJobOperationsCheckTheDatabase(t *testing.T) {
	t.Parallel()
	a, b := twoBrokers(t)
	ctx := context.Background()
	w := b.Connect(brokertest.Hello("w1", 1, "t"))
	id := a.Enqueue(spec("t"))
	got := w.Assignment()
	if got.GetJob().GetId() != id {
		t.Fatalf("the worker got job %d, want %d", got.GetJob().GetId(), id)
	}
	_, err := a.Admin.DeleteJob(ctx, &jobwirev1.DeleteJobRequest{Id: id})
	wantCode(t, err, codes.FailedPrecondition, "is LEASED")
	_, err = a.Admin.SetJobPriority(ctx, &jobwirev1.SetJobPriorityRequest{Id: id, Priority: 3})
	wantCode(t, err, codes.FailedPrecondition, "is LEASED")
	w.Started(got)
	ack(t, w.Succeed(got))

	later := a.Enqueue(delayed("t", time.Hour))
	if _, err := a.Admin.RunJobNow(ctx, &jobwirev1.RunJobNowRequest{Id: later}); err != nil {
		t.Fatal(err)
	}
	if next := w.Assignment(); next.GetJob().GetId() != later {
		t.Fatalf("the worker on the other broker got job %d, want %d", next.GetJob().GetId(), later)
	}
}
