package main

import (
	"context"
	"fmt"
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
	cpu, start := env.meterCPU(), time.Now()
	f, err := startFleet(&b.cfg, b.dir, env.addrs(), fleetSpec{scenario: env.name}, env.client)
	if err != nil {
		return nil, err
	}
	end, err := f.waitAcked(waitCtx, int64(b.cfg.Jobs)+1) // the jobs and the callback
	if err != nil {
		f.kill()
		return nil, err
	}
	brokerCPU, machine := cpu.perJob(int64(b.cfg.Jobs))
	writer := cpu.writerBusy()
	workerCPU, workerOK := f.workerCPU()
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
	desc := fmt.Sprintf("%d in one batch, then %d Go workers x%d", b.cfg.Jobs, b.cfg.Workers, b.cfg.Concurrency)
	return []result{{Name: "drain-batch", Description: desc, Jobs: int64(b.cfg.Jobs), Seconds: el.Seconds(),
		JobsPerSec: float64(b.cfg.Jobs) / el.Seconds(), BrokerCPUus: brokerCPU, MachineCPUus: machine,
		WriterBusyPct: writer, WorkerCPUus: usPerJob(workerCPU, workerOK, int64(b.cfg.Jobs))}}, nil
}
