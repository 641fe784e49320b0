package conformance

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"

	"github.com/jobwire/jobwire/client"
	"github.com/jobwire/jobwire/job"
)

// resultsAndProgress: a handler's result reaches the producer with the success, its last
// progress report is stored whatever the library's throttling sent before it, and a result
// over the broker's limit (1 MiB) fails the job FATAL "ResultTooLarge". The producer waits
// with client.Wait (WatchJobs), not by polling.
func resultsAndProgress(e *env) {
	if !e.lang.results {
		e.t.Skipf("the %s worker does not run the result job type yet", e.lang.name)
	}
	e.startWorker(e.lang.name + "-1")
	payload, err := json.Marshal(map[string]any{"steps": 5, "note": "zoë ✓"})
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(e.t.Context(), waitTimeout)
	defer cancel()
	j, err := e.c.Wait(ctx, e.enqueue("result", payload))
	if err != nil {
		e.t.Fatalf("wait for the result job: %v", err)
	}
	if !bytes.Equal(j.Result, payload) {
		e.t.Errorf("result %q, want the payload %q", j.Result, payload)
	}
	if p := j.Progress; p == nil || p.Message != "step 5 of 5" || !p.HasFraction || p.Fraction != 1 || p.Attempt != 1 {
		e.t.Errorf("progress %+v, want the last report: 1, \"step 5 of 5\", attempt 1", p)
	}

	_, err = e.c.Wait(ctx, e.enqueueJSON("result", map[string]any{"steps": 1, "result_bytes": 1<<20 + 1}))
	var je *client.JobError
	if !errors.As(err, &je) || je.State != job.StateDead || je.ErrorType != "ResultTooLarge" {
		e.t.Errorf("a result over 1 MiB: %v, want DEAD with ResultTooLarge", err)
	}
}
