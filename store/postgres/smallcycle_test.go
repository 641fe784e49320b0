package postgres

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/store"
	"github.com/jobwire/jobwire/store/postgres/pgtest"
)

// BenchmarkSmallCycle is the writer's cycle at a low rate (1,000 jobs/s, one job at a time):
// one job inserted and leased by its insert (an offer), and the success of the job the
// iteration before leased. server-µs/op is the CPU time of the server process behind the
// store's one connection, a cycle.
func BenchmarkSmallCycle(b *testing.B) {
	ctx := context.Background()
	trips := &tripCounter{}
	s, err := Open(ctx, pgtest.URL(b), Options{MaxConns: 1, Logger: slog.New(slog.DiscardHandler), tracer: trips})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	now := time.Unix(1_800_000_000, 0)
	fillFinished(ctx, b, s, 10_000, now)
	ins := []*store.JobInsertParams{{Type: "bench", Queue: "default", Payload: []byte(`{"n":1}`),
		MaxAttempts: 3, RunAt: now, Now: now, AttemptTimeout: time.Minute}}
	offer := []*store.JobOffer{{WorkerID: "w", Owner: "b", LeaseUntil: now.Add(time.Minute)}}
	var held *job.Job
	server := serverCPU(ctx, b, s)
	tripsBefore := trips.n.Load()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		prev := held
		err := s.Write(ctx, "cycle", func(tx store.Tx) error {
			if _, err := tx.JobInsertOfferedAtCommit(ins, offer, func(jobs []*job.Job, err error) {
				if err == nil {
					held = jobs[0]
				}
			}); err != nil {
				return err
			}
			if prev == nil {
				return nil
			}
			return tx.JobSucceedManyAtCommit([]*store.JobFinishParams{{Ref: job.LeaseRef{JobID: prev.ID, Token: prev.LeaseToken},
				Queue: prev.Queue, Type: prev.Type, State: job.StateSucceeded, Now: now,
				Attempt: job.Attempt{Number: 1, WorkerID: "w", StartedAt: now, FinishedAt: now, Outcome: job.OutcomeSucceeded}}},
				func([]bool, error) {})
		})
		if err != nil {
			b.Fatal(err)
		}
		if held == nil || held == prev {
			b.Fatal("the offered job was not leased")
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(trips.n.Load()-tripsBefore)/float64(b.N), "round-trips/op")
	if used, ok := server(); ok {
		b.ReportMetric(float64(used.Microseconds())/float64(b.N), "server-µs/op")
	}
}
