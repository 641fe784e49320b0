package server

import (
	"fmt"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/jobwire/jobwire/breaker"
	"github.com/jobwire/jobwire/broker"
	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/triage"
)

func ts(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

func dur(d time.Duration) *durationpb.Duration {
	if d == 0 {
		return nil
	}
	return durationpb.New(d)
}

// The numbering of job.State, job.DeadReason, job.Outcome and job.FailureKind matches the
// proto enums by design; the conversions below still go through named values so a change in
// either place fails to compile or shows in tests.

func stateToProto(s job.State) jobwirev1.JobState { return jobwirev1.JobState(s) }

func deadReasonToProto(r job.DeadReason) jobwirev1.DeadReason { return jobwirev1.DeadReason(r) }

func jobToProto(j *job.Job) *jobwirev1.Job { return (*protoSlab)(nil).job(j) }

// protoSlab hands out the messages of many jobs, and their timestamps, from a few slices
// rather than an allocation each: a watch sends jobs by hundreds. A nil slab allocates each.
type protoSlab struct {
	jobs  []jobwirev1.Job
	times []timestamppb.Timestamp
	durs  []durationpb.Duration
}

// newProtoSlab is a slab for n jobs of up to three timestamps and a duration each; what does
// not fit is allocated apart.
func newProtoSlab(n int) *protoSlab { return slabOf(n, 3, 1) }

// newOutcomeSlab is a slab for the outcomes of n jobs (outcome): a timestamp each.
func newOutcomeSlab(n int) *protoSlab { return slabOf(n, 1, 0) }

func slabOf(n, times, durs int) *protoSlab {
	return &protoSlab{jobs: make([]jobwirev1.Job, 0, n), times: make([]timestamppb.Timestamp, 0, times*n),
		durs: make([]durationpb.Duration, 0, durs*n)}
}

func (a *protoSlab) ts(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() || a == nil || len(a.times) == cap(a.times) {
		return ts(t)
	}
	a.times = append(a.times, timestamppb.Timestamp{Seconds: t.Unix(), Nanos: int32(t.Nanosecond())})
	return &a.times[len(a.times)-1]
}

func (a *protoSlab) dur(d time.Duration) *durationpb.Duration {
	if d == 0 || a == nil || len(a.durs) == cap(a.durs) {
		return dur(d)
	}
	a.durs = append(a.durs, durationpb.Duration{Seconds: int64(d / time.Second), Nanos: int32(d % time.Second)})
	return &a.durs[len(a.durs)-1]
}

// msg is an empty job message.
func (a *protoSlab) msg() *jobwirev1.Job {
	if a == nil || len(a.jobs) == cap(a.jobs) {
		return new(jobwirev1.Job)
	}
	a.jobs = a.jobs[:len(a.jobs)+1]
	return &a.jobs[len(a.jobs)-1]
}

// job is j as the API sends it.
func (a *protoSlab) job(j *job.Job) *jobwirev1.Job { return a.jobOf(j, true) }

// outcome is how j ended, as a wait (WatchJobsRequest.final_only) is sent it: its id, type,
// queue, state, attempts, end, dead reason, last error and result. A wait of thousands of jobs
// is mostly these messages; the fields it leaves out took the broker and the waiter about as
// long again to encode and decode.
func (a *protoSlab) outcome(j *job.Job) *jobwirev1.Job {
	out := a.msg()
	*out = jobwirev1.Job{Id: j.ID, Type: j.Type, Queue: j.Queue, State: stateToProto(j.State),
		Attempts: int32(j.Attempts), FinishedAt: a.ts(j.FinishedAt), DeadReason: deadReasonToProto(j.DeadReason),
		LastErrorType: j.LastErrorType, LastErrorMessage: j.LastErrorMessage, Result: j.Result}
	return out
}

// endsToProto is how jobs ended as columns (WatchJobsRequest.columns): the same fields as
// outcome, in a message for all of them rather than one with a timestamp each, each type and
// queue named once.
func endsToProto(jobs []*job.Job) *jobwirev1.JobEnds {
	n := len(jobs)
	out := &jobwirev1.JobEnds{Ids: make([]int64, n), States: make([]jobwirev1.JobState, n),
		Attempts: make([]int32, n), FinishedAtUnixNanos: make([]int64, n), Types: make([]uint32, n), Queues: make([]uint32, n)}
	names := make(map[string]uint32, 2)
	name := func(s string) uint32 {
		i, ok := names[s]
		if !ok {
			i = uint32(len(out.Names))
			names[s] = i
			out.Names = append(out.Names, s)
		}
		return i
	}
	for i, j := range jobs {
		out.Ids[i], out.States[i], out.Attempts[i] = j.ID, stateToProto(j.State), int32(j.Attempts)
		if !j.FinishedAt.IsZero() {
			out.FinishedAtUnixNanos[i] = j.FinishedAt.UnixNano()
		}
		out.Types[i], out.Queues[i] = name(j.Type), name(j.Queue)
		if len(j.Result) > 0 || j.DeadReason != job.DeadNone || j.LastErrorType != "" || j.LastErrorMessage != "" {
			out.Details = append(out.Details, &jobwirev1.JobEndDetail{Index: uint32(i), Result: j.Result,
				DeadReason: deadReasonToProto(j.DeadReason), LastErrorType: j.LastErrorType, LastErrorMessage: j.LastErrorMessage})
		}
	}
	return out
}

// watched is j as WatchJobs sends it: without payload or attempt history.
func (a *protoSlab) watched(j *job.Job) *jobwirev1.Job { return a.jobOf(j, false) }

func (a *protoSlab) jobOf(j *job.Job, whole bool) *jobwirev1.Job {
	out := a.msg()
	*out = jobwirev1.Job{
		Id:               j.ID,
		Type:             j.Type,
		Queue:            j.Queue,
		Priority:         int32(j.Priority),
		State:            stateToProto(j.State),
		Attempts:         int32(j.Attempts),
		MaxAttempts:      int32(j.MaxAttempts),
		RunAt:            a.ts(j.RunAt),
		CreatedAt:        a.ts(j.CreatedAt),
		FinishedAt:       a.ts(j.FinishedAt),
		IdempotencyKey:   j.IdempotencyKey,
		AttemptTimeout:   a.dur(j.AttemptTimeout),
		DeadReason:       deadReasonToProto(j.DeadReason),
		LastErrorType:    j.LastErrorType,
		LastErrorMessage: j.LastErrorMessage,
		Metadata:         j.Metadata,
		UniqueKey:        j.UniqueKey,
		UniqueStates:     uniqueStatesToProto(j.UniqueStates),
		Result:           j.Result,
		Progress:         progressToProto(j.Progress),
		ConcurrencyKey:   j.ConcurrencyKey,
		ConcurrencyLimit: int32(j.ConcurrencyLimit),
		ConcurrencyRule:  j.ConcurrencyRule,
		BatchId:          j.BatchID,
		RateKey:          j.RateKey,
	}
	var history []job.Attempt
	if whole {
		out.Payload, history = j.Payload, j.History
	}
	if n := len(history) - maxHistory; n > 0 {
		history, out.AttemptsOmitted = history[n:], int32(n)
	}
	for _, a := range history {
		out.AttemptHistory = append(out.AttemptHistory, attemptToProto(a))
	}
	if j.State == job.StateRunning {
		// The attempt in progress is part of the history a reader wants to see.
		out.AttemptHistory = append(out.AttemptHistory, &jobwirev1.Attempt{
			Number: int32(j.AttemptBase + j.Attempts), WorkerId: j.WorkerID, StartedAt: ts(j.StartedAt),
			Outcome: jobwirev1.AttemptOutcome_ATTEMPT_OUTCOME_RUNNING,
		})
	}
	return out
}

func attemptToProto(a job.Attempt) *jobwirev1.Attempt {
	return &jobwirev1.Attempt{
		Number:      int32(a.Number),
		WorkerId:    a.WorkerID,
		StartedAt:   ts(a.StartedAt),
		FinishedAt:  ts(a.FinishedAt),
		Outcome:     jobwirev1.AttemptOutcome(a.Outcome),
		FailureKind: jobwirev1.FailureKind(a.FailureKind),
		ErrorType:   a.ErrorType,
		Message:     a.Message,
		Details:     a.Details,
	}
}

func failureFromProto(f *jobwirev1.Failure) *job.Failure {
	kind := job.KindTransient
	if f.GetKind() == jobwirev1.FailureKind_FAILURE_KIND_FATAL {
		kind = job.KindFatal
	}
	return &job.Failure{
		Kind:       kind,
		ErrorType:  truncate(f.GetErrorType(), maxErrorType),
		Message:    truncate(f.GetMessage(), maxErrorMessage),
		Details:    truncate(f.GetDetails(), maxErrorDetails),
		RetryAfter: f.GetRetryAfter().AsDuration(),
		TimedOut:   f.GetTimedOut(),
	}
}

// refFromProto reads a lease named on the wire. Text that is not a lease token becomes the zero
// token, which names no lease: the message is refused as stale like any other wrong token.
func refFromProto(jobID int64, token string) job.LeaseRef {
	t, err := job.ParseLeaseToken(token)
	if err != nil {
		t = job.LeaseToken{}
	}
	return job.LeaseRef{JobID: jobID, Token: t}
}

func refsFromProto(in []*jobwirev1.LeaseRef) []job.LeaseRef {
	out := make([]job.LeaseRef, 0, len(in))
	for _, r := range in {
		out = append(out, refFromProto(r.GetJobId(), r.GetLeaseToken()))
	}
	return out
}

func refToProto(r job.LeaseRef) *jobwirev1.LeaseRef {
	return &jobwirev1.LeaseRef{JobId: r.JobID, LeaseToken: r.Token.String()}
}

func refsToProto(in []job.LeaseRef) []*jobwirev1.LeaseRef {
	out := make([]*jobwirev1.LeaseRef, 0, len(in))
	for _, r := range in {
		out = append(out, refToProto(r))
	}
	return out
}

var decisionToProto = map[triage.Verdict]jobwirev1.Decision{
	triage.Succeeded: jobwirev1.Decision_DECISION_SUCCEEDED,
	triage.Retry:     jobwirev1.Decision_DECISION_RETRY,
	triage.Dead:      jobwirev1.Decision_DECISION_DEAD,
}

var aboutToProto = map[broker.About]jobwirev1.RefusedMessage{
	broker.AboutStarted:   jobwirev1.RefusedMessage_REFUSED_MESSAGE_STARTED,
	broker.AboutHeartbeat: jobwirev1.RefusedMessage_REFUSED_MESSAGE_HEARTBEAT,
	broker.AboutResult:    jobwirev1.RefusedMessage_REFUSED_MESSAGE_RESULT,
	broker.AboutRelease:   jobwirev1.RefusedMessage_REFUSED_MESSAGE_RELEASE,
	broker.AboutProgress:  jobwirev1.RefusedMessage_REFUSED_MESSAGE_PROGRESS,
}

var cancelToProto = map[broker.CancelReason]jobwirev1.CancelReason{
	broker.CancelRequested: jobwirev1.CancelReason_CANCEL_REASON_REQUESTED,
	broker.CancelTimeout:   jobwirev1.CancelReason_CANCEL_REASON_TIMEOUT,
	broker.CancelLeaseLost: jobwirev1.CancelReason_CANCEL_REASON_LEASE_LOST,
}

// messageToProto turns a broker message into its wire form.
func messageToProto(m broker.Message) *jobwirev1.ConnectResponse {
	switch m := m.(type) {
	case broker.Assignment:
		return &jobwirev1.ConnectResponse{Message: &jobwirev1.ConnectResponse_Assignment{Assignment: &jobwirev1.Assignment{
			Job:            jobToProto(m.Job),
			Attempt:        int32(m.Attempt),
			LeaseToken:     m.Token.String(),
			LeaseDeadline:  ts(m.LeaseDeadline),
			AttemptTimeout: dur(m.AttemptTimeout),
			ParentResults:  parentResultsToProto(m.Parents),
		}}}
	case broker.ResultAck:
		ack := &jobwirev1.ResultAck{JobId: m.Ref.JobID, LeaseToken: m.Ref.Token.String(), Decision: decisionToProto[m.Decision.Verdict]}
		switch m.Decision.Verdict {
		case triage.Retry:
			ack.RetryAt = ts(m.Decision.RetryAt)
		case triage.Dead:
			ack.DeadReason = deadReasonToProto(m.Decision.Reason)
		}
		return &jobwirev1.ConnectResponse{Message: &jobwirev1.ConnectResponse_ResultAck{ResultAck: ack}}
	case broker.HeartbeatAck:
		return &jobwirev1.ConnectResponse{Message: &jobwirev1.ConnectResponse_HeartbeatAck{HeartbeatAck: &jobwirev1.HeartbeatAck{
			Extended: refsToProto(m.Extended), LeaseDeadline: ts(m.Deadline),
		}}}
	case broker.Refused:
		code := uint32(9) // FAILED_PRECONDITION
		switch m.Reason {
		case broker.RefusedBusy:
			code = 14 // UNAVAILABLE
		case broker.RefusedInvalid:
			code = 3 // INVALID_ARGUMENT
		}
		return &jobwirev1.ConnectResponse{Message: &jobwirev1.ConnectResponse_Refused{Refused: &jobwirev1.Refused{
			JobId: m.Ref.JobID, LeaseToken: m.Ref.Token.String(), RefusedMessage: aboutToProto[m.About], Code: code, Message: m.Message,
		}}}
	case broker.Cancel:
		return &jobwirev1.ConnectResponse{Message: &jobwirev1.ConnectResponse_Cancel{Cancel: &jobwirev1.Cancel{
			JobId: m.Ref.JobID, LeaseToken: m.Ref.Token.String(), Reason: cancelToProto[m.Reason],
		}}}
	case broker.Drain:
		return &jobwirev1.ConnectResponse{Message: &jobwirev1.ConnectResponse_Drain{Drain: &jobwirev1.DrainRequest{Reason: m.Reason}}}
	case broker.Welcome:
		return &jobwirev1.ConnectResponse{Message: &jobwirev1.ConnectResponse_Welcome{Welcome: &jobwirev1.Welcome{
			SessionId: m.SessionID, LeaseDuration: dur(m.LeaseDuration), HeartbeatInterval: dur(m.HeartbeatInterval),
			Lost: refsToProto(m.Lost), MaxResultBytes: int32(m.MaxResultBytes),
		}}}
	}
	return nil
}

var breakerStateToProto = map[breaker.State]jobwirev1.BreakerState{
	breaker.StateClosed:   jobwirev1.BreakerState_BREAKER_STATE_CLOSED,
	breaker.StateOpen:     jobwirev1.BreakerState_BREAKER_STATE_OPEN,
	breaker.StateHalfOpen: jobwirev1.BreakerState_BREAKER_STATE_HALF_OPEN,
}

func breakerToProto(i breaker.Info) *jobwirev1.BreakerInfo {
	return &jobwirev1.BreakerInfo{
		Type:             i.Type,
		State:            breakerStateToProto[i.State],
		FailuresInWindow: int32(i.FailuresInWindow),
		OpenedAt:         ts(i.OpenedAt),
		NextProbeAt:      ts(i.NextProbeAt),
		Generation:       i.Generation,
		ProbesInFlight:   int32(i.ProbesInFlight),
		Disabled:         i.Disabled,
		ProbeSuccesses:   int32(i.ProbeSuccesses),
		Mode:             modeName(i.Mode),
		CallsInWindow:    int32(i.Calls),
		Trip:             breakerTripToProto(i.Trip),
		ChangedAt:        ts(i.ChangedAt),
		ChangedReason:    reasonName(i.Changed),
	}
}

// modeName is a breaker mode's name, "" for none (a disabled breaker's config may have none).
func modeName(m breaker.Mode) string {
	if m != breaker.ModeRatio && m != breaker.ModeCount {
		return ""
	}
	return m.String()
}

// reasonName is a transition reason's name, "" for none.
func reasonName(r breaker.Reason) string {
	if r == 0 {
		return ""
	}
	return r.String()
}

func breakerTripToProto(t *breaker.Trip) *jobwirev1.BreakerTrip {
	if t == nil {
		return nil
	}
	out := &jobwirev1.BreakerTrip{
		Reason:   reasonName(t.Reason),
		Mode:     modeName(t.Mode),
		At:       ts(t.At),
		Calls:    int32(t.Calls),
		Failures: int32(t.Failures),
		Ratio:    t.Ratio,
		Window:   durationpb.New(t.Window),
	}
	for _, n := range t.Last {
		out.LastFailures = append(out.LastFailures, &jobwirev1.BreakerFailure{
			JobId: n.Job, Kind: n.Kind.String(), Message: n.Message, At: ts(n.At)})
	}
	return out
}

// A failure's texts are stored with every attempt and returned by GetJob, so each is cut to a
// bound (docs/security.md, "Limits"): with at most maxHistory attempts in a response and a
// payload of at most 1 MiB, a job always fits in a 4 MiB response.
const (
	maxErrorType    = 256
	maxErrorMessage = 2 << 10
	maxErrorDetails = 8 << 10
	maxHistory      = 100
)

// truncate cuts s to at most limit bytes, on a character boundary, and says how much was cut.
func truncate(s string, limit int) string {
	if len(s) <= limit {
		return s
	}
	marker := fmt.Sprintf("...[%d bytes truncated]", len(s))
	cut := max(0, limit-len(marker))
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	out := s[:cut] + marker
	if len(out) > limit {
		out = marker[:min(len(marker), limit)]
	}
	return out
}

var waitReasons = map[broker.WaitReason]jobwirev1.WaitReason{
	broker.WaitScheduled:      jobwirev1.WaitReason_WAIT_REASON_SCHEDULED,
	broker.WaitQueuePaused:    jobwirev1.WaitReason_WAIT_REASON_QUEUE_PAUSED,
	broker.WaitQueueAtCap:     jobwirev1.WaitReason_WAIT_REASON_QUEUE_AT_CAP,
	broker.WaitBreakerOpen:    jobwirev1.WaitReason_WAIT_REASON_BREAKER_OPEN,
	broker.WaitBreakerProbing: jobwirev1.WaitReason_WAIT_REASON_BREAKER_PROBING,
	broker.WaitNoWorker:       jobwirev1.WaitReason_WAIT_REASON_NO_WORKER,
	broker.WaitWorkerSlot:     jobwirev1.WaitReason_WAIT_REASON_WORKER_SLOT,
	broker.WaitKeyAtLimit:     jobwirev1.WaitReason_WAIT_REASON_CONCURRENCY_KEY,
	broker.WaitRateLimited:    jobwirev1.WaitReason_WAIT_REASON_RATE_LIMITED,
	broker.WaitRateLimitedKey: jobwirev1.WaitReason_WAIT_REASON_RATE_LIMITED_KEY,
}

// waitingToProto is nil for a job that waits for nothing.
func waitingToProto(w broker.Waiting) *jobwirev1.JobWaiting {
	r, ok := waitReasons[w.Reason]
	if !ok {
		return nil
	}
	return &jobwirev1.JobWaiting{Reason: r, Detail: w.Detail, Until: ts(w.Until), Limit: int32(w.Limit)}
}
