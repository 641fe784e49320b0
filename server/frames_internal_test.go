package server

import (
	"slices"
	"testing"

	"github.com/jobwire/jobwire/broker"
	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/store"
)

// frames wraps only what is ready together, only for a worker that accepts batches, and never
// more than MaxBatchMessages in one frame.
func TestFramesChunking(t *testing.T) {
	t.Parallel()
	drains := func(n int) []broker.Message {
		out := make([]broker.Message, n)
		for i := range out {
			out[i] = broker.Drain{Reason: "r"}
		}
		return out
	}
	tests := []struct {
		name    string
		n       int
		batches bool
		want    []int // messages per frame; 0 for a frame that is not a batch
	}{
		{"one message, batches accepted", 1, true, []int{0}},
		{"several, batches accepted", 3, true, []int{3}},
		{"several, batches not accepted", 3, false, []int{0, 0, 0}},
		{"at the limit", MaxBatchMessages, true, []int{MaxBatchMessages}},
		{"one over the limit", MaxBatchMessages + 1, true, []int{MaxBatchMessages, 0}},
		{"two over the limit", MaxBatchMessages + 2, true, []int{MaxBatchMessages, 2}},
	}
	for _, tt := range tests {
		var got []int
		for _, f := range frames(drains(tt.n), tt.batches, MaxWorkerMessageBytes, noneTooLarge(t)) {
			got = append(got, len(f.GetBatch().GetMessages()))
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("%s: frames of %v, want %v", tt.name, got, tt.want)
		}
	}
}

// A batch frame gathers at most MaxBatchBytes of messages, so jobs of large payloads that are
// ready together never make a frame the worker cannot read (gRPC reads 4 MiB by default); one
// job larger than that goes alone.
func TestFramesStopAtTheByteLimit(t *testing.T) {
	t.Parallel()
	assignment := func(payload int) broker.Message {
		return broker.Assignment{Job: &job.Job{ID: 1, Type: "t", Queue: "q", Payload: make([]byte, payload)}, Attempt: 1}
	}
	assignments := func(n, payload int) []broker.Message {
		out := make([]broker.Message, n)
		for i := range out {
			out[i] = assignment(payload)
		}
		return out
	}
	tests := []struct {
		name string
		msgs []broker.Message
		want []int // messages per frame; 0 for a frame that is not a batch
	}{
		{"small ones share a frame", assignments(3, 100), []int{3}},
		{"three of 300 KiB fit, a fourth starts the next", assignments(4, 300<<10), []int{3, 0}},
		{"two of 600 KiB go one by one", assignments(2, 600<<10), []int{0, 0}},
		{"eight near the payload limit go one by one", assignments(8, 900<<10), []int{0, 0, 0, 0, 0, 0, 0, 0}},
		{"one over the limit goes alone, the small ones after it together",
			append([]broker.Message{assignment(MaxBatchBytes + 1)}, assignments(2, 100)...), []int{0, 2}},
	}
	for _, tt := range tests {
		var got []int
		for _, f := range frames(tt.msgs, true, MaxWorkerMessageBytes, noneTooLarge(t)) {
			got = append(got, len(f.GetBatch().GetMessages()))
			if b := f.GetBatch(); b != nil && f.SizeVT() > MaxBatchBytes+16 {
				t.Errorf("%s: a batch frame of %d bytes, more than the limit of %d", tt.name, f.SizeVT(), MaxBatchBytes)
			}
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("%s: frames of %v, want %v", tt.name, got, tt.want)
		}
	}
}

// noneTooLarge is frames' tooLarge for messages that all fit: it fails the test if called.
func noneTooLarge(t *testing.T) func(job.LeaseRef, int, int) {
	return func(ref job.LeaseRef, size, _ int) {
		t.Errorf("job %d's assignment of %d bytes was held back as too large", ref.JobID, size)
	}
}

// An assignment larger than a worker reads is never sent, in a batch or alone: it is handed
// back, with its size, for its job to be dead-lettered, and what was ready with it goes on.
func TestFramesHoldBackAnAssignmentTooLargeToRead(t *testing.T) {
	t.Parallel()
	big := broker.Assignment{Job: &job.Job{ID: 7, Type: "t", Queue: "q"}, Attempt: 1, Token: job.LeaseToken{Seq: 1},
		Parents: []store.ParentInfo{{ID: 1, Result: make([]byte, 3<<20)}, {ID: 2, Result: make([]byte, 1<<20)}}}
	fits := broker.Assignment{Job: &job.Job{ID: 8, Type: "t", Queue: "q", Payload: make([]byte, 3<<20)}, Attempt: 1}
	for _, batches := range []bool{false, true} {
		var held []job.LeaseRef
		var sizes []int
		var sent []int64
		for _, f := range frames([]broker.Message{broker.Drain{Reason: "r"}, big, fits}, batches, MaxWorkerMessageBytes,
			func(ref job.LeaseRef, size, limit int) {
				held, sizes = append(held, ref), append(sizes, size)
				if limit != MaxWorkerMessageBytes {
					t.Errorf("limit %d, want %d", limit, MaxWorkerMessageBytes)
				}
			}) {
			if f.SizeVT() > MaxWorkerMessageBytes {
				t.Errorf("batches %v: a frame of %d bytes was sent", batches, f.SizeVT())
			}
			if a := f.GetAssignment(); a != nil {
				sent = append(sent, a.GetJob().GetId())
			}
		}
		if want := []job.LeaseRef{{JobID: 7, Token: job.LeaseToken{Seq: 1}}}; !slices.Equal(held, want) ||
			sizes[0] <= MaxWorkerMessageBytes {
			t.Errorf("batches %v: held back %v of %v bytes, want job 7's lease, of more than %d", batches, held, sizes, MaxWorkerMessageBytes)
		}
		if !slices.Equal(sent, []int64{8}) {
			t.Errorf("batches %v: sent the assignments of jobs %v, want [8]", batches, sent)
		}
	}
}
