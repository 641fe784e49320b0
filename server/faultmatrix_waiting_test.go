package server_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/brokertest"
)

// The writes docs/storage.md lists as retried with the same answer that the cases in
// faultmatrix_test.go do not reach: retry now, a new priority, a triggered schedule and a
// removed rate limit. Each must answer and store the same whether its write failed before the
// transaction, inside it, or after its commit.
func init() {
	faultCases = append(faultCases,
		faultCase{kind: "retry job now", ops: []string{"job_retry_now", "batch"}, capacity: 1, failures: 1,
			setup: func(t *testing.T, fx *faultFixture) any {
				a := started(t, fx).(*jobwirev1.Assignment)
				if r := ack(t, fx.w.Fail(a, brokertest.Transient("Timeout", time.Hour))); r.GetDecision() != jobwirev1.Decision_DECISION_RETRY {
					t.Fatalf("decision = %s, want RETRY", r.GetDecision())
				}
				return a.GetJob().GetId()
			},
			write: func(t *testing.T, fx *faultFixture, state any) {
				id := state.(int64)
				// The worker's slot is free, so the job may be leased again before the answer reads it.
				res, err := fx.b.Admin.RetryJobNow(context.Background(), &jobwirev1.RetryJobNowRequest{Id: id})
				if err != nil || res.GetJob().GetState() == jobwirev1.JobState_JOB_STATE_SCHEDULED || res.GetJob().GetAttempts() != 1 {
					t.Fatalf("retry now answered %v, %v; want the job out of its backoff, one attempt spent", res.GetJob(), err)
				}
				onlyAudit(t, fx.b, "job.retry_now")
			}},
		faultCase{kind: "set job priority", ops: []string{"job_priority", "batch"},
			setup: func(t *testing.T, fx *faultFixture) any { return enqueue(t, fx.b, &jobwirev1.JobSpec{Type: "t"}) },
			write: func(t *testing.T, fx *faultFixture, state any) {
				id := state.(int64)
				res, err := fx.b.Admin.SetJobPriority(context.Background(), &jobwirev1.SetJobPriorityRequest{Id: id, Priority: 7})
				if err != nil || res.GetJob().GetPriority() != 7 {
					t.Fatalf("set priority answered %v, %v; want the job with priority 7", res.GetJob(), err)
				}
				if p := getJob(t, fx.b, id).GetPriority(); p != 7 {
					t.Fatalf("stored priority %d, want 7", p)
				}
				onlyAudit(t, fx.b, "job.priority")
			}},
		faultCase{kind: "schedule trigger", ops: []string{"schedule.trigger", "batch"},
			setup: func(t *testing.T, fx *faultFixture) any {
				addSchedule(t, fx.b, every10("s", "t"))
				return nil
			},
			write: func(t *testing.T, fx *faultFixture, _ any) {
				res, err := fx.b.Admin.TriggerSchedule(context.Background(), &jobwirev1.TriggerScheduleRequest{Name: "s"})
				if err != nil || res.GetJobId() == 0 {
					t.Fatalf("trigger answered %v, %v; want a job", res, err)
				}
				onlyJobs(t, fx.b, res.GetJobId()) // one job, whatever the retries
				if s := getSchedule(t, fx.b, "s"); s.GetLastJobId() != res.GetJobId() {
					t.Fatalf("the schedule's last job %d, want %d", s.GetLastJobId(), res.GetJobId())
				}
			}},
		faultCase{kind: "remove rate limit", ops: []string{"rate_limit_change", "batch"},
			setup: func(t *testing.T, fx *faultFixture) any {
				setRateLimit(t, fx.b, &jobwirev1.RateLimit{Name: "api", Rate: 5, Interval: durationpb.New(time.Second)})
				return nil
			},
			write: func(t *testing.T, fx *faultFixture, _ any) {
				ctx := context.Background()
				if _, err := fx.b.Admin.RemoveRateLimit(ctx, &jobwirev1.RemoveRateLimitRequest{Name: "api"}); err != nil {
					t.Fatalf("remove rate limit: %v", err)
				}
				l, err := fx.b.Admin.ListRateLimits(ctx, &jobwirev1.ListRateLimitsRequest{})
				if err != nil || len(l.GetLimits()) != 0 {
					t.Fatalf("rate limits %v, %v; want none", l, err)
				}
			}},
	)
}
