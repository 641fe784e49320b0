package client

import (
	"context"
	"fmt"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/job"
)

// Schedule is a periodic schedule: when it fires and the job each occurrence enqueues. The
// broker enqueues each occurrence exactly once, across restarts and brokers.
type Schedule struct {
	Name string
	// Cron is 5 fields (minute hour day-of-month month day-of-week), or @hourly, @daily,
	// @weekly, @monthly, @yearly, @every DURATION.
	Cron string
	// TimeZone is the IANA zone Cron is read in; "" is UTC.
	TimeZone string

	Type           string
	Payload        []byte
	Queue          string
	Priority       int
	MaxAttempts    int
	AttemptTimeout time.Duration
	Metadata       map[string]string

	// Jitter delays each occurrence's job by a random time in [0, Jitter).
	Jitter time.Duration
	// Overlap is what an occurrence does while the previous one's job has not finished:
	// "skip" (the default), "buffer_one", "allow_all" or "cancel_previous".
	Overlap string
	// CatchUp is what happens to occurrences missed while no broker ran: "latest" (the
	// default: the latest within the window, once), "skip" or "all" (every one within the
	// window).
	CatchUp       string
	CatchUpWindow time.Duration // 0: 24h

	// Where it stands, set by the broker.
	Paused     bool
	Note       string
	FromConfig bool
	NextFireAt time.Time
	// LastFireAt and LastJobID are the last occurrence enqueued and its job; LastJobState is
	// that job's state now (0 when it was deleted).
	LastFireAt     time.Time
	LastJobID      int64
	LastJobState   job.State
	BufferedFireAt time.Time
}

// ListSchedules returns every schedule, by name.
func (c *Client) ListSchedules(ctx context.Context) ([]Schedule, error) {
	resp, err := c.admin.ListSchedules(ctx, &jobwirev1.ListSchedulesRequest{})
	if err != nil {
		return nil, wrapErr("ListSchedules", err)
	}
	out := make([]Schedule, 0, len(resp.GetSchedules()))
	for _, s := range resp.GetSchedules() {
		out = append(out, scheduleFromProto(s))
	}
	return out, nil
}

// GetSchedule reads one schedule; one that does not exist matches ErrNotFound.
func (c *Client) GetSchedule(ctx context.Context, name string) (*Schedule, error) {
	resp, err := c.admin.GetSchedule(ctx, &jobwirev1.GetScheduleRequest{Name: name})
	if err != nil {
		return nil, wrapErr("GetSchedule", err)
	}
	s := scheduleFromProto(resp.GetSchedule())
	return &s, nil
}

// AddSchedule declares a new schedule; its first occurrence is its first fire time after now.
func (c *Client) AddSchedule(ctx context.Context, s *Schedule) (*Schedule, error) {
	p, err := scheduleToProto(s)
	if err != nil {
		return nil, err
	}
	resp, err := c.admin.AddSchedule(ctx, &jobwirev1.AddScheduleRequest{Schedule: p})
	if err != nil {
		return nil, wrapErr("AddSchedule", err)
	}
	out := scheduleFromProto(resp.GetSchedule())
	return &out, nil
}

// UpdateSchedule replaces a schedule's definition, keeping its pause and last occurrence.
func (c *Client) UpdateSchedule(ctx context.Context, s *Schedule) (*Schedule, error) {
	p, err := scheduleToProto(s)
	if err != nil {
		return nil, err
	}
	resp, err := c.admin.UpdateSchedule(ctx, &jobwirev1.UpdateScheduleRequest{Schedule: p})
	if err != nil {
		return nil, wrapErr("UpdateSchedule", err)
	}
	out := scheduleFromProto(resp.GetSchedule())
	return &out, nil
}

// RemoveSchedule deletes a schedule; the jobs it enqueued stay.
func (c *Client) RemoveSchedule(ctx context.Context, name string) error {
	_, err := c.admin.RemoveSchedule(ctx, &jobwirev1.RemoveScheduleRequest{Name: name})
	return wrapErr("RemoveSchedule", err)
}

// PauseSchedule stops a schedule from firing, with a note saying why.
func (c *Client) PauseSchedule(ctx context.Context, name, note string) (*Schedule, error) {
	resp, err := c.admin.PauseSchedule(ctx, &jobwirev1.PauseScheduleRequest{Name: name, Note: note})
	if err != nil {
		return nil, wrapErr("PauseSchedule", err)
	}
	out := scheduleFromProto(resp.GetSchedule())
	return &out, nil
}

// ResumeSchedule makes a paused schedule fire again from its next time after now.
func (c *Client) ResumeSchedule(ctx context.Context, name string) (*Schedule, error) {
	resp, err := c.admin.ResumeSchedule(ctx, &jobwirev1.ResumeScheduleRequest{Name: name})
	if err != nil {
		return nil, wrapErr("ResumeSchedule", err)
	}
	out := scheduleFromProto(resp.GetSchedule())
	return &out, nil
}

// TriggerSchedule enqueues an occurrence now and returns its job's id and state.
func (c *Client) TriggerSchedule(ctx context.Context, name string) (int64, job.State, error) {
	resp, err := c.admin.TriggerSchedule(ctx, &jobwirev1.TriggerScheduleRequest{Name: name})
	if err != nil {
		return 0, 0, wrapErr("TriggerSchedule", err)
	}
	return resp.GetJobId(), job.State(resp.GetState()), nil
}

// BackfillSchedule enqueues the occurrences in [from, to) never enqueued before (at most 1000)
// and returns their jobs' ids and how many of the range existed already.
func (c *Client) BackfillSchedule(ctx context.Context, name string, from, to time.Time) ([]int64, int, error) {
	resp, err := c.admin.BackfillSchedule(ctx, &jobwirev1.BackfillScheduleRequest{Name: name,
		From: timestamppb.New(from), To: timestamppb.New(to)})
	if err != nil {
		return nil, 0, wrapErr("BackfillSchedule", err)
	}
	return resp.GetJobIds(), int(resp.GetExisting()), nil
}

func enumFromName(field, prefix, name string, values map[string]int32) (int32, error) {
	if name == "" {
		return 0, nil
	}
	v, ok := values[prefix+strings.ToUpper(name)]
	if !ok || v == 0 {
		return 0, fmt.Errorf("%s %q is unknown", field, name)
	}
	return v, nil
}

func enumName(prefix, name string) string { return strings.ToLower(strings.TrimPrefix(name, prefix)) }

func scheduleToProto(s *Schedule) (*jobwirev1.Schedule, error) {
	overlap, err := enumFromName("overlap", "SCHEDULE_OVERLAP_", s.Overlap, jobwirev1.ScheduleOverlap_value)
	if err != nil {
		return nil, err
	}
	catchUp, err := enumFromName("catch_up", "SCHEDULE_CATCH_UP_", s.CatchUp, jobwirev1.ScheduleCatchUp_value)
	if err != nil {
		return nil, err
	}
	p := &jobwirev1.Schedule{Name: s.Name, Cron: s.Cron, TimeZone: s.TimeZone, Type: s.Type, Payload: s.Payload,
		Queue: s.Queue, Priority: int32(s.Priority), MaxAttempts: int32(s.MaxAttempts), Metadata: s.Metadata,
		Overlap: jobwirev1.ScheduleOverlap(overlap), CatchUp: jobwirev1.ScheduleCatchUp(catchUp)}
	if s.AttemptTimeout > 0 {
		p.AttemptTimeout = durationpb.New(s.AttemptTimeout)
	}
	if s.Jitter > 0 {
		p.Jitter = durationpb.New(s.Jitter)
	}
	if s.CatchUpWindow > 0 {
		p.CatchUpWindow = durationpb.New(s.CatchUpWindow)
	}
	return p, nil
}

func scheduleFromProto(p *jobwirev1.Schedule) Schedule {
	return Schedule{Name: p.GetName(), Cron: p.GetCron(), TimeZone: p.GetTimeZone(), Type: p.GetType(), Payload: p.GetPayload(),
		Queue: p.GetQueue(), Priority: int(p.GetPriority()), MaxAttempts: int(p.GetMaxAttempts()), Metadata: p.GetMetadata(),
		Overlap: enumName("SCHEDULE_OVERLAP_", p.GetOverlap().String()), CatchUp: enumName("SCHEDULE_CATCH_UP_", p.GetCatchUp().String()),
		Paused: p.GetPaused(), Note: p.GetNote(), FromConfig: p.GetFromConfig(), LastJobID: p.GetLastJobId(),
		LastJobState: job.State(p.GetLastJobState()), NextFireAt: timeFromProto(p.GetNextFireAt()),
		LastFireAt: timeFromProto(p.GetLastFireAt()), BufferedFireAt: timeFromProto(p.GetBufferedFireAt()),
		// An unset duration reads as 0.
		AttemptTimeout: p.GetAttemptTimeout().AsDuration(), Jitter: p.GetJitter().AsDuration(),
		CatchUpWindow: p.GetCatchUpWindow().AsDuration()}
}
