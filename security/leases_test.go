package security

import (
	"context"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/auth"
	"github.com/jobwire/jobwire/internal/brokertest"
)

// runJobs enqueues n jobs of type t and has w start them all; it returns their assignments.
func runJobs(t *testing.T, b *brokertest.Bundle, w *brokertest.RawWorker, n int) []*jobwirev1.Assignment {
	t.Helper()
	specs := make([]*jobwirev1.JobSpec, n)
	for i := range specs {
		specs[i] = &jobwirev1.JobSpec{Type: "t"}
	}
	if _, err := b.Producer.EnqueueBatch(context.Background(), &jobwirev1.EnqueueBatchRequest{Jobs: specs}); err != nil {
		t.Fatalf("enqueue: %v", err)
	}
	var as []*jobwirev1.Assignment
	for range n {
		a := w.Assignment()
		w.Started(a)
		as = append(as, a)
	}
	return as
}

// succeedAll checks that w's results for every assignment are still accepted: nobody took the
// leases over.
func succeedAll(t *testing.T, w *brokertest.RawWorker, as []*jobwirev1.Assignment) {
	t.Helper()
	for _, a := range as {
		m := w.Succeed(a)
		if ack := m.GetResultAck(); ack == nil || ack.GetDecision() != jobwirev1.Decision_DECISION_SUCCEEDED {
			t.Fatalf("the real worker's result for job %d: %v", a.GetJob().GetId(), m)
		}
	}
}

// A second stream that lists guessed {job, token} pairs in Hello.held adopts nothing: tokens
// carry 128 random bits, so small counters (what tokens once were) and random guesses alike
// name no lease, and the real worker keeps every job.
func TestLeaseTakeoverByGuessing(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	victim := b.Connect(brokertest.Hello("victim", 20, "t"))
	as := runJobs(t, b, victim, 20)
	var guesses []*jobwirev1.LeaseRef
	for _, a := range as {
		id := a.GetJob().GetId()
		for _, tok := range []string{"1", "2", "1.00000000000000000000000000000000", fmt.Sprintf("1.%032x", id)} {
			guesses = append(guesses, &jobwirev1.LeaseRef{JobId: id, LeaseToken: tok})
		}
	}
	// In batches of the attacker's capacity: a Hello may list at most that many.
	for len(guesses) > 0 {
		n := min(len(guesses), 50)
		hello := brokertest.Hello("attacker", 50, "t")
		hello.Held = guesses[:n]
		guesses = guesses[n:]
		attacker := b.Connect(hello)
		if lost := attacker.Welcome.GetLost(); len(lost) != n {
			t.Fatalf("the attacker adopted %d of %d guessed leases", n-len(lost), n)
		}
		attacker.Kill()
	}
	succeedAll(t, victim, as)
}

// Even the right tokens, leaked, are adopted only by the worker they were granted to: the same
// worker id and, with auth on, the same token.
func TestHeldLeasesAdoptedOnlyByTheirWorker(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{RequireAuth: true})
	workerToken := b.Token(auth.RoleWorker, auth.Scope{})
	otherToken := b.Token(auth.RoleWorker, auth.Scope{})
	victimConn := jobwirev1.NewWorkerServiceClient(b.DialToken(workerToken))
	victim, err := b.ConnectOn(victimConn, brokertest.Hello("victim", 4, "t"))
	if err != nil {
		t.Fatal(err)
	}
	as := runJobs(t, b, victim, 4)
	leaked := make([]*jobwirev1.LeaseRef, len(as))
	for i, a := range as {
		leaked[i] = &jobwirev1.LeaseRef{JobId: a.GetJob().GetId(), LeaseToken: a.GetLeaseToken()}
	}
	for name, try := range map[string]struct {
		client   jobwirev1.WorkerServiceClient
		workerID string
	}{
		"another worker id, same token":  {victimConn, "attacker"},
		"same worker id, another token":  {jobwirev1.NewWorkerServiceClient(b.DialToken(otherToken)), "victim"},
		"another worker id and token":    {jobwirev1.NewWorkerServiceClient(b.DialToken(otherToken)), "attacker"},
		"same worker id, an admin token": {b.Workers, "victim"},
	} {
		hello := brokertest.Hello(try.workerID, 4, "t")
		hello.Held = leaked
		w, err := b.ConnectOn(try.client, hello)
		if err != nil {
			t.Fatalf("%s: connect: %v", name, err)
		}
		if lost := w.Welcome.GetLost(); len(lost) != len(leaked) {
			t.Fatalf("%s: adopted %d of %d leaked leases", name, len(leaked)-len(lost), len(leaked))
		}
		w.Kill()
	}
	succeedAll(t, victim, as)
}

// Hello.held is bounded by the stream's capacity, each job counts once, and adopted leases
// take capacity like assigned ones.
func TestHeldListAbuse(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	w1 := b.Connect(brokertest.Hello("w1", 2, "t"))
	as := runJobs(t, b, w1, 2)

	// More entries than capacity: refused before anything is looked up.
	hello := brokertest.Hello("w1", 1, "t")
	for _, a := range as {
		hello.Held = append(hello.Held, &jobwirev1.LeaseRef{JobId: a.GetJob().GetId(), LeaseToken: a.GetLeaseToken()})
	}
	if _, err := b.ConnectOn(b.Workers, hello); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("held beyond capacity: %v, want INVALID_ARGUMENT", err)
	}
	// One lease listed twice with capacity 2: adopted once, the copy is lost.
	w1.Kill()
	hello = brokertest.Hello("w1", 2, "t")
	ref := &jobwirev1.LeaseRef{JobId: as[0].GetJob().GetId(), LeaseToken: as[0].GetLeaseToken()}
	hello.Held = []*jobwirev1.LeaseRef{ref, ref}
	w2 := b.Connect(hello)
	if lost := w2.Welcome.GetLost(); len(lost) != 1 || lost[0].GetJobId() != ref.GetJobId() {
		t.Fatalf("lost = %v, want the duplicate entry", lost)
	}
	// The adopted lease takes one slot of two: one more job is assigned, and no second.
	if _, err := b.Producer.EnqueueBatch(context.Background(), &jobwirev1.EnqueueBatchRequest{
		Jobs: []*jobwirev1.JobSpec{{Type: "t"}, {Type: "t"}}}); err != nil {
		t.Fatal(err)
	}
	a := w2.Assignment()
	if ack := w2.Succeed(as[0]).GetResultAck(); ack == nil {
		t.Fatal("the adopted lease's result was not acknowledged")
	}
	// Only now is there room for the second new job.
	next := w2.Assignment()
	if next.GetJob().GetId() == a.GetJob().GetId() {
		t.Fatalf("the same job was assigned twice")
	}
}
