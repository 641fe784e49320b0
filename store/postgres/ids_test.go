package postgres

import (
	"context"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/jobwire/jobwire/store"
	"github.com/jobwire/jobwire/store/postgres/pgtest"
)

// Two stores on one schema, each drawing job ids in blocks, never hand out one id twice, and
// each hands its own out in the order of its inserts, across more than one block.
func TestJobIDsFromBlocksAreUniqueAndAscending(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	u := pgtest.URL(t)
	var stores []*Store
	for range 2 {
		s, err := Open(ctx, u, Options{Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		stores = append(stores, s)
	}
	now := time.Unix(1_700_000_000, 0)
	jobs := func(n int) []*store.JobInsertParams {
		ps := make([]*store.JobInsertParams, n)
		for i := range ps {
			ps[i] = &store.JobInsertParams{Type: "t", Queue: "default", Payload: []byte(`{}`), MaxAttempts: 3,
				RunAt: now, Now: now, AttemptTimeout: time.Minute}
		}
		return ps
	}
	seen := map[int64]bool{}
	last := make([]int64, len(stores))
	// Batches of 300 from each store in turn: more than a block each (idBlock) after a few.
	for round := range 2 * idBlock / 300 {
		for i, s := range stores {
			var ids []int64
			err := s.Write(ctx, "insert", func(tx store.Tx) error {
				res, err := tx.JobInsertMany(jobs(300))
				ids = ids[:0]
				for _, r := range res {
					ids = append(ids, r.ID)
				}
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.IsSorted(ids) || ids[0] <= last[i] {
				t.Fatalf("round %d, store %d: ids %d..%d not after %d and ascending", round, i, ids[0], ids[len(ids)-1], last[i])
			}
			last[i] = ids[len(ids)-1]
			for _, id := range ids {
				if seen[id] {
					t.Fatalf("id %d handed out twice", id)
				}
				seen[id] = true
			}
		}
	}
}
