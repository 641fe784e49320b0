package worker_test

import (
	"context"
	"testing"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/brokertest"
	"github.com/jobwire/jobwire/worker"
)

// A handler's result reaches GetJob with its success, and the last progress it reported is
// stored, however fast it reported.
func TestHandlerResultAndProgressReachTheBroker(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	runWorker(t, b, func(w *worker.Worker) {
		w.Handle("report", func(ctx context.Context, j *worker.Job) error {
			for i := range 50 {
				if err := j.SetProgress(float64(i)/50, "step"); err != nil {
					return err
				}
			}
			if err := j.SetProgress(1, "done: 3 rows"); err != nil {
				return err
			}
			return j.SetResultJSON(map[string]int{"rows": 3})
		})
		w.Handle("fails", func(ctx context.Context, j *worker.Job) error {
			j.SetResult([]byte("not kept"))
			return worker.Fatal(context.Canceled)
		})
	})
	id := enqueue(t, b, "report", "")
	j := waitJob(t, b, id, jobwirev1.JobState_JOB_STATE_SUCCEEDED)
	if string(j.GetResult()) != `{"rows":3}` {
		t.Fatalf("result %q", j.GetResult())
	}
	if p := j.GetProgress(); p.GetMessage() != "done: 3 rows" || p.GetFraction() != 1 {
		t.Fatalf("progress %v, want the last report", p)
	}
	failed := waitJob(t, b, enqueue(t, b, "fails", ""), jobwirev1.JobState_JOB_STATE_DEAD)
	if len(failed.GetResult()) != 0 {
		t.Fatalf("a failed job kept result %q", failed.GetResult())
	}
}

// Bad progress is refused by the library, with a reason, before it reaches the broker.
func TestProgressRulesAreCheckedInTheLibrary(t *testing.T) {
	t.Parallel()
	var j worker.Job
	for _, err := range []error{
		j.SetProgress(1.01, ""),
		j.SetProgress(-0.1, ""),
		j.SetProgressMessage(string(make([]byte, 257))),
		j.SetProgressMessage("\xff"),
	} {
		if err == nil {
			t.Fatal("bad progress accepted")
		}
	}
	if err := j.SetProgress(0.5, "fine"); err != nil {
		t.Fatal(err)
	}
}
