package main

import (
	"fmt"
	"strings"
	"testing"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/brokertest"
)

// A unique enqueue repeated from the command line prints the same id and says it is a
// duplicate, on stderr, so a script reading stdout gets the job either way.
func TestE2EUniqueEnqueue(t *testing.T) {
	t.Parallel()
	b := e2eBroker(t)
	args := []string{"enqueue", "--type", "report", "--payload", `{"customer":7,"month":"may"}`, "--unique-fields", "payload.customer"}
	first := e2eOK(t, b, args...)
	args[4] = `{"customer":7,"month":"june"}`
	code, out, errOut := e2eRun(t, b, args...)
	if code != 0 || out != first || !strings.Contains(errOut, "(PENDING) holds this job's unique key; nothing new was enqueued (duplicate)") {
		t.Fatalf("repeat: exit %d, stdout %q, stderr %q; want job %q named as the duplicate", code, out, errOut, first)
	}
	if again := e2eOK(t, b, "enqueue", "--type", "report", "--unique-key", "c7", "--unique-states", "scheduled,pending,running,succeeded"); again == first {
		t.Fatalf("another key answered with job %s", first)
	}
	for _, bad := range [][]string{
		{"--unique-states", "pending,bogus"},
		{"--unique-states", "pending"},
		{"--unique-fields", "type"},
		{"--unique=false", "--unique-key", "k"},
	} {
		code, _, errOut := e2eRun(t, b, append([]string{"enqueue", "--type", "report"}, bad...)...)
		if code != 2 || !strings.HasPrefix(errOut, "jobwire enqueue: ") {
			t.Errorf("enqueue %v: exit %d, stderr %q; want 2 with a sentence", bad, code, errOut)
		}
	}
}

// The commands on waiting jobs change a waiting job and refuse, exit 1 naming the state, a job
// that does not wait; bad input exits 2.
func TestE2EWaitingJobCommands(t *testing.T) {
	t.Parallel()
	b := e2eBroker(t)
	later := strings.TrimSpace(e2eOK(t, b, "enqueue", "--type", "send", "--delay", "1h"))
	e2eContains(t, "priority", e2eOK(t, b, "job", "priority", later, "7"), "job "+later+" has priority 7 (SCHEDULED)")
	code, _, errOut := e2eRun(t, b, "job", "retry-now", later)
	if code != 1 || !strings.Contains(errOut, "is SCHEDULED: only a job waiting out a retry backoff") {
		t.Fatalf("retry-now of a first run: exit %d, stderr %q", code, errOut)
	}
	e2eContains(t, "run-now", e2eOK(t, b, "job", "run-now", later), "job "+later+" is PENDING")
	e2eContains(t, "delete", e2eOK(t, b, "job", "delete", later), "job "+later+" deleted (it was PENDING)")
	code, _, errOut = e2eRun(t, b, "job", "delete", later)
	if code != 1 || !strings.Contains(errOut, "not found") {
		t.Fatalf("delete of a deleted job: exit %d, stderr %q", code, errOut)
	}

	w := b.Connect(brokertest.Hello("w1", 1, "send"))
	id := strings.TrimSpace(e2eOK(t, b, "enqueue", "--type", "send"))
	w.Started(w.Assignment())
	for _, cmd := range []string{"run-now", "delete"} {
		code, out, errOut := e2eRun(t, b, "job", cmd, id)
		if code != 1 || out != "" || !strings.Contains(errOut, fmt.Sprintf("jobwire job %s: job %s is ", cmd, id)) {
			t.Errorf("%s of a leased or running job: exit %d, stdout %q, stderr %q; want 1 naming the state", cmd, code, out, errOut)
		}
	}
	for _, bad := range [][]string{{"priority", id}, {"priority", id, "high"}, {"priority", id, "2000"}, {"delete", "x"}} {
		if code, _, errOut := e2eRun(t, b, append([]string{"job"}, bad...)...); code != 2 || errOut == "" {
			t.Errorf("job %v: exit %d, stderr %q; want 2 with a sentence", bad, code, errOut)
		}
	}
	if st := e2eJobState(t, b, mustID(t, id)); st != jobwirev1.JobState_JOB_STATE_LEASED && st != jobwirev1.JobState_JOB_STATE_RUNNING {
		t.Fatalf("job %s is %s after the refused commands, want it still held", id, st)
	}
}

func mustID(t *testing.T, s string) int64 {
	t.Helper()
	var id int64
	if _, err := fmt.Sscan(s, &id); err != nil {
		t.Fatal(err)
	}
	return id
}
