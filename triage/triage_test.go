package triage

import (
	"testing"
	"time"

	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/retry"
)

func newTriager(u float64) *Triager {
	return &Triager{
		Policy:      func(string) retry.Policy { return retry.DefaultPolicy() },
		AlwaysFatal: map[string]bool{"*errors.errorString": true},
		Uniform:     func() float64 { return u },
	}
}

func TestFailed(t *testing.T) {
	t.Parallel()
	created := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := created.Add(time.Minute)
	transient := job.Failure{Kind: job.KindTransient, ErrorType: "net.Error"}
	tests := []struct {
		name string
		a    Attempt
		now  time.Time
		want Decision
	}{
		{"fatal goes dead at once", Attempt{Number: 1, Failure: job.Failure{Kind: job.KindFatal}}, now,
			Decision{Verdict: Dead, Reason: job.DeadFatal, Kind: job.KindFatal}},
		{"transient retries with backoff", Attempt{Number: 1, Failure: transient}, now,
			Decision{Verdict: Retry, RetryAt: now.Add(3500 * time.Millisecond), Kind: job.KindTransient}},
		{"unspecified is transient", Attempt{Number: 2, Failure: job.Failure{}}, now,
			Decision{Verdict: Retry, RetryAt: now.Add(6500 * time.Millisecond), Kind: job.KindTransient}},
		{"last attempt exhausts", Attempt{Number: 4, Failure: transient}, now,
			Decision{Verdict: Dead, Reason: job.DeadMaxAttemptsExhausted, Kind: job.KindTransient}},
		{"per-job max attempts", Attempt{Number: 2, MaxAttempts: 2, Failure: transient}, now,
			Decision{Verdict: Dead, Reason: job.DeadMaxAttemptsExhausted, Kind: job.KindTransient}},
		{"always-fatal type overrides transient", Attempt{Number: 1, Failure: job.Failure{Kind: job.KindTransient, ErrorType: "*errors.errorString"}}, now,
			Decision{Verdict: Dead, Reason: job.DeadFatal, Kind: job.KindFatal}},
		{"retry-after replaces the wait", Attempt{Number: 1, Failure: job.Failure{Kind: job.KindTransient, RetryAfter: 90 * time.Second}}, now,
			Decision{Verdict: Retry, RetryAt: now.Add(90 * time.Second), Kind: job.KindTransient}},
		{"retry past the lifetime dies", Attempt{Number: 1, Failure: transient}, created.Add(24*time.Hour - time.Second),
			Decision{Verdict: Dead, Reason: job.DeadRetryLifetimeExpired, Kind: job.KindTransient}},
		{"lease expiry is transient", Attempt{Number: 1, Cause: LeaseExpired}, now,
			Decision{Verdict: Retry, RetryAt: now.Add(3500 * time.Millisecond), Kind: job.KindTransient}},
		{"lease expiry on the last attempt", Attempt{Number: 4, Cause: LeaseExpired}, now,
			Decision{Verdict: Dead, Reason: job.DeadLeaseExpired, Kind: job.KindTransient}},
		{"timeout on the last attempt", Attempt{Number: 4, Cause: Timeout}, now,
			Decision{Verdict: Dead, Reason: job.DeadTimeout, Kind: job.KindTransient}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.a.CreatedAt = created
			got := newTriager(0.5).Failed("t", tt.a, tt.now)
			if got != tt.want {
				t.Fatalf("Failed() = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// The seeds' retry storm: with the defaults a transient job runs four times with waits of
// about 3s, 6s and 12s, then goes to the DLQ.
func TestRetryStormSchedule(t *testing.T) {
	t.Parallel()
	tr := newTriager(0)
	created := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := created
	var waits []time.Duration
	for n := 1; ; n++ {
		d := tr.Failed("t", Attempt{Number: n, CreatedAt: created, Failure: job.Failure{Kind: job.KindTransient}}, now)
		if d.Verdict == Dead {
			if n != 4 || d.Reason != job.DeadMaxAttemptsExhausted {
				t.Fatalf("died after attempt %d with %v, want 4 and MAX_ATTEMPTS_EXHAUSTED", n, d.Reason)
			}
			break
		}
		waits = append(waits, d.RetryAt.Sub(now))
		now = d.RetryAt
	}
	want := []time.Duration{3 * time.Second, 6 * time.Second, 12 * time.Second}
	for i := range want {
		if waits[i] != want[i] {
			t.Fatalf("waits = %v, want %v", waits, want)
		}
	}
}
