package broker

import (
	"context"
	"testing"
	"time"

	"github.com/jobwire/jobwire/internal/clock"
	"github.com/jobwire/jobwire/store"
)

// A job that becomes SCHEDULED while a promote is under way gets a timer of its own. The
// promote may already have read the next due time without it, so leaning on the timer that
// just fired would leave the job SCHEDULED for good.
func TestScheduleWhilePromoteRuns(t *testing.T) {
	t.Parallel()
	b := newRaceBroker(t)
	fc := b.clk.(*clock.Fake)
	t0 := fc.Now()

	// Hold the writer, so the promote the timer starts cannot run its transaction yet.
	entered, release := make(chan struct{}), make(chan struct{})
	held := make(chan error, 1)
	go func() {
		held <- b.do(context.Background(), "hold", func(store.Tx) error {
			close(entered)
			<-release
			return nil
		})
	}()
	<-entered
	defer func() {
		close(release)
		if err := <-held; err != nil {
			t.Error(err)
		}
	}()

	b.schedule(t0.Add(time.Second))
	fc.Advance(time.Second) // the timer fires; its promote waits for the writer

	deadline := time.Now().Add(5 * time.Second)
	for {
		if armed, _ := b.svc.promoter.armed(); !armed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the fired timer still counts as armed while its promote runs")
		}
		time.Sleep(time.Millisecond)
	}

	later := t0.Add(time.Minute)
	b.schedule(later)
	armed, at := b.svc.promoter.armed()
	if !armed || !at.Equal(later) {
		t.Fatalf("scheduling %s during a promote: timer armed %v for %s, want armed for it", later, armed, at)
	}
}
