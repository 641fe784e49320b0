package conformance

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/jobwire/jobwire/client"
	"github.com/jobwire/jobwire/job"
)

// The scenarios of a job's value back to its producer: results, progress and parents' results.
func init() {
	scenarios = append(scenarios,
		scenario{name: "result_round_trip", run: resultRoundTrip},
		scenario{name: "result_too_large", run: resultTooLarge},
		scenario{name: "progress_last_report_arrives", run: progressLastReportArrives},
		scenario{name: "parents_results_reach_dependent", run: parentsResultsReachDependent},
		scenario{name: "large_jobs_when_configured", cfg: brokerConfig{maxBytes: 8 << 20}, run: largeJobsWhenConfigured},
	)
}

// defaultMaxResultBytes is the brokers' limit on a result (max_result_bytes is not set).
const defaultMaxResultBytes = 1 << 20

// resultRoundTrip: the bytes a handler returns are stored with its success and returned by
// GetJob unchanged, multi-byte UTF-8 included, and a result of exactly the limit is taken.
func resultRoundTrip(e *env) {
	e.startWorker(e.lang.name + "-1")
	payload := []byte(`{"text":"zoë ✓ 日本語 🚀","n":-1.5e3}`)
	id := e.enqueue("result", payload)
	if j := e.waitState(id, job.StateSucceeded); string(j.Result) != string(payload) {
		e.t.Errorf("the stored result is %q, want the payload %q", clip(j.Result), clip(payload))
	}
	full := e.enqueueJSON("result_size", map[string]any{"bytes": defaultMaxResultBytes})
	if j := e.waitState(full, job.StateSucceeded); len(j.Result) != defaultMaxResultBytes || strings.Trim(string(j.Result), "x") != "" {
		e.t.Errorf("a result of the limit's %d bytes came back as %d bytes", defaultMaxResultBytes, len(j.Result))
	}
	none := e.enqueue("echo", []byte(`{}`))
	if j := e.waitState(none, job.StateSucceeded); len(j.Result) != 0 {
		e.t.Errorf("a handler that returned nothing has a result of %d bytes", len(j.Result))
	}
}

// resultTooLarge: a result over max_result_bytes fails the attempt as FATAL ResultTooLarge,
// naming both sizes. The worker libraries check it before sending (their message names "the
// broker's limit"); the Go library leaves it to the broker, whose message is its own.
func resultTooLarge(e *env) {
	e.startWorker(e.lang.name + "-1")
	const size = defaultMaxResultBytes + 1
	id := e.enqueueJSON("result_size", map[string]any{"bytes": size})
	j := e.waitState(id, job.StateDead)
	if j.DeadReason != job.DeadFatal || j.Attempts != 1 {
		e.t.Errorf("dead with reason %s after %d attempts, want FATAL after 1", j.DeadReason, j.Attempts)
	}
	e.checkAttempts(j, []wantAttempt{{outcome: job.OutcomeFailed, kind: job.KindFatal, errorType: "ResultTooLarge"}})
	for _, n := range []int{size, defaultMaxResultBytes} {
		if !strings.Contains(j.LastErrorMessage, strconv.Itoa(n)) {
			e.t.Errorf("the error %q does not name %d", j.LastErrorMessage, n)
		}
	}
	if e.lang.name != "go" && !strings.Contains(j.LastErrorMessage, "broker's limit") {
		e.t.Errorf("the error %q is not the library's own: the result was sent to the broker", j.LastErrorMessage)
	}
	if len(j.Result) != 0 {
		e.t.Errorf("a result of %d bytes was stored", len(j.Result))
	}
}

// progressLastReportArrives: a handler that reports progress fifty times at once has its last
// report stored on the running attempt (the libraries throttle reports but always send the
// last), and the job can still be cancelled.
func progressLastReportArrives(e *env) {
	const steps = 50
	e.startWorker(e.lang.name + "-1")
	id := e.enqueueJSON("progress", map[string]any{"steps": steps, "marker": "progress"})
	e.readMarker("started-progress")
	last := fmt.Sprintf("step %d of %d", steps, steps)
	j := e.waitJob(id, "progress "+last, func(j *job.Job) bool {
		return j.State == job.StateRunning && j.Progress != nil && j.Progress.Message == last
	})
	if p := j.Progress; !p.HasFraction || p.Fraction != 1 || p.Attempt != 1 {
		e.t.Errorf("progress %+v, want fraction 1 of attempt 1", *p)
	}
	if _, err := e.c.Cancel(e.t.Context(), id); err != nil {
		e.t.Fatal(err)
	}
	e.waitState(id, job.StateCancelled)
}

// parentsResultsReachDependent: a job enqueued with depends_on runs once its parents
// succeeded and reads their results, in the order the producer named them.
func parentsResultsReachDependent(e *env) {
	e.startWorker(e.lang.name + "-1")
	a := e.enqueue("result", []byte(`{"parent":"a"}`))
	b := e.enqueue("result", []byte(`"b ✓"`))
	child := e.enqueue("parents", nil, client.DependsOn(b, a))
	j := e.waitState(child, job.StateSucceeded)
	type parent struct {
		JobID  int64  `json:"job_id"`
		Type   string `json:"type"`
		State  string `json:"state"`
		Result string `json:"result"`
	}
	var got []parent
	if err := json.Unmarshal(j.Result, &got); err != nil {
		e.t.Fatalf("the dependent's result %q is not its parents as JSON: %v", clip(j.Result), err)
	}
	want := []parent{
		{JobID: b, Type: "result", State: "succeeded", Result: `"b ✓"`},
		{JobID: a, Type: "result", State: "succeeded", Result: `{"parent":"a"}`},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		e.t.Errorf("the dependent read parents %+v, want %+v", got, want)
	}
}

// largeJobsWhenConfigured: on a broker whose operator raised max_payload_bytes and
// max_result_bytes to 8 MiB, past the 4 MiB a gRPC library reads by default, a job of a 6 MiB
// payload reaches its handler, whose 6 MiB result comes back whole, and reaches the job that
// depends on it: the library reads assignments as large as the broker takes.
func largeJobsWhenConfigured(e *env) {
	e.startWorker(e.lang.name + "-1")
	payload := []byte(`"` + strings.Repeat("x", 6<<20) + `"`)
	id := e.enqueue("result", payload)
	if j := e.waitState(id, job.StateSucceeded); string(j.Result) != string(payload) {
		e.t.Errorf("the stored result is %d bytes (%q), want the payload's %d", len(j.Result), clip(j.Result), len(payload))
	}
	child := e.enqueue("parents", nil, client.DependsOn(id))
	j := e.waitState(child, job.StateSucceeded)
	var got []struct {
		JobID  int64  `json:"job_id"`
		Result string `json:"result"`
	}
	if err := json.Unmarshal(j.Result, &got); err != nil {
		e.t.Fatalf("the dependent's result %q is not its parents as JSON: %v", clip(j.Result), err)
	}
	if len(got) != 1 || got[0].JobID != id || got[0].Result != string(payload) {
		e.t.Errorf("the dependent read %d parents (%.80v); want job %d's result of %d bytes", len(got), got, id, len(payload))
	}
}
