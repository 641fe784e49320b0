package client

import (
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/job"
)

// The job package's enums use the wire numbering (job.StateDead == JOB_STATE_DEAD, and so on
// for dead reasons, attempt outcomes and failure kinds), so conversion is a plain cast; a test
// holds the two numberings together.

func jobFromProto(p *jobwirev1.Job) *job.Job {
	if p == nil {
		return nil
	}
	j := new(job.Job)
	fillJob(j, p)
	return j
}

// fillJob sets j to the job p says.
func fillJob(j *job.Job, p *jobwirev1.Job) {
	*j = job.Job{
		ID:               p.GetId(),
		Type:             p.GetType(),
		Queue:            p.GetQueue(),
		Payload:          p.GetPayload(),
		Priority:         int(p.GetPriority()),
		State:            job.State(p.GetState()),
		Attempts:         int(p.GetAttempts()),
		MaxAttempts:      int(p.GetMaxAttempts()),
		RunAt:            timeFromProto(p.GetRunAt()),
		CreatedAt:        timeFromProto(p.GetCreatedAt()),
		FinishedAt:       timeFromProto(p.GetFinishedAt()),
		IdempotencyKey:   p.GetIdempotencyKey(),
		DeadReason:       job.DeadReason(p.GetDeadReason()),
		LastErrorType:    p.GetLastErrorType(),
		LastErrorMessage: p.GetLastErrorMessage(),
		Metadata:         p.GetMetadata(),
		Result:           p.GetResult(),
		Progress:         progressFromProto(p.GetProgress()),
		RateKey:          p.GetRateKey(),
		BatchID:          p.GetBatchId(),
		ConcurrencyKey:   p.GetConcurrencyKey(),
		ConcurrencyLimit: int(p.GetConcurrencyLimit()),
		ConcurrencyRule:  p.GetConcurrencyRule(),
		UniqueKey:        p.GetUniqueKey(),
	}
	for _, s := range p.GetUniqueStates() {
		j.UniqueStates = append(j.UniqueStates, job.State(s))
	}
	if d := p.GetAttemptTimeout(); d != nil {
		j.AttemptTimeout = d.AsDuration()
	}
	for _, a := range p.GetAttemptHistory() {
		j.History = append(j.History, job.Attempt{
			Number:      int(a.GetNumber()),
			WorkerID:    a.GetWorkerId(),
			StartedAt:   timeFromProto(a.GetStartedAt()),
			FinishedAt:  timeFromProto(a.GetFinishedAt()),
			Outcome:     job.Outcome(a.GetOutcome()),
			FailureKind: job.FailureKind(a.GetFailureKind()),
			ErrorType:   a.GetErrorType(),
			Message:     a.GetMessage(),
			Details:     a.GetDetails(),
		})
	}
}

func jobsFromProto(ps []*jobwirev1.Job) []*job.Job {
	out := make([]*job.Job, 0, len(ps))
	for _, p := range ps {
		out = append(out, jobFromProto(p))
	}
	return out
}

func enqueuedFromProto(p *jobwirev1.EnqueuedJob) EnqueueResult {
	return EnqueueResult{
		ID:                p.GetId(),
		Duplicate:         p.GetDuplicate(),
		DuplicateByUnique: p.GetDuplicateBy() == jobwirev1.DuplicateBy_DUPLICATE_BY_UNIQUE,
		State:             job.State(p.GetState()),
		RunAt:             timeFromProto(p.GetRunAt()),
	}
}

// filterToProto returns nil for a nil filter, so "no filter" stays distinguishable on the wire
// from "a filter that matches everything".
func filterToProto(f *DeadJobFilter) *jobwirev1.DeadJobFilter {
	if f == nil {
		return nil
	}
	pb := &jobwirev1.DeadJobFilter{
		Queue:     f.Queue,
		Type:      f.Type,
		Reason:    jobwirev1.DeadReason(f.Reason),
		ErrorType: f.ErrorType,
	}
	if !f.DeadAfter.IsZero() {
		pb.DeadAfter = timestamppb.New(f.DeadAfter)
	}
	if !f.DeadBefore.IsZero() {
		pb.DeadBefore = timestamppb.New(f.DeadBefore)
	}
	return pb
}

func queueFromProto(p *jobwirev1.QueueInfo) QueueInfo {
	q := QueueInfo{
		Name:             p.GetName(),
		Paused:           p.GetPaused(),
		ConcurrencyLimit: int(p.GetConcurrencyLimit()),
		Running:          p.GetRunning(),
	}
	if d := p.GetOldestReadyAge(); d != nil {
		q.OldestReadyAge = d.AsDuration()
	}
	if m := p.GetDepthByState(); len(m) > 0 {
		q.DepthByState = make(map[job.State]int64, len(m))
		for name, n := range m {
			if s, ok := parseStateName(name); ok {
				q.DepthByState[s] += n
			}
		}
	}
	return q
}

func queuesFromProto(ps []*jobwirev1.QueueInfo) []QueueInfo {
	out := make([]QueueInfo, 0, len(ps))
	for _, p := range ps {
		out = append(out, queueFromProto(p))
	}
	return out
}

// parseStateName reads a state map key as either "PENDING" or the enum's full name
// "JOB_STATE_PENDING", in any case, since the map's keys are strings on the wire.
func parseStateName(name string) (job.State, bool) {
	return job.ParseState(strings.TrimPrefix(strings.ToUpper(name), "JOB_STATE_"))
}

func breakerFromProto(p *jobwirev1.BreakerInfo) Breaker {
	return Breaker{
		Type:             p.GetType(),
		State:            BreakerState(p.GetState()),
		FailuresInWindow: int(p.GetFailuresInWindow()),
		OpenedAt:         timeFromProto(p.GetOpenedAt()),
		NextProbeAt:      timeFromProto(p.GetNextProbeAt()),
		Generation:       p.GetGeneration(),
		ProbesInFlight:   int(p.GetProbesInFlight()),
		ProbeSuccesses:   int(p.GetProbeSuccesses()),
		Disabled:         p.GetDisabled(),
	}
}

// timeFromProto maps an unset timestamp to the zero time rather than the Unix epoch, so
// IsZero means "not set" as everywhere else in Go.
// endsFromProto is the jobs of ends, how each ended (see jobwirev1.JobEnds), allocated together
// with slab (see Client.follow). A response that breaks the columns' shape is an Internal
// error, not a panic.
func endsFromProto(ends *jobwirev1.JobEnds, slab bool) ([]*job.Job, error) {
	ids, names := ends.GetIds(), ends.GetNames()
	n := len(ids)
	if len(ends.GetStates()) != n || len(ends.GetAttempts()) != n || len(ends.GetFinishedAtUnixNanos()) != n ||
		len(ends.GetTypes()) != n || len(ends.GetQueues()) != n {
		return nil, status.Error(codes.Internal, "the broker sent job ends whose columns differ in length")
	}
	out := newJobs(n, slab)
	for i, id := range ids {
		typ, queue := ends.GetTypes()[i], ends.GetQueues()[i]
		if int(typ) >= len(names) || int(queue) >= len(names) {
			return nil, status.Errorf(codes.Internal, "the broker sent job %d with a name index out of range", id)
		}
		*out[i] = job.Job{ID: id, Type: names[typ], Queue: names[queue], State: job.State(ends.GetStates()[i]),
			Attempts: int(ends.GetAttempts()[i])}
		if ns := ends.GetFinishedAtUnixNanos()[i]; ns != 0 {
			out[i].FinishedAt = time.Unix(0, ns).UTC()
		}
	}
	for _, d := range ends.GetDetails() {
		if int(d.GetIndex()) >= n {
			return nil, status.Errorf(codes.Internal, "the broker sent a job end's detail for index %d of %d jobs", d.GetIndex(), n)
		}
		j := out[d.GetIndex()]
		j.Result, j.DeadReason = d.GetResult(), job.DeadReason(d.GetDeadReason())
		j.LastErrorType, j.LastErrorMessage = d.GetLastErrorType(), d.GetLastErrorMessage()
	}
	return out, nil
}

func timeFromProto(ts *timestamppb.Timestamp) time.Time {
	if ts == nil {
		return time.Time{}
	}
	return ts.AsTime()
}

func progressFromProto(p *jobwirev1.JobProgress) *job.Progress {
	if p == nil {
		return nil
	}
	return &job.Progress{Attempt: int(p.GetAttempt()), Fraction: p.GetFraction(), HasFraction: p.Fraction != nil,
		Message: p.GetMessage(), UpdatedAt: timeFromProto(p.GetUpdatedAt())}
}
