// Package brokerset names the gRPC channels that spread over several brokers of one database
// (client.DialBrokers), so that a worker made on one can say that it may be moved to another
// broker (Hello.movable).
package brokerset

import (
	"fmt"
	"strconv"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

const prefix = "jobwire-brokers-"

// Scheme is the resolver scheme of the n-th such channel of the process: unique, because gRPC
// keeps a channel's resolver by its scheme.
func Scheme(n int64) string { return fmt.Sprintf("%s%d", prefix, n) }

// Target is the target of a channel with this scheme over this many brokers.
func Target(scheme string, brokers int) string { return fmt.Sprintf("%s:///%d", scheme, brokers) }

// Spans reports whether a channel with this target spreads over several brokers.
func Spans(target string) bool {
	scheme, n, ok := strings.Cut(target, ":///")
	if !ok || !strings.HasPrefix(scheme, prefix) {
		return false
	}
	brokers, err := strconv.Atoi(n)
	return err == nil && brokers > 1
}

// A broker that cannot reach its database answers UNAVAILABLE with a google.rpc.ErrorInfo of
// ErrorDomain and ReasonUnreached, whose MetaApplied says whether the call may have been
// applied: AppliedNo (it was refused, or withdrawn before its write was sent), or
// AppliedUnknown (its write was in a transaction whose outcome is not known). A client spread
// over several brokers resends the first kind to another broker, and the second only when
// storing it twice is harmless (an enqueue whose jobs carry idempotency keys).
const (
	ErrorDomain     = "jobwire.dev"
	ReasonUnreached = "DATABASE_UNREACHABLE"
	MetaApplied     = "applied"
	AppliedNo       = "no"
	AppliedUnknown  = "unknown"
)

// NotApplied reports whether err is a broker's UNAVAILABLE saying that nothing of the call was
// applied (AppliedNo), so that sending it again, to this broker or another, cannot store
// anything twice.
func NotApplied(err error) bool {
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.Unavailable {
		return false
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == ErrorDomain &&
			info.GetReason() == ReasonUnreached {
			return info.GetMetadata()[MetaApplied] == AppliedNo
		}
	}
	return false
}
