package client

import (
	"errors"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/job"
)

// assertProto fails the test when got and want differ, showing both.
func assertProto(t *testing.T, got, want proto.Message) {
	t.Helper()
	if !proto.Equal(got, want) {
		t.Errorf("request mismatch\n got: %s\nwant: %s", prototext.Format(got), prototext.Format(want))
	}
}

func TestEnqueuePutsOptionsInTheirFields(t *testing.T) {
	t.Parallel()
	runAt := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		name string
		opts []EnqueueOption
		want *jobwirev1.JobSpec
	}{
		{
			name: "type and payload only",
			want: &jobwirev1.JobSpec{Type: "email.send", Payload: []byte(`{"to":"a"}`)},
		},
		{
			name: "every option with a delay",
			opts: []EnqueueOption{Queue("mail"), Priority(5), Delay(time.Minute), MaxAttempts(3), IdempotencyKey("k"), AttemptTimeout(30 * time.Second)},
			want: &jobwirev1.JobSpec{
				Type: "email.send", Payload: []byte(`{"to":"a"}`), Queue: "mail", Priority: 5,
				Schedule:    &jobwirev1.JobSpec_Delay{Delay: durationpb.New(time.Minute)},
				MaxAttempts: 3, IdempotencyKey: "k", AttemptTimeout: durationpb.New(30 * time.Second),
			},
		},
		{
			name: "run at",
			opts: []EnqueueOption{RunAt(runAt)},
			want: &jobwirev1.JobSpec{Type: "email.send", Payload: []byte(`{"to":"a"}`), Schedule: &jobwirev1.JobSpec_RunAt{RunAt: timestamppb.New(runAt)}},
		},
		{
			name: "a later delay replaces run at",
			opts: []EnqueueOption{RunAt(runAt), Delay(time.Second)},
			want: &jobwirev1.JobSpec{Type: "email.send", Payload: []byte(`{"to":"a"}`), Schedule: &jobwirev1.JobSpec_Delay{Delay: durationpb.New(time.Second)}},
		},
		{
			name: "a later run at replaces delay",
			opts: []EnqueueOption{Delay(time.Second), RunAt(runAt)},
			want: &jobwirev1.JobSpec{Type: "email.send", Payload: []byte(`{"to":"a"}`), Schedule: &jobwirev1.JobSpec_RunAt{RunAt: timestamppb.New(runAt)}},
		},
		{
			name: "negative priority",
			opts: []EnqueueOption{Priority(-1000)},
			want: &jobwirev1.JobSpec{Type: "email.send", Payload: []byte(`{"to":"a"}`), Priority: -1000},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, map[string]handler{"Enqueue": reply(&jobwirev1.EnqueueResponse{Job: &jobwirev1.EnqueuedJob{Id: 1}})})
			if _, err := b.client.Enqueue(t.Context(), "email.send", []byte(`{"to":"a"}`), tt.opts...); err != nil {
				t.Fatal(err)
			}
			assertProto(t, b.broker.lastRequest(t, "Enqueue"), &jobwirev1.EnqueueRequest{Job: tt.want})
		})
	}
}

func TestEnqueueReturnsTheBrokersAnswer(t *testing.T) {
	t.Parallel()
	runAt := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	b := setup(t, map[string]handler{"Enqueue": reply(&jobwirev1.EnqueueResponse{Job: &jobwirev1.EnqueuedJob{
		Id: 42, Duplicate: true, State: jobwirev1.JobState_JOB_STATE_SCHEDULED, RunAt: timestamppb.New(runAt),
	}})})
	res, err := b.client.Enqueue(t.Context(), "t", nil, IdempotencyKey("k"))
	if err != nil {
		t.Fatal(err)
	}
	want := EnqueueResult{ID: 42, Duplicate: true, State: job.StateScheduled, RunAt: runAt}
	if *res != want {
		t.Errorf("got %+v, want %+v", *res, want)
	}
}

func TestEnqueueRefusesLocallyWhatCannotBeSent(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	tests := []struct {
		name string
		spec JobSpec
	}{
		{"both schedules", JobSpec{Type: "t", RunAt: time.Now(), Delay: time.Second}},
		{"priority wraps int32", JobSpec{Type: "t", Priority: 1 << 40}},
		{"max attempts wraps int32", JobSpec{Type: "t", MaxAttempts: -1 << 40}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := b.client.EnqueueBatch(t.Context(), []JobSpec{{Type: "ok"}, tt.spec})
			if !errors.Is(err, ErrInvalidArgument) {
				t.Fatalf("got %v, want ErrInvalidArgument", err)
			}
		})
	}
	if n := len(b.broker.requests("EnqueueBatch")); n != 0 {
		t.Errorf("broker received %d requests, want none", n)
	}
}

func TestEnqueueJSON(t *testing.T) {
	t.Parallel()
	b := setup(t, map[string]handler{"Enqueue": reply(&jobwirev1.EnqueueResponse{Job: &jobwirev1.EnqueuedJob{Id: 7}})})
	res, err := b.client.EnqueueJSON(t.Context(), "email.send", map[string]string{"to": "ada"}, Queue("mail"))
	if err != nil {
		t.Fatal(err)
	}
	if res.ID != 7 {
		t.Errorf("ID = %d, want 7", res.ID)
	}
	assertProto(t, b.broker.lastRequest(t, "Enqueue"), &jobwirev1.EnqueueRequest{Job: &jobwirev1.JobSpec{
		Type: "email.send", Payload: []byte(`{"to":"ada"}`), Queue: "mail",
	}})

	if _, err := b.client.EnqueueJSON(t.Context(), "t", make(chan int)); err == nil {
		t.Error("EnqueueJSON of a channel succeeded, want an encoding error")
	}
}

func TestEnqueueBatch(t *testing.T) {
	t.Parallel()
	b := setup(t, map[string]handler{"EnqueueBatch": func(req proto.Message) (proto.Message, error) {
		resp := &jobwirev1.EnqueueBatchResponse{}
		for i := range req.(*jobwirev1.EnqueueBatchRequest).GetJobs() {
			resp.Jobs = append(resp.Jobs, &jobwirev1.EnqueuedJob{Id: int64(100 + i), State: jobwirev1.JobState_JOB_STATE_PENDING})
		}
		return resp, nil
	}})
	specs := []JobSpec{
		NewJobSpec("a", []byte("1"), Queue("q1")),
		NewJobSpec("b", []byte("2"), Priority(3), Delay(time.Hour)),
	}
	res, err := b.client.EnqueueBatch(t.Context(), specs)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 2 || res[0].ID != 100 || res[1].ID != 101 || res[1].State != job.StatePending {
		t.Errorf("results = %+v, want ids 100 and 101 in order, PENDING", res)
	}
	assertProto(t, b.broker.lastRequest(t, "EnqueueBatch"), &jobwirev1.EnqueueBatchRequest{Jobs: []*jobwirev1.JobSpec{
		{Type: "a", Payload: []byte("1"), Queue: "q1"},
		{Type: "b", Payload: []byte("2"), Priority: 3, Schedule: &jobwirev1.JobSpec_Delay{Delay: durationpb.New(time.Hour)}},
	}})

	empty, err := b.client.EnqueueBatch(t.Context(), nil)
	if err != nil || empty != nil {
		t.Errorf("EnqueueBatch(nil) = %v, %v; want nil, nil", empty, err)
	}
	if n := len(b.broker.requests("EnqueueBatch")); n != 1 {
		t.Errorf("broker received %d batches, want 1 (an empty batch is not sent)", n)
	}
}

func TestEnqueueBatchRejectsAShortAnswer(t *testing.T) {
	t.Parallel()
	b := setup(t, map[string]handler{"EnqueueBatch": reply(&jobwirev1.EnqueueBatchResponse{Jobs: []*jobwirev1.EnqueuedJob{{Id: 1}}})})
	if _, err := b.client.EnqueueBatch(t.Context(), []JobSpec{{Type: "a"}, {Type: "b"}}); err == nil {
		t.Fatal("a response with fewer results than jobs was accepted")
	}
}

func TestGetConvertsTheWholeJob(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	pb := &jobwirev1.Job{
		Id: 9, Type: "email.send", Queue: "mail", Payload: []byte("p"), Priority: -3,
		State: jobwirev1.JobState_JOB_STATE_DEAD, Attempts: 2, MaxAttempts: 2,
		RunAt: timestamppb.New(t0), CreatedAt: timestamppb.New(t0.Add(-time.Hour)), FinishedAt: timestamppb.New(t0.Add(time.Minute)),
		IdempotencyKey: "k", AttemptTimeout: durationpb.New(time.Minute),
		DeadReason:    jobwirev1.DeadReason_DEAD_REASON_MAX_ATTEMPTS_EXHAUSTED,
		LastErrorType: "SMTPError", LastErrorMessage: "451 try later",
		AttemptHistory: []*jobwirev1.Attempt{
			{Number: 1, WorkerId: "w1", StartedAt: timestamppb.New(t0), FinishedAt: timestamppb.New(t0.Add(time.Second)),
				Outcome: jobwirev1.AttemptOutcome_ATTEMPT_OUTCOME_FAILED, FailureKind: jobwirev1.FailureKind_FAILURE_KIND_TRANSIENT,
				ErrorType: "SMTPError", Message: "451", Details: "trace"},
			{Number: 2, WorkerId: "w2", StartedAt: timestamppb.New(t0.Add(time.Minute)), Outcome: jobwirev1.AttemptOutcome_ATTEMPT_OUTCOME_LEASE_EXPIRED},
		},
	}
	b := setup(t, map[string]handler{"GetJob": reply(&jobwirev1.GetJobResponse{Job: pb})})
	j, err := b.client.Get(t.Context(), 9)
	if err != nil {
		t.Fatal(err)
	}
	assertProto(t, b.broker.lastRequest(t, "GetJob"), &jobwirev1.GetJobRequest{Id: 9})

	if j.ID != 9 || j.Type != "email.send" || j.Queue != "mail" || string(j.Payload) != "p" || j.Priority != -3 ||
		j.State != job.StateDead || j.Attempts != 2 || j.MaxAttempts != 2 || !j.RunAt.Equal(t0) ||
		!j.CreatedAt.Equal(t0.Add(-time.Hour)) || !j.FinishedAt.Equal(t0.Add(time.Minute)) || j.IdempotencyKey != "k" ||
		j.AttemptTimeout != time.Minute || j.DeadReason != job.DeadMaxAttemptsExhausted ||
		j.LastErrorType != "SMTPError" || j.LastErrorMessage != "451 try later" {
		t.Errorf("job fields wrong: %+v", j)
	}
	wantHistory := []job.Attempt{
		{Number: 1, WorkerID: "w1", StartedAt: t0, FinishedAt: t0.Add(time.Second), Outcome: job.OutcomeFailed,
			FailureKind: job.KindTransient, ErrorType: "SMTPError", Message: "451", Details: "trace"},
		{Number: 2, WorkerID: "w2", StartedAt: t0.Add(time.Minute), Outcome: job.OutcomeLeaseExpired},
	}
	if len(j.History) != len(wantHistory) {
		t.Fatalf("history has %d attempts, want %d", len(j.History), len(wantHistory))
	}
	for i, a := range j.History {
		w := wantHistory[i]
		if a.Number != w.Number || a.WorkerID != w.WorkerID || !a.StartedAt.Equal(w.StartedAt) || !a.FinishedAt.Equal(w.FinishedAt) ||
			a.Outcome != w.Outcome || a.FailureKind != w.FailureKind || a.ErrorType != w.ErrorType || a.Message != w.Message || a.Details != w.Details {
			t.Errorf("attempt %d = %+v, want %+v", i, a, w)
		}
	}
	if !j.History[1].FinishedAt.IsZero() {
		t.Error("an unset finished_at became a non-zero time")
	}
}

func TestCancel(t *testing.T) {
	t.Parallel()
	b := setup(t, map[string]handler{"CancelJob": reply(&jobwirev1.CancelJobResponse{Job: &jobwirev1.Job{Id: 5, State: jobwirev1.JobState_JOB_STATE_CANCELLED}})})
	j, err := b.client.Cancel(t.Context(), 5)
	if err != nil {
		t.Fatal(err)
	}
	if j.State != job.StateCancelled {
		t.Errorf("state = %s, want CANCELLED", j.State)
	}
	assertProto(t, b.broker.lastRequest(t, "CancelJob"), &jobwirev1.CancelJobRequest{Id: 5})
}
