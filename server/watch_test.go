package server_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/jobwire/jobwire/broker"
	"github.com/jobwire/jobwire/client"
	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/brokertest"
	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/server"
	"github.com/jobwire/jobwire/store"
)

// waited is what a background WaitAll returned.
type waited struct {
	jobs []*job.Job
	err  error
}

// waitAsync runs c.WaitAll in the background and delivers what it returned (received reads
// it). The goroutine only sends, so a wait cut short by the end of its test fails nothing
// after the test is over.
func waitAsync(c *client.Client, ids ...int64) <-chan waited {
	out := make(chan waited, 1)
	go func() {
		jobs, err := c.WaitAll(context.Background(), ids...)
		out <- waited{jobs, err}
	}()
	return out
}

// Waiting returns each job once final, with its result, or how it failed; the broker's own
// writes wake the wait, with no clock moved (so no backstop read is involved).
func TestWaitReturnsFinalJobsWithResults(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	c := client.New(b.Conn)
	w := b.Connect(brokertest.Hello("w1", 1, "t"))
	ok := enqueue(t, b, &jobwirev1.JobSpec{Type: "t"})
	bad := enqueue(t, b, &jobwirev1.JobSpec{Type: "t"})
	done := waitAsync(c, ok, bad)
	brokertest.WaitFor(t, "the watch", func() bool { return b.Broker.Watched() == 2 })

	a := w.Assignment()
	w.Started(a)
	w.Send(brokertest.SuccessMsg(brokertest.Ref(a), []byte(`{"sum":3}`)))
	ack(t, w.Next())
	a = w.Assignment()
	w.Started(a)
	ack(t, w.Fail(a, brokertest.Fatal("ValueError")))

	jobs := received(t, done)
	if len(jobs) != 2 || jobs[0].ID != ok || string(jobs[0].Result) != `{"sum":3}` || jobs[0].State != job.StateSucceeded {
		t.Fatalf("waited: %+v", jobs)
	}
	err := client.JobErr(jobs[1])
	var je *client.JobError
	if !errors.As(err, &je) || !errors.Is(err, client.ErrJobFailed) || je.State != job.StateDead || je.ErrorType != "ValueError" {
		t.Fatalf("failed job's error: %v", err)
	}
	if _, err := c.Wait(context.Background(), bad); !errors.Is(err, client.ErrJobFailed) {
		t.Fatalf("Wait of a dead job: %v, want ErrJobFailed", err)
	}
	if j, err := c.Wait(context.Background(), ok); err != nil || string(j.Result) != `{"sum":3}` {
		t.Fatalf("Wait of a finished job: %v %v", j, err)
	}
	// A job named twice is waited on once, and returned in both places.
	again, err := c.WaitAll(context.Background(), bad, bad, ok, bad)
	if err != nil || len(again) != 4 || again[0].ID != bad || again[1].ID != bad || again[2].ID != ok || again[3].ID != bad {
		t.Fatalf("WaitAll(bad, bad, ok, bad): %+v, %v", again, err)
	}
	brokertest.WaitFor(t, "watches closed", func() bool { return b.Broker.Watched() == 0 })
}

// Watching yields the job, then each change of state and progress, until it is final.
func TestWatchYieldsStateAndProgress(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	c := client.New(b.Conn)
	id := enqueue(t, b, &jobwirev1.JobSpec{Type: "t"})
	// The watch gives up after brokertest.WaitTimeout, so a change nobody is told of fails the
	// test instead of hanging it; its error is read once seen is closed.
	ctx, cancel := context.WithTimeout(context.Background(), brokertest.WaitTimeout)
	defer cancel()
	seen := make(chan *job.Job, 16)
	var watchErr error
	go func() {
		defer close(seen)
		for j, err := range c.Watch(ctx, id) {
			if err != nil {
				watchErr = err
				return
			}
			seen <- j
		}
	}()
	if j, open := <-seen; !open || j.State != job.StatePending {
		t.Fatalf("first: %v (watch: %v), want PENDING", j, watchErr)
	}
	w := b.Connect(brokertest.Hello("w1", 1, "t"))
	a := w.Assignment()
	next := func(what string, ok func(j *job.Job) bool) {
		t.Helper()
		for j := range seen {
			if ok(j) {
				return
			}
		}
		t.Fatalf("the watch ended before %s: %v", what, watchErr)
	}
	w.Started(a)
	next("RUNNING", func(j *job.Job) bool { return j.State == job.StateRunning })
	w.Send(progressMsg(brokertest.Ref(a), 0.5, "half"))
	next("progress", func(j *job.Job) bool { return j.Progress != nil && j.Progress.Message == "half" })
	ack(t, w.Succeed(a))
	next("SUCCEEDED", func(j *job.Job) bool { return j.State == job.StateSucceeded })
	if _, open := <-seen; open || watchErr != nil {
		t.Fatalf("the watch went on after the job was final, or ended with %v", watchErr)
	}
}

// Bad watch requests are refused with the reason; a job that does not exist is named, by a
// watch of every change and by one of final states (whose first look only counts the jobs).
func TestWatchJobsRefusesBadRequests(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), brokertest.WaitTimeout)
	defer cancel()
	id := enqueue(t, b, &jobwirev1.JobSpec{Type: "t"})
	for _, tc := range []struct {
		ids  []int64
		code codes.Code
		msg  string
	}{
		{nil, codes.InvalidArgument, "ids: names 0 jobs"},
		{[]int64{id, id}, codes.InvalidArgument, "named twice"},
		{[]int64{-1}, codes.InvalidArgument, "job ids are positive"},
		{[]int64{id, 1 << 40}, codes.NotFound, "ids: job 1099511627776 does not exist"},
		{[]int64{1<<40 + 1, id}, codes.NotFound, "ids: job 1099511627777 does not exist"},
	} {
		for _, finalOnly := range []bool{false, true} {
			stream, err := b.Producer.WatchJobs(ctx, &jobwirev1.WatchJobsRequest{Ids: tc.ids, FinalOnly: finalOnly})
			if err == nil {
				_, err = stream.Recv()
			}
			if status.Code(err) != tc.code || !strings.Contains(status.Convert(err).Message(), tc.msg) {
				t.Errorf("watch %v (final only: %t): %v, want %s: %s", tc.ids, finalOnly, err, tc.code, tc.msg)
			}
		}
	}
	stream, err := b.Producer.WatchJobs(ctx, &jobwirev1.WatchJobsRequest{Ids: []int64{id}, Columns: true})
	if err == nil {
		_, err = stream.Recv()
	}
	if want := "columns: is for final jobs only: set final_only too"; status.Code(err) != codes.InvalidArgument || status.Convert(err).Message() != want {
		t.Errorf("columns without final_only: %v, want InvalidArgument: %s", err, want)
	}
}

// A watch of final states only (a wait) is not woken by a job's start or progress, only by its
// end: a job running longer than the wait takes to read it is read once, as it ends. A watch
// of every change, beside it, is woken by each.
func TestFinalOnlyWatchSleepsThroughStartAndProgress(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	id := enqueue(t, b, &jobwirev1.JobSpec{Type: "t"})
	final := b.Broker.WatchJobs([]int64{id}, broker.WatchOptions{FinalOnly: true})
	defer final.Close()
	every := b.Broker.WatchJobs([]int64{id}, broker.WatchOptions{})
	defer every.Close()
	// Both watches are told of a change together, so once every has been, final has been or
	// never will be.
	woken := func(what string) {
		t.Helper()
		select {
		case <-every.C():
		case <-time.After(brokertest.WaitTimeout):
			t.Fatalf("no watch was woken by the %s", what)
		}
		if got := changedIDs(every); !slices.Equal(got, []int64{id}) {
			t.Fatalf("after the %s, the watch of every change has %v, want [%d]", what, got, id)
		}
		if got := changedIDs(final); len(got) != 0 {
			t.Fatalf("the %s woke the watch of final states: %v", what, got)
		}
	}
	w := b.Connect(brokertest.Hello("w1", 1, "t"))
	a := w.Assignment()
	w.Started(a)
	woken("start")
	w.Send(progressMsg(brokertest.Ref(a), 0.5, "half"))
	woken("progress")
	ack(t, w.Succeed(a))
	select {
	case <-final.C():
	case <-time.After(brokertest.WaitTimeout):
		t.Fatal("the success did not wake the watch of final states")
	}
	if got := changedIDs(final); !slices.Equal(got, []int64{id}) {
		t.Fatalf("after the success, the watch of final states has %v, want [%d]", got, id)
	}
}

// changedIDs is the jobs w says changed, read or known, in id order.
func changedIDs(w *broker.JobWatch) []int64 {
	ids, known := w.Changed()
	for _, j := range known {
		ids = append(ids, j.ID)
	}
	slices.Sort(ids)
	return ids
}

// A wait's first look records no version of a job not final yet (FinalAmong): a job that then
// ends by a write the broker does not tell its watches of (another broker's, here one straight
// to the store) is found by the backstop, which tells of a job it first reads final.
func TestWaitFindsAnUntoldEndThroughTheBackstop(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), brokertest.WaitTimeout)
	defer cancel()
	ended := enqueue(t, b, &jobwirev1.JobSpec{Type: "idle"})
	untold := enqueue(t, b, &jobwirev1.JobSpec{Type: "idle"})
	if _, err := b.Producer.CancelJob(ctx, &jobwirev1.CancelJobRequest{Id: ended}); err != nil {
		t.Fatal(err)
	}
	stream, err := b.Producer.WatchJobs(ctx, &jobwirev1.WatchJobsRequest{Ids: []int64{untold, ended}, FinalOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	// The job final already is sent by the first look: once it is here, the look is over.
	if resp, err := stream.Recv(); err != nil || len(resp.GetJobs()) != 1 || resp.GetJobs()[0].GetId() != ended {
		t.Fatalf("first look: %v, %v; want job %d alone", resp, err, ended)
	}
	err = b.Store.Write(ctx, "test", func(tx store.Tx) error {
		_, err := tx.JobCancel(untold, b.Clock.Now())
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	b.Clock.Advance(broker.DefaultConfig().WatchPoll)
	resp, err := stream.Recv()
	if err != nil || len(resp.GetJobs()) != 1 || resp.GetJobs()[0].GetId() != untold ||
		resp.GetJobs()[0].GetState() != jobwirev1.JobState_JOB_STATE_CANCELLED {
		t.Fatalf("after the backstop: %v, %v; want job %d CANCELLED", resp, err, untold)
	}
}

// A wait on many jobs gathers their changes a moment to read and send them together, but not
// once every job it still follows has changed: its last jobs are sent as they end. The moment
// is an hour here, so the wait returns only by that.
func TestWaitSendsItsLastJobsWithoutGathering(t *testing.T) {
	server.SetCoalesceFor(t, time.Hour) // for every call: not in parallel
	b := brokertest.New(t, brokertest.Options{})
	ctx := context.Background()
	specs := make([]*jobwirev1.JobSpec, 150) // more than a watch gathers changes from
	for i := range specs {
		specs[i] = &jobwirev1.JobSpec{Type: "idle"}
	}
	res, err := b.Producer.EnqueueBatch(ctx, &jobwirev1.EnqueueBatchRequest{Jobs: specs})
	if err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for _, j := range res.GetJobs() {
		ids = append(ids, j.GetId())
	}
	done := waitAsync(client.New(b.Conn), ids...)
	brokertest.WaitFor(t, "the watch", func() bool { return b.Broker.Watched() == len(ids) })
	for _, id := range ids {
		if _, err := b.Producer.CancelJob(ctx, &jobwirev1.CancelJobRequest{Id: id}); err != nil {
			t.Fatal(err)
		}
	}
	if jobs := received(t, done); len(jobs) != len(ids) || jobs[len(jobs)-1].State != job.StateCancelled {
		t.Fatalf("waited for %d jobs, got %d", len(ids), len(jobs))
	}
}

// A wait sent columns (WatchJobsRequest.columns) names each type and queue once, whatever
// their mix, and tells each job what a wait sent a Job each is told.
func TestWaitColumnsNameEachTypeAndQueueOnce(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), brokertest.WaitTimeout)
	defer cancel()
	var ids []int64
	for _, spec := range []*jobwirev1.JobSpec{
		{Type: "mail", Queue: "q1"}, {Type: "report", Queue: "q1"}, {Type: "mail", Queue: "q2"},
		{Type: "mail"}, {Type: "q1", Queue: "mail"}, // a type named as another's queue
	} {
		id := enqueue(t, b, spec)
		if _, err := b.Producer.CancelJob(ctx, &jobwirev1.CancelJobRequest{Id: id}); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	recv := func(columns bool) *jobwirev1.WatchJobsResponse {
		t.Helper()
		stream, err := b.Producer.WatchJobs(ctx, &jobwirev1.WatchJobsRequest{Ids: ids, FinalOnly: true, Columns: columns})
		if err != nil {
			t.Fatal(err)
		}
		resp, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	ends := recv(true).GetEnds()
	if want := []string{"mail", "q1", "report", "q2", "default"}; !slices.Equal(ends.GetNames(), want) {
		t.Errorf("names %q, want %q", ends.GetNames(), want)
	}
	got, want := endedJobs(t, ends), recv(false).GetJobs()
	if len(got) != len(ids) || len(want) != len(ids) {
		t.Fatalf("sent %d jobs as columns and %d as jobs, want %d", len(got), len(want), len(ids))
	}
	for i := range got {
		if !proto.Equal(got[i], want[i]) {
			t.Errorf("job %d as columns:\n%v\nas a Job:\n%v", ids[i], got[i], want[i])
		}
	}
}
