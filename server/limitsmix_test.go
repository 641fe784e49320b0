package server_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/brokertest"
)

// wantLimitsCombined checks that err refuses a mix of rate limits and concurrency keys.
func wantLimitsCombined(t *testing.T, what string, err error) {
	t.Helper()
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "cannot be combined") {
		t.Fatalf("%s: got %v, want FAILED_PRECONDITION saying rate limits and concurrency keys cannot be combined", what, err)
	}
}

// A lease that honours concurrency keys does not apply rate limits, so the broker refuses
// whichever of the two comes second instead of letting rate-limited jobs through unlimited.
func TestRateLimitsAndConcurrencyKeysAreNotCombined(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	limit := &jobwirev1.RateLimit{Name: "mail", Type: "mail", Rate: 2, Interval: durationpb.New(time.Second), Burst: 2}
	rule := &jobwirev1.ConcurrencyRule{Name: "per-customer", Type: "sync", Key: "payload.customer", MaxRunning: 1}

	t.Run("a rate limit after a concurrency rule", func(t *testing.T) {
		b := brokertest.New(t, brokertest.Options{})
		setRule(t, b, rule)
		_, err := b.Admin.SetRateLimit(ctx, &jobwirev1.SetRateLimitRequest{Limit: limit})
		wantLimitsCombined(t, "set rate limit", err)
	})
	t.Run("a concurrency rule or a keyed job after a rate limit", func(t *testing.T) {
		b := brokertest.New(t, brokertest.Options{})
		setRateLimit(t, b, limit)
		_, err := b.Admin.SetConcurrencyRule(ctx, &jobwirev1.SetConcurrencyRuleRequest{Rule: rule})
		wantLimitsCombined(t, "set concurrency rule", err)
		_, err = b.Producer.Enqueue(ctx, &jobwirev1.EnqueueRequest{Job: &jobwirev1.JobSpec{Type: "sync",
			ConcurrencyKey: "acme", ConcurrencyLimit: 1}})
		wantLimitsCombined(t, "enqueue with a concurrency key", err)
		// Jobs without a key still enqueue.
		b.Enqueue(spec("mail"))
	})
}
