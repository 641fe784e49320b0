package server_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/brokertest"
	"github.com/jobwire/jobwire/schedule"
)

// Two brokers on one PostgreSQL database; the leader is stopped at each fire time, once before
// it fired and once while both brokers fire at the same moment, and the other takes over.
// Each occurrence has exactly one job, whichever broker enqueued it.
func TestClusterScheduleLeaderStoppedAtAFireTimeEnqueuesEachOccurrenceOnce(t *testing.T) {
	t.Parallel()
	a, b := twoBrokers(t)
	s := every10("s", "t")
	s.Overlap, s.CatchUp = jobwirev1.ScheduleOverlap_SCHEDULE_OVERLAP_ALLOW_ALL, jobwirev1.ScheduleCatchUp_SCHEDULE_CATCH_UP_ALL
	addSchedule(t, b, s) // through the broker that does not lead

	// 12:10: the leader stops as the fire time comes, before it fired; the other leads and fires.
	a.Clock.Advance(10 * time.Minute)
	a.Stop()
	b.WaitLeader()
	b.Broker.RunSchedules()
	wantFires(t, b, "t", utc("2026-03-01T12:10:00Z"))

	// 12:20: a comes back (as a follower); both fire at once, the leader through its alarm too
	// (RunSchedules fires on a follower as well): whoever's write comes second finds the
	// occurrence done.
	a.Restart()
	a.WaitListening(2)
	a.Clock.Advance(10 * time.Minute)
	var wg sync.WaitGroup
	for _, x := range []*brokertest.Bundle{a, b} {
		wg.Go(func() { x.Broker.RunSchedules() })
	}
	wg.Wait()
	// 12:30: the leader stops at the fire time, after it fired or while it fires.
	b.Clock.Advance(10 * time.Minute)
	go b.Broker.RunSchedules()
	b.Stop()
	a.WaitLeader()
	a.Broker.RunSchedules()
	wantFires(t, a, "t", utc("2026-03-01T12:10:00Z"), utc("2026-03-01T12:20:00Z"), utc("2026-03-01T12:30:00Z"))
	if got := getSchedule(t, a, "s").GetNextFireAt().AsTime(); !got.Equal(utc("2026-03-01T12:40:00Z")) {
		t.Fatalf("next fire %s, want 12:40", got)
	}
}

// A broker started with a configuration that no longer declares a schedule removes it, and
// keeps those an operator added through the API.
func TestScheduleNoLongerDeclaredIsRemovedAtTheStart(t *testing.T) {
	t.Parallel()
	cfg := brokertest.DefaultConfig()
	cfg.Schedules = []schedule.Definition{{Name: "kept", Cron: "@hourly", Type: "t"}, {Name: "dropped", Cron: "@daily", Type: "t"}}
	a := brokertest.New(t, brokertest.Options{Cluster: true, Config: cfg})
	addSchedule(t, a, every10("by-hand", "t"))
	a.Stop()
	cfg.Schedules = cfg.Schedules[:1]
	b := brokertest.New(t, brokertest.Options{Join: a, Config: cfg})
	res, err := b.Admin.ListSchedules(context.Background(), &jobwirev1.ListSchedulesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range res.GetSchedules() {
		names = append(names, s.GetName())
	}
	if !slices.Equal(names, []string{"by-hand", "kept"}) {
		t.Fatalf("schedules after the start %v, want by-hand and kept", names)
	}
}
