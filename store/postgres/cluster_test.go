package postgres

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobwire/jobwire/store"
	"github.com/jobwire/jobwire/store/postgres/pgtest"
)

// testElection is the election interval of the tests' brokers: short, so failover is quick.
const testElection = 50 * time.Millisecond

// clusterWait bounds waits for events and elections: a safety net, not a timing assertion.
const clusterWait = 10 * time.Second

// testLeaderTimeout is the leader timeout of the tests' campaigning brokers: so long that no
// leader on a loaded machine is ever found silent, or gives up for a slow heartbeat, unless a
// test makes it silent (silence).
const testLeaderTimeout = time.Minute

// patient gives a broker testLeaderTimeout.
func patient(o *Options) { o.LeaderTimeout = testLeaderTimeout }

// logBuffer collects a store's log lines.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// openBroker opens a store on u as one broker, with its log in buf (nil: discarded); tune, if
// any, changes its options.
func openBroker(t *testing.T, u string, buf *logBuffer, tune ...func(*Options)) *Store {
	t.Helper()
	log := slog.New(slog.DiscardHandler)
	if buf != nil {
		log = slog.New(slog.NewTextHandler(buf, nil))
	}
	opts := Options{Logger: log, ElectionInterval: testElection, Addr: "127.0.0.1:7070"}
	for _, f := range tune {
		f(&opts)
	}
	s, err := Open(context.Background(), u, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// listen runs s.Listen until the test ends and returns the events it delivers.
func listen(t *testing.T, s *Store) <-chan store.Event {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	events := make(chan store.Event, 100)
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Listen(ctx, func(e store.Event) { events <- e })
	}()
	t.Cleanup(func() { cancel(); <-done })
	return events
}

// waitListening waits until s's listening connection has run LISTEN.
func waitListening(t *testing.T, s *Store) {
	t.Helper()
	waitFor(t, "the store to listen", func() bool {
		n, err := s.Listeners(context.Background())
		return err == nil && n > 0
	})
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(clusterWait)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for %s", clusterWait, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func nextEvent(t *testing.T, events <-chan store.Event) store.Event {
	t.Helper()
	select {
	case e := <-events:
		return e
	case <-time.After(clusterWait):
		t.Fatalf("no event within %s", clusterWait)
		return store.Event{}
	}
}

// publish commits a write that publishes es; fail makes it fail (and roll back) after publishing.
func publish(t *testing.T, s *Store, fail error, es ...store.Event) {
	t.Helper()
	err := s.Write(context.Background(), "test", func(tx store.Tx) error {
		for _, e := range es {
			tx.Publish(e)
		}
		return fail
	})
	if !errors.Is(err, fail) {
		t.Fatalf("write: %v, want %v", err, fail)
	}
}

// Events a transaction publishes reach every broker of the schema once it commits, each event
// once, marked with the publishing broker; a transaction that rolls back sends nothing, and
// brokers of another schema on the same server hear nothing.
func TestPublishedEventsArriveOnCommitOnly(t *testing.T) {
	t.Parallel()
	u := pgtest.URL(t)
	a, b := openBroker(t, u, nil), openBroker(t, u, nil)
	other := openBroker(t, pgtest.URL(t), nil)
	atB, atOther := listen(t, b), listen(t, other)
	waitListening(t, b)
	waitListening(t, other)

	publish(t, a, errors.New("rolled back"), store.Event{Kind: store.EventReady})
	ready, queue := store.Event{Kind: store.EventReady}, store.Event{Kind: store.EventQueues, Key: "mail"}
	publish(t, a, nil, ready, queue, ready, queue)
	got := map[store.Event]int{nextEvent(t, atB): 1}
	got[nextEvent(t, atB)]++
	publish(t, a, nil, store.Event{Kind: store.EventQueues, Key: "marker"})
	if e := nextEvent(t, atB); e.Key != "marker" {
		t.Fatalf("after the committed events came %+v, want only the marker: each event is sent once", e)
	}
	from := a.BrokerID()
	want := map[store.Event]int{{Kind: store.EventReady, From: from}: 1, {Kind: store.EventQueues, Key: "mail", From: from}: 1}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("events of the committed write: %v, want %v (none of the rolled-back one)", got, want)
	}
	publish(t, other, nil, store.Event{Kind: store.EventQueues, Key: "other schema"})
	if e := nextEvent(t, atOther); e.Key != "other schema" {
		t.Fatalf("a broker of another schema heard %+v", e)
	}
}

// A broker whose listening connection is lost connects again and says events may have been
// missed (EventResync); events flow again after it.
func TestListenResyncsAfterItsConnectionIsLost(t *testing.T) {
	t.Parallel()
	u := pgtest.URL(t)
	a, b := openBroker(t, u, nil), openBroker(t, u, nil)
	events := listen(t, b)
	waitListening(t, b)
	var killed int
	// Its own schema's only: the brokers of tests running beside it have the same names, and
	// ending their listening sessions too sent them a resync (TestPublishedEventsArriveOnCommitOnly).
	if err := a.pool.QueryRow(context.Background(), `SELECT COUNT(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE application_name = $1 AND query = $2`, b.sessionName("listen"), listenStatement(b.channel)).Scan(&killed); err != nil || killed != 1 {
		t.Fatalf("terminate the listening session: %d sessions, %v", killed, err)
	}
	if e := nextEvent(t, events); e.Kind != store.EventResync {
		t.Fatalf("after the listening connection was lost: %+v, want a resync", e)
	}
	waitListening(t, b)
	publish(t, a, nil, store.Event{Kind: store.EventReady})
	if e := nextEvent(t, events); e.Kind != store.EventReady || e.From != a.BrokerID() {
		t.Fatalf("after reconnecting: %+v, want the ready event", e)
	}
}

// Broker ids are never reused: a broker that opens after another closed gets a new one, and
// every broker is listed with its address, pid and host.
func TestBrokerIDsAreNeverReused(t *testing.T) {
	t.Parallel()
	u := pgtest.URL(t)
	a := openBroker(t, u, nil)
	b := openBroker(t, u, nil)
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	c := openBroker(t, u, nil)
	ids := map[string]bool{a.BrokerID(): true, b.BrokerID(): true, c.BrokerID(): true}
	if len(ids) != 3 || a.BrokerID() == "0" {
		t.Fatalf("broker ids %s, %s, %s: want three different ones", a.BrokerID(), b.BrokerID(), c.BrokerID())
	}
	list, err := c.Brokers(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	if len(list) != 3 || list[2].ID != c.BrokerID() || list[2].PID != os.Getpid() || list[2].Host != host ||
		list[2].Addr != "127.0.0.1:7070" || list[2].LastSeen.IsZero() {
		t.Fatalf("brokers: %+v", list)
	}
}

// leaders follows the leadership of several campaigning brokers.
// campaigns runs brokers' campaigns until the test ends (or stop), recording who leads and
// counting each broker's rounds.
type campaigns struct {
	*leaders
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	rounds map[int]*atomic.Int64 // written by run only, on the test's goroutine
}

func newCampaigns(t *testing.T) *campaigns {
	ctx, cancel := context.WithCancel(context.Background())
	c := &campaigns{leaders: &leaders{leading: map[int]bool{}}, ctx: ctx, cancel: cancel, rounds: map[int]*atomic.Int64{}}
	t.Cleanup(c.stop)
	return c
}

// run starts s's campaign as broker i, counting its rounds after the hook s already has (a
// freezer's, say). Its rounds' statements may take as long as a loaded machine makes them:
// slow is not failed (roundBound).
func (c *campaigns) run(i int, s *Store) {
	s.roundBound = clusterWait
	n := &atomic.Int64{}
	c.rounds[i] = n
	hook := s.campaignHook
	s.campaignHook = func() {
		if hook != nil {
			hook()
		}
		n.Add(1)
	}
	c.wg.Go(func() { s.Campaign(c.ctx, func(on bool) { c.set(i, on) }) })
}

// waitRounds waits until each of brokers has run n more rounds than when it was called.
func (c *campaigns) waitRounds(t *testing.T, n int64, brokers ...int) {
	t.Helper()
	from := make([]int64, len(brokers))
	for j, i := range brokers {
		from[j] = c.rounds[i].Load()
	}
	waitFor(t, fmt.Sprintf("%d rounds of brokers %v", n, brokers), func() bool {
		for j, i := range brokers {
			if c.rounds[i].Load()-from[j] < n {
				return false
			}
		}
		return true
	})
}

// stop ends the campaigns and waits for them.
func (c *campaigns) stop() {
	c.cancel()
	c.wg.Wait()
}

// freezer holds a broker's campaign at the start of its rounds while frozen: the broker neither
// writes its heartbeat nor checks its session, as a stopped process would not. Made after the
// test's campaigns, it lets them go before they are stopped.
type freezer struct {
	frozen atomic.Bool
	parked atomic.Bool // the campaign waits in hold
	thaw   chan struct{}
	once   sync.Once
}

func newFreezer(t *testing.T) *freezer {
	f := &freezer{thaw: make(chan struct{})}
	t.Cleanup(f.resume)
	return f
}

// hold is the campaign's hook.
func (f *freezer) hold() {
	if f.frozen.Load() {
		f.parked.Store(true)
		<-f.thaw
	}
}

// freeze holds the campaign at the start of its next round, and waits until it is held: it
// records no heartbeat from then on.
func (f *freezer) freeze(t *testing.T) {
	t.Helper()
	f.frozen.Store(true)
	waitFor(t, "the campaign to be held", f.parked.Load)
}

// silence makes broker s look unseen for twice the leader timeout, by the database's clock (as
// a broker frozen that long would): its last heartbeat is moved back. s must be frozen.
func silence(t *testing.T, s *Store) {
	t.Helper()
	if _, err := s.pool.Exec(context.Background(), `UPDATE brokers SET last_seen = last_seen - $2 WHERE id = $1`,
		s.brokerID, (2 * s.leaderTimeout).Nanoseconds()); err != nil {
		t.Fatal(err)
	}
}

func (f *freezer) resume() {
	f.frozen.Store(false)
	f.once.Do(func() { close(f.thaw) })
}

type leaders struct {
	mu      sync.Mutex
	leading map[int]bool
	most    int // the most brokers ever leading at once
}

func (l *leaders) set(i int, on bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.leading[i] = on
	n := 0
	for _, v := range l.leading {
		if v {
			n++
		}
	}
	l.most = max(l.most, n)
}

// mostAtOnce is the most brokers that ever led at once.
func (l *leaders) mostAtOnce() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.most
}

// is reports whether broker i leads.
func (l *leaders) is(i int) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.leading[i]
}

// leader is the one broker leading, or -1.
func (l *leaders) leader() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, v := range l.leading {
		if v {
			return i
		}
	}
	return -1
}

// One of several brokers leads. When the session holding the leadership is lost, that broker
// stops leading and says so, and another takes over; every election is logged with the broker's
// id.
func TestCampaignElectsOneLeaderAndFailsOver(t *testing.T) {
	t.Parallel()
	u := pgtest.URL(t)
	var logs [3]logBuffer
	var stores [3]*Store
	l := newCampaigns(t)
	for i := range stores {
		stores[i] = openBroker(t, u, &logs[i], patient)
		l.run(i, stores[i])
	}
	waitFor(t, "a leader", func() bool { return l.leader() >= 0 })
	first := l.leader()
	if !strings.Contains(logs[first].String(), `msg="became leader" broker=`+stores[first].BrokerID()) {
		t.Fatalf("the leader's log does not say it was elected:\n%s", logs[first].String())
	}
	l.waitRounds(t, 5, (first+1)%3, (first+2)%3) // the others try the lock meanwhile, and fail
	if l.leader() != first {
		t.Fatalf("broker %d leads, then %d without any failure", first, l.leader())
	}

	// Cut the leader's session from the database side.
	var killed int
	if err := stores[first].pool.QueryRow(context.Background(), `SELECT COUNT(pg_terminate_backend(pid)) FROM pg_locks
		WHERE locktype = 'advisory' AND granted AND classid = $1 AND objsubid = 2
		AND objid::bigint = (`+schemaKey+`::bigint & 4294967295)`, lockLeader).Scan(&killed); err != nil || killed != 1 {
		t.Fatalf("terminate the leader's session: %d sessions, %v", killed, err)
	}
	waitFor(t, "the old leader to say it lost the leadership", func() bool {
		return strings.Contains(logs[first].String(), `msg="lost leadership" broker=`+stores[first].BrokerID())
	})
	waitFor(t, "a new leader", func() bool { n := l.leader(); return n >= 0 && n != first })
	second := l.leader()
	if !strings.Contains(logs[second].String(), `msg="became leader" broker=`+stores[second].BrokerID()) {
		t.Fatalf("the new leader's log does not say it was elected:\n%s", logs[second].String())
	}
	l.stop()
	if l.leader() != -1 {
		t.Fatalf("broker %d still leads after its campaign ended", l.leader())
	}
	// Two may lead at once only between the old leader's loss and its next check: one broker
	// at most, but for those few milliseconds.
	if l.most > 2 {
		t.Fatalf("%d brokers led at once", l.most)
	}
}

// insertOne writes one job; runs counts the runs of the write's function.
func insertOne(s *Store, runs *atomic.Int32) error {
	return s.Write(context.Background(), "test", func(tx store.Tx) error {
		runs.Add(1)
		_, err := tx.JobInsertMany([]*store.JobInsertParams{{Type: "t", Queue: "default", Payload: []byte(`{}`),
			MaxAttempts: 3, RunAt: time.Unix(1, 0), Now: time.Unix(1, 0), AttemptTimeout: time.Minute}})
		return err
	})
}

func countJobs(t *testing.T, s *Store) int64 {
	t.Helper()
	var n int64
	if err := s.pool.QueryRow(context.Background(), `SELECT COUNT(*) FROM jobs`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// loseCommit makes s's next commit report a lost connection: after committing when committed,
// else instead of committing.
func loseCommit(s *Store, committed bool) {
	var once atomic.Bool
	s.commit = func(ctx context.Context, tx pgx.Tx) error {
		if once.Swap(true) {
			return tx.Commit(ctx)
		}
		if committed {
			if err := tx.Commit(ctx); err != nil {
				return err
			}
		}
		return fmt.Errorf("commit: %w", pgconn.ErrConnClosed)
	}
}

// A write whose commit went through but was reported lost is not run again: its receipt is
// found.
func TestCommittedWriteReportedLostIsNotRunAgain(t *testing.T) {
	t.Parallel()
	s := openBroker(t, pgtest.URL(t), nil)
	loseCommit(s, true)
	var runs atomic.Int32
	if err := insertOne(s, &runs); err != nil {
		t.Fatal(err)
	}
	if n, jobs := runs.Load(), countJobs(t, s); n != 1 || jobs != 1 {
		t.Fatalf("the write ran %d times and stored %d jobs, want once and one", n, jobs)
	}
}

// Write receipts are each broker's own: two brokers on one schema take the same receipt
// numbers, and a write of one whose commit failed is run again even though the other stored a
// receipt of the same number.
func TestWriteReceiptsAreEachBrokersOwn(t *testing.T) {
	t.Parallel()
	u := pgtest.URL(t)
	a, b := openBroker(t, u, nil), openBroker(t, u, nil)
	var runs atomic.Int32
	if err := insertOne(a, &runs); err != nil {
		t.Fatal(err)
	}
	loseCommit(b, false)
	runs.Store(0)
	if err := insertOne(b, &runs); err != nil {
		t.Fatal(err)
	}
	if n, jobs := runs.Load(), countJobs(t, b); n != 2 || jobs != 2 {
		t.Fatalf("the second broker's write ran %d times and the schema holds %d jobs, want twice and two: "+
			"it must not take the first broker's receipt for its own", n, jobs)
	}
}

// The leader forgets brokers not seen for a week, with their write receipts; the others stay.
func TestLeaderForgetsBrokersGoneForLong(t *testing.T) {
	t.Parallel()
	s := openBroker(t, pgtest.URL(t), nil)
	ctx := context.Background()
	old := time.Now().Add(-brokerForget - time.Hour).UnixNano()
	var gone int64
	if err := s.pool.QueryRow(ctx, `INSERT INTO brokers (addr, pid, host, started_at, last_seen)
		VALUES ('', 1, 'gone', $1, $1) RETURNING id`, old).Scan(&gone); err != nil {
		t.Fatal(err)
	}
	if _, err := s.pool.Exec(ctx, `INSERT INTO write_receipts (broker, slot, receipt) VALUES ($1, 1, 1)`, gone); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	s.roundBound = clusterWait // a prune that took longer would wait an hour for the next
	go func() { defer close(done); s.Campaign(cctx, func(bool) {}) }()
	t.Cleanup(func() { cancel(); <-done })
	waitFor(t, "the gone broker to be forgotten", func() bool {
		var n int
		err := s.pool.QueryRow(ctx, `SELECT (SELECT COUNT(*) FROM brokers WHERE id = $1) + (SELECT COUNT(*) FROM write_receipts WHERE broker = $1)`, gone).Scan(&n)
		return err == nil && n == 0
	})
	if list, err := s.Brokers(ctx); err != nil || len(list) != 1 || list[0].ID != s.BrokerID() {
		t.Fatalf("brokers after forgetting: %+v, %v; want this one", list, err)
	}
}

// A frozen leader (its process stopped while its connection stays open) keeps the leader lock,
// but not the leadership: once it has not been seen for the leader timeout, another broker ends
// its session, says so, and leads. The old leader, running again, finds its session gone at its
// first check and stops leading.
func TestFrozenLeaderIsReplaced(t *testing.T) {
	t.Parallel()
	u := pgtest.URL(t)
	var logs [2]logBuffer
	var stores [2]*Store
	var frozen [2]*freezer
	l := newCampaigns(t)
	for i := range stores {
		stores[i] = openBroker(t, u, &logs[i], patient)
		frozen[i] = newFreezer(t)
		stores[i].campaignHook = frozen[i].hold
		l.run(i, stores[i])
	}
	waitFor(t, "a leader", func() bool { return l.leader() >= 0 })
	old := l.leader()
	other := 1 - old
	frozen[old].freeze(t)
	silence(t, stores[old])
	waitFor(t, "the other broker to take over", func() bool { return l.is(other) })
	took := logs[other].String()
	want := `msg="ended the session of a silent leader to take over" broker=` + stores[other].BrokerID() +
		` leader=` + stores[old].BrokerID() + ` silent_for=`
	if !strings.Contains(took, want) {
		t.Fatalf("the new leader's log does not say whose session it ended:\n%s", took)
	}
	// The frozen broker still takes itself for the leader here: only its campaign, held in
	// campaignHook, could say otherwise, so there is nothing to check about it until it runs.

	frozen[old].resume()
	waitFor(t, "the old leader to stop leading", func() bool { return !l.is(old) })
	if s := logs[old].String(); !strings.Contains(s, `msg="lost leadership" broker=`+stores[old].BrokerID()) {
		t.Fatalf("the old leader's log does not say it lost the leadership:\n%s", s)
	}
	if !l.is(other) {
		t.Fatal("the new leader stopped leading when the old one woke up")
	}
}

// A broker connected as another role cannot end a frozen leader's session (pg_terminate_backend
// ends only sessions of the caller's own role): it says so and does not lead, and the leader,
// once it runs again, has kept the leadership. docs/deploying.md ("Role") says the same. Neither
// role is a superuser (whose sessions only a superuser may end).
func TestFrozenLeaderOfAnotherRoleIsNotEnded(t *testing.T) {
	t.Parallel()
	u := pgtest.URL(t)
	asA, asB := roleURL(t, u, "a"), roleURL(t, u, "b")
	var logs [2]logBuffer
	l := newCampaigns(t)
	frozen := newFreezer(t)
	a := openBroker(t, asA, &logs[0], patient)
	a.campaignHook = frozen.hold
	l.run(0, a)
	waitFor(t, "broker a to lead", func() bool { return l.is(0) })
	b := openBroker(t, asB, &logs[1], patient)
	l.run(1, b)

	frozen.freeze(t)
	silence(t, a)
	said := `msg="cannot end the session of a silent leader" broker=` + b.BrokerID()
	waitFor(t, "broker b to find it cannot end the silent leader", func() bool {
		return strings.Contains(logs[1].String(), said)
	})
	// Twenty more rounds of b with a frozen: b tries every round, and says so once.
	l.waitRounds(t, 20, 1)
	if l.is(1) {
		t.Fatal("broker b leads beside the frozen leader")
	}
	if s := logs[1].String(); strings.Count(s, said) != 1 || !strings.Contains(s, "(SQLSTATE 42501)") {
		t.Fatalf("broker b's log, want one warning with the server's insufficient_privilege error:\n%s", s)
	}
	frozen.resume()
	// Twenty rounds of both with a running again: a records it is alive and keeps leading, and
	// b, finding it alive, never leads.
	l.waitRounds(t, 20, 0, 1)
	if most := l.mostAtOnce(); l.is(1) || !l.is(0) || most != 1 {
		t.Fatalf("after the leader ran again: a leads %v, b leads %v, most at once %d\n%s", l.is(0), l.is(1), most, logs[0].String())
	}
	if strings.Contains(logs[0].String(), "lost leadership") {
		t.Fatalf("the leader lost the leadership:\n%s", logs[0].String())
	}
}

// roleURL makes a login role for the test (named for u's schema and suffix), neither a
// superuser nor a member of pg_signal_backend, with the rights a broker needs on u's schema,
// whose migrations it applies first: USAGE on the schema (not CREATE), and all on its tables.
// It returns u connecting as that role, and drops the role when the test ends.
func roleURL(t *testing.T, u, suffix string) string {
	t.Helper()
	ctx := context.Background()
	if _, err := Migrate(ctx, u, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	parsed, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	schema := parsed.Query().Get("search_path")
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	role := schema + "_" + suffix
	for _, sql := range []string{
		`CREATE ROLE ` + role + ` LOGIN`,
		`GRANT USAGE ON SCHEMA ` + schema + ` TO ` + role,
		`GRANT ALL ON ALL TABLES IN SCHEMA ` + schema + ` TO ` + role,
		`GRANT ALL ON ALL SEQUENCES IN SCHEMA ` + schema + ` TO ` + role,
	} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	t.Cleanup(func() {
		conn, err := pgx.Connect(ctx, u)
		if err != nil {
			t.Errorf("connect to drop role %s: %v", role, err)
			return
		}
		defer conn.Close(ctx)
		for _, sql := range []string{`DROP OWNED BY ` + role, `DROP ROLE ` + role} {
			if _, err := conn.Exec(ctx, sql); err != nil {
				t.Errorf("%s: %v", sql, err)
			}
		}
	})
	parsed.User = url.User(role)
	return parsed.String()
}

// A leader timeout that a broker's own heartbeat rounds could outlast is refused.
func TestLeaderTimeoutShorterThanThreeIntervalsIsRefused(t *testing.T) {
	t.Parallel()
	_, err := Open(context.Background(), pgtest.URL(t), Options{Logger: slog.New(slog.DiscardHandler),
		ElectionInterval: testElection, LeaderTimeout: 2 * testElection})
	if err == nil || !strings.Contains(err.Error(), "the leader timeout (100ms) must be at least three election intervals (150ms)") {
		t.Fatalf("open: %v", err)
	}
}

// Each broker's heartbeat writes its count of worker streams beside its last_seen and reads the
// other live brokers' counts, and every broker lists them all.
func TestBrokersListTheirWorkers(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	a, b := openBroker(t, url, nil), openBroker(t, url, nil)
	// Each takes the other for alive however long a loaded machine holds its heartbeats back:
	// the counts of live brokers are what is checked, not how soon a silent one drops out.
	a.aliveWindow, b.aliveWindow = time.Hour, time.Hour
	var workers atomic.Int64
	workers.Store(3)
	a.CountWorkers(func() int { return int(workers.Load()) })
	cs := newCampaigns(t)
	for i, s := range []*Store{a, b} {
		cs.run(i, s)
	}
	ctx := cs.ctx
	counts := func() map[string]int {
		list, err := b.Brokers(ctx)
		if err != nil {
			return nil
		}
		out := map[string]int{}
		for _, r := range list {
			out[r.ID] = r.Workers
		}
		return out
	}
	waitFor(t, "broker a's 3 workers to be listed", func() bool {
		c := counts()
		return c[a.BrokerID()] == 3 && c[b.BrokerID()] == 0
	})
	// Each heartbeat also reads the other live brokers' counts.
	waitFor(t, "broker b's heartbeat to read broker a's 3 workers", func() bool {
		p := b.PeerWorkers()
		return len(p) == 1 && p[a.BrokerID()] == 3
	})
	workers.Store(5)
	waitFor(t, "broker a's 5 workers to be listed", func() bool { return counts()[a.BrokerID()] == 5 })
	waitFor(t, "broker b's heartbeat to read them", func() bool { return b.PeerWorkers()[a.BrokerID()] == 5 })
	if p := a.PeerWorkers(); len(p) != 1 || p[b.BrokerID()] != 0 {
		t.Fatalf("broker a sees %v, want broker %s with no workers", p, b.BrokerID())
	}
}

// A leader whose pool is exhausted (every connection held by slow writes, say) keeps the
// leadership: it records that it is alive on the connection that holds the leader lock, not
// through the pool, so the other brokers never find it silent and never end its session.
func TestBusyLeaderKeepsTheLeadership(t *testing.T) {
	t.Parallel()
	u := pgtest.URL(t)
	tune := func(o *Options) { o.LeaderTimeout, o.MaxConns = testLeaderTimeout, 2 }
	var logA, logB logBuffer
	a, b := openBroker(t, u, &logA, tune), openBroker(t, u, &logB, tune)
	l := newCampaigns(t)
	l.run(0, a)
	waitFor(t, "broker a to lead", func() bool { return l.is(0) })
	l.run(1, b)

	var held []*pgxpool.Conn
	for range 2 {
		c, err := a.pool.Acquire(l.ctx)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	// Released before the pool closes even if the test fails first: a pool waits for its
	// connections to come back.
	release := sync.OnceFunc(func() {
		for _, c := range held {
			c.Release()
		}
	})
	t.Cleanup(release)
	// Twenty rounds on both brokers, with a's pool empty all along: a heartbeat that waited for
	// the pool would hold a's rounds back until half the leader timeout ended it, and then a
	// would give the leadership up.
	l.waitRounds(t, 20, 0, 1)
	release()
	if most := l.mostAtOnce(); !l.is(0) || l.is(1) || most != 1 {
		t.Fatalf("broker a leads: %v, broker b leads: %v, most at once: %d", l.is(0), l.is(1), most)
	}
	if s := logA.String(); strings.Contains(s, "lost leadership") {
		t.Fatalf("the busy leader lost the leadership:\n%s", s)
	}
	if s := logB.String(); strings.Contains(s, "ended the session of a silent leader") {
		t.Fatalf("the other broker ended the busy leader's session:\n%s", s)
	}
}
