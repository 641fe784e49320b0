package postgres

import (
	"context"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/store"
	"github.com/jobwire/jobwire/store/postgres/pgtest"
)

// frontClock is the fronts' clock in these tests.
type frontClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *frontClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *frontClock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// openFronts opens a store on url whose fronts run on clock.
func openFronts(t *testing.T, url string, clock *frontClock) *Store {
	t.Helper()
	s, err := Open(context.Background(), url, Options{Logger: slog.New(slog.DiscardHandler), now: clock.now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

var frontEpoch = time.Unix(1_700_000_000, 0)

// insertReady stores n ready jobs of type t at priority, due one nanosecond apart from at, and
// returns their ids in dispatch order.
func insertReady(t *testing.T, s *Store, n, priority int, at time.Time, payload []byte) []int64 {
	t.Helper()
	ps := make([]*store.JobInsertParams, n)
	for i := range ps {
		ps[i] = &store.JobInsertParams{Type: "t", Queue: "default", Payload: payload, Priority: priority, MaxAttempts: 3,
			RunAt: at.Add(time.Duration(i)), Now: at.Add(time.Hour), AttemptTimeout: time.Minute}
	}
	return insertIDs(t, s, ps)
}

// insertIDs stores ps in one write and returns their ids.
func insertIDs(t *testing.T, s *Store, ps []*store.JobInsertParams) []int64 {
	t.Helper()
	var ids []int64
	err := s.Write(context.Background(), "test", func(tx store.Tx) error {
		rs, err := tx.JobInsertMany(ps)
		for _, r := range rs {
			ids = append(ids, r.ID)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// frontLease is a lease of type t as a broker of a cluster asks for one: every queue, the
// paused and capped ones left out by the database, as leaseAtOnce writes it.
func frontLease(limit, maxBytes int) *store.JobLeaseParams {
	return &store.JobLeaseParams{Types: []string{"t"}, Limit: limit, MaxBytes: maxBytes, WorkerID: "w", Now: frontEpoch,
		LeaseUntil: frontEpoch.Add(time.Hour), EnforceQueues: true, SkipCapped: true, ExcludeShut: true}
}

// leaseIDs runs the leases ps in one write and returns the ids of the jobs each took.
func leaseIDs(t *testing.T, s *Store, ps ...*store.JobLeaseParams) [][]int64 {
	t.Helper()
	var out [][]int64
	err := s.Write(context.Background(), "test", func(tx store.Tx) error {
		return tx.JobLeaseAtCommit(ps, func(leased [][]*job.Job, err error) {
			for _, jobs := range leased {
				var ids []int64
				for _, j := range jobs {
					ids = append(ids, j.ID)
				}
				out = append(out, ids)
			}
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func wantLeased(t *testing.T, what string, got, want []int64) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Fatalf("%s leased %v, want %v", what, got, want)
	}
}

// insertScheduled stores a job of type t due at runAt, SCHEDULED until promoted.
func insertScheduled(t *testing.T, s *Store, runAt time.Time) int64 {
	t.Helper()
	return insertIDs(t, s, []*store.JobInsertParams{{Type: "t", Queue: "default", Payload: []byte(`{}`),
		MaxAttempts: 3, RunAt: runAt, Now: runAt.Add(-time.Hour), AttemptTimeout: time.Minute}})[0]
}

// makeReadyBehindTheStore moves job id back to ready with a statement of its own, outside
// any write of the store: nothing tells the fronts.
func makeReadyBehindTheStore(t *testing.T, s *Store, id int64) {
	t.Helper()
	if _, err := s.pool.Exec(context.Background(), `UPDATE jobs SET state = 2, lease_expires_at = NULL, worker_id = ''
		WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
}

// A lease that took every job it read leaves a front that the next lease of the same shape
// reads past, so a drain does not step over the index entries its leases left behind. A job
// made ready ahead of the front where the store cannot see it waits at most frontTTL after the
// lease that read from the index's front, however many leases moved the front since.
func TestLeasesReadPastTheirFront(t *testing.T) {
	t.Parallel()
	clock := &frontClock{t: frontEpoch}
	s := openFronts(t, pgtest.URL(t), clock)
	ids := insertReady(t, s, 12, 0, frontEpoch, []byte(`{}`))
	wantLeased(t, "the first lease", leaseIDs(t, s, frontLease(3, 0))[0], ids[0:3])
	// The front is the last job taken: made ready again where the store cannot see it, that
	// job is passed over too.
	makeReadyBehindTheStore(t, s, ids[2])
	clock.add(frontTTL / 2)
	wantLeased(t, "a lease past the front", leaseIDs(t, s, frontLease(3, 0))[0], ids[3:6])
	clock.add(frontTTL / 2)
	wantLeased(t, "a lease a second after the first", leaseIDs(t, s, frontLease(3, 0))[0], []int64{ids[2], ids[6], ids[7]})
	makeReadyBehindTheStore(t, s, ids[7])
	wantLeased(t, "a lease past the new front", leaseIDs(t, s, frontLease(2, 0))[0], ids[8:10])
}

// Any write that may make a job ready ahead of a front forgets the fronts: the next lease
// takes that job first, as dispatch order says.
func TestFrontsForgottenByWritesThatMakeJobsReady(t *testing.T) {
	t.Parallel()
	var scheduled int64 // a job due at runAt, stored SCHEDULED before the first lease
	for _, c := range []struct {
		name string
		// ready makes a job ready ahead of the front the first lease left, and returns it.
		ready func(t *testing.T, s *Store, leased []int64) int64
	}{
		{"a release", func(t *testing.T, s *Store, leased []int64) int64 {
			err := s.Write(context.Background(), "test", func(tx store.Tx) error {
				jobs, err := tx.JobGetMany(leased[:1])
				if err != nil {
					return err
				}
				_, err = tx.JobRelease(job.LeaseRef{JobID: jobs[0].ID, Token: jobs[0].LeaseToken})
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			return leased[0]
		}},
		{"an insert of a higher priority", func(t *testing.T, s *Store, _ []int64) int64 {
			return insertReady(t, s, 1, 5, frontEpoch.Add(time.Hour), []byte(`{}`))[0]
		}},
		{"a promotion of a job due", func(t *testing.T, s *Store, _ []int64) int64 {
			err := s.Write(context.Background(), "test", func(tx store.Tx) error {
				n, err := tx.JobPromoteScheduled(frontEpoch)
				if err == nil && n != 1 {
					t.Errorf("promoted %d jobs, want 1", n)
				}
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			return scheduled
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			clock := &frontClock{t: frontEpoch}
			s := openFronts(t, pgtest.URL(t), clock)
			ids := insertReady(t, s, 10, 0, frontEpoch, []byte(`{}`))
			scheduled = insertScheduled(t, s, frontEpoch.Add(-time.Hour))
			first := leaseIDs(t, s, frontLease(3, 0))[0]
			wantLeased(t, "the first lease", first, ids[0:3])
			ready := c.ready(t, s, first)
			wantLeased(t, "the lease after it", leaseIDs(t, s, frontLease(2, 0))[0], []int64{ready, ids[3]})
		})
	}
}

// A statement that left some of the jobs it read ready (past a lease's MaxBytes) leaves the
// front where it was: those jobs are still ahead of the jobs it leased.
func TestFrontStaysBehindJobsALeaseLeftReady(t *testing.T) {
	t.Parallel()
	clock := &frontClock{t: frontEpoch}
	s := openFronts(t, pgtest.URL(t), clock)
	ids := insertReady(t, s, 8, 0, frontEpoch, []byte(`"`+strings.Repeat("x", 198)+`"`))
	got := leaseIDs(t, s, frontLease(2, 150), frontLease(2, 0))
	wantLeased(t, "the lease of 150 bytes", got[0], ids[0:1])
	wantLeased(t, "the lease beside it", got[1], ids[2:4])
	wantLeased(t, "the next lease", leaseIDs(t, s, frontLease(2, 0))[0], []int64{ids[1], ids[4]})
}

// Another broker's event forgets the fronts: its write may have made jobs ready ahead of them.
func TestFrontsForgottenByAnotherBrokersEvent(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	clock := &frontClock{t: frontEpoch}
	a, b := openFronts(t, url, clock), openFronts(t, url, clock)
	heard := make(chan store.Event, 16)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		a.Listen(ctx, func(e store.Event) { heard <- e })
	}()
	defer func() { cancel(); <-done }()
	waitFor(t, "a listening", func() bool { n, err := a.Listeners(ctx); return err == nil && n >= 1 })

	ids := insertReady(t, a, 10, 0, frontEpoch, []byte(`{}`))
	wantLeased(t, "the first lease", leaseIDs(t, a, frontLease(3, 0))[0], ids[0:3])
	var ahead int64
	err := b.Write(ctx, "test", func(tx store.Tx) error {
		rs, err := tx.JobInsertMany([]*store.JobInsertParams{{Type: "t", Queue: "default", Payload: []byte(`{}`),
			Priority: 5, MaxAttempts: 3, RunAt: frontEpoch, Now: frontEpoch, AttemptTimeout: time.Minute}})
		if err == nil {
			ahead = rs[0].ID
		}
		tx.Publish(store.Event{Kind: store.EventReady, Key: "default"})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for e := range heard { // the event's notification comes after the commit
		if e.From == b.BrokerID() && e.Kind == store.EventReady {
			break
		}
	}
	wantLeased(t, "the lease after the event", leaseIDs(t, a, frontLease(2, 0))[0], []int64{ahead, ids[3]})
}

// A lease past a front reads each of its ranges through the index, in dispatch order, and
// stops at its limit: written as priority = $n, the range of the front's priority got a sort
// of every ready job past the front (the planner does not take a parameter for a constant
// there), and a drain of a million jobs stalled.
func TestLeasePastAFrontReadsInDispatchOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := open(t)
	defer s.Close()
	execAll(t, s,
		`INSERT INTO jobs (type, queue, payload, state, max_attempts, run_at, created_at, attempt_timeout_ns)
			SELECT 't', 'default', '\x7b7d', 2, 3, g, 1, 60000000000 FROM generate_series(1, 100000) g`,
		`ANALYZE jobs`,
	)
	params := frontLease(256, 0)
	scope := leaseScopeOf(t, s, params)
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	past := func(string) (front, bool) { return front{priority: 0, runAt: 1000, id: 1000}, true }
	for _, mode := range []string{"auto", "force_generic_plan"} {
		sql, args, shape, err := leaseAtOnceSQL(scope, []*store.JobLeaseParams{params}, past)
		if err != nil {
			t.Fatal(err)
		}
		if shape == "" {
			t.Fatal("the lease has no shape")
		}
		plan := explainPrepared(t, conn, mode, plannerSQL(true, leaseOff), sql, args...)
		picked, _, _ := strings.Cut(plan, "InitPlan") // the read; the numbering after it sorts what it picked
		if !strings.Contains(picked, "ROW(run_at, id) > ROW(") || sortNode.MatchString(picked) {
			t.Errorf("plan_cache_mode %s: the lease past its front does not read the index in order from it:\n%s", mode, plan)
		}
	}
}

// Fronts past frontTTL are dropped once the store holds maxFronts, so the shapes of leases no
// longer asked for do not pile up between resets; and a write that began before a reset keeps
// none of the fronts it found.
func TestFrontsKeptAndDropped(t *testing.T) {
	clock := &frontClock{t: frontEpoch}
	f := newFronts(clock.now)
	leased := func(id int64) leasedTo { return leasedTo{last: &job.Job{ID: id}, began: clock.now()} }
	for i := range maxFronts {
		f.keep(f.generation(), map[string]leasedTo{strconv.Itoa(i): leased(int64(i))})
	}
	clock.add(frontTTL)
	f.keep(f.generation(), map[string]leasedTo{"new": leased(1)})
	if len(f.m) != 1 {
		t.Errorf("%d fronts kept, want the new one alone", len(f.m))
	}
	began := f.generation()
	f.reset()
	f.keep(began, map[string]leasedTo{"late": leased(2)})
	if _, _, ok := f.get("late"); ok {
		t.Error("a write that began before a reset kept its front")
	}
}

// The writes a drain runs beside its leases keep the fronts: the reads of the promoter and of
// the sweep, and the saves of a breaker that leave it shut or not shut as it was. A save that
// takes a breaker out of shut forgets them: its type's jobs, left out of the leases while it
// was shut, are ready again behind the front.
func TestFrontsKeptByBreakerSavesUnlessOneReopens(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		save func(tx store.Tx, r store.BreakerRecord, stored []byte) error
	}{
		{"BreakerSave", func(tx store.Tx, r store.BreakerRecord, _ []byte) error { return tx.BreakerSave(r) }},
		{"BreakerSaveIf", func(tx store.Tx, r store.BreakerRecord, stored []byte) error {
			return tx.BreakerSaveIf(r, stored, nil)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			clock := &frontClock{t: frontEpoch}
			s := openFronts(t, pgtest.URL(t), clock)
			write := func(fn func(tx store.Tx) error) {
				t.Helper()
				if err := s.Write(context.Background(), "test", fn); err != nil {
					t.Fatal(err)
				}
			}
			save := func(typ, data, stored string, shut bool) func(tx store.Tx) error {
				return func(tx store.Tx) error {
					return c.save(tx, store.BreakerRecord{Type: typ, Data: []byte(data), Shut: shut}, []byte(stored))
				}
			}
			write(func(tx store.Tx) error {
				return tx.BreakerSave(store.BreakerRecord{Type: "u", Data: []byte(`1`), Shut: true})
			})
			write(func(tx store.Tx) error { return tx.BreakerSave(store.BreakerRecord{Type: "t", Data: []byte(`1`)}) })
			shut := insertIDs(t, s, []*store.JobInsertParams{{Type: "u", Queue: "default", Payload: []byte(`{}`), MaxAttempts: 3,
				RunAt: frontEpoch.Add(-time.Hour), Now: frontEpoch, AttemptTimeout: time.Minute}})[0]
			ids := insertReady(t, s, 10, 0, frontEpoch, []byte(`{}`))
			lease := func(n int) *store.JobLeaseParams {
				p := frontLease(n, 0)
				p.Types = []string{"t", "u"}
				return p
			}
			wantLeased(t, "the first lease", leaseIDs(t, s, lease(3))[0], ids[0:3])

			makeReadyBehindTheStore(t, s, ids[2]) // passed over while the front is kept
			write(func(tx store.Tx) error {
				if _, _, err := tx.JobNextScheduledAt(); err != nil {
					return err
				}
				if _, err := tx.JobHeldExpired(frontEpoch, 10); err != nil {
					return err
				}
				if err := save("t", `2`, `1`, false)(tx); err != nil {
					return err
				}
				return save("u", `2`, `1`, true)(tx)
			})
			wantLeased(t, "the lease after the reads and the saves", leaseIDs(t, s, lease(2))[0], ids[3:5])

			write(save("u", `3`, `2`, false))
			wantLeased(t, "the lease after the breaker reopened", leaseIDs(t, s, lease(3))[0], []int64{shut, ids[2], ids[5]})
		})
	}
}

// Two leases of one shape in a write leave the later of their last jobs as the front, with the
// older of their chains' times: the front is no younger than the oldest read it rests on.
func TestLeasesOfAWriteLeaveOneFront(t *testing.T) {
	early, late := &job.Job{ID: 1, RunAt: frontEpoch}, &job.Job{ID: 2, RunAt: frontEpoch}
	first, second := frontEpoch, frontEpoch.Add(time.Second)
	for _, c := range []struct {
		name string
		a, b *job.Job
		// aBegan and bBegan are when the chains of fronts the leases read past began.
		aBegan, bBegan time.Time
	}{
		{"the later job first, from the younger chain", late, early, second, first},
		{"the earlier job first, from the older chain", early, late, first, second},
	} {
		tx := &tx{}
		tx.leasedFrom("s", c.aBegan, [][]*job.Job{{c.a}}, 1)
		tx.leasedFrom("s", c.bBegan, [][]*job.Job{{c.b}}, 1)
		if got := tx.found["s"]; got.last != late || !got.began.Equal(first) {
			t.Errorf("%s: the write went to job %d from %v, want job 2 from %v", c.name, got.last.ID, got.began, first)
		}
	}
}
