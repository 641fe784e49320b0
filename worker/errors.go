package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"reflect"
	"time"
)

// Causes attached to a handler's context when the SDK cancels it. Read them with
// context.Cause(ctx) and errors.Is.
var (
	// ErrJobCancelled: someone cancelled the job through the broker.
	ErrJobCancelled = errors.New("worker: job cancelled")
	// ErrAttemptTimeout: the attempt outlived its attempt timeout.
	ErrAttemptTimeout = errors.New("worker: attempt timeout exceeded")
	// ErrLeaseLost: the broker no longer considers this worker the job's holder (the lease
	// expired or was taken over), so any result would be refused. The worker also gives a lease
	// up by itself, with a cause that wraps ErrLeaseLost, once the lease's deadline passed on
	// its own clock without an extension (a broker frozen or cut off cannot say so).
	ErrLeaseLost = errors.New("worker: lease lost")
	// ErrShutdown: the worker is stopping and the shutdown grace period ran out.
	ErrShutdown = errors.New("worker: shutting down")
)

// Failure is how a handler error is reported to the broker.
type Failure struct {
	// Fatal means retrying cannot help (a code or payload bug): the broker sends the job to
	// the dead-letter queue at once. Otherwise the failure is transient and retried.
	Fatal bool
	// ErrorType names the kind of error, such as "*json.SyntaxError", "panic", or "error" for
	// one made only of errors.New and fmt.Errorf.
	ErrorType string
	// Message is err.Error().
	Message string
	// Details is free text for humans: the stack of a panic, or the error's %+v formatting when
	// that says more than Message.
	Details string
	// RetryAfter, when positive, replaces the broker's computed backoff.
	RetryAfter time.Duration
}

// Fatal marks err as fatal: the job will not be retried. Fatal(nil) is nil.
//
// Use it for failures that no retry can fix, such as a payload that names a customer who does
// not exist.
func Fatal(err error) error {
	if err == nil {
		return nil
	}
	return &fatalError{err: err}
}

type fatalError struct{ err error }

func (e *fatalError) Error() string { return e.err.Error() }
func (e *fatalError) Unwrap() error { return e.err }

// RetryAfter asks the broker to retry the job no sooner than d from now, instead of its computed
// backoff (the queue's maximum delay still applies). Use it when the failing dependency says when
// it will be ready again, such as an HTTP 429 with Retry-After. RetryAfter(nil, d) is nil.
func RetryAfter(err error, d time.Duration) error {
	if err == nil {
		return nil
	}
	return &retryAfterError{err: err, after: d}
}

type retryAfterError struct {
	err   error
	after time.Duration
}

func (e *retryAfterError) Error() string { return e.err.Error() }
func (e *retryAfterError) Unwrap() error { return e.err }

// PanicError is what a handler that panicked returns: the SDK recovers the panic so that one bad
// job cannot take the process down, and reports it as a fatal failure.
type PanicError struct {
	// Value is what was passed to panic.
	Value any
	// Stack is the goroutine's stack where the panic happened.
	Stack []byte
}

func (e *PanicError) Error() string { return fmt.Sprintf("panic: %v", e.Value) }

// Unwrap returns the panic value when it is an error.
func (e *PanicError) Unwrap() error {
	err, _ := e.Value.(error)
	return err
}

// ErrorType makes err report name as its error type: the name the dead-letter queue groups it
// under (jobwire dlq top) and the broker's always-fatal list matches. It also names errors
// built with errors.New or fmt.Errorf, which otherwise share the type "error" with every other
// such error. ErrorType(nil, name) is nil.
func ErrorType(err error, name string) error {
	if err == nil {
		return nil
	}
	return &namedError{err: err, name: name}
}

type namedError struct {
	err  error
	name string
}

func (e *namedError) Error() string { return e.err.Error() }
func (e *namedError) Unwrap() error { return e.err }

// wellKnownErrors are standard library sentinels, reported by the names a Go programmer knows
// them by rather than as one more plain "error".
var wellKnownErrors = map[error]string{
	context.Canceled:         "context.Canceled",
	context.DeadlineExceeded: "context.DeadlineExceeded",
	io.EOF:                   "io.EOF",
	io.ErrUnexpectedEOF:      "io.ErrUnexpectedEOF",
	io.ErrClosedPipe:         "io.ErrClosedPipe",
	fs.ErrNotExist:           "fs.ErrNotExist",
	fs.ErrExist:              "fs.ErrExist",
	fs.ErrPermission:         "fs.ErrPermission",
	fs.ErrClosed:             "fs.ErrClosed",
	errors.ErrUnsupported:    "errors.ErrUnsupported",
	ErrJobCancelled:          "worker.ErrJobCancelled",
	ErrAttemptTimeout:        "worker.ErrAttemptTimeout",
	ErrLeaseLost:             "worker.ErrLeaseLost",
	ErrShutdown:              "worker.ErrShutdown",
}

// Classify decides how a handler error is reported.
//
// A failure is fatal when it was marked with Fatal, is a recovered panic, is a JSON decoding error
// (*json.SyntaxError, *json.UnmarshalTypeError, *json.InvalidUnmarshalError) or is
// errors.ErrUnsupported: those are code or payload bugs that fail the same way on every attempt.
// Everything else is transient, because a failure that might pass must stay retryable.
//
// ErrorType names what went wrong, not how it was wrapped: the name given with the outermost
// ErrorType in the chain; otherwise the innermost error in the chain that is a sentinel the worker
// knows (one registered with Worker.RegisterError, or a standard one such as io.EOF, reported as
// "io.EOF") or has a type of its own, so fmt.Errorf("decode: %w", syntaxErr) reports
// "*json.SyntaxError". Anonymous wrappers (fmt.Errorf, errors.Join, Fatal, RetryAfter) and
// errors.New's *errors.errorString name nothing; an error made of those alone reports
// PlainErrorType, "error", and the broker's dlq top groups such errors by message instead.
func Classify(err error) Failure { return classify(err, nil) }

// classify is Classify with the sentinels a worker registered.
func classify(err error, sentinels map[error]string) Failure {
	if err == nil {
		return Failure{}
	}
	f := Failure{Message: err.Error(), ErrorType: errorType(err, sentinels)}

	var panicErr *PanicError
	if errors.As(err, &panicErr) {
		f.Fatal = true
		f.ErrorType = "panic"
		f.Details = string(panicErr.Stack)
	} else if d := fmt.Sprintf("%+v", err); d != f.Message {
		f.Details = d
	}

	var retry *retryAfterError
	if errors.As(err, &retry) && retry.after > 0 {
		f.RetryAfter = retry.after
	}
	if !f.Fatal {
		f.Fatal = isFatal(err)
	}
	return f
}

func isFatal(err error) bool {
	var (
		fatal  *fatalError
		syntax *json.SyntaxError
		typ    *json.UnmarshalTypeError
		inv    *json.InvalidUnmarshalError
	)
	return errors.As(err, &fatal) || errors.As(err, &syntax) || errors.As(err, &typ) ||
		errors.As(err, &inv) || errors.Is(err, errors.ErrUnsupported)
}

// anonymousWrappers are error types that only add context to the error they wrap, or carry a
// message and nothing else (errors.New); reporting their name would hide the interesting error.
var anonymousWrappers = map[string]bool{
	"*fmt.wrapError":          true,
	"*fmt.wrapErrors":         true,
	"*errors.joinError":       true,
	"*errors.errorString":     true,
	"*worker.fatalError":      true,
	"*worker.retryAfterError": true,
}

// PlainErrorType is the error type reported for an error with no name of its own anywhere in
// its chain: one built from errors.New and fmt.Errorf alone. It is the same for every such
// error, whatever the Go runtime calls its types, so the dead-letter queue can group them.
const PlainErrorType = "error"

// errorType walks err's chain (the first error of a join) and returns the outermost ErrorType
// name, else the innermost known sentinel or named type, else PlainErrorType.
func errorType(err error, sentinels map[error]string) string {
	found := ""
	for e := err; e != nil; {
		if n, ok := e.(*namedError); ok {
			return n.name
		}
		if name := sentinelName(e, sentinels); name != "" {
			found = name
		} else if t := fmt.Sprintf("%T", e); !anonymousWrappers[t] {
			found = t
		}
		switch u := e.(type) {
		case interface{ Unwrap() error }:
			e = u.Unwrap()
		case interface{ Unwrap() []error }:
			errs := u.Unwrap()
			e = nil
			if len(errs) > 0 {
				e = errs[0]
			}
		default:
			e = nil
		}
	}
	if found == "" {
		return PlainErrorType
	}
	return found
}

// sentinelName is the name e is known by as a sentinel, or "".
func sentinelName(e error, sentinels map[error]string) string {
	if !reflect.TypeOf(e).Comparable() {
		return ""
	}
	if name, ok := sentinels[e]; ok {
		return name
	}
	return wellKnownErrors[e]
}
