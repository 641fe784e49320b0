package server

import (
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
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

// A wait's columns (endsToProto) tell each job what its outcome message tells, and carry a
// detail for exactly the jobs with a result, a dead reason or an error of any part.
func TestEndsToProtoTellsWhatOutcomeTells(t *testing.T) {
	at := time.Date(2026, 3, 4, 5, 6, 7, 890_123_456, time.UTC)
	jobs := []*job.Job{
		{ID: 1, Type: "t", Queue: "q", State: job.StateSucceeded, Attempts: 1, FinishedAt: at, Result: []byte("r")},
		{ID: 2, Type: "t", Queue: "q", State: job.StateSucceeded, Attempts: 2, FinishedAt: at}, // nothing more to tell
		{ID: 3, Type: "u", Queue: "t", State: job.StateDead, DeadReason: job.DeadFatal, LastErrorType: "E",
			LastErrorMessage: "m", FinishedAt: at.Add(time.Second)},
		{ID: 4, Type: "t", Queue: "q", State: job.StateCancelled, LastErrorMessage: "no type", FinishedAt: at}, // failed, then cancelled
		{ID: 5, Type: "t", Queue: "q", State: job.StateCancelled, LastErrorType: "PARENT_FAILED", FinishedAt: at},
		{ID: 6, Type: "t", Queue: "q", State: job.StateDead, DeadReason: job.DeadLeaseExpired}, // no end time
	}
	ends := endsToProto(jobs)
	if want := []string{"t", "q", "u"}; !slices.Equal(ends.GetNames(), want) {
		t.Errorf("names %q, want %q", ends.GetNames(), want)
	}
	details := map[uint32]*jobwirev1.JobEndDetail{}
	for _, d := range ends.GetDetails() {
		details[d.GetIndex()] = d
	}
	for i, j := range jobs {
		o := (*protoSlab)(nil).outcome(j)
		var end int64
		if o.GetFinishedAt() != nil {
			end = o.GetFinishedAt().AsTime().UnixNano()
		}
		if ends.GetIds()[i] != o.GetId() || ends.GetStates()[i] != o.GetState() || ends.GetAttempts()[i] != o.GetAttempts() ||
			ends.GetFinishedAtUnixNanos()[i] != end || ends.GetNames()[ends.GetTypes()[i]] != o.GetType() ||
			ends.GetNames()[ends.GetQueues()[i]] != o.GetQueue() {
			t.Errorf("job %d: columns %v, want %v", j.ID, ends, o)
		}
		d, ok := details[uint32(i)]
		tells := len(o.GetResult()) > 0 || o.GetDeadReason() != 0 || o.GetLastErrorType() != "" || o.GetLastErrorMessage() != ""
		if ok != tells {
			t.Errorf("job %d: a detail %t, want %t", j.ID, ok, tells)
		}
		if string(d.GetResult()) != string(o.GetResult()) || d.GetDeadReason() != o.GetDeadReason() ||
			d.GetLastErrorType() != o.GetLastErrorType() || d.GetLastErrorMessage() != o.GetLastErrorMessage() {
			t.Errorf("job %d: detail %v, want the outcome's %v", j.ID, d, o)
		}
	}
}
