package sqlite

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/store"
)

// Stats read finished jobs from finished_totals, which the statements that finish, requeue
// and delete jobs keep (migration 004). After every kind of change a job can go through, the
// counts must equal a count of the rows themselves.
func TestJobCountsMatchTheRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, now := openTemp(t)
	write := func(name string, fn func(tx store.Tx) error) {
		t.Helper()
		if err := s.Write(ctx, name, fn); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	check := func(step string) {
		t.Helper()
		got, err := s.JobCounts(ctx)
		if err != nil {
			t.Fatal(err)
		}
		rows, err := s.r.QueryContext(ctx, `SELECT queue, type, state, COUNT(*) FROM jobs
			GROUP BY queue, type, state ORDER BY queue, type, state`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var want []store.StateCount
		depth := map[string]map[job.State]int64{}
		for rows.Next() {
			var c store.StateCount
			if err := rows.Scan(&c.Queue, &c.Type, &c.State, &c.Count); err != nil {
				t.Fatal(err)
			}
			want = append(want, c)
			if depth[c.Queue] == nil {
				depth[c.Queue] = map[job.State]int64{}
			}
			depth[c.Queue][c.State] += c.Count
		}
		if !slices.Equal(got, want) {
			t.Fatalf("after %s: JobCounts\n%v\nbut the rows count\n%v", step, got, want)
		}
		queues, err := s.QueueStats(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		if len(queues) != 3 {
			t.Fatalf("after %s: %d queues, want 3", step, len(queues))
		}
		for _, q := range queues {
			one, err := s.QueueStats(ctx, q.Name)
			if err != nil {
				t.Fatal(err)
			}
			if len(one) != 1 || fmt.Sprint(one[0].Depth) != fmt.Sprint(q.Depth) {
				t.Fatalf("after %s: queue %s alone reads %v, among all %v", step, q.Name, one, q.Depth)
			}
			if fmt.Sprint(q.Depth) != fmt.Sprint(depth[q.Name]) {
				t.Fatalf("after %s: queue %s depth %v, but the rows count %v", step, q.Name, q.Depth, depth[q.Name])
			}
		}
	}

	var ps []*store.JobInsertParams
	for i := range 40 {
		ps = append(ps, &store.JobInsertParams{Type: fmt.Sprintf("t%d", i%2), Queue: fmt.Sprintf("q%d", i%3),
			RunAt: now, Now: now, MaxAttempts: 3, AttemptTimeout: time.Minute})
	}
	write("insert", func(tx store.Tx) error { _, err := tx.JobInsertMany(ps); return err })
	check("insert")

	var leased []*job.Job
	write("lease", func(tx store.Tx) error {
		var err error
		leased, err = tx.JobLease(&store.JobLeaseParams{Types: []string{"t0", "t1"}, Limit: 64, WorkerID: "w",
			Now: now, LeaseUntil: now.Add(time.Minute)})
		return err
	})
	if len(leased) != 40 {
		t.Fatalf("leased %d jobs, want 40", len(leased))
	}
	check("lease")

	finish := func(j *job.Job, st job.State) *store.JobFinishParams {
		out := job.OutcomeSucceeded
		if st != job.StateSucceeded {
			out = job.OutcomeFailed
		}
		return &store.JobFinishParams{Ref: job.LeaseRef{JobID: j.ID, Token: j.LeaseToken}, Queue: j.Queue, Type: j.Type, State: st, Now: now,
			Attempt: job.Attempt{Number: 1, WorkerID: "w", StartedAt: now, FinishedAt: now, Outcome: out}}
	}
	var many []*store.JobFinishParams
	for _, j := range leased[:12] {
		many = append(many, finish(j, job.StateSucceeded))
	}
	write("succeed many", func(tx store.Tx) error { _, err := tx.JobSucceedMany(many); return err })
	check("succeed many")
	// Results sent again after an ambiguous commit, beside new ones, count once.
	again := append(many[:3:3], finish(leased[12], job.StateSucceeded), finish(leased[13], job.StateSucceeded))
	write("succeed again", func(tx store.Tx) error {
		applied, err := tx.JobSucceedMany(again)
		if err == nil && slices.Contains(applied, false) {
			err = fmt.Errorf("applied %v, want all acknowledged", applied)
		}
		return err
	})
	check("succeed again")
	write("succeed few", func(tx store.Tx) error {
		_, err := tx.JobSucceedMany([]*store.JobFinishParams{finish(leased[14], job.StateSucceeded), many[5]})
		return err
	})
	check("succeed few")
	write("die", func(tx store.Tx) error {
		for _, j := range leased[15:22] {
			if _, err := tx.JobFinish(finish(j, job.StateDead)); err != nil {
				return err
			}
		}
		return nil
	})
	check("die")
	write("cancel", func(tx store.Tx) error {
		for _, j := range append(leased[22:25], leased[0]) { // the last one is finished already
			if _, err := tx.JobCancel(j.ID, now); err != nil {
				return err
			}
		}
		return nil
	})
	check("cancel")
	write("requeue", func(tx store.Tx) error {
		_, err := tx.JobRequeue(&store.JobRequeueParams{IDs: []int64{leased[15].ID, leased[16].ID}, RunAt: now, Now: now})
		return err
	})
	check("requeue")
	write("delete dead", func(tx store.Tx) error { _, err := tx.JobDeleteDead([]int64{leased[17].ID}); return err })
	check("delete dead")
	write("delete succeeded", func(tx store.Tx) error {
		_, err := tx.JobDeleteFinished(&store.JobDeleteFinishedParams{States: []job.State{job.StateSucceeded, job.StateCancelled},
			FinishedBefore: now.Add(time.Hour), Limit: 9})
		return err
	})
	check("delete succeeded")
}
