package server_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/jobwire/jobwire/broker"
	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/brokertest"
)

// A job that ends by its worker's result is sent to its watches as the result's write left it:
// the broker hands the watch the job as leased plus what the write stored, without reading the
// job again, when that is the whole job (its first lease, no progress). What the watch sends is
// then field for field what a read sends (a watch opened once the job is final reads it) and
// what GetJob returns, but for what a watch leaves out: payload, attempt history and
// metadata. A job that reported progress, or ran before, is read, and is the same. A wait
// (FinalOnly) is sent how the job ended, as GetJob tells it.
func TestWatchSendsFinalJobsAsStored(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		spec *jobwirev1.JobSpec
		// run takes the job's assignment to its final result, each step before it seen by the
		// watch (seen); it reports
		// whether the broker knew the final job without reading it.
		run func(t *testing.T, b *brokertest.Bundle, w *brokertest.RawWorker, a *jobwirev1.Assignment,
			seen watchedStep) (handed bool)
	}{
		{"success with a result", &jobwirev1.JobSpec{Type: "t", Priority: 3, IdempotencyKey: "k1",
			Payload: []byte("in"), AttemptTimeout: durationpb.New(time.Minute), RateKey: "r",
			Unique: &jobwirev1.UniqueOptions{Key: "u1"}},
			func(t *testing.T, b *brokertest.Bundle, w *brokertest.RawWorker, a *jobwirev1.Assignment, seen watchedStep) bool {
				seen(brokertest.StartedMsg(brokertest.Ref(a)), isRunning)
				w.Send(brokertest.SuccessMsg(brokertest.Ref(a), []byte(`{"sum":3}`)))
				return true
			}},
		{"success without a result", &jobwirev1.JobSpec{Type: "t"},
			func(t *testing.T, b *brokertest.Bundle, w *brokertest.RawWorker, a *jobwirev1.Assignment, seen watchedStep) bool {
				seen(brokertest.StartedMsg(brokertest.Ref(a)), isRunning)
				w.Send(brokertest.SuccessMsg(brokertest.Ref(a), nil))
				return true
			}},
		{"success without Started", &jobwirev1.JobSpec{Type: "t"},
			func(t *testing.T, b *brokertest.Bundle, w *brokertest.RawWorker, a *jobwirev1.Assignment, seen watchedStep) bool {
				w.Send(brokertest.SuccessMsg(brokertest.Ref(a), []byte("x")))
				return true
			}},
		{"FATAL failure", &jobwirev1.JobSpec{Type: "t", MaxAttempts: 5},
			func(t *testing.T, b *brokertest.Bundle, w *brokertest.RawWorker, a *jobwirev1.Assignment, seen watchedStep) bool {
				seen(brokertest.StartedMsg(brokertest.Ref(a)), isRunning)
				w.SendResult(brokertest.Ref(a), brokertest.Fatal("ValueError"))
				return true
			}},
		{"TRANSIENT failure on the last attempt", &jobwirev1.JobSpec{Type: "t", MaxAttempts: 1},
			func(t *testing.T, b *brokertest.Bundle, w *brokertest.RawWorker, a *jobwirev1.Assignment, seen watchedStep) bool {
				seen(brokertest.StartedMsg(brokertest.Ref(a)), isRunning)
				w.SendResult(brokertest.Ref(a), brokertest.Transient("Timeout", 0))
				return true
			}},
		{"failure without an error type", &jobwirev1.JobSpec{Type: "t", MaxAttempts: 1},
			func(t *testing.T, b *brokertest.Bundle, w *brokertest.RawWorker, a *jobwirev1.Assignment, seen watchedStep) bool {
				seen(brokertest.StartedMsg(brokertest.Ref(a)), isRunning)
				w.SendResult(brokertest.Ref(a), &jobwirev1.Failure{Kind: jobwirev1.FailureKind_FAILURE_KIND_FATAL, Message: "no type"})
				return true
			}},
		{"job with progress", &jobwirev1.JobSpec{Type: "t"},
			func(t *testing.T, b *brokertest.Bundle, w *brokertest.RawWorker, a *jobwirev1.Assignment, seen watchedStep) bool {
				seen(brokertest.StartedMsg(brokertest.Ref(a)), isRunning)
				seen(progressMsg(brokertest.Ref(a), 0.5, "half"), func(j *jobwirev1.Job) bool { return j.GetProgress() != nil })
				w.Send(brokertest.SuccessMsg(brokertest.Ref(a), []byte("done")))
				return false // its progress is stored apart from the lease: the job is read
			}},
		{"job of a batch with metadata", &jobwirev1.JobSpec{Type: "t", Metadata: map[string]string{"tenant": "acme"}},
			func(t *testing.T, b *brokertest.Bundle, w *brokertest.RawWorker, a *jobwirev1.Assignment, seen watchedStep) bool {
				seen(brokertest.StartedMsg(brokertest.Ref(a)), isRunning)
				w.Send(brokertest.SuccessMsg(brokertest.Ref(a), []byte("b")))
				return true
			}},
		{"success after a retry", &jobwirev1.JobSpec{Type: "t", MaxAttempts: 2},
			func(t *testing.T, b *brokertest.Bundle, w *brokertest.RawWorker, a *jobwirev1.Assignment, seen watchedStep) bool {
				seen(brokertest.StartedMsg(brokertest.Ref(a)), isRunning)
				ack(t, w.Fail(a, brokertest.Transient("Busy", time.Second)))
				b.Clock.Advance(time.Hour) // past the retry's backoff
				a = w.Assignment()
				seen(brokertest.StartedMsg(brokertest.Ref(a)), isRunning)
				w.Send(brokertest.SuccessMsg(brokertest.Ref(a), []byte("second")))
				return false // a second lease: the job's earlier attempts may have written it
			}},
	}
	onBothStores(t, func(t *testing.T, pg bool) {
		b := brokertest.New(t, brokertest.Options{Postgres: pg})
		w := b.Connect(brokertest.Hello("w1", 1, "t"))
		ctx, cancel := context.WithTimeout(context.Background(), brokertest.WaitTimeout)
		defer cancel() // a watch that never sends what a step waits for fails the test
		for _, tc := range cases {
			spec := proto.Clone(tc.spec).(*jobwirev1.JobSpec)
			if spec.Metadata != nil {
				res, err := b.Producer.CreateBatch(ctx, &jobwirev1.CreateBatchRequest{Batch: &jobwirev1.BatchOptions{Description: "d"}})
				if err != nil {
					t.Fatal(err)
				}
				spec.BatchId = res.GetBatch().GetId()
			}
			id := enqueue(t, b, spec)
			stream, err := b.Producer.WatchJobs(ctx, &jobwirev1.WatchJobsRequest{Ids: []int64{id}})
			if err != nil {
				t.Fatal(err)
			}
			wait, err := b.Producer.WatchJobs(ctx, &jobwirev1.WatchJobsRequest{Ids: []int64{id}, FinalOnly: true})
			if err != nil {
				t.Fatal(err)
			}
			waitColumns, err := b.Producer.WatchJobs(ctx, &jobwirev1.WatchJobsRequest{Ids: []int64{id}, FinalOnly: true, Columns: true})
			if err != nil {
				t.Fatal(err)
			}
			first, err := stream.Recv() // the job as the watch starts: its read is done
			if err != nil || len(first.GetJobs()) != 1 {
				t.Fatalf("%s: first watched %v, %v", tc.name, first, err)
			}
			// seen sends m and waits until the watch sent a job that is what it did: a change
			// told while another is still unread is read (of two, only a read says which came
			// last), so each step is sent before the next is told.
			seen := func(m *jobwirev1.ConnectRequest, did func(*jobwirev1.Job) bool) {
				t.Helper()
				w.Send(m)
				for {
					resp, err := stream.Recv()
					if err != nil {
						t.Fatalf("%s: watch: %v", tc.name, err)
					}
					if did(resp.GetJobs()[len(resp.GetJobs())-1]) {
						return
					}
				}
			}
			handed := b.Broker.FinalsHanded()
			a := w.Assignment()
			wantHanded := tc.run(t, b, w, a, seen)
			ack(t, w.Next())
			var watched *jobwirev1.Job
			for watched == nil || !final(watched) {
				resp, err := stream.Recv()
				if err != nil {
					t.Fatalf("%s: watch: %v", tc.name, err)
				}
				watched = resp.GetJobs()[len(resp.GetJobs())-1]
			}
			if got := b.Broker.FinalsHanded() - handed; got != map[bool]int64{false: 0, true: 1}[wantHanded] {
				t.Errorf("%s: %d final states handed to the watch without a read, want %t", tc.name, got, wantHanded)
			}
			read := watchedFinal(t, b, id)
			if !proto.Equal(watched, read) {
				t.Errorf("%s: the watch sent\n%v\na read of the final job sends\n%v", tc.name, watched, read)
			}
			got := getJob(t, b, id)
			got.Payload, got.AttemptHistory, got.AttemptsOmitted, got.Metadata = nil, nil, 0, nil
			if !proto.Equal(watched, got) {
				t.Errorf("%s: the watch sent\n%v\nGetJob returns (without payload, history, metadata)\n%v", tc.name, watched, got)
			}
			// A wait (FinalOnly) is sent how the job ended, the same from the hand-over.
			ended, err := wait.Recv()
			if err != nil || len(ended.GetJobs()) != 1 {
				t.Fatalf("%s: wait: %v, %v", tc.name, ended, err)
			}
			want := &jobwirev1.Job{Id: got.GetId(), Type: got.GetType(), Queue: got.GetQueue(), State: got.GetState(),
				Attempts: got.GetAttempts(), FinishedAt: got.GetFinishedAt(), DeadReason: got.GetDeadReason(),
				LastErrorType: got.GetLastErrorType(), LastErrorMessage: got.GetLastErrorMessage(), Result: got.GetResult()}
			if !proto.Equal(ended.GetJobs()[0], want) {
				t.Errorf("%s: the wait was sent\n%v\nwant how GetJob says it ended\n%v", tc.name, ended.GetJobs()[0], want)
			}
			// A wait sent columns (Columns) is sent the same fields.
			ended, err = waitColumns.Recv()
			if err != nil {
				t.Fatalf("%s: wait for columns: %v", tc.name, err)
			}
			if cols := endedJobs(t, ended.GetEnds()); len(cols) != 1 || !proto.Equal(cols[0], want) {
				t.Errorf("%s: the wait for columns was sent\n%v\nwant how GetJob says it ended\n%v", tc.name, ended.GetEnds(), want)
			}
		}
	})
}

// final reports whether j is in a final state.
func final(j *jobwirev1.Job) bool {
	switch j.GetState() {
	case jobwirev1.JobState_JOB_STATE_SUCCEEDED, jobwirev1.JobState_JOB_STATE_DEAD, jobwirev1.JobState_JOB_STATE_CANCELLED:
		return true
	}
	return false
}

// watchedFinal is the final job id as a watch opened now sends it: read from the store.
func watchedFinal(t *testing.T, b *brokertest.Bundle, id int64) *jobwirev1.Job {
	t.Helper()
	stream, err := b.Producer.WatchJobs(context.Background(), &jobwirev1.WatchJobsRequest{Ids: []int64{id}})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil || len(resp.GetJobs()) != 1 {
		t.Fatalf("watch of final job %d: %v, %v", id, resp, err)
	}
	return resp.GetJobs()[0]
}

// watchedStep sends a worker's message and waits until the watch sent a job that did(it).
type watchedStep = func(m *jobwirev1.ConnectRequest, did func(*jobwirev1.Job) bool)

// isRunning reports whether j is RUNNING.
func isRunning(j *jobwirev1.Job) bool { return j.GetState() == jobwirev1.JobState_JOB_STATE_RUNNING }

// A job told of twice before its watch looked is read, not taken as the last write handed it:
// of two changes told, only a read says which came last.
func TestWatchReadsAJobToldOfTwice(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	id := enqueue(t, b, &jobwirev1.JobSpec{Type: "t"})
	every := b.Broker.WatchJobs([]int64{id}, broker.WatchOptions{})
	defer every.Close()
	w := b.Connect(brokertest.Hello("w1", 1, "t"))
	a := w.Assignment()
	w.Started(a)
	b.WaitState(id, jobwirev1.JobState_JOB_STATE_RUNNING) // told, not looked at
	handed := b.Broker.FinalsHanded()
	ack(t, w.Succeed(a))
	brokertest.WaitFor(t, "the success handed to the watch", func() bool { return b.Broker.FinalsHanded() > handed })
	read, known := every.Changed()
	if !slices.Equal(read, []int64{id}) || len(known) != 0 {
		t.Fatalf("a job started and finished unlooked at: to read %v, known %v; want it read", read, known)
	}
}

// endedJobs is the jobs of ends (WatchJobsRequest.columns) as a wait without columns is sent
// them, a Job each, for comparing the two forms; ends whose columns differ in length fail t.
func endedJobs(t *testing.T, ends *jobwirev1.JobEnds) []*jobwirev1.Job {
	t.Helper()
	n := len(ends.GetIds())
	for name, col := range map[string]int{"states": len(ends.GetStates()), "attempts": len(ends.GetAttempts()),
		"finished_at_unix_nanos": len(ends.GetFinishedAtUnixNanos()), "types": len(ends.GetTypes()), "queues": len(ends.GetQueues())} {
		if col != n {
			t.Fatalf("ends: %d %s for %d ids", col, name, n)
		}
	}
	out := make([]*jobwirev1.Job, n)
	for i, id := range ends.GetIds() {
		out[i] = &jobwirev1.Job{Id: id, Type: ends.GetNames()[ends.GetTypes()[i]], Queue: ends.GetNames()[ends.GetQueues()[i]],
			State: ends.GetStates()[i], Attempts: ends.GetAttempts()[i]}
		if ns := ends.GetFinishedAtUnixNanos()[i]; ns != 0 {
			out[i].FinishedAt = timestamppb.New(time.Unix(0, ns))
		}
	}
	last := -1
	for _, d := range ends.GetDetails() {
		if int(d.GetIndex()) <= last {
			t.Fatalf("ends: detail of index %d after %d", d.GetIndex(), last)
		}
		last = int(d.GetIndex())
		j := out[d.GetIndex()]
		j.Result, j.DeadReason, j.LastErrorType, j.LastErrorMessage = d.GetResult(), d.GetDeadReason(), d.GetLastErrorType(), d.GetLastErrorMessage()
	}
	return out
}
