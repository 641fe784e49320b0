package server_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/jobwire/jobwire/breaker"
	"github.com/jobwire/jobwire/broker"
	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/brokertest"
	"github.com/jobwire/jobwire/store"
	"github.com/jobwire/jobwire/worker"
)

// faultFixture is one broker with a fault injector and one raw worker serving type "t".
type faultFixture struct {
	b *brokertest.Bundle
	f *brokertest.Faults
	w *brokertest.RawWorker
}

// faultCase is one kind of storage write. setup brings a fresh broker to just before the
// write; write then performs it (the fault already planned) and checks what the producer or
// worker was told and what was stored.
type faultCase struct {
	kind string
	// ops are the op names the broker may write it under, one fault among them: a write goes
	// through the writer alone under its own name, or under "batch" when it shares a commit
	// (a dispatch round asked for meanwhile joins any commit).
	ops   []string
	setup func(t *testing.T, fx *faultFixture) any
	write func(t *testing.T, fx *faultFixture, state any)
	// failures is how many failures the type's breaker must have counted at the end.
	failures int32
	// capacity is the fixture worker's (0: no worker connects before the write).
	capacity int32
	// grouped marks a write only group commit makes (many ops in one statement).
	grouped bool
}

const (
	running = jobwirev1.JobState_JOB_STATE_RUNNING
	leased  = jobwirev1.JobState_JOB_STATE_LEASED
)

// faultCases covers every write the broker retries. Each must give the same answers and leave
// the same stored state whether its write failed before the transaction, inside it (rolled
// back), or after its commit (applied, reported failed, run again by the retry policy).
var faultCases = []faultCase{
	{kind: "enqueue", ops: []string{"enqueue"},
		write: func(t *testing.T, fx *faultFixture, _ any) {
			res, err := fx.b.Producer.Enqueue(context.Background(), &jobwirev1.EnqueueRequest{Job: &jobwirev1.JobSpec{Type: "t"}})
			if err != nil {
				t.Fatalf("enqueue: %v", err)
			}
			if e := res.GetJob(); e.GetDuplicate() || e.GetState() != jobwirev1.JobState_JOB_STATE_PENDING {
				t.Fatalf("enqueue answered %v, want a new PENDING job", e)
			}
			onlyJobs(t, fx.b, res.GetJob().GetId())
			checkJob(t, fx.b, res.GetJob().GetId(), jobwirev1.JobState_JOB_STATE_PENDING, 0)
		}},
	{kind: "enqueue with idempotency key", ops: []string{"enqueue"},
		write: func(t *testing.T, fx *faultFixture, _ any) {
			res, err := fx.b.Producer.Enqueue(context.Background(), &jobwirev1.EnqueueRequest{Job: &jobwirev1.JobSpec{
				Type: "t", IdempotencyKey: "order-42"}})
			if err != nil {
				t.Fatalf("enqueue: %v", err)
			}
			if res.GetJob().GetDuplicate() {
				t.Fatalf("enqueue answered %v: the first enqueue of a key is not a duplicate", res.GetJob())
			}
			onlyJobs(t, fx.b, res.GetJob().GetId())
		}},
	{kind: "enqueue a graph", ops: []string{"enqueue_deps", "batch"},
		write: func(t *testing.T, fx *faultFixture, _ any) {
			res, err := fx.b.Producer.EnqueueGraph(context.Background(), &jobwirev1.EnqueueGraphRequest{Nodes: []*jobwirev1.GraphNode{
				{Key: "a", Job: &jobwirev1.JobSpec{Type: "t"}}, {Key: "b", Job: &jobwirev1.JobSpec{Type: "t"}, DependsOn: []string{"a"}}}})
			if err != nil {
				t.Fatalf("enqueue graph: %v", err)
			}
			a, b := res.GetJobs()[0].GetId(), res.GetJobs()[1].GetId()
			onlyJobs(t, fx.b, a, b)
			checkJob(t, fx.b, a, jobwirev1.JobState_JOB_STATE_PENDING, 0)
			if d := getJob(t, fx.b, b).GetDependencies(); len(d.GetParents()) != 1 || d.GetParentsLeft() != 1 {
				t.Fatalf("the dependent's edges: %v, want one parent left", d)
			}
			checkJob(t, fx.b, b, jobwirev1.JobState_JOB_STATE_WAITING, 0)
		}},
	{kind: "result that releases a dependent", ops: []string{"result", "batch"}, capacity: 1,
		setup: func(t *testing.T, fx *faultFixture) any {
			a := started(t, fx).(*jobwirev1.Assignment)
			child := enqueue(t, fx.b, &jobwirev1.JobSpec{Type: "other", DependsOn: []int64{a.GetJob().GetId()}})
			return [2]any{a, child}
		},
		write: func(t *testing.T, fx *faultFixture, state any) {
			a, child := state.([2]any)[0].(*jobwirev1.Assignment), state.([2]any)[1].(int64)
			if r := ack(t, fx.w.Succeed(a)); r.GetDecision() != jobwirev1.Decision_DECISION_SUCCEEDED {
				t.Fatalf("decision = %s, want SUCCEEDED", r.GetDecision())
			}
			checkJob(t, fx.b, child, jobwirev1.JobState_JOB_STATE_PENDING, 0)
			if d := getJob(t, fx.b, child).GetDependencies(); d.GetParentsLeft() != 0 {
				t.Fatalf("the dependent has %d parents left, want 0: its parent settled once", d.GetParentsLeft())
			}
		}},
	{kind: "lease", ops: []string{"lease", "batch"},
		setup: func(t *testing.T, fx *faultFixture) any {
			return enqueue(t, fx.b, &jobwirev1.JobSpec{Type: "t"}) // no worker: nothing is leased
		},
		write: func(t *testing.T, fx *faultFixture, state any) {
			id := state.(int64)
			fx.w = fx.b.Connect(brokertest.Hello("w1", 1, "t")) // its round is the faulted lease
			a := fx.w.Assignment()
			if a.GetJob().GetId() != id || a.GetAttempt() != 1 {
				t.Fatalf("assignment = %v, want job %d attempt 1", a, id)
			}
			checkJob(t, fx.b, id, leased, 0)
			finish(t, fx, a)
		}},
	{kind: "start", ops: []string{"start", "batch"}, capacity: 1,
		setup: assigned,
		write: func(t *testing.T, fx *faultFixture, state any) {
			a := state.(*jobwirev1.Assignment)
			fx.w.Started(a)
			waitStored(t, fx, a.GetJob().GetId(), running)
			// A refusal of the start would come before this answer.
			if hb := fx.w.Heartbeat(brokertest.Ref(a)).GetHeartbeatAck(); len(hb.GetExtended()) != 1 {
				t.Fatalf("heartbeat after a stored start answered %v, want the lease extended", hb)
			}
			checkJob(t, fx.b, a.GetJob().GetId(), running, 1, jobwirev1.AttemptOutcome_ATTEMPT_OUTCOME_RUNNING)
			finish(t, fx, a)
		}},
	{kind: "heartbeat", ops: []string{"heartbeat", "batch"}, capacity: 1,
		setup: started,
		write: func(t *testing.T, fx *faultFixture, state any) {
			a := state.(*jobwirev1.Assignment)
			hb := fx.w.Heartbeat(brokertest.Ref(a)).GetHeartbeatAck()
			want := fx.b.Clock.Now().Add(brokertest.DefaultConfig().LeaseDuration)
			if len(hb.GetExtended()) != 1 || !hb.GetLeaseDeadline().AsTime().Equal(want) {
				t.Fatalf("heartbeat answered %v, want the lease extended to %s", hb, want)
			}
			j, err := fx.b.Store.JobGet(context.Background(), a.GetJob().GetId())
			if err != nil || !j.LeaseExpiresAt.Equal(want) {
				t.Fatalf("stored lease deadline %v (%v), want %s", j.LeaseExpiresAt, err, want)
			}
			finish(t, fx, a)
		}},
	{kind: "result", ops: []string{"result", "batch"}, capacity: 1, failures: 1,
		setup: started,
		write: func(t *testing.T, fx *faultFixture, state any) {
			a := state.(*jobwirev1.Assignment)
			if r := ack(t, fx.w.Fail(a, brokertest.Transient("Timeout", 0))); r.GetDecision() != jobwirev1.Decision_DECISION_RETRY {
				t.Fatalf("decision = %s, want RETRY", r.GetDecision())
			}
			checkJob(t, fx.b, a.GetJob().GetId(), jobwirev1.JobState_JOB_STATE_SCHEDULED, 1,
				jobwirev1.AttemptOutcome_ATTEMPT_OUTCOME_FAILED)
		}},
	{kind: "succeed-many", ops: []string{"batch"}, capacity: 4, grouped: true,
		setup: func(t *testing.T, fx *faultFixture) any {
			var as []*jobwirev1.Assignment
			for range 4 {
				enqueue(t, fx.b, &jobwirev1.JobSpec{Type: "t"})
				a := fx.w.Assignment()
				fx.w.Started(a)
				fx.b.WaitState(a.GetJob().GetId(), running)
				as = append(as, a)
			}
			return as
		},
		write: func(t *testing.T, fx *faultFixture, state any) {
			as := state.([]*jobwirev1.Assignment)
			// Hold the writer in a heartbeat's write so that the four results queue up and are
			// committed together, in one statement.
			entered, release := fx.f.Hold("heartbeat")
			defer release()
			fx.w.Send(brokertest.HeartbeatMsg(brokertest.Ref(as[0])))
			<-entered
			for _, a := range as {
				fx.w.Send(brokertest.ResultMsg(brokertest.Ref(a), nil))
			}
			// The session refuses an unknown lease at once: once this answer comes, every
			// result before it was handed to the writer.
			if r := fx.w.Heartbeat(&jobwirev1.LeaseRef{JobId: 1 << 40, LeaseToken: "1.00000000000000000000000000000000"}).GetRefused(); r == nil {
				t.Fatal("a heartbeat for an unknown lease was not refused")
			}
			release()
			acks := 0
			for range len(as) + 1 {
				m := fx.w.Next()
				switch {
				case m.GetHeartbeatAck() != nil:
				case m.GetResultAck().GetDecision() == jobwirev1.Decision_DECISION_SUCCEEDED:
					acks++
				default:
					t.Fatalf("answer %v, want a heartbeat ack and four SUCCEEDED acks", m)
				}
			}
			if acks != len(as) {
				t.Fatalf("%d results acknowledged, want %d", acks, len(as))
			}
			for _, a := range as {
				checkJob(t, fx.b, a.GetJob().GetId(), jobwirev1.JobState_JOB_STATE_SUCCEEDED, 1,
					jobwirev1.AttemptOutcome_ATTEMPT_OUTCOME_SUCCEEDED)
			}
		}},
	{kind: "release", ops: []string{"release", "batch"}, capacity: 1,
		setup: assigned,
		write: func(t *testing.T, fx *faultFixture, state any) {
			a := state.(*jobwirev1.Assignment)
			fx.w.Release(brokertest.Ref(a))
			// The job is ready again, and the worker's free slot takes it: a refusal would
			// come before this assignment.
			again := fx.w.Assignment()
			if again.GetJob().GetId() != a.GetJob().GetId() || again.GetAttempt() != 1 {
				t.Fatalf("after the release: %v, want job %d again at attempt 1", again, a.GetJob().GetId())
			}
			checkJob(t, fx.b, a.GetJob().GetId(), leased, 0)
			finish(t, fx, again)
		}},
	{kind: "cancel", ops: []string{"cancel", "batch"}, capacity: 1,
		setup: started,
		write: func(t *testing.T, fx *faultFixture, state any) {
			a := state.(*jobwirev1.Assignment)
			res, err := fx.b.Producer.CancelJob(context.Background(), &jobwirev1.CancelJobRequest{Id: a.GetJob().GetId()})
			if err != nil || res.GetJob().GetState() != jobwirev1.JobState_JOB_STATE_CANCELLED {
				t.Fatalf("cancel answered %v, %v; want the job CANCELLED", res.GetJob().GetState(), err)
			}
			c := fx.w.Next().GetCancel()
			if c.GetJobId() != a.GetJob().GetId() || c.GetReason() != jobwirev1.CancelReason_CANCEL_REASON_REQUESTED {
				t.Fatalf("worker was told %v, want to cancel job %d as requested", c, a.GetJob().GetId())
			}
			checkJob(t, fx.b, a.GetJob().GetId(), jobwirev1.JobState_JOB_STATE_CANCELLED, 1,
				jobwirev1.AttemptOutcome_ATTEMPT_OUTCOME_CANCELLED)
			onlyAudit(t, fx.b, "job.cancel")
		}},
	{kind: "unique enqueue", ops: []string{"enqueue"},
		write: func(t *testing.T, fx *faultFixture, _ any) {
			spec := &jobwirev1.JobSpec{Type: "t", Unique: &jobwirev1.UniqueOptions{Key: "k"}}
			res, err := fx.b.Producer.Enqueue(context.Background(), &jobwirev1.EnqueueRequest{Job: spec})
			if err != nil || res.GetJob().GetDuplicate() {
				t.Fatalf("unique enqueue answered %v, %v; want a new job, not a duplicate of itself", res.GetJob(), err)
			}
			onlyJobs(t, fx.b, res.GetJob().GetId())
			checkJob(t, fx.b, res.GetJob().GetId(), jobwirev1.JobState_JOB_STATE_PENDING, 0)
		}},
	{kind: "run job now", ops: []string{"job_run_now", "batch"},
		setup: func(t *testing.T, fx *faultFixture) any {
			return enqueue(t, fx.b, &jobwirev1.JobSpec{Type: "t", Schedule: &jobwirev1.JobSpec_Delay{Delay: durationpb.New(time.Hour)}})
		},
		write: func(t *testing.T, fx *faultFixture, state any) {
			id := state.(int64)
			res, err := fx.b.Admin.RunJobNow(context.Background(), &jobwirev1.RunJobNowRequest{Id: id})
			if err != nil || res.GetJob().GetState() != jobwirev1.JobState_JOB_STATE_PENDING {
				t.Fatalf("run now answered %v, %v; want the job PENDING", res.GetJob(), err)
			}
			checkJob(t, fx.b, id, jobwirev1.JobState_JOB_STATE_PENDING, 0)
			onlyAudit(t, fx.b, "job.run_now")
		}},
	{kind: "delete waiting job", ops: []string{"job_delete", "batch"},
		setup: func(t *testing.T, fx *faultFixture) any { return enqueue(t, fx.b, &jobwirev1.JobSpec{Type: "t"}) },
		write: func(t *testing.T, fx *faultFixture, state any) {
			res, err := fx.b.Admin.DeleteJob(context.Background(), &jobwirev1.DeleteJobRequest{Id: state.(int64)})
			if err != nil || res.GetJob().GetId() != state.(int64) {
				t.Fatalf("delete answered %v, %v; want the job as it was", res.GetJob(), err)
			}
			onlyJobs(t, fx.b)
			onlyAudit(t, fx.b, "job.delete")
		}},
	{kind: "requeue", ops: []string{"dlq_requeue", "batch"}, capacity: 1, failures: 1,
		setup: dead,
		write: func(t *testing.T, fx *faultFixture, state any) {
			id := state.(int64)
			res, err := fx.b.Admin.RequeueDeadJobs(context.Background(), &jobwirev1.RequeueDeadJobsRequest{
				Selection: &jobwirev1.BulkSelection{Ids: []int64{id}}})
			if err != nil || res.GetMatched() != 1 || res.GetAffected() != 1 {
				t.Fatalf("requeue answered %v, %v; want 1 matched and 1 requeued", res, err)
			}
			a := fx.w.Assignment()
			if a.GetJob().GetId() != id || a.GetAttempt() != 1 {
				t.Fatalf("assignment = %v, want the requeued job %d at attempt 1 of its new run", a, id)
			}
			checkJob(t, fx.b, id, leased, 0, jobwirev1.AttemptOutcome_ATTEMPT_OUTCOME_FAILED)
			onlyAudit(t, fx.b, "dlq.requeue")
		}},
	{kind: "purge", ops: []string{"dlq_purge", "batch"}, capacity: 1, failures: 1,
		setup: dead,
		write: func(t *testing.T, fx *faultFixture, state any) {
			id := state.(int64)
			res, err := fx.b.Admin.PurgeDeadJobs(context.Background(), &jobwirev1.PurgeDeadJobsRequest{
				Selection: &jobwirev1.BulkSelection{Ids: []int64{id}}})
			if err != nil || res.GetMatched() != 1 || res.GetAffected() != 1 {
				t.Fatalf("purge answered %v, %v; want 1 matched and 1 deleted", res, err)
			}
			onlyJobs(t, fx.b)
			onlyAudit(t, fx.b, "dlq.purge")
		}},
	{kind: "pause", ops: []string{"queue_change", "batch"},
		write: func(t *testing.T, fx *faultFixture, _ any) {
			res, err := fx.b.Admin.PauseQueue(context.Background(), &jobwirev1.PauseQueueRequest{Queue: "q"})
			if err != nil || !res.GetQueue().GetPaused() {
				t.Fatalf("pause answered %v, %v; want the queue paused", res, err)
			}
			checkQueue(t, fx.b, "q", true, 0)
			onlyAudit(t, fx.b, "queue.pause")
		}},
	{kind: "limit", ops: []string{"queue_change", "batch"},
		setup: func(t *testing.T, fx *faultFixture) any {
			return enqueue(t, fx.b, &jobwirev1.JobSpec{Type: "t", Queue: "q"}) // only a known queue takes a limit
		},
		write: func(t *testing.T, fx *faultFixture, _ any) {
			res, err := fx.b.Admin.SetQueueLimit(context.Background(), &jobwirev1.SetQueueLimitRequest{Queue: "q", Limit: 3})
			if err != nil || res.GetQueue().GetConcurrencyLimit() != 3 {
				t.Fatalf("limit answered %v, %v; want a limit of 3", res, err)
			}
			checkQueue(t, fx.b, "q", false, 3)
			onlyAudit(t, fx.b, "queue.limit")
		}},
	{kind: "rate limit", ops: []string{"rate_limit_change", "batch"},
		write: func(t *testing.T, fx *faultFixture, _ any) {
			ctx := context.Background()
			_, err := fx.b.Admin.SetRateLimit(ctx, &jobwirev1.SetRateLimitRequest{Limit: &jobwirev1.RateLimit{
				Name: "api", Rate: 5, Interval: durationpb.New(time.Second)}})
			if err != nil {
				t.Fatalf("set rate limit: %v", err)
			}
			l, err := fx.b.Admin.ListRateLimits(ctx, &jobwirev1.ListRateLimitsRequest{})
			if err != nil || len(l.GetLimits()) != 1 || l.GetLimits()[0].GetLimit().GetRate() != 5 {
				t.Fatalf("rate limits %v, %v; want the one set", l, err)
			}
			onlyAudit(t, fx.b, "ratelimit.set")
		}},
	{kind: "breaker save", ops: []string{"breaker_save"}, capacity: 1, failures: 1,
		setup: func(t *testing.T, fx *faultFixture) any {
			a := started(t, fx).(*jobwirev1.Assignment)
			ack(t, fx.w.Fail(a, brokertest.Transient("Timeout", 0)))
			return nil
		},
		write: func(t *testing.T, fx *faultFixture, _ any) {
			// The failure counted while CLOSED is saved a second later.
			fx.b.Advance(time.Second)
			var recs []store.BreakerRecord
			brokertest.WaitFor(t, "the breaker to be saved after a retry", func() bool {
				var err error
				recs, err = fx.b.Store.BreakerLoadAll(context.Background())
				return err == nil && len(recs) == 1 && fx.f.Tries("breaker_save") >= 2
			})
			var saved breaker.Saved
			if err := json.Unmarshal(recs[0].Data, &saved); err != nil || saved.Type != "t" || saved.FailureCount() != 1 {
				t.Fatalf("stored breaker %s (%v), want t with one failure", recs[0].Data, err)
			}
		}},
	{kind: "retention", ops: []string{"delete_finished", "batch"}, capacity: 1,
		setup: func(t *testing.T, fx *faultFixture) any {
			a := started(t, fx).(*jobwirev1.Assignment)
			ack(t, fx.w.Succeed(a))
			fx.b.Advance(2 * time.Minute)
			return a.GetJob().GetId()
		},
		write: func(t *testing.T, fx *faultFixture, state any) {
			res, err := fx.b.Admin.PurgeFinishedJobs(context.Background(), &jobwirev1.PurgeFinishedJobsRequest{
				OlderThan: durationpb.New(time.Minute)})
			if err != nil || res.GetPurged() != 1 {
				t.Fatalf("purge of finished jobs answered %v, %v; want 1 deleted", res, err)
			}
			onlyJobs(t, fx.b)
			if e := onlyAudit(t, fx.b, "jobs.purge_succeeded"); e.GetCount() != 1 {
				t.Fatalf("the purge's audit event counts %d jobs, want 1", e.GetCount())
			}
		}},
	// A breaker of a broker alone lives in memory: its audit event is a write of its own.
	{kind: "breaker audit", ops: []string{"audit", "batch"},
		write: func(t *testing.T, fx *faultFixture, _ any) {
			res, err := fx.b.Admin.ForceBreaker(context.Background(), &jobwirev1.ForceBreakerRequest{Type: "pay",
				State: jobwirev1.BreakerState_BREAKER_STATE_OPEN})
			if err != nil || res.GetBreaker().GetState() != jobwirev1.BreakerState_BREAKER_STATE_OPEN {
				t.Fatalf("force answered %v, %v; want the breaker OPEN", res, err)
			}
			if e := onlyAudit(t, fx.b, "breaker.force"); e.GetTarget() != "pay" {
				t.Fatalf("the audit event names breaker %q, want pay", e.GetTarget())
			}
		}},
	{kind: "audit retention", ops: []string{"delete_audit", "batch"},
		setup: func(t *testing.T, fx *faultFixture) any {
			if _, err := fx.b.Admin.PauseQueue(context.Background(), &jobwirev1.PauseQueueRequest{Queue: "q"}); err != nil {
				t.Fatal(err)
			}
			fx.b.Clock.Advance(2 * time.Hour) // past the fixture's audit retention, short of a sweep
			return nil
		},
		write: func(t *testing.T, fx *faultFixture, _ any) {
			n, err := fx.b.Broker.ApplyAuditRetention(context.Background())
			if err != nil || n != 1 {
				t.Fatalf("audit retention deleted %d events (%v), want 1", n, err)
			}
			if evs := auditEvents(t, fx.b, &jobwirev1.ListAuditEventsRequest{}); len(evs) != 0 {
				t.Fatalf("audit events left: %v", evs)
			}
		}},
	{kind: "lease expiry", ops: []string{"sweep", "batch"}, capacity: 1, failures: 1,
		setup: started,
		write: func(t *testing.T, fx *faultFixture, state any) {
			a := state.(*jobwirev1.Assignment)
			fx.b.Advance(brokertest.DefaultConfig().LeaseDuration)
			c := fx.w.Next().GetCancel()
			if c.GetJobId() != a.GetJob().GetId() || c.GetReason() != jobwirev1.CancelReason_CANCEL_REASON_LEASE_LOST {
				t.Fatalf("worker was told %v, want to stop job %d: lease lost", c, a.GetJob().GetId())
			}
			checkJob(t, fx.b, a.GetJob().GetId(), jobwirev1.JobState_JOB_STATE_SCHEDULED, 1,
				jobwirev1.AttemptOutcome_ATTEMPT_OUTCOME_LEASE_EXPIRED)
		}},
	{kind: "promote", ops: []string{"promote", "batch"}, capacity: 1,
		setup: func(t *testing.T, fx *faultFixture) any {
			return enqueue(t, fx.b, &jobwirev1.JobSpec{Type: "t", Schedule: &jobwirev1.JobSpec_Delay{Delay: durationpb.New(time.Minute)}})
		},
		write: func(t *testing.T, fx *faultFixture, state any) {
			id := state.(int64)
			fx.b.Advance(time.Minute)
			a := fx.w.Assignment()
			if a.GetJob().GetId() != id || a.GetAttempt() != 1 {
				t.Fatalf("assignment = %v, want the promoted job %d", a, id)
			}
			finish(t, fx, a)
		}},
	{kind: "schedule fire", ops: []string{"schedule.fire", "batch"},
		setup: func(t *testing.T, fx *faultFixture) any {
			addSchedule(t, fx.b, every10("s", "t"))
			return nil
		},
		write: func(t *testing.T, fx *faultFixture, _ any) {
			advanceTo(fx.b, utc("2026-03-01T12:10:00Z"))
			ids := wantFires(t, fx.b, "t", utc("2026-03-01T12:10:00Z"))
			if s := getSchedule(t, fx.b, "s"); s.GetLastJobId() != ids[0] || !s.GetNextFireAt().AsTime().Equal(utc("2026-03-01T12:20:00Z")) {
				t.Fatalf("after the fire the schedule reads %v", s)
			}
		}},
	{kind: "schedule backfill", ops: []string{"schedule.backfill", "batch"},
		setup: func(t *testing.T, fx *faultFixture) any {
			addSchedule(t, fx.b, every10("s", "t"))
			return nil
		},
		write: func(t *testing.T, fx *faultFixture, _ any) {
			res, err := fx.b.Admin.BackfillSchedule(context.Background(), &jobwirev1.BackfillScheduleRequest{Name: "s",
				From: timestamppb.New(utc("2026-03-01T11:00:00Z")), To: timestamppb.New(utc("2026-03-01T11:30:00Z"))})
			if err != nil || len(res.GetJobIds()) != 3 || res.GetExisting() != 0 {
				t.Fatalf("backfill = %v, %v; want 3 new jobs", res, err)
			}
			wantFires(t, fx.b, "t", utc("2026-03-01T11:00:00Z"), utc("2026-03-01T11:10:00Z"), utc("2026-03-01T11:20:00Z"))
		}},
	{kind: "enqueue of a new batch", ops: []string{"batch_enqueue", "batch"},
		write: func(t *testing.T, fx *faultFixture, _ any) {
			res, err := fx.b.Producer.EnqueueBatch(context.Background(), &jobwirev1.EnqueueBatchRequest{
				Batch: &jobwirev1.BatchOptions{OnComplete: &jobwirev1.JobSpec{Type: "cb"}},
				Jobs:  []*jobwirev1.JobSpec{{Type: "t"}, {Type: "t"}}})
			if err != nil {
				t.Fatalf("enqueue: %v", err)
			}
			onlyJobs(t, fx.b, res.GetJobs()[0].GetId(), res.GetJobs()[1].GetId())
			onlyBatch(t, fx, res.GetBatchId(), jobwirev1.BatchState_BATCH_STATE_CLOSED, 2)
		}},
	{kind: "close of a batch", ops: []string{"batch_close", "batch"},
		setup: func(t *testing.T, fx *faultFixture) any {
			res, err := fx.b.Producer.CreateBatch(context.Background(), &jobwirev1.CreateBatchRequest{
				Batch: &jobwirev1.BatchOptions{OnComplete: &jobwirev1.JobSpec{Type: "cb"}}})
			if err != nil {
				t.Fatal(err)
			}
			return res.GetBatch().GetId()
		},
		write: func(t *testing.T, fx *faultFixture, state any) {
			res, err := fx.b.Producer.CloseBatch(context.Background(), &jobwirev1.CloseBatchRequest{Id: state.(int64)})
			if err != nil || res.GetBatch().GetState() != jobwirev1.BatchState_BATCH_STATE_COMPLETE {
				t.Fatalf("close: %v, %v; want the empty batch complete", res, err)
			}
			onlyJobs(t, fx.b, res.GetBatch().GetCompleteJobId()) // its callback, once
		}},
	{kind: "result of a batch's last job", ops: []string{"result", "batch"}, capacity: 1,
		setup: func(t *testing.T, fx *faultFixture) any {
			res, err := fx.b.Producer.EnqueueBatch(context.Background(), &jobwirev1.EnqueueBatchRequest{
				Batch: &jobwirev1.BatchOptions{OnComplete: &jobwirev1.JobSpec{Type: "cb"}},
				Jobs:  []*jobwirev1.JobSpec{{Type: "t"}}})
			if err != nil {
				t.Fatal(err)
			}
			a := fx.w.Assignment()
			fx.w.Started(a)
			fx.b.WaitState(a.GetJob().GetId(), running)
			return [2]any{res.GetBatchId(), a}
		},
		write: func(t *testing.T, fx *faultFixture, state any) {
			id, a := state.([2]any)[0].(int64), state.([2]any)[1].(*jobwirev1.Assignment)
			if r := ack(t, fx.w.Succeed(a)); r.GetDecision() != jobwirev1.Decision_DECISION_SUCCEEDED {
				t.Fatalf("decision = %s, want SUCCEEDED", r.GetDecision())
			}
			b := onlyBatch(t, fx, id, jobwirev1.BatchState_BATCH_STATE_COMPLETE, 1)
			if b.GetSucceeded() != 1 {
				t.Fatalf("batch %v, want its one job counted once", b)
			}
			onlyJobs(t, fx.b, a.GetJob().GetId(), b.GetCompleteJobId()) // the callback, once
		}},
}

// TestStorageFaultMatrix runs every kind of storage write with a fault before its
// transaction, inside it and after its commit, on each of the broker's writers (group commit
// and its reference, one operation per transaction). Every fault is retried by the storage
// retry policy: the job's attempts, history and state, its type's breaker and what the worker
// or producer was told must be what they are without a fault.
func TestStorageFaultMatrix(t *testing.T) {
	t.Parallel()
	for _, tc := range faultCases {
		for _, phase := range []brokertest.Phase{brokertest.FaultBefore, brokertest.FaultInside, brokertest.FaultAfterCommit} {
			for _, commit := range brokertest.Commits {
				if tc.grouped && commit != broker.GroupCommit {
					continue
				}
				t.Run(tc.kind+"/"+phase.String()+"/"+commit.String(), func(t *testing.T) {
					t.Parallel()
					testStorageFault(t, tc, phase, commit)
				})
			}
		}
	}
}

// testStorageFault runs tc's write with a fault in phase on a broker whose writer is commit.
func testStorageFault(t *testing.T, tc faultCase, phase brokertest.Phase, commit broker.Commit) {
	cfg := brokertest.DefaultConfig()
	cfg.Retention.Interval = 24 * time.Hour // only the call under test deletes jobs
	cfg.Retention.Audit = time.Hour
	f := brokertest.NewFaults(t, brokertest.DefaultFaultRetries)
	fx := &faultFixture{f: f, b: brokertest.New(t, brokertest.Options{Faults: f, Config: cfg, Commit: &commit})}
	if tc.capacity > 0 {
		fx.w = fx.b.Connect(brokertest.Hello("w1", tc.capacity, "t"))
	}
	var state any
	if tc.setup != nil {
		state = tc.setup(t, fx)
	}
	before := fx.b.Store.StorageRetries()["SQLITE_BUSY"]
	f.Inject(phase, 1, tc.ops...)
	tc.write(t, fx, state)
	if n := f.Pending(); n != 0 {
		t.Fatalf("the %s fault was never injected: no write named %v", phase, tc.ops)
	}
	if got := fx.b.Store.StorageRetries()["SQLITE_BUSY"]; got != before+1 {
		t.Errorf("storage retries %d, want %d: the fault is retried once", got, before+1)
	}
	checkBreaker(t, fx.b, tc.failures)
}

// assigned leases a new job to the fixture's worker.
func assigned(t *testing.T, fx *faultFixture) any {
	t.Helper()
	id := enqueue(t, fx.b, &jobwirev1.JobSpec{Type: "t"})
	a := fx.w.Assignment()
	if a.GetJob().GetId() != id {
		t.Fatalf("assignment for job %d, want %d", a.GetJob().GetId(), id)
	}
	return a
}

// started leases a new job and stores its start.
func started(t *testing.T, fx *faultFixture) any {
	t.Helper()
	a := assigned(t, fx).(*jobwirev1.Assignment)
	fx.w.Started(a)
	fx.b.WaitState(a.GetJob().GetId(), running)
	return a
}

// dead runs a job with one attempt into the dead-letter queue.
func dead(t *testing.T, fx *faultFixture) any {
	t.Helper()
	id := enqueue(t, fx.b, &jobwirev1.JobSpec{Type: "t", MaxAttempts: 1})
	a := fx.w.Assignment()
	fx.w.Started(a)
	if r := ack(t, fx.w.Fail(a, brokertest.Transient("Timeout", 0))); r.GetDecision() != jobwirev1.Decision_DECISION_DEAD {
		t.Fatalf("decision = %s, want DEAD", r.GetDecision())
	}
	return id
}

// finish succeeds a held job and checks it counted one attempt (or one more, after a requeue).
func finish(t *testing.T, fx *faultFixture, a *jobwirev1.Assignment) {
	t.Helper()
	fx.w.Started(a)
	if r := ack(t, fx.w.Succeed(a)); r.GetDecision() != jobwirev1.Decision_DECISION_SUCCEEDED {
		t.Fatalf("decision = %s, want SUCCEEDED", r.GetDecision())
	}
	checkJob(t, fx.b, a.GetJob().GetId(), jobwirev1.JobState_JOB_STATE_SUCCEEDED, 1,
		jobwirev1.AttemptOutcome_ATTEMPT_OUTCOME_SUCCEEDED)
}

// waitStored waits until the planned fault was injected and the job is in state: the write
// is through, with its retry.
func waitStored(t *testing.T, fx *faultFixture, id int64, state jobwirev1.JobState) {
	t.Helper()
	brokertest.WaitFor(t, "the injected faults to be used up", func() bool { return fx.f.Pending() == 0 })
	fx.b.WaitState(id, state)
}

// checkJob fails unless job id is in state after attempts attempts of its current run, with
// one history record per attempt ever made, of the outcomes given.
func checkJob(t *testing.T, b *brokertest.Bundle, id int64, state jobwirev1.JobState, attempts int32, outcomes ...jobwirev1.AttemptOutcome) {
	t.Helper()
	j := getJob(t, b, id)
	var got []jobwirev1.AttemptOutcome
	for _, a := range j.GetAttemptHistory() {
		got = append(got, a.GetOutcome())
	}
	if j.GetState() != state || j.GetAttempts() != attempts || len(got) != len(outcomes) {
		t.Fatalf("job %d: %s after %d attempts, history %v; want %s after %d, history %v",
			id, j.GetState(), j.GetAttempts(), got, state, attempts, outcomes)
	}
	for i := range got {
		if got[i] != outcomes[i] {
			t.Fatalf("job %d: history %v, want %v", id, got, outcomes)
		}
	}
}

// onlyJobs fails unless the store holds exactly the jobs ids, in the order they were created.
func onlyJobs(t *testing.T, b *brokertest.Bundle, ids ...int64) {
	t.Helper()
	jobs, err := b.Store.JobList(context.Background(), &store.JobListParams{Order: store.ListOrder{Asc: true}, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	var got []int64
	for _, j := range jobs {
		got = append(got, j.ID)
	}
	if len(got) != len(ids) {
		t.Fatalf("stored jobs %v, want %v", got, ids)
	}
	for i := range got {
		if got[i] != ids[i] {
			t.Fatalf("stored jobs %v, want %v", got, ids)
		}
	}
}

// checkQueue fails unless queue name is stored with the settings given.
func checkQueue(t *testing.T, b *brokertest.Bundle, name string, paused bool, limit int) {
	t.Helper()
	qs, err := b.Store.QueueStats(context.Background(), name)
	if err != nil || len(qs) != 1 || qs[0].Paused != paused || qs[0].ConcurrencyLimit != limit {
		t.Fatalf("queue %s stored as %+v (%v), want paused %v, limit %d", name, qs, err, paused, limit)
	}
}

// checkBreaker fails unless type t's breaker is CLOSED with failures counted in its window.
func checkBreaker(t *testing.T, b *brokertest.Bundle, failures int32) {
	t.Helper()
	res, err := b.Admin.ListBreakers(context.Background(), &jobwirev1.ListBreakersRequest{})
	if err != nil {
		t.Fatalf("list breakers: %v", err)
	}
	var got int32
	for _, br := range res.GetBreakers() {
		if br.GetType() != "t" {
			continue
		}
		if br.GetState() != jobwirev1.BreakerState_BREAKER_STATE_CLOSED {
			t.Errorf("breaker of t is %s, want CLOSED", br.GetState())
		}
		got = br.GetFailuresInWindow()
	}
	if got != failures {
		t.Errorf("breaker of t counted %d failures, want %d: a storage fault must not count, nor a failure twice", got, failures)
	}
}

// The Go worker library against a broker whose every job write fails once, before its
// transaction, inside it or after its commit: each job still runs as often as its handler's
// outcomes ask, with that many attempts in its history, and the breaker counts each reported
// failure once.
func TestGoWorkerUnderStorageFaults(t *testing.T) {
	t.Parallel()
	for _, phase := range []brokertest.Phase{brokertest.FaultBefore, brokertest.FaultInside, brokertest.FaultAfterCommit} {
		t.Run(phase.String(), func(t *testing.T) {
			t.Parallel()
			f := brokertest.NewFaults(t, brokertest.DefaultFaultRetries)
			f.InjectEveryCall(phase, 1, "enqueue", "lease", "start", "heartbeat", "result", "batch", "promote", "sweep")
			// Count mode, as the failures below are counted against its threshold.
			b := brokertest.New(t, brokertest.Options{Faults: f,
				Breakers: &broker.BreakerOptions{Default: breaker.CountConfig()}})
			const jobs = 6
			ids := make([]int64, jobs)
			for i := range ids {
				ids[i] = enqueue(t, b, &jobwirev1.JobSpec{Type: "t"})
			}
			// By id: a third succeed, a third fail once and then succeed, a third fail fatally.
			var mu sync.Mutex
			calls := map[int64]int{}
			w, err := worker.New(b.Conn, worker.Options{ID: "sdk", Concurrency: 3, ShutdownGrace: time.Second,
				Logger: slog.New(slog.DiscardHandler), ReconnectBackoff: worker.Backoff{Rand: func() float64 { return 0 }}})
			if err != nil {
				t.Fatal(err)
			}
			w.Handle("t", func(ctx context.Context, j *worker.Job) error {
				mu.Lock()
				calls[j.ID]++
				n := calls[j.ID]
				mu.Unlock()
				switch {
				case j.ID%3 == 2:
					return worker.Fatal(errDependency)
				case j.ID%3 == 0 && n == 1:
					return errDependency
				}
				return nil
			})
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- w.Run(ctx) }()
			t.Cleanup(func() { cancel(); <-done })

			want := map[int64]jobwirev1.JobState{}
			for _, id := range ids {
				want[id] = []jobwirev1.JobState{jobwirev1.JobState_JOB_STATE_SCHEDULED, jobwirev1.JobState_JOB_STATE_SUCCEEDED,
					jobwirev1.JobState_JOB_STATE_DEAD}[id%3]
				b.WaitState(id, want[id])
			}
			b.Advance(10 * time.Second) // past the retry wait of the jobs that failed once, within the breaker window
			succeeded, failed, dead := jobwirev1.AttemptOutcome_ATTEMPT_OUTCOME_SUCCEEDED,
				jobwirev1.AttemptOutcome_ATTEMPT_OUTCOME_FAILED, jobwirev1.JobState_JOB_STATE_DEAD
			for _, id := range ids {
				switch id % 3 {
				case 0:
					b.WaitState(id, jobwirev1.JobState_JOB_STATE_SUCCEEDED)
					checkJob(t, b, id, jobwirev1.JobState_JOB_STATE_SUCCEEDED, 2, failed, succeeded)
				case 1:
					checkJob(t, b, id, jobwirev1.JobState_JOB_STATE_SUCCEEDED, 1, succeeded)
				case 2:
					checkJob(t, b, id, dead, 1, failed)
				}
				mu.Lock()
				n := calls[id]
				mu.Unlock()
				if wantCalls := []int{2, 1, 1}[id%3]; n != wantCalls {
					t.Errorf("job %d: handler ran %d times, want %d", id, n, wantCalls)
				}
			}
			if f.Injected() == 0 {
				t.Fatal("no fault was injected")
			}
			// Two transient and two fatal failures, each counted once: below the threshold of 5.
			checkBreaker(t, b, 4)
		})
	}
}

// onlyBatch checks that the one batch stored is id, in state with total jobs, and returns it.
func onlyBatch(t *testing.T, fx *faultFixture, id int64, state jobwirev1.BatchState, total int64) *jobwirev1.Batch {
	t.Helper()
	list, err := fx.b.Admin.ListBatches(context.Background(), &jobwirev1.ListBatchesRequest{})
	if err != nil || len(list.GetBatches()) != 1 {
		t.Fatalf("batches: %v, %v; want one", list, err)
	}
	b := list.GetBatches()[0]
	if b.GetId() != id || b.GetState() != state || b.GetTotal() != total {
		t.Fatalf("batch %v, want batch %d %s with %d jobs", b, id, state, total)
	}
	return b
}
