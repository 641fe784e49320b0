package chaos

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jobwire/jobwire/client"
	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/store/postgres"
	"github.com/jobwire/jobwire/store/postgres/pgtest"
)

// frozenWait bounds the waits of TestFrozenLeaderIsReplaced: a safety net well above the
// takeover time (postgres.DefaultLeaderTimeout plus an election interval), not a timing
// assertion.
const frozenWait = postgres.DefaultLeaderTimeout + 25*time.Second

// A leader frozen with SIGSTOP keeps its database session, and the leader lock with it, open.
// Another broker ends that session once the leader has been silent for the leader timeout, and
// leads: a delayed job still runs on the other brokers while the old leader stays frozen. Let
// go again, the old leader says it lost the leadership.
func TestFrozenLeaderIsReplaced(t *testing.T) {
	db := pgtest.URL(t)
	dir := t.TempDir()
	const n = 3
	brokers := newBrokerSet(t, n, db, dir)
	brokers.startAll(t)
	saying := func(i int, what string) bool { return strings.Contains(tail(brokers.logPath(i), 1000), what) }
	leader := -1
	waitUntil(t, "a broker to lead", func() bool {
		for i := range n {
			if saying(i, `msg="became leader"`) {
				leader = i
				return true
			}
		}
		return false
	})
	if !brokers.signal(leader, syscall.SIGSTOP) {
		t.Fatalf("cannot stop broker %d", leader)
	}
	frozen := time.Now()
	t.Cleanup(func() { brokers.signal(leader, syscall.SIGCONT) })
	var others []string
	for i, a := range brokers.addrs {
		if i != leader {
			others = append(others, a)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*frozenWait)
	defer cancel()
	workCtx, stopWork := context.WithCancel(ctx)
	waitWorkers, err := startWorkers(workCtx, "chaos-worker", 1, 4, others, newLedger(), filepath.Join(dir, "workers.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		stopWork()
		if err := waitWorkers(); err != nil && ctx.Err() == nil {
			t.Errorf("workers: %v", err)
		}
	}()
	c, err := client.DialBrokers(ctx, others)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	body, _ := json.Marshal(payload{Do: succeed})
	res, err := c.EnqueueBatch(ctx, []client.JobSpec{
		{Type: jobTypes[0], Payload: body, MaxAttempts: 3},
		{Type: jobTypes[0], Payload: body, MaxAttempts: 3, Delay: 500 * time.Millisecond},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		waitUntil(t, "the ready and the delayed job to succeed", func() bool {
			j, err := c.Get(ctx, r.ID)
			return err == nil && j.State == job.StateSucceeded
		})
	}
	t.Logf("both jobs ran %s after the leader (broker %d) was frozen", time.Since(frozen).Round(time.Millisecond), leader)
	// The job may run before the broker that ended the session has written it down.
	waitUntil(t, "a broker to say it ended the frozen leader's session", func() bool {
		for i := range n {
			if i != leader && saying(i, `msg="ended the session of a silent leader to take over"`) {
				return true
			}
		}
		return false
	})

	brokers.signal(leader, syscall.SIGCONT)
	waitUntil(t, "the old leader to say it lost the leadership", func() bool { return saying(leader, `msg="lost leadership"`) })
	if p := brokers.problems(); len(p) > 0 {
		t.Fatalf("the brokers' logs show problems:\n%s", strings.Join(p, "\n"))
	}
}

// waitUntil polls cond until it holds, failing the test after frozenWait.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	waitUntilFor(t, frozenWait, what, cond)
}

// waitUntilFor is waitUntil, waiting up to d.
func waitUntilFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
