package postgres

import (
	"strings"
	"sync"
	"time"

	"github.com/jobwire/jobwire/job"
)

// The front of the ready indexes.
//
// A lease reads ready jobs from the front of an index of jobs in state 2 (jobs_ready_type and
// its kin) in dispatch order. A lease moves its jobs out of state 2, and PostgreSQL keeps each
// one's old entry at the front of that index until a vacuum removes it: in a drain of a large
// backlog every lease stepped over the entries of every job leased before it, and the lease's
// statement went from 5.5 ms to over 10 (docs/performance-log.md, the dead front). So the store
// remembers, for each shape of lease (its reads and its conditions), the last job a lease of
// that shape took when it took every job it read: a front. No job of that shape is ready at
// or ahead of it, so the next lease of the same shape reads from just past it. Only leases in
// one statement keep fronts (leaseAtOnce): those that a queue cap counted in the lease, a rate
// limit or concurrency keys can cut short read from the index's front as before.
//
// That holds only while nothing makes a job ready ahead of a front, so the fronts are
// forgotten, all at once (reset), whenever something may have:
//
//   - any write of this store that runs a statement outside the ones that cannot make a job
//     ready (a lease, a start, a success, a write receipt, the promoter's and the sweep's reads,
//     a breaker saved that was not shut or stays so: see tx.frontSafe and tx.reopening), or
//     whose successes made dependents or batch callbacks ready, or that took a breaker out of
//     shut. A read that locks ready jobs is not among them: another lease that skipped them
//     may have moved a front past them;
//   - any event another broker publishes (Listen): their writes that make jobs ready publish;
//   - and, whatever else (a transaction of another broker that locked a job and rolled back, a
//     job changed by hand), a front is used for frontTTL at most after the lease that last read
//     from the index's front: a lease then reads from there again, so a job ready ahead of a
//     front waits at most frontTTL. The age is the chain's, not the last lease's: in a drain
//     every lease moves the front, and one aged from the last lease would never be too old.
//
// A write's new fronts are kept only if no reset came between the write's start and its
// commit (generation): a write that began before another's reset may have read past the jobs
// that write made ready.
type fronts struct {
	mu  sync.Mutex
	now func() time.Time
	gen uint64 // counts resets
	m   map[string]frontAt
}

// frontTTL bounds how long a front is used. Reading from the index's front again costs a few
// milliseconds beside a large drained backlog, once a second.
const frontTTL = time.Second

// front is a job's place in dispatch order (priority DESC, run_at, id).
type front struct {
	priority int32
	runAt    int64
	id       int64
}

// frontAt is a front with the time its chain began: that of the lease that last read from the
// index's front, which every lease past the front hands on to the front it leaves.
type frontAt struct {
	front
	at time.Time
}

func frontOf(j *job.Job) front {
	return front{priority: int32(j.Priority), runAt: nanos(j.RunAt), id: j.ID}
}

func newFronts(now func() time.Time) *fronts {
	return &fronts{now: now, m: make(map[string]frontAt)}
}

// get returns the front of shape, if one is known whose chain began less than frontTTL ago. A
// lease that reads past it leaves its own front with the same time (began); without one, a
// lease reads from the index's front and began is now. A store built without fronts (a
// test's) knows none.
func (f *fronts) get(shape string) (fr front, began time.Time, ok bool) {
	if f == nil {
		return front{}, time.Time{}, false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.now()
	at, ok := f.m[shape]
	if !ok || now.Sub(at.at) >= frontTTL {
		return front{}, now, false
	}
	return at.front, at.at, true
}

// generation is the count of resets, to be handed back to keep.
func (f *fronts) generation() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.gen
}

// keep stores as fronts the last jobs a write's leases took (found, by shape), unless a reset
// came since gen.
func (f *fronts) keep(gen uint64, found map[string]leasedTo) {
	if len(found) == 0 {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.gen != gen {
		return
	}
	now := f.now()
	if len(f.m) >= maxFronts { // shapes no longer leased do not pile up between resets
		for shape, at := range f.m {
			if now.Sub(at.at) >= frontTTL {
				delete(f.m, shape)
			}
		}
	}
	for shape, to := range found {
		f.m[shape] = frontAt{front: frontOf(to.last), at: to.began}
	}
}

// maxFronts is how many fronts the store keeps before it drops the stale ones.
const maxFronts = 256

// reset forgets every front. A store built without fronts (a test's) has none to forget.
func (f *fronts) reset() {
	if f == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.gen++
	clear(f.m)
}

// shapeOf names a lease's shape: its reads and conditions with their arguments, as leaseQuery
// wrote them (args are the query's arguments so far).
func shapeOf(reads []string, rules string, args []any) string {
	var b strings.Builder
	for _, r := range reads {
		b.WriteString(r)
		b.WriteByte('|')
	}
	b.WriteString(rules)
	for _, a := range args {
		b.WriteByte(0)
		switch v := a.(type) {
		case string:
			b.WriteString(v)
		case []string:
			b.WriteString(strings.Join(v, "\x01"))
		default:
			return "" // an argument of another kind: no shape, no front
		}
	}
	return b.String()
}

// pastFront splits each read into the jobs past fr: those of its priority after it, and
// those of lower priorities. Each is a range of the read's index, where one condition on
// (priority, run_at, id) together cannot be, as the index holds priority in descending order.
// The front's priority is written as a range of one value, not an equality: with a parameter
// equal to it the planner no longer took the index's order for dispatch order, and sorted
// every ready job past the front (TestLeasePastAFrontReadsInDispatchOrder).
func pastFront(q *query, reads []string, fr front) []string {
	p, r, i := q.arg(fr.priority), q.arg(fr.runAt), q.arg(fr.id)
	out := make([]string, 0, 2*len(reads))
	for _, read := range reads {
		out = append(out,
			read+` AND priority >= `+p+` AND priority <= `+p+` AND (run_at, id) > (`+r+`::bigint, `+i+`::bigint)`,
			read+` AND priority < `+p)
	}
	return out
}

// leasedFrom notes the last job a lease of shape took, when it took every job it read
// (picked), with the time its chain of fronts began (fronts.get). One that left jobs ready
// (past a lease's MaxBytes) leaves the front where it was: those jobs are still ahead.
func (t *tx) leasedFrom(shape string, began time.Time, leased [][]*job.Job, picked int64) {
	if shape == "" {
		return
	}
	n := 0
	var last *job.Job
	for _, jobs := range leased {
		if len(jobs) > 0 && (last == nil || dispatchOrder(jobs[len(jobs)-1], last) > 0) {
			last = jobs[len(jobs)-1] // each lease's jobs are in dispatch order (scanLeased)
		}
		n += len(jobs)
	}
	if n == 0 || int64(n) != picked {
		return
	}
	if t.found == nil {
		t.found = make(map[string]leasedTo)
	}
	to := leasedTo{last: last, began: began}
	if was, ok := t.found[shape]; ok {
		if dispatchOrder(last, was.last) <= 0 {
			to.last = was.last
		}
		if was.began.Before(began) {
			to.began = was.began
		}
	}
	t.found[shape] = to
}

// leasedTo is how far a write's leases of one shape went: the last job they took, and when
// the oldest chain of fronts they read past began.
type leasedTo struct {
	last  *job.Job
	began time.Time
}

// frontSafe marks the statements sent until done is called as ones that cannot make a job
// ready (a lease's, a start's, a success's): they leave the fronts as they are. Any other
// statement of a write resets them at its commit (pipe.note). Use: defer t.frontSafe()().
func (t *tx) frontSafe() (done func()) {
	p, ok := t.tx.(*pipeTx)
	if !ok {
		return func() {}
	}
	p.safe++
	return func() { p.safe-- }
}

// readied marks the write as one that made jobs ready, inside frontSafe: its commit resets
// the fronts.
func (t *tx) readied() {
	if p, ok := t.tx.(*pipeTx); ok {
		p.unsafe = true
	}
}

// readiedAhead reports whether the write may have made a job ready ahead of a front: a
// statement outside frontSafe, dependents its successes made ready, batch callbacks it
// enqueued, a breaker taken out of shut or one saved whose answer was not read (reopening).
func (t *tx) readiedAhead() bool {
	p, ok := t.tx.(*pipeTx)
	return !ok || p.unsafe || t.settle.released > 0 || t.callbacks > 0 || t.unread > 0
}
