package sqlite

import (
	"context"
	"fmt"
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
	names := func(prefix string, n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprintf("%s%d", prefix, i)
		}
		return out
	}
	offer := func(o store.JobOffer) (string, []any) {
		return offerFreeSQL(&store.JobInsertParams{Type: "a", Queue: "q"}, &o, o.Types)
	}
	tests := []struct {
		name, index string
		query       func() (string, []any)
		// reads: how many reads of index, each by key (its condition as the plan shows it) in
		// dispatch order, merged by SQLite (no sort); 0: one read of index.
		reads int
		key   string
	}{
		// A lease of every queue reads only the jobs of its types, however many of others wait.
		{"lease one type", "jobs_ready_type", func() (string, []any) {
			return lease(store.JobLeaseParams{Types: []string{"a"}, Limit: 1})
		}, 1, "type=?"},
		{"lease many types", "jobs_ready_type", func() (string, []any) {
			return lease(store.JobLeaseParams{Types: []string{"a", "b", "c"}, ExcludeQueues: []string{"q"}, Limit: 256})
		}, 3, "type=?"},
		{"lease more types than it reads one by one", "jobs_open", func() (string, []any) {
			return lease(store.JobLeaseParams{Types: names("t", store.MaxReads+1), Limit: 256})
		}, 0, ""},
		// A lease that names its queues reads only their jobs of its types, however many wait
		// in others, or of other types.
		{"lease one queue", "jobs_ready_queue_type", func() (string, []any) {
			return lease(store.JobLeaseParams{Types: []string{"a", "b"}, Queues: []string{"q"}, ExcludePaused: true, Limit: 256})
		}, 2, "queue=? AND type=?"},
		{"lease many types and queues", "jobs_ready_queue_type", func() (string, []any) {
			return lease(store.JobLeaseParams{Types: []string{"a", "b", "c"}, Queues: []string{"q", "r", "s"}, Limit: 256})
		}, 9, "queue=? AND type=?"},
		{"lease more queues and types than it reads one by one", "jobs_ready_type", func() (string, []any) {
			return lease(store.JobLeaseParams{Types: names("t", 5), Queues: names("q", store.MaxNamedQueues), Limit: 256})
		}, 5, "type=?"},
		{"lease excluding queues", "jobs_ready_type", func() (string, []any) {
			return lease(store.JobLeaseParams{Types: []string{"a"}, ExcludeQueues: []string{"q", "r", "s"}, Limit: 8})
		}, 1, "type=?"},
		{"lease leaving out paused queues", "jobs_ready_type", func() (string, []any) {
			return lease(store.JobLeaseParams{Types: []string{"a", "b"}, ExcludeQueues: []string{"q"}, ExcludePaused: true, Limit: 8})
		}, 2, "type=?"},
		// A lease of more types first keeps those with ready jobs, a probe of each.
		{"ready types", "jobs_ready_type", func() (string, []any) {
			return readyTypesSQL, []any{`["a","b"]`}
		}, 0, ""},
		// An offer looks only for jobs its worker could take.
		{"offer to a worker of named queues", "jobs_ready_queue_type", func() (string, []any) {
			return offer(store.JobOffer{Types: []string{"a", "b"}, Queues: []string{"q", "r"}})
		}, 0, ""},
		{"offer to a worker of every queue", "jobs_ready_type", func() (string, []any) {
			return offer(store.JobOffer{Types: []string{"a", "b"}})
		}, 0, ""},
		// The paused queues' ready jobs are counted through their own entries.
		{"paused queues' ready jobs", "jobs_ready_queue_type", func() (string, []any) {
			return pausedReadySQL, []any{store.PausedBacklogMin}
		}, 0, ""},
		{"finished since", "jobs_finished", func() (string, []any) {
			return `SELECT COUNT(*) FROM jobs WHERE ` + finishedState + ` AND state IN (5, 6) AND finished_at >= ?`, []any{0}
		}, 0, ""},
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
			if strings.Contains(all, "TEMP B-TREE") || strings.Contains(all, "SCAN jobs") {
				t.Fatalf("plan %q: want reads of %s in index order, with no temporary b-tree", all, tt.index)
			}
			if tt.reads == 0 {
				if !strings.Contains(all, "INDEX "+tt.index+" (") {
					t.Fatalf("plan %q: want a read of %s", all, tt.index)
				}
				return
			}
			by := "INDEX " + tt.index + " (" + tt.key + ")"
			for _, step := range plan {
				if strings.HasPrefix(step, "SEARCH jobs") && !strings.Contains(step, by) {
					t.Fatalf("plan %q: want every read of jobs through %s by %s", all, tt.index, tt.key)
				}
			}
			if n := strings.Count(all, by); n != tt.reads {
				t.Fatalf("plan %q: %d reads of %s by %s, want %d", all, n, tt.index, tt.key, tt.reads)
			}
		})
	}
}
