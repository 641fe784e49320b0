package worker

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/clock"
	"github.com/jobwire/jobwire/job"
)

// What a handler gives back besides its error: a result for its producer (and its dependent
// jobs), and progress while it runs. Both are methods of Job, so a handler needs nothing else:
//
//	j.SetProgress(0.5, "half way")
//	return j.SetResultJSON(summary)

// ProgressInterval is how often a job's progress goes to the broker at most: a handler may
// report as often as it likes, and the newest report of each interval is sent (the last one
// always, before the result).
const ProgressInterval = time.Second

// MaxProgressMessage is the longest progress message, in bytes of UTF-8: the broker's own
// limit, so that what the library lets through the broker takes.
const MaxProgressMessage = job.MaxProgressMessage

// ParentResult is the result of a job this one depends on.
type ParentResult struct {
	JobID  int64
	Type   string
	Result []byte
	// State is the parent's final state: "succeeded", or "dead" or "cancelled" for a job
	// enqueued to run whatever its parents' outcome.
	State string
}

// outcome is what a running attempt reports besides its error. The Job a handler gets and
// the task share it.
type outcome struct {
	mu     sync.Mutex
	result []byte
	// Progress throttling: sent is when a report last went out; pending is the newest one
	// not sent yet, which timer sends once the interval has passed.
	clk     clock.Clock
	send    func(*jobwirev1.Progress) // nil: a Job made outside a worker, nothing is sent
	sent    time.Time
	pending *jobwirev1.Progress
	timer   clock.Timer
	ended   bool
}

// SetResult sets what the job returns once its handler returns nil: GetJob returns it to the
// producer, and a job that depends on this one reads it in ParentResults. It is stored only
// with a success, and a result larger than the broker's limit (1 MiB unless configured
// otherwise) fails the attempt as FATAL "ResultTooLarge". The last call wins.
func (j *Job) SetResult(result []byte) {
	o := j.outcome()
	o.mu.Lock()
	o.result = append([]byte(nil), result...)
	o.mu.Unlock()
}

// SetResultJSON sets the job's result to v encoded as JSON (see SetResult).
func (j *Job) SetResultJSON(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return Fatal(fmt.Errorf("encode the result of job %d: %w", j.ID, err))
	}
	j.SetResult(b)
	return nil
}

// SetProgress reports how far the job got: fraction from 0 to 1, and a short line for people
// (at most MaxProgressMessage bytes; "" for none). It never blocks: reports are sent at most
// once per ProgressInterval, the newest one of each interval, and the last one before the
// result. It returns an error, and sends nothing, for a fraction outside 0..1 or a message
// too long or not UTF-8.
func (j *Job) SetProgress(fraction float64, message string) error {
	return j.report(&jobwirev1.Progress{Fraction: proto.Float64(fraction), Message: message})
}

// SetProgressMessage reports progress as a message only, for a job that cannot say how much
// is left (see SetProgress).
func (j *Job) SetProgressMessage(message string) error {
	return j.report(&jobwirev1.Progress{Message: message})
}

// report checks p by the rules the broker applies (job.CheckProgress), so that a report the
// broker would refuse fails here, where the handler can see why.
func (j *Job) report(p *jobwirev1.Progress) error {
	if err := job.CheckProgress(p.GetFraction(), p.Fraction != nil, p.Message); err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	j.outcome().progress(p)
	return nil
}

// outcome is the job's outcome, made on first use for a Job built outside a worker (a test).
func (j *Job) outcome() *outcome {
	if j.out == nil {
		j.out = &outcome{clk: clock.Real{}}
	}
	return j.out
}

// progress sends p now if the interval since the last report has passed, or keeps it for
// the timer.
func (o *outcome) progress(p *jobwirev1.Progress) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.ended || o.send == nil {
		return
	}
	now := o.clk.Now()
	if o.pending == nil && (o.sent.IsZero() || now.Sub(o.sent) >= ProgressInterval) {
		o.sent = now
		o.send(p)
		return
	}
	o.pending = p
	if o.timer == nil {
		o.timer = o.clk.AtFunc(o.sent.Add(ProgressInterval), o.tick)
	}
}

// tick sends the report kept since the last one went out.
func (o *outcome) tick() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.timer = nil
	if o.ended || o.pending == nil {
		return
	}
	o.sent = o.clk.Now()
	o.send(o.pending)
	o.pending = nil
}

// end sends the report kept, if any, and stops reporting: the handler returned, and its result
// goes next. It returns the result the handler set.
func (o *outcome) end() []byte {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.ended = true
	if o.timer != nil {
		o.timer.Stop()
		o.timer = nil
	}
	if o.pending != nil && o.send != nil {
		o.send(o.pending)
		o.pending = nil
	}
	return o.result
}

// parentResults reads an Assignment's parent results for the handler. A state is named as
// job.State names it, in lower case ("succeeded").
func parentResults(a *jobwirev1.Assignment) []ParentResult {
	var out []ParentResult
	for _, p := range a.GetParentResults() {
		out = append(out, ParentResult{JobID: p.GetJobId(), Type: p.GetType(), Result: p.GetResult(),
			State: strings.ToLower(job.State(p.GetState()).String())})
	}
	return out
}

// sendProgressLocked queues p for t's lease on the live session, if t still runs. w.mu is held.
func (w *Worker) sendProgressLocked(t *task, p *jobwirev1.Progress) {
	if w.tasks[t.ref] != t || t.state != stateRunning {
		return
	}
	s := w.readySessionLocked()
	if s == nil {
		return // without a stream the report is dropped: the next one replaces it
	}
	p.JobId, p.LeaseToken = t.ref.jobID, t.ref.token
	s.put(outMsg{req: &jobwirev1.ConnectRequest{Message: &jobwirev1.ConnectRequest_Progress{Progress: p}}})
}
