package app_test

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/jobwire/jobwire/client"
	"github.com/jobwire/jobwire/internal/config"
	"github.com/jobwire/jobwire/worker"
)

// A broker whose operator raised max_payload_bytes or max_result_bytes past gRPC's default of
// 4 MiB a message takes and hands out jobs that large, as the settings promise: a 6 MiB payload
// is enqueued and reaches its Go worker; a 6 MiB result is read back by the producer and
// reaches the job that depends on it.
func TestPayloadsAndResultsPastFourMiBWhenConfigured(t *testing.T) {
	t.Parallel()
	const size = 6 << 20
	for _, tt := range []struct {
		name                  string
		maxPayload, maxResult int
		payload, result       int
	}{
		{"payloads", 8 << 20, 0, size, 1 << 10},
		{"results", 0, 8 << 20, 1 << 10, size},
		// Past what a worker's stream may have waiting (broker.MaxOutboxBytes): one job alone.
		{"payloads past the outbox's limit", 24 << 20, 0, 20 << 20, 1 << 10},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := config.Defaults()
			cfg.DB = filepath.Join(t.TempDir(), "jobwire.db")
			if tt.maxPayload != 0 {
				cfg.MaxPayload = tt.maxPayload
			}
			if tt.maxResult != 0 {
				cfg.Broker.MaxResultBytes = tt.maxResult
			}
			runLargeJobs(t, cfg, bytes.Repeat([]byte("p"), tt.payload), bytes.Repeat([]byte("r"), tt.result))
		})
	}
}

// runLargeJobs runs a broker of cfg, enqueues a job of payload whose handler returns result
// and a job that depends on it, and checks what each end read.
func runLargeJobs(t *testing.T, cfg config.Config, payload, result []byte) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	bctx, stop := context.WithCancel(ctx)
	defer stop()
	addr, done := startBrokerWith(bctx, cfg)
	if addr == "" {
		t.Fatalf("broker did not start: %v", <-done)
	}
	c, err := client.Dial(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	parent, err := c.Enqueue(ctx, "big", payload)
	if err != nil {
		t.Fatal(err)
	}
	child, err := c.Enqueue(ctx, "child", nil, client.DependsOn(parent.ID))
	if err != nil {
		t.Fatal(err)
	}
	// The worker on a connection of gRPC's defaults (4 MiB a message), not Dial's: the worker
	// asks its own stream to read as much as the broker sends.
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	w, err := worker.New(conn, worker.Options{ID: "large", Concurrency: 2})
	if err != nil {
		t.Fatal(err)
	}
	w.Handle("big", func(ctx context.Context, j *worker.Job) error {
		if !bytes.Equal(j.Payload, payload) {
			return worker.Fatal(fmt.Errorf("a payload of %d bytes, want %d", len(j.Payload), len(payload)))
		}
		j.SetResult(result)
		return nil
	})
	w.Handle("child", func(ctx context.Context, j *worker.Job) error {
		if len(j.ParentResults) != 1 || !bytes.Equal(j.ParentResults[0].Result, result) {
			return worker.Fatal(fmt.Errorf("%d parents' results, want one of %d bytes", len(j.ParentResults), len(result)))
		}
		return nil
	})
	wctx, stopWorker := context.WithCancel(ctx)
	defer stopWorker()
	go w.Run(wctx)
	// The producer waits as a user's would (client.Wait, a watch): the result comes with it.
	if j, err := c.Wait(ctx, parent.ID); err != nil || !bytes.Equal(j.Result, result) {
		t.Errorf("the parent: %v; want SUCCEEDED with its result of %d bytes", err, len(result))
	}
	if _, err := c.Wait(ctx, child.ID); err != nil {
		t.Errorf("the child: %v", err)
	}
}
