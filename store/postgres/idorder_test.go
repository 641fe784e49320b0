package postgres

import (
	"context"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/store"
	"github.com/jobwire/jobwire/store/postgres/pgtest"
)

// Two brokers on one database draw their job ids in blocks, so ids do not follow creation
// across them: a job created later on one can have a smaller id than a job created earlier on
// the other. Either broker lists the jobs in creation order.
func TestJobListFollowsCreationAcrossBrokers(t *testing.T) {
	t.Parallel()
	u := pgtest.URL(t)
	open := func() *Store {
		s, err := Open(context.Background(), u, Options{Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	a, b := open(), open()
	now := time.Unix(1_800_000_000, 0)
	insert := func(s *Store, at time.Time) int64 {
		t.Helper()
		var id int64
		err := s.Write(context.Background(), "enqueue", func(tx store.Tx) error {
			res, err := tx.JobInsertMany([]*store.JobInsertParams{{Type: "t", Queue: "default", Payload: []byte(`{}`),
				MaxAttempts: 3, RunAt: at, Now: at, AttemptTimeout: time.Minute}})
			if err == nil {
				id = res[0].ID
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	first := insert(a, now)
	second := insert(b, now.Add(time.Second))
	third := insert(a, now.Add(2*time.Second))
	if !(first < third && third < second) {
		t.Fatalf("ids %d, %d, %d in creation order: want the third below the second (ids drawn in blocks)", first, second, third)
	}
	want := []int64{first, second, third}
	for name, s := range map[string]*Store{"a": a, "b": b} {
		jobs, err := s.JobList(context.Background(), &store.JobListParams{State: job.StatePending, Order: store.ListOrder{Asc: true}, Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		var got []int64
		for _, j := range jobs {
			got = append(got, j.ID)
		}
		if !slices.Equal(got, want) {
			t.Errorf("broker %s lists %v, want %v (creation order)", name, got, want)
		}
		page, err := s.JobList(context.Background(), &store.JobListParams{Limit: 10, Order: store.ListOrder{Asc: true},
			After: &store.ListCursor{Int: jobs[0].CreatedAt.UnixNano(), ID: jobs[0].ID}})
		if err != nil {
			t.Fatal(err)
		}
		if len(page) != 2 || page[0].ID != second || page[1].ID != third {
			t.Errorf("broker %s lists %d jobs after the first, want %v", name, len(page), want[1:])
		}
	}
}
