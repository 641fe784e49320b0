package security

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/auth"
	"github.com/jobwire/jobwire/internal/brokertest"
	"github.com/jobwire/jobwire/server"
)

// One token cannot take every worker stream the broker serves: past its own cap its streams
// are refused with RESOURCE_EXHAUSTED naming the cap, while other tokens still connect.
func TestWorkerStreamsPerToken(t *testing.T) {
	t.Parallel()
	limits := server.DefaultLimits()
	limits.MaxWorkerStreamsPerToken = 3
	b := brokertest.New(t, brokertest.Options{RequireAuth: true, Limits: limits})
	greedy := jobwirev1.NewWorkerServiceClient(b.DialToken(b.Token(auth.RoleWorker, auth.Scope{})))
	var first *brokertest.RawWorker
	for i := range 3 {
		w, err := b.ConnectOn(greedy, brokertest.Hello(fmt.Sprintf("g%d", i), 1, "t"))
		if err != nil {
			t.Fatalf("stream %d of the token: %v", i, err)
		}
		if first == nil {
			first = w
		}
	}
	_, err := b.ConnectOn(greedy, brokertest.Hello("g3", 1, "t"))
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "3 worker streams") ||
		!strings.Contains(err.Error(), "max_worker_streams_per_token") {
		t.Fatalf("a fourth stream of one token: %v, want RESOURCE_EXHAUSTED naming the cap of 3", err)
	}
	other := jobwirev1.NewWorkerServiceClient(b.DialToken(b.Token(auth.RoleWorker, auth.Scope{})))
	if _, err := b.ConnectOn(other, brokertest.Hello("o1", 1, "t")); err != nil {
		t.Fatalf("a stream of another token: %v", err)
	}
	// A stream that ends gives its place back.
	first.Kill()
	brokertest.WaitFor(t, "the token's place to come back", func() bool {
		w, err := b.ConnectOn(greedy, brokertest.Hello("g4", 1, "t"))
		if err != nil {
			if status.Code(err) != codes.ResourceExhausted {
				t.Fatalf("a stream after one closed: %v", err)
			}
			return false
		}
		w.Kill()
		return true
	})
}

// A client guessing tokens is throttled: once it has failed its allowance, its calls are
// refused with RESOURCE_EXHAUSTED and a retry hint before any token is looked up, until the
// allowance refills on the (fake) clock. A token the broker has cached still works from the
// same address.
func TestFailedAuthenticationsAreThrottled(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{RequireAuth: true, AuthFailures: auth.FailureOptions{Rate: 1, Burst: 5}})
	ctx := context.Background()
	if _, err := b.Admin.ListQueues(ctx, &jobwirev1.ListQueuesRequest{}); err != nil { // caches the admin token
		t.Fatal(err)
	}
	guess := func(i int) error {
		conn := b.DialToken(fmt.Sprintf("jw_%016x_%043d", i, i))
		_, err := jobwirev1.NewAdminServiceClient(conn).ListQueues(ctx, &jobwirev1.ListQueuesRequest{})
		return err
	}
	for i := range 5 {
		if err := guess(i); status.Code(err) != codes.Unauthenticated {
			t.Fatalf("guess %d: %v, want UNAUTHENTICATED", i, err)
		}
	}
	err := guess(5)
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "too many failed authentications from 127.0.0.1; retry in 1s") {
		t.Fatalf("a sixth guess: %v, want RESOURCE_EXHAUSTED asking to retry in 1s", err)
	}
	if _, err := b.Admin.ListQueues(ctx, &jobwirev1.ListQueuesRequest{}); err != nil {
		t.Fatalf("a cached token from the throttled address: %v", err)
	}
	b.Clock.Advance(time.Second)
	if err := guess(6); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("a guess a second later: %v, want it looked up and UNAUTHENTICATED", err)
	}
	if err := guess(7); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("the next guess: %v, want RESOURCE_EXHAUSTED", err)
	}
}
