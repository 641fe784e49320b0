package worker

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"testing"
	"time"
)

type quotaError struct{ service string }

func (e *quotaError) Error() string { return e.service + ": quota exceeded" }

// verboseError says more under %+v than under Error, as errors with stack traces do.
type verboseError struct{}

func (verboseError) Error() string { return "short" }

func (verboseError) Format(f fmt.State, verb rune) {
	if verb == 'v' && f.Flag('+') {
		fmt.Fprint(f, "short\nmore detail")
		return
	}
	fmt.Fprint(f, "short")
}

func TestClassify(t *testing.T) {
	t.Parallel()

	var v struct{ A int }
	syntaxErr := json.Unmarshal([]byte("{"), &v)
	typeErr := json.Unmarshal([]byte(`{"A":"x"}`), &v)
	invalidErr := error(&json.InvalidUnmarshalError{Type: reflect.TypeOf(v)})
	quota := &quotaError{service: "smtp"}

	tests := []struct {
		name       string
		err        error
		wantFatal  bool
		wantType   string
		wantMsg    string
		wantRetry  time.Duration
		wantDetail string
	}{
		{name: "plain error is transient", err: errors.New("boom"), wantType: "error", wantMsg: "boom"},
		{name: "plain errors wrapped and joined are still plain", err: Fatal(fmt.Errorf("charge: %w", errors.Join(errors.New("a"), errors.New("b")))), wantFatal: true, wantType: "error", wantMsg: "charge: a\nb"},
		{name: "custom type through fmt.Errorf", err: fmt.Errorf("send: %w", quota), wantType: "*worker.quotaError", wantMsg: "send: smtp: quota exceeded"},
		{name: "json syntax error", err: syntaxErr, wantFatal: true, wantType: "*json.SyntaxError", wantMsg: syntaxErr.Error()},
		{name: "wrapped json syntax error", err: fmt.Errorf("decode: %w", syntaxErr), wantFatal: true, wantType: "*json.SyntaxError", wantMsg: "decode: " + syntaxErr.Error()},
		{name: "json type error", err: typeErr, wantFatal: true, wantType: "*json.UnmarshalTypeError", wantMsg: typeErr.Error()},
		{name: "json invalid unmarshal", err: invalidErr, wantFatal: true, wantType: "*json.InvalidUnmarshalError", wantMsg: invalidErr.Error()},
		{name: "ErrUnsupported", err: errors.ErrUnsupported, wantFatal: true, wantType: "errors.ErrUnsupported", wantMsg: "unsupported operation"},
		{name: "wrapped ErrUnsupported", err: fmt.Errorf("resize: %w", errors.ErrUnsupported), wantFatal: true, wantType: "errors.ErrUnsupported", wantMsg: "resize: unsupported operation"},
		{name: "ErrorType names a plain error", err: ErrorType(errors.New("card declined"), "CardDeclined"), wantType: "CardDeclined", wantMsg: "card declined"},
		{name: "the outermost ErrorType wins", err: fmt.Errorf("a: %w", ErrorType(fmt.Errorf("b: %w", ErrorType(quota, "Inner")), "Outer")), wantType: "Outer", wantMsg: "a: b: smtp: quota exceeded"},
		{name: "the innermost named type wins", err: &opError{op: "send", err: fmt.Errorf("x: %w", quota)}, wantType: "*worker.quotaError", wantMsg: "send: x: smtp: quota exceeded"},
		{name: "a named type around a plain error", err: &opError{op: "send", err: errors.New("boom")}, wantType: "*worker.opError", wantMsg: "send: boom"},
		{name: "standard sentinels by name", err: fmt.Errorf("read: %w", io.ErrUnexpectedEOF), wantType: "io.ErrUnexpectedEOF", wantMsg: "read: unexpected EOF"},
		{name: "Fatal reports the wrapped type", err: Fatal(quota), wantFatal: true, wantType: "*worker.quotaError", wantMsg: "smtp: quota exceeded"},
		{name: "Fatal under fmt.Errorf", err: fmt.Errorf("charge: %w", Fatal(fmt.Errorf("card: %w", quota))), wantFatal: true, wantType: "*worker.quotaError", wantMsg: "charge: card: smtp: quota exceeded"},
		{name: "RetryAfter stays transient", err: RetryAfter(quota, 5*time.Second), wantType: "*worker.quotaError", wantMsg: "smtp: quota exceeded", wantRetry: 5 * time.Second},
		{name: "RetryAfter wrapping Fatal", err: fmt.Errorf("x: %w", RetryAfter(Fatal(quota), 3*time.Second)), wantFatal: true, wantType: "*worker.quotaError", wantMsg: "x: smtp: quota exceeded", wantRetry: 3 * time.Second},
		{name: "errors.Join reports its first error", err: errors.Join(quota, errors.New("other")), wantType: "*worker.quotaError", wantMsg: "smtp: quota exceeded\nother"},
		{name: "details when %+v says more", err: verboseError{}, wantType: "worker.verboseError", wantMsg: "short", wantDetail: "short\nmore detail"},
		{name: "panic", err: &PanicError{Value: "nil map", Stack: []byte("goroutine 1")}, wantFatal: true, wantType: "panic", wantMsg: "panic: nil map", wantDetail: "goroutine 1"},
		{name: "panic with an error value", err: &PanicError{Value: quota, Stack: []byte("stack")}, wantFatal: true, wantType: "panic", wantMsg: "panic: smtp: quota exceeded", wantDetail: "stack"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := Classify(tt.err)
			want := Failure{Fatal: tt.wantFatal, ErrorType: tt.wantType, Message: tt.wantMsg, Details: tt.wantDetail, RetryAfter: tt.wantRetry}
			if got != want {
				t.Errorf("Classify(%v)\n got %+v\nwant %+v", tt.err, got, want)
			}
		})
	}
}

func TestClassifyNil(t *testing.T) {
	t.Parallel()
	if got := Classify(nil); got != (Failure{}) {
		t.Errorf("Classify(nil) = %+v, want zero", got)
	}
	if Fatal(nil) != nil || RetryAfter(nil, time.Second) != nil {
		t.Error("Fatal(nil) and RetryAfter(nil, d) must be nil")
	}
}

func TestMarkersKeepErrorsIs(t *testing.T) {
	t.Parallel()
	quota := &quotaError{service: "smtp"}
	err := fmt.Errorf("send: %w", RetryAfter(Fatal(quota), time.Second))
	var target *quotaError
	if !errors.As(err, &target) || target != quota {
		t.Errorf("errors.As through Fatal and RetryAfter lost the original error")
	}
	if !strings.Contains(err.Error(), "quota exceeded") {
		t.Errorf("message %q lost the wrapped text", err)
	}
}

// opError is a named error type that wraps another.
type opError struct {
	op  string
	err error
}

func (e *opError) Error() string { return e.op + ": " + e.err.Error() }
func (e *opError) Unwrap() error { return e.err }

// A sentinel the worker registered is reported by its name wherever it sits in the chain.
func TestClassifyRegisteredSentinel(t *testing.T) {
	t.Parallel()
	errNoRecipient := errors.New("no recipient")
	names := map[error]string{errNoRecipient: "ErrNoRecipient"}
	for _, err := range []error{errNoRecipient, fmt.Errorf("send: %w", errNoRecipient), Fatal(fmt.Errorf("send: %w", errNoRecipient))} {
		if got := classify(err, names).ErrorType; got != "ErrNoRecipient" {
			t.Errorf("classify(%v) type = %q, want ErrNoRecipient", err, got)
		}
	}
	if got := classify(errors.New("no recipient"), names).ErrorType; got != "error" {
		t.Errorf("another error with the same text: type %q, want error", got)
	}
}
