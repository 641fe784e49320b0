package server

import (
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/jobwire/jobwire/job"
)

// A slab gives each job the message jobToProto gives it, timestamps and durations included,
// also once it is full (a job more than it was made for, or with more timestamps).
func TestProtoSlabMatchesJobToProto(t *testing.T) {
	at := time.Date(2026, 3, 4, 5, 6, 7, 890_123_456, time.UTC)
	jobs := []*job.Job{
		{ID: 1, Type: "t", Queue: "q", State: job.StateSucceeded, Attempts: 1, MaxAttempts: 3, RunAt: at,
			CreatedAt: at.Add(-time.Hour), FinishedAt: at.Add(time.Second), AttemptTimeout: 90*time.Second + 5,
			Result: []byte("r"), Payload: []byte("p"), History: []job.Attempt{{Number: 1}}},
		{ID: 2, Type: "t", State: job.StateDead, DeadReason: job.DeadMaxAttemptsExhausted, LastErrorType: "E",
			LastErrorMessage: "m", CreatedAt: at, FinishedAt: at, UniqueKey: "u",
			UniqueStates: []job.State{job.StatePending}},
		{ID: 3, Type: "t", State: job.StateRunning, CreatedAt: at, StartedAt: at, WorkerID: "w",
			Progress: &job.Progress{Attempt: 1, Fraction: 0.5, HasFraction: true, UpdatedAt: at}},
		{ID: 4, Type: "t", State: job.StatePending}, // no timestamp at all
	}
	for _, size := range []int{len(jobs), 1, 0} {
		slab, outcomes := newProtoSlab(size), newOutcomeSlab(size)
		for _, j := range jobs {
			got, want := slab.watched(j), (*protoSlab)(nil).watched(j)
			if !proto.Equal(got, want) {
				t.Fatalf("slab of %d: job %d is %v, want %v", size, j.ID, got, want)
			}
			if got.GetPayload() != nil || (j.State != job.StateRunning && got.GetAttemptHistory() != nil) {
				t.Fatalf("job %d is watched with its payload or history: %v", j.ID, got)
			}
			if got, want := outcomes.outcome(j), (*protoSlab)(nil).outcome(j); !proto.Equal(got, want) {
				t.Fatalf("outcome slab of %d: job %d is %v, want %v", size, j.ID, got, want)
			}
			if whole := slab.job(j); len(j.Payload) > 0 && string(whole.GetPayload()) != string(j.Payload) {
				t.Fatalf("job %d is sent whole without its payload: %v", j.ID, whole)
			}
		}
	}
}
