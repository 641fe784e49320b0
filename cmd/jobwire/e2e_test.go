package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jobwire/jobwire/breaker"
	jwbroker "github.com/jobwire/jobwire/broker"
	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/brokertest"
)

// These tests run the command line in-process against a real broker on loopback.

// e2eBroker starts a broker whose breakers stay out of the way of jobs failed on purpose.
func e2eBroker(t *testing.T) *brokertest.Bundle {
	t.Helper()
	cfg := breaker.CountConfig()
	cfg.Disabled = true
	return brokertest.New(t, brokertest.Options{Breakers: &jwbroker.BreakerOptions{Default: cfg}})
}

// e2eRun runs one command line against b and returns its exit status and output.
func e2eRun(t *testing.T, b *brokertest.Bundle, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(context.Background(), append(args, "--addr", b.Addr), &out, &errOut)
	return code, out.String(), errOut.String()
}

// e2eOK runs a command that must succeed and returns its standard output.
func e2eOK(t *testing.T, b *brokertest.Bundle, args ...string) string {
	t.Helper()
	code, out, errOut := e2eRun(t, b, args...)
	if code != 0 {
		t.Fatalf("jobwire %s: exit %d, stderr %q", strings.Join(args, " "), code, errOut)
	}
	return out
}

func e2eContains(t *testing.T, what, got string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(got, w) {
			t.Fatalf("%s does not contain %q:\n%s", what, w, got)
		}
	}
}

// e2eDeadJob enqueues a job, has w fail it fatally with errType and returns its id.
func e2eDeadJob(t *testing.T, b *brokertest.Bundle, w *brokertest.RawWorker, errType string) int64 {
	t.Helper()
	res, err := b.Producer.Enqueue(context.Background(), &jobwirev1.EnqueueRequest{Job: &jobwirev1.JobSpec{Type: "charge", Payload: []byte(`{"amount":5}`)}})
	if err != nil {
		t.Fatal(err)
	}
	a := w.Assignment()
	w.Started(a)
	f := brokertest.Fatal(errType)
	f.Message = "gateway said " + errType
	if r := w.Fail(a, f).GetResultAck(); r.GetDecision() != jobwirev1.Decision_DECISION_DEAD {
		t.Fatalf("job %d was not killed: %v", a.GetJob().GetId(), r)
	}
	return res.GetJob().GetId()
}

func e2eJobState(t *testing.T, b *brokertest.Bundle, id int64) jobwirev1.JobState {
	t.Helper()
	res, err := b.Producer.GetJob(context.Background(), &jobwirev1.GetJobRequest{Id: id})
	if err != nil {
		t.Fatalf("get job %d: %v", id, err)
	}
	return res.GetJob().GetState()
}

func TestE2EDeadLetterQueue(t *testing.T) {
	t.Parallel()
	b := e2eBroker(t)
	w := b.Connect(brokertest.Hello("w1", 1, "charge"))
	var conn []int64
	for range 3 {
		conn = append(conn, e2eDeadJob(t, b, w, "ConnectionError"))
	}
	bad := e2eDeadJob(t, b, w, "ValueError")
	// Requeued jobs wait in the paused queue where the test can see them.
	e2eContains(t, "queues pause", e2eOK(t, b, "queues", "pause", "default"), "queue default is paused")

	out := e2eOK(t, b, "dlq", "list")
	for _, id := range append(conn, bad) {
		e2eContains(t, "dlq list", out, fmt.Sprint(id))
	}
	e2eContains(t, "dlq list", out, "ConnectionError", "ValueError", "FATAL")
	out = e2eOK(t, b, "dlq", "list", "--error-type", "ValueError")
	if strings.Contains(out, "ConnectionError") {
		t.Fatalf("filtered list shows other errors:\n%s", out)
	}

	e2eContains(t, "dlq show", e2eOK(t, b, "dlq", "show", fmt.Sprint(bad)),
		"Attempt 1: FAILED", "ValueError", "gateway said ValueError", `{"amount":5}`)
	e2eContains(t, "dlq top", e2eOK(t, b, "dlq", "top"), "ConnectionError", "3", "gateway said ConnectionError")

	// By filter, a preview first; nothing changes without --yes.
	out = e2eOK(t, b, "dlq", "requeue", "--all-matching", "--error-type", "ConnectionError")
	e2eContains(t, "requeue preview", out, "3 dead jobs match", "re-run with --yes")
	for _, id := range conn {
		if s := e2eJobState(t, b, id); s != jobwirev1.JobState_JOB_STATE_DEAD {
			t.Fatalf("a preview moved job %d to %s", id, s)
		}
	}
	out = e2eOK(t, b, "dlq", "requeue", "--all-matching", "--error-type", "ConnectionError", "--yes")
	e2eContains(t, "requeue", out, "requeued 3 of 3 matched jobs")
	for _, id := range conn {
		if s := e2eJobState(t, b, id); s != jobwirev1.JobState_JOB_STATE_PENDING {
			t.Fatalf("requeued job %d is %s", id, s)
		}
	}
	out = e2eOK(t, b, "jobs", "list", "--state", "pending")
	for _, id := range conn {
		e2eContains(t, "jobs list", out, fmt.Sprint(id))
	}
	e2eContains(t, "queues list", e2eOK(t, b, "queues", "list"), "default", "paused")

	// Purge is for good.
	e2eContains(t, "purge", e2eOK(t, b, "dlq", "purge", fmt.Sprint(bad)), "purged 1 of 1 matched job\n")
	code, _, errOut := e2eRun(t, b, "job", "get", fmt.Sprint(bad))
	if code != 1 || !strings.Contains(errOut, "not found") {
		t.Fatalf("job get after purge: exit %d, stderr %q", code, errOut)
	}
	code, _, errOut = e2eRun(t, b, "dlq", "requeue", fmt.Sprint(bad))
	if code != 1 || !strings.Contains(errOut, "not found") {
		t.Fatalf("requeue after purge: exit %d, stderr %q", code, errOut)
	}

	// Resuming the queue sends the requeued jobs to the worker, attempt 1 again.
	e2eContains(t, "queues resume", e2eOK(t, b, "queues", "resume", "default"), "queue default is active")
	a := w.Assignment()
	if a.GetAttempt() != 1 || a.GetJob().GetId() != conn[0] {
		t.Fatalf("after resume got job %d attempt %d, want %d attempt 1", a.GetJob().GetId(), a.GetAttempt(), conn[0])
	}
}

func TestE2EQueuesStatsAndRetention(t *testing.T) {
	t.Parallel()
	b := e2eBroker(t)
	ctx := context.Background()
	// A queue is capped before its first job by pausing it (which makes it) first.
	e2eOK(t, b, "queues", "pause", "mail")
	e2eContains(t, "set-limit", e2eOK(t, b, "queues", "set-limit", "mail", "3"), "queue mail runs at most 3 jobs at once")
	e2eOK(t, b, "queues", "resume", "mail")
	w := b.Connect(brokertest.Hello("w1", 1, "send"))
	var done []int64
	for range 2 {
		res, err := b.Producer.Enqueue(ctx, &jobwirev1.EnqueueRequest{Job: &jobwirev1.JobSpec{Type: "send", Queue: "mail"}})
		if err != nil {
			t.Fatal(err)
		}
		done = append(done, res.GetJob().GetId())
		if r := w.Succeed(w.Assignment()).GetResultAck(); r.GetDecision() != jobwirev1.Decision_DECISION_SUCCEEDED {
			t.Fatalf("ack = %v", r)
		}
	}
	w.Kill()
	if _, err := b.Producer.Enqueue(ctx, &jobwirev1.EnqueueRequest{Job: &jobwirev1.JobSpec{Type: "other", Queue: "mail"}}); err != nil {
		t.Fatal(err)
	}

	out := e2eOK(t, b, "queues", "list")
	e2eContains(t, "queues list", out, "mail", "active", "3")
	out = e2eOK(t, b, "stats")
	e2eContains(t, "stats", out, "Jobs by state:", "mail", "send", "SUCCEEDED", "other", "PENDING", "Recent attempts:", "Queues:")

	b.Clock.Advance(2 * time.Hour)
	out = e2eOK(t, b, "purge-succeeded", "--older-than", "1h")
	e2eContains(t, "purge-succeeded", out, "purged 2 succeeded jobs")
	for _, id := range done {
		if _, err := b.Producer.GetJob(ctx, &jobwirev1.GetJobRequest{Id: id}); err == nil {
			t.Fatalf("succeeded job %d is still there", id)
		}
	}
	e2eContains(t, "set-limit 0", e2eOK(t, b, "queues", "set-limit", "mail", "0"), "queue mail has no concurrency limit")
}

// Input the broker rejects as INVALID_ARGUMENT exits with 2, like a bad command line, and says
// which field is wrong; a job that does not exist is a refusal and exits with 1.
func TestE2EBrokerRejectedInputExitsTwo(t *testing.T) {
	t.Parallel()
	b := e2eBroker(t)
	code, _, errOut := e2eRun(t, b, "enqueue", "--type", "send email", "--payload", "{}")
	if code != 2 || !strings.Contains(errOut, "job.type: may hold only") {
		t.Fatalf("enqueue with a bad type: exit %d, stderr %q; want 2 naming job.type", code, errOut)
	}
	code, _, errOut = e2eRun(t, b, "job", "get", "424242")
	if code != 1 || !strings.Contains(errOut, "not found") {
		t.Fatalf("get of a missing job: exit %d, stderr %q; want 1 saying not found", code, errOut)
	}
}

// Resuming or capping a queue that does not exist is refused (exit 1) with a sentence saying
// so, and leaves no queue behind.
func TestE2EMissingQueueIsNotMade(t *testing.T) {
	t.Parallel()
	b := e2eBroker(t)
	for _, args := range [][]string{{"queues", "resume", "nosuchqueue"}, {"queues", "set-limit", "nosuchqueue", "2"}} {
		code, out, errOut := e2eRun(t, b, args...)
		want := "jobwire " + strings.Join(args[:2], " ") + `: queue "nosuchqueue" does not exist; queues are made by their first job or by 'jobwire queues pause' (see 'jobwire queues list')` + "\n"
		if code != 1 || errOut != want || out != "" {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit 1 and %q", args, code, out, errOut, want)
		}
	}
	e2eContains(t, "queues list", e2eOK(t, b, "queues", "list"), "no queues yet")
}

// Cancelling a job that already finished exits 1 and says in which state it finished.
func TestE2ECancelOfAFinishedJob(t *testing.T) {
	t.Parallel()
	b := e2eBroker(t)
	w := b.Connect(brokertest.Hello("w1", 1, "send"))
	res, err := b.Producer.Enqueue(context.Background(), &jobwirev1.EnqueueRequest{Job: &jobwirev1.JobSpec{Type: "send"}})
	if err != nil {
		t.Fatal(err)
	}
	if r := w.Succeed(w.Assignment()).GetResultAck(); r.GetDecision() != jobwirev1.Decision_DECISION_SUCCEEDED {
		t.Fatalf("ack = %v", r)
	}
	id := res.GetJob().GetId()
	code, out, errOut := e2eRun(t, b, "job", "cancel", fmt.Sprint(id))
	want := fmt.Sprintf("jobwire job cancel: job %d already SUCCEEDED; nothing to cancel\n", id)
	if code != 1 || errOut != want || out != "" {
		t.Fatalf("cancel of a succeeded job: exit %d, stdout %q, stderr %q; want exit 1 and %q", code, out, errOut, want)
	}
}
