package broker

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jobwire/jobwire/breaker"
	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/store/postgres/pgtest"
)

// BenchmarkBreakerResults measures what sharing the breakers costs per result on PostgreSQL, for
// results that succeed and results that fail with a counted kind: one broker alone (its breakers
// in memory, failures stored a second later in one write), one broker with Options.Cluster but
// its breakers its own (what the cluster costs without them), and one with Options.Cluster and
// shared breakers (every counted failure applied to the stored breaker in the result's own
// write, every lease reading the stored breakers of its types), each with the breaker in count
// mode (a success needs no breaker work) and in ratio mode (every result is a call in the
// stored window, applied once per type and group commit). Jobs go through in rounds of 64:
// enqueued, leased, reported, acknowledged.
//
//	scripts/with-postgres.sh go test -run '^$' -bench BreakerResults -benchtime 2000x ./broker
func BenchmarkBreakerResults(b *testing.B) {
	pgtest.ServerURL(b)
	const round = 64
	for _, m := range []struct {
		name string
		m    membership
	}{{"alone", alone}, {"cluster-own-breakers", ownBreakers}, {"cluster-shared", listening}} {
		for _, mode := range []breaker.Mode{breaker.ModeCount, breaker.ModeRatio} {
			for _, failing := range []bool{false, true} {
				name := m.name + "/" + mode.String() + "/success"
				if failing {
					name = m.name + "/" + mode.String() + "/failure"
				}
				b.Run(name, func(b *testing.B) {
					cfg := breaker.CountConfig()
					// A round's failures stay under Threshold, and the clock moves a second a round:
					// it never opens, and its stored state holds up to a round of failure times.
					cfg.Threshold, cfg.Window = round+1, time.Second
					if mode == breaker.ModeRatio {
						// Every call fails, but never MinCalls of them within a window.
						cfg = breaker.DefaultConfig()
						cfg.MinCalls, cfg.SamplingWindow = round+1, time.Second
					}
					c := newCluster(b, 1, DefaultConfig(), cfg, m.m)
					s := c.worker(b, 0, round)
					var failure *job.Failure
					if failing {
						failure = transient
					}
					b.ResetTimer()
					for done := 0; done < b.N; done += round {
						c.enqueue(b, 0, round)
						as := assignments(b, s, round)
						for _, a := range as {
							s.Result(job.LeaseRef{JobID: a.Job.ID, Token: a.Token}, failure)
						}
						acks(b, s, round)
						b.StopTimer()
						c.clk.Advance(time.Second)
						b.StartTimer()
					}
					b.StopTimer()
					if in := c.info(b, 0); in.State != breaker.StateClosed {
						b.Fatalf("the breaker opened: %+v", in)
					}
				})
			}
		}
	}
}

// acks waits for n result acknowledgements on s.
func acks(b *testing.B, s *Session, n int) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for got := 0; got < n; {
		msgs, err := s.Next(ctx)
		if err != nil {
			b.Fatalf("waiting for %d acks, got %d: %v", n, got, err)
		}
		for _, m := range msgs {
			switch m := m.(type) {
			case ResultAck:
				got++
			case Refused:
				b.Fatal(fmt.Sprintf("result refused: %+v", m))
			}
		}
	}
}
