package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/jobwire/jobwire/store"
	"github.com/jobwire/jobwire/store/postgres/pgtest"
)

// Adding a dependent locks its parents (shared) until it commits, and another broker's lease
// skips a parent so held: a write that held a PENDING parent publishes EventReady, for that
// broker to look again once the lock is let go. One that held only a WAITING parent, which no
// lease reads, publishes nothing.
func TestAddingADependentOfAPendingParentPublishesReady(t *testing.T) {
	t.Parallel()
	u := pgtest.URL(t)
	a, b := openBroker(t, u, nil), openBroker(t, u, nil)
	events := listen(t, b)
	waitListening(t, b)
	now := time.Unix(1_700_000_000, 0)
	insert := func(parent int64) int64 {
		t.Helper()
		var id int64
		err := a.Write(context.Background(), "insert", func(tx store.Tx) error {
			res, err := tx.JobInsertMany([]*store.JobInsertParams{{Type: "t", Queue: "default", Payload: []byte(`{}`),
				MaxAttempts: 3, RunAt: now, Now: now, AttemptTimeout: time.Minute}})
			if err != nil {
				return err
			}
			id = res[0].ID
			if parent == 0 {
				return nil
			}
			_, err = tx.JobDepsAdd([]*store.JobDepsParams{{Child: id, Parents: []int64{parent}, Now: now}})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	marker := func(key string) {
		t.Helper()
		publish(t, a, nil, store.Event{Kind: store.EventQueues, Key: key})
	}
	parent := insert(0)
	marker("parent")
	if e := nextEvent(t, events); e.Key != "parent" {
		t.Fatalf("the parent's insert published %+v", e)
	}
	child := insert(parent)
	marker("child")
	if e := nextEvent(t, events); e.Kind != store.EventReady || e.From != a.BrokerID() {
		t.Fatalf("adding a dependent of a PENDING parent published %+v, want EventReady", e)
	}
	if e := nextEvent(t, events); e.Key != "child" {
		t.Fatalf("then %+v, want the marker", e)
	}
	insert(child)
	marker("grandchild")
	if e := nextEvent(t, events); e.Key != "grandchild" {
		t.Fatalf("adding a dependent of a WAITING parent published %+v, want nothing", e)
	}
}
