package postgres

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jobwire/jobwire/store"
	"github.com/jobwire/jobwire/store/postgres/pgtest"
)

// A part of a write that fails alone (Tx.Isolated) takes its own changes to the finished totals
// with it, and keeps those held before it, even when it wrote them itself (locking a breaker
// writes the changes held first) before its savepoint was rolled back.
func TestIsolatedFailureKeepsTheTotalsHeldBeforeIt(t *testing.T) {
	t.Parallel()
	s := openBroker(t, pgtest.URL(t), nil)
	now := time.Unix(1_700_000_000, 0)
	jobs := deadlockJobs(t, s, now, "q", "q")
	boom := errors.New("boom")
	err := s.Write(context.Background(), "fail", func(tx store.Tx) error {
		if err := failJob(tx, jobs[0], now); err != nil {
			return err
		}
		err := tx.Isolated(func() error {
			if err := failJob(tx, jobs[1], now); err != nil {
				return err
			}
			if _, err := tx.BreakerLock("b", []byte(`{}`)); err != nil {
				return err
			}
			return boom
		})
		if !errors.Is(err, boom) {
			t.Errorf("isolated part: %v, want %v", err, boom)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	if err := s.pool.QueryRow(context.Background(), `SELECT COALESCE(sum(n), 0)::bigint FROM finished_totals
		WHERE queue = 'q' AND type = 't' AND state = 6`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Fatalf("the totals count %d dead jobs of queue q, want 1: the one failed outside the part that failed", n)
	}
}
