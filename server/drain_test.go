package server_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/brokertest"
)

// A broker that is shutting down asks its streams to drain, and a worker that connects
// meanwhile gets no stream: UNAVAILABLE, saying why. The draining worker still has its Result
// stored and acknowledged.
func TestStreamOpenedWhileTheBrokerDrainsIsRefused(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	w := b.Connect(brokertest.Hello("w1", 1, "t"))
	id := enqueue(t, b, &jobwirev1.JobSpec{Type: "t"})
	a := w.Assignment()
	w.Started(a)
	b.WaitState(id, jobwirev1.JobState_JOB_STATE_RUNNING)

	stopped := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), brokertest.WaitTimeout)
		defer cancel()
		stopped <- b.Broker.Shutdown(ctx)
	}()
	if m := w.Next(); m.GetDrain() == nil {
		t.Fatalf("after Shutdown began the worker got %v, want a DrainRequest", m)
	}
	_, err := b.ConnectOn(b.Workers, brokertest.Hello("w2", 1, "t"))
	if s, _ := status.FromError(err); s.Code() != codes.Unavailable ||
		s.Message() != "the broker is shutting down; retry against it once it is back" {
		t.Fatalf("a stream opened while the broker drains: %v; want UNAVAILABLE saying the broker is shutting down", err)
	}
	if r := ack(t, w.Succeed(a)); r.GetDecision() != jobwirev1.Decision_DECISION_SUCCEEDED {
		t.Fatalf("the draining worker's result: %v; want SUCCEEDED", r)
	}
	w.HalfClose()
	select {
	case err := <-stopped:
		if err != nil {
			t.Fatalf("shutdown: %v", err)
		}
	case <-time.After(brokertest.WaitTimeout):
		t.Fatal("the broker did not finish shutting down once its worker left")
	}
}
