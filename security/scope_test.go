package security

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/auth"
	"github.com/jobwire/jobwire/internal/brokertest"
)

// mailScope is the scope of the scoped tokens in these tests.
var mailScope = auth.Scope{Queues: []string{"mail", "mail-*"}, Types: []string{"email.*"}}

func spec(queue, typ string) *jobwirev1.JobSpec {
	return &jobwirev1.JobSpec{Type: typ, Queue: queue}
}

// wantDenied checks err is PERMISSION_DENIED with a message holding each of parts.
func wantDenied(t *testing.T, what string, err error, parts ...string) {
	t.Helper()
	st := status.Convert(err)
	if st.Code() != codes.PermissionDenied {
		t.Errorf("%s: %s %q, want PERMISSION_DENIED", what, st.Code(), st.Message())
		return
	}
	if !containsAll(st.Message(), parts...) {
		t.Errorf("%s: message %q does not name %q", what, st.Message(), parts)
	}
}

// TestProducerScope: a producer token scoped to queues and types enqueues only into them, and
// reads and cancels only jobs inside them.
func TestProducerScope(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{RequireAuth: true})
	ctx := context.Background()
	p := jobwirev1.NewProducerServiceClient(b.DialToken(b.Token(auth.RoleProducer, mailScope)))

	inScope, err := p.Enqueue(ctx, &jobwirev1.EnqueueRequest{Job: spec("mail", "email.send")})
	if err != nil {
		t.Fatalf("enqueue inside the scope: %v", err)
	}
	if _, err := p.Enqueue(ctx, &jobwirev1.EnqueueRequest{Job: spec("mail-eu", "email.bulk.send")}); err != nil {
		t.Fatalf("enqueue matching both patterns: %v", err)
	}
	_, err = p.Enqueue(ctx, &jobwirev1.EnqueueRequest{Job: spec("mail", "sms.send")})
	wantDenied(t, "type outside the scope", err, `"sms.send"`, "scope", "producer token")
	_, err = p.Enqueue(ctx, &jobwirev1.EnqueueRequest{Job: spec("", "email.send")})
	wantDenied(t, "default queue outside the scope", err, `"default"`)
	_, err = p.EnqueueBatch(ctx, &jobwirev1.EnqueueBatchRequest{Jobs: []*jobwirev1.JobSpec{spec("mail", "email.send"), spec("billing", "email.send")}})
	wantDenied(t, "batch with one job outside the scope", err, "jobs[1]", `"billing"`)

	// Jobs enqueued by others, outside the scope, cannot be read or cancelled.
	other, err := b.Producer.Enqueue(ctx, &jobwirev1.EnqueueRequest{Job: spec("billing", "invoice.send")})
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.GetJob(ctx, &jobwirev1.GetJobRequest{Id: other.GetJob().GetId()})
	wantDenied(t, "get a job outside the scope", err, `"invoice.send"`)
	_, err = p.CancelJob(ctx, &jobwirev1.CancelJobRequest{Id: other.GetJob().GetId()})
	wantDenied(t, "cancel a job outside the scope", err, `"billing"`)
	if _, err := p.GetJob(ctx, &jobwirev1.GetJobRequest{Id: inScope.GetJob().GetId()}); err != nil {
		t.Errorf("get a job inside the scope: %v", err)
	}
	if _, err := p.GetJob(ctx, &jobwirev1.GetJobRequest{Id: 999999}); status.Code(err) != codes.NotFound {
		t.Errorf("get an unknown job: %v, want NOT_FOUND", err)
	}
	// Nothing outside the scope was enqueued: only the two allowed jobs and the admin's.
	list, err := b.Admin.ListJobs(ctx, &jobwirev1.ListJobsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(list.GetJobs()); n != 3 {
		t.Errorf("%d jobs stored, want 3: a refused enqueue stored something", n)
	}
	if j, err := b.Producer.GetJob(ctx, &jobwirev1.GetJobRequest{Id: other.GetJob().GetId()}); err != nil || j.GetJob().GetState() == jobwirev1.JobState_JOB_STATE_CANCELLED {
		t.Errorf("the job outside the scope was cancelled: %v %v", j, err)
	}
}

// hello opens a worker stream with conn and returns the broker's first answer.
func hello(t *testing.T, conn *grpc.ClientConn, h *jobwirev1.Hello) (*jobwirev1.ConnectResponse, jobwirev1.WorkerService_ConnectClient, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), brokertest.WaitTimeout)
	t.Cleanup(cancel)
	s, err := jobwirev1.NewWorkerServiceClient(conn).Connect(ctx)
	if err != nil {
		return nil, nil, err
	}
	// A Send to a stream the broker has already ended (a refused token) returns io.EOF; the
	// stream's status, the broker's answer, comes from Recv.
	if err := s.Send(&jobwirev1.ConnectRequest{Message: &jobwirev1.ConnectRequest_Hello{Hello: h}}); err != nil && !errors.Is(err, io.EOF) {
		return nil, nil, err
	}
	m, err := s.Recv()
	return m, s, err
}

// TestWorkerScope: a worker token serves only its types and queues; a Hello naming others, or
// naming no queue when the token is limited to some, is PERMISSION_DENIED.
func TestWorkerScope(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{RequireAuth: true})
	conn := b.DialToken(b.Token(auth.RoleWorker, mailScope))
	withQueues := func(h *jobwirev1.Hello, queues ...string) *jobwirev1.Hello { h.Queues = queues; return h }

	m, _, err := hello(t, conn, withQueues(brokertest.Hello("w1", 1, "email.send", "email.digest"), "mail", "mail-eu"))
	if err != nil || m.GetWelcome() == nil {
		t.Fatalf("hello inside the scope: %v %v", m, err)
	}
	_, _, err = hello(t, conn, withQueues(brokertest.Hello("w2", 1, "email.send", "payments.charge"), "mail"))
	wantDenied(t, "a job type outside the scope", err, "hello.job_types[1]", `"payments.charge"`, "worker token")
	_, _, err = hello(t, conn, withQueues(brokertest.Hello("w3", 1, "email.send"), "mail", "billing"))
	wantDenied(t, "a queue outside the scope", err, "hello.queues[1]", `"billing"`)
	_, _, err = hello(t, conn, brokertest.Hello("w4", 1, "email.send"))
	wantDenied(t, "no queues with a queue-scoped token", err, "hello.queues", "mail, mail-*")

	// A token scoped to types only may leave the queues out.
	typesOnly := b.DialToken(b.Token(auth.RoleWorker, auth.Scope{Types: []string{"email.*"}}))
	if m, _, err := hello(t, typesOnly, brokertest.Hello("w5", 1, "email.send")); err != nil || m.GetWelcome() == nil {
		t.Fatalf("hello without queues, type-scoped token: %v %v", m, err)
	}
}

// TestScopedWorkerGetsOnlyItsJobs: a job outside the worker token's scope is never assigned
// to it, while a job inside is.
func TestScopedWorkerGetsOnlyItsJobs(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{RequireAuth: true})
	ctx := context.Background()
	conn := b.DialToken(b.Token(auth.RoleWorker, mailScope))
	if _, err := b.Producer.Enqueue(ctx, &jobwirev1.EnqueueRequest{Job: spec("billing", "email.send")}); err != nil {
		t.Fatal(err)
	}
	in, err := b.Producer.Enqueue(ctx, &jobwirev1.EnqueueRequest{Job: spec("mail", "email.send")})
	if err != nil {
		t.Fatal(err)
	}
	_, s, err := hello(t, conn, &jobwirev1.Hello{WorkerId: "w", JobTypes: []string{"email.send"}, Queues: []string{"mail"}, Capacity: 5})
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if got := m.GetAssignment().GetJob().GetId(); got != in.GetJob().GetId() {
		t.Fatalf("assigned %v, want job %d from queue mail", m, in.GetJob().GetId())
	}
}

// TestRevokedTokenClosesStream: revoking a worker token ends the streams it opened with
// UNAUTHENTICATED, and new calls with it are refused at once.
func TestRevokedTokenClosesStream(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{RequireAuth: true})
	ctx := context.Background()
	token := b.Token(auth.RoleWorker, auth.Scope{})
	conn := b.DialToken(token)
	m, s, err := hello(t, conn, brokertest.Hello("w", 1, "t"))
	if err != nil || m.GetWelcome() == nil {
		t.Fatalf("hello: %v %v", m, err)
	}
	p, err := b.Auth.Verify(ctx, token)
	if err != nil {
		t.Fatal(err)
	}
	tokens := jobwirev1.NewTokenServiceClient(b.Conn)
	if _, err := tokens.RevokeToken(ctx, &jobwirev1.RevokeTokenRequest{Id: p.TokenID}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		for {
			if _, err := s.Recv(); err != nil {
				done <- err
				return
			}
		}
	}()
	select {
	case err := <-done:
		if status.Code(err) != codes.Unauthenticated {
			t.Fatalf("open stream after revoke ended with %v, want UNAUTHENTICATED", err)
		}
	case <-time.After(brokertest.WaitTimeout):
		t.Fatal("the stream stayed open after its token was revoked")
	}
	if _, _, err := hello(t, conn, brokertest.Hello("w", 1, "t")); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("new stream with the revoked token: %v, want UNAUTHENTICATED", err)
	}
}
