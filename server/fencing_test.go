package server_test

import (
	"context"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/brokertest"
	"github.com/jobwire/jobwire/job"
)

// shiftToken is a lease token's wire form with its lease number moved by d and its secret
// kept: a token of a later lease than any the job had (d > 0) or of the lease number before.
func shiftToken(t *testing.T, token string, d int64) string {
	t.Helper()
	tok, err := job.ParseLeaseToken(token)
	if err != nil {
		t.Fatalf("lease token %q: %v", token, err)
	}
	tok.Seq += d
	return tok.String()
}

// storedLease is what a refused message must leave alone.
func storedLease(t *testing.T, b *brokertest.Bundle, id int64) string {
	t.Helper()
	j, err := b.Store.JobGet(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%s attempts=%d token=%s lease=%s worker=%s history=%d", j.State, j.Attempts,
		j.LeaseToken, j.LeaseExpiresAt, j.WorkerID, len(j.History))
}

// After a restart the broker knows a running job's lease only from the database. A result,
// heartbeat, start or release under a token of the job's earlier lease, or under a lease number
// above the current one, is refused as stale and changes nothing; the current token still
// finishes the job.
func TestStaleTokensAfterRestartAreRefused(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	w := b.Connect(brokertest.Hello("w1", 1, "t"))
	id := enqueue(t, b, &jobwirev1.JobSpec{Type: "t"})
	first := w.Assignment()
	w.Release(brokertest.Ref(first)) // the job is leased again, under a new token
	a := w.Assignment()
	if a.GetJob().GetId() != id || a.GetLeaseToken() == first.GetLeaseToken() {
		t.Fatalf("second assignment %v, want job %d under a new token", a, id)
	}
	w.Started(a)
	b.WaitState(id, jobwirev1.JobState_JOB_STATE_RUNNING)

	b.Restart()
	cur := brokertest.Ref(a)
	hello := brokertest.Hello("w1", 1, "t")
	hello.Held = []*jobwirev1.LeaseRef{cur}
	w = b.Connect(hello) // adopts the lease the new broker rebuilt from storage
	if len(w.Welcome.GetLost()) != 0 {
		t.Fatalf("welcome after restart lost %v, want the running job's lease adopted", w.Welcome.GetLost())
	}
	before := storedLease(t, b, id)

	stale := map[string]*jobwirev1.LeaseRef{
		"earlier lease": brokertest.Ref(first),
		"older number":  {JobId: id, LeaseToken: shiftToken(t, cur.GetLeaseToken(), -1)},
		"newer number":  {JobId: id, LeaseToken: shiftToken(t, cur.GetLeaseToken(), +1)},
	}
	for name, ref := range stale {
		for _, m := range []struct {
			about jobwirev1.RefusedMessage
			send  func() *jobwirev1.ConnectResponse
		}{
			{jobwirev1.RefusedMessage_REFUSED_MESSAGE_RESULT, func() *jobwirev1.ConnectResponse { return w.Report(ref, nil) }},
			{jobwirev1.RefusedMessage_REFUSED_MESSAGE_HEARTBEAT, func() *jobwirev1.ConnectResponse { return w.Heartbeat(ref) }},
			{jobwirev1.RefusedMessage_REFUSED_MESSAGE_STARTED, func() *jobwirev1.ConnectResponse { w.StartedRef(ref); return w.Next() }},
			{jobwirev1.RefusedMessage_REFUSED_MESSAGE_RELEASE, func() *jobwirev1.ConnectResponse { w.Release(ref); return w.Next() }},
		} {
			r := m.send().GetRefused()
			if r.GetRefusedMessage() != m.about || codes.Code(r.GetCode()) != codes.FailedPrecondition || r.GetLeaseToken() != ref.GetLeaseToken() {
				t.Fatalf("%s with the %s token: answered %v, want it refused as stale (FAILED_PRECONDITION)", m.about, name, r)
			}
			if after := storedLease(t, b, id); after != before {
				t.Fatalf("%s with the %s token changed the job:\n%s\nwas\n%s", m.about, name, after, before)
			}
		}
	}
	if r := ack(t, w.Succeed(a)); r.GetDecision() != jobwirev1.Decision_DECISION_SUCCEEDED {
		t.Fatalf("result under the current token after the refusals: %s, want SUCCEEDED", r.GetDecision())
	}
	checkJob(t, b, id, jobwirev1.JobState_JOB_STATE_SUCCEEDED, 1, jobwirev1.AttemptOutcome_ATTEMPT_OUTCOME_SUCCEEDED)
}
