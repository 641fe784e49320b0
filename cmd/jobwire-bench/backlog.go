package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jobwire/jobwire/client"
)

// backlogQueue is the queue --backlog fills. No worker of the benchmark serves it, so its jobs
// wait there while a scenario runs: what a broker must not slow down for is a queue whose
// workers are away, however long it grows.
const backlogQueue = "backlog"

// backlogType is the job type of a backlog queued with --backlog-type: no worker of the
// benchmark handles it, so its jobs wait in the default queue, among the jobs the workers
// take: what a broker must not slow down for is a job type whose workers are away.
const backlogType = "backlog.unserved"

// namesDefaultQueue reports whether the workers name the default queue, leaving a backlog's own
// queue to wait (--backlog), or by --backlog-named, rather than serve every queue.
func (c *benchConfig) namesDefaultQueue() bool {
	return c.Backlog > 0 && !c.BacklogPaused && (!c.BacklogType || c.BacklogNamed)
}

// backlogSpec is one job of the backlog.
func (c *benchConfig) backlogSpec(payload []byte) client.JobSpec {
	if c.BacklogType {
		return client.JobSpec{Type: backlogType, Payload: payload}
	}
	return client.JobSpec{Type: jobType, Queue: backlogQueue, Payload: payload}
}

// fillBacklog queues n jobs in backlogQueue, 1000 a call from the batch producers, before the
// scenario starts, and pauses the queue with --backlog-paused. Its jobs come first in dispatch order (same priority, earlier run time), so
// a lease that reads past them instead of around them shows up as a scenario that slows down.
func (b *bench) fillBacklog(ctx context.Context, c *client.Client) error {
	n := b.cfg.Backlog
	if n <= 0 {
		return nil
	}
	start := time.Now()
	var next, errs atomic.Int64
	var wg sync.WaitGroup
	for range b.cfg.BatchProds {
		wg.Go(func() {
			for ctx.Err() == nil {
				from := next.Add(1000) - 1000
				if from >= int64(n) {
					return
				}
				specs := make([]client.JobSpec, min(1000, n-int(from)))
				now := time.Now()
				for i := range specs {
					specs[i] = b.cfg.backlogSpec(makePayload(now, false))
				}
				for ctx.Err() == nil {
					if _, err := c.EnqueueBatch(ctx, specs); err == nil {
						break
					} else {
						noteError(&errs, err)
						time.Sleep(10 * time.Millisecond) // a failing broker: do not spin
					}
				}
			}
		})
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("fill the backlog: %w", err)
	}
	el := time.Since(start)
	fmt.Fprintf(os.Stderr, "jobwire-bench: %d backlog jobs queued in %.1fs (%.0f jobs/s)\n", n, el.Seconds(), float64(n)/el.Seconds())
	if b.cfg.BacklogPaused {
		if _, err := c.PauseQueue(ctx, backlogQueue); err != nil {
			return fmt.Errorf("pause the backlog's queue: %w", err)
		}
	}
	return nil
}

// processPeakRSS returns the most resident memory a process has had (VmHWM in
// /proc/PID/status), in bytes; ok is false where there is no /proc.
func processPeakRSS(pid int) (bytes int64, ok bool) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		v, found := strings.CutPrefix(sc.Text(), "VmHWM:")
		if !found {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		if err != nil {
			return 0, false
		}
		return kb * 1024, true
	}
	return 0, false
}

// brokerPeakRSS is the largest peak resident memory of the scenario's brokers, in MiB (0 where
// it cannot be read).
func (e *scenarioEnv) brokerPeakRSS() float64 {
	var peak int64
	for _, bp := range e.brokers {
		rss, ok := processPeakRSS(bp.cmd.Process.Pid)
		if !ok {
			return 0
		}
		peak = max(peak, rss)
	}
	return float64(peak) / (1 << 20)
}
