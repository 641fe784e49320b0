package security

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/brokertest"
)

// Over the RPC, a bulk purge or requeue with an empty filter once acted on the whole dead-letter
// queue. It now needs a filter that sets something, or all; a preview (dry run) only counts and
// samples.
func TestBulkDLQNeedsFilterOrAll(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	ctx := context.Background()
	w := b.Connect(brokertest.Hello("w", 3, "t"))
	for range 3 {
		enqueueOne(t, b, &jobwirev1.JobSpec{Type: "t"})
	}
	as := []*jobwirev1.Assignment{w.Assignment(), w.Assignment(), w.Assignment()}
	for _, a := range as {
		if m := w.Fail(a, brokertest.Fatal("E")); m.GetResultAck().GetDecision() != jobwirev1.Decision_DECISION_DEAD {
			t.Fatalf("answer %v, want DEAD", m)
		}
	}
	for name, sel := range map[string]*jobwirev1.BulkSelection{
		"unset filter": {},
		"empty filter": {Filter: &jobwirev1.DeadJobFilter{}},
	} {
		if _, err := b.Admin.PurgeDeadJobs(ctx, &jobwirev1.PurgeDeadJobsRequest{Selection: sel}); status.Code(err) != codes.InvalidArgument {
			t.Fatalf("purge with %s: %v, want INVALID_ARGUMENT", name, err)
		}
		if _, err := b.Admin.RequeueDeadJobs(ctx, &jobwirev1.RequeueDeadJobsRequest{Selection: sel}); status.Code(err) != codes.InvalidArgument {
			t.Fatalf("requeue with %s: %v, want INVALID_ARGUMENT", name, err)
		}
	}
	dry, err := b.Admin.PurgeDeadJobs(ctx, &jobwirev1.PurgeDeadJobsRequest{Selection: &jobwirev1.BulkSelection{All: true, Preview: true}})
	if err != nil || dry.GetMatched() != 3 || dry.GetAffected() != 0 || len(dry.GetSample()) != 3 {
		t.Fatalf("dry run of all: %v, %v; want 3 matched, none purged, a sample of 3", dry, err)
	}
	res, err := b.Admin.PurgeDeadJobs(ctx, &jobwirev1.PurgeDeadJobsRequest{Selection: &jobwirev1.BulkSelection{All: true}})
	if err != nil || res.GetAffected() != 3 {
		t.Fatalf("purge all: %v, %v; want 3 purged", res, err)
	}
}
