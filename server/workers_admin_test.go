package server_test

import (
	"context"
	"slices"
	"testing"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/brokertest"
)

func TestListWorkersShowsStreamsAndLeases(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	ctx := context.Background()
	hello := brokertest.Hello("mailer-1", 4, "email.send", "email.bounce")
	hello.Queues = []string{"mail"}
	w := b.Connect(hello)
	b.Connect(brokertest.Hello("reports-1", 2, "report.build"))
	enqueue(t, b, &jobwirev1.JobSpec{Type: "email.send", Queue: "mail"})
	enqueue(t, b, &jobwirev1.JobSpec{Type: "email.send", Queue: "mail"})
	first := w.Assignment()
	w.Assignment()
	w.Started(first)

	var mailer *jobwirev1.WorkerInfo
	brokertest.WaitFor(t, "the worker to show as running the job", func() bool { // the Started message is stored after the assignment
		res, err := b.Admin.ListWorkers(ctx, &jobwirev1.ListWorkersRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.GetWorkers()) != 2 {
			t.Fatalf("ListWorkers = %d workers, want 2", len(res.GetWorkers()))
		}
		i := slices.IndexFunc(res.GetWorkers(), func(w *jobwirev1.WorkerInfo) bool { return w.GetWorkerId() == "mailer-1" })
		if i < 0 {
			t.Fatalf("ListWorkers has no mailer-1: %v", res)
		}
		mailer = res.GetWorkers()[i]
		return mailer.GetRunning() == 1
	})
	if mailer.GetWorkerId() != "mailer-1" || mailer.GetCapacity() != 4 || mailer.GetLeasesHeld() != 2 ||
		!slices.Equal(mailer.GetJobTypes(), []string{"email.send", "email.bounce"}) ||
		!slices.Equal(mailer.GetQueues(), []string{"mail"}) || mailer.GetDraining() ||
		!mailer.GetConnectedAt().AsTime().Equal(brokertest.Start) || mailer.GetSessionId() == "" {
		t.Errorf("mailer = %v", mailer)
	}
}
