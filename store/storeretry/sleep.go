package storeretry

import (
	"context"
	"time"

	"github.com/jobwire/jobwire/internal/clock"
)

// ClockSleep returns a SleepFunc that waits on c, so that a broker running on a fake clock also
// moves its storage retries only when the test advances the clock.
func ClockSleep(c clock.Clock) SleepFunc {
	return func(ctx context.Context, d time.Duration) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		if d <= 0 {
			return nil
		}
		fired := make(chan struct{})
		t := c.AfterFunc(d, func() { close(fired) })
		defer t.Stop()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-fired:
			return nil
		}
	}
}

func sleepTimer(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
