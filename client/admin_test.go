package client

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/job"
)

func TestAdminCallsBuildTheirRequests(t *testing.T) {
	t.Parallel()
	after := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	before := after.Add(24 * time.Hour)
	filter := &DeadJobFilter{Queue: "mail", Type: "email.send", Reason: job.DeadFatal, ErrorType: "SMTPError", DeadAfter: after, DeadBefore: before}
	pbFilter := &jobwirev1.DeadJobFilter{Queue: "mail", Type: "email.send", Reason: jobwirev1.DeadReason_DEAD_REASON_FATAL,
		ErrorType: "SMTPError", DeadAfter: timestamppb.New(after), DeadBefore: timestamppb.New(before)}
	prio := 7
	prio32 := int32(7)

	tests := []struct {
		method string
		call   func(context.Context, *Client) error
		resp   proto.Message
		want   proto.Message
	}{
		{"ListJobs", func(ctx context.Context, c *Client) error {
			_, err := c.ListJobs(ctx, &ListJobsParams{State: job.StateRunning, Queue: "q", Type: "t", Sort: "run_at", Ascending: true, PageSize: 50, PageToken: "p2"})
			return err
		}, &jobwirev1.ListJobsResponse{}, &jobwirev1.ListJobsRequest{State: jobwirev1.JobState_JOB_STATE_RUNNING, Queue: "q", Type: "t", Sort: "run_at", Ascending: true, PageSize: 50, PageToken: "p2"}},
		{"ListDeadJobs", func(ctx context.Context, c *Client) error {
			_, err := c.ListDeadJobs(ctx, &ListDeadJobsParams{Filter: *filter, Sort: "type", PageSize: 10})
			return err
		}, &jobwirev1.ListDeadJobsResponse{}, &jobwirev1.ListDeadJobsRequest{Filter: pbFilter, Sort: "type", PageSize: 10}},
		{"RequeueDeadJobs", func(ctx context.Context, c *Client) error {
			_, err := c.RequeueDeadJobs(ctx, &RequeueParams{Selection: Selection{IDs: []int64{4}}, Priority: &prio, Payload: []byte("{}"), RunAt: after})
			return err
		}, &jobwirev1.RequeueDeadJobsResponse{}, &jobwirev1.RequeueDeadJobsRequest{
			Selection: &jobwirev1.BulkSelection{Ids: []int64{4}}, Priority: &prio32, Payload: []byte("{}"), RunAt: timestamppb.New(after)}},
		{"RequeueDeadJobs", func(ctx context.Context, c *Client) error {
			_, err := c.RequeueDeadJobs(ctx, &RequeueParams{Selection: Selection{Filter: filter, Limit: 500, Preview: true}})
			return err
		}, &jobwirev1.RequeueDeadJobsResponse{}, &jobwirev1.RequeueDeadJobsRequest{
			Selection: &jobwirev1.BulkSelection{Filter: pbFilter, Limit: 500, Preview: true}}},
		{"PurgeDeadJobs", func(ctx context.Context, c *Client) error {
			_, err := c.PurgeDeadJobs(ctx, &Selection{Filter: &DeadJobFilter{}, Preview: true})
			return err
		}, &jobwirev1.PurgeDeadJobsResponse{}, &jobwirev1.PurgeDeadJobsRequest{Selection: &jobwirev1.BulkSelection{Filter: &jobwirev1.DeadJobFilter{}, Preview: true}}},
		{"TopDeadErrors", func(ctx context.Context, c *Client) error {
			_, err := c.TopDeadErrors(ctx, &DeadJobFilter{Queue: "mail"}, 5)
			return err
		}, &jobwirev1.TopDeadErrorsResponse{}, &jobwirev1.TopDeadErrorsRequest{Filter: &jobwirev1.DeadJobFilter{Queue: "mail"}, Limit: 5}},
		{"PurgeFinishedJobs", func(ctx context.Context, c *Client) error {
			_, err := c.PurgeFinishedJobs(ctx, 72*time.Hour)
			return err
		}, &jobwirev1.PurgeFinishedJobsResponse{}, &jobwirev1.PurgeFinishedJobsRequest{OlderThan: durationpb.New(72 * time.Hour)}},
		{"ListQueues", func(ctx context.Context, c *Client) error {
			_, err := c.ListQueues(ctx)
			return err
		}, &jobwirev1.ListQueuesResponse{}, &jobwirev1.ListQueuesRequest{}},
		{"PauseQueue", func(ctx context.Context, c *Client) error {
			_, err := c.PauseQueue(ctx, "mail")
			return err
		}, &jobwirev1.PauseQueueResponse{}, &jobwirev1.PauseQueueRequest{Queue: "mail"}},
		{"ResumeQueue", func(ctx context.Context, c *Client) error {
			_, err := c.ResumeQueue(ctx, "mail")
			return err
		}, &jobwirev1.ResumeQueueResponse{}, &jobwirev1.ResumeQueueRequest{Queue: "mail"}},
		{"SetQueueLimit", func(ctx context.Context, c *Client) error {
			_, err := c.SetQueueLimit(ctx, "mail", 4)
			return err
		}, &jobwirev1.SetQueueLimitResponse{}, &jobwirev1.SetQueueLimitRequest{Queue: "mail", Limit: 4}},
		{"GetStats", func(ctx context.Context, c *Client) error {
			_, err := c.GetStats(ctx)
			return err
		}, &jobwirev1.GetStatsResponse{}, &jobwirev1.GetStatsRequest{}},
		{"ListBreakers", func(ctx context.Context, c *Client) error {
			_, err := c.ListBreakers(ctx)
			return err
		}, &jobwirev1.ListBreakersResponse{}, &jobwirev1.ListBreakersRequest{}},
		{"ResetBreaker", func(ctx context.Context, c *Client) error {
			_, err := c.ResetBreaker(ctx, "email.send")
			return err
		}, &jobwirev1.ResetBreakerResponse{}, &jobwirev1.ResetBreakerRequest{Type: "email.send"}},
		{"ForceBreaker", func(ctx context.Context, c *Client) error {
			_, err := c.ForceBreaker(ctx, "email.send", BreakerHalfOpen)
			return err
		}, &jobwirev1.ForceBreakerResponse{}, &jobwirev1.ForceBreakerRequest{Type: "email.send", State: jobwirev1.BreakerState_BREAKER_STATE_HALF_OPEN}},
	}
	for i, tt := range tests {
		t.Run(fmt.Sprintf("%d_%s", i, tt.method), func(t *testing.T) {
			t.Parallel()
			b := setup(t, map[string]handler{tt.method: reply(tt.resp)})
			if err := tt.call(t.Context(), b.client); err != nil {
				t.Fatal(err)
			}
			assertProto(t, b.broker.lastRequest(t, tt.method), tt.want)
		})
	}
}

func TestAdminCallsKeepTheOperationInErrors(t *testing.T) {
	t.Parallel()
	b := setup(t, map[string]handler{"PauseQueue": fail(status.Error(codes.NotFound, `queue "nope" not found`))})
	_, err := b.client.PauseQueue(t.Context(), "nope")
	var cerr *Error
	if !errors.As(err, &cerr) || cerr.Op != "PauseQueue" || !errors.Is(err, ErrNotFound) {
		t.Fatalf("got %v, want a PauseQueue *Error matching ErrNotFound", err)
	}
}

func TestAdminCallsRefuseLocallyWhatCannotBeSent(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := t.Context()
	tests := []struct {
		name string
		call func() error
	}{
		{"ids and filter", func() error {
			_, err := b.client.PurgeDeadJobs(ctx, &Selection{IDs: []int64{1}, Filter: &DeadJobFilter{}})
			return err
		}},
		{"payload for two ids", func() error {
			_, err := b.client.RequeueDeadJobs(ctx, &RequeueParams{Selection: Selection{IDs: []int64{1, 2}}, Payload: []byte("{}")})
			return err
		}},
		{"payload for a filter", func() error {
			_, err := b.client.RequeueDeadJobs(ctx, &RequeueParams{Selection: Selection{Filter: &DeadJobFilter{}}, Payload: []byte("{}")})
			return err
		}},
		{"nil requeue params", func() error {
			_, err := b.client.RequeueDeadJobs(ctx, nil)
			return err
		}},
		{"nil purge selection", func() error {
			_, err := b.client.PurgeDeadJobs(ctx, nil)
			return err
		}},
		{"zero retention", func() error {
			_, err := b.client.PurgeFinishedJobs(ctx, 0)
			return err
		}},
		{"unknown breaker state", func() error {
			_, err := b.client.ForceBreaker(ctx, "t", 0)
			return err
		}},
		{"page size wraps int32", func() error {
			_, err := b.client.ListJobs(ctx, &ListJobsParams{PageSize: 1 << 40})
			return err
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.call(); !errors.Is(err, ErrInvalidArgument) {
				t.Fatalf("got %v, want ErrInvalidArgument", err)
			}
		})
	}
	for _, m := range []string{"PurgeDeadJobs", "RequeueDeadJobs", "PurgeFinishedJobs", "ForceBreaker", "ListJobs"} {
		if n := len(b.broker.requests(m)); n != 0 {
			t.Errorf("broker received %d %s requests, want none", n, m)
		}
	}
}

func TestAdminResponsesAreConverted(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	pbQueue := &jobwirev1.QueueInfo{
		Name: "mail", Paused: true, ConcurrencyLimit: 3, Running: 2, OldestReadyAge: durationpb.New(90 * time.Second),
		DepthByState: map[string]int64{"PENDING": 5, "JOB_STATE_SCHEDULED": 1, "dead": 4, "SOMETHING_NEW": 9},
	}
	b := setup(t, map[string]handler{
		"ListQueues": reply(&jobwirev1.ListQueuesResponse{Queues: []*jobwirev1.QueueInfo{pbQueue}}),
		"GetStats": reply(&jobwirev1.GetStatsResponse{
			Counts:         []*jobwirev1.StateCount{{Queue: "mail", Type: "email.send", State: jobwirev1.JobState_JOB_STATE_DEAD, Count: 4}},
			Recent:         []*jobwirev1.RecentCounts{{Window: durationpb.New(time.Minute), Succeeded: 10, Failed: 2, Dead: 1}},
			Queues:         []*jobwirev1.QueueInfo{pbQueue},
			StorageRetries: map[string]int64{"SQLITE_BUSY": 3},
		}),
		"ListBreakers": reply(&jobwirev1.ListBreakersResponse{Breakers: []*jobwirev1.BreakerInfo{{
			Type: "email.send", State: jobwirev1.BreakerState_BREAKER_STATE_OPEN, FailuresInWindow: 12,
			OpenedAt: timestamppb.New(t0), NextProbeAt: timestamppb.New(t0.Add(30 * time.Second)), Generation: 3, ProbesInFlight: 1,
		}}}),
		"TopDeadErrors":     reply(&jobwirev1.TopDeadErrorsResponse{Groups: []*jobwirev1.ErrorGroup{{ErrorType: "SMTPError", Count: 40, LastSeen: timestamppb.New(t0), SampleMessage: "451"}}}),
		"RequeueDeadJobs":   reply(&jobwirev1.RequeueDeadJobsResponse{Matched: 3, Affected: 0, Sample: []*jobwirev1.Job{{Id: 1}, {Id: 2}}}),
		"PurgeFinishedJobs": reply(&jobwirev1.PurgeFinishedJobsResponse{Purged: 1234}),
		"ListWorkers": reply(&jobwirev1.ListWorkersResponse{Workers: []*jobwirev1.WorkerInfo{{
			SessionId: "s1", WorkerId: "mailer-1", JobTypes: []string{"email.send"}, Capacity: 8,
			LeasesHeld: 3, Running: 2, Draining: true, ConnectedAt: timestamppb.New(t0),
		}}}),
		"ListBrokers": reply(&jobwirev1.ListBrokersResponse{Brokers: []*jobwirev1.BrokerEntry{{
			Id: "7", Addr: "10.0.0.5:7070", Host: "db-a", Pid: 4242, StartedAt: timestamppb.New(t0),
			LastSeen: timestamppb.New(t0.Add(time.Minute)), Leader: true, Alive: true, Answering: true,
		}}}),
	})
	ctx := t.Context()

	queues, err := b.client.ListQueues(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wantDepth := map[job.State]int64{job.StatePending: 5, job.StateScheduled: 1, job.StateDead: 4}
	if len(queues) != 1 {
		t.Fatalf("got %d queues, want 1", len(queues))
	}
	q := queues[0]
	if q.Name != "mail" || !q.Paused || q.ConcurrencyLimit != 3 || q.Running != 2 || q.OldestReadyAge != 90*time.Second || fmt.Sprint(q.DepthByState) != fmt.Sprint(wantDepth) {
		t.Errorf("queue = %+v, want depth %v", q, wantDepth)
	}

	stats, err := b.client.GetStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(stats.Counts) != 1 || stats.Counts[0] != (StateCount{Queue: "mail", Type: "email.send", State: job.StateDead, Count: 4}) ||
		len(stats.Recent) != 1 || stats.Recent[0] != (RecentCounts{Window: time.Minute, Succeeded: 10, Failed: 2, Dead: 1}) ||
		len(stats.Queues) != 1 || stats.StorageRetries["SQLITE_BUSY"] != 3 {
		t.Errorf("stats = %+v", stats)
	}

	breakers, err := b.client.ListBreakers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wantBreaker := Breaker{Type: "email.send", State: BreakerOpen, FailuresInWindow: 12, OpenedAt: t0, NextProbeAt: t0.Add(30 * time.Second), Generation: 3, ProbesInFlight: 1}
	if len(breakers) != 1 || breakers[0] != wantBreaker {
		t.Errorf("breakers = %+v, want [%+v]", breakers, wantBreaker)
	}

	groups, err := b.client.TopDeadErrors(ctx, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(groups) != 1 || groups[0] != (ErrorGroup{ErrorType: "SMTPError", Count: 40, LastSeen: t0, SampleMessage: "451"}) {
		t.Errorf("groups = %+v", groups)
	}
	assertProto(t, b.broker.lastRequest(t, "TopDeadErrors"), &jobwirev1.TopDeadErrorsRequest{})

	res, err := b.client.RequeueDeadJobs(ctx, &RequeueParams{Selection: Selection{Filter: &DeadJobFilter{}, Preview: true}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Matched != 3 || res.Affected != 0 || len(res.Sample) != 2 || res.Sample[1].ID != 2 {
		t.Errorf("bulk result = %+v", res)
	}

	purged, err := b.client.PurgeFinishedJobs(ctx, time.Hour)
	if err != nil || purged != 1234 {
		t.Errorf("PurgeFinishedJobs = %d, %v; want 1234", purged, err)
	}

	workers, err := b.client.ListWorkers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wantWorker := Worker{SessionID: "s1", WorkerID: "mailer-1", JobTypes: []string{"email.send"}, Capacity: 8,
		LeasesHeld: 3, Running: 2, Draining: true, ConnectedAt: t0}
	if len(workers) != 1 || fmt.Sprintf("%+v", workers[0]) != fmt.Sprintf("%+v", wantWorker) {
		t.Errorf("workers = %+v, want [%+v]", workers, wantWorker)
	}

	brokers, err := b.client.ListBrokers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wantBroker := BrokerEntry{ID: "7", Addr: "10.0.0.5:7070", Host: "db-a", PID: 4242, StartedAt: t0,
		LastSeen: t0.Add(time.Minute), Leader: true, Alive: true, Answering: true}
	if len(brokers) != 1 || fmt.Sprintf("%+v", brokers[0]) != fmt.Sprintf("%+v", wantBroker) {
		t.Errorf("brokers = %+v, want [%+v]", brokers, wantBroker)
	}
}

// pagedBroker serves ListJobs from pages keyed by token; "" is the first page.
func pagedBroker(t *testing.T, pages map[string]*jobwirev1.ListJobsResponse) *testBundle {
	return setup(t, map[string]handler{"ListJobs": func(req proto.Message) (proto.Message, error) {
		p, ok := pages[req.(*jobwirev1.ListJobsRequest).GetPageToken()]
		if !ok {
			return nil, status.Error(codes.InvalidArgument, "bad page token")
		}
		return p, nil
	}})
}

func TestAllJobsWalksEveryPage(t *testing.T) {
	t.Parallel()
	b := pagedBroker(t, map[string]*jobwirev1.ListJobsResponse{
		"":   {Jobs: []*jobwirev1.Job{{Id: 1}, {Id: 2}}, NextPageToken: "p2"},
		"p2": {Jobs: []*jobwirev1.Job{{Id: 3}}, NextPageToken: "p3"},
		"p3": {Jobs: []*jobwirev1.Job{{Id: 4}}},
	})
	var ids []int64
	for j, err := range b.client.AllJobs(t.Context(), &ListJobsParams{Queue: "q", PageSize: 2}) {
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, j.ID)
	}
	if fmt.Sprint(ids) != "[1 2 3 4]" {
		t.Errorf("ids = %v, want [1 2 3 4]", ids)
	}
	reqs := b.broker.requests("ListJobs")
	if len(reqs) != 3 {
		t.Fatalf("made %d requests, want 3", len(reqs))
	}
	assertProto(t, reqs[2], &jobwirev1.ListJobsRequest{Queue: "q", PageSize: 2, PageToken: "p3"})
}

func TestAllJobsStopsWhenTheLoopBreaks(t *testing.T) {
	t.Parallel()
	b := pagedBroker(t, map[string]*jobwirev1.ListJobsResponse{
		"":   {Jobs: []*jobwirev1.Job{{Id: 1}, {Id: 2}}, NextPageToken: "p2"},
		"p2": {Jobs: []*jobwirev1.Job{{Id: 3}}},
	})
	for j, err := range b.client.AllJobs(t.Context(), nil) {
		if err != nil {
			t.Fatal(err)
		}
		if j.ID == 1 {
			break
		}
	}
	if n := len(b.broker.requests("ListJobs")); n != 1 {
		t.Errorf("made %d requests after breaking on the first page, want 1", n)
	}
}

func TestAllJobsYieldsErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		pages map[string]*jobwirev1.ListJobsResponse
		want  string
	}{
		{"broker error on page two", map[string]*jobwirev1.ListJobsResponse{"": {Jobs: []*jobwirev1.Job{{Id: 1}}, NextPageToken: "gone"}}, "bad page token"},
		{"token that never advances", map[string]*jobwirev1.ListJobsResponse{
			"":   {Jobs: []*jobwirev1.Job{{Id: 1}}, NextPageToken: "p2"},
			"p2": {Jobs: []*jobwirev1.Job{{Id: 2}}, NextPageToken: "p2"},
		}, "same page token"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := pagedBroker(t, tt.pages)
			var errs []error
			for _, err := range b.client.AllJobs(t.Context(), nil) {
				if err != nil {
					errs = append(errs, err)
				}
			}
			if len(errs) != 1 || !strings.Contains(errs[0].Error(), tt.want) {
				t.Errorf("errors = %v, want one containing %q", errs, tt.want)
			}
		})
	}
}

func TestAllDeadJobsKeepsTheFilterOnEveryPage(t *testing.T) {
	t.Parallel()
	b := setup(t, map[string]handler{"ListDeadJobs": func(req proto.Message) (proto.Message, error) {
		if req.(*jobwirev1.ListDeadJobsRequest).GetPageToken() == "" {
			return &jobwirev1.ListDeadJobsResponse{Jobs: []*jobwirev1.Job{{Id: 1}}, NextPageToken: "p2"}, nil
		}
		return &jobwirev1.ListDeadJobsResponse{Jobs: []*jobwirev1.Job{{Id: 2}}}, nil
	}})
	n := 0
	for _, err := range b.client.AllDeadJobs(t.Context(), &ListDeadJobsParams{Filter: DeadJobFilter{ErrorType: "E"}}) {
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	if n != 2 {
		t.Errorf("got %d jobs, want 2", n)
	}
	assertProto(t, b.broker.lastRequest(t, "ListDeadJobs"), &jobwirev1.ListDeadJobsRequest{Filter: &jobwirev1.DeadJobFilter{ErrorType: "E"}, PageToken: "p2"})
}

func TestParseBreakerState(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      string
		want    BreakerState
		wantErr bool
	}{
		{"closed", BreakerClosed, false},
		{"OPEN", BreakerOpen, false},
		{"half-open", BreakerHalfOpen, false},
		{"Half_Open", BreakerHalfOpen, false},
		{"ajar", 0, true},
		{"", 0, true},
	}
	for _, tt := range tests {
		got, err := ParseBreakerState(tt.in)
		if got != tt.want || (err != nil) != tt.wantErr {
			t.Errorf("ParseBreakerState(%q) = %v, %v; want %v, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}

// The client converts enums by casting, which is right only while job's numbering is the wire's.
func TestEnumNumberingMatchesTheWire(t *testing.T) {
	t.Parallel()
	for v, name := range jobwirev1.JobState_name {
		if v == 0 {
			continue
		}
		if got := job.State(v).String(); got != strings.TrimPrefix(name, "JOB_STATE_") {
			t.Errorf("job.State(%d) = %s, wire says %s", v, got, name)
		}
	}
	for v, name := range jobwirev1.DeadReason_name {
		if v == 0 {
			continue
		}
		if got := job.DeadReason(v).String(); got != strings.TrimPrefix(name, "DEAD_REASON_") {
			t.Errorf("job.DeadReason(%d) = %s, wire says %s", v, got, name)
		}
	}
	for v, name := range jobwirev1.AttemptOutcome_name {
		if v == 0 {
			continue
		}
		if got := job.Outcome(v).String(); got != strings.TrimPrefix(name, "ATTEMPT_OUTCOME_") {
			t.Errorf("job.Outcome(%d) = %s, wire says %s", v, got, name)
		}
	}
	for v, name := range jobwirev1.FailureKind_name {
		if got := job.FailureKind(v).String(); got != strings.TrimPrefix(name, "FAILURE_KIND_") {
			t.Errorf("job.FailureKind(%d) = %s, wire says %s", v, got, name)
		}
	}
	for v, name := range jobwirev1.BreakerState_name {
		if v == 0 {
			continue
		}
		if got := BreakerState(v).String(); got != strings.TrimPrefix(name, "BREAKER_STATE_") {
			t.Errorf("BreakerState(%d) = %s, wire says %s", v, got, name)
		}
	}
}

func TestDial(t *testing.T) {
	t.Parallel()
	t.Run("empty address", func(t *testing.T) {
		t.Parallel()
		if _, err := Dial(t.Context(), ""); err == nil {
			t.Fatal("Dial with an empty address succeeded")
		}
	})
	t.Run("block reaches a live broker", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		c, err := Dial(ctx, b.addr, WithBlock())
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("block gives up when the context ends", func(t *testing.T) {
		t.Parallel()
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := lis.Addr().String()
		_ = lis.Close()
		ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
		defer cancel()
		if _, err := Dial(ctx, addr, WithBlock()); !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), addr) {
			t.Fatalf("got %v, want a deadline error naming %s", err, addr)
		}
	})
	t.Run("cancelled context", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		if _, err := Dial(ctx, "127.0.0.1:1"); !errors.Is(err, context.Canceled) {
			t.Fatalf("got %v, want context.Canceled", err)
		}
	})
}

func TestNewLeavesTheConnectionOpen(t *testing.T) {
	t.Parallel()
	b := setup(t, map[string]handler{"GetJob": reply(&jobwirev1.GetJobResponse{Job: &jobwirev1.Job{Id: 1}})})
	c := New(b.client.Conn())
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := b.client.Get(t.Context(), 1); err != nil {
		t.Fatalf("the shared connection was closed: %v", err)
	}
}
