package server_test

import (
	"context"
	"testing"
	"time"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/brokertest"
	"github.com/jobwire/jobwire/job"
)

// inQueue is a job of type t in queue.
func inQueue(queue string) *jobwirev1.JobSpec {
	s := spec("t")
	s.Queue = queue
	return s
}

// heldIn counts queue's LEASED and RUNNING jobs in the database.
func heldIn(t *testing.T, b *brokertest.Bundle, queue string) int64 {
	t.Helper()
	qs, err := b.Store.QueueStats(context.Background(), queue)
	if err != nil || len(qs) != 1 {
		t.Fatalf("queue %s: %v, %v", queue, qs, err)
	}
	return qs[0].Depth[job.StateLeased] + qs[0].Depth[job.StateRunning]
}

// A cap of 3 is 3 running across every broker: workers on two brokers with room for 4 between
// them never hold more than 3 of the queue's jobs, by what they were handed or by what the
// database holds, and room freed on one broker is taken up on either. Neither broker's
// dispatch poll runs: only events move work between them.
func TestClusterQueueCapHoldsAcrossBrokers(t *testing.T) {
	t.Parallel()
	a, b := twoBrokers(t)
	ctx := context.Background()
	const jobs = 12
	for range jobs {
		a.Enqueue(inQueue("capped"))
	}
	if _, err := a.Admin.SetQueueLimit(ctx, &jobwirev1.SetQueueLimitRequest{Queue: "capped", Limit: 3}); err != nil {
		t.Fatal(err)
	}
	// Each broker's worker has room for 2: the third job must come through the other broker,
	// and each broker alone would let 2 + 2 run.
	workers := []*brokertest.RawWorker{a.Connect(brokertest.Hello("wa", 2, "t")), b.Connect(brokertest.Hello("wb", 2, "t"))}
	type held struct {
		w *brokertest.RawWorker
		a *jobwirev1.Assignment
	}
	var running []held
	done, ranOn := 0, map[*brokertest.RawWorker]int{}
	deadline := time.Now().Add(brokertest.WaitTimeout)
	for done < jobs {
		for _, w := range workers {
			for m, ok := w.Poll(); ok; m, ok = w.Poll() {
				if as := m.GetAssignment(); as != nil {
					w.Started(as)
					running = append(running, held{w, as})
					ranOn[w]++
				}
			}
		}
		if len(running) > 3 {
			t.Fatalf("%d of the queue's jobs handed out at once, cap 3", len(running))
		}
		if n := heldIn(t, a, "capped"); n > 3 {
			t.Fatalf("%d of the queue's jobs held in the database, cap 3", n)
		}
		// Finish one once the room is taken (or no more jobs wait): the next takes its place.
		if len(running) == 3 || len(running) > 0 && done+len(running) == jobs {
			r := running[0]
			running = running[1:]
			r.w.SendResult(brokertest.Ref(r.a), nil)
			done++
			deadline = time.Now().Add(brokertest.WaitTimeout)
			continue
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d jobs done, %d running, %d waiting: no job handed out within %s", done, len(running), jobs-done-len(running), brokertest.WaitTimeout)
		}
		time.Sleep(time.Millisecond)
	}
	if ranOn[workers[0]] == 0 || ranOn[workers[1]] == 0 {
		t.Fatalf("jobs run per broker: %d and %d, want both brokers to have run some", ranOn[workers[0]], ranOn[workers[1]])
	}
}

// A pause through one broker stops dispatch from the queue on another, and a resume through
// the second restarts it on the first. Neither broker's dispatch poll runs: only the events do.
func TestClusterPauseAndResumeAcrossBrokers(t *testing.T) {
	t.Parallel()
	a, b := twoBrokers(t)
	ctx := context.Background()
	if _, err := a.Admin.PauseQueue(ctx, &jobwirev1.PauseQueueRequest{Queue: "mail"}); err != nil {
		t.Fatal(err)
	}
	wb := b.Connect(brokertest.Hello("wb", 1, "t")) // every queue
	hello := brokertest.Hello("wa", 1, "t")
	hello.Queues = []string{"mail"}
	wa := a.Connect(hello)
	mail := a.Enqueue(inQueue("mail"))
	other := a.Enqueue(inQueue("other"))
	// The round on b that hands out the later job saw the paused queue's job and left it.
	got := wb.Assignment()
	if id := got.GetJob().GetId(); id != other {
		t.Fatalf("the worker on the other broker got job %d, want %d (job %d's queue is paused)", id, other, mail)
	}
	wb.Started(got) // and keeps its one slot busy
	if s := getJob(t, b, mail).GetState(); s != jobwirev1.JobState_JOB_STATE_PENDING {
		t.Fatalf("the paused queue's job is %s, want PENDING", s)
	}
	if _, err := b.Admin.ResumeQueue(ctx, &jobwirev1.ResumeQueueRequest{Queue: "mail"}); err != nil {
		t.Fatal(err)
	}
	if id := wa.Assignment().GetJob().GetId(); id != mail {
		t.Fatalf("after the resume the first broker's worker got job %d, want %d", id, mail)
	}
}

// Room freed under a cap on one broker wakes another broker whose worker waits for it, when the
// first has nobody to take it: the write that ends the lease tells the cluster.
func TestClusterRoomFreedOnOneBrokerWakesAnother(t *testing.T) {
	t.Parallel()
	a, b := twoBrokers(t)
	ctx := context.Background()
	first := a.Enqueue(&jobwirev1.JobSpec{Type: "x", Queue: "capped", Payload: []byte(`{}`)})
	second := a.Enqueue(&jobwirev1.JobSpec{Type: "y", Queue: "capped", Payload: []byte(`{}`)})
	if _, err := a.Admin.SetQueueLimit(ctx, &jobwirev1.SetQueueLimitRequest{Queue: "capped", Limit: 1}); err != nil {
		t.Fatal(err)
	}
	wa := a.Connect(brokertest.Hello("wa", 1, "x"))
	got := wa.Assignment()
	if got.GetJob().GetId() != first {
		t.Fatalf("the first broker's worker got job %d, want %d", got.GetJob().GetId(), first)
	}
	wa.Started(got)
	wb := b.Connect(brokertest.Hello("wb", 2, "y"))
	// A job of another queue, enqueued after the worker connected, comes out of a round that
	// passed over the capped queue's older job.
	other := b.Enqueue(&jobwirev1.JobSpec{Type: "y", Queue: "other", Payload: []byte(`{}`)})
	if id := wb.Assignment().GetJob().GetId(); id != other {
		t.Fatalf("the second broker's worker got job %d, want %d while the capped queue is full", id, other)
	}
	ack(t, wa.Succeed(got))
	if id := wb.Assignment().GetJob().GetId(); id != second {
		t.Fatalf("after the room was freed the second broker's worker got job %d, want %d", id, second)
	}
}

// In a cluster too, jobs that were running when their broker restarted keep their places under
// their queue's cap: the broker starts knowing no lease, and the database counts them.
func TestClusterCapCountsJobsRunningAcrossARestart(t *testing.T) {
	t.Parallel()
	a, b := twoBrokers(t)
	ctx := context.Background()
	const limit = 2
	for range 2 * limit {
		a.Enqueue(inQueue("capped"))
	}
	if _, err := a.Admin.SetQueueLimit(ctx, &jobwirev1.SetQueueLimitRequest{Queue: "capped", Limit: limit}); err != nil {
		t.Fatal(err)
	}
	w1 := a.Connect(brokertest.Hello("w1", 5, "t"))
	for range limit {
		got := w1.Assignment()
		w1.Started(got)
		a.WaitState(got.GetJob().GetId(), jobwirev1.JobState_JOB_STATE_RUNNING)
	}
	a.Restart() // w1 does not come back
	for name, bundle := range map[string]*brokertest.Bundle{"restarted": a, "other": b} {
		w := bundle.Connect(brokertest.Hello("w-"+name, 5, "t"))
		// A job of an uncapped queue reaches w once a dispatch round has run for it; capped
		// jobs would have been leased by that round or an earlier one.
		free := bundle.Enqueue(inQueue("free"))
		if got := w.Assignment(); got.GetJob().GetId() != free {
			t.Fatalf("%s broker: its worker got job %d of queue %q, want only job %d while the cap is taken",
				name, got.GetJob().GetId(), got.GetJob().GetQueue(), free)
		}
		// Gone before the next broker's job is enqueued: any broker may lease any job, and
		// without an offer at insert (the reference writer) this worker could take the next one.
		w.Kill()
		bundle.WaitStreams(0)
	}
	if n := heldIn(t, b, "capped"); n != limit {
		t.Fatalf("%d of the capped queue's jobs held, want the %d running from before the restart", n, limit)
	}
}
