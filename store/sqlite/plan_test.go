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
	}{
		{"lease one type", "jobs_open", func() (string, []any) {
			return lease(store.JobLeaseParams{Types: []string{"a"}, Limit: 1})
		}},
		{"lease many types and queues", "jobs_open", func() (string, []any) {
			return lease(store.JobLeaseParams{Types: []string{"a", "b", "c"}, Queues: []string{"q", "r"}, Limit: 256})
		}},
		{"lease excluding", "jobs_open", func() (string, []any) {
			return lease(store.JobLeaseParams{Types: []string{"a"}, ExcludeTypes: []string{"b"},
				ExcludeQueues: []string{"q", "r", "s"}, Limit: 8})
		}},
		{"lease leaving out paused queues", "jobs_open", func() (string, []any) {
			return lease(store.JobLeaseParams{Types: []string{"a", "b"}, ExcludeQueues: []string{"q"}, ExcludePaused: true, Limit: 8})
		}},
		{"finished since", "jobs_finished", func() (string, []any) {
			return `SELECT COUNT(*) FROM jobs WHERE ` + finishedState + ` AND state IN (5, 6) AND finished_at >= ?`, []any{0}
		}},
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
			if !strings.Contains(all, "INDEX "+tt.index+" (") || strings.Contains(all, "TEMP B-TREE") {
				t.Fatalf("plan %q: want a read of %s in index order, with no temporary b-tree", all, tt.index)
			}
		})
	}
}
