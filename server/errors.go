package server

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/jobwire/jobwire/breaker"
	"github.com/jobwire/jobwire/broker"
)

// toStatus maps a domain error to the gRPC status a caller sees. It is the one place that
// decides those codes.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	if u, ok := asUnreached(err); ok {
		return unreachedStatus(u)
	}
	switch {
	case errors.Is(err, broker.ErrNotFound):
		return status.Error(codes.NotFound, err.Error())
	case errors.Is(err, broker.ErrBusy):
		return status.Errorf(codes.Unavailable, "%v; the broker is fine and nothing was changed by this call: retry it shortly", err)
	case errors.Is(err, broker.ErrUnavailable):
		return status.Errorf(codes.Unavailable, "%v; the call was not applied: retry it once the broker's storage is back (its log says what an operator must fix)", err)
	case errors.Is(err, broker.ErrIdempotencyConflict), errors.Is(err, broker.ErrScheduleExists):
		return status.Error(codes.AlreadyExists, err.Error())
	case errors.Is(err, broker.ErrInvalidSchedule), errors.Is(err, broker.ErrBadConcurrencyRule),
		errors.Is(err, broker.ErrInvalidRateLimit), errors.Is(err, breaker.ErrEmptyType),
		errors.Is(err, breaker.ErrInvalidState):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, broker.ErrNotDead), errors.Is(err, broker.ErrFinished), errors.Is(err, broker.ErrNotWaiting),
		errors.Is(err, broker.ErrBatchClosed),
		errors.Is(err, broker.ErrScheduleFromConfig), errors.Is(err, breaker.ErrDisabled):
		return status.Error(codes.FailedPrecondition, err.Error())
	case errors.Is(err, broker.ErrTooManyCappedQueues):
		return status.Error(codes.ResourceExhausted, err.Error())
	case errors.Is(err, broker.ErrShuttingDown):
		return status.Error(codes.Unavailable, "the broker is shutting down; retry against it once it is back")
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	}
	return status.Error(codes.Internal, err.Error())
}
