package worker

import (
	"encoding/json"
	"errors"
	"fmt"
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
	// expired or was taken over), so any result would be refused.
	ErrLeaseLost = errors.New("worker: lease lost")
	// ErrShutdown: the worker is stopping and the shutdown grace period ran out.
	ErrShutdown = errors.New("worker: shutting down")
)

// Failure is how a handler error is reported to the broker.
type Failure struct {
	// Fatal means retrying cannot help (a code or payload bug): the broker sends the job to
	// the dead-letter queue at once. Otherwise the failure is transient and retried.
	Fatal bool
	// ErrorType is the Go type of the error, such as "*json.SyntaxError" or "panic".
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

// Classify decides how a handler error is reported.
//
// A failure is fatal when it was marked with Fatal, is a recovered panic, is a JSON decoding error
// (*json.SyntaxError, *json.UnmarshalTypeError, *json.InvalidUnmarshalError) or is
// errors.ErrUnsupported: those are code or payload bugs that fail the same way on every attempt.
// Everything else is transient, because a failure that might pass must stay retryable.
//
// ErrorType is the type of the first error in the chain that is not an anonymous wrapper (one made
// by fmt.Errorf, errors.Join, Fatal or RetryAfter), so fmt.Errorf("decode: %w", syntaxErr) reports
// "*json.SyntaxError".
func Classify(err error) Failure {
	if err == nil {
		return Failure{}
	}
	f := Failure{Message: err.Error(), ErrorType: errorType(err)}

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

// anonymousWrappers are error types that only add context to the error they wrap; reporting
// their name would hide the interesting type underneath.
var anonymousWrappers = map[string]bool{
	"*fmt.wrapError":    true,
	"*fmt.wrapErrors":   true,
	"*errors.joinError": true,
}

func errorType(err error) string {
	for {
		var next error
		switch e := err.(type) {
		case *fatalError:
			next = e.err
		case *retryAfterError:
			next = e.err
		default:
			if !anonymousWrappers[fmt.Sprintf("%T", err)] {
				return fmt.Sprintf("%T", err)
			}
			switch u := err.(type) {
			case interface{ Unwrap() error }:
				next = u.Unwrap()
			case interface{ Unwrap() []error }:
				if errs := u.Unwrap(); len(errs) > 0 {
					next = errs[0]
				}
			}
		}
		if next == nil {
			return fmt.Sprintf("%T", err)
		}
		err = next
	}
}
