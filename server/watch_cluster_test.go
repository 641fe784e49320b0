package server_test

import (
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
	waitState(t, a, id2, jobwirev1.JobState_JOB_STATE_SUCCEEDED)
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
