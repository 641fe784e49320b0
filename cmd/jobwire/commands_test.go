package main

import (
	"encoding/json"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
)

func assertProto(t *testing.T, got, want proto.Message) {
	t.Helper()
	if !proto.Equal(got, want) {
		t.Errorf("request mismatch\n got: %s\nwant: %s", prototext.Format(got), prototext.Format(want))
	}
}

// onlyRequest returns the single request the broker received for method.
func onlyRequest(t *testing.T, fb *fakeBroker, method string) proto.Message {
	t.Helper()
	reqs := fb.requests(method)
	if len(reqs) != 1 {
		t.Fatalf("broker received %d %s requests, want 1", len(reqs), method)
	}
	return reqs[0]
}

func wantOK(t *testing.T, r result) {
	t.Helper()
	if r.code != 0 {
		t.Fatalf("exit %d, want 0; stderr: %s", r.code, r.stderr)
	}
}

// wantContains checks that s holds every part, in order.
func wantContains(t *testing.T, s string, parts ...string) {
	t.Helper()
	rest := s
	for _, p := range parts {
		i := strings.Index(rest, p)
		if i < 0 {
			t.Errorf("output lacks %q (in order) in:\n%s", p, s)
			return
		}
		rest = rest[i+len(p):]
	}
}

// decodeJSON checks that out is one JSON object and returns it.
func decodeJSON(t *testing.T, out string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		t.Fatalf("--json output is not a JSON object: %v\n%s", err, out)
	}
	return m
}

var deadJob = &jobwirev1.Job{
	Id: 42, Type: "email.send", Queue: "mail", Payload: []byte(`{"to":"ada"}`), Priority: 5,
	State: jobwirev1.JobState_JOB_STATE_DEAD, Attempts: 2, MaxAttempts: 2,
	RunAt: timestamppb.New(testNow.Add(-time.Hour)), CreatedAt: timestamppb.New(testNow.Add(-2 * time.Hour)),
	FinishedAt: timestamppb.New(testNow.Add(-time.Minute)), AttemptTimeout: durationpb.New(time.Minute),
	DeadReason: jobwirev1.DeadReason_DEAD_REASON_MAX_ATTEMPTS_EXHAUSTED, LastErrorType: "SMTPError", LastErrorMessage: "451 try later",
	AttemptHistory: []*jobwirev1.Attempt{
		{Number: 1, WorkerId: "w-1", StartedAt: timestamppb.New(testNow.Add(-time.Hour)), FinishedAt: timestamppb.New(testNow.Add(-time.Hour + 2*time.Second)),
			Outcome: jobwirev1.AttemptOutcome_ATTEMPT_OUTCOME_FAILED, FailureKind: jobwirev1.FailureKind_FAILURE_KIND_TRANSIENT,
			ErrorType: "SMTPError", Message: "451 try later", Details: "at send()\nat main()"},
		{Number: 2, WorkerId: "w-2", StartedAt: timestamppb.New(testNow.Add(-2 * time.Minute)),
			Outcome: jobwirev1.AttemptOutcome_ATTEMPT_OUTCOME_LEASE_EXPIRED},
	},
}

func TestEnqueue(t *testing.T) {
	t.Parallel()
	fb := startBroker(t, map[string]handler{"Enqueue": func(req proto.Message) (proto.Message, error) {
		dup := req.(*jobwirev1.EnqueueRequest).GetJob().GetIdempotencyKey() == "seen"
		return &jobwirev1.EnqueueResponse{Job: &jobwirev1.EnqueuedJob{Id: 77, Duplicate: dup, State: jobwirev1.JobState_JOB_STATE_PENDING}}, nil
	}})

	r := runAt(t, fb.addr, "enqueue", "--type", "email.send", "--payload", `{"to":"ada"}`, "--queue", "mail",
		"--priority", "-5", "--delay", "2m", "--max-attempts", "4", "--idempotency-key", "k1", "--attempt-timeout", "30s")
	wantOK(t, r)
	if r.stdout != "77\n" || r.stderr != "" {
		t.Errorf("stdout %q stderr %q; want the id alone", r.stdout, r.stderr)
	}
	assertProto(t, onlyRequest(t, fb, "Enqueue"), &jobwirev1.EnqueueRequest{Job: &jobwirev1.JobSpec{
		Type: "email.send", Payload: []byte(`{"to":"ada"}`), Queue: "mail", Priority: -5,
		Schedule:    &jobwirev1.JobSpec_Delay{Delay: durationpb.New(2 * time.Minute)},
		MaxAttempts: 4, IdempotencyKey: "k1", AttemptTimeout: durationpb.New(30 * time.Second),
	}})

	r = runAt(t, fb.addr, "enqueue", "--type", "t", "--run-at", "2030-07-01T08:00:00Z", "--idempotency-key", "seen", "--json")
	wantOK(t, r)
	m := decodeJSON(t, r.stdout)
	if job, _ := m["job"].(map[string]any); job["id"] != float64(77) || job["duplicate"] != true || job["state"] != "pending" {
		t.Errorf("json = %v", m)
	}
	wantContains(t, r.stderr, "job 77 already existed", `"seen"`, "(duplicate)")
	reqs := fb.requests("Enqueue")
	runAt := reqs[len(reqs)-1].(*jobwirev1.EnqueueRequest).GetJob().GetRunAt()
	if !runAt.AsTime().Equal(time.Date(2030, 7, 1, 8, 0, 0, 0, time.UTC)) || reqs[len(reqs)-1].(*jobwirev1.EnqueueRequest).GetJob().GetPayload() != nil {
		t.Errorf("run_at %v, payload %q; want 2030-07-01T08:00:00Z and no payload", runAt, reqs[len(reqs)-1].(*jobwirev1.EnqueueRequest).GetJob().GetPayload())
	}
}

func TestJobGet(t *testing.T) {
	t.Parallel()
	fb := startBroker(t, map[string]handler{"GetJob": reply(&jobwirev1.GetJobResponse{Job: deadJob})})

	r := runAt(t, fb.addr, "job", "get", "42")
	wantOK(t, r)
	assertProto(t, onlyRequest(t, fb, "GetJob"), &jobwirev1.GetJobRequest{Id: 42})
	wantContains(t, r.stdout,
		"State", "DEAD",
		"Dead reason", "MAX_ATTEMPTS_EXHAUSTED",
		"Attempts", "2/2",
		"Last error", "SMTPError: 451 try later",
		"Payload (12 bytes, JSON):\n{\"to\":\"ada\"}\n",
		"ATTEMPT", "OUTCOME", "KIND", "WORKER",
		"1", "FAILED", "TRANSIENT", "w-1", "2030-06-01T11:00:00Z", "2s", "SMTPError: 451 try later",
		"2", "LEASE_EXPIRED", "-", "w-2")

	r = runAt(t, fb.addr, "job", "get", "--json", "42")
	wantOK(t, r)
	m := decodeJSON(t, r.stdout)
	job := m["job"].(map[string]any)
	if job["state"] != "dead" || len(job["attemptHistory"].([]any)) != 2 {
		t.Errorf("json job = %v", job)
	}
}

func TestJobCancel(t *testing.T) {
	t.Parallel()
	fb := startBroker(t, map[string]handler{"CancelJob": reply(&jobwirev1.CancelJobResponse{Job: &jobwirev1.Job{Id: 9, State: jobwirev1.JobState_JOB_STATE_CANCELLED}})})
	r := runAt(t, fb.addr, "job", "cancel", "9")
	wantOK(t, r)
	if r.stdout != "job 9 is CANCELLED\n" {
		t.Errorf("stdout = %q", r.stdout)
	}
	assertProto(t, onlyRequest(t, fb, "CancelJob"), &jobwirev1.CancelJobRequest{Id: 9})
}

func TestBrokerErrorsExitOneWithTheBrokersMessage(t *testing.T) {
	t.Parallel()
	fb := startBroker(t, map[string]handler{
		"GetJob": func(proto.Message) (proto.Message, error) {
			return nil, status.Error(codes.NotFound, "job 5 not found")
		},
		"CancelJob": func(proto.Message) (proto.Message, error) {
			return nil, status.Error(codes.FailedPrecondition, "job 5 already finished")
		},
		"ListQueues": func(proto.Message) (proto.Message, error) {
			return nil, status.Error(codes.Unavailable, "the broker is shutting down; retry against it once it is back")
		},
	})
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"job", "get", "5"}, "jobwire job get: job 5 not found\n"},
		{[]string{"job", "cancel", "5"}, "jobwire job cancel: job 5 already finished\n"},
		// UNAVAILABLE from a broker that answered is its own word, not an absent broker.
		{[]string{"queues", "list"}, "jobwire queues list: the broker at " + fb.addr + " is unavailable: the broker is shutting down; retry against it once it is back\n"},
		{[]string{"stats"}, "jobwire stats: the broker at " + fb.addr + " does not support this command"}, // no handler on this fake
	}
	for _, tt := range tests {
		r := runAt(t, fb.addr, tt.args...)
		if r.code != 1 || !strings.HasPrefix(r.stderr, tt.want) || r.stdout != "" {
			t.Errorf("%v: exit %d stderr %q stdout %q; want exit 1 and %q", tt.args, r.code, r.stderr, r.stdout, tt.want)
		}
	}
}

func TestAnAbsentBrokerIsNamedByAddress(t *testing.T) {
	t.Parallel()
	addr := closedAddr(t)
	for _, args := range [][]string{{"stats"}, {"job", "get", "1"}, {"enqueue", "--type", "t"}} {
		r := runCLI(t, map[string]string{envAddr: addr}, args...)
		want := "cannot reach the broker at " + addr + " (is `jobwire serve` running? set --addr or JOBWIRE_ADDR)\n"
		if r.code != 1 || !strings.HasSuffix(r.stderr, want) || strings.Count(r.stderr, "\n") != 1 {
			t.Errorf("%v: exit %d stderr %q; want exit 1 and %q", args, r.code, r.stderr, want)
		}
	}
}

// A listener that takes connections but never answers is a broker that cannot be reached
// within the timeout, said as such.
func TestASilentListenerIsUnreachableWithinTheTimeout(t *testing.T) {
	t.Parallel()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var held []net.Conn // kept open, unanswered, until the test ends
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	t.Cleanup(func() {
		_ = lis.Close()
		<-done
		for _, c := range held {
			_ = c.Close()
		}
	})
	addr := lis.Addr().String()
	r := runCLI(t, nil, "stats", "--addr", addr, "--timeout", "300ms")
	want := "jobwire stats: cannot reach the broker at " + addr + " within 300ms (is `jobwire serve` running? set --addr or JOBWIRE_ADDR)\n"
	if r.code != 1 || r.stderr != want {
		t.Errorf("exit %d, stderr %q; want 1 and %q", r.code, r.stderr, want)
	}
}

func TestAddrComesFromTheEnvironmentUnlessGiven(t *testing.T) {
	t.Parallel()
	fb := startBroker(t, map[string]handler{"ListQueues": reply(&jobwirev1.ListQueuesResponse{})})
	wantOK(t, runCLI(t, map[string]string{envAddr: fb.addr}, "queues", "list"))
	// The flag wins over the variable.
	wantOK(t, runCLI(t, map[string]string{envAddr: closedAddr(t)}, "queues", "list", "--addr", fb.addr))
	if n := len(fb.requests("ListQueues")); n != 2 {
		t.Errorf("broker got %d requests, want 2", n)
	}
	// A bad address is named by where it came from.
	r := runCLI(t, map[string]string{envAddr: "http://" + fb.addr}, "queues", "list")
	if r.code != 2 || !strings.HasPrefix(r.stderr, "jobwire queues list: JOBWIRE_ADDR \"http://") {
		t.Errorf("bad JOBWIRE_ADDR: exit %d, stderr %q; want 2 naming JOBWIRE_ADDR", r.code, r.stderr)
	}
}

func TestJobsList(t *testing.T) {
	t.Parallel()
	fb := startBroker(t, map[string]handler{"ListJobs": reply(&jobwirev1.ListJobsResponse{
		Jobs:          []*jobwirev1.Job{{Id: 1, Type: "a", Queue: "q", State: jobwirev1.JobState_JOB_STATE_RUNNING, Attempts: 1, MaxAttempts: 3}},
		NextPageToken: "tok2",
	})})
	r := runAt(t, fb.addr, "jobs", "list", "--state", "running", "--queue", "q", "--type", "a", "--limit", "10", "--page-token", "tok1",
		"--sort", "run_at", "--asc")
	wantOK(t, r)
	assertProto(t, onlyRequest(t, fb, "ListJobs"), &jobwirev1.ListJobsRequest{
		State: jobwirev1.JobState_JOB_STATE_RUNNING, Queue: "q", Type: "a", PageSize: 10, PageToken: "tok1", Sort: "run_at", Ascending: true})
	wantContains(t, r.stdout, "ID", "TYPE", "STATE", "\n1", "a", "q", "RUNNING", "1/3")
	wantContains(t, r.stderr, "--page-token tok2")
}

func TestDLQListAndShow(t *testing.T) {
	t.Parallel()
	fb := startBroker(t, map[string]handler{
		"ListDeadJobs": reply(&jobwirev1.ListDeadJobsResponse{Jobs: []*jobwirev1.Job{deadJob}}),
		"GetJob":       reply(&jobwirev1.GetJobResponse{Job: deadJob}),
	})
	r := runAt(t, fb.addr, "dlq", "list", "--queue", "mail", "--type", "email.send", "--reason", "max-attempts-exhausted",
		"--error-type", "SMTPError", "--since", "2h", "--before", "2030-06-01T11:59:00Z", "--limit", "20", "--sort", "error_type")
	wantOK(t, r)
	assertProto(t, onlyRequest(t, fb, "ListDeadJobs"), &jobwirev1.ListDeadJobsRequest{
		Filter: &jobwirev1.DeadJobFilter{Queue: "mail", Type: "email.send", Reason: jobwirev1.DeadReason_DEAD_REASON_MAX_ATTEMPTS_EXHAUSTED,
			ErrorType: "SMTPError", DeadAfter: timestamppb.New(testNow.Add(-2 * time.Hour)), DeadBefore: timestamppb.New(time.Date(2030, 6, 1, 11, 59, 0, 0, time.UTC))},
		PageSize: 20, Sort: "error_type",
	})
	wantContains(t, r.stdout, "REASON", "LAST ERROR", "42", "email.send", "MAX_ATTEMPTS_EXHAUSTED", "2/2", "SMTPError: 451 try later")

	r = runAt(t, fb.addr, "dlq", "show", "42")
	wantOK(t, r)
	wantContains(t, r.stdout, "Payload (12 bytes, JSON):", `{"to":"ada"}`,
		"Attempt 1: FAILED (TRANSIENT)", "Worker", "w-1", "Error type", "SMTPError", "Message", "451 try later", "Details:", "    at send()", "    at main()",
		"Attempt 2: LEASE_EXPIRED", "w-2")
	if r.stderr != "" {
		t.Errorf("stderr = %q; a dead job needs no note", r.stderr)
	}
}

func TestDLQShowNotesAJobThatIsNotDead(t *testing.T) {
	t.Parallel()
	fb := startBroker(t, map[string]handler{"GetJob": reply(&jobwirev1.GetJobResponse{Job: &jobwirev1.Job{Id: 3, State: jobwirev1.JobState_JOB_STATE_PENDING}})})
	r := runAt(t, fb.addr, "dlq", "show", "3")
	wantOK(t, r)
	wantContains(t, r.stderr, "job 3 is PENDING, not in the dead-letter queue")
}

// bulkBroker answers RequeueDeadJobs and PurgeDeadJobs: previews match 3 jobs, real runs
// affect what they match.
func bulkBroker(t *testing.T) *fakeBroker {
	answer := func(sel *jobwirev1.BulkSelection) (int32, int32, []*jobwirev1.Job) {
		matched := int32(3)
		if sel.GetFilter().GetType() == "one.job" {
			matched = 1
		}
		if len(sel.GetIds()) > 0 {
			matched = int32(len(sel.GetIds()))
		}
		affected := matched
		if sel.GetPreview() {
			affected = 0
		}
		return matched, affected, []*jobwirev1.Job{deadJob}
	}
	return startBroker(t, map[string]handler{
		"RequeueDeadJobs": func(req proto.Message) (proto.Message, error) {
			m, a, s := answer(req.(*jobwirev1.RequeueDeadJobsRequest).GetSelection())
			return &jobwirev1.RequeueDeadJobsResponse{Matched: m, Affected: a, Sample: s}, nil
		},
		"PurgeDeadJobs": func(req proto.Message) (proto.Message, error) {
			m, a, s := answer(req.(*jobwirev1.PurgeDeadJobsRequest).GetSelection())
			return &jobwirev1.PurgeDeadJobsResponse{Matched: m, Affected: a, Sample: s}, nil
		},
	})
}

func TestDLQRequeueByFilterPreviewsUntilYes(t *testing.T) {
	t.Parallel()
	fb := bulkBroker(t)
	filter := &jobwirev1.DeadJobFilter{Type: "email.send", ErrorType: "SMTPError"}

	r := runAt(t, fb.addr, "dlq", "requeue", "--all-matching", "--type", "email.send", "--error-type", "SMTPError", "--priority", "9")
	wantOK(t, r)
	wantContains(t, r.stdout, "3 dead jobs match", "sample of 1:", "42", "re-run with --yes to requeue 3 jobs")
	prio := int32(9)
	assertProto(t, onlyRequest(t, fb, "RequeueDeadJobs"), &jobwirev1.RequeueDeadJobsRequest{
		Selection: &jobwirev1.BulkSelection{Filter: filter, Preview: true}, Priority: &prio})

	r = runAt(t, fb.addr, "dlq", "requeue", "--all-matching", "--type", "email.send", "--error-type", "SMTPError", "--priority", "9", "--yes", "--limit", "50")
	wantOK(t, r)
	wantContains(t, r.stdout, "3 dead jobs match", "requeued 3 of 3 matched jobs")
	reqs := fb.requests("RequeueDeadJobs")
	if len(reqs) != 3 {
		t.Fatalf("broker received %d requeue requests, want 3 (preview, preview, act)", len(reqs))
	}
	assertProto(t, reqs[1], &jobwirev1.RequeueDeadJobsRequest{Selection: &jobwirev1.BulkSelection{Filter: filter, Limit: 50, Preview: true}, Priority: &prio})
	assertProto(t, reqs[2], &jobwirev1.RequeueDeadJobsRequest{Selection: &jobwirev1.BulkSelection{Filter: filter, Limit: 50}, Priority: &prio})
}

func TestDLQBulkCountsOneJobInTheSingular(t *testing.T) {
	t.Parallel()
	fb := bulkBroker(t)
	r := runAt(t, fb.addr, "dlq", "requeue", "--all-matching", "--type", "one.job")
	wantOK(t, r)
	wantContains(t, r.stdout, "1 dead job matches\n", "re-run with --yes to requeue 1 job\n")
	r = runAt(t, fb.addr, "dlq", "purge", "--all-matching", "--type", "one.job", "--yes")
	wantOK(t, r)
	wantContains(t, r.stdout, "purged 1 of 1 matched job\n")
}

func TestDLQRequeueByIDActsAtOnce(t *testing.T) {
	t.Parallel()
	fb := bulkBroker(t)
	r := runAt(t, fb.addr, "dlq", "requeue", "42", "--payload", `{"to":"bob"}`, "--run-at", "2030-06-02T00:00:00Z")
	wantOK(t, r)
	wantContains(t, r.stdout, "requeued 1 of 1 matched job\n")
	assertProto(t, onlyRequest(t, fb, "RequeueDeadJobs"), &jobwirev1.RequeueDeadJobsRequest{
		Selection: &jobwirev1.BulkSelection{Ids: []int64{42}},
		Payload:   []byte(`{"to":"bob"}`),
		RunAt:     timestamppb.New(time.Date(2030, 6, 2, 0, 0, 0, 0, time.UTC)),
	})
}

func TestDLQPurge(t *testing.T) {
	t.Parallel()
	fb := bulkBroker(t)

	r := runAt(t, fb.addr, "dlq", "purge", "--all-matching", "--queue", "mail", "--json")
	wantOK(t, r)
	if m := decodeJSON(t, r.stdout); m["matched"] != float64(3) || m["affected"] != float64(0) {
		t.Errorf("preview json = %v; want matched 3 and nothing affected", m)
	}
	r = runAt(t, fb.addr, "dlq", "purge", "7", "8")
	wantOK(t, r)
	wantContains(t, r.stdout, "purged 2 of 2 matched jobs")
	reqs := fb.requests("PurgeDeadJobs")
	if len(reqs) != 2 {
		t.Fatalf("broker received %d purge requests, want 2", len(reqs))
	}
	assertProto(t, reqs[0], &jobwirev1.PurgeDeadJobsRequest{Selection: &jobwirev1.BulkSelection{Filter: &jobwirev1.DeadJobFilter{Queue: "mail"}, Preview: true}})
	assertProto(t, reqs[1], &jobwirev1.PurgeDeadJobsRequest{Selection: &jobwirev1.BulkSelection{Ids: []int64{7, 8}}})
}

func TestDLQTop(t *testing.T) {
	t.Parallel()
	fb := startBroker(t, map[string]handler{"TopDeadErrors": reply(&jobwirev1.TopDeadErrorsResponse{Groups: []*jobwirev1.ErrorGroup{
		{ErrorType: "SMTPError", Count: 40, LastSeen: timestamppb.New(testNow), SampleMessage: "451\ntry later"},
	}})})
	r := runAt(t, fb.addr, "dlq", "top", "--queue", "mail", "--limit", "5")
	wantOK(t, r)
	assertProto(t, onlyRequest(t, fb, "TopDeadErrors"), &jobwirev1.TopDeadErrorsRequest{Filter: &jobwirev1.DeadJobFilter{Queue: "mail"}, Limit: 5})
	wantContains(t, r.stdout, "ERROR TYPE", "COUNT", "SMTPError", "40", "2030-06-01T12:00:00Z", "451 try later")
}

func TestQueues(t *testing.T) {
	t.Parallel()
	q := &jobwirev1.QueueInfo{Name: "mail", Paused: true, ConcurrencyLimit: 4, Running: 2, OldestReadyAge: durationpb.New(90 * time.Second),
		DepthByState: map[string]int64{"PENDING": 12, "JOB_STATE_SCHEDULED": 3, "DEAD": 1}}
	fb := startBroker(t, map[string]handler{
		"ListQueues":    reply(&jobwirev1.ListQueuesResponse{Queues: []*jobwirev1.QueueInfo{q}}),
		"PauseQueue":    reply(&jobwirev1.PauseQueueResponse{Queue: q}),
		"ResumeQueue":   reply(&jobwirev1.ResumeQueueResponse{Queue: &jobwirev1.QueueInfo{Name: "mail"}}),
		"SetQueueLimit": reply(&jobwirev1.SetQueueLimitResponse{Queue: q}),
	})
	r := runAt(t, fb.addr, "queues", "list")
	wantOK(t, r)
	wantContains(t, r.stdout, "QUEUE", "STATUS", "LIMIT", "PENDING", "SCHEDULED", "RUNNING", "DEAD", "OLDEST READY",
		"mail", "paused", "4", "12", "3", "2", "1", "1m30s")

	r = runAt(t, fb.addr, "queues", "pause", "mail")
	wantOK(t, r)
	wantContains(t, r.stdout, "queue mail is paused")
	assertProto(t, onlyRequest(t, fb, "PauseQueue"), &jobwirev1.PauseQueueRequest{Queue: "mail"})

	r = runAt(t, fb.addr, "queues", "resume", "mail")
	wantOK(t, r)
	wantContains(t, r.stdout, "queue mail is active")

	r = runAt(t, fb.addr, "queues", "set-limit", "mail", "4", "--json")
	wantOK(t, r)
	if m := decodeJSON(t, r.stdout); m["queue"].(map[string]any)["concurrencyLimit"] != float64(4) {
		t.Errorf("json = %v", m)
	}
	assertProto(t, onlyRequest(t, fb, "SetQueueLimit"), &jobwirev1.SetQueueLimitRequest{Queue: "mail", Limit: 4})
}

func TestStats(t *testing.T) {
	t.Parallel()
	fb := startBroker(t, map[string]handler{"GetStats": reply(&jobwirev1.GetStatsResponse{
		Counts:         []*jobwirev1.StateCount{{Queue: "mail", Type: "email.send", State: jobwirev1.JobState_JOB_STATE_PENDING, Count: 12}},
		Recent:         []*jobwirev1.RecentCounts{{Window: durationpb.New(time.Minute), Succeeded: 100, Failed: 3, Dead: 1}},
		Queues:         []*jobwirev1.QueueInfo{{Name: "mail"}},
		StorageRetries: map[string]int64{"SQLITE_BUSY": 2},
	})})
	r := runAt(t, fb.addr, "stats")
	wantOK(t, r)
	wantContains(t, r.stdout, "Jobs by state:", "mail", "email.send", "PENDING", "12",
		"Recent attempts:", "1m ", "100", "3", "1",
		"Queues:\n  QUEUE", "\n  mail", "active", "none",
		"Storage retries:", "SQLITE_BUSY", "2")
}

func TestBreakers(t *testing.T) {
	t.Parallel()
	open := &jobwirev1.BreakerInfo{Type: "email.send", State: jobwirev1.BreakerState_BREAKER_STATE_OPEN, FailuresInWindow: 12,
		OpenedAt: timestamppb.New(testNow), NextProbeAt: timestamppb.New(testNow.Add(30 * time.Second)), Generation: 4}
	fb := startBroker(t, map[string]handler{
		"ListBreakers": reply(&jobwirev1.ListBreakersResponse{Breakers: []*jobwirev1.BreakerInfo{open}}),
		"ResetBreaker": reply(&jobwirev1.ResetBreakerResponse{Breaker: &jobwirev1.BreakerInfo{Type: "email.send", State: jobwirev1.BreakerState_BREAKER_STATE_CLOSED}}),
		"ForceBreaker": reply(&jobwirev1.ForceBreakerResponse{Breaker: open}),
	})
	r := runAt(t, fb.addr, "breakers", "list")
	wantOK(t, r)
	wantContains(t, r.stdout, "TYPE", "STATE", "FAILURES", "email.send", "OPEN", "12", "2030-06-01T12:00:00Z", "2030-06-01T12:00:30Z")

	r = runAt(t, fb.addr, "breakers", "reset", "email.send")
	wantOK(t, r)
	wantContains(t, r.stdout, "email.send", "CLOSED")
	assertProto(t, onlyRequest(t, fb, "ResetBreaker"), &jobwirev1.ResetBreakerRequest{Type: "email.send"})

	r = runAt(t, fb.addr, "breakers", "force", "email.send", "open", "--json")
	wantOK(t, r)
	if m := decodeJSON(t, r.stdout); m["breaker"].(map[string]any)["state"] != "open" {
		t.Errorf("json = %v", m)
	}
	assertProto(t, onlyRequest(t, fb, "ForceBreaker"), &jobwirev1.ForceBreakerRequest{Type: "email.send", State: jobwirev1.BreakerState_BREAKER_STATE_OPEN})
}

func TestPurgeSucceeded(t *testing.T) {
	t.Parallel()
	fb := startBroker(t, map[string]handler{"PurgeFinishedJobs": reply(&jobwirev1.PurgeFinishedJobsResponse{Purged: 1234})})
	r := runAt(t, fb.addr, "purge-succeeded", "--older-than", "7d")
	wantOK(t, r)
	wantContains(t, r.stdout, "purged 1234 succeeded jobs that finished more than 168h ago")
	assertProto(t, onlyRequest(t, fb, "PurgeFinishedJobs"), &jobwirev1.PurgeFinishedJobsRequest{OlderThan: durationpb.New(7 * 24 * time.Hour)})
}
