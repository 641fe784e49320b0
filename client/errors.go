package client

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Sentinel errors for the broker's answers that callers most often branch on. Every error a
// Client method returns after reaching the broker is an *Error, and errors.Is matches it against
// these by its gRPC code, so callers need not import grpc/codes (and against ErrTLS and ErrAuth
// as Classify does):
//
//	if errors.Is(err, client.ErrNotFound) { ... }
var (
	// ErrNotFound: the job, queue or breaker does not exist.
	ErrNotFound = errors.New("jobwire: not found")
	// ErrInvalidArgument: the request was malformed (bad type name, payload too large, ...).
	// Retrying the same request cannot succeed.
	ErrInvalidArgument = errors.New("jobwire: invalid argument")
	// ErrFailedPrecondition: the request was well formed but the target is in the wrong state,
	// for example cancelling a job that has already finished.
	ErrFailedPrecondition = errors.New("jobwire: failed precondition")
	// ErrAlreadyExists: the broker refused to create something that exists.
	ErrAlreadyExists = errors.New("jobwire: already exists")
	// ErrIdempotencyConflict: an enqueue's idempotency key already names a job of its type whose
	// queue, payload, priority, max attempts or attempt timeout differ from the request (the
	// message names the job and what differs). Nothing was stored, and repeating the request
	// cannot succeed: send the original content, or use another key. It also matches
	// ErrAlreadyExists.
	ErrIdempotencyConflict = errors.New("jobwire: idempotency key names a different job")
	// ErrUnavailable: the broker could not be reached or is shutting down. The request may be
	// retried; an Enqueue retried after this error should carry an idempotency key.
	ErrUnavailable = errors.New("jobwire: broker unavailable")
	// ErrResourceExhausted: the broker is overloaded or a limit was hit.
	ErrResourceExhausted = errors.New("jobwire: resource exhausted")
)

// Error is a failed call to the broker. It keeps the gRPC code and the broker's own message so
// that a caller can show the broker's words and still branch with errors.Is on the sentinels
// above, or on context.Canceled and context.DeadlineExceeded when the call's context ended.
type Error struct {
	// Op is the Client method that failed, such as "Enqueue".
	Op string
	// Code is the gRPC status code the broker (or the transport) answered with.
	Code codes.Code
	// Message is the broker's message, unchanged.
	Message string

	err error // the original status error, kept for status.FromError and errors.Unwrap
}

func (e *Error) Error() string {
	return fmt.Sprintf("jobwire: %s: %s (%s)", e.Op, e.Message, codeName(e.Code))
}

// Unwrap returns the underlying gRPC status error, so status.FromError and status.Code keep
// working on errors returned by this package.
func (e *Error) Unwrap() error { return e.err }

// Is reports whether target is the sentinel for e's code.
func (e *Error) Is(target error) bool {
	switch target {
	case ErrNotFound:
		return e.Code == codes.NotFound
	case ErrInvalidArgument:
		return e.Code == codes.InvalidArgument || e.Code == codes.OutOfRange
	case ErrFailedPrecondition:
		return e.Code == codes.FailedPrecondition
	case ErrAlreadyExists:
		return e.Code == codes.AlreadyExists
	case ErrIdempotencyConflict:
		return e.Code == codes.AlreadyExists && strings.HasPrefix(e.Op, "Enqueue")
	case ErrUnavailable:
		return e.Code == codes.Unavailable
	case ErrResourceExhausted:
		return e.Code == codes.ResourceExhausted
	case ErrTLS, ErrAuth:
		ce := Classify(e.err)
		return ce != nil && ce.Kind == target
	case context.Canceled:
		return e.Code == codes.Canceled
	case context.DeadlineExceeded:
		return e.Code == codes.DeadlineExceeded
	}
	return false
}

// codeName spells a code the way the gRPC specification does (NOT_FOUND), which is what
// operators search logs for.
func codeName(c codes.Code) string {
	switch c {
	case codes.OK:
		return "OK"
	case codes.Canceled:
		return "CANCELLED"
	case codes.Unknown:
		return "UNKNOWN"
	case codes.InvalidArgument:
		return "INVALID_ARGUMENT"
	case codes.DeadlineExceeded:
		return "DEADLINE_EXCEEDED"
	case codes.NotFound:
		return "NOT_FOUND"
	case codes.AlreadyExists:
		return "ALREADY_EXISTS"
	case codes.PermissionDenied:
		return "PERMISSION_DENIED"
	case codes.ResourceExhausted:
		return "RESOURCE_EXHAUSTED"
	case codes.FailedPrecondition:
		return "FAILED_PRECONDITION"
	case codes.Aborted:
		return "ABORTED"
	case codes.OutOfRange:
		return "OUT_OF_RANGE"
	case codes.Unimplemented:
		return "UNIMPLEMENTED"
	case codes.Internal:
		return "INTERNAL"
	case codes.Unavailable:
		return "UNAVAILABLE"
	case codes.DataLoss:
		return "DATA_LOSS"
	case codes.Unauthenticated:
		return "UNAUTHENTICATED"
	}
	return c.String()
}

// wrapErr turns an error from a generated stub into an *Error. Errors that carry no gRPC
// status (which grpc-go does not normally return) are classified by status.FromError as
// UNKNOWN, with their text as the message.
func wrapErr(op string, err error) error {
	if err == nil {
		return nil
	}
	st, _ := status.FromError(err)
	return &Error{Op: op, Code: st.Code(), Message: st.Message(), err: err}
}

// invalidArg builds the error for a request rejected before it was sent, shaped like the
// broker's own INVALID_ARGUMENT so callers handle both the same way.
func invalidArg(op, format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	return &Error{Op: op, Code: codes.InvalidArgument, Message: msg, err: status.Error(codes.InvalidArgument, msg)}
}
