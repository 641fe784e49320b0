package server_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/jobwire/jobwire/breaker"
	"github.com/jobwire/jobwire/broker"
	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/brokertest"
	"github.com/jobwire/jobwire/worker"
)

// killJob runs one job of spec on w and fails it fatally with errType, so it goes to the DLQ.
func killJob(t *testing.T, b *brokertest.Bundle, w *brokertest.RawWorker, spec *jobwirev1.JobSpec, errType string) int64 {
	t.Helper()
	id := enqueue(t, b, spec)
	a := w.Assignment()
	if a.GetJob().GetId() != id {
		t.Fatalf("assigned job %d, want %d", a.GetJob().GetId(), id)
	}
	w.Started(a)
	f := brokertest.Fatal(errType)
	f.Message = errType + " in job " + spec.GetType()
	if r := ack(t, w.Fail(a, f)); r.GetDecision() != jobwirev1.Decision_DECISION_DEAD {
		t.Fatalf("job %d: decision %s, want DEAD", id, r.GetDecision())
	}
	return id
}

// newDLQBroker starts a broker whose breakers stay out of the way of tests that fail many
// jobs of one type on purpose.
func newDLQBroker(t *testing.T) *brokertest.Bundle {
	cfg := breaker.CountConfig()
	cfg.Disabled = true
	return brokertest.New(t, brokertest.Options{Breakers: &broker.BreakerOptions{Default: cfg}})
}

// pauseDefault pauses the default queue, so jobs put back in it are not dispatched.
func pauseDefault(t *testing.T, b *brokertest.Bundle) {
	t.Helper()
	if _, err := b.Admin.PauseQueue(context.Background(), &jobwirev1.PauseQueueRequest{Queue: "default"}); err != nil {
		t.Fatal(err)
	}
}

func queueInfo(t *testing.T, b *brokertest.Bundle, name string) *jobwirev1.QueueInfo {
	t.Helper()
	res, err := b.Admin.ListQueues(context.Background(), &jobwirev1.ListQueuesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range res.GetQueues() {
		if q.GetName() == name {
			return q
		}
	}
	t.Fatalf("no queue %q in %v", name, res.GetQueues())
	return nil
}

func ids(jobs []*jobwirev1.Job) []int64 {
	out := make([]int64, len(jobs))
	for i, j := range jobs {
		out[i] = j.GetId()
	}
	return out
}

func equalIDs(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func wantCode(t *testing.T, err error, code codes.Code, text string) {
	t.Helper()
	if status.Code(err) != code || !strings.Contains(status.Convert(err).Message(), text) {
		t.Fatalf("got %v, want %s containing %q", err, code, text)
	}
}

func TestDeadJobIsRequeuedWithHistoryAndSucceeds(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	ctx := context.Background()
	w := b.Connect(brokertest.Hello("w1", 1, "t"))
	id := killJob(t, b, w, &jobwirev1.JobSpec{Type: "t", Payload: []byte(`{"n":"bad"}`), Priority: 3}, "ValueError")

	dead := getJob(t, b, id)
	if dead.GetState() != jobwirev1.JobState_JOB_STATE_DEAD || len(dead.GetAttemptHistory()) != 1 ||
		dead.GetAttemptHistory()[0].GetErrorType() != "ValueError" || dead.GetAttemptHistory()[0].GetDetails() != "stack..." {
		t.Fatalf("dead job = %v", dead)
	}
	list, err := b.Admin.ListDeadJobs(ctx, &jobwirev1.ListDeadJobsRequest{})
	if err != nil || !equalIDs(ids(list.GetJobs()), []int64{id}) {
		t.Fatalf("dlq = %v, %v", list, err)
	}
	if l := list.GetJobs()[0]; l.GetLastErrorType() != "ValueError" || len(l.GetPayload()) != 0 {
		t.Fatalf("listed dead job = %v (listings carry no payload)", l)
	}

	res, err := b.Admin.RequeueDeadJobs(ctx, &jobwirev1.RequeueDeadJobsRequest{
		Selection: &jobwirev1.BulkSelection{Ids: []int64{id}}, Payload: []byte(`{"n":"good"}`)})
	if err != nil || res.GetMatched() != 1 || res.GetAffected() != 1 || len(res.GetSample()) != 1 {
		t.Fatalf("requeue = %v, %v", res, err)
	}
	j := getJob(t, b, id)
	if j.GetState() == jobwirev1.JobState_JOB_STATE_DEAD || j.GetAttempts() != 0 ||
		j.GetDeadReason() != jobwirev1.DeadReason_DEAD_REASON_UNSPECIFIED || j.GetPriority() != 3 ||
		j.GetFinishedAt() != nil || len(j.GetAttemptHistory()) != 1 {
		t.Fatalf("requeued job = %v", j)
	}

	a := w.Assignment()
	if a.GetJob().GetId() != id || a.GetAttempt() != 1 || string(a.GetJob().GetPayload()) != `{"n":"good"}` {
		t.Fatalf("assignment after requeue = %v", a)
	}
	w.Started(a)
	if r := ack(t, w.Succeed(a)); r.GetDecision() != jobwirev1.Decision_DECISION_SUCCEEDED {
		t.Fatalf("decision = %s", r.GetDecision())
	}
	j = getJob(t, b, id)
	h := j.GetAttemptHistory()
	if j.GetState() != jobwirev1.JobState_JOB_STATE_SUCCEEDED || j.GetAttempts() != 1 || len(h) != 2 {
		t.Fatalf("job after requeue = %v", j)
	}
	// Both runs stay in the history, numbered in order.
	if h[0].GetNumber() != 1 || h[0].GetOutcome() != jobwirev1.AttemptOutcome_ATTEMPT_OUTCOME_FAILED ||
		h[1].GetNumber() != 2 || h[1].GetOutcome() != jobwirev1.AttemptOutcome_ATTEMPT_OUTCOME_SUCCEEDED {
		t.Fatalf("history = %v", h)
	}
	if list, _ := b.Admin.ListDeadJobs(ctx, &jobwirev1.ListDeadJobsRequest{}); len(list.GetJobs()) != 0 {
		t.Fatalf("dlq after requeue = %v", list.GetJobs())
	}
}

// A requeued job gets the full number of attempts again, and its retry lifetime starts over.
func TestRequeuedJobRetriesAfresh(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	ctx := context.Background()
	w := b.Connect(brokertest.Hello("w1", 1, "t"))
	id := killJob(t, b, w, &jobwirev1.JobSpec{Type: "t", MaxAttempts: 3}, "ValueError")
	// Long past the default 24h lifetime: a retry is still made after the requeue.
	b.Clock.Advance(48 * time.Hour)
	if _, err := b.Admin.RequeueDeadJobs(ctx, &jobwirev1.RequeueDeadJobsRequest{
		Selection: &jobwirev1.BulkSelection{Ids: []int64{id}}, Priority: proto.Int32(7)}); err != nil {
		t.Fatal(err)
	}
	a := w.Assignment()
	if a.GetJob().GetPriority() != 7 {
		t.Fatalf("priority = %d, want 7", a.GetJob().GetPriority())
	}
	w.Started(a)
	r := ack(t, w.Fail(a, brokertest.Transient("ConnectionError", 0)))
	// Attempt 1 of 3 in the new run, and the job's lifetime counts from the requeue.
	if r.GetDecision() != jobwirev1.Decision_DECISION_RETRY || a.GetAttempt() != 1 {
		t.Fatalf("ack = %v for attempt %d", r, a.GetAttempt())
	}
	if j := getJob(t, b, id); j.GetAttempts() != 1 || len(j.GetAttemptHistory()) != 2 {
		t.Fatalf("job = %v", j)
	}
}

func TestRequeueLaterSchedulesTheJob(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	w := b.Connect(brokertest.Hello("w1", 1, "t"))
	id := killJob(t, b, w, &jobwirev1.JobSpec{Type: "t"}, "ValueError")
	at := b.Clock.Now().Add(time.Hour)
	if _, err := b.Admin.RequeueDeadJobs(context.Background(), &jobwirev1.RequeueDeadJobsRequest{
		Selection: &jobwirev1.BulkSelection{Ids: []int64{id}}, RunAt: timestamppb.New(at)}); err != nil {
		t.Fatal(err)
	}
	if j := getJob(t, b, id); j.GetState() != jobwirev1.JobState_JOB_STATE_SCHEDULED || !j.GetRunAt().AsTime().Equal(at) {
		t.Fatalf("job = %v", j)
	}
	b.Clock.Advance(time.Hour)
	if a := w.Assignment(); a.GetJob().GetId() != id {
		t.Fatalf("assigned %d, want %d", a.GetJob().GetId(), id)
	}
}

func TestDeadJobsListNewestFirstFilteredAndPaged(t *testing.T) {
	t.Parallel()
	b := newDLQBroker(t)
	ctx := context.Background()
	w := b.Connect(brokertest.Hello("w1", 1, "a", "b"))
	var all []int64
	start := b.Clock.Now()
	for i, spec := range []struct {
		typ, queue, errType string
	}{
		{"a", "q1", "E1"}, {"b", "q1", "E2"}, {"a", "q2", "E1"}, {"b", "q2", "E1"}, {"a", "q1", "E2"},
	} {
		all = append(all, killJob(t, b, w, &jobwirev1.JobSpec{Type: spec.typ, Queue: spec.queue}, spec.errType))
		if i < 3 {
			b.Clock.Advance(time.Minute) // the last two die at the same instant: id breaks the tie
		}
	}
	newest := []int64{all[4], all[3], all[2], all[1], all[0]}

	// Page through two at a time.
	var got []int64
	tok := ""
	for pages := 0; ; pages++ {
		res, err := b.Admin.ListDeadJobs(ctx, &jobwirev1.ListDeadJobsRequest{PageSize: 2, PageToken: tok})
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, ids(res.GetJobs())...)
		tok = res.GetNextPageToken()
		if tok == "" {
			break
		}
		if pages > 5 {
			t.Fatal("paging does not end")
		}
	}
	if !equalIDs(got, newest) {
		t.Fatalf("paged = %v, want %v", got, newest)
	}

	tests := []struct {
		name   string
		filter *jobwirev1.DeadJobFilter
		want   []int64
	}{
		{"queue", &jobwirev1.DeadJobFilter{Queue: "q2"}, []int64{all[3], all[2]}},
		{"type", &jobwirev1.DeadJobFilter{Type: "a"}, []int64{all[4], all[2], all[0]}},
		{"error type", &jobwirev1.DeadJobFilter{ErrorType: "E2"}, []int64{all[4], all[1]}},
		{"reason", &jobwirev1.DeadJobFilter{Reason: jobwirev1.DeadReason_DEAD_REASON_FATAL}, newest},
		{"other reason", &jobwirev1.DeadJobFilter{Reason: jobwirev1.DeadReason_DEAD_REASON_TIMEOUT}, nil},
		{"after", &jobwirev1.DeadJobFilter{DeadAfter: timestamppb.New(start.Add(2 * time.Minute))}, []int64{all[4], all[3], all[2]}},
		{"before", &jobwirev1.DeadJobFilter{DeadBefore: timestamppb.New(start.Add(time.Minute))}, []int64{all[0]}},
		{"combined", &jobwirev1.DeadJobFilter{Type: "a", Queue: "q1", ErrorType: "E1"}, []int64{all[0]}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := b.Admin.ListDeadJobs(ctx, &jobwirev1.ListDeadJobsRequest{Filter: tt.filter})
			if err != nil {
				t.Fatal(err)
			}
			if got := ids(res.GetJobs()); !equalIDs(got, tt.want) {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
		})
	}
}

// A sorted list pages in its sort through the API: every job once, in the order asked, and a
// page token is refused with any other sort, since it would skip or repeat jobs there.
func TestDeadJobsSortedByAColumnAndPaged(t *testing.T) {
	t.Parallel()
	b := newDLQBroker(t)
	ctx := context.Background()
	w := b.Connect(brokertest.Hello("w1", 1, "a", "b", "C"))
	var d []int64
	for _, spec := range []struct{ typ, errType string }{{"b", "E1"}, {"a", "E2"}, {"C", "E1"}, {"b", "E3"}, {"a", "E1"}} {
		d = append(d, killJob(t, b, w, &jobwirev1.JobSpec{Type: spec.typ, Queue: "q"}, spec.errType))
		b.Clock.Advance(time.Second)
	}
	page := func(req *jobwirev1.ListDeadJobsRequest) []int64 {
		t.Helper()
		var got []int64
		for range 10 {
			res, err := b.Admin.ListDeadJobs(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, ids(res.GetJobs())...)
			if req.PageToken = res.GetNextPageToken(); req.PageToken == "" {
				return got
			}
		}
		t.Fatal("paging does not end")
		return nil
	}
	tests := []struct {
		sort string
		asc  bool
		want []int64
	}{
		{"", false, []int64{d[4], d[3], d[2], d[1], d[0]}},
		{"died_at", true, d},
		{"type", true, []int64{d[2], d[1], d[4], d[0], d[3]}}, // byte order: C before a; ties by id
		{"type", false, []int64{d[3], d[0], d[4], d[1], d[2]}},
		{"error_type", true, []int64{d[0], d[2], d[4], d[1], d[3]}},
		{"id", false, []int64{d[4], d[3], d[2], d[1], d[0]}},
	}
	for _, tt := range tests {
		for _, size := range []int32{2, 100} {
			got := page(&jobwirev1.ListDeadJobsRequest{Sort: tt.sort, Ascending: tt.asc, PageSize: size})
			if !equalIDs(got, tt.want) {
				t.Errorf("sort %q ascending=%v in pages of %d = %v, want %v", tt.sort, tt.asc, size, got, tt.want)
			}
		}
	}

	res, err := b.Admin.ListDeadJobs(ctx, &jobwirev1.ListDeadJobsRequest{Sort: "type", PageSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	for _, other := range []*jobwirev1.ListDeadJobsRequest{
		{PageToken: res.GetNextPageToken(), PageSize: 2},
		{PageToken: res.GetNextPageToken(), Sort: "type", Ascending: true, PageSize: 2},
	} {
		_, err := b.Admin.ListDeadJobs(ctx, other)
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "page_token: continues a list sorted by type desc") {
			t.Errorf("a token of the type desc sort used with sort %q ascending=%v: %v, want InvalidArgument naming the sort", other.GetSort(), other.GetAscending(), err)
		}
	}
}

func TestBulkRequeueByErrorTypeWithPreview(t *testing.T) {
	t.Parallel()
	b := newDLQBroker(t)
	ctx := context.Background()
	w := b.Connect(brokertest.Hello("w1", 1, "t"))
	var conn, other []int64
	for i := range 5 {
		conn = append(conn, killJob(t, b, w, &jobwirev1.JobSpec{Type: "t"}, "ConnectionError"))
		if i < 2 {
			other = append(other, killJob(t, b, w, &jobwirev1.JobSpec{Type: "t"}, "ValueError"))
		}
	}
	pauseDefault(t, b) // requeued jobs stay PENDING where the test can see them
	filter := &jobwirev1.DeadJobFilter{ErrorType: "ConnectionError"}

	prev, err := b.Admin.RequeueDeadJobs(ctx, &jobwirev1.RequeueDeadJobsRequest{
		Selection: &jobwirev1.BulkSelection{Filter: filter, Preview: true}})
	if err != nil || prev.GetMatched() != 5 || prev.GetAffected() != 0 || len(prev.GetSample()) != 5 {
		t.Fatalf("preview = %v, %v", prev, err)
	}
	for _, id := range conn {
		if s := getJob(t, b, id).GetState(); s != jobwirev1.JobState_JOB_STATE_DEAD {
			t.Fatalf("a preview changed job %d to %s", id, s)
		}
	}

	// The cap takes the newest three first; a second call takes the rest.
	res, err := b.Admin.RequeueDeadJobs(ctx, &jobwirev1.RequeueDeadJobsRequest{
		Selection: &jobwirev1.BulkSelection{Filter: filter, Limit: 3}, Priority: proto.Int32(9)})
	if err != nil || res.GetMatched() != 3 || res.GetAffected() != 3 {
		t.Fatalf("requeue = %v, %v", res, err)
	}
	if got, want := ids(res.GetSample()), []int64{conn[4], conn[3], conn[2]}; !equalIDs(got, want) {
		t.Fatalf("sample = %v, want %v", got, want)
	}
	for _, j := range res.GetSample() {
		if j.GetState() != jobwirev1.JobState_JOB_STATE_PENDING || j.GetPriority() != 9 || j.GetAttempts() != 0 {
			t.Fatalf("requeued = %v", j)
		}
	}
	res, err = b.Admin.RequeueDeadJobs(ctx, &jobwirev1.RequeueDeadJobsRequest{Selection: &jobwirev1.BulkSelection{Filter: filter}})
	if err != nil || res.GetMatched() != 2 || res.GetAffected() != 2 {
		t.Fatalf("second requeue = %v, %v", res, err)
	}
	for _, id := range conn {
		if s := getJob(t, b, id).GetState(); s != jobwirev1.JobState_JOB_STATE_PENDING {
			t.Fatalf("job %d is %s, want PENDING", id, s)
		}
	}
	for _, id := range other {
		if s := getJob(t, b, id).GetState(); s != jobwirev1.JobState_JOB_STATE_DEAD {
			t.Fatalf("job %d of another error type is %s", id, s)
		}
	}
	res, err = b.Admin.RequeueDeadJobs(ctx, &jobwirev1.RequeueDeadJobsRequest{Selection: &jobwirev1.BulkSelection{Filter: filter}})
	if err != nil || res.GetMatched() != 0 || res.GetAffected() != 0 {
		t.Fatalf("nothing left to requeue, got %v, %v", res, err)
	}
}

func TestRequeueByIDsIsAllOrNothing(t *testing.T) {
	t.Parallel()
	b := newDLQBroker(t)
	ctx := context.Background()
	w := b.Connect(brokertest.Hello("w1", 1, "t"))
	dead := killJob(t, b, w, &jobwirev1.JobSpec{Type: "t"}, "E")
	pauseDefault(t, b)
	pending := enqueue(t, b, &jobwirev1.JobSpec{Type: "t"})
	sel := func(ids ...int64) *jobwirev1.BulkSelection { return &jobwirev1.BulkSelection{Ids: ids} }

	_, err := b.Admin.RequeueDeadJobs(ctx, &jobwirev1.RequeueDeadJobsRequest{Selection: sel(dead, pending)})
	wantCode(t, err, codes.FailedPrecondition, "is PENDING")
	_, err = b.Admin.RequeueDeadJobs(ctx, &jobwirev1.RequeueDeadJobsRequest{Selection: sel(dead, 999)})
	wantCode(t, err, codes.NotFound, "job 999")
	_, err = b.Admin.PurgeDeadJobs(ctx, &jobwirev1.PurgeDeadJobsRequest{Selection: sel(pending, dead)})
	wantCode(t, err, codes.FailedPrecondition, "is PENDING")
	_, err = b.Admin.RequeueDeadJobs(ctx, &jobwirev1.RequeueDeadJobsRequest{Selection: &jobwirev1.BulkSelection{Ids: []int64{999}, Preview: true}})
	wantCode(t, err, codes.NotFound, "job 999")
	if s := getJob(t, b, dead).GetState(); s != jobwirev1.JobState_JOB_STATE_DEAD {
		t.Fatalf("a refused call changed the dead job to %s", s)
	}
	// The same id twice counts once.
	res, err := b.Admin.RequeueDeadJobs(ctx, &jobwirev1.RequeueDeadJobsRequest{Selection: sel(dead, dead)})
	if err != nil || res.GetMatched() != 1 || res.GetAffected() != 1 {
		t.Fatalf("requeue = %v, %v", res, err)
	}
}

func TestPurgeIsIrreversible(t *testing.T) {
	t.Parallel()
	b := newDLQBroker(t)
	ctx := context.Background()
	w := b.Connect(brokertest.Hello("w1", 1, "t"))
	one := killJob(t, b, w, &jobwirev1.JobSpec{Type: "t", Queue: "q1"}, "E")
	var rest []int64
	for range 3 {
		rest = append(rest, killJob(t, b, w, &jobwirev1.JobSpec{Type: "t", Queue: "q2"}, "E"))
	}
	keep := killJob(t, b, w, &jobwirev1.JobSpec{Type: "t", Queue: "q3"}, "E")
	recentFailed := func() int64 {
		st, err := b.Admin.GetStats(ctx, &jobwirev1.GetStatsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		return st.GetRecent()[0].GetFailed()
	}
	if n := recentFailed(); n != 5 {
		t.Fatalf("failed attempts before purge = %d, want 5", n)
	}

	res, err := b.Admin.PurgeDeadJobs(ctx, &jobwirev1.PurgeDeadJobsRequest{Selection: &jobwirev1.BulkSelection{Ids: []int64{one}}})
	if err != nil || res.GetMatched() != 1 || res.GetAffected() != 1 || res.GetSample()[0].GetId() != one {
		t.Fatalf("purge = %v, %v", res, err)
	}
	_, err = b.Producer.GetJob(ctx, &jobwirev1.GetJobRequest{Id: one})
	wantCode(t, err, codes.NotFound, "not found")
	_, err = b.Admin.RequeueDeadJobs(ctx, &jobwirev1.RequeueDeadJobsRequest{Selection: &jobwirev1.BulkSelection{Ids: []int64{one}}})
	wantCode(t, err, codes.NotFound, "not found")

	sel := &jobwirev1.BulkSelection{Filter: &jobwirev1.DeadJobFilter{Queue: "q2"}, Preview: true}
	prev, err := b.Admin.PurgeDeadJobs(ctx, &jobwirev1.PurgeDeadJobsRequest{Selection: sel})
	if err != nil || prev.GetMatched() != 3 || prev.GetAffected() != 0 {
		t.Fatalf("preview = %v, %v", prev, err)
	}
	sel.Preview = false
	res, err = b.Admin.PurgeDeadJobs(ctx, &jobwirev1.PurgeDeadJobsRequest{Selection: sel})
	if err != nil || res.GetMatched() != 3 || res.GetAffected() != 3 {
		t.Fatalf("purge = %v, %v", res, err)
	}
	for _, id := range rest {
		if _, err := b.Producer.GetJob(ctx, &jobwirev1.GetJobRequest{Id: id}); status.Code(err) != codes.NotFound {
			t.Fatalf("job %d after purge: %v", id, err)
		}
	}
	// Their attempts went with them; the job outside the filter stays.
	if n := recentFailed(); n != 1 {
		t.Fatalf("failed attempts after purge = %d, want 1", n)
	}
	if s := getJob(t, b, keep).GetState(); s != jobwirev1.JobState_JOB_STATE_DEAD {
		t.Fatalf("kept job is %s", s)
	}
}

func TestTopDeadErrors(t *testing.T) {
	t.Parallel()
	b := newDLQBroker(t)
	ctx := context.Background()
	w := b.Connect(brokertest.Hello("w1", 1, "a", "b"))
	for _, spec := range []struct{ typ, errType string }{
		{"a", "Timeout"}, {"a", "Refused"}, {"b", "Timeout"}, {"a", "Timeout"},
	} {
		killJob(t, b, w, &jobwirev1.JobSpec{Type: spec.typ}, spec.errType)
		b.Clock.Advance(time.Second)
	}
	res, err := b.Admin.TopDeadErrors(ctx, &jobwirev1.TopDeadErrorsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	g := res.GetGroups()
	if len(g) != 2 || g[0].GetErrorType() != "Timeout" || g[0].GetCount() != 3 || g[1].GetErrorType() != "Refused" || g[1].GetCount() != 1 {
		t.Fatalf("groups = %v", g)
	}
	// Last seen is the newest death; the sample message is that job's.
	if want := brokertest.Start.Add(3 * time.Second); !g[0].GetLastSeen().AsTime().Equal(want) || g[0].GetSampleMessage() != "Timeout in job a" {
		t.Fatalf("timeout group = %v, want last seen %s", g[0], want)
	}
	res, err = b.Admin.TopDeadErrors(ctx, &jobwirev1.TopDeadErrorsRequest{Filter: &jobwirev1.DeadJobFilter{Type: "b"}, Limit: 1})
	if err != nil || len(res.GetGroups()) != 1 || res.GetGroups()[0].GetCount() != 1 || res.GetGroups()[0].GetSampleMessage() != "Timeout in job b" {
		t.Fatalf("filtered groups = %v, %v", res, err)
	}
}

func TestListJobsByStateQueueAndType(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	ctx := context.Background()
	var mail []int64
	for range 5 {
		mail = append(mail, enqueue(t, b, &jobwirev1.JobSpec{Type: "send", Queue: "mail"}))
	}
	later := enqueue(t, b, &jobwirev1.JobSpec{Type: "send", Queue: "mail", Schedule: &jobwirev1.JobSpec_Delay{Delay: durationpb.New(time.Hour)}})
	other := enqueue(t, b, &jobwirev1.JobSpec{Type: "resize", Queue: "images"})

	var got []int64
	tok := ""
	for {
		res, err := b.Admin.ListJobs(ctx, &jobwirev1.ListJobsRequest{Queue: "mail", State: jobwirev1.JobState_JOB_STATE_PENDING, PageSize: 2, PageToken: tok,
			Ascending: true})
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, ids(res.GetJobs())...)
		if tok = res.GetNextPageToken(); tok == "" {
			break
		}
	}
	if !equalIDs(got, mail) {
		t.Fatalf("pending mail = %v, want %v", got, mail)
	}
	tests := []struct {
		req  *jobwirev1.ListJobsRequest
		want []int64
	}{
		{&jobwirev1.ListJobsRequest{State: jobwirev1.JobState_JOB_STATE_SCHEDULED}, []int64{later}},
		{&jobwirev1.ListJobsRequest{Type: "resize"}, []int64{other}},
		{&jobwirev1.ListJobsRequest{Queue: "images", Type: "send"}, nil},
		{&jobwirev1.ListJobsRequest{Ascending: true}, append(append(append([]int64{}, mail...), later), other)},
		{&jobwirev1.ListJobsRequest{}, []int64{other, later, mail[4], mail[3], mail[2], mail[1], mail[0]}}, // newest first
	}
	for _, tt := range tests {
		res, err := b.Admin.ListJobs(ctx, tt.req)
		if err != nil || !equalIDs(ids(res.GetJobs()), tt.want) {
			t.Fatalf("ListJobs(%v) = %v, %v; want %v", tt.req, ids(res.GetJobs()), err, tt.want)
		}
	}
}

func TestCancelPendingAndScheduledJobsNeverRun(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	ctx := context.Background()
	pending := enqueue(t, b, &jobwirev1.JobSpec{Type: "t", Priority: 10})
	scheduled := enqueue(t, b, &jobwirev1.JobSpec{Type: "t", Priority: 10, Schedule: &jobwirev1.JobSpec_Delay{Delay: durationpb.New(time.Minute)}})
	runs := enqueue(t, b, &jobwirev1.JobSpec{Type: "t"})
	for _, id := range []int64{pending, scheduled} {
		res, err := b.Producer.CancelJob(ctx, &jobwirev1.CancelJobRequest{Id: id})
		if err != nil || res.GetJob().GetState() != jobwirev1.JobState_JOB_STATE_CANCELLED || res.GetJob().GetFinishedAt() == nil {
			t.Fatalf("cancel %d = %v, %v", id, res, err)
		}
	}
	b.Clock.Advance(time.Minute)
	w := b.Connect(brokertest.Hello("w1", 1, "t"))
	// The higher-priority jobs were cancelled: the only one assigned is the one left.
	if a := w.Assignment(); a.GetJob().GetId() != runs {
		t.Fatalf("assigned %d, want %d", a.GetJob().GetId(), runs)
	}
}

// Cancelling a job that already finished changes nothing and says so: FAILED_PRECONDITION
// naming the state it finished in, whether it succeeded, died or was cancelled before.
func TestCancelOfAFinishedJobIsFailedPrecondition(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	ctx := context.Background()
	w := b.Connect(brokertest.Hello("w1", 1, "ok", "bad"))
	succeeded := enqueue(t, b, &jobwirev1.JobSpec{Type: "ok"})
	ack(t, w.Succeed(w.Assignment()))
	dead := killJob(t, b, w, &jobwirev1.JobSpec{Type: "bad"}, "E")
	cancelled := enqueue(t, b, &jobwirev1.JobSpec{Type: "idle", Queue: "other"})
	if _, err := b.Producer.CancelJob(ctx, &jobwirev1.CancelJobRequest{Id: cancelled}); err != nil {
		t.Fatal(err)
	}
	for id, state := range map[int64]string{succeeded: "SUCCEEDED", dead: "DEAD", cancelled: "CANCELLED"} {
		before, err := b.Producer.GetJob(ctx, &jobwirev1.GetJobRequest{Id: id})
		if err != nil {
			t.Fatal(err)
		}
		_, err = b.Producer.CancelJob(ctx, &jobwirev1.CancelJobRequest{Id: id})
		want := fmt.Sprintf("job %d already %s; nothing to cancel", id, state)
		if status.Code(err) != codes.FailedPrecondition || status.Convert(err).Message() != want {
			t.Errorf("cancel of a %s job = %v; want FAILED_PRECONDITION %q", state, err, want)
		}
		after, err := b.Producer.GetJob(ctx, &jobwirev1.GetJobRequest{Id: id})
		if err != nil || !proto.Equal(before, after) {
			t.Errorf("the refused cancel changed job %d:\nbefore %v\nafter  %v (%v)", id, before, after, err)
		}
	}
}

// Resuming or capping a queue that does not exist is NOT_FOUND and creates nothing; pausing
// creates the queue, after which both work.
func TestResumeAndLimitOfAMissingQueueAreNotFound(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	ctx := context.Background()
	_, err := b.Admin.ResumeQueue(ctx, &jobwirev1.ResumeQueueRequest{Queue: "nosuchqueue"})
	if status.Code(err) != codes.NotFound || !strings.Contains(status.Convert(err).Message(), `queue "nosuchqueue"`) {
		t.Errorf("resume of a missing queue = %v; want NOT_FOUND naming it", err)
	}
	_, err = b.Admin.SetQueueLimit(ctx, &jobwirev1.SetQueueLimitRequest{Queue: "nosuchqueue", Limit: 3})
	if status.Code(err) != codes.NotFound {
		t.Errorf("limit of a missing queue = %v; want NOT_FOUND", err)
	}
	res, err := b.Admin.ListQueues(ctx, &jobwirev1.ListQueuesRequest{})
	if err != nil || len(res.GetQueues()) != 0 {
		t.Fatalf("queues after the refused calls = %v, %v; want none", res.GetQueues(), err)
	}
	capNewQueue(t, b, "mail", 3)
	if q := queueInfo(t, b, "mail"); q.GetPaused() || q.GetConcurrencyLimit() != 3 {
		t.Fatalf("mail = %v; want active with limit 3", q)
	}
	// A queue made by its first job can be capped at once.
	enqueue(t, b, &jobwirev1.JobSpec{Type: "t", Queue: "images"})
	if _, err := b.Admin.SetQueueLimit(ctx, &jobwirev1.SetQueueLimitRequest{Queue: "images", Limit: 1}); err != nil {
		t.Fatal(err)
	}
}

// capNewQueue makes a queue with a concurrency limit before its first job, the documented
// way: pause (which creates it), set the limit, resume.
func capNewQueue(t *testing.T, b *brokertest.Bundle, name string, limit int32) {
	t.Helper()
	ctx := context.Background()
	if _, err := b.Admin.PauseQueue(ctx, &jobwirev1.PauseQueueRequest{Queue: name}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Admin.SetQueueLimit(ctx, &jobwirev1.SetQueueLimitRequest{Queue: name, Limit: limit}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Admin.ResumeQueue(ctx, &jobwirev1.ResumeQueueRequest{Queue: name}); err != nil {
		t.Fatal(err)
	}
}

func TestCancelLeasedJobTellsWorker(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	w := b.Connect(brokertest.Hello("w1", 1, "t"))
	id := enqueue(t, b, &jobwirev1.JobSpec{Type: "t"})
	a := w.Assignment() // LEASED, user code not started
	if _, err := b.Producer.CancelJob(context.Background(), &jobwirev1.CancelJobRequest{Id: id}); err != nil {
		t.Fatal(err)
	}
	if c := w.Next().GetCancel(); c.GetJobId() != id || c.GetReason() != jobwirev1.CancelReason_CANCEL_REASON_REQUESTED {
		t.Fatalf("cancel = %v", c)
	}
	// A late start is refused and the job stays cancelled with no attempt spent.
	w.Started(a)
	if r := w.Next().GetRefused(); r.GetJobId() != id {
		t.Fatalf("late start: %v", r)
	}
	if j := getJob(t, b, id); j.GetState() != jobwirev1.JobState_JOB_STATE_CANCELLED || j.GetAttempts() != 0 {
		t.Fatalf("job = %v", j)
	}
	// The slot is free again.
	next := enqueue(t, b, &jobwirev1.JobSpec{Type: "t"})
	if a := w.Assignment(); a.GetJob().GetId() != next {
		t.Fatalf("assigned %d, want %d", a.GetJob().GetId(), next)
	}
}

// The Go worker SDK sees a cancel as its handler's context ending.
func TestCancelRunningJobCancelsSDKHandler(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	ctx := context.Background()
	started := make(chan int64, 1)
	ended := make(chan error, 1)
	w, err := worker.New(b.Conn, worker.Options{ID: "sdk", Concurrency: 1, ShutdownGrace: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	w.Handle("slow", func(ctx context.Context, j *worker.Job) error {
		started <- j.ID
		<-ctx.Done()
		ended <- context.Cause(ctx)
		return ctx.Err()
	})
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		<-done
	})

	id := enqueue(t, b, &jobwirev1.JobSpec{Type: "slow"})
	select {
	case got := <-started:
		if got != id {
			t.Fatalf("handler got job %d, want %d", got, id)
		}
	case <-time.After(brokertest.WaitTimeout):
		t.Fatal("the handler did not start")
	}
	b.WaitState(id, jobwirev1.JobState_JOB_STATE_RUNNING)
	if _, err := b.Producer.CancelJob(ctx, &jobwirev1.CancelJobRequest{Id: id}); err != nil {
		t.Fatal(err)
	}
	select {
	case cause := <-ended:
		if cause == nil || errors.Is(cause, context.DeadlineExceeded) {
			t.Fatalf("handler context ended with %v", cause)
		}
	case <-time.After(brokertest.WaitTimeout):
		t.Fatal("the handler's context was not cancelled")
	}
	j := getJob(t, b, id)
	h := j.GetAttemptHistory()
	if j.GetState() != jobwirev1.JobState_JOB_STATE_CANCELLED || len(h) != 1 || h[0].GetOutcome() != jobwirev1.AttemptOutcome_ATTEMPT_OUTCOME_CANCELLED {
		t.Fatalf("job = %v", j)
	}
}

func TestPausedQueueDispatchesNothingUntilResumed(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	ctx := context.Background()
	res, err := b.Admin.PauseQueue(ctx, &jobwirev1.PauseQueueRequest{Queue: "mail"})
	if err != nil || !res.GetQueue().GetPaused() || res.GetQueue().GetName() != "mail" {
		t.Fatalf("pause = %v, %v", res, err)
	}
	// Same priority, enqueued first: without the pause the mail job would go first.
	mail := enqueue(t, b, &jobwirev1.JobSpec{Type: "t", Queue: "mail"})
	other := enqueue(t, b, &jobwirev1.JobSpec{Type: "t", Queue: "other"})
	w := b.Connect(brokertest.Hello("w1", 1, "t"))
	a := w.Assignment()
	if a.GetJob().GetId() != other {
		t.Fatalf("assigned %d, want %d from the running queue", a.GetJob().GetId(), other)
	}
	ack(t, w.Succeed(a))
	// A later job of a running queue goes before the paused one, round after round.
	other2 := enqueue(t, b, &jobwirev1.JobSpec{Type: "t", Queue: "other"})
	if a = w.Assignment(); a.GetJob().GetId() != other2 {
		t.Fatalf("assigned %d, want %d", a.GetJob().GetId(), other2)
	}
	ack(t, w.Succeed(a))

	if info := queueInfo(t, b, "mail"); !info.GetPaused() || info.GetDepthByState()["PENDING"] != 1 || info.GetRunning() != 0 {
		t.Fatalf("mail queue = %v", queueInfo(t, b, "mail"))
	}

	rres, err := b.Admin.ResumeQueue(ctx, &jobwirev1.ResumeQueueRequest{Queue: "mail"})
	if err != nil || rres.GetQueue().GetPaused() {
		t.Fatalf("resume = %v, %v", rres, err)
	}
	// Resuming alone wakes the dispatcher.
	if a = w.Assignment(); a.GetJob().GetId() != mail {
		t.Fatalf("assigned %d after resume, want %d", a.GetJob().GetId(), mail)
	}
}

// A pause survives a broker restart.
func TestQueueSettingsSurviveRestart(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	ctx := context.Background()
	if _, err := b.Admin.PauseQueue(ctx, &jobwirev1.PauseQueueRequest{Queue: "mail"}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Admin.SetQueueLimit(ctx, &jobwirev1.SetQueueLimitRequest{Queue: "mail", Limit: 4}); err != nil {
		t.Fatal(err)
	}
	b.Restart()
	mail := enqueue(t, b, &jobwirev1.JobSpec{Type: "t", Queue: "mail"})
	other := enqueue(t, b, &jobwirev1.JobSpec{Type: "t"})
	w := b.Connect(brokertest.Hello("w1", 1, "t"))
	a := w.Assignment()
	if a.GetJob().GetId() != other {
		t.Fatalf("assigned %d, want %d", a.GetJob().GetId(), other)
	}
	ack(t, w.Succeed(a))
	res, err := b.Admin.ResumeQueue(ctx, &jobwirev1.ResumeQueueRequest{Queue: "mail"})
	if err != nil || res.GetQueue().GetConcurrencyLimit() != 4 || res.GetQueue().GetPaused() {
		t.Fatalf("resume = %v, %v", res, err)
	}
	if a := w.Assignment(); a.GetJob().GetId() != mail {
		t.Fatalf("assigned %d after resume, want %d", a.GetJob().GetId(), mail)
	}
}

// Several workers with spare capacity never run more of a capped queue's jobs at once than
// its limit, while other queues run beside it; raising the limit wakes the dispatcher.
func TestQueueConcurrencyCapAcrossWorkers(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	ctx := context.Background()
	const limit, capped, free = 2, 9, 3
	capNewQueue(t, b, "capped", limit)

	var mu sync.Mutex
	running, maxRunning := map[string]int{}, map[string]int{}
	releaseCapped, releaseFree := make(chan struct{}), make(chan struct{})
	close(releaseFree)
	startedCh := make(chan string, capped+free)
	finishedCh := make(chan string, capped+free)
	handler := func(ctx context.Context, j *worker.Job) error {
		mu.Lock()
		running[j.Queue]++
		maxRunning[j.Queue] = max(maxRunning[j.Queue], running[j.Queue])
		mu.Unlock()
		startedCh <- j.Queue
		release := releaseCapped
		if j.Queue == "free" {
			release = releaseFree
		}
		select {
		case <-release:
		case <-ctx.Done():
		}
		mu.Lock()
		running[j.Queue]--
		mu.Unlock()
		finishedCh <- j.Queue
		return nil
	}
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, id := range []string{"w1", "w2", "w3"} {
		w, err := worker.New(b.Conn, worker.Options{ID: id, Concurrency: 5, ShutdownGrace: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		w.Handle("t", handler)
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = w.Run(runCtx)
		}()
	}
	t.Cleanup(func() {
		stop()
		wg.Wait()
	})
	var cappedIDs []int64
	for range capped {
		cappedIDs = append(cappedIDs, enqueue(t, b, &jobwirev1.JobSpec{Type: "t", Queue: "capped"}))
	}
	for range free {
		enqueue(t, b, &jobwirev1.JobSpec{Type: "t", Queue: "free"})
	}
	wait := func(ch chan string, want string) map[string]int {
		t.Helper()
		got := map[string]int{}
		for got[want] == 0 {
			select {
			case q := <-ch:
				got[q]++
			case <-time.After(brokertest.WaitTimeout):
				t.Fatalf("waited for a %s job, saw only %v", want, got)
			}
		}
		return got
	}

	// 15 free slots, 12 ready jobs: the free queue's three and the cap's two start.
	got := map[string]int{}
	for range limit + free {
		select {
		case q := <-startedCh:
			got[q]++
		case <-time.After(brokertest.WaitTimeout):
			t.Fatalf("only %v started", got)
		}
	}
	if got["capped"] != limit || got["free"] != free {
		t.Fatalf("started %v, want %d capped and %d free", got, limit, free)
	}
	if q := queueInfo(t, b, "capped"); q.GetRunning() != limit || q.GetDepthByState()["PENDING"] != capped-limit || q.GetConcurrencyLimit() != limit {
		t.Fatalf("capped queue = %v", q)
	}
	// Each capped job that ends lets exactly one more in.
	for range 3 {
		releaseCapped <- struct{}{}
		wait(finishedCh, "capped")
		if s := wait(startedCh, "capped"); s["capped"] != 1 || s["free"] != 0 {
			t.Fatalf("started %v after one capped job ended", s)
		}
	}
	mu.Lock()
	underCap := maxRunning["capped"]
	mu.Unlock()
	if underCap != limit {
		t.Fatalf("at most %d capped jobs ran at once, want exactly the limit %d", underCap, limit)
	}

	// Raising the limit wakes the dispatcher for the difference.
	if _, err := b.Admin.SetQueueLimit(ctx, &jobwirev1.SetQueueLimitRequest{Queue: "capped", Limit: limit + 1}); err != nil {
		t.Fatal(err)
	}
	wait(startedCh, "capped")
	close(releaseCapped)
	for _, id := range cappedIDs {
		b.WaitState(id, jobwirev1.JobState_JOB_STATE_SUCCEEDED)
	}
	mu.Lock()
	defer mu.Unlock()
	if maxRunning["capped"] > limit+1 {
		t.Fatalf("up to %d capped jobs ran at once with a limit of %d", maxRunning["capped"], limit+1)
	}
}

func TestRetentionRemovesOnlyWhatIsPastItsPeriod(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	ctx := context.Background()
	w := b.Connect(brokertest.Hello("w1", 1, "t"))
	succeeded := enqueue(t, b, &jobwirev1.JobSpec{Type: "t"})
	a := w.Assignment()
	ack(t, w.Succeed(a))
	dead := killJob(t, b, w, &jobwirev1.JobSpec{Type: "t"}, "E")
	cancelled := enqueue(t, b, &jobwirev1.JobSpec{Type: "t", Schedule: &jobwirev1.JobSpec_Delay{Delay: durationpb.New(365 * 24 * time.Hour)}})
	if _, err := b.Producer.CancelJob(ctx, &jobwirev1.CancelJobRequest{Id: cancelled}); err != nil {
		t.Fatal(err)
	}
	waiting := enqueue(t, b, &jobwirev1.JobSpec{Type: "other"})
	gone := func(id int64) bool {
		_, err := b.Producer.GetJob(ctx, &jobwirev1.GetJobRequest{Id: id})
		return status.Code(err) == codes.NotFound
	}
	retain := func() {
		t.Helper()
		if _, err := b.Broker.ApplyRetention(ctx); err != nil {
			t.Fatal(err)
		}
	}

	b.Clock.Advance(7 * 24 * time.Hour)
	retain()
	if gone(succeeded) {
		t.Fatal("a succeeded job went at 7 days, before they were past")
	}
	b.Clock.Advance(time.Nanosecond)
	retain()
	if !gone(succeeded) || gone(dead) || gone(cancelled) || gone(waiting) {
		t.Fatalf("after 7 days: succeeded gone %v, dead gone %v, cancelled gone %v, pending gone %v",
			gone(succeeded), gone(dead), gone(cancelled), gone(waiting))
	}
	// The timer on the broker's clock does the same without being asked.
	b.Clock.Advance(23 * 24 * time.Hour)
	deadline := time.Now().Add(brokertest.WaitTimeout)
	for !gone(dead) || !gone(cancelled) {
		if time.Now().After(deadline) {
			t.Fatal("dead and cancelled jobs were not removed after 30 days")
		}
		time.Sleep(2 * time.Millisecond)
	}
	if gone(waiting) {
		t.Fatal("retention removed a job that has not finished")
	}
}

func TestPurgeFinishedJobs(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	ctx := context.Background()
	w := b.Connect(brokertest.Hello("w1", 1, "t"))
	var old []int64
	for range 3 {
		old = append(old, enqueue(t, b, &jobwirev1.JobSpec{Type: "t"}))
		ack(t, w.Succeed(w.Assignment()))
	}
	dead := killJob(t, b, w, &jobwirev1.JobSpec{Type: "t"}, "E")
	b.Clock.Advance(2 * time.Hour)
	recent := enqueue(t, b, &jobwirev1.JobSpec{Type: "t"})
	ack(t, w.Succeed(w.Assignment()))

	res, err := b.Admin.PurgeFinishedJobs(ctx, &jobwirev1.PurgeFinishedJobsRequest{OlderThan: durationpb.New(time.Hour)})
	if err != nil || res.GetPurged() != 3 {
		t.Fatalf("purge = %v, %v", res, err)
	}
	for _, id := range old {
		if _, err := b.Producer.GetJob(ctx, &jobwirev1.GetJobRequest{Id: id}); status.Code(err) != codes.NotFound {
			t.Fatalf("old job %d: %v", id, err)
		}
	}
	getJob(t, b, recent)
	getJob(t, b, dead)
}

func TestStatsCounts(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	ctx := context.Background()
	w := b.Connect(brokertest.Hello("w1", 1, "t"))
	// Six minutes ago: one success, outside both windows.
	enqueue(t, b, &jobwirev1.JobSpec{Type: "t", Queue: "q"})
	ack(t, w.Succeed(w.Assignment()))
	b.Clock.Advance(6 * time.Minute)
	// Three minutes ago: a transient failure then a success.
	enqueue(t, b, &jobwirev1.JobSpec{Type: "t", Queue: "q"})
	a := w.Assignment()
	w.Started(a)
	r := ack(t, w.Fail(a, brokertest.Transient("E", 0)))
	b.Clock.Advance(r.GetRetryAt().AsTime().Sub(b.Clock.Now()))
	ack(t, w.Succeed(w.Assignment()))
	b.Clock.Advance(3 * time.Minute)
	// Now: a death and a waiting job.
	killJob(t, b, w, &jobwirev1.JobSpec{Type: "t", Queue: "q"}, "E")
	enqueue(t, b, &jobwirev1.JobSpec{Type: "u", Queue: "q"})
	b.Clock.Advance(30 * time.Second)
	setRateLimit(t, b, &jobwirev1.RateLimit{Name: "l", Queue: "other", Rate: 1, Interval: durationpb.New(time.Second)})

	st, err := b.Admin.GetStats(ctx, &jobwirev1.GetStatsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]int64{}
	for _, c := range st.GetCounts() {
		counts[c.GetQueue()+"/"+c.GetType()+"/"+c.GetState().String()] = c.GetCount()
	}
	want := map[string]int64{
		"q/t/JOB_STATE_SUCCEEDED": 2,
		"q/t/JOB_STATE_DEAD":      1,
		"q/u/JOB_STATE_PENDING":   1,
	}
	if len(counts) != len(want) {
		t.Fatalf("counts = %v, want %v", counts, want)
	}
	for k, v := range want {
		if counts[k] != v {
			t.Fatalf("counts = %v, want %v", counts, want)
		}
	}
	rec := st.GetRecent()
	if len(rec) != 2 || rec[0].GetWindow().AsDuration() != time.Minute || rec[1].GetWindow().AsDuration() != 5*time.Minute {
		t.Fatalf("recent = %v", rec)
	}
	if r := rec[0]; r.GetSucceeded() != 0 || r.GetFailed() != 1 || r.GetDead() != 1 {
		t.Fatalf("last minute = %v, want 0 succeeded, 1 failed, 1 dead", r)
	}
	if r := rec[1]; r.GetSucceeded() != 1 || r.GetFailed() != 2 || r.GetDead() != 1 {
		t.Fatalf("last 5 minutes = %v, want 1 succeeded, 2 failed, 1 dead", r)
	}
	if len(st.GetQueues()) != 1 {
		t.Fatalf("queues = %v", st.GetQueues())
	}
	q := st.GetQueues()[0]
	if q.GetName() != "q" || q.GetDepthByState()["PENDING"] != 1 || q.GetDepthByState()["SUCCEEDED"] != 2 ||
		q.GetOldestReadyAge().AsDuration() != 30*time.Second {
		t.Fatalf("queue = %v", q)
	}
	if len(st.GetRateLimits()) != 1 {
		t.Fatalf("rate limits = %v, want the one set", st.GetRateLimits())
	}

	// The counts alone: the same counts and last minute, and nothing else read.
	only, err := b.Admin.GetStats(ctx, &jobwirev1.GetStatsRequest{CountsOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(&jobwirev1.GetStatsResponse{Counts: st.GetCounts(), Recent: rec[:1], StorageRetries: st.GetStorageRetries()}, only) {
		t.Fatalf("GetStats with counts_only = %v, want the counts and the last minute of %v", only, st)
	}
}

func TestAdminValidation(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	ctx := context.Background()
	a := b.Admin
	ids := func(n int) []int64 {
		out := make([]int64, n)
		for i := range out {
			out[i] = int64(i + 1)
		}
		return out
	}
	filter := &jobwirev1.DeadJobFilter{Queue: "q"}
	tests := []struct {
		name string
		call func() error
		want string
	}{
		{"list page size", func() error {
			_, err := a.ListJobs(ctx, &jobwirev1.ListJobsRequest{PageSize: 1001})
			return err
		}, "page_size: must be 0"},
		{"list negative page size", func() error {
			_, err := a.ListDeadJobs(ctx, &jobwirev1.ListDeadJobsRequest{PageSize: -1})
			return err
		}, "page_size: must be 0"},
		{"list state", func() error {
			_, err := a.ListJobs(ctx, &jobwirev1.ListJobsRequest{State: 42})
			return err
		}, "state: is not a job state"},
		{"list queue", func() error {
			_, err := a.ListJobs(ctx, &jobwirev1.ListJobsRequest{Queue: "a b"})
			return err
		}, "queue: may hold only"},
		{"list token", func() error {
			_, err := a.ListJobs(ctx, &jobwirev1.ListJobsRequest{PageToken: "!!"})
			return err
		}, "page_token: is not a token"},
		{"list sort", func() error {
			_, err := a.ListJobs(ctx, &jobwirev1.ListJobsRequest{Sort: "payload"})
			return err
		}, `sort: "payload" is not a column this list sorts by; use one of created_at, id, type, queue, state, priority, run_at, attempts`},
		{"dead sort", func() error {
			_, err := a.ListDeadJobs(ctx, &jobwirev1.ListDeadJobsRequest{Sort: "state"})
			return err
		}, `sort: "state" is not a column this list sorts by; use one of died_at, created_at, id, type, queue, attempts, reason, error_type`},
		{"dead token", func() error {
			_, err := a.ListDeadJobs(ctx, &jobwirev1.ListDeadJobsRequest{PageToken: "bm9wZQ"})
			return err
		}, "page_token: is not a token"},
		{"dead filter reason", func() error {
			_, err := a.ListDeadJobs(ctx, &jobwirev1.ListDeadJobsRequest{Filter: &jobwirev1.DeadJobFilter{Reason: 99}})
			return err
		}, "filter.reason: is not a dead reason"},
		{"dead filter window", func() error {
			now := timestamppb.New(brokertest.Start)
			_, err := a.ListDeadJobs(ctx, &jobwirev1.ListDeadJobsRequest{Filter: &jobwirev1.DeadJobFilter{DeadAfter: now, DeadBefore: now}})
			return err
		}, "filter.dead_before: must be later than dead_after"},
		{"no selection", func() error {
			_, err := a.RequeueDeadJobs(ctx, &jobwirev1.RequeueDeadJobsRequest{})
			return err
		}, "selection: is required"},
		{"empty selection", func() error {
			_, err := a.PurgeDeadJobs(ctx, &jobwirev1.PurgeDeadJobsRequest{Selection: &jobwirev1.BulkSelection{}})
			return err
		}, "selection: give the ids of dead jobs, a filter, or all"},
		{"empty filter without all", func() error {
			_, err := a.PurgeDeadJobs(ctx, &jobwirev1.PurgeDeadJobsRequest{Selection: &jobwirev1.BulkSelection{Filter: &jobwirev1.DeadJobFilter{}}})
			return err
		}, "selection.filter: is empty and would select every dead job"},
		{"all with a filter", func() error {
			_, err := a.PurgeDeadJobs(ctx, &jobwirev1.PurgeDeadJobsRequest{Selection: &jobwirev1.BulkSelection{All: true, Filter: &jobwirev1.DeadJobFilter{Queue: "q"}}})
			return err
		}, "selection.all: selects every dead job"},
		{"ids and filter", func() error {
			_, err := a.PurgeDeadJobs(ctx, &jobwirev1.PurgeDeadJobsRequest{Selection: &jobwirev1.BulkSelection{Ids: []int64{1}, Filter: filter}})
			return err
		}, "selection: give ids or a filter, not both"},
		{"bad id", func() error {
			_, err := a.PurgeDeadJobs(ctx, &jobwirev1.PurgeDeadJobsRequest{Selection: &jobwirev1.BulkSelection{Ids: []int64{1, 0}}})
			return err
		}, "selection.ids[1]: must be a positive job id"},
		{"limit too big", func() error {
			_, err := a.PurgeDeadJobs(ctx, &jobwirev1.PurgeDeadJobsRequest{Selection: &jobwirev1.BulkSelection{Filter: filter, Limit: 10001}})
			return err
		}, "selection.limit: must be 0"},
		{"more ids than the limit", func() error {
			_, err := a.PurgeDeadJobs(ctx, &jobwirev1.PurgeDeadJobsRequest{Selection: &jobwirev1.BulkSelection{Ids: ids(3), Limit: 2}})
			return err
		}, "selection.ids: holds 3 ids, more than the limit of 2"},
		{"more ids than the default limit", func() error {
			_, err := a.PurgeDeadJobs(ctx, &jobwirev1.PurgeDeadJobsRequest{Selection: &jobwirev1.BulkSelection{Ids: ids(1001)}})
			return err
		}, "more than the limit of 1000"},
		{"selection filter queue", func() error {
			_, err := a.PurgeDeadJobs(ctx, &jobwirev1.PurgeDeadJobsRequest{Selection: &jobwirev1.BulkSelection{Filter: &jobwirev1.DeadJobFilter{Queue: "x/y"}}})
			return err
		}, "selection.filter.queue: may hold only"},
		{"payload for two", func() error {
			_, err := a.RequeueDeadJobs(ctx, &jobwirev1.RequeueDeadJobsRequest{Selection: &jobwirev1.BulkSelection{Ids: ids(2)}, Payload: []byte("{}")})
			return err
		}, "payload: a corrected payload needs exactly one job"},
		{"payload for a filter", func() error {
			_, err := a.RequeueDeadJobs(ctx, &jobwirev1.RequeueDeadJobsRequest{Selection: &jobwirev1.BulkSelection{Filter: filter}, Payload: []byte("{}")})
			return err
		}, "payload: a corrected payload needs exactly one job"},
		{"payload too big", func() error {
			_, err := a.RequeueDeadJobs(ctx, &jobwirev1.RequeueDeadJobsRequest{Selection: &jobwirev1.BulkSelection{Ids: ids(1)}, Payload: make([]byte, 1<<20+1)})
			return err
		}, "payload: is 1048577 bytes"},
		{"priority", func() error {
			_, err := a.RequeueDeadJobs(ctx, &jobwirev1.RequeueDeadJobsRequest{Selection: &jobwirev1.BulkSelection{Ids: ids(1)}, Priority: proto.Int32(5000)})
			return err
		}, "priority: must be -1000..1000"},
		{"run_at too far", func() error {
			_, err := a.RequeueDeadJobs(ctx, &jobwirev1.RequeueDeadJobsRequest{Selection: &jobwirev1.BulkSelection{Ids: ids(1)},
				RunAt: timestamppb.New(brokertest.Start.Add(400 * 24 * time.Hour))})
			return err
		}, "run_at: is more than"},
		{"top limit", func() error {
			_, err := a.TopDeadErrors(ctx, &jobwirev1.TopDeadErrorsRequest{Limit: -1})
			return err
		}, "limit: must be 0"},
		{"purge finished without age", func() error {
			_, err := a.PurgeFinishedJobs(ctx, &jobwirev1.PurgeFinishedJobsRequest{})
			return err
		}, "older_than: is required"},
		{"purge finished negative", func() error {
			_, err := a.PurgeFinishedJobs(ctx, &jobwirev1.PurgeFinishedJobsRequest{OlderThan: durationpb.New(-time.Hour)})
			return err
		}, "older_than: must not be negative"},
		{"pause without queue", func() error {
			_, err := a.PauseQueue(ctx, &jobwirev1.PauseQueueRequest{})
			return err
		}, "queue: must be 1..255 characters"},
		{"resume bad queue", func() error {
			_, err := a.ResumeQueue(ctx, &jobwirev1.ResumeQueueRequest{Queue: "a b"})
			return err
		}, "queue: may hold only"},
		{"negative limit", func() error {
			_, err := a.SetQueueLimit(ctx, &jobwirev1.SetQueueLimitRequest{Queue: "q", Limit: -1})
			return err
		}, "limit: must be 0 (no cap)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wantCode(t, tt.call(), codes.InvalidArgument, tt.want)
		})
	}
}

// Jobs that were running when the broker restarted keep their places under their queue's cap
// until their leases run out (or their workers come back), so a restart cannot let twice the
// cap run at once.
func TestQueueCapCountsJobsRunningAcrossARestart(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	const limit = 2
	capNewQueue(t, b, "capped", limit)
	for range 2 * limit {
		enqueue(t, b, &jobwirev1.JobSpec{Type: "t", Queue: "capped"})
	}
	w1 := b.Connect(brokertest.Hello("w1", 5, "t"))
	for range limit {
		a := w1.Assignment()
		w1.Started(a)
		b.WaitState(a.GetJob().GetId(), jobwirev1.JobState_JOB_STATE_RUNNING)
	}

	b.Restart() // w1 does not come back
	w2 := b.Connect(brokertest.Hello("w2", 5, "t"))
	// A job of an uncapped queue reaches w2 once a dispatch round has run for it; capped jobs
	// would have been leased by that round or an earlier one.
	free := enqueue(t, b, &jobwirev1.JobSpec{Type: "t", Queue: "free"})
	if a := w2.Assignment(); a.GetJob().GetId() != free {
		t.Fatalf("w2 was assigned job %d of queue %q, want only job %d of queue free while the cap is taken",
			a.GetJob().GetId(), a.GetJob().GetQueue(), free)
	}
	if q := queueInfo(t, b, "capped"); q.GetRunning() != limit {
		t.Fatalf("capped queue after the restart = %v, want %d running", q, limit)
	}

	// The running jobs' leases run out: they become retries, and the waiting jobs take the cap.
	b.Advance(brokertest.DefaultConfig().LeaseDuration + time.Second)
	for range limit {
		if a := w2.Assignment(); a.GetJob().GetQueue() != "capped" {
			t.Fatalf("assigned job %d of queue %q, want a capped one", a.GetJob().GetId(), a.GetJob().GetQueue())
		}
	}
}

// A capped queue takes its turn by priority like any other: with scarce worker capacity, a
// more urgent job of an uncapped queue goes first, a more urgent capped job goes first while
// the cap has room, and a capped queue at its cap lets the next queue's jobs through.
func TestQueueCapKeepsPriorityOrder(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		jobs []*jobwirev1.JobSpec // enqueued in this order
		want []int                // indexes into jobs, in assignment order
	}{
		{"urgent uncapped job before a capped one", []*jobwirev1.JobSpec{
			{Type: "t", Queue: "capped", Priority: 1},
			{Type: "t", Queue: "free", Priority: 5},
		}, []int{1, 0}},
		{"urgent capped job before an uncapped one", []*jobwirev1.JobSpec{
			{Type: "t", Queue: "free", Priority: 1},
			{Type: "t", Queue: "capped", Priority: 5},
		}, []int{1, 0}},
		{"a capped queue at its cap lets the others by", []*jobwirev1.JobSpec{
			{Type: "t", Queue: "capped", Priority: 9},
			{Type: "t", Queue: "capped", Priority: 8},
			{Type: "t", Queue: "capped", Priority: 7},
			{Type: "t", Queue: "free", Priority: 1},
		}, []int{0, 3, 1, 2}},
	}
	for _, tt := range tests {
		for _, named := range []bool{false, true} {
			name := tt.name
			if named {
				name += ", worker names its queues"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				testQueueCapPriority(t, tt.jobs, tt.want, named)
			})
		}
	}
}

// testQueueCapPriority enqueues jobs, then checks that a worker with two slots is assigned them
// in order (indexes into jobs), finishing a capped job whenever it needs a free slot.
func testQueueCapPriority(t *testing.T, jobs []*jobwirev1.JobSpec, order []int, named bool) {
	b := brokertest.New(t, brokertest.Options{})
	capNewQueue(t, b, "capped", 1)
	ids := make([]int64, len(jobs))
	for i, spec := range jobs {
		ids[i] = enqueue(t, b, spec)
	}
	// Room for two at once: the first two assignments come from one dispatch round.
	hello := brokertest.Hello("w1", 2, "t")
	if named {
		hello.Queues = []string{"capped", "free"}
	}
	w := b.Connect(hello)
	var got, want []int64
	var held []*jobwirev1.Assignment
	for _, k := range order {
		want = append(want, ids[k])
		if len(held) == 2 {
			// Finish a capped job if one runs, so the cap has room again.
			i := slices.IndexFunc(held, func(a *jobwirev1.Assignment) bool { return a.GetJob().GetQueue() == "capped" })
			i = max(i, 0)
			ack(t, w.Succeed(held[i]))
			held = slices.Delete(held, i, i+1)
		}
		a := w.Assignment()
		got = append(got, a.GetJob().GetId())
		held = append(held, a)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("assigned %v, want %v", got, want)
	}
}
