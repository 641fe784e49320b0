package storetest

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/store"
)

var _ = register(
	testCase{"DeadLetterQueue", testDeadLetterQueue},
	testCase{"JobRequeue", testJobRequeue},
	testCase{"JobDeleteDead", testJobDeleteDead},
	testCase{"JobDeleteFinished", testJobDeleteFinished},
	testCase{"Queues", testQueues},
	testCase{"TotalsMatchTheJobs", testTotalsMatchTheJobs},
	testCase{"RecentCounts", testRecentCounts},
	testCase{"Breakers", testBreakers},
	testCase{"Tokens", testTokens},
)

// kill runs a job of type typ in queue to the dead-letter queue at at, failing with errType.
func (b *bundle) kill(typ, queue, errType string, at time.Time) int64 {
	b.t.Helper()
	p := b.job(typ)
	p.Queue = queue
	id := b.insert(p)[0]
	q := b.leaseParams(1, typ)
	q.Queues = []string{queue}
	jobs := b.lease(q)
	if len(jobs) != 1 || jobs[0].ID != id {
		b.t.Fatalf("leased %v, want job %d", ids(jobs), id)
	}
	b.start(refOf(jobs[0]))
	f := b.finishParams(refOf(jobs[0]), job.StateDead)
	f.Queue, f.Type, f.Now, f.DeadReason = queue, typ, at, job.DeadFatal
	f.Attempt.ErrorType, f.Attempt.Message, f.Attempt.FinishedAt = errType, errType+" at "+at.Format(time.TimeOnly), at
	b.finish(f)
	return id
}

// Dead jobs are listed newest first with filters and a cursor, counted, grouped by error type
// and selected by id.
func testDeadLetterQueue(t *testing.T, b *bundle) {
	at := func(s int) time.Time { return b.now.Add(time.Duration(s) * time.Second) }
	d := []int64{
		b.kill("a", "q1", "KeyError", at(1)),
		b.kill("a", "q2", "KeyError", at(3)),
		b.kill("b", "q1", "Timeout", at(2)),
		b.kill("a", "q1", "Timeout", at(3)),
		b.kill("b", "q1", "KeyError", at(5)),
	}
	b.insert(b.job("a")) // not dead
	newest := []int64{d[4], d[3], d[1], d[2], d[0]}
	list := func(f store.DeadJobFilter, after *store.ListCursor, limit int) []int64 {
		t.Helper()
		jobs, err := b.s.JobListDead(b.ctx, &store.DeadJobListParams{Filter: f, After: after, Limit: limit})
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range jobs {
			if j.State != job.StateDead || len(j.Payload) != 0 {
				t.Fatalf("listed dead job %+v", j)
			}
		}
		return ids(jobs)
	}
	equal(t, "all", list(store.DeadJobFilter{}, nil, 10), newest)
	equal(t, "first page", list(store.DeadJobFilter{}, nil, 2), newest[:2])
	equal(t, "after a tie", list(store.DeadJobFilter{}, &store.ListCursor{Int: at(3).UnixNano(), ID: d[3]}, 2), newest[2:4])
	equal(t, "queue and type", list(store.DeadJobFilter{Queue: "q1", Type: "a"}, nil, 10), []int64{d[3], d[0]})
	equal(t, "error type", list(store.DeadJobFilter{ErrorType: "Timeout"}, nil, 10), []int64{d[3], d[2]})
	equal(t, "window", list(store.DeadJobFilter{DeadAfter: at(2), DeadBefore: at(5)}, nil, 10), []int64{d[3], d[1], d[2]})
	equal(t, "reason", list(store.DeadJobFilter{Reason: job.DeadFatal}, nil, 10), newest)
	equal(t, "other reason", list(store.DeadJobFilter{Reason: job.DeadTimeout}, nil, 10), []int64{})

	groups, err := b.s.DeadErrorGroups(b.ctx, &store.DeadJobFilter{}, 10)
	if err != nil {
		t.Fatal(err)
	}
	equal(t, "groups", groups, []store.DeadErrorGroup{
		{ErrorType: "KeyError", Count: 3, LastSeen: at(5), SampleMessage: "KeyError at 00:00:05"},
		{ErrorType: "Timeout", Count: 2, LastSeen: at(3), SampleMessage: "Timeout at 00:00:03"},
	})
	groups, err = b.s.DeadErrorGroups(b.ctx, &store.DeadJobFilter{Queue: "q2"}, 1)
	if err != nil {
		t.Fatal(err)
	}
	equal(t, "groups of q2", groups, []store.DeadErrorGroup{{ErrorType: "KeyError", Count: 1, LastSeen: at(3), SampleMessage: "KeyError at 00:00:03"}})

	b.write(func(tx store.Tx) error {
		got, err := tx.JobDeadIDs(&store.DeadJobFilter{Type: "a"}, 10)
		equal(t, "dead ids of type a", got, []int64{d[3], d[1], d[0]})
		if err != nil {
			return err
		}
		got, err = tx.JobDeadIDs(&store.DeadJobFilter{}, 2)
		equal(t, "dead ids up to a limit", got, newest[:2])
		return err
	})
}

// JobRequeue sends dead jobs back to run with a fresh run and their history kept; other jobs
// are left alone.
func testJobRequeue(t *testing.T, b *bundle) {
	d1 := b.kill("t", "default", "KeyError", b.now)
	d2 := b.kill("t", "default", "KeyError", b.now)
	live := b.insert(b.job("t"))[0]
	prio := 9
	at := b.now.Add(time.Minute)
	b.write(func(tx store.Tx) error {
		n, err := tx.JobRequeue(&store.JobRequeueParams{IDs: []int64{d1, live, d1 + 1000}, RunAt: b.now, Priority: &prio,
			Payload: []byte(`{"fixed":true}`), Now: at})
		if err == nil && n != 1 {
			t.Errorf("requeued %d, want 1", n)
		}
		if err != nil {
			return err
		}
		n, err = tx.JobRequeue(&store.JobRequeueParams{IDs: []int64{d2}, RunAt: b.now.Add(time.Hour), Now: at})
		if err == nil && n != 1 {
			t.Errorf("requeued %d, want 1", n)
		}
		return err
	})
	j := b.get(d1)
	if j.State != job.StatePending || j.Priority != 9 || string(j.Payload) != `{"fixed":true}` || j.Attempts != 0 ||
		j.AttemptBase != 1 || j.DeadReason != job.DeadNone || !j.FinishedAt.IsZero() || !j.RequeuedAt.Equal(at) ||
		!j.RunAt.Equal(b.now) || len(j.History) != 1 || !j.LifetimeStart().Equal(at) {
		t.Fatalf("requeued job: %+v", j)
	}
	j = b.get(d2)
	if j.State != job.StateScheduled || j.Priority != 0 || string(j.Payload) != `{}` || !j.RunAt.Equal(b.now.Add(time.Hour)) {
		t.Fatalf("job requeued for later: %+v", j)
	}
	if st := b.state(live); st != job.StatePending {
		t.Fatalf("requeue touched a job that was not dead: %s", st)
	}
	// The next run's attempts are numbered after the first run's.
	ref := b.leaseOne("t")
	if ref.JobID != d1 {
		t.Fatalf("leased job %d, want the requeued job %d with its new priority", ref.JobID, d1)
	}
	b.start(ref)
	b.finish(b.finishParams(ref, job.StateSucceeded))
	j = b.get(d1)
	if len(j.History) != 2 || j.History[0].Number != 1 || j.History[1].Number != 2 || j.History[1].Outcome != job.OutcomeSucceeded {
		t.Fatalf("history after a requeue: %+v", j.History)
	}
	equal(t, "counts", b.counts(), []store.StateCount{
		{Queue: "default", Type: "t", State: job.StateScheduled, Count: 1},
		{Queue: "default", Type: "t", State: job.StatePending, Count: 1},
		{Queue: "default", Type: "t", State: job.StateSucceeded, Count: 1},
	})
}

// JobDeleteDead deletes only dead jobs among the ids, with their attempts.
func testJobDeleteDead(t *testing.T, b *bundle) {
	d1 := b.kill("t", "default", "KeyError", b.now)
	d2 := b.kill("t", "default", "KeyError", b.now)
	live := b.insert(b.job("t"))[0]
	b.write(func(tx store.Tx) error {
		n, err := tx.JobDeleteDead([]int64{d1, live, d1 + 1000})
		if err == nil && n != 1 {
			t.Errorf("deleted %d, want 1", n)
		}
		return err
	})
	if _, err := b.s.JobGet(b.ctx, d1); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("deleted dead job: %v, want ErrNotFound", err)
	}
	b.get(d2)
	b.get(live)
	equal(t, "counts", b.counts(), []store.StateCount{
		{Queue: "default", Type: "t", State: job.StatePending, Count: 1},
		{Queue: "default", Type: "t", State: job.StateDead, Count: 1},
	})
	rc, err := b.s.RecentCounts(b.ctx, b.now)
	if err != nil {
		t.Fatal(err)
	}
	equal(t, "recent counts", rc, store.RecentCounts{Failed: 1, Dead: 1})
}

// JobDeleteFinished deletes jobs in the given final states that finished before a time,
// oldest first, at most limit; nothing else.
func testJobDeleteFinished(t *testing.T, b *bundle) {
	at := func(s int) time.Time { return b.now.Add(time.Duration(s) * time.Second) }
	var succeeded []int64
	for _, s := range []int{3, 1, 2, 9} {
		id := b.insert(b.job("t"))[0]
		ref := b.leaseOne("t")
		b.start(ref)
		p := b.finishParams(ref, job.StateSucceeded)
		p.Now = at(s)
		b.finish(p)
		succeeded = append(succeeded, id)
	}
	dead := b.kill("t", "default", "KeyError", at(1))
	cancelled := b.insert(b.job("t"))[0]
	b.write(func(tx store.Tx) error { _, err := tx.JobCancel(cancelled, at(1)); return err })
	pending := b.insert(b.job("t"))[0]

	del := func(states []job.State, before time.Time, limit int) int {
		t.Helper()
		var n int
		b.write(func(tx store.Tx) error {
			var err error
			n, err = tx.JobDeleteFinished(&store.JobDeleteFinishedParams{States: states, FinishedBefore: before, Limit: limit})
			return err
		})
		return n
	}
	equal(t, "deleted oldest two", del([]job.State{job.StateSucceeded}, at(5), 2), 2)
	for i, want := range []bool{true, false, false, true} {
		_, err := b.s.JobGet(b.ctx, succeeded[i])
		if exists := err == nil; exists != want {
			t.Fatalf("succeeded job finished at %d exists = %v, want %v (%v)", []int{3, 1, 2, 9}[i], exists, want, err)
		}
	}
	equal(t, "no states", del(nil, at(100), 10), 0)
	equal(t, "no room", del([]job.State{job.StateSucceeded}, at(100), 0), 0)
	equal(t, "dead and cancelled", del([]job.State{job.StateDead, job.StateCancelled}, at(100), 10), 2)
	for _, id := range []int64{dead, cancelled} {
		if _, err := b.s.JobGet(b.ctx, id); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("job %d: %v, want deleted", id, err)
		}
	}
	b.get(pending)
	equal(t, "counts", b.counts(), []store.StateCount{
		{Queue: "default", Type: "t", State: job.StatePending, Count: 1},
		{Queue: "default", Type: "t", State: job.StateSucceeded, Count: 2},
	})
	rc, err := b.s.RecentCounts(b.ctx, b.now)
	if err != nil {
		t.Fatal(err)
	}
	equal(t, "recent counts after retention", rc, store.RecentCounts{Succeeded: 2})
}

// Queues are created by their first job or a pause, paused and resumed, limited, and read
// with their depth.
func testQueues(t *testing.T, b *bundle) {
	in := func(queue string, runAt time.Time) *store.JobInsertParams {
		p := b.job("t")
		p.Queue, p.RunAt = queue, runAt
		return p
	}
	b.insert(in("mail", b.now.Add(-time.Minute)), in("mail", b.now), in("mail", b.now.Add(time.Hour)), in("sms", b.now))
	b.leaseOne("t") // the oldest mail job
	b.write(func(tx store.Tx) error {
		if err := tx.QueueSetPaused("held", true); err != nil {
			return err
		}
		if err := tx.QueueSetPaused("mail", true); err != nil {
			return err
		}
		if err := tx.QueueSetPaused("mail", false); err != nil {
			return err
		}
		if err := tx.QueueSetLimit("mail", 3); err != nil {
			return err
		}
		if err := tx.QueueSetPaused("nope", false); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("resume of a missing queue: %v, want ErrNotFound", err)
		}
		if err := tx.QueueSetLimit("nope", 1); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("limit of a missing queue: %v, want ErrNotFound", err)
		}
		return nil
	})
	qs, err := b.s.QueueLoadAll(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	equal(t, "queues", qs, []store.QueueRecord{{Name: "held", Paused: true}, {Name: "mail", ConcurrencyLimit: 3}, {Name: "sms"}})
	stats, err := b.s.QueueStats(b.ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	equal(t, "stats", stats, []store.QueueStats{
		{QueueRecord: store.QueueRecord{Name: "held", Paused: true}, Depth: map[job.State]int64{}},
		{QueueRecord: store.QueueRecord{Name: "mail", ConcurrencyLimit: 3},
			Depth:         map[job.State]int64{job.StateScheduled: 1, job.StatePending: 1, job.StateLeased: 1},
			OldestReadyAt: b.now},
		{QueueRecord: store.QueueRecord{Name: "sms"}, Depth: map[job.State]int64{job.StatePending: 1}, OldestReadyAt: b.now},
	})
	one, err := b.s.QueueStats(b.ctx, "sms")
	if err != nil {
		t.Fatal(err)
	}
	equal(t, "stats of one queue", one, stats[2:])
	none, err := b.s.QueueStats(b.ctx, "nope")
	if err != nil || len(none) != 0 {
		t.Fatalf("stats of a missing queue: %v, %v", none, err)
	}
}

// The counts that stats read (JobCounts, QueueStats) equal what the jobs themselves say after
// every kind of change a job can go through.
func testTotalsMatchTheJobs(t *testing.T, b *bundle) {
	check := func(step string) {
		t.Helper()
		jobs, err := b.s.JobList(b.ctx, &store.JobListParams{Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		type key struct {
			queue, typ string
			state      job.State
		}
		n := map[key]int64{}
		depth := map[string]map[job.State]int64{}
		for _, j := range jobs {
			n[key{j.Queue, j.Type, j.State}]++
			if depth[j.Queue] == nil {
				depth[j.Queue] = map[job.State]int64{}
			}
			depth[j.Queue][j.State]++
		}
		var want []store.StateCount
		for k, c := range n {
			want = append(want, store.StateCount{Queue: k.queue, Type: k.typ, State: k.state, Count: c})
		}
		sort.Slice(want, func(i, j int) bool {
			a, b := want[i], want[j]
			if a.Queue != b.Queue {
				return a.Queue < b.Queue
			}
			if a.Type != b.Type {
				return a.Type < b.Type
			}
			return a.State < b.State
		})
		if got := b.counts(); !slices.Equal(got, want) {
			t.Fatalf("after %s: JobCounts\n%v\nbut the jobs count\n%v", step, got, want)
		}
		queues, err := b.s.QueueStats(b.ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		if len(queues) != 3 {
			t.Fatalf("after %s: %d queues, want 3", step, len(queues))
		}
		for _, q := range queues {
			if fmt.Sprint(q.Depth) != fmt.Sprint(depth[q.Name]) {
				t.Fatalf("after %s: queue %s depth %v, but the jobs count %v", step, q.Name, q.Depth, depth[q.Name])
			}
		}
	}

	var ps []*store.JobInsertParams
	for i := range 40 {
		p := b.job(fmt.Sprintf("t%d", i%2))
		p.Queue = fmt.Sprintf("q%d", i%3)
		ps = append(ps, p)
	}
	b.insert(ps...)
	check("insert")
	leased := b.lease(b.leaseParams(64, "t0", "t1"))
	if len(leased) != 40 {
		t.Fatalf("leased %d jobs, want 40", len(leased))
	}
	check("lease")
	finish := func(j *job.Job, st job.State) *store.JobFinishParams {
		p := b.finishParams(refOf(j), st)
		p.Queue, p.Type = j.Queue, j.Type
		return p
	}
	var many []*store.JobFinishParams
	for _, j := range leased[:12] {
		many = append(many, finish(j, job.StateSucceeded))
	}
	b.write(func(tx store.Tx) error { _, err := tx.JobSucceedMany(many); return err })
	check("succeed many")
	// Results sent again after an ambiguous commit, beside new ones, count once.
	again := append(many[:3:3], finish(leased[12], job.StateSucceeded), finish(leased[13], job.StateSucceeded))
	b.write(func(tx store.Tx) error {
		applied, err := tx.JobSucceedMany(again)
		if err == nil && slices.Contains(applied, false) {
			err = fmt.Errorf("applied %v, want all acknowledged", applied)
		}
		return err
	})
	check("succeed again")
	b.write(func(tx store.Tx) error {
		_, err := tx.JobSucceedMany([]*store.JobFinishParams{finish(leased[14], job.StateSucceeded), many[5]})
		return err
	})
	check("succeed few")
	b.write(func(tx store.Tx) error {
		for _, j := range leased[15:22] {
			if _, err := tx.JobFinish(finish(j, job.StateDead)); err != nil {
				return err
			}
		}
		return nil
	})
	check("die")
	b.write(func(tx store.Tx) error {
		for _, j := range append(leased[22:25], leased[0]) { // the last one is finished already
			if _, err := tx.JobCancel(j.ID, b.now); err != nil {
				return err
			}
		}
		return nil
	})
	check("cancel")
	b.write(func(tx store.Tx) error {
		_, err := tx.JobRequeue(&store.JobRequeueParams{IDs: []int64{leased[15].ID, leased[16].ID}, RunAt: b.now, Now: b.now})
		return err
	})
	check("requeue")
	b.write(func(tx store.Tx) error { _, err := tx.JobDeleteDead([]int64{leased[17].ID}); return err })
	check("delete dead")
	b.write(func(tx store.Tx) error {
		_, err := tx.JobDeleteFinished(&store.JobDeleteFinishedParams{States: []job.State{job.StateSucceeded, job.StateCancelled},
			FinishedBefore: b.now.Add(time.Hour), Limit: 9})
		return err
	})
	check("delete succeeded")
}

// RecentCounts counts jobs that succeeded or died, and attempts that failed, from a time on.
func testRecentCounts(t *testing.T, b *bundle) {
	at := func(s int) time.Time { return b.now.Add(time.Duration(s) * time.Second) }
	for _, s := range []int{1, 5} {
		b.insert(b.job("t"))
		ref := b.leaseOne("t")
		b.start(ref)
		p := b.finishParams(ref, job.StateSucceeded)
		p.Now = at(s)
		b.finish(p)
	}
	b.kill("t", "default", "KeyError", at(2))
	b.kill("t", "default", "KeyError", at(6))
	// A failed attempt that is retried, finished at 4.
	b.insert(b.job("r"))
	ref := b.leaseOne("r")
	b.start(ref)
	p := b.finishParams(ref, job.StateScheduled)
	p.Attempt.FinishedAt = at(4)
	b.finish(p)
	for _, c := range []struct {
		since time.Time
		want  store.RecentCounts
	}{
		{at(0), store.RecentCounts{Succeeded: 2, Failed: 3, Dead: 2}},
		{at(3), store.RecentCounts{Succeeded: 1, Failed: 2, Dead: 1}},
		{at(5), store.RecentCounts{Succeeded: 1, Failed: 1, Dead: 1}},
		{at(7), store.RecentCounts{}},
	} {
		got, err := b.s.RecentCounts(b.ctx, c.since)
		if err != nil {
			t.Fatal(err)
		}
		equal(t, "recent counts since "+c.since.Format(time.TimeOnly), got, c.want)
	}
}

// A breaker's state is saved, replaced and read back.
func testBreakers(t *testing.T, b *bundle) {
	got, err := b.s.BreakerLoadAll(b.ctx)
	if err != nil || len(got) != 0 {
		t.Fatalf("breakers of an empty store: %v, %v", got, err)
	}
	b.write(func(tx store.Tx) error {
		for _, r := range []store.BreakerRecord{{Type: "b", Data: []byte(`{"state":1}`)}, {Type: "a", Data: []byte(`{}`)},
			{Type: "b", Data: []byte(`{"state":2}`)}} {
			if err := tx.BreakerSave(r); err != nil {
				return err
			}
		}
		return nil
	})
	got, err = b.s.BreakerLoadAll(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	equal(t, "breakers", got, []store.BreakerRecord{{Type: "a", Data: []byte(`{}`)}, {Type: "b", Data: []byte(`{"state":2}`)}})
}

// API tokens are stored by hash, listed oldest first, revoked once, and counted.
func testTokens(t *testing.T, b *bundle) {
	tok := func(id string, created time.Time, queues []string) *store.TokenRecord {
		return &store.TokenRecord{ID: id, Name: "name " + id, Hash: []byte("hash-" + id), Role: "worker",
			Queues: queues, Types: []string{}, CreatedAt: created}
	}
	t1 := tok("tok_b", b.now, []string{"mail", "sms.*"})
	t2 := tok("tok_a", b.now.Add(time.Second), []string{})
	t2.Types = nil // stored as an empty list
	b.write(func(tx store.Tx) error {
		n, err := tx.TokenCount()
		if err != nil || n != 0 {
			t.Errorf("TokenCount of an empty store: %d, %v", n, err)
		}
		if err := tx.TokenInsert(t1); err != nil {
			return err
		}
		return tx.TokenInsert(t2)
	})
	err := b.s.Write(b.ctx, "storetest", func(tx store.Tx) error { return tx.TokenInsert(tok("tok_c", b.now, nil)) })
	if err != nil {
		t.Fatal(err)
	}
	err = b.s.Write(b.ctx, "storetest", func(tx store.Tx) error { return tx.TokenInsert(tok("tok_b", b.now, nil)) })
	if err == nil {
		t.Fatal("a second token with the id of another was stored")
	}
	got, err := b.s.TokenGetByHash(b.ctx, []byte("hash-tok_b"))
	if err != nil {
		t.Fatal(err)
	}
	equal(t, "token by hash", *got, *t1)
	if _, err := b.s.TokenGetByHash(b.ctx, []byte("nope")); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("TokenGetByHash of an unknown hash: %v, want ErrNotFound", err)
	}
	revokedAt := b.now.Add(time.Minute)
	b.write(func(tx store.Tx) error {
		for _, at := range []time.Time{revokedAt, revokedAt.Add(time.Hour)} {
			r, err := tx.TokenRevoke("tok_b", at)
			if err != nil {
				return err
			}
			if !r.RevokedAt.Equal(revokedAt) {
				t.Errorf("revoked at %s, want the first revocation %s", r.RevokedAt, revokedAt)
			}
		}
		if _, err := tx.TokenRevoke("nope", revokedAt); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("revoke of an unknown token: %v, want ErrNotFound", err)
		}
		n, err := tx.TokenCount()
		if err == nil && n != 3 {
			t.Errorf("TokenCount = %d, want 3 (revoked ones included)", n)
		}
		return err
	})
	list, err := b.s.TokenList(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	var listed []string
	for _, r := range list {
		listed = append(listed, r.ID)
	}
	equal(t, "listed oldest first", listed, []string{"tok_b", "tok_c", "tok_a"})
	if !list[0].RevokedAt.Equal(revokedAt) || !list[2].RevokedAt.IsZero() || list[2].Types == nil || len(list[2].Types) != 0 {
		t.Fatalf("listed tokens: %+v", list)
	}
}
