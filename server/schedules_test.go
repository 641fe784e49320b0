package server_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/jobwire/jobwire/broker"
	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/internal/brokertest"
	"github.com/jobwire/jobwire/schedule"
)

// every10 is a schedule of job type typ every ten minutes, on the minute.
func every10(name, typ string) *jobwirev1.Schedule {
	return &jobwirev1.Schedule{Name: name, Cron: "*/10 * * * *", Type: typ, Payload: []byte(`{}`)}
}

func addSchedule(t *testing.T, b *brokertest.Bundle, s *jobwirev1.Schedule) *jobwirev1.Schedule {
	t.Helper()
	res, err := b.Admin.AddSchedule(context.Background(), &jobwirev1.AddScheduleRequest{Schedule: s})
	if err != nil {
		t.Fatalf("AddSchedule(%s): %v", s.GetName(), err)
	}
	return res.GetSchedule()
}

func getSchedule(t *testing.T, b *brokertest.Bundle, name string) *jobwirev1.Schedule {
	t.Helper()
	res, err := b.Admin.GetSchedule(context.Background(), &jobwirev1.GetScheduleRequest{Name: name})
	if err != nil {
		t.Fatalf("GetSchedule(%s): %v", name, err)
	}
	return res.GetSchedule()
}

// advanceTo moves the fake clock to at and fires what is due then, returning once it is stored.
func advanceTo(b *brokertest.Bundle, at time.Time) {
	if d := at.Sub(b.Clock.Now()); d > 0 {
		b.Clock.Advance(d)
	}
	b.Broker.RunSchedules()
}

// occurrences reads the jobs of type typ as the fire times they were enqueued for, oldest
// first, and their ids.
func occurrences(t *testing.T, b *brokertest.Bundle, typ string) ([]time.Time, []int64) {
	t.Helper()
	res, err := b.Admin.ListJobs(context.Background(), &jobwirev1.ListJobsRequest{Type: typ, PageSize: 1000, Ascending: true, Sort: "id"})
	if err != nil {
		t.Fatal(err)
	}
	var fires []time.Time
	var ids []int64
	for _, j := range res.GetJobs() {
		full := getJob(t, b, j.GetId())
		at, err := broker.ParseFireTime(full.GetMetadata()[broker.MetadataScheduleFire])
		if err != nil {
			t.Fatalf("job %d has no fire time in its metadata (%v): %v", j.GetId(), full.GetMetadata(), err)
		}
		fires = append(fires, at)
		ids = append(ids, j.GetId())
	}
	slices.SortFunc(fires, time.Time.Compare)
	return fires, ids
}

func wantFires(t *testing.T, b *brokertest.Bundle, typ string, want ...time.Time) []int64 {
	t.Helper()
	got, ids := occurrences(t, b, typ)
	if !slices.EqualFunc(got, want, time.Time.Equal) {
		t.Fatalf("jobs of %s were enqueued for %v, want %v", typ, got, want)
	}
	return ids
}

func utc(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

// A schedule fires at its times in its time zone, across a change to summer time, and its job
// carries the schedule's name and the occurrence's time; the listing shows the last and next.
func TestScheduleFiresAtItsTimesInItsTimeZone(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	s := addSchedule(t, b, &jobwirev1.Schedule{Name: "paris-nine", Cron: "0 9 * * *", TimeZone: "Europe/Paris", Type: "report",
		Payload: []byte(`{"k":1}`), Queue: "reports", Priority: 5, MaxAttempts: 2, Metadata: map[string]string{"team": "ops"},
		Overlap: jobwirev1.ScheduleOverlap_SCHEDULE_OVERLAP_ALLOW_ALL}) // no worker finishes them
	if got := s.GetNextFireAt().AsTime(); !got.Equal(utc("2026-03-02T08:00:00Z")) {
		t.Fatalf("next fire %s, want 09:00 in Paris (08:00 UTC)", got)
	}
	advanceTo(b, utc("2026-03-02T07:59:59Z"))
	wantFires(t, b, "report")
	advanceTo(b, utc("2026-03-02T08:00:00Z"))
	ids := wantFires(t, b, "report", utc("2026-03-02T08:00:00Z"))
	j := getJob(t, b, ids[0])
	if j.GetQueue() != "reports" || j.GetPriority() != 5 || j.GetMaxAttempts() != 2 || string(j.GetPayload()) != `{"k":1}` ||
		j.GetMetadata()["team"] != "ops" || j.GetMetadata()[broker.MetadataSchedule] != "paris-nine" {
		t.Fatalf("the occurrence's job is %v", j)
	}
	s = getSchedule(t, b, "paris-nine")
	if s.GetLastJobId() != ids[0] || s.GetLastJobState() != jobwirev1.JobState_JOB_STATE_PENDING ||
		!s.GetLastFireAt().AsTime().Equal(utc("2026-03-02T08:00:00Z")) || !s.GetNextFireAt().AsTime().Equal(utc("2026-03-03T08:00:00Z")) {
		t.Fatalf("after the first fire the schedule reads %v", s)
	}
	// Summer time starts in Paris on 29 March: 09:00 is 07:00 UTC from then on.
	for day := 3; day <= 30; day++ {
		advanceTo(b, utc(fmt.Sprintf("2026-03-%02dT12:00:00Z", day)))
	}
	got, _ := occurrences(t, b, "report")
	if n := len(got); n != 29 || !got[27].Equal(utc("2026-03-29T07:00:00Z")) || !got[26].Equal(utc("2026-03-28T08:00:00Z")) {
		t.Fatalf("%d occurrences, the last three %v; want 29, ending 28th 08:00, 29th 07:00, 30th 07:00 UTC", n, got[max(0, n-3):])
	}
}

// Each overlap policy, at an occurrence that comes while the previous one's job has not finished.
func TestScheduleOverlapPolicies(t *testing.T) {
	t.Parallel()
	first, second := utc("2026-03-01T12:10:00Z"), utc("2026-03-01T12:20:00Z")
	cases := []struct {
		overlap jobwirev1.ScheduleOverlap
		fires   []time.Time
		// firstState is the first job's state after the second occurrence.
		firstState jobwirev1.JobState
	}{
		{jobwirev1.ScheduleOverlap_SCHEDULE_OVERLAP_SKIP, []time.Time{first}, jobwirev1.JobState_JOB_STATE_PENDING},
		{jobwirev1.ScheduleOverlap_SCHEDULE_OVERLAP_ALLOW_ALL, []time.Time{first, second}, jobwirev1.JobState_JOB_STATE_PENDING},
		{jobwirev1.ScheduleOverlap_SCHEDULE_OVERLAP_CANCEL_PREVIOUS, []time.Time{first, second}, jobwirev1.JobState_JOB_STATE_CANCELLED},
		{jobwirev1.ScheduleOverlap_SCHEDULE_OVERLAP_BUFFER_ONE, []time.Time{first}, jobwirev1.JobState_JOB_STATE_PENDING},
	}
	for _, c := range cases {
		t.Run(c.overlap.String(), func(t *testing.T) {
			t.Parallel()
			b := brokertest.New(t, brokertest.Options{})
			s := every10("s", "t")
			s.Overlap = c.overlap
			addSchedule(t, b, s)
			advanceTo(b, first)
			ids := wantFires(t, b, "t", first)
			advanceTo(b, second)
			wantFires(t, b, "t", c.fires...)
			if got := getJob(t, b, ids[0]).GetState(); got != c.firstState {
				t.Fatalf("the first occurrence's job is %s, want %s", got, c.firstState)
			}
		})
	}
	t.Run("BUFFER_ONE runs the kept occurrence once the previous finished", func(t *testing.T) {
		t.Parallel()
		b := brokertest.New(t, brokertest.Options{})
		s := every10("s", "t")
		s.Overlap = jobwirev1.ScheduleOverlap_SCHEDULE_OVERLAP_BUFFER_ONE
		addSchedule(t, b, s)
		advanceTo(b, first)
		ids := wantFires(t, b, "t", first)
		advanceTo(b, second)
		advanceTo(b, utc("2026-03-01T12:30:00Z")) // a third is dropped: one is kept already
		if got := getSchedule(t, b, "s").GetBufferedFireAt().AsTime(); !got.Equal(second) {
			t.Fatalf("kept occurrence %s, want %s", got, second)
		}
		if _, err := b.Producer.CancelJob(context.Background(), &jobwirev1.CancelJobRequest{Id: ids[0]}); err != nil {
			t.Fatal(err)
		}
		advanceTo(b, utc("2026-03-01T12:31:00Z"))
		wantFires(t, b, "t", first, second)
		if got := getSchedule(t, b, "s").GetBufferedFireAt(); got != nil {
			t.Fatalf("the kept occurrence is still kept after it ran: %v", got)
		}
	})
}

// Occurrences missed while no broker ran: skipped, the latest once, or all within the window.
func TestScheduleCatchUpAfterAStop(t *testing.T) {
	t.Parallel()
	cases := []struct {
		catchUp jobwirev1.ScheduleCatchUp
		want    []time.Time
	}{
		{jobwirev1.ScheduleCatchUp_SCHEDULE_CATCH_UP_SKIP, nil},
		{jobwirev1.ScheduleCatchUp_SCHEDULE_CATCH_UP_LATEST, []time.Time{utc("2026-03-01T13:00:00Z")}},
		{jobwirev1.ScheduleCatchUp_SCHEDULE_CATCH_UP_ALL, []time.Time{utc("2026-03-01T12:40:00Z"), utc("2026-03-01T12:50:00Z"), utc("2026-03-01T13:00:00Z")}},
	}
	for _, c := range cases {
		t.Run(c.catchUp.String(), func(t *testing.T) {
			t.Parallel()
			b := brokertest.New(t, brokertest.Options{})
			s := every10("s", "t")
			s.Overlap, s.CatchUp, s.CatchUpWindow = jobwirev1.ScheduleOverlap_SCHEDULE_OVERLAP_ALLOW_ALL, c.catchUp, durationpb.New(25*time.Minute)
			addSchedule(t, b, s)
			b.Stop()
			b.Clock.Advance(65 * time.Minute) // 13:05: 12:10 to 13:00 missed; 12:40 and later within the window
			b.Restart()
			b.Broker.RunSchedules()
			wantFires(t, b, "t", c.want...)
			if got := getSchedule(t, b, "s").GetNextFireAt().AsTime(); !got.Equal(utc("2026-03-01T13:10:00Z")) {
				t.Fatalf("next fire %s after catching up, want 13:10", got)
			}
		})
	}
}

// The broker restarts again and again across fire times, at them and between them, with the
// scheduler's alarm and explicit runs racing: every occurrence is enqueued once, none missed.
func TestScheduleRestartsNeverEnqueueAnOccurrenceTwiceOrMissOne(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	s := &jobwirev1.Schedule{Name: "s", Cron: "@every 1m", Type: "t", Payload: []byte(`{}`),
		Overlap: jobwirev1.ScheduleOverlap_SCHEDULE_OVERLAP_ALLOW_ALL, CatchUp: jobwirev1.ScheduleCatchUp_SCHEDULE_CATCH_UP_ALL}
	start := addSchedule(t, b, s).GetNextFireAt().AsTime()
	rng := rand.New(rand.NewPCG(brokertest.Seed, 7))
	end := start.Add(90 * time.Minute)
	for b.Clock.Now().Before(end) {
		// Steps of 0 to 3 minutes, landing on a fire time (a whole minute after start) half the time.
		step := time.Duration(rng.IntN(180)) * time.Second
		if rng.IntN(2) == 0 {
			step = step.Truncate(time.Minute)
		}
		switch rng.IntN(3) {
		case 0: // stopped across the step: the start catches up
			b.Stop()
			b.Clock.Advance(step)
			b.Restart()
		case 1: // the alarm fires on its own as the clock moves, racing the explicit run
			b.Clock.Advance(step)
		case 2: // restarted right at the moment reached, after the alarm
			b.Clock.Advance(step)
			b.Restart()
		}
		b.Broker.RunSchedules()
	}
	now := b.Clock.Now()
	var want []time.Time
	for at := start; !at.After(now); at = at.Add(time.Minute) {
		want = append(want, at)
	}
	wantFires(t, b, "t", want...)
}

// A backfill enqueues the range's occurrences once: again, or over occurrences the schedule
// fired, it enqueues nothing more and counts them.
func TestScheduleBackfillEnqueuesEachOccurrenceOnce(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	addSchedule(t, b, every10("s", "t"))
	advanceTo(b, utc("2026-03-01T12:10:00Z"))
	ctx := context.Background()
	req := &jobwirev1.BackfillScheduleRequest{Name: "s", From: timestamppb.New(utc("2026-03-01T11:30:00Z")), To: timestamppb.New(utc("2026-03-01T12:20:00Z"))}
	res, err := b.Admin.BackfillSchedule(ctx, req)
	if err != nil || len(res.GetJobIds()) != 4 || res.GetExisting() != 1 {
		t.Fatalf("backfill = %v, %v; want 4 jobs (11:30 to 12:00) and 12:10 existing", res, err)
	}
	res, err = b.Admin.BackfillSchedule(ctx, req)
	if err != nil || len(res.GetJobIds()) != 0 || res.GetExisting() != 5 {
		t.Fatalf("backfill again = %v, %v; want nothing new, 5 existing", res, err)
	}
	wantFires(t, b, "t", utc("2026-03-01T11:30:00Z"), utc("2026-03-01T11:40:00Z"), utc("2026-03-01T11:50:00Z"),
		utc("2026-03-01T12:00:00Z"), utc("2026-03-01T12:10:00Z"))
	if got := getSchedule(t, b, "s").GetLastFireAt().AsTime(); !got.Equal(utc("2026-03-01T12:10:00Z")) {
		t.Fatalf("a backfill moved the last occurrence to %s", got)
	}
}

// A paused schedule does not fire and says why; resumed, it fires from its next time on, the
// occurrences of the pause skipped. A trigger enqueues an occurrence now, paused or not.
func TestSchedulePauseResumeAndTrigger(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	ctx := context.Background()
	s := every10("s", "t")
	s.Overlap = jobwirev1.ScheduleOverlap_SCHEDULE_OVERLAP_ALLOW_ALL // the triggered job never finishes
	addSchedule(t, b, s)
	p, err := b.Admin.PauseSchedule(ctx, &jobwirev1.PauseScheduleRequest{Name: "s", Note: "upstream down, INC-7"})
	if err != nil || !p.GetSchedule().GetPaused() || p.GetSchedule().GetNote() != "upstream down, INC-7" {
		t.Fatalf("pause = %v, %v", p, err)
	}
	advanceTo(b, utc("2026-03-01T12:35:00Z"))
	wantFires(t, b, "t")
	tr, err := b.Admin.TriggerSchedule(ctx, &jobwirev1.TriggerScheduleRequest{Name: "s"})
	if err != nil || tr.GetState() != jobwirev1.JobState_JOB_STATE_PENDING {
		t.Fatalf("trigger = %v, %v", tr, err)
	}
	wantFires(t, b, "t", utc("2026-03-01T12:35:00Z"))
	if s := getSchedule(t, b, "s"); s.GetLastJobId() != tr.GetJobId() {
		t.Fatalf("the triggered job %d is not the last occurrence: %v", tr.GetJobId(), s)
	}
	r, err := b.Admin.ResumeSchedule(ctx, &jobwirev1.ResumeScheduleRequest{Name: "s"})
	if err != nil || r.GetSchedule().GetPaused() || !r.GetSchedule().GetNextFireAt().AsTime().Equal(utc("2026-03-01T12:40:00Z")) {
		t.Fatalf("resume = %v, %v; want the next fire at 12:40", r, err)
	}
	advanceTo(b, utc("2026-03-01T12:40:00Z"))
	wantFires(t, b, "t", utc("2026-03-01T12:35:00Z"), utc("2026-03-01T12:40:00Z"))
}

// Jitter delays each occurrence's job by up to its bound, drawn from the seeded source.
func TestScheduleJitterDelaysTheJob(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	s := every10("s", "t")
	s.Jitter = durationpb.New(time.Minute)
	addSchedule(t, b, s)
	advanceTo(b, utc("2026-03-01T12:10:00Z"))
	_, ids := occurrences(t, b, "t")
	j := getJob(t, b, ids[0])
	delay := j.GetRunAt().AsTime().Sub(utc("2026-03-01T12:10:00Z"))
	if len(ids) != 1 || j.GetState() != jobwirev1.JobState_JOB_STATE_SCHEDULED || delay <= 0 || delay >= time.Minute {
		t.Fatalf("the jittered job is %s, %s after its fire time; want SCHEDULED within a minute", j.GetState(), delay)
	}
}

// Bad requests are refused with a status naming what is wrong.
func TestScheduleRefusesBadRequests(t *testing.T) {
	t.Parallel()
	b := brokertest.New(t, brokertest.Options{})
	ctx := context.Background()
	addSchedule(t, b, every10("s", "t"))
	bad := func(mut func(*jobwirev1.Schedule)) *jobwirev1.AddScheduleRequest {
		s := every10("n", "t")
		mut(s)
		return &jobwirev1.AddScheduleRequest{Schedule: s}
	}
	cases := []struct {
		name string
		call func() error
		code codes.Code
		msg  string
	}{
		{"cron", func() error {
			_, err := b.Admin.AddSchedule(ctx, bad(func(s *jobwirev1.Schedule) { s.Cron = "* * *" }))
			return err
		}, codes.InvalidArgument, "5 fields"},
		{"zone", func() error {
			_, err := b.Admin.AddSchedule(ctx, bad(func(s *jobwirev1.Schedule) { s.TimeZone = "Mars/Base" }))
			return err
		}, codes.InvalidArgument, "IANA"},
		{"type", func() error {
			_, err := b.Admin.AddSchedule(ctx, bad(func(s *jobwirev1.Schedule) { s.Type = "" }))
			return err
		}, codes.InvalidArgument, "schedule.type"},
		{"name", func() error {
			_, err := b.Admin.AddSchedule(ctx, bad(func(s *jobwirev1.Schedule) { s.Name = "a b" }))
			return err
		}, codes.InvalidArgument, "schedule.name"},
		{"exists", func() error {
			_, err := b.Admin.AddSchedule(ctx, &jobwirev1.AddScheduleRequest{Schedule: every10("s", "t")})
			return err
		}, codes.AlreadyExists, "already exists"},
		{"update missing", func() error {
			_, err := b.Admin.UpdateSchedule(ctx, &jobwirev1.UpdateScheduleRequest{Schedule: every10("nope", "t")})
			return err
		}, codes.NotFound, "nope"},
		{"backfill range", func() error {
			_, err := b.Admin.BackfillSchedule(ctx, &jobwirev1.BackfillScheduleRequest{Name: "s", From: timestamppb.New(brokertest.Start), To: timestamppb.New(brokertest.Start)})
			return err
		}, codes.InvalidArgument, "must be before"},
		{"backfill without to", func() error {
			_, err := b.Admin.BackfillSchedule(ctx, &jobwirev1.BackfillScheduleRequest{Name: "s", From: timestamppb.New(brokertest.Start)})
			return err
		}, codes.InvalidArgument, "to: is required"},
		{"trigger missing", func() error {
			_, err := b.Admin.TriggerSchedule(ctx, &jobwirev1.TriggerScheduleRequest{Name: "nope"})
			return err
		}, codes.NotFound, "nope"},
	}
	for _, c := range cases {
		err := c.call()
		if status.Code(err) != c.code || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%s: %v; want %s naming %q", c.name, err, c.code, c.msg)
		}
	}
}

// Schedules the configuration declares are stored at the start, marked so, refused to the
// API's changes, and keep where they stand (a pause, the next fire time) across restarts.
func TestScheduleDeclaredInTheConfigurationSurvivesRestarts(t *testing.T) {
	t.Parallel()
	cfg := brokertest.DefaultConfig()
	cfg.Schedules = []schedule.Definition{{Name: "declared", Cron: "*/10 * * * *", Type: "t", Overlap: schedule.OverlapAllowAll}}
	b := brokertest.New(t, brokertest.Options{Config: cfg})
	ctx := context.Background()
	s := getSchedule(t, b, "declared")
	if !s.GetFromConfig() || !s.GetNextFireAt().AsTime().Equal(utc("2026-03-01T12:10:00Z")) {
		t.Fatalf("declared schedule reads %v", s)
	}
	_, err := b.Admin.UpdateSchedule(ctx, &jobwirev1.UpdateScheduleRequest{Schedule: every10("declared", "other")})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "configuration file") {
		t.Fatalf("update of a declared schedule = %v, want FAILED_PRECONDITION naming the file", err)
	}
	if _, err := b.Admin.RemoveSchedule(ctx, &jobwirev1.RemoveScheduleRequest{Name: "declared"}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("remove of a declared schedule = %v, want FAILED_PRECONDITION", err)
	}
	advanceTo(b, utc("2026-03-01T12:10:00Z"))
	b.Restart()
	b.Broker.RunSchedules()
	wantFires(t, b, "t", utc("2026-03-01T12:10:00Z"))
	if _, err := b.Admin.PauseSchedule(ctx, &jobwirev1.PauseScheduleRequest{Name: "declared", Note: "n"}); err != nil {
		t.Fatal(err)
	}
	b.Restart()
	if s := getSchedule(t, b, "declared"); !s.GetPaused() || !s.GetNextFireAt().AsTime().Equal(utc("2026-03-01T12:20:00Z")) {
		t.Fatalf("after a restart the declared schedule reads %v; want it paused, next at 12:20", s)
	}
}
