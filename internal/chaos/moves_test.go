package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobwire/jobwire/client"
	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/store/postgres/pgtest"
)

// A worker moved to another broker keeps every job sent to it, its Started arrived or not: no
// handler runs twice. Two brokers, four movable workers busy with short jobs (so that at any
// moment some of their jobs are sent and not yet started), and one broker killed and restarted,
// after which the workers even out again by moves. Every job must succeed, its handler started
// once. The leases are longer than a reconnect could take, so that no lease runs out under a
// worker that is only moving.
func TestMovedWorkersRunNoJobTwice(t *testing.T) {
	db := pgtest.URL(t)
	dir := t.TempDir()
	brokers := newBrokerSet(t, 2, db, dir)
	config := strings.Replace(brokerConfig, "lease_duration: 2s", "lease_duration: 20s", 1)
	if err := os.WriteFile(brokers.config, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	brokers.startAll(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*frozenWait)
	defer cancel()
	workCtx, stopWork := context.WithCancel(ctx)
	defer stopWork()
	l := newLedger()
	const workers = 4
	wait, err := startWorkers(workCtx, "movable", workers, 8, brokers.addrs, l, filepath.Join(dir, "workers.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		stopWork()
		if err := wait(); err != nil && ctx.Err() == nil {
			t.Errorf("workers: %v", err)
		}
	}()

	admin, err := client.Dial(ctx, brokers.addrs[0])
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	waitStreams := func(what string, want [2]int) {
		t.Helper()
		waitUntil(t, what, func() bool { return streamCounts(ctx, admin, brokers.addrs) == want })
	}
	even := [2]int{workers / 2, workers / 2}
	waitStreams("every worker to connect, evened out", even)

	pc, err := client.DialBrokers(ctx, brokers.addrs)
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	// More jobs than the workers can keep up with, so that each holds all it can all along.
	specs := make([]client.JobSpec, 12000)
	for i := range specs {
		body, _ := json.Marshal(payload{Do: succeed, WorkMS: i % 3})
		specs[i] = client.JobSpec{Type: jobTypes[i%len(jobTypes)], Payload: body, MaxAttempts: 5,
			IdempotencyKey: fmt.Sprintf("moves-%d", i)}
	}
	p := &producer{c: pc, specs: specs}
	produced := make(chan error, 1)
	go func() { produced <- p.run(ctx, 6*time.Second, 100) }()

	waitUntil(t, "the workers to be busy", func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return len(l.runs) >= 200
	})
	brokers.kill(1)
	waitStreams("the killed broker's workers to move to the other", [2]int{workers, -1})
	if err := brokers.start(1); err != nil {
		t.Fatal(err)
	}
	waitStreams("the workers to even out", even)

	if err := <-produced; err != nil {
		t.Fatalf("producer: %v", err)
	}
	pg, err := pgx.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Close(context.Background())
	// The jobs outnumber what the workers keep up with, so how long they take after the
	// producer stops is the machine's: under the whole race-enabled test run on two CPUs the
	// last finished more than frozenWait later. What is checked is that each runs once.
	waitUntilFor(t, 3*frozenWait, "every job to finish", func() bool {
		n, err := unfinished(ctx, pg, p.ids)
		return err == nil && n == 0
	})
	var notSucceeded int
	if err := pg.QueryRow(ctx, `SELECT count(*) FROM jobs WHERE id = ANY($1) AND state <> 5`, p.ids).Scan(&notSucceeded); err != nil {
		t.Fatal(err)
	}
	if notSucceeded > 0 {
		t.Errorf("%d of %d jobs did not succeed", notSucceeded, len(p.ids))
	}

	moves := 0
	for i := range 2 {
		moves += strings.Count(tail(brokers.logPath(i), 100000), `msg="moved a worker to another broker`)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	reruns, shown := 0, 0
	for _, id := range p.ids {
		if n := len(l.leases[id]); n > 1 {
			reruns += n - 1
			if shown++; shown <= 5 {
				t.Errorf("job %d: its handler started %d times, under leases %v", id, n, l.leases[id])
			}
		}
	}
	t.Logf("%d jobs, %d moves, %d handler runs beyond the first", len(p.ids), moves, reruns)
	if moves == 0 {
		t.Error("no worker was moved")
	}
	if reruns > 0 {
		t.Errorf("%d handler runs beyond the first after %d moves", reruns, moves)
	}
	if p := brokers.problems(); len(p) > 0 {
		t.Fatalf("the brokers' logs show problems:\n%s", strings.Join(p, "\n"))
	}
}

// streamCounts are the worker streams of the brokers at addrs, as the database shows them, with
// -1 for a broker that is not alive.
func streamCounts(ctx context.Context, admin *client.Client, addrs []string) [2]int {
	out := [2]int{-1, -1}
	resp, err := jobwirev1.NewAdminServiceClient(admin.Conn()).ListBrokers(ctx, &jobwirev1.ListBrokersRequest{})
	if err != nil {
		return out
	}
	for _, b := range resp.GetBrokers() {
		for i, a := range addrs {
			if b.GetAddr() == a && b.GetAlive() {
				out[i] = int(b.GetWorkers())
			}
		}
	}
	return out
}
