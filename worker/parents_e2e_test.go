package worker_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/brokertest"
	"github.com/jobwire/jobwire/worker"
)

// A dependent whose parents' results cannot be read when it is handed out (the storage read
// fails past its retries) is not sent without them, which would run its handler on inputs
// missing without a word: it goes back to wait, and runs once they can be read, with them,
// its first attempt.
func TestParentsResultsUnreadableHoldTheJobBack(t *testing.T) {
	t.Parallel()
	f := brokertest.NewFaults(t, brokertest.DefaultFaultRetries)
	b := brokertest.New(t, brokertest.Options{Faults: f})
	parent := enqueue(t, b, "parent", "")
	res, err := b.Producer.Enqueue(context.Background(), &jobwirev1.EnqueueRequest{
		Job: &jobwirev1.JobSpec{Type: "child", DependsOn: []int64{parent}}})
	if err != nil {
		t.Fatal(err)
	}
	child := res.GetJob().GetId()
	// Every try of the first read of the child's parents' results fails: the first and the
	// storage retries' three more.
	f.Inject(brokertest.FaultBefore, 1+brokertest.DefaultFaultRetries.MaxTransientRetries, "parent_results")
	var runs atomic.Int32
	runWorker(t, b, func(w *worker.Worker) {
		w.Handle("parent", func(ctx context.Context, j *worker.Job) error {
			j.SetResult([]byte("from the parent"))
			return nil
		})
		w.Handle("child", func(ctx context.Context, j *worker.Job) error {
			runs.Add(1)
			if len(j.ParentResults) != 1 || string(j.ParentResults[0].Result) != "from the parent" {
				return worker.Fatal(errors.New("run without its parent's result"))
			}
			return nil
		})
	})
	j := waitJob(t, b, child, jobwirev1.JobState_JOB_STATE_SUCCEEDED)
	if j.GetAttempts() != 1 || runs.Load() != 1 {
		t.Errorf("the child succeeded after %d attempts and %d runs, want 1 of each", j.GetAttempts(), runs.Load())
	}
	if f.Pending() != 0 || f.Tries("parent_results") < 5 {
		t.Errorf("the read of the parents' results was tried %d times with %d faults left, want its faults all injected and a read after them",
			f.Tries("parent_results"), f.Pending())
	}
}
