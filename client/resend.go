package client

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/brokerset"
)

// A connection spread over several brokers (DialBrokers) sends a call that a broker answered
// UNAVAILABLE to another broker when doing so cannot store anything twice: the broker said
// nothing of the call was applied (brokerset.AppliedNo: it cannot reach its database and
// refused or withdrew the call), the call only reads or sets a state, or it enqueues jobs that
// all carry idempotency keys. Any other UNAVAILABLE (an enqueue without keys whose outcome is
// not known) is returned to the caller, who alone can decide.

// resendTries is how many times, per broker, a call may be sent before its UNAVAILABLE is
// returned: gRPC's round robin sends each try to the next broker, and a broker that cannot
// reach its database says so on its health service, which takes it out of the rotation.
const resendTries = 2

// resendable lists the calls that may always be sent again: they read, or set a state to a
// value given in the request.
var resendable = map[string]bool{
	jobwirev1.ProducerService_GetJob_FullMethodName:     true,
	jobwirev1.AdminService_ListJobs_FullMethodName:      true,
	jobwirev1.AdminService_ListDeadJobs_FullMethodName:  true,
	jobwirev1.AdminService_TopDeadErrors_FullMethodName: true,
	jobwirev1.AdminService_ListQueues_FullMethodName:    true,
	jobwirev1.AdminService_PauseQueue_FullMethodName:    true,
	jobwirev1.AdminService_ResumeQueue_FullMethodName:   true,
	jobwirev1.AdminService_SetQueueLimit_FullMethodName: true,
	jobwirev1.AdminService_GetStats_FullMethodName:      true,
	jobwirev1.AdminService_ListBreakers_FullMethodName:  true,
	jobwirev1.AdminService_ResetBreaker_FullMethodName:  true,
	jobwirev1.AdminService_ForceBreaker_FullMethodName:  true,
	jobwirev1.AdminService_ListWorkers_FullMethodName:   true,
	jobwirev1.AdminService_ListBrokers_FullMethodName:   true,
	jobwirev1.TokenService_ListTokens_FullMethodName:    true,
}

// resendElsewhere is the unary interceptor of a connection spread over brokers: it sends a call
// again, up to tries times in all, while its UNAVAILABLE allows (mayResend).
func resendElsewhere(tries int) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		for try := 1; ; try++ {
			err := invoker(ctx, method, req, reply, cc, opts...)
			if err == nil || try >= tries || ctx.Err() != nil || !mayResend(method, req, err) {
				return err
			}
		}
	}
}

// mayResend reports whether a call of method with req that failed with err can go to another
// broker without being stored twice.
func mayResend(method string, req any, err error) bool {
	st, _ := status.FromError(err)
	if st.Code() != codes.Unavailable {
		return false
	}
	return brokerset.NotApplied(err) || resendable[method] || keyed(req)
}

// keyed reports whether req enqueues only jobs with idempotency keys, which a second broker
// finds stored if the first stored them.
func keyed(req any) bool {
	switch r := req.(type) {
	case *jobwirev1.EnqueueRequest:
		return r.GetJob().GetIdempotencyKey() != ""
	case *jobwirev1.EnqueueBatchRequest:
		for _, j := range r.GetJobs() {
			if j.GetIdempotencyKey() == "" {
				return false
			}
		}
		return len(r.GetJobs()) > 0
	}
	return false
}
