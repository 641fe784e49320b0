package broker

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jobwire/jobwire/breaker"
	"github.com/jobwire/jobwire/internal/clock"
	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/store"
	"github.com/jobwire/jobwire/store/postgres"
	"github.com/jobwire/jobwire/store/postgres/pgtest"
)

// transitionLog records the breaker transitions one broker reports.
type transitionLog struct {
	nopObserver
	broker string
	mu     *sync.Mutex
	all    *[]reported
}

type reported struct {
	broker   string
	typ      string
	from, to breaker.State
	reason   breaker.Reason
}

func (l transitionLog) BreakerTransition(typ string, from, to breaker.State, reason breaker.Reason) {
	l.mu.Lock()
	defer l.mu.Unlock()
	*l.all = append(*l.all, reported{l.broker, typ, from, to, reason})
}

// cluster is several brokers on one PostgreSQL schema and one fake clock, sharing their breakers.
type cluster struct {
	url     string
	clk     *clock.Fake
	brokers []*Broker
	stores  []*postgres.Store
	// election is each broker's election interval, which also sets how long a broker may go
	// unseen and still be listed alive (by the database's clock, not clk).
	election time.Duration

	mu          sync.Mutex
	transitions []reported // in the order they were reported, across brokers
}

const payType = "pay"

// deafCluster is a cluster whose events never arrive.
type deafCluster struct{ store.Cluster }

func (deafCluster) Listen(ctx context.Context, _ func(store.Event)) { <-ctx.Done() }

// leader waits until one of c's brokers leads and returns it.
func (c *cluster) leader(t *testing.T) int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		for i, b := range c.brokers {
			if b.Leader() {
				return i
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("no broker leads")
		}
		time.Sleep(time.Millisecond)
	}
}

// membership is how the brokers of a test cluster take part in it.
type membership int

const (
	listening membership = iota // with Options.Cluster: breakers shared, events heard
	deaf                        // the same, but no event arrives, as when notifications are lost
	alone                       // without Options.Cluster: each broker's breakers its own
	// ownBreakers is listening with each broker's breakers its own, as alone: what the
	// cluster costs without the shared breakers, for benchmarks.
	ownBreakers
)

// newCluster starts n brokers on one database. Deaf ones' caches fall behind until they read
// the database.
func newCluster(t testing.TB, n int, conf Config, cfg breaker.Config, m membership) *cluster {
	t.Helper()
	return newClusterElecting(t, n, conf, cfg, m, 20*time.Millisecond)
}

// newClusterElecting is newCluster with brokers that hold elections every election.
func newClusterElecting(t testing.TB, n int, conf Config, cfg breaker.Config, m membership, election time.Duration) *cluster {
	t.Helper()
	c := &cluster{url: pgtest.URL(t), clk: clock.NewFake(time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)), election: election}
	for range n {
		c.startBroker(t, conf, cfg, m)
	}
	return c
}

// startBroker starts one more broker of c, with its own configuration.
func (c *cluster) startBroker(t testing.TB, conf Config, cfg breaker.Config, m membership) {
	t.Helper()
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	i := len(c.brokers)
	{
		st, err := postgres.Open(ctx, c.url, postgres.Options{Logger: log, ElectionInterval: c.election})
		if err != nil {
			t.Fatal(err)
		}
		var cl store.Cluster
		switch m {
		case listening, ownBreakers:
			cl = st
		case deaf:
			cl = deafCluster{st}
		}
		b, err := New(Options{Store: st, Commit: testCommit, Cluster: cl, Config: conf, Clock: c.clk, Logger: log,
			Breakers: &BreakerOptions{Default: cfg},
			Observer: transitionLog{broker: fmt.Sprint(i), mu: &c.mu, all: &c.transitions}})
		if err != nil {
			t.Fatal(err)
		}
		if m == ownBreakers {
			if b.breakers, err = breaker.NewSet(c.clk, cfg, nil, b.onBreakerTransition); err != nil {
				t.Fatal(err)
			}
			b.mode.(*clustered).brk = breakersInMemory{b}
		}
		startForTest(t, b, st.Close)
		c.brokers, c.stores = append(c.brokers, b), append(c.stores, st)
	}
}

// enqueue adds n jobs of payType through broker i; they fail for good at their first failure.
func (c *cluster) enqueue(t testing.TB, i, n int) {
	t.Helper()
	specs := make([]JobSpec, n)
	for i := range specs {
		specs[i] = JobSpec{Type: payType, MaxAttempts: 1}
	}
	if _, err := c.brokers[i].Enqueue(context.Background(), specs); err != nil {
		t.Fatal(err)
	}
}

// worker opens a worker stream for payType on broker i.
func (c *cluster) worker(t testing.TB, i, capacity int) *Session {
	t.Helper()
	s, _, err := c.brokers[i].Open(context.Background(), Hello{WorkerID: fmt.Sprintf("w%d-%d", i, capacity),
		Types: []string{payType}, Capacity: capacity})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// settled waits until broker i has committed everything asked of it so far, the done callbacks
// of its last batch (hand-outs included) too.
func (c *cluster) settled(t *testing.T, i int) {
	t.Helper()
	b := c.brokers[i]
	for range 2 {
		if err := b.do(context.Background(), "barrier", func(store.Tx) error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
}

// assignments waits for n assignments on s.
func assignments(t testing.TB, s *Session, n int) []Assignment {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out []Assignment
	for len(out) < n {
		msgs, err := s.Next(ctx)
		if err != nil {
			t.Fatalf("waiting for %d assignments, got %d: %v", n, len(out), err)
		}
		for _, m := range msgs {
			if a, ok := m.(Assignment); ok {
				out = append(out, a)
			}
		}
	}
	return out
}

// assigned counts the assignments waiting in s's outbox, without waiting.
func assigned(s *Session) int {
	n := 0
	for _, m := range pendingMessages(s) {
		if _, ok := m.(Assignment); ok {
			n++
		}
	}
	return n
}

// report sends a's result (failure nil: success) and waits for it to be stored.
func report(t *testing.T, s *Session, a Assignment, failure *job.Failure) {
	t.Helper()
	ref := job.LeaseRef{JobID: a.Job.ID, Token: a.Token}
	s.Result(ref, failure)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		msgs, err := s.Next(ctx)
		if err != nil {
			t.Fatalf("waiting for the ack of job %d: %v", a.Job.ID, err)
		}
		for _, m := range msgs {
			switch m := m.(type) {
			case ResultAck:
				if m.Ref == ref {
					return
				}
			case Refused:
				t.Fatalf("result of job %d refused: %+v", a.Job.ID, m)
			}
		}
	}
}

var transient = &job.Failure{Kind: job.KindTransient, ErrorType: "DOWN", Message: "dependency down"}

// info is broker i's listing of payType's breaker.
func (c *cluster) info(t testing.TB, i int) breaker.Info {
	t.Helper()
	for _, in := range c.brokers[i].Breakers() {
		if in.Type == payType {
			return in
		}
	}
	return breaker.Info{Type: payType, State: breaker.StateClosed, Generation: 1}
}

// wantState checks that every live broker lists payType's breaker in st at generation gen.
func (c *cluster) wantState(t *testing.T, st breaker.State, gen int64, brokers ...int) {
	t.Helper()
	for _, i := range brokers {
		if in := c.info(t, i); in.State != st || in.Generation != gen {
			t.Errorf("broker %d lists %v generation %d, want %v generation %d", i, in.State, in.Generation, st, gen)
		}
	}
}

// wantTransitions checks that the cluster reported each transition once, in one generation
// sequence, and returns them as "from->to reason" strings.
func (c *cluster) wantTransitions(t *testing.T, want ...string) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	var got []string
	for _, r := range c.transitions {
		got = append(got, fmt.Sprintf("%v->%v %v", r.from, r.to, r.reason))
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("transitions reported across brokers = %q, want %q", got, want)
	}
	for i := 1; i < len(c.transitions); i++ {
		if c.transitions[i].from != c.transitions[i-1].to {
			t.Errorf("transition %d starts from %v, but the one before ended in %v", i, c.transitions[i].from, c.transitions[i-1].to)
		}
	}
}

// Failures counted on three brokers open the one breaker they share, and all three see it;
// after OpenFor exactly one probe runs across the cluster though workers wait on every broker;
// its success closes the breaker everywhere; an operator's force and reset on one broker are
// seen on the others; and the transitions are reported once each, in order.
func TestSharedBreakerAcrossBrokers(t *testing.T) {
	t.Parallel()
	pgtest.ServerURL(t)
	cfg := breaker.CountConfig()
	cfg.Threshold, cfg.HalfOpenProbes = 5, 1
	c := newCluster(t, 3, DefaultConfig(), cfg, listening)

	// 2 + 2 + 1 failures, each broker's from its own worker. Each broker's jobs are enqueued
	// only once the worker before is done, so that no worker takes another's.
	for i, n := range []int{2, 2, 1} {
		c.enqueue(t, i, n)
		s := c.worker(t, i, n)
		for _, a := range assignments(t, s, n) {
			report(t, s, a, transient)
		}
		s.Close()
	}
	c.wantState(t, breaker.StateOpen, 2, 0, 1, 2)

	// A worker on every broker, jobs waiting: OpenFor passes and each broker's timer asks for
	// a probe round; one probe is leased in the whole cluster.
	c.enqueue(t, 0, 6)
	ws := []*Session{c.worker(t, 0, 4), c.worker(t, 1, 4), c.worker(t, 2, 4)}
	for i := range ws {
		c.settled(t, i)
	}
	c.clk.Advance(cfg.OpenFor)
	var prober int
	var probe Assignment
	deadline := time.Now().Add(10 * time.Second)
	for total := 0; total == 0; {
		for i := range ws {
			c.brokers[i].signal()
			c.settled(t, i)
		}
		total = 0
		for i, s := range ws {
			if n := assigned(s); n > 0 {
				total += n
				prober = i
			}
		}
		if total > 1 {
			t.Fatalf("%d probes leased across the cluster with HalfOpenProbes 1", total)
		}
		if time.Now().After(deadline) {
			t.Fatal("no probe was leased after OpenFor")
		}
	}
	for i := range ws { // every broker looks again while the probe runs
		c.brokers[i].signal()
		c.settled(t, i)
	}
	for i, s := range ws {
		if n := assigned(s); (i == prober) != (n == 1) || n > 1 {
			t.Fatalf("broker %d handed out %d probes (the prober is broker %d)", i, n, prober)
		}
	}
	if in := c.info(t, (prober+1)%3); in.State != breaker.StateHalfOpen || in.ProbesInFlight != 1 {
		t.Errorf("another broker lists %+v, want HALF_OPEN with 1 probe in flight", in)
	}
	probe = assignments(t, ws[prober], 1)[0]
	report(t, ws[prober], probe, nil)
	c.wantState(t, breaker.StateClosed, 4, 0, 1, 2)

	// An operator on one broker, seen on the others.
	if _, err := c.brokers[1].ForceBreaker(context.Background(), payType, breaker.StateOpen); err != nil {
		t.Fatal(err)
	}
	c.wantState(t, breaker.StateOpen, 5, 0, 2)
	if _, err := c.brokers[2].ResetBreaker(context.Background(), payType); err != nil {
		t.Fatal(err)
	}
	c.wantState(t, breaker.StateClosed, 6, 0, 1)

	c.wantTransitions(t, "CLOSED->OPEN threshold", "OPEN->HALF_OPEN open_elapsed",
		"HALF_OPEN->CLOSED probes_succeeded", "CLOSED->OPEN forced", "OPEN->CLOSED reset")
}

// kill ends broker i of c as a crash would, as far as the database and the other brokers can
// tell: its sessions of leadership and of listening end, as a dead process's connections
// close (PostgreSQL lets the leader lock go with its session), and its store closes. Nothing
// it held is settled. Closing the store alone is no death: the campaign runs on a connection
// of its own, so the broker would go on recording that it is alive, keep the leadership it
// held or win it afterwards, and then hold it for good, its sweeps failing on the closed store.
func (c *cluster) kill(t *testing.T, i int) {
	t.Helper()
	for _, s := range c.brokers[i].mode.after() {
		s.Stop()
		<-s.Stopped()
	}
	if err := c.stores[i].Close(); err != nil {
		t.Fatal(err)
	}
}

// waitFor polls cond, asking every live broker of c for a dispatch round and waiting for it
// between polls, until it holds.
func (c *cluster) waitFor(t *testing.T, what string, live []int, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		for _, i := range live {
			c.brokers[i].signal()
			c.settled(t, i)
		}
	}
}

// A broker that dies holding the one probe slot does not keep the breaker shut: the slot is
// freed by the sweep of the probe's expired lease on another broker (a probe that never
// started is released; one that started fails with LEASE_EXPIRED, which reopens the breaker
// until OpenFor), or by ProbeTimeout; then another broker probes. When the broker that dies
// leads, a live one takes the leadership over and sweeps.
func TestSharedBreakerProbeOfDeadBroker(t *testing.T) {
	t.Parallel()
	pgtest.ServerURL(t)
	tests := []struct {
		name         string
		started      bool
		lease, probe time.Duration // LeaseDuration and ProbeTimeout
		leaderDies   bool          // the broker that dies leads as the test begins
	}{
		{"lease of a probe never started expires", false, 30 * time.Second, 10 * time.Minute, false},
		{"lease of a running probe expires", true, 30 * time.Second, 10 * time.Minute, false},
		{"probe timeout", false, 10 * time.Minute, 30 * time.Second, false},
		{"the leader dies holding a running probe", true, 30 * time.Second, 10 * time.Minute, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			conf := DefaultConfig()
			conf.LeaseDuration = tt.lease
			cfg := breaker.CountConfig()
			cfg.ProbeTimeout = tt.probe
			c := newCluster(t, 3, conf, cfg, listening)
			// The broker that dies leads as the test begins, or not; and the leadership may move
			// between the brokers at any moment before it dies (their elections are 20 ms apart
			// here, and a campaign statement that outlasts a round closes the leader's session),
			// and between the live ones after. So no broker is watched as the leader: the probe's
			// lease is expired by whichever live broker leads when the clock passes its deadline,
			// or by the one that takes over after, which sweeps at once. Dead, the broker takes
			// no part in the elections (kill).
			dies := c.leader(t)
			if !tt.leaderDies {
				dies = (dies + 1) % 3
			}
			live := []int{(dies + 1) % 3, (dies + 2) % 3}
			if _, err := c.brokers[live[0]].ForceBreaker(context.Background(), payType, breaker.StateHalfOpen); err != nil {
				t.Fatal(err)
			}
			c.enqueue(t, dies, 3)
			sd := c.worker(t, dies, 4)
			probe := assignments(t, sd, 1)[0]
			if tt.started {
				sd.Started(job.LeaseRef{JobID: probe.Job.ID, Token: probe.Token})
				c.waitFor(t, "the probe is RUNNING", []int{dies}, func() bool {
					j, err := c.brokers[live[0]].Get(context.Background(), probe.Job.ID)
					return err == nil && j.State == job.StateRunning
				})
			}
			// It dies: nothing it held is settled.
			c.kill(t, dies)
			ws := []*Session{c.worker(t, live[0], 4), c.worker(t, live[1], 4)}
			c.waitFor(t, "both live brokers looked for work", live, func() bool { return true })
			for i, s := range ws {
				if n := assigned(s); n != 0 {
					t.Fatalf("broker %d handed out %d jobs while the dead broker holds the probe slot", live[i], n)
				}
			}

			c.clk.Advance(30 * time.Second)
			if tt.started {
				c.waitFor(t, "the failed probe reopened the breaker", live, func() bool {
					return c.info(t, live[0]).State == breaker.StateOpen
				})
				c.clk.Advance(cfg.OpenFor)
			}
			probes := func() int { return assigned(ws[0]) + assigned(ws[1]) }
			c.waitFor(t, "a live broker probes", live, func() bool { return probes() > 0 })
			c.waitFor(t, "every live broker looked again", live, func() bool { return true })
			if n := probes(); n != 1 {
				t.Fatalf("live brokers handed out %d probes, want 1", n)
			}
			in := c.info(t, live[1])
			if in.State != breaker.StateHalfOpen || in.ProbesInFlight != 1 {
				t.Errorf("breaker = %+v, want HALF_OPEN with one probe in flight", in)
			}
		})
	}
}

// A round's transaction may take its probe well after the round was planned (it waits for the
// breaker's lock, or for the storage's retries) while the clock moves on. The probe's lease is
// dated as it is taken, so it never reaches its worker run out already: the leader's sweep
// would take the job back, slot and all, and another broker would lease it as a second probe
// while the first worker holds its Assignment.
func TestSharedBreakerProbeLeaseDatedWhenTaken(t *testing.T) {
	t.Parallel()
	pgtest.ServerURL(t)
	conf := DefaultConfig()
	tests := []struct {
		name string
		wait time.Duration // how far the clock moves between the round and its lease
	}{
		{"no wait", 0},
		{"half a lease", conf.LeaseDuration / 2},
		{"a whole lease", conf.LeaseDuration},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := breaker.CountConfig()
			cfg.ProbeTimeout = 10 * time.Minute
			c := newCluster(t, 2, conf, cfg, listening)
			if _, err := c.brokers[0].ForceBreaker(context.Background(), payType, breaker.StateHalfOpen); err != nil {
				t.Fatal(err)
			}
			c.enqueue(t, 0, 2)
			// Broker 1's first breaker lock is its probe round's (flushBreakers): the clock
			// moves on while the round waits for it.
			var once sync.Once
			c.brokers[1].writing.lockingBreaker = func(string, bool) { once.Do(func() { c.clk.Advance(tt.wait) }) }
			prober := c.worker(t, 1, 4)
			probe := assignments(t, prober, 1)[0]
			if want := c.clk.Now().Add(conf.LeaseDuration); !probe.LeaseDeadline.Equal(want) {
				t.Errorf("the probe's lease runs out at %v, want %v: a lease's time after it was taken", probe.LeaseDeadline, want)
			}

			// The leader sweeps: the probe runs on, holding the one slot, and a worker waiting
			// on the other broker gets nothing.
			c.brokers[c.leader(t)].Sweep()
			j, err := c.brokers[0].Get(context.Background(), probe.Job.ID)
			if err != nil {
				t.Fatal(err)
			}
			if j.State != job.StateLeased || j.LeaseToken.Seq != probe.Token.Seq {
				t.Errorf("the probe's job after the sweep: %v under lease %d, want LEASED under the probe's %d",
					j.State, j.LeaseToken.Seq, probe.Token.Seq)
			}
			if in := c.info(t, 0); in.State != breaker.StateHalfOpen || in.ProbesInFlight != 1 {
				t.Errorf("breaker after the sweep = %+v, want HALF_OPEN with one probe in flight", in)
			}
			other := c.worker(t, 0, 4)
			c.waitFor(t, "both brokers looked for work", []int{0, 1}, func() bool { return true })
			if n := assigned(prober) + assigned(other); n != 0 {
				t.Errorf("%d more probes handed out while the first runs", n)
			}
		})
	}
}

// A broker whose cache still says CLOSED leases no job of a type another broker just opened:
// the lease's statement leaves out the types whose stored breaker is shut, and the read of those
// breakers that rides with it puts the cache right.
func TestSharedBreakerLeaseGuard(t *testing.T) {
	t.Parallel()
	pgtest.ServerURL(t)
	c := newCluster(t, 2, DefaultConfig(), breaker.CountConfig(), deaf)
	if _, err := c.brokers[0].ForceBreaker(context.Background(), payType, breaker.StateOpen); err != nil {
		t.Fatal(err)
	}
	if in, ok := c.brokers[1].breakers.Info(payType); ok && in.State != breaker.StateClosed {
		t.Fatalf("broker 1's cache already knows: %+v", in)
	}
	c.enqueue(t, 1, 1)
	s := c.worker(t, 1, 1)
	c.settled(t, 1)
	if n := assigned(s); n != 0 {
		t.Fatalf("broker 1 handed out %d jobs of a type whose shared breaker is OPEN", n)
	}
	if in, _ := c.brokers[1].breakers.Info(payType); in.State != breaker.StateOpen {
		t.Errorf("broker 1's cache after the lease: %+v, want OPEN", in)
	}
}

// A breaker stored shut whose type a broker's configuration disables holds nothing back on
// that broker: it clears the mark as it starts, which the leases' statements read.
func TestSharedBreakerDisabledAfterItOpened(t *testing.T) {
	t.Parallel()
	pgtest.ServerURL(t)
	c := newCluster(t, 1, DefaultConfig(), breaker.CountConfig(), listening)
	if _, err := c.brokers[0].ForceBreaker(context.Background(), payType, breaker.StateOpen); err != nil {
		t.Fatal(err)
	}
	off := breaker.CountConfig()
	off.Disabled = true
	c.startBroker(t, DefaultConfig(), off, listening)
	c.enqueue(t, 1, 1)
	assignments(t, c.worker(t, 1, 1), 1)
}

// A broker whose cache still shows a free probe slot that another broker has taken leases no
// probe: the slots are counted on the stored breaker.
func TestSharedBreakerStaleCacheProbes(t *testing.T) {
	t.Parallel()
	pgtest.ServerURL(t)
	c := newCluster(t, 2, DefaultConfig(), breaker.CountConfig(), deaf)
	if _, err := c.brokers[0].ForceBreaker(context.Background(), payType, breaker.StateHalfOpen); err != nil {
		t.Fatal(err)
	}
	c.wantState(t, breaker.StateHalfOpen, 2, 1) // broker 1's cache: HALF_OPEN, no probe in flight
	c.enqueue(t, 0, 3)
	assignments(t, c.worker(t, 0, 4), 1)
	if in, _ := c.brokers[1].breakers.Info(payType); in.ProbesInFlight != 0 {
		t.Fatalf("broker 1's cache already knows of the probe: %+v", in)
	}
	s := c.worker(t, 1, 4)
	c.settled(t, 1)
	if n := assigned(s); n != 0 {
		t.Fatalf("broker 1 handed out %d probes while broker 0 holds the only slot", n)
	}
}

// Failures stored in one batch are applied to the breaker one by one and stored once: the
// breaker opens at the threshold, and its transition is reported once.
func TestSharedBreakerBatchedFailures(t *testing.T) {
	t.Parallel()
	pgtest.ServerURL(t)
	c := newCluster(t, 2, DefaultConfig(), breaker.CountConfig(), listening)
	c.enqueue(t, 0, 10)
	s := c.worker(t, 0, 10)
	as := assignments(t, s, 10)
	for _, a := range as {
		s.Result(job.LeaseRef{JobID: a.Job.ID, Token: a.Token}, transient)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for acked := 0; acked < len(as); {
		msgs, err := s.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			if _, ok := m.(ResultAck); ok {
				acked++
			}
		}
	}
	c.wantState(t, breaker.StateOpen, 2, 0, 1)
	c.wantTransitions(t, "CLOSED->OPEN threshold")
}

// A probe's slot is settled by the broker that ends its lease, though another broker dispatched
// it: its result through another broker after its worker reconnected there, or a cancel there.
func TestSharedBreakerProbeEndedElsewhere(t *testing.T) {
	t.Parallel()
	pgtest.ServerURL(t)
	tests := []struct {
		name string
		end  func(t *testing.T, c *cluster, a Assignment) // on broker 1
		want breaker.State
	}{
		{"result after a reconnect", func(t *testing.T, c *cluster, a Assignment) {
			ref := job.LeaseRef{JobID: a.Job.ID, Token: a.Token}
			s, w, err := c.brokers[1].Open(context.Background(), Hello{WorkerID: a.Job.WorkerID,
				Types: []string{payType}, Capacity: 4, Held: []job.LeaseRef{ref}})
			if err != nil || len(w.Lost) != 0 {
				t.Fatalf("reconnect: %v, lost %v", err, w.Lost)
			}
			t.Cleanup(s.Close)
			report(t, s, a, nil)
		}, breaker.StateClosed},
		{"cancel", func(t *testing.T, c *cluster, a Assignment) {
			if _, err := c.brokers[1].Cancel(context.Background(), a.Job.ID); err != nil {
				t.Fatal(err)
			}
		}, breaker.StateHalfOpen},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := newCluster(t, 2, DefaultConfig(), breaker.CountConfig(), listening)
			if _, err := c.brokers[0].ForceBreaker(context.Background(), payType, breaker.StateHalfOpen); err != nil {
				t.Fatal(err)
			}
			c.enqueue(t, 0, 1)
			s := c.worker(t, 0, 4)
			a := assignments(t, s, 1)[0]
			c.start(t, s, a)
			s.Close() // its running lease stays in the database for the worker to take elsewhere
			tt.end(t, c, a)
			for i := range c.brokers {
				if in := c.info(t, i); in.State != tt.want || in.ProbesInFlight != 0 {
					t.Errorf("broker %d lists %+v, want %v with no probe in flight", i, in, tt.want)
				}
			}
		})
	}
}

// start tells broker 0, through s, that a's job started, and waits until broker 1 reads it
// RUNNING.
func (c *cluster) start(t *testing.T, s *Session, a Assignment) {
	t.Helper()
	s.Started(job.LeaseRef{JobID: a.Job.ID, Token: a.Token})
	c.waitFor(t, "the job is RUNNING", []int{0}, func() bool {
		j, err := c.brokers[1].Get(context.Background(), a.Job.ID)
		return err == nil && j.State == job.StateRunning
	})
}

// heldExpired reads, in a write of b, the held jobs whose leases have run out at at, as a
// sweep at at would, and checks that they are the job id alone.
func heldExpired(t *testing.T, b *Broker, at time.Time, id int64) []*job.Job {
	t.Helper()
	var stale []*job.Job
	err := b.do(context.Background(), "read", func(tx store.Tx) error {
		var err error
		stale, err = tx.JobHeldExpired(at, sweepBatch)
		return err
	})
	if err != nil || len(stale) != 1 || stale[0].ID != id {
		t.Fatalf("expired leases at %v: %v, %v; want job %d", at, stale, err, id)
	}
	return stale
}

// sweepStale sweeps on b, at at, the held jobs read before, as a sweep whose read came before
// another write ended their leases, and reports whether the store called every write applied.
func sweepStale(t *testing.T, b *Broker, at time.Time, stale []*job.Job) bool {
	t.Helper()
	outs := b.expire(at, func(store.Tx) ([]*job.Job, error) { return stale, nil })
	if len(outs) != len(stale) {
		t.Fatalf("the sweep of %d jobs did %d", len(stale), len(outs))
	}
	for _, e := range outs {
		if !e.applied {
			return false
		}
	}
	return true
}

// One attempt's failure applied by two writes counts once in the shared breaker. Each write
// ends the same lease, read current before either committed: a worker's failure and the sweep
// of its expired lease, or the sweeps of two brokers that both lead for a moment. The second
// is told by the store that it is already applied.
func TestSharedBreakerFailureAppliedTwice(t *testing.T) {
	t.Parallel()
	pgtest.ServerURL(t)
	tests := []struct {
		name  string
		first func(t *testing.T, c *cluster, s *Session, a Assignment, sweep func(i int) bool)
	}{
		{"a worker's failure, then a sweep", func(t *testing.T, c *cluster, s *Session, a Assignment, _ func(int) bool) {
			report(t, s, a, transient)
		}},
		{"a sweep on each broker", func(t *testing.T, c *cluster, _ *Session, _ Assignment, sweep func(int) bool) {
			if !sweep(0) {
				t.Fatal("the first sweep found the lease stale")
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			conf := DefaultConfig()
			conf.LeaseDuration = 30 * time.Second
			c := newCluster(t, 2, conf, breaker.CountConfig(), listening)
			c.enqueue(t, 0, 1)
			s := c.worker(t, 0, 1)
			a := assignments(t, s, 1)[0]
			c.start(t, s, a)
			// What a sweep reads once the lease ran out. The clock stays, so that no
			// broker's own sweep expires it.
			later := c.clk.Now().Add(2 * conf.LeaseDuration)
			stale := heldExpired(t, c.brokers[1], later, a.Job.ID)
			sweep := func(i int) bool { return sweepStale(t, c.brokers[i], later, stale) }

			tt.first(t, c, s, a, sweep)
			if got := c.info(t, 0).FailuresInWindow; got != 1 {
				t.Fatalf("failures after the first write = %d, want 1", got)
			}
			if !sweep(1) {
				t.Fatal("the store called the repeated write stale, not already applied: the test shows nothing")
			}
			for i := range c.brokers {
				if in := c.info(t, i); in.FailuresInWindow != 1 || in.State != breaker.StateClosed {
					t.Errorf("broker %d lists %+v, want CLOSED with the one failure", i, in)
				}
			}
		})
	}
}

// A broker alone (SQLite, its breakers in memory) counts a failure applied twice once too: the
// permit is settled by whichever write's broker-side end finds the lease still kept in memory.
func TestBreakerFailureAppliedTwiceAlone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := newRaceBroker(t)
	if _, err := b.Enqueue(ctx, []JobSpec{{Type: payType, MaxAttempts: 1}}); err != nil {
		t.Fatal(err)
	}
	s, _, err := b.Open(ctx, Hello{WorkerID: "w", Types: []string{payType}, Capacity: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	a := assignments(t, s, 1)[0]
	ref := job.LeaseRef{JobID: a.Job.ID, Token: a.Token}
	s.Started(ref)
	later := b.now().Add(2 * b.cfg.LeaseDuration)
	var stale []*job.Job
	deadline := time.Now().Add(10 * time.Second)
	for len(stale) == 0 { // once Started is stored
		if time.Now().After(deadline) {
			t.Fatal("the job never ran")
		}
		if j, err := b.Get(ctx, a.Job.ID); err == nil && j.State == job.StateRunning {
			stale = heldExpired(t, b, later, a.Job.ID)
		} else {
			time.Sleep(time.Millisecond)
		}
	}
	report(t, s, a, transient)
	if !sweepStale(t, b, later, stale) {
		t.Fatal("the store called the sweep's write stale, not already applied: the test shows nothing")
	}
	if in, _ := b.breakers.Info(payType); in.FailuresInWindow != 1 {
		t.Errorf("breaker after a failure applied twice: %+v, want 1 failure", in)
	}
}

// In ratio mode brokers share the calls as well as the failures: the successes stored through
// one broker are in the window every broker reads, they hold back a breaker that the failures
// alone would open, and it opens, once, when the failures reach the ratio.
func TestSharedBreakerRatio(t *testing.T) {
	t.Parallel()
	c, s0 := tenSuccesses(t, 2)
	c.clk.Advance(breakerSaveDelay) // the successes are held for their breaker until then
	if in := c.waitCalls(t, 1, 10); in.FailuresInWindow != 0 {
		t.Fatalf("broker 1 lists %d calls, %d failures; want the 10 successes of broker 0", in.Calls, in.FailuresInWindow)
	}
	c.failTen(t, s0, 1)
	c.wantState(t, breaker.StateOpen, 2, 0, 1)
	c.wantTransitions(t, "CLOSED->OPEN ratio")
	tr := c.info(t, 0).Trip
	if tr == nil || tr.Calls != 20 || tr.Failures != 10 || len(tr.Last) != breaker.NoteLimit ||
		tr.Last[0].Message != "DOWN: dependency down" {
		t.Fatalf("broker 0 lists the trip as %+v, want 10 of 20 calls and the last failures", tr)
	}
}

// tenSuccesses starts a cluster of n brokers whose ratio-mode breakers trust the ratio from 5
// calls on, and reports 10 successes through a worker of broker 0, which it returns.
func tenSuccesses(t *testing.T, n int) (*cluster, *Session) {
	t.Helper()
	pgtest.ServerURL(t)
	cfg := breaker.DefaultConfig()
	cfg.MinCalls = 5
	c := newCluster(t, n, DefaultConfig(), cfg, listening)
	c.enqueue(t, 0, 10)
	s0 := c.worker(t, 0, 10)
	for _, a := range assignments(t, s0, 10) {
		report(t, s0, a, nil)
	}
	return c, s0
}

// failTen reports 10 failures through s0 (after tenSuccesses), and checks after each that
// broker i lists the breaker CLOSED until the 10th opens it, at 10 of 20 calls.
func (c *cluster) failTen(t *testing.T, s0 *Session, i int) {
	t.Helper()
	c.enqueue(t, 0, 10)
	for n, a := range assignments(t, s0, 10) {
		n++
		report(t, s0, a, transient)
		want := breaker.StateClosed
		if n == 10 {
			want = breaker.StateOpen
		}
		if in := c.info(t, i); in.State != want {
			t.Fatalf("after %d failures beside 10 successes: %v (%d calls, %d failures), want %v",
				n, in.State, in.Calls, in.FailuresInWindow, want)
		}
	}
}

// A broker holds the successes it stores for their breaker (ratio mode), but a failure that
// could open the breaker is counted after them: with 10 successes held, 5 failures (MinCalls)
// do not open it, and the 10th does, at 10 of 20 calls.
func TestSharedBreakerCountsHeldSuccessesBeforeAFailure(t *testing.T) {
	t.Parallel()
	c, s0 := tenSuccesses(t, 1)
	if in := c.info(t, 0); in.Calls != 0 {
		t.Fatalf("the breaker lists %d calls before any failure, want the successes still held", in.Calls)
	}
	c.failTen(t, s0, 0)
}

// waitCalls waits until broker i lists at least n calls in payType's breaker, and returns it.
func (c *cluster) waitCalls(t testing.TB, i, n int) breaker.Info {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		in := c.info(t, i)
		if in.Calls >= n {
			return in
		}
		if time.Now().After(deadline) {
			t.Fatalf("broker %d lists %d calls, want %d", i, in.Calls, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// A success that frees room under its queue's cap is written alone (JobFinish), not with the
// batch's others: its breaker counts it all the same, in the window every broker reads.
func TestSharedBreakerRatioOfSuccessesWrittenAlone(t *testing.T) {
	t.Parallel()
	pgtest.ServerURL(t)
	c := newCluster(t, 2, DefaultConfig(), breaker.DefaultConfig(), listening)
	c.enqueue(t, 0, 10)
	if err := c.brokers[0].SetQueueLimit(context.Background(), "default", 10); err != nil {
		t.Fatal(err)
	}
	s0 := c.worker(t, 0, 10)
	for _, a := range assignments(t, s0, 10) {
		report(t, s0, a, nil)
	}
	if in := c.info(t, 1); in.Calls != 0 {
		t.Fatalf("broker 1 lists %d calls before %v, want the successes held", in.Calls, breakerSaveDelay)
	}
	c.clk.Advance(breakerSaveDelay)
	if in := c.waitCalls(t, 1, 10); in.Calls != 10 || in.FailuresInWindow != 0 {
		t.Fatalf("broker 1 lists %d calls, %d failures; want the 10 successes of broker 0", in.Calls, in.FailuresInWindow)
	}
}

// A success is held for its breaker only once the store says it applied: a success whose lease
// ended in the database meanwhile (another broker's sweep, here a release beside the broker)
// is refused, and counts nowhere.
func TestSharedBreakerHoldsOnlyStoredSuccesses(t *testing.T) {
	t.Parallel()
	pgtest.ServerURL(t)
	c := newCluster(t, 1, DefaultConfig(), breaker.DefaultConfig(), listening)
	s0 := c.worker(t, 0, 1)
	c.enqueue(t, 0, 1)
	report(t, s0, assignments(t, s0, 1)[0], nil) // the writer learns what it stored
	c.enqueue(t, 0, 1)
	a := assignments(t, s0, 1)[0]
	ref := job.LeaseRef{JobID: a.Job.ID, Token: a.Token}
	if err := c.stores[0].Write(context.Background(), "release", func(tx store.Tx) error {
		released, err := tx.JobRelease(ref)
		if err == nil && !released {
			err = fmt.Errorf("job %d: the release of its lease was refused", ref.JobID)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	s0.Started(ref)
	s0.Result(ref, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for refused := false; !refused; {
		msgs, err := s0.Next(ctx)
		if err != nil {
			t.Fatalf("waiting for the stale success's answer: %v", err)
		}
		for _, m := range msgs {
			switch m.(type) {
			case ResultAck:
				t.Fatal("a success whose lease ended in the database was acknowledged")
			case Refused:
				refused = true
			}
		}
	}
	c.clk.Advance(breakerSaveDelay)
	if in := c.waitCalls(t, 0, 1); in.Calls != 1 {
		t.Fatalf("the breaker lists %d calls after one success and one stale, want 1", in.Calls)
	}
}
