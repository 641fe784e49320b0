package server_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/brokertest"
	"github.com/jobwire/jobwire/server"
)

// An enqueue stream that carries no request for Limits.EnqueueStreamIdle is ended between
// requests, saying that nothing unanswered was read; one that keeps carrying requests is not,
// however long it lives.
func TestEnqueueStreamEndsWhenIdle(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := b.Producer.EnqueueStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	enqueue := func() {
		t.Helper()
		if err := st.Send(&jobwirev1.EnqueueStreamRequest{Request: &jobwirev1.EnqueueRequest{
			Job: &jobwirev1.JobSpec{Type: "mail"}}}); err != nil {
			t.Fatal(err)
		}
		out, err := st.Recv()
		if err != nil || out.GetResponse().GetJob().GetId() == 0 {
			t.Fatalf("answer = %v, %v; want a job", out, err)
		}
	}
	// Busy for three times the idle limit, a request every half of it.
	idle := server.DefaultEnqueueStreamIdle
	for range 6 {
		enqueue()
		b.Clock.Advance(idle / 2)
	}
	enqueue()
	// The broker notes a request answered once it sent the answer, which may be after the
	// client read it: the clock moves on until the stream ends.
	ended := make(chan error, 1)
	go func() {
		_, err := st.Recv()
		ended <- err
	}()
	brokertest.WaitFor(t, "the idle stream to end", func() bool {
		b.Clock.Advance(idle)
		select {
		case err = <-ended:
			return true
		case <-time.After(10 * time.Millisecond):
			return false
		}
	})
	if status.Code(err) != codes.Unavailable || len(st.Trailer().Get(server.UnreadTrailer)) == 0 {
		t.Fatalf("an idle stream's end: %v, trailer %v; want UNAVAILABLE with %s", err, st.Trailer(), server.UnreadTrailer)
	}
}
