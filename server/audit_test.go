package server_test

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/jobwire/jobwire/breaker"
	"github.com/jobwire/jobwire/broker"
	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/auth"
	"github.com/jobwire/jobwire/internal/brokertest"
	"github.com/jobwire/jobwire/worker"
)

// auditEvents lists the whole trail through the admin service, newest first.
func auditEvents(t *testing.T, b *brokertest.Bundle, req *jobwirev1.ListAuditEventsRequest) []*jobwirev1.AuditEvent {
	t.Helper()
	res, err := b.Admin.ListAuditEvents(context.Background(), req)
	if err != nil {
		t.Fatalf("ListAuditEvents: %v", err)
	}
	return res.GetEvents()
}

// onlyAudit fails unless the trail holds exactly one event, of action: a write that failed
// and was retried records its action once, never twice and never not at all.
func onlyAudit(t *testing.T, b *brokertest.Bundle, action string) *jobwirev1.AuditEvent {
	t.Helper()
	evs := auditEvents(t, b, &jobwirev1.ListAuditEventsRequest{})
	if len(evs) != 1 || evs[0].GetAction() != action {
		t.Fatalf("audit trail %v, want one %s event", evs, action)
	}
	return evs[0]
}

// wantAudit is what one audit event must say besides who did it and when.
type wantAudit struct {
	action, target, detail string
	count                  int64
	jobs                   []int64
}

// Every operator action, over the API with an admin token, records who did it (the token's id
// and name), what, when, how many jobs and which; previews and refused actions record nothing.
func TestOperatorActionsAreAudited(t *testing.T) {
	t.Parallel()
	off := breaker.CountConfig()
	off.Disabled = true
	b := brokertest.New(t, brokertest.Options{RequireAuth: true,
		Breakers: &broker.BreakerOptions{Default: off, PerType: map[string]breaker.Config{"pay": breaker.CountConfig()}}})
	ctx := context.Background()
	admin, err := b.Auth.Verify(ctx, b.AdminToken)
	if err != nil {
		t.Fatal(err)
	}
	tokens := jobwirev1.NewTokenServiceClient(b.Conn)
	w := b.Connect(brokertest.Hello("w1", 1, "t"))
	enqueue(t, b, &jobwirev1.JobSpec{Type: "t"})
	ack(t, w.Succeed(w.Assignment()))
	d0 := killJob(t, b, w, &jobwirev1.JobSpec{Type: "t"}, "E")
	d1 := killJob(t, b, w, &jobwirev1.JobSpec{Type: "t"}, "E")
	d2 := killJob(t, b, w, &jobwirev1.JobSpec{Type: "t"}, "E")

	var want []wantAudit
	var times []time.Time
	do := func(w wantAudit, call func() error) {
		t.Helper()
		b.Clock.Advance(time.Second)
		if err := call(); err != nil {
			t.Fatalf("%s: %v", w.action, err)
		}
		want, times = append(want, w), append(times, b.Clock.Now())
	}
	do(wantAudit{action: "queue.pause", target: "default"}, func() error {
		_, err := b.Admin.PauseQueue(ctx, &jobwirev1.PauseQueueRequest{Queue: "default"})
		return err
	})
	do(wantAudit{action: "dlq.requeue", detail: "ids=1 limit=1000", count: 1, jobs: []int64{d0}}, func() error {
		_, err := b.Admin.RequeueDeadJobs(ctx, &jobwirev1.RequeueDeadJobsRequest{Selection: &jobwirev1.BulkSelection{Ids: []int64{d0}}})
		return err
	})
	do(wantAudit{action: "job.cancel", target: strconv.FormatInt(d0, 10), detail: "was PENDING", count: 1, jobs: []int64{d0}}, func() error {
		_, err := b.Producer.CancelJob(ctx, &jobwirev1.CancelJobRequest{Id: d0})
		return err
	})
	_, err = b.Producer.CancelJob(ctx, &jobwirev1.CancelJobRequest{Id: d0})
	wantCode(t, err, codes.FailedPrecondition, "")
	byError := &jobwirev1.BulkSelection{Filter: &jobwirev1.DeadJobFilter{ErrorType: "E"}}
	if res, err := b.Admin.PurgeDeadJobs(ctx, &jobwirev1.PurgeDeadJobsRequest{Selection: &jobwirev1.BulkSelection{
		Filter: byError.Filter, Preview: true}}); err != nil || res.GetMatched() != 2 {
		t.Fatalf("preview: %v, %v", res, err)
	}
	do(wantAudit{action: "dlq.purge", detail: "error_type=E limit=1000", count: 2, jobs: []int64{d2, d1}}, func() error {
		_, err := b.Admin.PurgeDeadJobs(ctx, &jobwirev1.PurgeDeadJobsRequest{Selection: byError})
		return err
	})
	do(wantAudit{action: "queue.limit", target: "default", detail: "limit=3"}, func() error {
		_, err := b.Admin.SetQueueLimit(ctx, &jobwirev1.SetQueueLimitRequest{Queue: "default", Limit: 3})
		return err
	})
	do(wantAudit{action: "queue.resume", target: "default"}, func() error {
		_, err := b.Admin.ResumeQueue(ctx, &jobwirev1.ResumeQueueRequest{Queue: "default"})
		return err
	})
	_, err = b.Admin.ResumeQueue(ctx, &jobwirev1.ResumeQueueRequest{Queue: "nope"})
	wantCode(t, err, codes.NotFound, "")
	do(wantAudit{action: "breaker.force", target: "pay", detail: "state=OPEN"}, func() error {
		_, err := b.Admin.ForceBreaker(ctx, &jobwirev1.ForceBreakerRequest{Type: "pay", State: jobwirev1.BreakerState_BREAKER_STATE_OPEN})
		return err
	})
	_, err = b.Admin.ForceBreaker(ctx, &jobwirev1.ForceBreakerRequest{Type: "t", State: jobwirev1.BreakerState_BREAKER_STATE_OPEN})
	wantCode(t, err, codes.FailedPrecondition, "")
	do(wantAudit{action: "breaker.reset", target: "pay"}, func() error {
		_, err := b.Admin.ResetBreaker(ctx, &jobwirev1.ResetBreakerRequest{Type: "pay"})
		return err
	})
	do(wantAudit{action: "jobs.purge_succeeded", detail: "older_than=0s", count: 1}, func() error {
		_, err := b.Admin.PurgeFinishedJobs(ctx, &jobwirev1.PurgeFinishedJobsRequest{OlderThan: durationpb.New(0)})
		return err
	})
	var made string
	detail := `name="ops viewer" role=viewer`
	b.Clock.Advance(time.Second)
	res, err := tokens.CreateToken(ctx, &jobwirev1.CreateTokenRequest{Role: jobwirev1.TokenRole_TOKEN_ROLE_VIEWER, Name: "ops viewer"})
	if err != nil {
		t.Fatal(err)
	}
	made = res.GetInfo().GetId()
	want, times = append(want, wantAudit{action: "token.create", target: made, detail: detail}), append(times, b.Clock.Now())
	do(wantAudit{action: "token.revoke", target: made, detail: detail}, func() error {
		_, err := tokens.RevokeToken(ctx, &jobwirev1.RevokeTokenRequest{Id: made})
		return err
	})

	evs := auditEvents(t, b, &jobwirev1.ListAuditEventsRequest{Actor: admin.TokenID})
	if len(evs) != len(want) {
		t.Fatalf("the trail holds %d events of the admin token, want %d: %v", len(evs), len(want), evs)
	}
	slices.Reverse(evs) // oldest first, as done
	for i, e := range evs {
		w := want[i]
		got := wantAudit{action: e.GetAction(), target: e.GetTarget(), detail: e.GetDetail(), count: e.GetCount(), jobs: e.GetJobIds()}
		if got.action != w.action || got.target != w.target || got.detail != w.detail || got.count != w.count ||
			!slices.Equal(got.jobs, w.jobs) {
			t.Errorf("event %d = %+v, want %+v", i, got, w)
		}
		if !e.GetTime().AsTime().Equal(times[i]) {
			t.Errorf("%s at %s, want %s", e.GetAction(), e.GetTime().AsTime(), times[i])
		}
		if e.GetActorTokenId() != admin.TokenID || e.GetActorName() != "test admin" || e.GetSource() != "api" ||
			!strings.HasPrefix(e.GetPeer(), "127.0.0.1:") || e.GetBrokerId() != "" {
			t.Errorf("%s by %q %q from %q %q on broker %q, want the admin token over the API from loopback on the lone broker",
				e.GetAction(), e.GetActorTokenId(), e.GetActorName(), e.GetSource(), e.GetPeer(), e.GetBrokerId())
		}
	}

	// The filters and pages.
	pauses := auditEvents(t, b, &jobwirev1.ListAuditEventsRequest{Action: "queue.pause"})
	if len(pauses) != 1 || pauses[0].GetTarget() != "default" {
		t.Errorf("queue.pause events: %v", pauses)
	}
	window := auditEvents(t, b, &jobwirev1.ListAuditEventsRequest{Since: timestamppb.New(times[1]), Until: timestamppb.New(times[3])})
	if len(window) != 2 || window[0].GetAction() != "job.cancel" || window[1].GetAction() != "dlq.requeue" {
		t.Errorf("events from %s to %s: %v", times[1], times[3], window)
	}
	var paged []string
	token := ""
	for range 20 {
		res, err := b.Admin.ListAuditEvents(ctx, &jobwirev1.ListAuditEventsRequest{Actor: "test admin", PageSize: 4, PageToken: token})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range res.GetEvents() {
			paged = append(paged, e.GetAction())
		}
		if token = res.GetNextPageToken(); token == "" {
			break
		}
	}
	if len(paged) != len(want) || paged[0] != "token.revoke" || paged[len(paged)-1] != "queue.pause" {
		t.Errorf("paged by 4 through the admin's events: %v", paged)
	}

	// A viewer token reads the trail.
	viewer := jobwirev1.NewAdminServiceClient(b.DialToken(b.Token(auth.RoleViewer, auth.Scope{})))
	if res, err := viewer.ListAuditEvents(ctx, &jobwirev1.ListAuditEventsRequest{Action: "dlq.purge"}); err != nil || len(res.GetEvents()) != 1 {
		t.Errorf("a viewer listing the purges: %v, %v", res, err)
	}
}

// The dashboard calls the services in process with the signed-in token: its actions are
// recorded as the dashboard's, by that token. With auth off the actor is anonymous.
func TestDashboardAndAnonymousActionsAreAudited(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{RequireAuth: true})
	ctx := context.Background()
	tok := b.Token(auth.RoleAdmin, auth.Scope{})
	p, err := b.Auth.Verify(ctx, tok)
	if err != nil {
		t.Fatal(err)
	}
	signedIn := metadata.NewIncomingContext(ctx, metadata.Pairs("authorization", "Bearer "+tok))
	if err := b.Server.LocalConn().Invoke(signedIn, jobwirev1.AdminService_PauseQueue_FullMethodName,
		&jobwirev1.PauseQueueRequest{Queue: "mail"}, &jobwirev1.PauseQueueResponse{}); err != nil {
		t.Fatal(err)
	}
	e := auditEvents(t, b, &jobwirev1.ListAuditEventsRequest{Action: "queue.pause"})
	if len(e) != 1 || e[0].GetActorTokenId() != p.TokenID || e[0].GetActorName() != "test admin" || e[0].GetSource() != "dashboard" {
		t.Fatalf("a pause from the dashboard recorded as %v", e)
	}

	open := brokertest.New(t, brokertest.Options{})
	if _, err := open.Admin.PauseQueue(ctx, &jobwirev1.PauseQueueRequest{Queue: "mail"}); err != nil {
		t.Fatal(err)
	}
	e = auditEvents(t, open, &jobwirev1.ListAuditEventsRequest{})
	if len(e) != 1 || e[0].GetActorTokenId() != "" || e[0].GetActorName() != "anonymous" || e[0].GetSource() != "api" ||
		!strings.HasPrefix(e[0].GetPeer(), "127.0.0.1:") {
		t.Fatalf("a pause with auth off recorded as %v", e)
	}
}

// Audit events are kept for retention.audit, then the retention sweep deletes them.
func TestAuditEventsAreDeletedPastTheirRetention(t *testing.T) {
	t.Parallel()
	cfg := brokertest.DefaultConfig()
	cfg.Retention.Audit = 48 * time.Hour
	b := brokertest.New(t, brokertest.Options{Config: cfg})
	ctx := context.Background()
	if _, err := b.Admin.PauseQueue(ctx, &jobwirev1.PauseQueueRequest{Queue: "old"}); err != nil {
		t.Fatal(err)
	}
	b.Clock.Advance(24 * time.Hour)
	if _, err := b.Admin.PauseQueue(ctx, &jobwirev1.PauseQueueRequest{Queue: "new"}); err != nil {
		t.Fatal(err)
	}
	b.Clock.Advance(24 * time.Hour)
	if n, err := b.Broker.ApplyAuditRetention(ctx); err != nil || n != 0 {
		t.Fatalf("retention at 48h deleted %d events (%v), want none: the first is not past 48h yet", n, err)
	}
	// The timer on the broker's clock deletes the first once it is past. The clock moves on an
	// interval at a time while the test waits: the sweep re-arms its timer after it runs, which
	// on a loaded machine may come after a single advance; twelve hours are far from the
	// second event's retention.
	moved := time.Duration(0)
	brokertest.WaitFor(t, "the event past its retention to be deleted", func() bool {
		if len(auditEvents(t, b, &jobwirev1.ListAuditEventsRequest{})) == 1 {
			return true
		}
		if moved < 12*time.Hour {
			b.Clock.Advance(cfg.Retention.Interval)
			moved += cfg.Retention.Interval
		}
		return false
	})
	if e := auditEvents(t, b, &jobwirev1.ListAuditEventsRequest{}); e[0].GetTarget() != "new" {
		t.Fatalf("retention kept %v, want the pause of queue new", e)
	}
}

// A bad filter is INVALID_ARGUMENT naming the field.
func TestListAuditEventsValidation(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	now := b.Clock.Now()
	for _, tt := range []struct {
		req  *jobwirev1.ListAuditEventsRequest
		text string
	}{
		{&jobwirev1.ListAuditEventsRequest{Action: "queue.delete"}, `action: must be one of job.cancel, dlq.requeue`},
		{&jobwirev1.ListAuditEventsRequest{Actor: strings.Repeat("a", 256)}, "actor: must be at most 255 characters"},
		{&jobwirev1.ListAuditEventsRequest{Since: timestamppb.New(now), Until: timestamppb.New(now)}, "until: must be later than since"},
		{&jobwirev1.ListAuditEventsRequest{PageSize: 1001}, "page_size: must be 0"},
		{&jobwirev1.ListAuditEventsRequest{PageToken: "!"}, "page_token: is not a token this broker issued"},
	} {
		_, err := b.Admin.ListAuditEvents(context.Background(), tt.req)
		wantCode(t, err, codes.InvalidArgument, tt.text)
	}
}

// answeringID is the broker id of the broker b answers as.
func answeringID(t *testing.T, b *brokertest.Bundle) string {
	t.Helper()
	res, err := b.Admin.ListBrokers(context.Background(), &jobwirev1.ListBrokersRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, br := range res.GetBrokers() {
		if br.GetAnswering() {
			return br.GetId()
		}
	}
	t.Fatal("no broker answered as itself")
	return ""
}

// On a PostgreSQL database served by several brokers, each event names the broker that did the
// action, and every broker lists the one trail. A shared breaker is stored in the database: its
// event is stored in the same write.
func TestClusterAuditNamesTheBroker(t *testing.T) {
	t.Parallel()
	a, b := twoBrokers(t)
	ctx := context.Background()
	if _, err := a.Admin.PauseQueue(ctx, &jobwirev1.PauseQueueRequest{Queue: "mail"}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Admin.ForceBreaker(ctx, &jobwirev1.ForceBreakerRequest{Type: "pay", State: jobwirev1.BreakerState_BREAKER_STATE_OPEN}); err != nil {
		t.Fatal(err)
	}
	idA, idB := answeringID(t, a), answeringID(t, b)
	if idA == "" || idA == idB {
		t.Fatalf("broker ids %q and %q, want two ids", idA, idB)
	}
	for name, x := range map[string]*brokertest.Bundle{"a": a, "b": b} {
		evs := auditEvents(t, x, &jobwirev1.ListAuditEventsRequest{})
		if len(evs) != 2 || evs[0].GetAction() != "breaker.force" || evs[0].GetBrokerId() != idB ||
			evs[1].GetAction() != "queue.pause" || evs[1].GetBrokerId() != idA {
			t.Errorf("broker %s lists %v, want the force on %s after the pause on %s", name, evs, idB, idA)
		}
	}
}

// A purge of succeeded jobs deletes in batches, each its own write: its one audit event counts
// the jobs of every batch.
func TestPurgeInManyBatchesIsOneEventCountingThemAll(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{Commit: brokertest.GroupCommit()})
	ctx := context.Background()
	const n = 1234 // three batches of at most 500
	specs := make([]*jobwirev1.JobSpec, n)
	for i := range specs {
		specs[i] = &jobwirev1.JobSpec{Type: "t"}
	}
	if _, err := b.Producer.EnqueueBatch(ctx, &jobwirev1.EnqueueBatchRequest{Jobs: specs}); err != nil {
		t.Fatal(err)
	}
	w, err := worker.New(b.Conn, worker.Options{ID: "w1", Concurrency: 64})
	if err != nil {
		t.Fatal(err)
	}
	w.Handle("t", func(context.Context, *worker.Job) error { return nil })
	wctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	brokertest.WaitFor(t, "every job to succeed", func() bool {
		st, err := b.Admin.GetStats(ctx, &jobwirev1.GetStatsRequest{})
		if err != nil {
			return false
		}
		var succeeded int64
		for _, c := range st.GetCounts() {
			if c.GetState() == jobwirev1.JobState_JOB_STATE_SUCCEEDED {
				succeeded += c.GetCount()
			}
		}
		return succeeded == n
	})
	stop()
	<-done
	b.Clock.Advance(time.Hour)
	res, err := b.Admin.PurgeFinishedJobs(ctx, &jobwirev1.PurgeFinishedJobsRequest{OlderThan: durationpb.New(time.Minute)})
	if err != nil || res.GetPurged() != n {
		t.Fatalf("purge answered %v, %v; want %d deleted", res, err, n)
	}
	if e := onlyAudit(t, b, "jobs.purge_succeeded"); e.GetCount() != n {
		t.Fatalf("the purge's audit event counts %d jobs, want %d", e.GetCount(), n)
	}
}
