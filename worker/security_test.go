package worker_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/jobwire/jobwire/internal/auth"
	"github.com/jobwire/jobwire/internal/brokertest"
	"github.com/jobwire/jobwire/worker"
)

// TestRunStopsOnARefusedToken: a token the broker refuses cannot become good by reconnecting,
// so Run returns the error instead of retrying: no token, a producer's token, and a worker
// token whose scope does not cover the worker's job types.
func TestRunStopsOnARefusedToken(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{RequireAuth: true})
	for name, c := range map[string]struct {
		token string
		want  codes.Code
	}{
		"no token":        {"", codes.Unauthenticated},
		"producer token":  {b.Token(auth.RoleProducer, auth.Scope{}), codes.PermissionDenied},
		"scope too small": {b.Token(auth.RoleWorker, auth.Scope{Types: []string{"other.*"}}), codes.PermissionDenied},
	} {
		w, err := worker.New(b.DialToken(c.token), worker.Options{ID: "w", Concurrency: 1})
		if err != nil {
			t.Fatal(err)
		}
		w.Handle("email.send", func(context.Context, *worker.Job) error { return nil })
		ctx, cancel := context.WithTimeout(context.Background(), brokertest.WaitTimeout)
		start := time.Now()
		err = w.Run(ctx)
		cancel()
		if status.Code(err) != c.want {
			t.Errorf("%s: Run = %v after %s, want %s", name, err, time.Since(start), c.want)
		}
	}
}
