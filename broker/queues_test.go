package broker

import (
	"context"
	"log/slog"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobwire/jobwire/breaker"
	"github.com/jobwire/jobwire/internal/clock"
	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/store"
)

// assignedIDs lists the ids of the jobs s was handed.
func assignedIDs(s *Session) []int64 {
	var ids []int64
	for _, m := range pendingMessages(s) {
		if a, ok := m.(Assignment); ok {
			ids = append(ids, a.Job.ID)
		}
	}
	return ids
}

// waitUntil polls cond, failing t after a generous bound: it waits on work of the broker's own
// goroutines, never on a timer of the broker's clock.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited 10s for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// A pause or resume stored under the broker, as another broker on the same database stores it,
// reaches the broker's rules when it hears of the change (queuesChanged), and a resume heard of
// that way wakes dispatch.
func TestQueuesChangedReadsRulesAgain(t *testing.T) {
	t.Parallel()
	b := newRaceBroker(t)
	ctx := context.Background()
	elsewhere := func(fn func(tx store.Tx) error) {
		t.Helper()
		if err := b.st.Write(ctx, "another broker", fn); err != nil {
			t.Fatal(err)
		}
	}
	elsewhere(func(tx store.Tx) error { return tx.QueueSetPaused("mail", true) })
	b.queuesChanged()
	waitUntil(t, "the pause to reach the rules", func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.queues.queueRules["mail"].paused
	})
	s, _, err := b.Open(ctx, Hello{WorkerID: "w", Types: []string{"t"}, Capacity: 2})
	if err != nil {
		t.Fatal(err)
	}
	res, err := b.Enqueue(ctx, []JobSpec{{Type: "t", Queue: "mail"}, {Type: "t", Queue: "other"}})
	if err != nil {
		t.Fatal(err)
	}
	mail, other := res[0].ID, res[1].ID
	// Once the other queue's job is out, the round that handed it out has passed mail's over.
	waitUntil(t, "the other queue's job to be handed out", func() bool { return slices.Contains(assignedIDs(s), other) })
	if got := assignedIDs(s); slices.Contains(got, mail) {
		t.Fatalf("handed out %v while mail was paused", got)
	}
	elsewhere(func(tx store.Tx) error { return tx.QueueSetPaused("mail", false) })
	b.queuesChanged()
	waitUntil(t, "the resumed queue's job to be handed out", func() bool { return slices.Contains(assignedIDs(s), mail) })
}

// heldReads is a store whose QueueLoadAll, once armed, reports each read it made on read and
// returns it only when let through on release.
type heldReads struct {
	store.Store
	armed         atomic.Bool
	read, release chan struct{}
}

func (h *heldReads) QueueLoadAll(ctx context.Context) ([]store.QueueRecord, error) {
	recs, err := h.Store.QueueLoadAll(ctx)
	if h.armed.Load() {
		h.read <- struct{}{}
		<-h.release
	}
	return recs, err
}

// A change reported while the rules are being read is served by one more read: the rules end
// as the database holds them, not as the read under way saw it.
func TestQueuesChangedDuringARead(t *testing.T) {
	t.Parallel()
	b := newRaceBroker(t)
	h := &heldReads{Store: b.st, read: make(chan struct{}), release: make(chan struct{})}
	b.st = h
	h.armed.Store(true)
	ctx := context.Background()
	limit := func(n int) {
		t.Helper()
		err := h.Store.Write(ctx, "another broker", func(tx store.Tx) error {
			if err := tx.QueueSetPaused("mail", true); err != nil {
				return err
			}
			return tx.QueueSetLimit("mail", n)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	limit(1)
	b.queuesChanged()
	<-h.read // the first read saw limit 1 and waits
	limit(2)
	b.queuesChanged()
	b.queuesChanged() // served by the same second read
	h.release <- struct{}{}
	select {
	case <-h.read: // the second read
	case <-time.After(10 * time.Second):
		t.Fatal("no second read after a change reported during the first")
	}
	h.armed.Store(false)
	h.release <- struct{}{}
	waitUntil(t, "the reads to end", func() bool {
		return !b.svc.queueReload.busy()
	})
	b.mu.Lock()
	got := b.queues.queueRules["mail"]
	b.mu.Unlock()
	if want := (queueRule{paused: true, limit: 2}); got != want {
		t.Fatalf("rules hold %+v, want %+v", got, want)
	}
}

// A broker whose cache is behind the database (it missed the events) does not undo what the
// database let its lease take: with the cap raised through another broker, the jobs the lease
// took under the new cap are handed out, not handed back for the old one.
func TestClusterStaleCacheDoesNotUndoALease(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 2, DefaultConfig(), breaker.CountConfig(), deaf)
	ctx := context.Background()
	if _, err := c.brokers[0].Enqueue(ctx, []JobSpec{{Type: payType, Queue: "capped"}, {Type: payType, Queue: "capped"}}); err != nil {
		t.Fatal(err)
	}
	if err := c.brokers[0].SetQueueLimit(ctx, "capped", 1); err != nil {
		t.Fatal(err)
	}
	if err := c.brokers[1].SetQueueLimit(ctx, "capped", 2); err != nil {
		t.Fatal(err)
	}
	c.brokers[0].mu.Lock()
	stale := c.brokers[0].queues.queueRules["capped"].limit
	c.brokers[0].mu.Unlock()
	if stale != 1 {
		t.Fatalf("the deaf broker's cache holds limit %d, want the old 1", stale)
	}
	s := c.worker(t, 0, 2)
	assignments(t, s, 2)
}

// A broker that knows of no capped queue leases without counting room (SkipCapped), so a queue
// another broker capped meanwhile is left out rather than overfilled; once the broker hears of
// the cap, a round leases the queue's jobs up to it.
func TestClusterQueueCappedElsewhere(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 2, DefaultConfig(), breaker.CountConfig(), deaf)
	ctx := context.Background()
	res, err := c.brokers[0].Enqueue(ctx, []JobSpec{{Type: payType, Queue: "capped"}, {Type: payType, Queue: "capped"},
		{Type: payType, Queue: "free"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.brokers[1].SetQueueLimit(ctx, "capped", 1); err != nil {
		t.Fatal(err)
	}
	s := c.worker(t, 0, 5)
	waitUntil(t, "the free queue's job to be handed out", func() bool { return slices.Contains(assignedIDs(s), res[2].ID) })
	c.settled(t, 0)
	if got := assignedIDs(s); len(got) != 1 {
		t.Fatalf("handed out %v from a queue capped elsewhere, unknown to this broker", got)
	}
	c.brokers[0].queuesChanged() // it hears of the cap
	waitUntil(t, "one capped job to be handed out", func() bool { return len(assignedIDs(s)) == 2 })
	c.settled(t, 0)
	if got := assignedIDs(s); len(got) != 2 {
		t.Fatalf("handed out %v, want the free job and one capped one", got)
	}
}

// A broker counts every sweep whether its paused queues hold a backlog (store.PausedBacklogMin
// ready jobs), and only then leaves its new jobs to dispatch rounds and has its leases of every
// queue name the others: beside a few paused jobs of its type a new job is offered, the
// store's check reading past them, and a lease reads every queue, at no round trip to find
// the others. A pause counts as a backlog until the next sweep counts, a paused queue that
// fills is found at a later sweep, and a resume of the last paused queue ends it.
func TestPausedBacklogCountedEverySweep(t *testing.T) {
	t.Parallel()
	onlyGroupCommit(t)
	bothWays(t, testPausedBacklogCountedEverySweep)
}

func testPausedBacklogCountedEverySweep(t *testing.T, clustered bool) {
	b, w := offerBroker(t, clustered)
	clk := b.clk.(*clock.Fake)
	ctx := context.Background()
	s := openPay(t, b, 2)
	backlog := func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.leaseParams(s, []string{payType}, 1, b.now(), false).PausedBacklog
	}
	enqueueHeld := func(n int) {
		t.Helper()
		specs := make([]JobSpec, n)
		for i := range specs {
			specs[i] = JobSpec{Type: payType, Queue: "held"}
		}
		if _, err := b.Enqueue(ctx, specs); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.PauseQueue(ctx, "held"); err != nil {
		t.Fatal(err)
	}
	if clustered {
		pauseHeard(t, b, "held")
	}
	enqueueHeld(1)
	if !backlog() {
		t.Fatal("a queue just paused is not taken for a backlog until counted")
	}
	sweepUntil(t, b, clk, "a sweep to find the paused queue's one job no backlog", func() bool { return !backlog() })
	if calls := enqueueCalls(t, b, w, s); !slices.Equal(calls, []string{"offered insert"}) {
		t.Fatalf("calls after an enqueue beside a paused job of its type: %q, want one offered insert and no lease", calls)
	}
	enqueueHeld(store.PausedBacklogMin - 1)
	sweepUntil(t, b, clk, "a sweep to find the paused queue's backlog", backlog)
	if calls := enqueueCalls(t, b, w, s); slices.Contains(calls, "offered insert") || !slices.Contains(calls, "lease") {
		t.Fatalf("calls after an enqueue beside a paused backlog: %q, want no offer and a lease", calls)
	}
	if err := b.ResumeQueue(ctx, "held"); err != nil {
		t.Fatal(err)
	}
	if backlog() {
		t.Fatal("with no queue paused, the paused queues are still taken for a backlog")
	}
}

// pauseHeard returns once a clustered broker b has heard its own pause of queue (paused
// already) and read the queue rules again for it. That read, off the cluster's listener, asks
// for a dispatch round, whose lease came among the writes a test counted (seen beside two CPU
// hogs). The listener may not listen yet when the broker starts, and misses what is published
// before it does: the pause is stored again until it is heard.
func pauseHeard(t *testing.T, b *Broker, queue string) {
	t.Helper()
	var heard atomic.Bool
	b.WatchCluster(func(e store.Event) {
		if e.Kind == store.EventQueues {
			heard.Store(true)
		}
	})
	for deadline := time.Now().Add(10 * time.Second); !heard.Load(); {
		if time.Now().After(deadline) {
			t.Fatalf("the broker did not hear its pause of %s within 10s", queue)
		}
		if err := b.PauseQueue(context.Background(), queue); err != nil {
			t.Fatal(err)
		}
		for wait := time.Now().Add(100 * time.Millisecond); !heard.Load() && time.Now().Before(wait); {
			time.Sleep(time.Millisecond)
		}
	}
	waitUntil(t, "the read of the queue rules the pause asked for", func() bool { return !b.svc.queueReload.busy() })
}

// silentCount is a store whose counts of the paused queues' ready jobs go unanswered until
// their context ends, while silent is set: a database that stopped answering that read.
type silentCount struct {
	store.Store
	silent  atomic.Bool
	waiting atomic.Int32 // counts waiting for their context
}

func (s *silentCount) PausedReady(ctx context.Context, atMost int) (int, error) {
	if s.silent.Load() {
		s.waiting.Add(1)
		defer s.waiting.Add(-1)
		<-ctx.Done()
		return 0, ctx.Err()
	}
	return s.Store.PausedReady(ctx, atMost)
}

// A count of the paused queues' backlog that the database does not answer is given up after a
// sweep interval, so that it holds no later sweep back: the sweeps go on (a lease that runs
// out is found) and, once the database answers, the next count is made.
func TestSilentPausedCountHoldsNoSweepBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := &silentCount{Store: openStore(t)}
	clk := clock.NewFake(time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC))
	cfg := DefaultConfig()
	// The count's bound is a sweep interval on the wall clock; the lease runs out in four.
	cfg.SweepInterval, cfg.LeaseDuration, cfg.HeartbeatInterval = 250*time.Millisecond, time.Second, 250*time.Millisecond
	b, err := New(Options{Store: st, Commit: testCommit, Config: cfg, Clock: clk, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	startForTest(t, b, func() error { return nil })
	s := openPay(t, b, 1)
	backlog := func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.queues.backlog()
	}
	if err := b.PauseQueue(ctx, "held"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Enqueue(ctx, []JobSpec{{Type: payType, Queue: "held"}}); err != nil {
		t.Fatal(err)
	}
	st.silent.Store(true)
	clk.Advance(b.cfg.SweepInterval)
	waitUntil(t, "a sweep's count to wait on the silent database", func() bool { return st.waiting.Load() == 1 })
	// A lease that runs out while the count waits is found by the sweeps after it.
	ids, err := b.Enqueue(ctx, []JobSpec{{Type: payType}})
	if err != nil {
		t.Fatal(err)
	}
	assignments(t, s, 1)
	sweepUntil(t, b, clk, "the sweeps to find the run-out lease past the silent count", func() bool {
		j, err := b.Get(ctx, ids[0].ID)
		return err == nil && j.State == job.StatePending
	})
	if !backlog() {
		t.Fatal("a count given up changed what the broker knows of the paused backlog")
	}
	st.silent.Store(false)
	sweepUntil(t, b, clk, "a count once the database answers", func() bool { return !backlog() })
}

// sweepUntil moves clk a sweep interval on and waits for cond, again until it holds: one move
// at a time, each given time for the sweep it starts to finish, so that the clock moves no
// further than the sweeps need (far enough, and leases held in the test would run out).
func sweepUntil(t *testing.T, b *Broker, clk *clock.Fake, what string, cond func() bool) {
	t.Helper()
	for range 50 {
		clk.Advance(b.cfg.SweepInterval)
		for deadline := time.Now().Add(200 * time.Millisecond); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			if cond() {
				return
			}
		}
	}
	t.Fatalf("%s: not after 50 sweeps", what)
}

// Reading the rules again keeps what the last count found of the paused queues while no queue
// was paused since; a queue newly paused is taken for a backlog until counted.
func TestQueueRulesReadAgainKeepThePausedBacklogCounted(t *testing.T) {
	t.Parallel()
	paused := func(names ...string) []store.QueueRecord {
		var recs []store.QueueRecord
		for _, n := range names {
			recs = append(recs, store.QueueRecord{Name: n, Paused: true})
		}
		return append(recs, store.QueueRecord{Name: "capped", ConcurrencyLimit: 2})
	}
	for _, c := range []struct {
		name    string
		counted bool // what the last count found
		again   []store.QueueRecord
		want    bool
	}{
		{"same pauses, no backlog", false, paused("a"), false},
		{"same pauses, a backlog", true, paused("a"), true},
		{"a queue newly paused", false, paused("a", "b"), true},
		{"a queue resumed", false, paused(), false},
		{"the last paused queue resumed", true, paused(), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			q := queueState{}
			q.replace(paused("a"))
			if !q.backlog() {
				t.Fatal("a queue paused at load is not taken for a backlog until counted")
			}
			q.pausedBacklog = c.counted
			q.replace(c.again)
			if q.backlog() != c.want {
				t.Errorf("after reading the rules again: backlog %v, want %v", q.backlog(), c.want)
			}
		})
	}
}
