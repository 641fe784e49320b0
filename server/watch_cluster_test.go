package server_test

import (
	"context"
	"testing"
	"time"

	"github.com/jobwire/jobwire/broker"
	"github.com/jobwire/jobwire/client"
	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/brokertest"
	"github.com/jobwire/jobwire/job"
)

// A wait on one broker returns when the job finishes on another: the finishing broker's write
// publishes the change, and no clock moves, so no backstop read is involved. A job finished
// before the other broker heard of the watch is found by the backstop read.
func TestClusterWaitAcrossBrokers(t *testing.T) {
	t.Parallel()
	a, b := twoBrokers(t)
	c := client.New(a.Conn)
	w := b.Connect(brokertest.Hello("w1", 1, "t"))
	id := a.Enqueue(spec("t"))
	got := w.Assignment()
	w.Started(got)
	done := waitAsync(c, id)
	brokertest.WaitFor(t, "the watch announced on the other broker", func() bool { return b.Broker.WatchedElsewhere(id) })
	w.Send(brokertest.SuccessMsg(brokertest.Ref(got), []byte("42")))
	ack(t, w.Next())
	if jobs := received(t, done); len(jobs) != 1 || jobs[0].State != job.StateSucceeded || string(jobs[0].Result) != "42" {
		t.Fatalf("waited: %+v", jobs)
	}

	// The backstop: a job whose change no notice tells of (b forgot the announcement, as if
	// it were lost) is read again once a poll interval passes.
	id2 := a.Enqueue(spec("t"))
	got = w.Assignment()
	w.Started(got)
	done = waitAsync(c, id2)
	brokertest.WaitFor(t, "the second watch announced", func() bool { return b.Broker.WatchedElsewhere(id2) })
	b.Broker.ForgetWatchedElsewhere() // as if the announcement were lost
	ack(t, w.Succeed(got))
	a.WaitState(id2, jobwirev1.JobState_JOB_STATE_SUCCEEDED)
	a.Clock.Advance(broker.DefaultConfig().WatchPoll)
	if jobs := received(t, done); len(jobs) != 1 || jobs[0].State != job.StateSucceeded {
		t.Fatalf("waited through the backstop: %+v", jobs)
	}
}

// received is what done delivers, or fails the test after brokertest.WaitTimeout.
func received(t *testing.T, done <-chan waited) []*job.Job {
	t.Helper()
	select {
	case w := <-done:
		if w.err != nil {
			t.Fatalf("wait: %v", w.err)
		}
		return w.jobs
	case <-time.After(brokertest.WaitTimeout):
		t.Fatal("the wait did not return")
		return nil
	}
}

// A lease its worker took through another broker and back is not known to the broker it comes
// back to: the progress it reported through the other one is in the database only, so the
// job's final state is read, progress and all, not taken from the result's write.
func TestClusterWatchReadsAJobWhoseWorkerCameBack(t *testing.T) {
	t.Parallel()
	a, b := twoBrokers(t)
	w := a.Connect(brokertest.Hello("w1", 1, "t"))
	id, got := runJob(t, a, w)
	w.Kill()
	hello := brokertest.Hello("w1", 1, "t")
	hello.Held = []*jobwirev1.LeaseRef{brokertest.Ref(got)}
	w2 := b.Connect(hello)
	w2.Send(progressMsg(brokertest.Ref(got), 0.5, "through b"))
	brokertest.WaitFor(t, "the progress stored", func() bool { return getJob(t, a, id).GetProgress() != nil })
	w2.Kill()
	w3 := a.Connect(hello)
	if lost := w3.Welcome.GetLost(); len(lost) != 0 {
		t.Fatalf("the lease is listed lost on its way back: %v", lost)
	}

	ctx, cancel := context.WithTimeout(context.Background(), brokertest.WaitTimeout)
	defer cancel()
	stream, err := a.Producer.WatchJobs(ctx, &jobwirev1.WatchJobsRequest{Ids: []int64{id}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil { // the job as the watch starts
		t.Fatal(err)
	}
	handed := a.Broker.FinalsHanded()
	ack(t, w3.Succeed(got))
	var last *jobwirev1.Job
	for last == nil || !final(last) {
		resp, err := stream.Recv()
		if err != nil {
			t.Fatalf("watch: %v", err)
		}
		last = resp.GetJobs()[len(resp.GetJobs())-1]
	}
	if n := a.Broker.FinalsHanded() - handed; n != 0 || last.GetProgress().GetMessage() != "through b" {
		t.Fatalf("watched %v with progress %v (%d handed without a read), want the progress reported through b",
			last.GetState(), last.GetProgress(), n)
	}
}
