package server

import (
	"context"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/jobwire/jobwire/broker"
	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/schedule"
)

// The periodic schedules' calls: decode, check the job the schedule enqueues as an enqueue's
// spec is checked, and leave the cron expression, time zone and policies to the broker
// (schedule.Definition.Validate), whose refusal is INVALID_ARGUMENT.

func (a *admin) ListSchedules(ctx context.Context, _ *jobwirev1.ListSchedulesRequest) (*jobwirev1.ListSchedulesResponse, error) {
	infos, err := a.b.ListSchedules(ctx)
	if err != nil {
		return nil, toStatus(err)
	}
	out := &jobwirev1.ListSchedulesResponse{Schedules: make([]*jobwirev1.Schedule, len(infos))}
	for i := range infos {
		out.Schedules[i] = scheduleToProto(&infos[i])
	}
	return out, nil
}

func (a *admin) GetSchedule(ctx context.Context, req *jobwirev1.GetScheduleRequest) (*jobwirev1.GetScheduleResponse, error) {
	if err := validScheduleName(req.GetName()); err != nil {
		return nil, err
	}
	info, err := a.b.GetSchedule(ctx, req.GetName())
	if err != nil {
		return nil, toStatus(err)
	}
	return &jobwirev1.GetScheduleResponse{Schedule: scheduleToProto(info)}, nil
}

func (a *admin) AddSchedule(ctx context.Context, req *jobwirev1.AddScheduleRequest) (*jobwirev1.AddScheduleResponse, error) {
	def, err := a.scheduleFromProto(req.GetSchedule())
	if err != nil {
		return nil, err
	}
	info, err := a.b.AddSchedule(ctx, def)
	if err != nil {
		return nil, toStatus(err)
	}
	return &jobwirev1.AddScheduleResponse{Schedule: scheduleToProto(info)}, nil
}

func (a *admin) UpdateSchedule(ctx context.Context, req *jobwirev1.UpdateScheduleRequest) (*jobwirev1.UpdateScheduleResponse, error) {
	def, err := a.scheduleFromProto(req.GetSchedule())
	if err != nil {
		return nil, err
	}
	info, err := a.b.UpdateSchedule(ctx, def)
	if err != nil {
		return nil, toStatus(err)
	}
	return &jobwirev1.UpdateScheduleResponse{Schedule: scheduleToProto(info)}, nil
}

func (a *admin) RemoveSchedule(ctx context.Context, req *jobwirev1.RemoveScheduleRequest) (*jobwirev1.RemoveScheduleResponse, error) {
	if err := validScheduleName(req.GetName()); err != nil {
		return nil, err
	}
	if err := a.b.RemoveSchedule(ctx, req.GetName()); err != nil {
		return nil, toStatus(err)
	}
	return &jobwirev1.RemoveScheduleResponse{}, nil
}

func (a *admin) PauseSchedule(ctx context.Context, req *jobwirev1.PauseScheduleRequest) (*jobwirev1.PauseScheduleResponse, error) {
	if err := validScheduleName(req.GetName()); err != nil {
		return nil, err
	}
	if n := len(req.GetNote()); n > maxNoteLen {
		return nil, invalid("note", "is %d bytes, more than %d", n, maxNoteLen)
	}
	info, err := a.b.PauseSchedule(ctx, req.GetName(), req.GetNote())
	if err != nil {
		return nil, toStatus(err)
	}
	return &jobwirev1.PauseScheduleResponse{Schedule: scheduleToProto(info)}, nil
}

func (a *admin) ResumeSchedule(ctx context.Context, req *jobwirev1.ResumeScheduleRequest) (*jobwirev1.ResumeScheduleResponse, error) {
	if err := validScheduleName(req.GetName()); err != nil {
		return nil, err
	}
	info, err := a.b.ResumeSchedule(ctx, req.GetName())
	if err != nil {
		return nil, toStatus(err)
	}
	return &jobwirev1.ResumeScheduleResponse{Schedule: scheduleToProto(info)}, nil
}

func (a *admin) TriggerSchedule(ctx context.Context, req *jobwirev1.TriggerScheduleRequest) (*jobwirev1.TriggerScheduleResponse, error) {
	if err := validScheduleName(req.GetName()); err != nil {
		return nil, err
	}
	e, err := a.b.TriggerSchedule(ctx, req.GetName())
	if err != nil {
		return nil, toStatus(err)
	}
	return &jobwirev1.TriggerScheduleResponse{JobId: e.ID, State: stateToProto(e.State)}, nil
}

func (a *admin) BackfillSchedule(ctx context.Context, req *jobwirev1.BackfillScheduleRequest) (*jobwirev1.BackfillScheduleResponse, error) {
	if err := validScheduleName(req.GetName()); err != nil {
		return nil, err
	}
	from, err := requiredTime("from", req.GetFrom())
	if err != nil {
		return nil, err
	}
	to, err := requiredTime("to", req.GetTo())
	if err != nil {
		return nil, err
	}
	res, err := a.b.BackfillSchedule(ctx, req.GetName(), from, to)
	if err != nil {
		return nil, toStatus(err)
	}
	return &jobwirev1.BackfillScheduleResponse{JobIds: res.JobIDs, Existing: int32(res.Existing)}, nil
}

// maxNoteLen bounds a pause note.
const maxNoteLen = 1024

func validScheduleName(name string) error { return validName("name", name) }

func requiredTime(field string, ts *timestamppb.Timestamp) (time.Time, error) {
	if ts == nil {
		return time.Time{}, invalid(field, "is required")
	}
	if err := ts.CheckValid(); err != nil {
		return time.Time{}, invalid(field, "is not a valid time: %v", err)
	}
	return ts.AsTime(), nil
}

// scheduleFromProto checks a schedule's job as an enqueue's spec is checked and reads its
// definition; the broker checks the rest.
func (a *admin) scheduleFromProto(s *jobwirev1.Schedule) (schedule.Definition, error) {
	if s == nil {
		return schedule.Definition{}, invalid("schedule", "is required")
	}
	if err := validName("schedule.name", s.GetName()); err != nil {
		return schedule.Definition{}, err
	}
	spec := &jobwirev1.JobSpec{Type: s.GetType(), Queue: s.GetQueue(), Payload: s.GetPayload(), Priority: s.GetPriority(),
		MaxAttempts: s.GetMaxAttempts(), AttemptTimeout: s.GetAttemptTimeout(), Metadata: s.GetMetadata()}
	if err := a.limits.validateSpec("schedule", spec, a.clk.Now()); err != nil {
		return schedule.Definition{}, err
	}
	for field, d := range map[string]*durationpb.Duration{"schedule.jitter": s.GetJitter(), "schedule.catch_up_window": s.GetCatchUpWindow()} {
		if d != nil && d.CheckValid() != nil {
			return schedule.Definition{}, invalid(field, "is not a valid duration")
		}
	}
	return schedule.Definition{Name: s.GetName(), Cron: s.GetCron(), TimeZone: s.GetTimeZone(), Type: s.GetType(),
		Payload: s.GetPayload(), Queue: s.GetQueue(), Priority: int(s.GetPriority()), MaxAttempts: int(s.GetMaxAttempts()),
		AttemptTimeout: s.GetAttemptTimeout().AsDuration(), Metadata: s.GetMetadata(), Jitter: s.GetJitter().AsDuration(),
		Overlap: overlapFromProto[s.GetOverlap()], CatchUp: catchUpFromProto[s.GetCatchUp()],
		CatchUpWindow: s.GetCatchUpWindow().AsDuration()}, nil
}

var overlapFromProto = map[jobwirev1.ScheduleOverlap]schedule.Overlap{
	jobwirev1.ScheduleOverlap_SCHEDULE_OVERLAP_UNSPECIFIED:     schedule.OverlapSkip,
	jobwirev1.ScheduleOverlap_SCHEDULE_OVERLAP_SKIP:            schedule.OverlapSkip,
	jobwirev1.ScheduleOverlap_SCHEDULE_OVERLAP_BUFFER_ONE:      schedule.OverlapBufferOne,
	jobwirev1.ScheduleOverlap_SCHEDULE_OVERLAP_ALLOW_ALL:       schedule.OverlapAllowAll,
	jobwirev1.ScheduleOverlap_SCHEDULE_OVERLAP_CANCEL_PREVIOUS: schedule.OverlapCancelPrevious,
}

var catchUpFromProto = map[jobwirev1.ScheduleCatchUp]schedule.CatchUp{
	jobwirev1.ScheduleCatchUp_SCHEDULE_CATCH_UP_UNSPECIFIED: schedule.CatchUpLatest,
	jobwirev1.ScheduleCatchUp_SCHEDULE_CATCH_UP_LATEST:      schedule.CatchUpLatest,
	jobwirev1.ScheduleCatchUp_SCHEDULE_CATCH_UP_SKIP:        schedule.CatchUpSkip,
	jobwirev1.ScheduleCatchUp_SCHEDULE_CATCH_UP_ALL:         schedule.CatchUpAll,
}

func scheduleToProto(s *broker.ScheduleInfo) *jobwirev1.Schedule {
	return &jobwirev1.Schedule{Name: s.Name, Cron: s.Cron, TimeZone: s.TimeZone, Type: s.Type, Payload: s.Payload,
		Queue: s.Queue, Priority: int32(s.Priority), MaxAttempts: int32(s.MaxAttempts), Metadata: s.Metadata,
		Overlap: jobwirev1.ScheduleOverlap(s.Overlap + 1), CatchUp: jobwirev1.ScheduleCatchUp(s.CatchUp + 1),
		Paused: s.Paused, Note: s.Note, FromConfig: s.FromConfig, NextFireAt: ts(s.NextFireAt),
		LastFireAt: ts(s.LastFireAt), LastJobId: s.LastJobID, LastJobState: stateToProto(s.LastJobState),
		BufferedFireAt: ts(s.BufferedFireAt), AttemptTimeout: dur(s.AttemptTimeout), Jitter: dur(s.Jitter),
		CatchUpWindow: dur(s.CatchUpWindow)}
}
