package worker_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/brokertest"
	"github.com/jobwire/jobwire/worker"
)

var errNoRecipient = errors.New("no recipient")

// Errors made with errors.New reach the dead-letter queue under a name: a registered sentinel
// by its variable's name, an ErrorType wrapper by its own; an unnamed one is grouped by its
// message's fingerprint.
func TestErrorTypesReachTheDeadLetterQueue(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	stop := runWorker(t, b, func(w *worker.Worker) {
		w.RegisterError("ErrNoRecipient", errNoRecipient)
		w.Handle("mail", func(context.Context, *worker.Job) error {
			return worker.Fatal(fmt.Errorf("send: %w", errNoRecipient))
		})
		w.Handle("charge", func(context.Context, *worker.Job) error {
			return worker.Fatal(worker.ErrorType(errors.New("card declined"), "CardDeclined"))
		})
		w.Handle("order", func(_ context.Context, j *worker.Job) error {
			return worker.Fatal(fmt.Errorf("order %s not found", j.Payload))
		})
	})
	defer stop()
	for typ, want := range map[string]string{"mail": "ErrNoRecipient", "charge": "CardDeclined"} {
		j := waitJob(t, b, enqueue(t, b, typ, ""), jobwirev1.JobState_JOB_STATE_DEAD)
		if got := j.GetLastErrorType(); got != want {
			t.Errorf("%s: error type %q, want %q", typ, got, want)
		}
	}
	for _, n := range []string{"17", "4242", "9"} {
		waitJob(t, b, enqueue(t, b, "order", n), jobwirev1.JobState_JOB_STATE_DEAD)
	}
	res, err := b.Admin.TopDeadErrors(context.Background(), &jobwirev1.TopDeadErrorsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	g := res.GetGroups()
	if len(g) != 3 || g[0].GetErrorType() != "error" || g[0].GetCount() != 3 ||
		g[0].GetFingerprint() != "order <n> not found" || g[0].GetSampleMessage() != "order 9 not found" {
		t.Fatalf("dlq top = %v; want the three unnamed errors first, as one fingerprint", g)
	}
}
