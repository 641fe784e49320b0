package server

import (
	"testing"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/clock"
)

// fuzzRequests are the requests with validation rules; the fuzzer picks one by index and
// decodes its bytes into it.
func fuzzRequests() []proto.Message {
	return []proto.Message{
		&jobwirev1.EnqueueRequest{}, &jobwirev1.EnqueueBatchRequest{}, &jobwirev1.GetJobRequest{},
		&jobwirev1.CancelJobRequest{}, &jobwirev1.ListJobsRequest{}, &jobwirev1.ListDeadJobsRequest{},
		&jobwirev1.RequeueDeadJobsRequest{}, &jobwirev1.PurgeDeadJobsRequest{}, &jobwirev1.TopDeadErrorsRequest{},
		&jobwirev1.PurgeFinishedJobsRequest{}, &jobwirev1.PauseQueueRequest{}, &jobwirev1.SetQueueLimitRequest{},
		&jobwirev1.Hello{}, &jobwirev1.Heartbeat{}, &jobwirev1.ConnectRequestBatch{},
	}
}

// FuzzValidateRequest decodes arbitrary bytes into each request with rules and validates it:
// validation never panics, and refuses only with INVALID_ARGUMENT.
func FuzzValidateRequest(f *testing.F) {
	seeds := []proto.Message{
		&jobwirev1.EnqueueRequest{Job: &jobwirev1.JobSpec{Type: "email.send", Queue: "mail", Payload: []byte(`{}`),
			Priority: 5, MaxAttempts: 3, AttemptTimeout: durationpb.New(time.Minute)}},
		&jobwirev1.EnqueueBatchRequest{Jobs: []*jobwirev1.JobSpec{{Type: "a"}, {Type: "b", Queue: "q"}}},
		&jobwirev1.GetJobRequest{Id: 1},
		&jobwirev1.CancelJobRequest{Id: -1},
		&jobwirev1.ListJobsRequest{Queue: "q", PageSize: 10, PageToken: "!!"},
		&jobwirev1.ListDeadJobsRequest{Filter: &jobwirev1.DeadJobFilter{ErrorType: "E"}},
		&jobwirev1.RequeueDeadJobsRequest{Selection: &jobwirev1.BulkSelection{Ids: []int64{1, 2}}},
		&jobwirev1.PurgeDeadJobsRequest{Selection: &jobwirev1.BulkSelection{All: true, Preview: true}},
		&jobwirev1.TopDeadErrorsRequest{},
		&jobwirev1.PurgeFinishedJobsRequest{},
		&jobwirev1.PauseQueueRequest{Queue: "q"},
		&jobwirev1.SetQueueLimitRequest{Queue: "q", Limit: 3},
		&jobwirev1.Hello{WorkerId: "w", JobTypes: []string{"t"}, Capacity: 2,
			Held: []*jobwirev1.LeaseRef{{JobId: 1, LeaseToken: "1.00000000000000000000000000000000"}}},
		&jobwirev1.Heartbeat{Leases: []*jobwirev1.LeaseRef{{JobId: 1}, {JobId: 2}}},
		&jobwirev1.ConnectRequestBatch{Messages: []*jobwirev1.ConnectRequest{
			{Message: &jobwirev1.ConnectRequest_Started{Started: &jobwirev1.Started{JobId: 1, LeaseToken: "t"}}},
			{Message: &jobwirev1.ConnectRequest_Batch{Batch: &jobwirev1.ConnectRequestBatch{}}}}},
	}
	for i, m := range seeds {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(uint8(i), b)
	}
	s := &Server{limits: DefaultLimits().withDefaults(), clk: clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))}
	f.Fuzz(func(t *testing.T, kind uint8, data []byte) {
		reqs := fuzzRequests()
		req := reqs[int(kind)%len(reqs)]
		if err := proto.Unmarshal(data, req); err != nil {
			return // the transport refuses it before validation (see codec.go)
		}
		var err error
		switch r := req.(type) {
		case *jobwirev1.Hello:
			err = validateHello(r)
		case *jobwirev1.Heartbeat:
			err = validateHeartbeat(r, 4)
		case *jobwirev1.ConnectRequestBatch:
			err = validateRequestBatch(r)
		default:
			err = s.validate(req)
		}
		if err != nil && status.Code(err) != codes.InvalidArgument {
			t.Fatalf("%T %v: refused with %v, want INVALID_ARGUMENT", req, req, err)
		}
	})
}

// FuzzTruncate: a failure text is cut to its bound, stays valid UTF-8, and keeps short texts.
func FuzzTruncate(f *testing.F) {
	f.Add("plain", 10)
	f.Add("ééééééééééééééééééééééééééééééééééééééééé", 30)
	f.Add("\xff\xfe", 1)
	f.Fuzz(func(t *testing.T, s string, limit int) {
		limit = 1 + abs(limit)%4096
		got := truncate(s, limit)
		if len(got) > limit {
			t.Fatalf("truncate(%q, %d) = %d bytes", s, limit, len(got))
		}
		if len(s) <= limit && got != s {
			t.Fatalf("truncate(%q, %d) changed a text within the bound", s, limit)
		}
		if utf8.ValidString(s) && !utf8.ValidString(got) && limit >= 32 {
			t.Fatalf("truncate(%q, %d) = %q: not UTF-8", s, limit, got)
		}
	})
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}
