package metrics_test

import (
	"testing"
	"time"

	"github.com/jobwire/jobwire/broker"
	"github.com/jobwire/jobwire/internal/metrics"
	"github.com/jobwire/jobwire/triage"
)

// BenchmarkObserverJobPath is what metrics cost one job on the broker's paths: enqueued,
// started, succeeded. The series are resolved once per queue and type and read without a lock,
// so a job costs map reads and atomic adds, and no allocation.
func BenchmarkObserverJobPath(b *testing.B) {
	m := metrics.New(metrics.Options{})
	end := broker.AttemptEnd{Verdict: triage.Succeeded, Duration: 3 * time.Millisecond}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			m.JobEnqueued("mail", "email.send")
			m.AttemptStarted("mail", "email.send", time.Millisecond)
			m.AttemptEnded("mail", "email.send", end)
		}
	})
}

func TestObserverJobPathDoesNotAllocate(t *testing.T) {
	m := metrics.New(metrics.Options{})
	end := broker.AttemptEnd{Verdict: triage.Retry, Cause: broker.CauseTransient, Duration: time.Millisecond}
	allocs := testing.AllocsPerRun(100, func() {
		m.JobEnqueued("mail", "email.send")
		m.AttemptStarted("mail", "email.send", time.Millisecond)
		m.AttemptEnded("mail", "email.send", end)
		m.BatchCommitted(8, time.Millisecond, nil)
	})
	if allocs != 0 {
		t.Errorf("a job's metrics allocate %v times, want 0", allocs)
	}
}
