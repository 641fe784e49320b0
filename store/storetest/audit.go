package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/jobwire/jobwire/store"
)

var _ = register(
	testCase{"AuditTrail", testAuditTrail},
	testCase{"AuditRollsBackWithItsAction", testAuditRollsBack},
)

// Audit events are stored whole, listed newest first with filters and a cursor, counted on by
// AuditAddCount and deleted by age, oldest first.
func testAuditTrail(t *testing.T, b *bundle) {
	at := func(s int) time.Time { return b.now.Add(time.Duration(s) * time.Second) }
	many := make([]int64, store.MaxAuditJobIDs+5)
	for i := range many {
		many[i] = int64(i + 1)
	}
	evs := []*store.AuditEvent{
		{At: at(1), Action: "queue.pause", ActorID: "a1", ActorName: "alice", Source: "api", Peer: "10.0.0.1:5000",
			BrokerID: "b1", Target: "mail"},
		{At: at(2), Action: "dlq.purge", ActorID: "b2", ActorName: "bob", Source: "dashboard", Detail: "queue=mail",
			Count: 3, JobIDs: []int64{7, 8, 9}},
		{At: at(3), Action: "queue.pause", ActorName: "anonymous", Source: "api", Target: "sms"},
		{At: at(4), Action: "dlq.requeue", ActorID: "a1", ActorName: "alice", Source: "api",
			Count: int64(len(many)), JobIDs: many},
	}
	b.write(func(tx store.Tx) error {
		for _, e := range evs {
			if err := tx.AuditInsert(e); err != nil {
				return err
			}
		}
		return nil
	})
	for i := 1; i < len(evs); i++ {
		if evs[i].ID <= evs[i-1].ID {
			t.Fatalf("ids %d then %d: want them rising in the order stored", evs[i-1].ID, evs[i].ID)
		}
	}
	list := func(p store.AuditListParams) []store.AuditEvent {
		t.Helper()
		if p.Limit == 0 {
			p.Limit = 100
		}
		got, err := b.s.AuditList(b.ctx, &p)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	ids := func(es []store.AuditEvent) []int64 {
		out := make([]int64, len(es))
		for i, e := range es {
			out[i] = e.ID
		}
		return out
	}
	all := list(store.AuditListParams{})
	equal(t, "all, newest first", ids(all), []int64{evs[3].ID, evs[2].ID, evs[1].ID, evs[0].ID})
	want := *evs[1]
	equal(t, "an event read back", all[2], want)
	if n := len(all[0].JobIDs); n != store.MaxAuditJobIDs || all[0].JobIDs[0] != 1 {
		t.Errorf("an event of %d job ids keeps %d, first %d; want the first %d", len(many), n, all[0].JobIDs[0], store.MaxAuditJobIDs)
	}
	if all[0].Count != int64(len(many)) {
		t.Errorf("count %d, want %d", all[0].Count, len(many))
	}
	if all[3].JobIDs == nil || len(all[3].JobIDs) != 0 {
		t.Errorf("an event of no jobs reads back job ids %#v, want an empty list", all[3].JobIDs)
	}
	equal(t, "by action", ids(list(store.AuditListParams{Action: "queue.pause"})), []int64{evs[2].ID, evs[0].ID})
	equal(t, "by actor id", ids(list(store.AuditListParams{Actor: "a1"})), []int64{evs[3].ID, evs[0].ID})
	equal(t, "by actor name", ids(list(store.AuditListParams{Actor: "bob"})), []int64{evs[1].ID})
	equal(t, "since, until", ids(list(store.AuditListParams{Since: at(2), Until: at(4)})), []int64{evs[2].ID, evs[1].ID})
	equal(t, "a page", ids(list(store.AuditListParams{Limit: 2})), []int64{evs[3].ID, evs[2].ID})
	equal(t, "the next page", ids(list(store.AuditListParams{BeforeID: evs[2].ID, Limit: 2})), []int64{evs[1].ID, evs[0].ID})
	equal(t, "filters and cursor", ids(list(store.AuditListParams{Action: "queue.pause", Actor: "alice", BeforeID: evs[3].ID})), []int64{evs[0].ID})

	b.write(func(tx store.Tx) error { return tx.AuditAddCount(evs[1].ID, 4) })
	if got := list(store.AuditListParams{Actor: "bob"}); got[0].Count != 7 {
		t.Errorf("count after adding 4 to 3: %d", got[0].Count)
	}
	err := b.s.Write(b.ctx, "storetest", func(tx store.Tx) error { return tx.AuditAddCount(evs[3].ID+100, 1) })
	if !errors.Is(err, store.ErrNotFound) {
		t.Errorf("AuditAddCount of an unknown event: %v, want ErrNotFound", err)
	}

	var n int
	b.write(func(tx store.Tx) error {
		var err error
		n, err = tx.AuditDeleteBefore(at(4), 2)
		return err
	})
	if n != 2 {
		t.Errorf("deleted %d, want 2 (the limit)", n)
	}
	equal(t, "after a limited delete", ids(list(store.AuditListParams{})), []int64{evs[3].ID, evs[2].ID})
	b.write(func(tx store.Tx) error {
		var err error
		n, err = tx.AuditDeleteBefore(at(4), 100)
		return err
	})
	if n != 1 {
		t.Errorf("deleted %d, want 1 (only the event before the cutoff)", n)
	}
	equal(t, "after the delete", ids(list(store.AuditListParams{})), []int64{evs[3].ID})
}

// An audit event written in a transaction that rolls back is not stored.
func testAuditRollsBack(t *testing.T, b *bundle) {
	boom := errors.New("boom")
	err := b.s.Write(b.ctx, "storetest", func(tx store.Tx) error {
		if err := tx.QueueSetPaused("mail", true); err != nil {
			return err
		}
		if err := tx.AuditInsert(&store.AuditEvent{At: b.now, Action: "queue.pause", Target: "mail"}); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Write: %v, want boom", err)
	}
	got, err := b.s.AuditList(b.ctx, &store.AuditListParams{Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 0 {
		t.Fatalf("the trail holds %d events of a write that rolled back", len(got))
	}
}
