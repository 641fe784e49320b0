package sqlite

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jobwire/jobwire/store"
)

// The dispatch queries must read the partial indexes, in index order. SQLite uses a partial
// index only when the query repeats its condition word for word, so a change to either side
// (migration or query) that breaks the match would silently turn leasing into a table scan
// that grows with history.
func TestQueryPlansUsePartialIndexes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "jobwire.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	now := time.Now()
	lease := func(p store.JobLeaseParams) (string, []any) {
		p.Now, p.LeaseUntil, p.WorkerID = now, now.Add(time.Minute), "w"
		return leaseQuery(&p)
	}
	tests := []struct {
		name, index string
		query       func() (string, []any)
		// union: one read of index per queue, then a sort of what they gave (at most the
		// limit each), where the queues meet.
		union bool
	}{
		{"lease one type", "jobs_open", func() (string, []any) {
			return lease(store.JobLeaseParams{Types: []string{"a"}, Limit: 1})
		}, false},
		{"lease many types", "jobs_open", func() (string, []any) {
			return lease(store.JobLeaseParams{Types: []string{"a", "b", "c"}, ExcludeQueues: []string{"q"}, Limit: 256})
		}, false},
		// A lease that names its queues reads only their jobs, however many wait in others.
		{"lease one queue", "jobs_ready_queue", func() (string, []any) {
			return lease(store.JobLeaseParams{Types: []string{"a", "b"}, Queues: []string{"q"}, ExcludePaused: true, Limit: 256})
		}, false},
		{"lease many types and queues", "jobs_ready_queue", func() (string, []any) {
			return lease(store.JobLeaseParams{Types: []string{"a", "b", "c"}, Queues: []string{"q", "r", "s"}, Limit: 256})
		}, true},
		{"lease excluding", "jobs_open", func() (string, []any) {
			return lease(store.JobLeaseParams{Types: []string{"a"}, ExcludeTypes: []string{"b"},
				ExcludeQueues: []string{"q", "r", "s"}, Limit: 8})
		}, false},
		{"lease leaving out paused queues", "jobs_open", func() (string, []any) {
			return lease(store.JobLeaseParams{Types: []string{"a", "b"}, ExcludeQueues: []string{"q"}, ExcludePaused: true, Limit: 8})
		}, false},
		{"finished since", "jobs_finished", func() (string, []any) {
			return `SELECT COUNT(*) FROM jobs WHERE ` + finishedState + ` AND state IN (5, 6) AND finished_at >= ?`, []any{0}
		}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q, args := tt.query()
			rows, err := s.r.QueryContext(ctx, "EXPLAIN QUERY PLAN "+q, args...)
			if err != nil {
				t.Fatal(err)
			}
			defer rows.Close()
			var plan []string
			for rows.Next() {
				var id, parent, unused int
				var detail string
				if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
					t.Fatal(err)
				}
				plan = append(plan, detail)
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			all := strings.Join(plan, "; ")
			if tt.union {
				for _, step := range plan {
					if strings.HasPrefix(step, "SEARCH jobs") && !strings.Contains(step, "INDEX "+tt.index+" (queue=?)") ||
						strings.HasPrefix(step, "SCAN jobs") {
						t.Fatalf("plan %q: want every read of jobs through %s by queue", all, tt.index)
					}
				}
				if strings.Count(all, "INDEX "+tt.index+" (queue=?)") != 3 {
					t.Fatalf("plan %q: want a read of %s for each of the 3 queues", all, tt.index)
				}
				return
			}
			if !strings.Contains(all, "INDEX "+tt.index+" (") || strings.Contains(all, "TEMP B-TREE") {
				t.Fatalf("plan %q: want a read of %s in index order, with no temporary b-tree", all, tt.index)
			}
		})
	}
}
