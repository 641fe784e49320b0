package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jobwire/jobwire/client"
	"github.com/jobwire/jobwire/internal/brokertest"
	"github.com/jobwire/jobwire/job"
)

// The schedule calls end to end: declared, listed, paused with a note, triggered, backfilled,
// updated and removed, the policies named as the configuration names them.
func TestScheduleCallsEndToEnd(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	ctx := context.Background()
	c, err := client.Dial(ctx, b.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	s, err := c.AddSchedule(ctx, &client.Schedule{Name: "nightly", Cron: "0 2 * * *", TimeZone: "Asia/Tokyo", Type: "report",
		Payload: []byte(`{}`), Overlap: "buffer_one", CatchUp: "all", CatchUpWindow: 6 * time.Hour, Jitter: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if s.Overlap != "buffer_one" || s.CatchUp != "all" || s.CatchUpWindow != 6*time.Hour || s.Jitter != time.Minute ||
		!s.NextFireAt.Equal(time.Date(2026, 3, 1, 17, 0, 0, 0, time.UTC)) {
		t.Fatalf("added %+v", s)
	}
	if _, err := c.AddSchedule(ctx, &client.Schedule{Name: "x", Cron: "@daily", Type: "t", Overlap: "sometimes"}); err == nil {
		t.Fatal("an unknown overlap policy was sent")
	}
	if s, err = c.PauseSchedule(ctx, "nightly", "quarter close"); err != nil || !s.Paused || s.Note != "quarter close" {
		t.Fatalf("pause = %+v, %v", s, err)
	}
	id, state, err := c.TriggerSchedule(ctx, "nightly")
	if err != nil || id == 0 || state != job.StateScheduled {
		t.Fatalf("trigger = %d, %s, %v; want a job delayed by its jitter", id, state, err)
	}
	ids, existing, err := c.BackfillSchedule(ctx, "nightly", time.Date(2026, 2, 25, 0, 0, 0, 0, time.UTC), time.Date(2026, 2, 28, 0, 0, 0, 0, time.UTC))
	if err != nil || len(ids) != 3 || existing != 0 {
		t.Fatalf("backfill = %v, %d, %v; want 3 jobs", ids, existing, err)
	}
	if s, err = c.ResumeSchedule(ctx, "nightly"); err != nil || s.Paused {
		t.Fatalf("resume = %+v, %v", s, err)
	}
	s.Cron = "0 3 * * *"
	if s, err = c.UpdateSchedule(ctx, s); err != nil || !s.NextFireAt.Equal(time.Date(2026, 3, 1, 18, 0, 0, 0, time.UTC)) || s.LastJobID != id {
		t.Fatalf("update = %+v, %v", s, err)
	}
	list, err := c.ListSchedules(ctx)
	if err != nil || len(list) != 1 || list[0].Name != "nightly" || list[0].LastJobState != job.StateScheduled {
		t.Fatalf("list = %+v, %v", list, err)
	}
	if err := c.RemoveSchedule(ctx, "nightly"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetSchedule(ctx, "nightly"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("get after remove = %v, want ErrNotFound", err)
	}
}
