package client

import (
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/brokerset"
)

func unreached(t *testing.T, applied string) error {
	t.Helper()
	st, err := status.New(codes.Unavailable, "the broker cannot reach its database").WithDetails(&errdetails.ErrorInfo{
		Reason: brokerset.ReasonUnreached, Domain: brokerset.ErrorDomain, Metadata: map[string]string{brokerset.MetaApplied: applied}})
	if err != nil {
		t.Fatal(err)
	}
	return st.Err()
}

// A call goes to another broker only when that cannot store anything twice.
func TestMayResend(t *testing.T) {
	enqueue := jobwirev1.ProducerService_Enqueue_FullMethodName
	batch := jobwirev1.ProducerService_EnqueueBatch_FullMethodName
	plain := &jobwirev1.EnqueueRequest{Job: &jobwirev1.JobSpec{Type: "mail"}}
	withKey := &jobwirev1.EnqueueRequest{Job: &jobwirev1.JobSpec{Type: "mail", IdempotencyKey: "k"}}
	someKeys := &jobwirev1.EnqueueBatchRequest{Jobs: []*jobwirev1.JobSpec{{Type: "mail", IdempotencyKey: "k"}, {Type: "mail"}}}
	allKeys := &jobwirev1.EnqueueBatchRequest{Jobs: []*jobwirev1.JobSpec{{Type: "mail", IdempotencyKey: "k"}, {Type: "mail", IdempotencyKey: "l"}}}
	tests := []struct {
		name   string
		method string
		req    any
		err    error
		want   bool
	}{
		{"not applied", enqueue, plain, unreached(t, brokerset.AppliedNo), true},
		{"maybe applied, no key", enqueue, plain, unreached(t, brokerset.AppliedUnknown), false},
		{"maybe applied, a key", enqueue, withKey, unreached(t, brokerset.AppliedUnknown), true},
		{"maybe applied, a batch with some keys", batch, someKeys, unreached(t, brokerset.AppliedUnknown), false},
		{"maybe applied, a batch with keys", batch, allKeys, unreached(t, brokerset.AppliedUnknown), true},
		{"no detail, no key", enqueue, plain, status.Error(codes.Unavailable, "connection reset"), false},
		{"no detail, a read", jobwirev1.AdminService_ListJobs_FullMethodName, &jobwirev1.ListJobsRequest{}, status.Error(codes.Unavailable, "connection reset"), true},
		{"no detail, a cancel", jobwirev1.ProducerService_CancelJob_FullMethodName, &jobwirev1.CancelJobRequest{Id: 1}, status.Error(codes.Unavailable, "connection reset"), false},
		{"another code", jobwirev1.AdminService_ListJobs_FullMethodName, &jobwirev1.ListJobsRequest{}, status.Error(codes.DeadlineExceeded, "late"), false},
	}
	for _, tt := range tests {
		if got := mayResend(tt.method, tt.req, tt.err); got != tt.want {
			t.Errorf("%s: mayResend = %v, want %v", tt.name, got, tt.want)
		}
	}
}
