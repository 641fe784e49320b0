package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/brokertest"
)

// job wait prints how each job ended and exits 0 when every one SUCCEEDED, 3 when one did
// not, 4 when --for ran out; job get and job watch show a result and progress.
func TestE2EJobWaitAndWatch(t *testing.T) {
	t.Parallel()
	b := e2eBroker(t)
	w := b.Connect(brokertest.Hello("w1", 1, "report"))
	ok := b.Enqueue(&jobwirev1.JobSpec{Type: "report"})
	a := w.Assignment()
	w.Started(a)
	w.Send(&jobwirev1.ConnectRequest{Message: &jobwirev1.ConnectRequest_Progress{Progress: &jobwirev1.Progress{
		JobId: a.GetJob().GetId(), LeaseToken: a.GetLeaseToken(), Fraction: ptr(0.4), Message: "copying part 2 of 5"}}})
	brokertest.WaitFor(t, "progress", func() bool {
		_, out, _ := e2eRun(t, b, "job", "get", fmt.Sprint(ok))
		return contains(out, "40% copying part 2 of 5")
	})
	// Long enough for the watch to be answered on a loaded machine (at 100 ms it once printed
	// nothing): the job runs on, so the watch always lasts all of it.
	code, out, _ := e2eRun(t, b, "job", "watch", fmt.Sprint(ok), "--for", "1s")
	if code != exitWaitOver || !contains(out, "RUNNING", "40% copying part 2 of 5") {
		t.Fatalf("job watch of a running job: exit %d, %q", code, out)
	}
	w.Send(brokertest.SuccessMsg(brokertest.Ref(a), []byte(`{"rows":3}`)))
	w.Next()
	out = e2eOK(t, b, "job", "wait", fmt.Sprint(ok))
	e2eContains(t, "job wait", out, fmt.Sprintf(`job %d SUCCEEDED result {"rows":3}`, ok))
	e2eContains(t, "job get", e2eOK(t, b, "job", "get", fmt.Sprint(ok)), "Result (10 bytes, JSON):", `{"rows":3}`)

	dead := e2eDeadJob(t, b, b.Connect(brokertest.Hello("w2", 1, "charge")), "ValueError")
	code, out, _ = e2eRun(t, b, "job", "wait", fmt.Sprint(ok), fmt.Sprint(dead))
	if code != exitJobFailed || !contains(out, fmt.Sprintf("job %d DEAD: ValueError", dead)) {
		t.Fatalf("job wait with a dead job: exit %d, %q", code, out)
	}
	pending := b.Enqueue(&jobwirev1.JobSpec{Type: "other"})
	start := time.Now()
	if code, _, errOut := e2eRun(t, b, "job", "wait", fmt.Sprint(pending), "--for", "50ms"); code != exitWaitOver || !contains(errOut, "gave up after 50ms") {
		t.Fatalf("job wait --for of a pending job: exit %d, %q after %s", code, errOut, time.Since(start))
	}
	if code, _, errOut := e2eRun(t, b, "job", "wait", "1234567"); code != 1 || !contains(errOut, "does not exist") {
		t.Fatalf("job wait of an unknown job: exit %d, %q", code, errOut)
	}
	if code, _, _ := e2eRun(t, b, "job", "wait"); code != 2 {
		t.Fatalf("job wait without ids: exit %d, want 2", code)
	}
}

func ptr[T any](v T) *T { return &v }

func contains(s string, subs ...string) bool {
	for _, sub := range subs {
		if !stringsContains(s, sub) {
			return false
		}
	}
	return true
}

func stringsContains(s, sub string) bool { return strings.Contains(s, sub) }
