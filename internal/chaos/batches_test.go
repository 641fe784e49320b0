package chaos

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobwire/jobwire/client"
	"github.com/jobwire/jobwire/store/postgres/pgtest"
	"github.com/jobwire/jobwire/worker"
)

// envBatchJobs sets the size of TestBatchCallbackOnceAcrossKilledBrokers' batch (a measurement:
// JOBWIRE_CHAOS_BATCH_JOBS=100000).
const envBatchJobs = "JOBWIRE_CHAOS_BATCH_JOBS"

const (
	batchJob      = "batch.item"
	batchReport   = "batch.report"
	batchDone     = "batch.done"
	batchChunk    = 5000
	batchBrokers  = 2
	batchWorkers  = 2
	batchSlots    = 64
	batchDeadline = 30 * time.Minute
)

// One batch drained by workers spread over two brokers on one PostgreSQL database, each broker
// killed with SIGKILL in turn while the batch's jobs finish (a third and two thirds of the way),
// and restarted: the batch must complete with every job counted once, and each of its two
// callbacks enqueued exactly once.
func TestBatchCallbackOnceAcrossKilledBrokers(t *testing.T) {
	n := 2000
	if v := os.Getenv(envBatchJobs); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			t.Fatalf("%s=%q: want a positive integer", envBatchJobs, v)
		}
	}
	db := pgtest.URL(t)
	dir := t.TempDir()
	brokers := newBrokerSet(t, batchBrokers, db, dir)
	brokers.startAll(t)
	ctx, cancel := context.WithTimeout(context.Background(), batchDeadline)
	defer cancel()
	c, err := client.DialBrokers(ctx, brokers.addrs)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	b, err := c.CreateBatch(ctx, client.BatchOptions{Description: fmt.Sprintf("%d jobs", n),
		OnSuccess: &client.JobSpec{Type: batchReport}, OnComplete: &client.JobSpec{Type: batchDone}})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for from := 0; from < n; from += batchChunk {
		specs := make([]client.JobSpec, min(batchChunk, n-from))
		for i := range specs {
			specs[i] = client.NewJobSpec(batchJob, nil, client.InBatch(b.ID), client.MaxAttempts(25))
		}
		if _, err := c.EnqueueBatch(ctx, specs); err != nil {
			t.Fatalf("enqueue jobs %d..: %v", from, err)
		}
	}
	if _, err := c.CloseBatch(ctx, b.ID); err != nil {
		t.Fatal(err)
	}
	t.Logf("enqueued %d jobs in %s", n, time.Since(start).Round(time.Millisecond))

	var callbacks [2]atomic.Int64 // runs of the success and the completion callback
	workCtx, stopWork := context.WithCancel(ctx)
	wait, err := startFleet(workCtx, fleet{name: "batch-worker", n: batchWorkers, slots: batchSlots, addrs: brokers.addrs,
		handlers: map[string]worker.HandlerFunc{
			batchJob:    func(context.Context, *worker.Job) error { return nil },
			batchReport: func(context.Context, *worker.Job) error { callbacks[0].Add(1); return nil },
			batchDone:   func(context.Context, *worker.Job) error { callbacks[1].Add(1); return nil },
		},
		logPath: filepath.Join(dir, "workers.log")})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		stopWork()
		_ = wait()
	}()

	drain := time.Now()
	for i, at := range []int64{int64(n) / 3, 2 * int64(n) / 3} {
		waitBatch(ctx, t, c, b.ID, func(b *client.Batch) bool { return b.Succeeded >= at })
		if !brokers.kill(i) {
			t.Fatalf("cannot kill broker %d", i)
		}
		t.Logf("killed broker %d at %d of %d jobs", i, at, n)
		if err := brokers.start(i); err != nil {
			t.Fatal(err)
		}
	}
	done := waitBatch(ctx, t, c, b.ID, func(b *client.Batch) bool { return b.State == client.BatchComplete })
	took := time.Since(drain)
	t.Logf("batch of %d jobs complete %s after its workers started (%.0f jobs/s, two brokers, each killed once)",
		n, took.Round(time.Millisecond), float64(n)/took.Seconds())
	waitUntil(t, "both callbacks to run", func() bool { return callbacks[0].Load() > 0 && callbacks[1].Load() > 0 })

	if done.Total != int64(n) || done.Succeeded != int64(n) || done.SuccessJobID == 0 || done.CompleteJobID == 0 {
		t.Fatalf("batch %+v, want %d jobs succeeded and both callbacks", done, n)
	}
	pg, err := pgx.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Close(ctx)
	var reports, dones, counted, succeeded int64
	err = pg.QueryRow(ctx, `SELECT count(*) FILTER (WHERE type = $1), count(*) FILTER (WHERE type = $2),
		count(*) FILTER (WHERE batch_id = $3 AND batch_counted), count(*) FILTER (WHERE batch_id = $3 AND state = 5)
		FROM jobs`, batchReport, batchDone, b.ID).Scan(&reports, &dones, &counted, &succeeded)
	if err != nil {
		t.Fatal(err)
	}
	if reports != 1 || dones != 1 || counted != int64(n) || succeeded != int64(n) {
		t.Fatalf("%d success and %d completion callbacks stored, %d jobs counted, %d succeeded; want 1, 1, %d, %d",
			reports, dones, counted, succeeded, n, n)
	}
	t.Logf("callbacks stored once each; run %d and %d times (at least once: a broker killed may repeat a run)",
		callbacks[0].Load(), callbacks[1].Load())
	if p := brokers.problems(); len(p) > 0 {
		t.Errorf("the brokers' logs show problems:\n%s", strings.Join(p, "\n"))
	}
}

// waitBatch polls the batch until cond holds (the deadline of ctx fails the test).
func waitBatch(ctx context.Context, t *testing.T, c *client.Client, id int64, cond func(*client.Batch) bool) *client.Batch {
	t.Helper()
	for {
		b, err := c.GetBatch(ctx, id)
		if err == nil && cond(b) {
			return b
		}
		select {
		case <-ctx.Done():
			t.Fatalf("batch %d: %+v, %v (%v)", id, b, err, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}
