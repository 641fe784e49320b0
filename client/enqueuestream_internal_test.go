package client

import (
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/brokerset"
)

// Against a broker that does not serve EnqueueStream, Enqueue goes back to calls: the first
// job is sent as a call once the stream is refused, and so is every one after.
func TestEnqueueStreamsFallBackToCallsOnAnOlderBroker(t *testing.T) {
	t.Parallel()
	b := setup(t, map[string]handler{"Enqueue": reply(&jobwirev1.EnqueueResponse{Job: &jobwirev1.EnqueuedJob{Id: 7}})})
	c, err := Dial(t.Context(), b.addr, WithEnqueueStreams(2))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := range 3 {
		r, err := c.Enqueue(t.Context(), "mail", nil)
		if err != nil || r.ID != 7 {
			t.Fatalf("Enqueue %d = %+v, %v; want job 7 through a call", i, r, err)
		}
	}
	if got := len(b.broker.requests("Enqueue")); got != 3 {
		t.Fatalf("the broker received %d Enqueue calls, want 3", got)
	}
	if !c.streams.off.Load() {
		t.Fatal("the client still tries streams on a broker without them")
	}
}

// A stream the broker ended after the request was sent is a failed Enqueue, as a call broken
// on its way is (the job may have been stored), unless the broker said it did not read the
// request (the trailer of a broker shutting down) or that nothing of it was applied (a broker
// that cannot reach its database refusing the stream): then the Enqueue is made as a call.
func TestEnqueueStreamEndedUnread(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		unread    bool
		applied   string // what the end's ErrorInfo says (brokerset.MetaApplied); "": no ErrorInfo
		wantCalls int
	}{
		{"the broker read the request", false, "", 0},
		{"the broker did not read it", true, "", 1},
		{"the broker applied nothing of it", false, brokerset.AppliedNo, 1},
		{"the broker may have applied it", false, brokerset.AppliedUnknown, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			// The fake reads the request, then ends the stream as a broker shutting down does,
			// or as one that cannot reach its database refuses it.
			end := func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, _ grpc.StreamHandler) error {
				var req jobwirev1.EnqueueStreamRequest
				if err := ss.RecvMsg(&req); err != nil {
					return err
				}
				if tt.unread {
					ss.SetTrailer(metadata.Pairs(unreadTrailer, "true"))
				}
				st := status.New(codes.Unavailable, "the broker is shutting down")
				if tt.applied != "" {
					var err error
					st, err = st.WithDetails(&errdetails.ErrorInfo{Domain: brokerset.ErrorDomain,
						Reason: brokerset.ReasonUnreached, Metadata: map[string]string{brokerset.MetaApplied: tt.applied}})
					if err != nil {
						return err
					}
				}
				return st.Err()
			}
			b := setupWith(t, map[string]handler{"Enqueue": reply(&jobwirev1.EnqueueResponse{Job: &jobwirev1.EnqueuedJob{Id: 7}})},
				grpc.StreamInterceptor(end))
			c, err := Dial(t.Context(), b.addr, WithEnqueueStreams(1))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			r, err := c.Enqueue(t.Context(), "mail", nil)
			if calls := len(b.broker.requests("Enqueue")); calls != tt.wantCalls {
				t.Fatalf("the broker received %d Enqueue calls, want %d", calls, tt.wantCalls)
			}
			switch {
			case tt.wantCalls == 1 && (err != nil || r.ID != 7):
				t.Fatalf("Enqueue = %+v, %v; want job 7 through a call", r, err)
			case tt.wantCalls == 0 && status.Code(err) != codes.Unavailable:
				t.Fatalf("Enqueue error = %v, want UNAVAILABLE", err)
			}
		})
	}
}
