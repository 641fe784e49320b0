package broker

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jobwire/jobwire/internal/clock"
	"github.com/jobwire/jobwire/internal/service"
	"github.com/jobwire/jobwire/store/sqlite"
	"github.com/jobwire/jobwire/store/sqlite/sqlitetest"
)

// newUnstartedBroker is a broker alone on a fresh SQLite file, on a fake clock, not started.
func newUnstartedBroker(t *testing.T) (*Broker, *clock.Fake, func() error) {
	t.Helper()
	st, err := sqlite.Open(context.Background(), sqlitetest.Path(t), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	clk := clock.NewFake(time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC))
	b, err := New(Options{Store: st, Config: DefaultConfig(), Clock: clk,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	return b, clk, st.Close
}

// The sweep and retention run every interval of their own once the broker started, each on
// its own timer.
func TestTimedServicesRunOnTheirIntervals(t *testing.T) {
	t.Parallel()
	b, clk, closeStore := newUnstartedBroker(t)
	b.svc.sweep.Ran.Init()
	b.svc.retention.Ran.Init()
	startForTest(t, b, closeStore)
	for range 3 {
		clk.Advance(b.cfg.SweepInterval)
		if _, ok := b.svc.sweep.Ran.Wait(10 * time.Second); !ok {
			t.Fatal("no sweep ran a sweep interval after the last")
		}
	}
	if b.svc.retention.Ran.Sent() {
		t.Fatal("retention ran before its interval")
	}
	clk.Advance(b.cfg.Retention.Interval)
	if _, ok := b.svc.retention.Ran.Wait(10 * time.Second); !ok {
		t.Fatal("retention did not run at its interval")
	}
}

// Shutdown stops every service, the timed ones and those that outlive the writer, and none
// runs again however far the clock moves.
func TestShutdownStopsEveryService(t *testing.T) {
	t.Parallel()
	b, clk, closeStore := newUnstartedBroker(t)
	defer closeStore()
	b.svc.sweep.Ran.Init()
	if err := b.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	all := append(b.timedServices(), b.afterServices()...)
	for _, s := range all {
		select {
		case <-s.(interface{ Started() <-chan struct{} }).Started():
		default:
			t.Fatalf("%T not started by Start", s)
		}
	}
	b.schedule(clk.Now().Add(time.Minute))
	if err := b.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, s := range all {
		select {
		case <-s.Stopped():
		default:
			t.Fatalf("%T not stopped by Shutdown", s)
		}
	}
	if armed, _ := b.svc.promoter.armed(); armed {
		t.Fatal("the promoter's timer is still armed after Shutdown")
	}
	clk.Advance(time.Hour)
	service.WaitStopped(all...)
	if b.svc.sweep.Ran.Sent() {
		t.Fatal("a sweep ran after Shutdown")
	}
}
