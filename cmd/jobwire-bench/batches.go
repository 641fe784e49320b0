package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jobwire/jobwire/client"
)

// fillAndDrainBatch is the drain scenario with every job in one batch that has a completion
// callback: the same jobs enqueued in calls of 1000 into an open batch, closed, then drained.
// It times the drain to the last of the jobs and the callback, which the workers run too.
func (b *bench) fillAndDrainBatch(ctx context.Context, env *scenarioEnv) ([]result, error) {
	waitCtx, cancel := context.WithTimeout(ctx, b.waitLimit(b.cfg.Jobs))
	defer cancel()
	batch, err := env.client.CreateBatch(waitCtx, client.BatchOptions{Description: "jobwire-bench",
		OnComplete: &client.JobSpec{Type: jobType}})
	if err != nil {
		return nil, err
	}
	for from := 0; from < b.cfg.Jobs; from += 1000 {
		specs := make([]client.JobSpec, min(1000, b.cfg.Jobs-from))
		now := time.Now()
		for i := range specs {
			specs[i] = client.JobSpec{Type: jobType, Payload: makePayload(now, false), Batch: batch.ID}
		}
		if _, err := env.client.EnqueueBatch(waitCtx, specs); err != nil {
			return nil, err
		}
	}
	if _, err := env.client.CloseBatch(waitCtx, batch.ID); err != nil {
		return nil, err
	}
	cpu := batchBrokersCPU(env)
	start := time.Now()
	f, err := startFleet(&b.cfg, b.dir, env.addrs(), fleetSpec{scenario: env.name}, env.client)
	if err != nil {
		return nil, err
	}
	end, err := f.waitAcked(waitCtx, int64(b.cfg.Jobs)+1) // the jobs and the callback
	if err != nil {
		f.kill()
		return nil, err
	}
	used := batchBrokersCPU(env) - cpu
	if _, err := f.stop(); err != nil {
		return nil, err
	}
	got, err := env.client.GetBatch(ctx, batch.ID)
	if err != nil {
		return nil, err
	}
	if got.State != client.BatchComplete || got.Succeeded != int64(b.cfg.Jobs) || got.CompleteJobID == 0 {
		return nil, fmt.Errorf("batch %+v: want %d jobs succeeded and its callback enqueued", got, b.cfg.Jobs)
	}
	el := end.Sub(start)
	desc := fmt.Sprintf("%d in one batch, then %d Go workers x%d%s", b.cfg.Jobs, b.cfg.Workers, b.cfg.Concurrency,
		batchCPUPerJob(used, b.cfg.Jobs))
	return []result{{Name: "drain-batch", Description: desc, Jobs: int64(b.cfg.Jobs), Seconds: el.Seconds(),
		JobsPerSec: float64(b.cfg.Jobs) / el.Seconds()}}, nil
}

// batchBrokersCPU is the CPU time the scenario's broker processes used so far (user and system, from
// /proc; 0 where it cannot be read).
func batchBrokersCPU(env *scenarioEnv) time.Duration {
	var total time.Duration
	for _, bp := range env.brokers {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", bp.cmd.Process.Pid))
		if err != nil {
			return 0
		}
		// The fields after the command name (which may hold spaces) start after its ')'.
		rest := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+1:]))
		if len(rest) < 13 {
			return 0
		}
		utime, _ := strconv.ParseInt(rest[11], 10, 64)
		stime, _ := strconv.ParseInt(rest[12], 10, 64)
		total += time.Duration(utime+stime) * time.Second / batchClockTicks
	}
	return total
}

// batchClockTicks is USER_HZ, the unit of /proc's CPU times: 100 on every Linux the benchmark runs on.
const batchClockTicks = 100

// batchCPUPerJob describes the broker CPU a drain used per job ("" when not measured).
func batchCPUPerJob(used time.Duration, jobs int) string {
	if used <= 0 || jobs == 0 {
		return ""
	}
	return fmt.Sprintf(", broker CPU %.0f µs/job", float64(used.Microseconds())/float64(jobs))
}
