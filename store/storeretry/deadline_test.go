package storeretry

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// Do stops retrying, without waiting, once the caller's deadline comes before the next try,
// and says so; a deadline far enough away leaves the retries as they were.
func TestDoStopsWhenTheDeadlineComesFirst(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		ctx       func() (context.Context, context.CancelFunc)
		wantTries int64
		wantStop  bool
	}{
		{"ctx deadline before the first wait", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 100*time.Millisecond)
		}, 1, true},
		{"deadline carried as a value", func() (context.Context, context.CancelFunc) {
			return WithDeadline(context.Background(), time.Now().Add(100*time.Millisecond)), func() {}
		}, 1, true},
		{"deadline between the second and third wait", func() (context.Context, context.CancelFunc) {
			// The waits (200, 400 and 800ms, plus under 100ms of jitter) are recorded, not
			// slept, so the deadline stays 700ms away: the first two fit, the third does not.
			return WithDeadline(context.Background(), time.Now().Add(700*time.Millisecond)), func() {}
		}, 3, true},
		{"no deadline", func() (context.Context, context.CancelFunc) { return context.Background(), func() {} }, 4, false},
		{"distant deadline", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), time.Hour)
		}, 4, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, setupOpts{})
			fn, calls := failing(errBusy, errBusy, errBusy, errBusy)
			ctx, cancel := tt.ctx()
			defer cancel()
			err := b.policy.Do(ctx, "JobInsert", fn)
			var busy *BusyError
			if !errors.As(err, &busy) || !errors.Is(err, ErrBusy) {
				t.Fatalf("err = %v, want a *BusyError", err)
			}
			if calls.Load() != tt.wantTries || busy.StoppedForDeadline() != tt.wantStop {
				t.Fatalf("%d tries, stopped for deadline %v; want %d and %v (%v)", calls.Load(), busy.StoppedForDeadline(), tt.wantTries, tt.wantStop, err)
			}
			if tt.wantStop && !strings.Contains(err.Error(), "stopped retrying: the caller's deadline is") {
				t.Errorf("error %q does not say why it stopped", err)
			}
		})
	}
}
