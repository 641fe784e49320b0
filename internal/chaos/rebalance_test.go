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

// Workers that moved to another broker when theirs was killed even out again once it is back:
// the broker that holds them all moves them one at a time, and each keeps its running jobs
// through the move. Workers whose connection reaches one broker only are never moved. Jobs
// run all along, and every one of them succeeds.
func TestWorkersEvenOutWhenABrokerReturns(t *testing.T) {
	db := pgtest.URL(t)
	dir := t.TempDir()
	brokers := newBrokerSet(t, 2, db, dir)
	brokers.startAll(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*frozenWait)
	defer cancel()
	workCtx, stopWork := context.WithCancel(ctx)
	defer stopWork()
	l := newLedger()
	const movable, pinned = 6, 2
	waitMovable, err := startWorkers(workCtx, "movable", movable, 4, brokers.addrs, l, filepath.Join(dir, "movable.log"))
	if err != nil {
		t.Fatal(err)
	}
	pinnedLog := filepath.Join(dir, "pinned.log")
	waitPinned, err := startWorkers(workCtx, "pinned", pinned, 4, brokers.addrs[:1], l, pinnedLog)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		stopWork()
		if err := waitMovable(); err != nil && ctx.Err() == nil {
			t.Errorf("movable workers: %v", err)
		}
		if err := waitPinned(); err != nil && ctx.Err() == nil {
			t.Errorf("pinned workers: %v", err)
		}
	}()

	admin, err := client.Dial(ctx, brokers.addrs[0])
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	// counts are the worker streams of the two brokers, as the database shows them, with -1
	// for a broker that is not alive.
	counts := func() [2]int {
		out := [2]int{-1, -1}
		resp, err := jobwirev1.NewAdminServiceClient(admin.Conn()).ListBrokers(ctx, &jobwirev1.ListBrokersRequest{})
		if err != nil {
			return out
		}
		for _, b := range resp.GetBrokers() {
			for i, a := range brokers.addrs {
				if b.GetAddr() == a && b.GetAlive() {
					out[i] = int(b.GetWorkers())
				}
			}
		}
		return out
	}
	waitFor := func(what string, want [2]int) {
		t.Helper()
		deadline := time.Now().Add(frozenWait)
		for got := counts(); got != want; got = counts() {
			if time.Now().After(deadline) {
				t.Fatalf("waited %s for %s: worker streams %v, want %v", frozenWait, what, got, want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	even := [2]int{(pinned + movable) / 2, (pinned + movable) / 2}
	waitFor("every worker to connect, evened out", even)

	// Jobs that take a while, so that moves find some running.
	pc, err := client.DialBrokers(ctx, brokers.addrs)
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	body, _ := json.Marshal(payload{Do: succeed, WorkMS: 50})
	specs := make([]client.JobSpec, 600)
	for i := range specs {
		specs[i] = client.JobSpec{Type: jobTypes[i%len(jobTypes)], Payload: body, MaxAttempts: 5,
			IdempotencyKey: fmt.Sprintf("even-%d", i)}
	}
	p := &producer{c: pc, specs: specs}
	produced := make(chan error, 1)
	go func() { produced <- p.run(ctx, 6*time.Second, 10) }()

	brokers.kill(1)
	waitFor("the killed broker's workers to move to the other", [2]int{pinned + movable, -1})
	if err := brokers.start(1); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	waitFor("the workers to even out", even)
	t.Logf("even %s after the broker came back", time.Since(back).Round(time.Millisecond))

	if err := <-produced; err != nil {
		t.Fatalf("producer: %v", err)
	}
	pg, err := pgx.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Close(context.Background())
	waitUntil(t, "every job to finish", func() bool {
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

	// Moves are logged by the broker that made them; none names a pinned worker, whose streams
	// never ended.
	moves := 0
	for _, line := range strings.Split(tail(brokers.logPath(0), 10000), "\n") {
		if strings.Contains(line, `msg="moved a worker to another broker`) {
			moves++
			if strings.Contains(line, "worker=pinned-") {
				t.Errorf("a pinned worker was moved: %s", line)
			}
		}
	}
	if moves < movable/2 {
		t.Errorf("broker 0 logged %d moves, want at least %d", moves, movable/2)
	}
	if data, err := os.ReadFile(pinnedLog); err != nil || strings.Contains(string(data), "stream ended") {
		t.Errorf("a pinned worker's stream ended (%v):\n%s", err, data)
	}
	if p := brokers.problems(); len(p) > 0 {
		t.Fatalf("the brokers' logs show problems:\n%s", strings.Join(p, "\n"))
	}
}
