package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/job"
)

// Waiting and watching. The broker follows the jobs (WatchJobs) and tells the client when one
// changed; the client never polls. A stream that breaks (a broker restart, a move to another
// broker of a cluster) is opened again for the jobs not final yet.

// ErrJobFailed is matched by the error Wait returns for a job that ended DEAD or CANCELLED.
var ErrJobFailed = errors.New("jobwire: job did not succeed")

// JobError says how a job that did not succeed ended.
type JobError struct {
	ID        int64
	State     job.State // DEAD or CANCELLED
	ErrorType string    // the last attempt's error type, if any
	Message   string
}

func (e *JobError) Error() string {
	msg := fmt.Sprintf("job %d is %s", e.ID, e.State)
	switch {
	case e.ErrorType != "" && e.Message != "":
		msg += ": " + e.ErrorType + ": " + e.Message
	case e.ErrorType != "" || e.Message != "":
		msg += ": " + e.ErrorType + e.Message
	}
	return msg
}

func (e *JobError) Is(target error) bool { return target == ErrJobFailed }

// JobErr is nil for a SUCCEEDED job, and a *JobError for one that ended otherwise.
func JobErr(j *job.Job) error {
	if j.State == job.StateSucceeded {
		return nil
	}
	return &JobError{ID: j.ID, State: j.State, ErrorType: j.LastErrorType, Message: j.LastErrorMessage}
}

// Wait returns once the job is final: how it ended, with its result (job.Job.Result) when it
// SUCCEEDED, and a *JobError (matching ErrJobFailed) when it went DEAD or was CANCELLED. A job
// that does not exist matches ErrNotFound.
//
// The job a wait returns (Wait, WaitAll, WaitEach) holds how it ended: its ID, Type, Queue,
// State, Attempts, FinishedAt, DeadReason, last error and Result. GetJob reads the rest.
func (c *Client) Wait(ctx context.Context, id int64) (*job.Job, error) {
	for j, err := range c.WaitEach(ctx, id) {
		if err != nil {
			return nil, err
		}
		return j, JobErr(j)
	}
	return nil, wrapErr("Wait", status.Error(codes.Internal, "the broker ended the watch before the job was final"))
}

// WaitAll returns once every job of ids is final, in the order of ids. How each ended is its
// State (JobErr tells it as an error); the error is only for the wait itself.
func (c *Client) WaitAll(ctx context.Context, ids ...int64) ([]*job.Job, error) {
	w := newWatched(ids)
	out := make([]*job.Job, len(ids))
	err := c.followAll(ctx, "Wait", w, true, true, func(i int, j *job.Job) bool {
		out[i] = j
		return true
	})
	if err != nil {
		return nil, err
	}
	for i, id := range ids {
		if out[i] == nil {
			out[i] = out[w.first(id)] // named twice: its first place holds it
		}
		if out[i] == nil {
			return nil, wrapErr("WaitAll", status.Errorf(codes.Internal, "the broker ended the watch before job %d was final", id))
		}
	}
	return out, nil
}

// WaitEach yields each job of ids once it is final, in the order they finish (up to 10,000
// jobs a call).
func (c *Client) WaitEach(ctx context.Context, ids ...int64) iter.Seq2[*job.Job, error] {
	return c.follow(ctx, "Wait", ids, true, false)
}

// Watch yields the job as it is now, then again on each change of its state or progress,
// until it is final (the last job yielded is final).
func (c *Client) Watch(ctx context.Context, id int64) iter.Seq2[*job.Job, error] {
	return c.follow(ctx, "Watch", []int64{id}, false, false)
}

// resumeDelay is how long a broken watch waits before it is opened again.
const resumeDelay = 200 * time.Millisecond

// follow yields the jobs of ids as followAll finds them, then its error if it has one.
func (c *Client) follow(ctx context.Context, op string, ids []int64, finalOnly, slab bool) iter.Seq2[*job.Job, error] {
	return func(yield func(*job.Job, error) bool) {
		stopped := false
		err := c.followAll(ctx, op, newWatched(ids), finalOnly, slab, func(_ int, j *job.Job) bool {
			stopped = !yield(j, nil)
			return !stopped
		})
		if err != nil && !stopped {
			yield(nil, err)
		}
	}
}

// watched is the jobs of a wait or watch: their ids each once, in the caller's order, where
// the caller named each, and which were yielded final. A wait on 10,000 jobs looks each job up
// once as it ends, in one map built once.
type watched struct {
	ids   []int64
	at    map[int64]int // the index in ids of each id
	place []int         // the index in the caller's list of each of ids (its first, if named twice)
	done  []bool
	left  int
}

func newWatched(ids []int64) *watched {
	w := &watched{at: make(map[int64]int, len(ids)), ids: make([]int64, 0, len(ids)), place: make([]int, 0, len(ids))}
	for i, id := range ids {
		if _, twice := w.at[id]; !twice {
			w.at[id] = len(w.ids)
			w.ids = append(w.ids, id)
			w.place = append(w.place, i)
		}
	}
	w.done, w.left = make([]bool, len(w.ids)), len(w.ids)
	return w
}

// first is where the caller first named job id.
func (w *watched) first(id int64) int { return w.place[w.at[id]] }

// followAll runs WatchJobs for w's jobs until each was yielded final (yield is given where the
// caller first named it), opening it again for the jobs left when the broker becomes
// unavailable. With slab, the jobs of one response are allocated together: fewer, larger
// allocations for a caller that keeps every job (WaitAll), while one that keeps a few would keep
// their whole response's. It returns nil when every job was yielded final or yield returned
// false.
func (c *Client) followAll(ctx context.Context, op string, w *watched, finalOnly, slab bool, yield func(int, *job.Job) bool) error {
	for w.left > 0 {
		err := c.followOnce(ctx, w, finalOnly, slab, yield)
		if err == nil || errors.Is(err, errStopped) {
			return nil // every job yielded final, or the caller stopped
		}
		if status.Code(err) != codes.Unavailable || ctx.Err() != nil {
			if errors.Is(err, io.EOF) {
				err = status.Error(codes.Internal, "the broker ended the watch before every job was final")
			}
			return wrapErr(op, err)
		}
		select {
		case <-ctx.Done():
			return wrapErr(op, status.FromContextError(ctx.Err()).Err())
		case <-time.After(resumeDelay):
		}
	}
	return nil
}

// jobsOf is the jobs resp sends, allocated together with slab (see follow).
func jobsOf(resp *jobwirev1.WatchJobsResponse, slab bool) ([]*job.Job, error) {
	if ends := resp.GetEnds(); ends != nil {
		return endsFromProto(ends, slab)
	}
	out := newJobs(len(resp.GetJobs()), slab)
	for i, p := range resp.GetJobs() {
		fillJob(out[i], p)
	}
	return out, nil
}

// newJobs is n empty jobs to fill: with slab, in one allocation (see follow), else one each.
func newJobs(n int, slab bool) []*job.Job {
	out := make([]*job.Job, n)
	var all []job.Job
	if slab {
		all = make([]job.Job, n)
	}
	for i := range out {
		if slab {
			out[i] = &all[i]
		} else {
			out[i] = new(job.Job)
		}
	}
	return out
}

// errStopped: the caller stopped iterating.
var errStopped = errors.New("stopped")

// followOnce runs one WatchJobs call for w's jobs not final yet, marking each final one done.
func (c *Client) followOnce(ctx context.Context, w *watched, finalOnly, slab bool, yield func(int, *job.Job) bool) error {
	ids := make([]int64, 0, w.left)
	for i, id := range w.ids {
		if !w.done[i] {
			ids = append(ids, id)
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// A wait has the jobs' ends sent as columns: a few bytes a job, no message each.
	stream, err := c.producer.WatchJobs(ctx, &jobwirev1.WatchJobsRequest{Ids: ids, FinalOnly: finalOnly, Columns: finalOnly})
	if err != nil {
		return err
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			return err // io.EOF is not Unavailable: an end before every job was final
		}
		jobs, err := jobsOf(resp, slab)
		if err != nil {
			return err
		}
		for _, j := range jobs {
			i, ok := w.at[j.ID]
			if !ok {
				return status.Errorf(codes.Internal, "the broker sent job %d, which is not watched", j.ID)
			}
			if j.State.Final() && !w.done[i] {
				w.done[i] = true
				w.left--
			}
			if !yield(w.place[i], j) {
				return errStopped
			}
		}
		if w.left == 0 {
			return nil
		}
	}
}
