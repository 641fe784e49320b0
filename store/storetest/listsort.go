package storetest

import (
	"cmp"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/store"
)

var _ = register(
	testCase{"ListsSortByEveryColumn", testListsSortByEveryColumn},
)

// Both listings sort by each of their columns either way, ties broken by id in the same
// direction, text byte by byte; paging through with a cursor gives the same order, every job
// once, whatever the page size; a column a listing does not sort by is refused.
func testListsSortByEveryColumn(t *testing.T, b *bundle) {
	at := func(s int) time.Time { return b.now.Add(time.Duration(s) * time.Second) }
	// Dead jobs first: kill leases the first ready job of its type.
	dead := []int64{
		b.kill("b.dead", "q2", "ValueError", at(2)),
		b.kill("B.dead", "q1", "KeyError", at(1)),
		b.kill("a.dead", "q2", "KeyError", at(2)),
		b.kill("b.dead", "Q3", "IOError", at(3)),
	}
	var ps []*store.JobInsertParams
	for i := range 7 {
		p := b.job([]string{"b", "a", "B"}[i%3])
		p.Queue = []string{"q1", "Q2"}[i%2]
		p.Priority = []int{0, 5, -5}[i%3]
		p.Now = at(10 + i%4) // ties in creation time
		p.RunAt = p.Now
		if i%3 == 2 {
			p.RunAt = at(100 - i) // SCHEDULED
		}
		ps = append(ps, p)
	}
	b.insert(ps...)
	b.leaseOne("a") // one LEASED, with an attempt

	listings := []struct {
		name    string
		allowed []store.ListSort
		list    func(o store.ListOrder, after *store.ListCursor, limit int) ([]*job.Job, error)
	}{
		{"JobList", store.JobSorts, func(o store.ListOrder, after *store.ListCursor, limit int) ([]*job.Job, error) {
			return b.s.JobList(b.ctx, &store.JobListParams{Order: o, After: after, Limit: limit})
		}},
		{"JobListDead", store.DeadSorts, func(o store.ListOrder, after *store.ListCursor, limit int) ([]*job.Job, error) {
			return b.s.JobListDead(b.ctx, &store.DeadJobListParams{Order: o, After: after, Limit: limit})
		}},
	}
	for _, l := range listings {
		all, err := l.list(store.ListOrder{}, nil, 100)
		if err != nil {
			t.Fatal(err)
		}
		if l.name == "JobListDead" {
			equal(t, "dead jobs by default", ids(all), []int64{dead[3], dead[2], dead[0], dead[1]})
		}
		for _, by := range l.allowed {
			for _, asc := range []bool{false, true} {
				o := store.ListOrder{By: by, Asc: asc}
				want := sortedLike(t, o, l.allowed, all)
				for _, size := range []int{100, 3, 1} {
					got := pageThrough(t, o, l.allowed, size, l.list)
					equal(t, fmt.Sprintf("%s by %s asc=%v in pages of %d", l.name, by, asc, size), ids(got), ids(want))
				}
			}
		}
		if _, err := l.list(store.ListOrder{By: "payload"}, nil, 10); err == nil {
			t.Errorf("%s sorted by payload; want an error", l.name)
		}
	}

	// Written out once, so that a column read from the wrong field shows: text byte by byte
	// (upper case first), ties by id.
	types := func(jobs []*job.Job) []string {
		var out []string
		for _, j := range jobs {
			out = append(out, j.Type)
		}
		return out
	}
	byType, err := b.s.JobListDead(b.ctx, &store.DeadJobListParams{Order: store.ListOrder{By: store.SortType, Asc: true}, Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	equal(t, "dead types ascending", types(byType), []string{"B.dead", "a.dead", "b.dead", "b.dead"})
	equal(t, "dead ids by type ascending", ids(byType), []int64{dead[1], dead[2], dead[0], dead[3]})
	byErr, err := b.s.JobListDead(b.ctx, &store.DeadJobListParams{Order: store.ListOrder{By: store.SortErrorType}, Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	equal(t, "dead by error type descending", ids(byErr), []int64{dead[0], dead[2], dead[1], dead[3]})
	if _, err := b.s.JobList(b.ctx, &store.JobListParams{Order: store.ListOrder{By: store.SortDiedAt}, Limit: 10}); err == nil {
		t.Error("the job list sorted by died_at, a column of the dead-letter queue only; want an error")
	}
}

// sortedLike sorts jobs as order o should: by the column's value, then by id, both in o's
// direction.
func sortedLike(t *testing.T, o store.ListOrder, allowed []store.ListSort, jobs []*job.Job) []*job.Job {
	t.Helper()
	type keyed struct {
		c store.ListCursor
		j *job.Job
	}
	ks := make([]keyed, len(jobs))
	for i, j := range jobs {
		c, err := o.CursorOf(allowed, j)
		if err != nil {
			t.Fatal(err)
		}
		ks[i] = keyed{c, j}
	}
	slices.SortFunc(ks, func(x, y keyed) int {
		c := cmp.Or(cmp.Compare(x.c.Int, y.c.Int), cmp.Compare(x.c.Str, y.c.Str), cmp.Compare(x.c.ID, y.c.ID))
		if !o.Asc {
			c = -c
		}
		return c
	})
	out := make([]*job.Job, len(ks))
	for i, k := range ks {
		out[i] = k.j
	}
	return out
}

// pageThrough reads a whole listing in pages of size, each after the last job of the one before.
func pageThrough(t *testing.T, o store.ListOrder, allowed []store.ListSort, size int,
	list func(o store.ListOrder, after *store.ListCursor, limit int) ([]*job.Job, error)) []*job.Job {
	t.Helper()
	var out []*job.Job
	var after *store.ListCursor
	for range 100 {
		page, err := list(o, after, size)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, page...)
		if len(page) < size {
			return out
		}
		c, err := o.CursorOf(allowed, page[len(page)-1])
		if err != nil {
			t.Fatal(err)
		}
		after = &c
	}
	t.Fatalf("paging by %s did not end", o.By)
	return nil
}
