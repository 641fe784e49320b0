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

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
)

func TestErrorsMatchTheirSentinels(t *testing.T) {
	t.Parallel()
	sentinels := []error{ErrNotFound, ErrInvalidArgument, ErrFailedPrecondition, ErrAlreadyExists, ErrUnavailable,
		ErrResourceExhausted, context.Canceled, context.DeadlineExceeded}
	tests := []struct {
		code codes.Code
		want error // the one sentinel that must match; nil for none
	}{
		{codes.NotFound, ErrNotFound},
		{codes.InvalidArgument, ErrInvalidArgument},
		{codes.OutOfRange, ErrInvalidArgument},
		{codes.FailedPrecondition, ErrFailedPrecondition},
		{codes.AlreadyExists, ErrAlreadyExists},
		{codes.Unavailable, ErrUnavailable},
		{codes.ResourceExhausted, ErrResourceExhausted},
		{codes.Canceled, context.Canceled},
		{codes.DeadlineExceeded, context.DeadlineExceeded},
		{codes.Internal, nil},
		{codes.Unimplemented, nil},
	}
	b := setup(t, map[string]handler{"GetJob": func(req proto.Message) (proto.Message, error) {
		// The job id selects the code, so one server serves every case.
		id := req.(*jobwirev1.GetJobRequest).GetId()
		return nil, status.Errorf(codes.Code(id), "broker says %d", id)
	}})
	for _, tt := range tests {
		t.Run(tt.code.String(), func(t *testing.T) {
			_, err := b.client.Get(t.Context(), int64(tt.code))
			var cerr *Error
			if !errors.As(err, &cerr) {
				t.Fatalf("error %v (%T) is not an *Error", err, err)
			}
			msg := fmt.Sprintf("broker says %d", tt.code)
			if cerr.Op != "Get" || cerr.Code != tt.code || cerr.Message != msg {
				t.Errorf("got Op=%q Code=%s Message=%q, want Get, %s, %q", cerr.Op, cerr.Code, cerr.Message, tt.code, msg)
			}
			if !strings.Contains(err.Error(), msg) {
				t.Errorf("Error() = %q does not keep the broker's message", err)
			}
			if got := status.Code(err); got != tt.code {
				t.Errorf("status.Code = %s, want %s (the status must stay reachable)", got, tt.code)
			}
			for _, s := range sentinels {
				if got := errors.Is(err, s); got != (s == tt.want) {
					t.Errorf("errors.Is(err, %v) = %v", s, got)
				}
			}
		})
	}
}

func TestAnAbsentBrokerIsUnavailable(t *testing.T) {
	t.Parallel()
	// Take a free port and close it, so nothing listens there.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	_ = lis.Close()

	c, err := Dial(t.Context(), addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if _, err := c.Get(ctx, 1); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("got %v, want ErrUnavailable", err)
	}
}
