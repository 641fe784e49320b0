package server_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/jobwire/jobwire/broker"
	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/brokerset"
	"github.com/jobwire/jobwire/internal/brokertest"
)

// applied is the MetaApplied of an UNAVAILABLE's ErrorInfo, failing the test when err is not
// such an answer.
func applied(t *testing.T, what string, err error) string {
	t.Helper()
	st, _ := status.FromError(err)
	if st.Code() != codes.Unavailable {
		t.Fatalf("%s: %v, want UNAVAILABLE", what, err)
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetReason() == brokerset.ReasonUnreached &&
			info.GetDomain() == brokerset.ErrorDomain {
			return info.GetMetadata()[brokerset.MetaApplied]
		}
	}
	t.Fatalf("%s: %v carries no ErrorInfo %s", what, err, brokerset.ReasonUnreached)
	return ""
}

// wait returns what errc receives, failing the test when nothing comes.
func wait(t *testing.T, what string, errc <-chan error) error {
	t.Helper()
	select {
	case err := <-errc:
		return err
	case <-time.After(brokertest.WaitTimeout):
		t.Fatalf("%s: no answer within %s", what, brokertest.WaitTimeout)
		return nil
	}
}

func healthIs(t *testing.T, b *brokertest.Bundle, want healthpb.HealthCheckResponse_ServingStatus) func() bool {
	return func() bool {
		for _, svc := range []string{"", "jobwire.v1.ProducerService", "jobwire.v1.WorkerService"} {
			res, err := healthpb.NewHealthClient(b.Conn).Check(context.Background(), &healthpb.HealthCheckRequest{Service: svc})
			if err != nil || res.GetStatus() != want {
				return false
			}
		}
		return true
	}
}

// A broker whose database stops answering answers its callers UNAVAILABLE once the database
// has been silent for the bound, not at their deadlines: the enqueue whose write is in flight
// may have been applied and says so, the one still waiting for the writer is withdrawn and
// says it was not, and new calls are refused at once. Health checks and readiness say so
// until the database answers again, and then the broker takes calls by itself.
func TestUnreachableDatabaseAnswersUnavailableAtTheBound(t *testing.T) {
	t.Parallel()
	faults := brokertest.NewFaults(t, brokertest.DefaultFaultRetries)
	b := brokertest.New(t, brokertest.Options{Faults: faults, DatabaseSilence: time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute) // far beyond the bound
	defer cancel()

	entered, release := faults.Hold("enqueue")
	defer release()
	enqueue := func(key string) <-chan error {
		errc := make(chan error, 1)
		go func() {
			_, err := b.Producer.Enqueue(ctx, &jobwirev1.EnqueueRequest{Job: &jobwirev1.JobSpec{Type: "mail", IdempotencyKey: key}})
			errc <- err
		}()
		return errc
	}
	sent := enqueue("in-flight")
	select {
	case <-entered:
	case <-time.After(brokertest.WaitTimeout):
		t.Fatal("the enqueue's write never began")
	}
	queued := enqueue("queued")

	b.Clock.Advance(999 * time.Millisecond)
	if err := b.Broker.Unreachable(); err != nil {
		t.Fatalf("unreachable before the bound: %v", err)
	}
	b.Clock.Advance(time.Millisecond)
	if got := applied(t, "the enqueue in flight", wait(t, "the enqueue in flight", sent)); got != brokerset.AppliedUnknown {
		t.Fatalf("the enqueue in flight says applied=%q, want %q", got, brokerset.AppliedUnknown)
	}
	// Withdrawn from the writer, or refused before it was sent: not applied either way.
	if got := applied(t, "the queued enqueue", wait(t, "the queued enqueue", queued)); got != brokerset.AppliedNo {
		t.Fatalf("the queued enqueue says applied=%q, want %q", got, brokerset.AppliedNo)
	}
	if got := applied(t, "a new enqueue", wait(t, "a new enqueue", enqueue("new"))); got != brokerset.AppliedNo {
		t.Fatalf("a new enqueue says applied=%q, want %q", got, brokerset.AppliedNo)
	}
	_, err := b.Admin.ListJobs(ctx, &jobwirev1.ListJobsRequest{})
	if got := applied(t, "a read", err); got != brokerset.AppliedNo {
		t.Fatalf("a read says applied=%q, want %q", got, brokerset.AppliedNo)
	}
	brokertest.WaitFor(t, "health NOT_SERVING", healthIs(t, b, healthpb.HealthCheckResponse_NOT_SERVING))
	if err := b.Broker.Ready(ctx); !errors.Is(err, broker.ErrUnreachable) {
		t.Fatalf("Ready = %v, want %v", err, broker.ErrUnreachable)
	}

	release() // the database answers: the write in flight commits
	brokertest.WaitFor(t, "health SERVING", healthIs(t, b, healthpb.HealthCheckResponse_SERVING))
	if err := b.Broker.Ready(ctx); err != nil {
		t.Fatalf("Ready after the database answered: %v", err)
	}
	if _, err := b.Producer.Enqueue(ctx, &jobwirev1.EnqueueRequest{Job: &jobwirev1.JobSpec{Type: "mail", IdempotencyKey: "after"}}); err != nil {
		t.Fatalf("enqueue after the database answered: %v", err)
	}
	res, err := b.Admin.ListJobs(ctx, &jobwirev1.ListJobsRequest{Ascending: true}) // in the order they were stored
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, j := range res.GetJobs() {
		keys = append(keys, j.GetIdempotencyKey())
	}
	// The write in flight went through; nothing of the refused or withdrawn calls did.
	if len(keys) != 2 || keys[0] != "in-flight" || keys[1] != "after" {
		t.Fatalf("stored jobs have keys %q, want [in-flight after]", keys)
	}
}

// A broker that cannot reach its database refuses new worker streams and, once the silence
// has lasted a second bound, ends its movable ones, so that their workers reconnect to a broker
// that reaches it. The others stay, and take work again once the database answers.
func TestUnreachableDatabaseMovesMovableWorkersAway(t *testing.T) {
	t.Parallel()
	faults := brokertest.NewFaults(t, brokertest.DefaultFaultRetries)
	b := brokertest.New(t, brokertest.Options{Faults: faults, DatabaseSilence: time.Second})
	entered, release := faults.Hold("enqueue")
	defer release()
	errc := make(chan error, 1)
	go func() {
		_, err := b.Producer.Enqueue(context.Background(), &jobwirev1.EnqueueRequest{Job: &jobwirev1.JobSpec{Type: "report"}})
		errc <- err
	}()
	select {
	case <-entered:
	case <-time.After(brokertest.WaitTimeout):
		t.Fatal("the enqueue's write never began")
	}
	movable := brokertest.Hello("movable", 1, "mail")
	movable.Movable = true
	mw := b.Connect(movable)
	fixed := b.Connect(brokertest.Hello("fixed", 1, "mail"))
	b.Clock.Advance(time.Second)
	applied(t, "the enqueue in flight", wait(t, "the enqueue in flight", errc))
	if _, err := b.ConnectOn(b.Workers, brokertest.Hello("late", 1, "mail")); status.Code(err) != codes.Unavailable {
		t.Fatalf("a new worker stream: %v, want UNAVAILABLE", err)
	}
	if _, ok := mw.Poll(); ok {
		t.Fatal("the movable stream heard from the broker before the second bound")
	}
	b.Clock.Advance(time.Second)
	err := mw.Err()
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("the movable stream ended with %v, want UNAVAILABLE", err)
	}
	if msg := status.Convert(err).Message(); !strings.Contains(msg, broker.ErrUnreachable.Error()) {
		t.Fatalf("the movable stream ended with %q, want it to say %q", msg, broker.ErrUnreachable)
	}
	// The stream that is not movable stays, and takes work once the database answers again.
	release()
	brokertest.WaitFor(t, "health SERVING", healthIs(t, b, healthpb.HealthCheckResponse_SERVING))
	b.Enqueue(&jobwirev1.JobSpec{Type: "mail"})
	if a := fixed.Assignment(); a.GetJob().GetType() != "mail" {
		t.Fatalf("the stream that is not movable got %v, want the mail job", a)
	}
}
