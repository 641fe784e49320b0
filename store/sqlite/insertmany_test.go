package sqlite

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/store"
)

// JobInsertMany keeps request order, gives every job its own id, answers duplicates like
// a single insert, and stores each job's fields, whether it went in a multi-row chunk or alone.
func TestJobInsertMany(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, now := openTemp(t)
	var err error
	var ps []*store.JobInsertParams
	for i := range 2*insertChunk + 7 {
		p := &store.JobInsertParams{Type: "t", Queue: fmt.Sprintf("q%d", i%3), Payload: []byte(fmt.Sprint(i)),
			Priority: i, RunAt: now, Now: now, MaxAttempts: 3, AttemptTimeout: time.Minute}
		if i == insertChunk+5 || i == 3 {
			p.IdempotencyKey = fmt.Sprintf("k%d", i)
		}
		if i%10 == 0 {
			p.RunAt = now.Add(time.Hour)
		}
		ps = append(ps, p)
	}
	repeat := *ps[3]
	repeat.RunAt = now.Add(time.Minute) // the schedule is not compared
	ps = append(ps, &repeat)
	var res []store.JobInsertResult
	if err := s.Write(ctx, "test", func(tx store.Tx) error {
		res, err = tx.JobInsertMany(ps)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	for i, r := range res[:len(res)-1] {
		if i > 0 && r.ID != res[i-1].ID+1 {
			t.Fatalf("ids out of request order at %d: %d after %d", i, r.ID, res[i-1].ID)
		}
		j, err := s.JobGet(ctx, r.ID)
		if err != nil {
			t.Fatal(err)
		}
		p := ps[i]
		wantState := job.StatePending
		if p.RunAt.After(now) {
			wantState = job.StateScheduled
		}
		if string(j.Payload) != string(p.Payload) || j.Queue != p.Queue || j.Priority != p.Priority ||
			j.State != wantState || r.State != wantState || j.IdempotencyKey != p.IdempotencyKey || j.AttemptTimeout != time.Minute {
			t.Fatalf("job %d stored as %+v, result %+v, from %+v", i, j, r, p)
		}
	}
	if last := res[len(res)-1]; !last.Duplicate || last.ID != res[3].ID {
		t.Fatalf("repeated key: %+v, want a duplicate of job %d", last, res[3].ID)
	}
}
