package chaos

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/grpc"

	"github.com/jobwire/jobwire/client"
	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/store/postgres/pgtest"
	"github.com/jobwire/jobwire/worker"
)

// keyLimit is how many jobs of one key may run at once in TestKeyLimitHoldsUnderKill.
const keyLimit = 2

// keyWatch counts, per key, the handlers running under a lease the worker still holds: a
// handler counts from its start until it returns or its context ends (the worker gave the
// lease up), whichever comes first.
type keyWatch struct {
	mu      sync.Mutex
	running map[string]int
	most    map[string]int
	over    []string
}

func (k *keyWatch) handle(ctx context.Context, j *worker.Job) error {
	key := string(j.Payload)
	k.mu.Lock()
	k.running[key]++
	if n := k.running[key]; n > k.most[key] {
		k.most[key] = n
		if n > keyLimit {
			k.over = append(k.over, fmt.Sprintf("%d jobs of key %s running at once in the workers (job %d)", n, key, j.ID))
		}
	}
	k.mu.Unlock()
	defer func() {
		k.mu.Lock()
		k.running[key]--
		k.mu.Unlock()
	}()
	// The work itself: long enough that a killed broker's worker is mid-job.
	select {
	case <-time.After(150 * time.Millisecond):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// liveByKey is the most jobs of one key leased or running under a lease that has not run out,
// in the database now.
func liveByKey(ctx context.Context, db *pgx.Conn) (map[string]int, error) {
	rows, err := db.Query(ctx, `SELECT concurrency_key, count(*) FROM jobs
		WHERE state IN (3, 4) AND concurrency_key <> '' AND lease_expires_at > $1 GROUP BY 1`, time.Now().UnixNano())
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var k string
		var n int
		if err := rows.Scan(&k, &n); err != nil {
			return nil, err
		}
		out[k] = n
	}
	return out, rows.Err()
}

// Per-key concurrency holds under kill -9: three brokers on one database, a worker on each
// (moving to another broker when its own dies), jobs of four keys each limited to 2 running.
// A broker is killed with SIGKILL while its worker holds keyed jobs, and started again. At
// no moment do more than 2 jobs of a key run under live leases, as the database holds them
// (polled throughout) or as the workers run them, and every job succeeds.
func TestKeyLimitHoldsUnderKill(t *testing.T) {
	db := pgtest.URL(t)
	dir := t.TempDir()
	const n = 3
	brokers := newBrokerSet(t, n, db, dir)
	brokers.startAll(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	pg, err := pgx.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Close(context.Background())

	watch := &keyWatch{running: map[string]int{}, most: map[string]int{}}
	workCtx, stopWork := context.WithCancel(ctx)
	wait, err := startFleet(workCtx, fleet{name: "keyed", n: n, slots: 4, addrs: brokers.addrs,
		handlers: map[string]worker.HandlerFunc{"keyed": watch.handle}, logPath: filepath.Join(dir, "workers.log"),
		dial: []client.DialOption{client.WithDialOptions(grpc.WithDisableRetry())}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { stopWork(); _ = wait() }()

	pc, err := client.DialBrokers(ctx, brokers.addrs[1:])
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	var specs []client.JobSpec
	for i := range 120 {
		key := fmt.Sprintf("customer-%d", i%4)
		specs = append(specs, client.JobSpec{Type: "keyed", Payload: []byte(key), MaxAttempts: 10,
			ConcurrencyKey: key, ConcurrencyLimit: keyLimit})
	}
	res, err := pc.EnqueueBatch(ctx, specs)
	if err != nil {
		t.Fatal(err)
	}

	// Poll the database throughout, on a connection of its own.
	poll, err := pgx.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer poll.Close(context.Background())
	var dbOver []string
	polled := 0
	pollDone := make(chan struct{})
	pollCtx, stopPoll := context.WithCancel(ctx)
	go func() {
		defer close(pollDone)
		for pollCtx.Err() == nil {
			live, err := liveByKey(pollCtx, poll)
			if err != nil {
				if pollCtx.Err() == nil {
					dbOver = append(dbOver, "poll: "+err.Error())
				}
				return
			}
			polled++
			for k, c := range live {
				if c > keyLimit {
					dbOver = append(dbOver, fmt.Sprintf("%d jobs of key %s under live leases in the database", c, k))
				}
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	// The poller stops before its connection closes, however the test ends.
	defer func() { stopPoll(); <-pollDone }()

	// The broker to kill is one whose worker stream holds keyed jobs now, as the brokers report
	// their streams: which broker a worker is on depends on the brokers evening their workers
	// out, and the jobs may all be done before one chosen beforehand gets any.
	admins := make([]*client.Client, n)
	for i, addr := range brokers.addrs {
		if admins[i], err = client.Dial(ctx, addr); err != nil {
			t.Fatal(err)
		}
		defer admins[i].Close()
	}
	victim := -1
	waitUntil(t, "a broker whose worker holds keyed jobs", func() bool {
		victim = holdingBroker(ctx, admins)
		return victim >= 0
	})
	if !brokers.kill(victim) {
		t.Fatalf("cannot kill broker %d", victim)
	}
	t.Logf("killed broker %d while its worker held keyed jobs", victim)
	waitUntil(t, "a third of the jobs to succeed", func() bool { return succeeded(ctx, pg, res) >= len(res)/3 })
	if err := brokers.start(victim); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "every job to succeed", func() bool { return succeeded(ctx, pg, res) == len(res) })
	stopPoll()
	<-pollDone

	watch.mu.Lock()
	defer watch.mu.Unlock()
	for _, o := range append(dbOver, watch.over...) {
		t.Error(o)
	}
	t.Logf("most running at once per key in the workers: %v; database polled %d times", watch.most, polled)
	for k, m := range watch.most {
		if m < keyLimit {
			t.Errorf("key %s ran at most %d at once: the limit of %d was never reached, so it was not put to the test", k, m, keyLimit)
		}
	}
	if p := brokers.problems(); len(p) > 0 {
		t.Logf("the brokers' logs show problems (a killed broker's are expected): %v", p)
	}
}

// holdingBroker is the index of a broker one of whose worker streams holds leases now, as its
// client in admins hears from it, or -1.
func holdingBroker(ctx context.Context, admins []*client.Client) int {
	for i, c := range admins {
		callCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
		ws, err := c.ListWorkers(callCtx)
		cancel()
		if err != nil {
			continue
		}
		for _, w := range ws {
			if w.LeasesHeld > 0 {
				return i
			}
		}
	}
	return -1
}

// succeeded counts the jobs of res that succeeded.
func succeeded(ctx context.Context, db *pgx.Conn, res []client.EnqueueResult) int {
	ids := make([]int64, len(res))
	for i, r := range res {
		ids[i] = r.ID
	}
	var n int
	err := db.QueryRow(ctx, `SELECT count(*) FROM jobs WHERE id = ANY($1) AND state = $2`, ids, int16(job.StateSucceeded)).Scan(&n)
	if errors.Is(err, context.Canceled) {
		return -1
	}
	return n
}
