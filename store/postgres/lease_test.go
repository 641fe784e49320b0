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

// Two transactions leasing at once take different jobs, and the second does not wait for the
// first: the lease skips rows another transaction has locked. This is what lets several
// writers (and, later, several brokers) lease from one table without handing a job out twice.
func TestConcurrentLeasesSkipLockedJobs(t *testing.T) {
	t.Parallel()
	u := pgtest.URL(t)
	ctx := context.Background()
	s, err := Open(ctx, u, Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	now := time.Unix(1_700_000_000, 0)
	var ps []*store.JobInsertParams
	for range 4 {
		ps = append(ps, &store.JobInsertParams{Type: "t", Queue: "default", Payload: []byte(`{}`), MaxAttempts: 3,
			RunAt: now, Now: now, AttemptTimeout: time.Minute})
	}
	if err := s.Write(ctx, "insert", func(tx store.Tx) error { _, err := tx.JobInsertMany(ps); return err }); err != nil {
		t.Fatal(err)
	}
	lease := func(tx store.Tx) ([]*job.Job, error) {
		return tx.JobLease(&store.JobLeaseParams{Types: []string{"t"}, Limit: 2, WorkerID: "w", Now: now, LeaseUntil: now.Add(time.Minute)})
	}
	holding, release := make(chan []int64, 1), make(chan struct{})
	firstDone := make(chan error, 1)
	go func() {
		firstDone <- s.Write(ctx, "first", func(tx store.Tx) error {
			jobs, err := lease(tx)
			if err != nil {
				return err
			}
			ids := make([]int64, len(jobs))
			for i, j := range jobs {
				ids[i] = j.ID
			}
			holding <- ids
			<-release // keep the rows locked until the second lease is done
			return nil
		})
	}()
	first := <-holding
	var second []int64
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	err = s.Write(sctx, "second", func(tx store.Tx) error {
		jobs, err := lease(tx)
		second = nil
		for _, j := range jobs {
			second = append(second, j.ID)
		}
		return err
	})
	close(release)
	if err != nil {
		t.Fatalf("second lease while the first holds its rows: %v, want it done without waiting", err)
	}
	if err := <-firstDone; err != nil {
		t.Fatal(err)
	}
	if len(first) != 2 || len(second) != 2 || slices.ContainsFunc(second, func(id int64) bool { return slices.Contains(first, id) }) {
		t.Fatalf("first leased %v, second %v: want two jobs each, none twice", first, second)
	}
}
