package client_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jobwire/jobwire/client"
	"github.com/jobwire/jobwire/internal/brokertest"
	"github.com/jobwire/jobwire/job"
)

// A unique enqueue of work already waiting answers with that job, saying the unique key made it
// a duplicate; in a batch too, and alongside an idempotency key, which is looked at first.
func TestUniqueEnqueueFromTheGoClient(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	c := client.New(b.Conn)
	perCustomer := client.Unique(client.UniqueOpts{Fields: []string{"payload.customer"}})
	first, err := c.EnqueueJSON(t.Context(), "report", map[string]any{"customer": 7, "month": "may"}, perCustomer)
	if err != nil || first.Duplicate {
		t.Fatalf("first: %+v, %v", first, err)
	}
	again, err := c.EnqueueJSON(t.Context(), "report", map[string]any{"customer": 7, "month": "june"}, perCustomer)
	if err != nil || !again.Duplicate || !again.DuplicateByUnique || again.ID != first.ID || again.State != job.StatePending {
		t.Fatalf("same customer: %+v, %v; want job %d as a duplicate by its unique key", again, err, first.ID)
	}
	res, err := c.EnqueueBatch(t.Context(), []client.JobSpec{
		client.NewJobSpec("report", []byte(`{"customer":8}`), perCustomer),
		client.NewJobSpec("report", []byte(`{"customer":8,"x":1}`), perCustomer),
		client.NewJobSpec("report", []byte(`{"customer":7}`), perCustomer, client.IdempotencyKey("req-1")),
	})
	if err != nil || res[0].Duplicate || !res[1].DuplicateByUnique || res[1].ID != res[0].ID || res[2].ID != first.ID || !res[2].DuplicateByUnique {
		t.Fatalf("batch: %+v, %v", res, err)
	}
	j, err := c.Get(t.Context(), first.ID)
	if err != nil || len(j.UniqueKey) != 64 || len(j.UniqueStates) != 4 {
		t.Fatalf("job: key %q, states %v, %v", j.UniqueKey, j.UniqueStates, err)
	}
	_, err = c.Enqueue(t.Context(), "report", nil, client.Unique(client.UniqueOpts{States: []job.State{job.StatePending}}))
	if !errors.Is(err, client.ErrInvalidArgument) || !strings.Contains(err.Error(), "states must include SCHEDULED") {
		t.Fatalf("bad states: %v; want ErrInvalidArgument naming the states", err)
	}
}

// The operations on waiting jobs, from the Go client: each changes a waiting job, and a job
// that does not wait is an error matching ErrFailedPrecondition that names its state.
func TestWaitingJobOperationsFromTheGoClient(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	c := client.New(b.Conn)
	later, err := c.Enqueue(t.Context(), "t", nil, client.Delay(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if j, err := c.SetJobPriority(t.Context(), later.ID, -5); err != nil || j.Priority != -5 {
		t.Fatalf("priority: %+v, %v", j, err)
	}
	if _, err := c.RetryJobNow(t.Context(), later.ID); !errors.Is(err, client.ErrFailedPrecondition) ||
		!strings.Contains(err.Error(), "is SCHEDULED") {
		t.Fatalf("retry now of a first run: %v; want ErrFailedPrecondition", err)
	}
	if j, err := c.RunJobNow(t.Context(), later.ID); err != nil || j.State != job.StatePending {
		t.Fatalf("run now: %+v, %v", j, err)
	}
	if _, err := c.RunJobNow(t.Context(), later.ID); !errors.Is(err, client.ErrFailedPrecondition) ||
		!strings.Contains(err.Error(), "is PENDING: only a SCHEDULED job can be run now") {
		t.Fatalf("run now of a pending job: %v; want ErrFailedPrecondition naming PENDING", err)
	}
	if j, err := c.DeleteJob(t.Context(), later.ID); err != nil || j.ID != later.ID {
		t.Fatalf("delete: %+v, %v", j, err)
	}
	if _, err := c.Get(t.Context(), later.ID); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("get of the deleted job: %v; want ErrNotFound", err)
	}
	if _, err := c.SetJobPriority(t.Context(), 1, 1<<40); !errors.Is(err, client.ErrInvalidArgument) {
		t.Fatalf("priority out of int32: %v; want ErrInvalidArgument", err)
	}
}
