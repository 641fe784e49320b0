package main

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
)

func runEnqueue(ctx context.Context, e *env, c *command, args []string) error {
	fs := flagsFor(c)
	cf := addCommonFlags(e, fs)
	var (
		typ, payload, queue, runAt, key string
		rateKey                         string
		priority, maxAttempts           int
		batch                           int64
		delay, attemptTimeout           time.Duration
	)
	fs.StringVar(&typ, "type", "", "job type (required)")
	fs.StringVar(&payload, "payload", "", "payload as JSON; checked before sending")
	fs.StringVar(&queue, "queue", "", "queue name (default \"default\")")
	fs.IntVar(&priority, "priority", 0, "priority, -1000..1000; higher runs first")
	fs.Var(durationValue{&delay}, "delay", "run this long from now, e.g. 30s or 2h")
	fs.StringVar(&runAt, "run-at", "", "run at this RFC 3339 time")
	fs.IntVar(&maxAttempts, "max-attempts", 0, "attempts allowed, including the first (default: the type's policy)")
	fs.StringVar(&key, "idempotency-key", "", "a repeat enqueue with this key returns the existing job")
	fs.Var(durationValue{&attemptTimeout}, "attempt-timeout", "how long one attempt may run (default: the broker's)")
	uf := addUniqueFlags(fs)
	applyDeps := addDepsFlags(fs)
	conc := addConcurrencyFlags(fs)
	fs.Int64Var(&batch, "batch", 0, "add the job to this open batch (batches create)")
	fs.StringVar(&rateKey, "rate-key", "", "the key the job counts under in keyed rate limits (default: the one they take from the job)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if err := positionals(pos); err != nil {
		return err
	}

	spec := &jobwirev1.JobSpec{Type: typ, Queue: queue, IdempotencyKey: key, BatchId: batch, RateKey: rateKey}
	switch {
	case typ == "":
		return usageErrorf("--type is required")
	case batch < 0:
		return usageErrorf("--batch %d is not a positive batch id", batch)
	}
	if err := checkRange("priority", priority, minPriority, maxPriority); err != nil {
		return err
	}
	if err := checkRange("max-attempts", maxAttempts, 0, maxAttemptsLimit); err != nil {
		return err
	}
	switch {
	case delay < 0:
		return usageErrorf("--delay must not be negative")
	case attemptTimeout < 0:
		return usageErrorf("--attempt-timeout must not be negative")
	case delay != 0 && runAt != "":
		return usageErrorf("give --delay or --run-at, not both")
	}
	spec.Priority, spec.MaxAttempts = int32(priority), int32(maxAttempts)
	if err := conc.apply(spec); err != nil {
		return err
	}
	if flagGiven(fs, "payload") {
		if spec.Payload, err = parseJSONPayload("payload", payload); err != nil {
			return err
		}
	}
	if runAt != "" {
		t, err := parseTime("run-at", runAt)
		if err != nil {
			return err
		}
		spec.Schedule = &jobwirev1.JobSpec_RunAt{RunAt: timestamppb.New(t)}
	} else if delay != 0 {
		spec.Schedule = &jobwirev1.JobSpec_Delay{Delay: durationpb.New(delay)}
	}
	if attemptTimeout != 0 {
		spec.AttemptTimeout = durationpb.New(attemptTimeout)
	}
	if spec.Unique, err = uf.build(fs); err != nil {
		return err
	}
	if err := applyDeps(spec); err != nil {
		return err
	}

	resp, err := fetch(ctx, cf, func(ctx context.Context, b *broker) (*jobwirev1.EnqueueResponse, error) {
		return b.producer.Enqueue(ctx, &jobwirev1.EnqueueRequest{Job: spec})
	})
	if err != nil {
		return err
	}
	j := resp.GetJob()
	switch {
	case j.GetDuplicateBy() == jobwirev1.DuplicateBy_DUPLICATE_BY_UNIQUE:
		fmt.Fprintf(e.stderr, "job %d (%s) holds this job's unique key; nothing new was enqueued (duplicate)\n", j.GetId(), enumName(j.GetState()))
	case j.GetDuplicate():
		fmt.Fprintf(e.stderr, "job %d already existed with idempotency key %q; nothing new was enqueued (duplicate)\n", j.GetId(), key)
	}
	return show(e, cf, resp, func(*jobwirev1.EnqueueResponse) error {
		fmt.Fprintln(e.stdout, j.GetId())
		return nil
	})
}
