package client

import (
	"context"
	"fmt"
	"iter"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/job"
)

// JobPage is one page of a job listing. An empty NextPageToken means there are no more pages.
type JobPage struct {
	Jobs          []*job.Job
	NextPageToken string
}

// ListJobsParams filters ListJobs. Zero fields match any job.
type ListJobsParams struct {
	State job.State
	Queue string
	Type  string
	// Sort is the column to sort by (created_at by default; see ListJobsRequest.sort for the
	// others), from the largest value down unless Ascending.
	Sort      string
	Ascending bool
	// PageSize is 1..1000; 0 means the broker default (100).
	PageSize int
	// PageToken continues a listing in the sort it was issued for.
	PageToken string
}

// ListJobs returns one page of jobs. Jobs in a listing carry no attempt history; use Get for it.
func (c *Client) ListJobs(ctx context.Context, p *ListJobsParams) (*JobPage, error) {
	const op = "ListJobs"
	if p == nil {
		p = &ListJobsParams{}
	}
	size, err := toInt32(op, "PageSize", p.PageSize)
	if err != nil {
		return nil, err
	}
	resp, err := c.admin.ListJobs(ctx, &jobwirev1.ListJobsRequest{
		State:     jobwirev1.JobState(p.State),
		Queue:     p.Queue,
		Type:      p.Type,
		PageSize:  size,
		PageToken: p.PageToken,
		Sort:      p.Sort,
		Ascending: p.Ascending,
	})
	if err != nil {
		return nil, wrapErr(op, err)
	}
	return &JobPage{Jobs: jobsFromProto(resp.GetJobs()), NextPageToken: resp.GetNextPageToken()}, nil
}

// AllJobs walks every page of ListJobs from p.PageToken on, fetching pages as the loop asks for
// them. It stops after yielding the first error.
func (c *Client) AllJobs(ctx context.Context, p *ListJobsParams) iter.Seq2[*job.Job, error] {
	q := ListJobsParams{}
	if p != nil {
		q = *p
	}
	return paginate(q.PageToken, func(token string) (*JobPage, error) {
		q.PageToken = token
		return c.ListJobs(ctx, &q)
	})
}

// DeadJobFilter selects dead jobs. Zero fields match any.
type DeadJobFilter struct {
	Queue     string
	Type      string
	Reason    job.DeadReason
	ErrorType string
	// DeadAfter and DeadBefore bound when the job died.
	DeadAfter  time.Time
	DeadBefore time.Time
}

// ListDeadJobsParams filters ListDeadJobs.
type ListDeadJobsParams struct {
	Filter DeadJobFilter
	// Sort is the column to sort by (died_at by default; see ListDeadJobsRequest.sort for the
	// others), from the largest value down unless Ascending.
	Sort      string
	Ascending bool
	// PageSize is 1..1000; 0 means the broker default.
	PageSize int
	// PageToken continues a listing in the sort it was issued for.
	PageToken string
}

// ListDeadJobs returns one page of the dead-letter queue, the newest death first unless
// p.Sort says otherwise.
func (c *Client) ListDeadJobs(ctx context.Context, p *ListDeadJobsParams) (*JobPage, error) {
	const op = "ListDeadJobs"
	if p == nil {
		p = &ListDeadJobsParams{}
	}
	size, err := toInt32(op, "PageSize", p.PageSize)
	if err != nil {
		return nil, err
	}
	resp, err := c.admin.ListDeadJobs(ctx, &jobwirev1.ListDeadJobsRequest{
		Filter:    filterToProto(&p.Filter),
		PageSize:  size,
		PageToken: p.PageToken,
		Sort:      p.Sort,
		Ascending: p.Ascending,
	})
	if err != nil {
		return nil, wrapErr(op, err)
	}
	return &JobPage{Jobs: jobsFromProto(resp.GetJobs()), NextPageToken: resp.GetNextPageToken()}, nil
}

// AllDeadJobs walks every page of ListDeadJobs, like AllJobs.
func (c *Client) AllDeadJobs(ctx context.Context, p *ListDeadJobsParams) iter.Seq2[*job.Job, error] {
	q := ListDeadJobsParams{}
	if p != nil {
		q = *p
	}
	return paginate(q.PageToken, func(token string) (*JobPage, error) {
		q.PageToken = token
		return c.ListDeadJobs(ctx, &q)
	})
}

// paginate yields the jobs of successive pages until a page has no next token.
func paginate(first string, fetch func(token string) (*JobPage, error)) iter.Seq2[*job.Job, error] {
	return func(yield func(*job.Job, error) bool) {
		token := first
		for {
			page, err := fetch(token)
			if err != nil {
				yield(nil, err)
				return
			}
			for _, j := range page.Jobs {
				if !yield(j, nil) {
					return
				}
			}
			if page.NextPageToken == "" {
				return
			}
			if page.NextPageToken == token {
				// A broker bug here would otherwise loop forever.
				yield(nil, fmt.Errorf("jobwire: pagination: broker returned the same page token %q twice", token))
				return
			}
			token = page.NextPageToken
		}
	}
}

// Selection picks dead jobs for a bulk action: by IDs or by Filter, never both.
type Selection struct {
	IDs    []int64
	Filter *DeadJobFilter
	// Limit is the most jobs one call may touch (1..10000); 0 means the broker default (1000).
	Limit int
	// Preview only counts and samples the matched jobs; nothing changes.
	Preview bool
}

// BulkResult reports a bulk action on dead jobs.
type BulkResult struct {
	// Matched is how many jobs the selection matched, at most the limit.
	Matched int
	// Affected is how many changed; 0 on a preview.
	Affected int
	// Sample is up to 10 of the matched jobs.
	Sample []*job.Job
}

// RequeueParams says which dead jobs to requeue and how.
type RequeueParams struct {
	Selection Selection
	// Priority, when set, replaces each job's priority.
	Priority *int
	// Payload, when non-nil, replaces the payload; allowed only with exactly one ID selected.
	Payload []byte
	// RunAt schedules the requeued jobs; zero means now.
	RunAt time.Time
}

// RequeueDeadJobs sends dead jobs back to run with their attempts reset.
func (c *Client) RequeueDeadJobs(ctx context.Context, p *RequeueParams) (*BulkResult, error) {
	const op = "RequeueDeadJobs"
	if p == nil {
		return nil, invalidArg(op, "no selection")
	}
	sel, err := selectionToProto(op, &p.Selection)
	if err != nil {
		return nil, err
	}
	req := &jobwirev1.RequeueDeadJobsRequest{Selection: sel, Payload: p.Payload}
	if p.Payload != nil && len(p.Selection.IDs) != 1 {
		return nil, invalidArg(op, "a replacement payload needs exactly one job id, got %d", len(p.Selection.IDs))
	}
	if p.Priority != nil {
		prio, err := toInt32(op, "Priority", *p.Priority)
		if err != nil {
			return nil, err
		}
		req.Priority = &prio
	}
	if !p.RunAt.IsZero() {
		req.RunAt = timestamppb.New(p.RunAt)
	}
	resp, err := c.admin.RequeueDeadJobs(ctx, req)
	if err != nil {
		return nil, wrapErr(op, err)
	}
	return &BulkResult{Matched: int(resp.GetMatched()), Affected: int(resp.GetAffected()), Sample: jobsFromProto(resp.GetSample())}, nil
}

// PurgeDeadJobs deletes dead jobs for good.
func (c *Client) PurgeDeadJobs(ctx context.Context, sel *Selection) (*BulkResult, error) {
	const op = "PurgeDeadJobs"
	if sel == nil {
		return nil, invalidArg(op, "no selection")
	}
	pb, err := selectionToProto(op, sel)
	if err != nil {
		return nil, err
	}
	resp, err := c.admin.PurgeDeadJobs(ctx, &jobwirev1.PurgeDeadJobsRequest{Selection: pb})
	if err != nil {
		return nil, wrapErr(op, err)
	}
	return &BulkResult{Matched: int(resp.GetMatched()), Affected: int(resp.GetAffected()), Sample: jobsFromProto(resp.GetSample())}, nil
}

// ErrorGroup is the dead jobs that share an error type.
type ErrorGroup struct {
	ErrorType     string
	Count         int64
	LastSeen      time.Time
	SampleMessage string
	// Fingerprint is set when ErrorType is generic (Go's "error", Error, Exception): the group
	// is the jobs of that type whose message has this fingerprint (numbers, hex ids and UUIDs
	// replaced by <n>, <hex> and <uuid>).
	Fingerprint string
}

// TopDeadErrors groups the dead jobs f matches by error type, largest group first. limit 0
// means the broker default (20 groups).
func (c *Client) TopDeadErrors(ctx context.Context, f *DeadJobFilter, limit int) ([]ErrorGroup, error) {
	const op = "TopDeadErrors"
	n, err := toInt32(op, "limit", limit)
	if err != nil {
		return nil, err
	}
	resp, err := c.admin.TopDeadErrors(ctx, &jobwirev1.TopDeadErrorsRequest{Filter: filterToProto(f), Limit: n})
	if err != nil {
		return nil, wrapErr(op, err)
	}
	out := make([]ErrorGroup, 0, len(resp.GetGroups()))
	for _, g := range resp.GetGroups() {
		out = append(out, ErrorGroup{
			ErrorType:     g.GetErrorType(),
			Count:         g.GetCount(),
			LastSeen:      timeFromProto(g.GetLastSeen()),
			SampleMessage: g.GetSampleMessage(),
			Fingerprint:   g.GetFingerprint(),
		})
	}
	return out, nil
}

// PurgeFinishedJobs deletes succeeded jobs that finished more than olderThan ago and returns
// how many it deleted.
func (c *Client) PurgeFinishedJobs(ctx context.Context, olderThan time.Duration) (int64, error) {
	const op = "PurgeFinishedJobs"
	if olderThan <= 0 {
		return 0, invalidArg(op, "olderThan must be positive, got %s", olderThan)
	}
	resp, err := c.admin.PurgeFinishedJobs(ctx, &jobwirev1.PurgeFinishedJobsRequest{OlderThan: durationpb.New(olderThan)})
	if err != nil {
		return 0, wrapErr(op, err)
	}
	return resp.GetPurged(), nil
}

// QueueInfo is one queue's shape at the time of the call.
type QueueInfo struct {
	Name   string
	Paused bool
	// ConcurrencyLimit caps running jobs across all workers; 0 means no cap.
	ConcurrencyLimit int
	// DepthByState counts the queue's jobs by state. States the client does not know are left out.
	DepthByState map[job.State]int64
	Running      int64
	// OldestReadyAge is how long the oldest ready job has waited: the queue's lag.
	OldestReadyAge time.Duration
}

// ListQueues returns every known queue.
func (c *Client) ListQueues(ctx context.Context) ([]QueueInfo, error) {
	resp, err := c.admin.ListQueues(ctx, &jobwirev1.ListQueuesRequest{})
	if err != nil {
		return nil, wrapErr("ListQueues", err)
	}
	return queuesFromProto(resp.GetQueues()), nil
}

// PauseQueue stops dispatch from a queue; running jobs finish. A queue that does not exist yet
// is created, so it can be held before its first job.
func (c *Client) PauseQueue(ctx context.Context, queue string) (*QueueInfo, error) {
	resp, err := c.admin.PauseQueue(ctx, &jobwirev1.PauseQueueRequest{Queue: queue})
	if err != nil {
		return nil, wrapErr("PauseQueue", err)
	}
	q := queueFromProto(resp.GetQueue())
	return &q, nil
}

// ResumeQueue restarts dispatch from a paused queue. A queue that does not exist matches
// ErrNotFound (resuming never creates one).
func (c *Client) ResumeQueue(ctx context.Context, queue string) (*QueueInfo, error) {
	resp, err := c.admin.ResumeQueue(ctx, &jobwirev1.ResumeQueueRequest{Queue: queue})
	if err != nil {
		return nil, wrapErr("ResumeQueue", err)
	}
	q := queueFromProto(resp.GetQueue())
	return &q, nil
}

// SetQueueLimit caps how many of a queue's jobs run at once across all workers; 0 removes the
// cap. A queue that does not exist matches ErrNotFound: to cap one before its first job, pause
// it, set the limit, then resume it.
func (c *Client) SetQueueLimit(ctx context.Context, queue string, limit int) (*QueueInfo, error) {
	const op = "SetQueueLimit"
	n, err := toInt32(op, "limit", limit)
	if err != nil {
		return nil, err
	}
	resp, err := c.admin.SetQueueLimit(ctx, &jobwirev1.SetQueueLimitRequest{Queue: queue, Limit: n})
	if err != nil {
		return nil, wrapErr(op, err)
	}
	q := queueFromProto(resp.GetQueue())
	return &q, nil
}

// StateCount is how many jobs of one queue and type are in one state.
type StateCount struct {
	Queue string
	Type  string
	State job.State
	Count int64
}

// RecentCounts counts finished attempts in a trailing window.
type RecentCounts struct {
	Window    time.Duration
	Succeeded int64
	Failed    int64
	Dead      int64
}

// Stats is a snapshot of the broker.
type Stats struct {
	Counts []StateCount
	Recent []RecentCounts
	Queues []QueueInfo
	// StorageRetries counts storage operations retried, by error code name.
	StorageRetries map[string]int64
	// Concurrency are the limits of running jobs per key with how busy their keys are.
	Concurrency []ConcurrencyInfo
	// RateLimits are the rate limits with each one's allowance now.
	RateLimits []RateLimitInfo
}

// GetStats returns a snapshot of the broker's counters.
func (c *Client) GetStats(ctx context.Context) (*Stats, error) {
	resp, err := c.admin.GetStats(ctx, &jobwirev1.GetStatsRequest{})
	if err != nil {
		return nil, wrapErr("GetStats", err)
	}
	s := &Stats{Queues: queuesFromProto(resp.GetQueues()), StorageRetries: resp.GetStorageRetries(),
		Concurrency: concurrencyFromProto(resp.GetConcurrency()),

		RateLimits: rateLimitsFromProto(resp.GetRateLimits())}
	for _, sc := range resp.GetCounts() {
		s.Counts = append(s.Counts, StateCount{Queue: sc.GetQueue(), Type: sc.GetType(), State: job.State(sc.GetState()), Count: sc.GetCount()})
	}
	for _, r := range resp.GetRecent() {
		s.Recent = append(s.Recent, RecentCounts{Window: r.GetWindow().AsDuration(), Succeeded: r.GetSucceeded(), Failed: r.GetFailed(), Dead: r.GetDead()})
	}
	return s, nil
}

// BreakerState is a circuit breaker's state.
type BreakerState int

// Breaker states; the numbering is the wire's.
const (
	BreakerClosed   BreakerState = 1
	BreakerOpen     BreakerState = 2
	BreakerHalfOpen BreakerState = 3
)

func (s BreakerState) String() string {
	switch s {
	case BreakerClosed:
		return "CLOSED"
	case BreakerOpen:
		return "OPEN"
	case BreakerHalfOpen:
		return "HALF_OPEN"
	}
	return fmt.Sprintf("BreakerState(%d)", int(s))
}

// ParseBreakerState reads "closed", "open" or "half-open" in any case, with '-' or '_'.
func ParseBreakerState(name string) (BreakerState, error) {
	switch strings.ReplaceAll(strings.ToUpper(strings.TrimSpace(name)), "-", "_") {
	case "CLOSED":
		return BreakerClosed, nil
	case "OPEN":
		return BreakerOpen, nil
	case "HALF_OPEN":
		return BreakerHalfOpen, nil
	}
	return 0, fmt.Errorf("unknown breaker state %q (want closed, open or half-open)", name)
}

// Breaker is one job type's circuit breaker.
type Breaker struct {
	Type             string
	State            BreakerState
	FailuresInWindow int
	OpenedAt         time.Time
	NextProbeAt      time.Time
	// Generation increases on every state change, so two reads can tell whether it moved.
	Generation     int64
	ProbesInFlight int
	ProbeSuccesses int
	// Disabled: turned off by the broker's configuration; the type is never held back.
	Disabled bool
}

// ListBreakers returns every job type's breaker.
func (c *Client) ListBreakers(ctx context.Context) ([]Breaker, error) {
	resp, err := c.admin.ListBreakers(ctx, &jobwirev1.ListBreakersRequest{})
	if err != nil {
		return nil, wrapErr("ListBreakers", err)
	}
	out := make([]Breaker, 0, len(resp.GetBreakers()))
	for _, b := range resp.GetBreakers() {
		out = append(out, breakerFromProto(b))
	}
	return out, nil
}

// Worker is one connected worker stream, as the broker sees it.
type Worker struct {
	SessionID string
	WorkerID  string
	JobTypes  []string
	// Queues is empty for a worker that serves every queue.
	Queues   []string
	Capacity int
	// LeasesHeld counts the jobs the stream holds (assigned, running or being finished);
	// Running counts those whose handler started.
	LeasesHeld, Running int
	// Draining: the stream gets no more assignments.
	Draining    bool
	ConnectedAt time.Time
}

// ListWorkers returns the connected worker streams, in dispatch rotation order.
func (c *Client) ListWorkers(ctx context.Context) ([]Worker, error) {
	resp, err := c.admin.ListWorkers(ctx, &jobwirev1.ListWorkersRequest{})
	if err != nil {
		return nil, wrapErr("ListWorkers", err)
	}
	out := make([]Worker, 0, len(resp.GetWorkers()))
	for _, w := range resp.GetWorkers() {
		out = append(out, Worker{SessionID: w.GetSessionId(), WorkerID: w.GetWorkerId(),
			JobTypes: w.GetJobTypes(), Queues: w.GetQueues(), Capacity: int(w.GetCapacity()),
			LeasesHeld: int(w.GetLeasesHeld()), Running: int(w.GetRunning()), Draining: w.GetDraining(),
			ConnectedAt: timeFromProto(w.GetConnectedAt())})
	}
	return out, nil
}

// BrokerEntry is one broker that serves the database, as the database knows it.
type BrokerEntry struct {
	// ID is its broker id, never reused within a PostgreSQL database; empty on SQLite.
	ID   string
	Addr string
	Host string
	PID  int
	// StartedAt and LastSeen: when it started, and last wrote that it is alive.
	StartedAt, LastSeen time.Time
	// Leader: it runs the maintenance that must run once. Alive: it was seen within a few
	// election intervals. Answering: it answered this call.
	Leader, Alive, Answering bool
}

// ListBrokers returns the brokers that serve the database, oldest first: on PostgreSQL every
// broker seen in the last week, on SQLite the one answering.
func (c *Client) ListBrokers(ctx context.Context) ([]BrokerEntry, error) {
	resp, err := c.admin.ListBrokers(ctx, &jobwirev1.ListBrokersRequest{})
	if err != nil {
		return nil, wrapErr("ListBrokers", err)
	}
	out := make([]BrokerEntry, 0, len(resp.GetBrokers()))
	for _, b := range resp.GetBrokers() {
		out = append(out, BrokerEntry{ID: b.GetId(), Addr: b.GetAddr(), Host: b.GetHost(), PID: int(b.GetPid()),
			StartedAt: timeFromProto(b.GetStartedAt()), LastSeen: timeFromProto(b.GetLastSeen()),
			Leader: b.GetLeader(), Alive: b.GetAlive(), Answering: b.GetAnswering()})
	}
	return out, nil
}

// ResetBreaker closes a job type's breaker and forgets its failures.
func (c *Client) ResetBreaker(ctx context.Context, jobType string) (*Breaker, error) {
	resp, err := c.admin.ResetBreaker(ctx, &jobwirev1.ResetBreakerRequest{Type: jobType})
	if err != nil {
		return nil, wrapErr("ResetBreaker", err)
	}
	b := breakerFromProto(resp.GetBreaker())
	return &b, nil
}

// ForceBreaker puts a job type's breaker in the given state, for example OPEN to stop a type
// while its downstream is being repaired.
func (c *Client) ForceBreaker(ctx context.Context, jobType string, state BreakerState) (*Breaker, error) {
	const op = "ForceBreaker"
	if state < BreakerClosed || state > BreakerHalfOpen {
		return nil, invalidArg(op, "unknown breaker state %d", int(state))
	}
	resp, err := c.admin.ForceBreaker(ctx, &jobwirev1.ForceBreakerRequest{Type: jobType, State: jobwirev1.BreakerState(state)})
	if err != nil {
		return nil, wrapErr(op, err)
	}
	b := breakerFromProto(resp.GetBreaker())
	return &b, nil
}

func selectionToProto(op string, s *Selection) (*jobwirev1.BulkSelection, error) {
	if len(s.IDs) > 0 && s.Filter != nil {
		return nil, invalidArg(op, "select jobs by IDs or by Filter, not both")
	}
	limit, err := toInt32(op, "Limit", s.Limit)
	if err != nil {
		return nil, err
	}
	return &jobwirev1.BulkSelection{
		Ids:     s.IDs,
		Filter:  filterToProto(s.Filter),
		Limit:   limit,
		Preview: s.Preview,
	}, nil
}
