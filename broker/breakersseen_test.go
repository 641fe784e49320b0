package broker

import (
	"errors"
	"testing"
	"time"
)

// The writer saves a breaker without its lock only against the data its last committed batch
// stored, once (a batch run again locks it), and not for seenOffFor after a batch that saved
// one without its lock failed: another broker is counting the same type.
func TestBreakersSeenTakesWhatCommittedOnce(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	var s breakersSeen
	at := func(t time.Time) func() time.Time { return func() time.Time { return t } }
	take := func(when time.Time, want string) {
		t.Helper()
		seen, ok := s.take("a", at(when))
		if got := string(seen.data); ok != (want != "") || got != want {
			t.Fatalf("take at +%v: %q, %v; want %q", when.Sub(now), got, ok, want)
		}
	}
	stored := func(data string) map[string]seenBreaker { return map[string]seenBreaker{"a": {data: []byte(data)}} }
	take(now, "")
	s.written(&breakerBatch{stored: stored("1")}, errors.New("rolled back"), at(now))
	take(now, "") // a failed batch stored nothing
	s.written(&breakerBatch{stored: stored("1")}, nil, at(now))
	take(now, "1")
	take(now, "") // taken: a batch run again locks the breaker
	s.written(&breakerBatch{unlocked: map[string]*unlockedBreaker{"a": {}}, stored: stored("2")}, errors.New("moved"), at(now))
	s.written(&breakerBatch{stored: stored("3")}, nil, at(now))
	take(now.Add(seenOffFor-time.Nanosecond), "")
	take(now.Add(seenOffFor), "3")
}
