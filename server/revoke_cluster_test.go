package server_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/auth"
	"github.com/jobwire/jobwire/internal/brokertest"
)

// tokenID is the public id of a token jw_<id>_<secret>.
func tokenID(token string) string { return strings.Split(token, "_")[1] }

// A token revoked through one broker is refused by another, and the worker stream it opened
// there ends: the revocation's commit notifies every broker. The fake clock never moves, so no
// cache lifetime can have run out; only the notification can have reached the other broker.
func TestClusterRevocationReachesEveryBroker(t *testing.T) {
	t.Parallel()
	a := brokertest.New(t, brokertest.Options{Cluster: true, ClusterPoll: noPoll, RequireAuth: true})
	a.WaitLeader()
	b := brokertest.New(t, brokertest.Options{Join: a, ClusterPoll: noPoll, RequireAuth: true})
	a.WaitListening(2)
	ctx := context.Background()

	worker := a.Token(auth.RoleWorker, auth.Scope{})
	producer := a.Token(auth.RoleProducer, auth.Scope{})
	w, err := b.ConnectOn(jobwirev1.NewWorkerServiceClient(b.DialToken(worker)), brokertest.Hello("w1", 1, "t"))
	if err != nil {
		t.Fatalf("a worker stream on the second broker: %v", err)
	}
	onB := jobwirev1.NewProducerServiceClient(b.DialToken(producer))
	enqueue := func() error {
		_, err := onB.Enqueue(ctx, &jobwirev1.EnqueueRequest{Job: spec("t")})
		return err
	}
	if err := enqueue(); err != nil { // the second broker has the producer token cached now
		t.Fatalf("enqueue through the second broker: %v", err)
	}

	tokens := jobwirev1.NewTokenServiceClient(a.Conn)
	for _, tok := range []string{worker, producer} {
		if _, err := tokens.RevokeToken(ctx, &jobwirev1.RevokeTokenRequest{Id: tokenID(tok)}); err != nil {
			t.Fatalf("revoke through the first broker: %v", err)
		}
	}
	revoked := time.Now()
	var lastErr error
	brokertest.WaitFor(t, "the second broker to refuse the revoked producer token", func() bool {
		lastErr = enqueue()
		return lastErr != nil
	})
	t.Logf("the second broker accepted the revoked token for %s after the revocation returned", time.Since(revoked))
	if status.Code(lastErr) != codes.Unauthenticated {
		t.Fatalf("enqueue with the revoked token: %v, want UNAUTHENTICATED", lastErr)
	}
	if err := w.Err(); status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), "was revoked") {
		t.Fatalf("the worker stream on the second broker ended with %v, want UNAUTHENTICATED saying the token was revoked", err)
	}
	if _, err := b.ConnectOn(jobwirev1.NewWorkerServiceClient(b.DialToken(worker)), brokertest.Hello("w1", 1, "t")); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("a new stream with the revoked token on the second broker: %v, want UNAUTHENTICATED", err)
	}
}
