package server

import (
	"context"
	"io"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/jobwire/jobwire/broker"
	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/brokerset"
)

// fakeEnqueueStream hands serve its requests and keeps its answers.
type fakeEnqueueStream struct {
	grpc.ServerStream // unused: serve calls only Recv and Send
	in                []*jobwirev1.EnqueueStreamRequest
	out               []*jobwirev1.EnqueueStreamResponse
}

func (f *fakeEnqueueStream) Recv() (*jobwirev1.EnqueueStreamRequest, error) {
	if len(f.in) == 0 {
		return nil, io.EOF
	}
	r := f.in[0]
	f.in = f.in[1:]
	return r, nil
}

func (f *fakeEnqueueStream) Send(m *jobwirev1.EnqueueStreamResponse) error {
	f.out = append(f.out, m)
	return nil
}

// A request's error is its answer and the stream goes on, but for a request refused with
// nothing of it applied because the database is silent: that status, whose details say so and
// an answer could not carry, ends the stream, so that the producer sends it again elsewhere.
func TestEnqueueStreamEndsOnARefusalWithNothingApplied(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		err     error
		wantEnd bool // the stream ends with err; otherwise err is the first answer and the second request is answered too
	}{
		{"refused, nothing applied", unreachedStatus(&broker.UnreachableError{Silent: time.Second}), true},
		{"its write may have been applied", unreachedStatus(&broker.UnreachableError{Silent: time.Second, MaybeApplied: true}), false},
		{"invalid", status.Error(codes.InvalidArgument, "job.type is required"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			calls := 0
			enqueue := func(context.Context, any) (any, error) {
				if calls++; calls == 1 {
					return nil, tt.err
				}
				return &jobwirev1.EnqueueResponse{Job: &jobwirev1.EnqueuedJob{Id: 7}}, nil
			}
			st := &fakeEnqueueStream{in: []*jobwirev1.EnqueueStreamRequest{{}, {}}}
			e := enqueueStream{now: time.Now}
			err := e.serve(t.Context(), st, enqueue)
			if tt.wantEnd {
				if !brokerset.NotApplied(err) || len(st.out) != 0 || calls != 1 {
					t.Fatalf("serve = %v after %d answers and %d requests; want the refusal itself, no answer, the stream ended", err, len(st.out), calls)
				}
				return
			}
			if err != nil || len(st.out) != 2 || calls != 2 {
				t.Fatalf("serve = %v after %d answers and %d requests; want both answered", err, len(st.out), calls)
			}
			if got := codes.Code(st.out[0].GetError().GetCode()); got != status.Code(tt.err) {
				t.Fatalf("first answer %v, want an error answer of %v", st.out[0], status.Code(tt.err))
			}
			if st.out[1].GetResponse().GetJob().GetId() != 7 {
				t.Fatalf("second answer %v, want job 7", st.out[1])
			}
		})
	}
}
