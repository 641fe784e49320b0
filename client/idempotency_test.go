package client_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/jobwire/jobwire/client"
	"github.com/jobwire/jobwire/internal/brokertest"
)

// A repeat of an idempotency key with other content is an error the caller can branch on, with
// the broker's sentence naming what differs; a true repeat is a duplicate.
func TestIdempotencyConflictIsAClearError(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	c := client.New(b.Conn)
	first, err := c.Enqueue(t.Context(), "t", []byte("a"), client.IdempotencyKey("k"))
	if err != nil {
		t.Fatal(err)
	}
	again, err := c.Enqueue(t.Context(), "t", []byte("a"), client.IdempotencyKey("k"))
	if err != nil || !again.Duplicate || again.ID != first.ID {
		t.Fatalf("repeat: %+v, %v; want a duplicate of job %d", again, err, first.ID)
	}
	_, err = c.Enqueue(t.Context(), "t", []byte("b"), client.IdempotencyKey("k"))
	if !errors.Is(err, client.ErrIdempotencyConflict) || !errors.Is(err, client.ErrAlreadyExists) ||
		!strings.Contains(err.Error(), "whose payload differs") {
		t.Fatalf("repeat with another payload: %v; want ErrIdempotencyConflict naming the payload", err)
	}
	_, err = c.EnqueueBatch(t.Context(), []client.JobSpec{client.NewJobSpec("t", []byte("c"), client.IdempotencyKey("k"))})
	if !errors.Is(err, client.ErrIdempotencyConflict) || !strings.Contains(err.Error(), "jobs[0]: ") {
		t.Fatalf("batch with a conflicting key: %v; want ErrIdempotencyConflict naming jobs[0]", err)
	}
}
