package sqlite

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/store"
)

// offeredAlone inserts the job of p offered to o's worker and reports whether the insert
// leased it.
func offeredAlone(t *testing.T, s *Store, p *store.JobInsertParams, o *store.JobOffer) bool {
	t.Helper()
	var leased []*job.Job
	if err := s.Write(context.Background(), "offer", func(tx store.Tx) error {
		_, err := tx.JobInsertOfferedAtCommit([]*store.JobInsertParams{p}, []*store.JobOffer{o},
			func(jobs []*job.Job, err error) { leased = jobs })
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return len(leased) == 1 && leased[0] != nil
}

// Only the queues the offer's worker takes can hold a job the offer would go ahead of: a job
// waiting in another queue, whatever its priority, keeps no offer of a worker that names its
// queues back, and keeps back one of a worker of every queue or of that queue too.
func TestOfferPassesQueuesItsWorkerDoesNotTake(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, now := openTemp(t)
	params := func(queue string, priority int) *store.JobInsertParams {
		return &store.JobInsertParams{Type: "t", Queue: queue, Priority: priority, MaxAttempts: 1, RunAt: now,
			Now: now, AttemptTimeout: time.Minute}
	}
	if err := s.Write(ctx, "backlog", func(tx store.Tx) error {
		_, err := tx.JobInsertMany([]*store.JobInsertParams{params("backlog", 5)})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		queues []string
		leased bool
	}{
		{[]string{"default"}, true},
		{[]string{"other", "default"}, true},
		{[]string{"default", "backlog"}, false},
		{nil, false},
	} {
		offer := &store.JobOffer{WorkerID: "w", LeaseUntil: now.Add(time.Minute), Queues: c.queues, Types: []string{"t"}}
		if got := offeredAlone(t, s, params("default", 0), offer); got != c.leased {
			t.Errorf("a job offered to a worker of queues %q beside a job waiting in backlog: leased %t, want %t",
				c.queues, got, c.leased)
		}
	}
}

// An offer counts only the ready jobs of the types its worker takes, in the queues it takes: a
// backlog of a type no worker handles, in the same queue, keeps no offer back, and a job of
// a type it takes, in a queue it takes, does. Without its types, every ready job counts.
func TestOfferPassesTypesItsWorkerDoesNotTake(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, now := openTemp(t)
	params := func(typ, queue string, priority int) *store.JobInsertParams {
		return &store.JobInsertParams{Type: typ, Queue: queue, Priority: priority, MaxAttempts: 1, RunAt: now,
			Now: now, AttemptTimeout: time.Minute}
	}
	if err := s.Write(ctx, "backlog", func(tx store.Tx) error {
		_, err := tx.JobInsertMany([]*store.JobInsertParams{params("unserved", "default", 100), params("other", "elsewhere", 100)})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	// A worker of more types than a lease reads one by one: its types with ready jobs count
	// (store.NarrowsTypes), and none of them at first.
	many := func(extra ...string) []string {
		types := make([]string, store.MaxReads+8)
		for i := range types {
			types[i] = "n" + strconv.Itoa(i)
		}
		return append(types, extra...)
	}
	// Each offered job has a higher priority than the last, so one refused before, left
	// ready, does not count against the next.
	for i, c := range []struct {
		types, queues []string
		leased        bool
	}{
		{many("t"), nil, true},
		{[]string{"t"}, nil, true},
		{[]string{"x", "t"}, nil, true},
		{[]string{"t"}, []string{"default"}, true},
		{[]string{"t", "other"}, []string{"default", "x"}, true},
		{[]string{"t", "unserved"}, nil, false},
		{[]string{"t", "other"}, nil, false},
		{[]string{"t", "unserved"}, []string{"default"}, false},
		{many("t"), nil, true},
		{many("t", "unserved"), nil, false},
		{many("t", "unserved"), []string{"elsewhere"}, true},
		{nil, []string{"default"}, false},
		{nil, nil, false},
	} {
		offer := &store.JobOffer{WorkerID: "w", LeaseUntil: now.Add(time.Minute), Types: c.types, Queues: c.queues}
		if got := offeredAlone(t, s, params("t", "default", i), offer); got != c.leased {
			t.Errorf("a job offered to a worker of types %q and queues %q beside waiting jobs of types unserved and other: leased %t, want %t",
				c.types, c.queues, got, c.leased)
		}
	}
}

// Offers in one insert share the store's answer only when their workers take the same queues
// and types: of two jobs alike, one offered to a worker of type t and one to a worker of t
// and of a type with a job waiting, only the first is leased.
func TestOfferSharesAnswersByWorkerScope(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, now := openTemp(t)
	params := func(typ string, priority int) *store.JobInsertParams {
		return &store.JobInsertParams{Type: typ, Queue: "default", Priority: priority, MaxAttempts: 1, RunAt: now,
			Now: now, AttemptTimeout: time.Minute}
	}
	offer := func(types ...string) *store.JobOffer {
		return &store.JobOffer{WorkerID: "w", LeaseUntil: now.Add(time.Minute), Types: types}
	}
	var leased []*job.Job
	if err := s.Write(ctx, "offer", func(tx store.Tx) error {
		if _, err := tx.JobInsertMany([]*store.JobInsertParams{params("waiting", 5)}); err != nil {
			return err
		}
		_, err := tx.JobInsertOfferedAtCommit([]*store.JobInsertParams{params("t", 0), params("t", 0)},
			[]*store.JobOffer{offer("t"), offer("t", "waiting")}, func(jobs []*job.Job, err error) { leased = jobs })
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if len(leased) != 2 || leased[0] == nil || leased[1] != nil {
		t.Fatalf("leased %v; want the first job only", leased)
	}
}
