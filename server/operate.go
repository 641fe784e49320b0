package server

import (
	"context"
	"encoding/base64"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jobwire/jobwire/broker"
	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/job"
)

// The operator's calls of the admin service: jobs, the dead-letter queue, retention, queues
// and stats. Listings and bulk samples carry no payload (a page of large payloads could pass
// the message size limit); GetJob shows one job's payload and history.

const (
	defaultPageSize   = 100
	maxPageSize       = 1000
	defaultBulkLimit  = 1000
	maxBulkLimit      = 10000
	defaultErrorLimit = 20
	maxErrorLimit     = 1000
	maxQueueLimit     = 1000000
)

func pageSize(n int32) int {
	if n == 0 {
		return defaultPageSize
	}
	return int(n)
}

// Page tokens are opaque to callers: base64 of the position after the page's last job.

func encodeJobToken(id int64) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(id, 10)))
}

func decodeJobToken(tok string) (int64, error) {
	if tok == "" {
		return 0, nil
	}
	raw, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil {
		return 0, invalid("page_token", "is not a token this broker issued")
	}
	id, err := strconv.ParseInt(string(raw), 10, 64)
	if err != nil || id < 0 {
		return 0, invalid("page_token", "is not a token this broker issued")
	}
	return id, nil
}

// listOrder reads a listing's sort from a request: one of the columns allowed (the first when
// sort is empty), descending unless ascending.
func listOrder(sort string, ascending bool, allowed []broker.SortColumn) (broker.ListOrder, error) {
	if sort == "" {
		return broker.ListOrder{By: allowed[0], Asc: ascending}, nil
	}
	if !slices.Contains(allowed, broker.SortColumn(sort)) {
		names := make([]string, len(allowed))
		for i, c := range allowed {
			names[i] = string(c)
		}
		return broker.ListOrder{}, invalid("sort", "%q is not a column this list sorts by; use one of %s", sort, strings.Join(names, ", "))
	}
	return broker.ListOrder{By: broker.SortColumn(sort), Asc: ascending}, nil
}

func direction(asc bool) string {
	if asc {
		return "asc"
	}
	return "desc"
}

// A list's page token names the sort it continues, so a token is never read in another
// order (which would skip or repeat jobs): the column, the direction, then the last job's id
// and its value in the column, the text last since it may hold anything.

func encodeListToken(o broker.ListOrder, c broker.ListCursor) string {
	return base64.RawURLEncoding.EncodeToString(fmt.Appendf(nil, "%s,%s,%d,%d,%s", o.By, direction(o.Asc), c.ID, c.Int, c.Str))
}

func decodeListToken(tok string, o broker.ListOrder) (*broker.ListCursor, error) {
	if tok == "" {
		return nil, nil
	}
	bad := invalid("page_token", "is not a token this broker issued")
	raw, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil {
		return nil, bad
	}
	parts := strings.SplitN(string(raw), ",", 5)
	if len(parts) != 5 {
		return nil, bad
	}
	id, err1 := strconv.ParseInt(parts[2], 10, 64)
	n, err2 := strconv.ParseInt(parts[3], 10, 64)
	if err1 != nil || err2 != nil || id <= 0 {
		return nil, bad
	}
	if parts[0] != string(o.By) || parts[1] != direction(o.Asc) {
		return nil, invalid("page_token", "continues a list sorted by %s %s, not by %s %s: keep the sort of the first page, or start again without a token",
			parts[0], parts[1], o.By, direction(o.Asc))
	}
	return &broker.ListCursor{Int: n, Str: parts[4], ID: id}, nil
}

func deadFilterFromProto(f *jobwirev1.DeadJobFilter) broker.DeadFilter {
	out := broker.DeadFilter{
		Queue:     f.GetQueue(),
		Type:      f.GetType(),
		Reason:    job.DeadReason(f.GetReason()),
		ErrorType: f.GetErrorType(),
	}
	if f.GetDeadAfter() != nil {
		out.DeadAfter = f.GetDeadAfter().AsTime()
	}
	if f.GetDeadBefore() != nil {
		out.DeadBefore = f.GetDeadBefore().AsTime()
	}
	return out
}

func jobsToProto(jobs []*job.Job) []*jobwirev1.Job {
	out := make([]*jobwirev1.Job, len(jobs))
	for i, j := range jobs {
		out[i] = jobToProto(j)
	}
	return out
}

func (a *admin) ListJobs(ctx context.Context, req *jobwirev1.ListJobsRequest) (*jobwirev1.ListJobsResponse, error) {
	order, err := listOrder(req.GetSort(), req.GetAscending(), broker.JobSortColumns())
	if err != nil {
		return nil, err
	}
	after, err := decodeListToken(req.GetPageToken(), order)
	if err != nil {
		return nil, err
	}
	size := pageSize(req.GetPageSize())
	// One more than the page tells whether another page follows.
	jobs, err := a.b.ListJobs(ctx, broker.JobFilter{State: job.State(req.GetState()), Queue: req.GetQueue(),
		Type: req.GetType()}, order, after, size+1)
	if err != nil {
		return nil, toStatus(err)
	}
	out := &jobwirev1.ListJobsResponse{}
	if len(jobs) > size {
		jobs = jobs[:size]
		c, err := broker.JobCursorOf(order, jobs[size-1])
		if err != nil {
			return nil, toStatus(err)
		}
		out.NextPageToken = encodeListToken(order, c)
	}
	out.Jobs = jobsToProto(jobs)
	return out, nil
}

func (a *admin) ListDeadJobs(ctx context.Context, req *jobwirev1.ListDeadJobsRequest) (*jobwirev1.ListDeadJobsResponse, error) {
	order, err := listOrder(req.GetSort(), req.GetAscending(), broker.DeadSortColumns())
	if err != nil {
		return nil, err
	}
	after, err := decodeListToken(req.GetPageToken(), order)
	if err != nil {
		return nil, err
	}
	size := pageSize(req.GetPageSize())
	jobs, err := a.b.ListDeadJobs(ctx, deadFilterFromProto(req.GetFilter()), order, after, size+1)
	if err != nil {
		return nil, toStatus(err)
	}
	out := &jobwirev1.ListDeadJobsResponse{}
	if len(jobs) > size {
		jobs = jobs[:size]
		c, err := broker.DeadCursorOf(order, jobs[size-1])
		if err != nil {
			return nil, toStatus(err)
		}
		out.NextPageToken = encodeListToken(order, c)
	}
	out.Jobs = jobsToProto(jobs)
	return out, nil
}

func selectionFromProto(sel *jobwirev1.BulkSelection) broker.Selection {
	out := broker.Selection{IDs: sel.GetIds(), Limit: int(sel.GetLimit()), Preview: sel.GetPreview()}
	if out.Limit == 0 {
		out.Limit = defaultBulkLimit
	}
	switch {
	case sel.GetAll():
		out.Filter = &broker.DeadFilter{} // every dead job
	case sel.GetFilter() != nil:
		f := deadFilterFromProto(sel.GetFilter())
		out.Filter = &f
	}
	return out
}

func (a *admin) RequeueDeadJobs(ctx context.Context, req *jobwirev1.RequeueDeadJobsRequest) (*jobwirev1.RequeueDeadJobsResponse, error) {
	rq := broker.Requeue{Payload: req.Payload}
	if req.Priority != nil {
		p := int(req.GetPriority())
		rq.Priority = &p
	}
	if req.GetRunAt() != nil {
		rq.RunAt = req.GetRunAt().AsTime()
	}
	res, err := a.b.RequeueDead(ctx, selectionFromProto(req.GetSelection()), rq)
	if err != nil {
		return nil, toStatus(err)
	}
	return &jobwirev1.RequeueDeadJobsResponse{Matched: int32(res.Matched), Affected: int32(res.Affected),
		Sample: jobsToProto(res.Sample), MatchedIds: res.IDs}, nil
}

func (a *admin) PurgeDeadJobs(ctx context.Context, req *jobwirev1.PurgeDeadJobsRequest) (*jobwirev1.PurgeDeadJobsResponse, error) {
	res, err := a.b.PurgeDead(ctx, selectionFromProto(req.GetSelection()))
	if err != nil {
		return nil, toStatus(err)
	}
	return &jobwirev1.PurgeDeadJobsResponse{Matched: int32(res.Matched), Affected: int32(res.Affected),
		Sample: jobsToProto(res.Sample), MatchedIds: res.IDs}, nil
}

func (a *admin) TopDeadErrors(ctx context.Context, req *jobwirev1.TopDeadErrorsRequest) (*jobwirev1.TopDeadErrorsResponse, error) {
	limit := int(req.GetLimit())
	if limit == 0 {
		limit = defaultErrorLimit
	}
	groups, err := a.b.TopDeadErrors(ctx, deadFilterFromProto(req.GetFilter()), limit)
	if err != nil {
		return nil, toStatus(err)
	}
	out := &jobwirev1.TopDeadErrorsResponse{}
	for _, g := range groups {
		out.Groups = append(out.Groups, &jobwirev1.ErrorGroup{ErrorType: g.ErrorType, Count: g.Count,
			LastSeen: ts(g.LastSeen), SampleMessage: g.SampleMessage, Fingerprint: g.Fingerprint})
	}
	return out, nil
}

func (a *admin) PurgeFinishedJobs(ctx context.Context, req *jobwirev1.PurgeFinishedJobsRequest) (*jobwirev1.PurgeFinishedJobsResponse, error) {
	n, err := a.b.PurgeSucceeded(ctx, req.GetOlderThan().AsDuration())
	if err != nil {
		// Batches already deleted stay deleted; the count says how far it got.
		a.log.WarnContext(ctx, "purge of succeeded jobs stopped early", "purged", n, "err", err)
		return nil, toStatus(err)
	}
	return &jobwirev1.PurgeFinishedJobsResponse{Purged: n}, nil
}

// queueToProto describes a queue as of now.
func queueToProto(q broker.QueueStats, now time.Time) *jobwirev1.QueueInfo {
	out := &jobwirev1.QueueInfo{
		Name:             q.Name,
		Paused:           q.Paused,
		ConcurrencyLimit: int32(q.ConcurrencyLimit),
		DepthByState:     make(map[string]int64, len(q.Depth)),
		Running:          q.Depth[job.StateLeased] + q.Depth[job.StateRunning],
	}
	for st, n := range q.Depth {
		out.DepthByState[st.String()] = n
	}
	if !q.OldestReadyAt.IsZero() {
		out.OldestReadyAge = dur(max(0, now.Sub(q.OldestReadyAt)))
	}
	return out
}

func (a *admin) ListQueues(ctx context.Context, _ *jobwirev1.ListQueuesRequest) (*jobwirev1.ListQueuesResponse, error) {
	qs, err := a.b.ListQueues(ctx, "")
	if err != nil {
		return nil, toStatus(err)
	}
	now := a.clk.Now()
	out := &jobwirev1.ListQueuesResponse{}
	qs, out.Omitted = capList(qs)
	for _, q := range qs {
		out.Queues = append(out.Queues, queueToProto(q, now))
	}
	return out, nil
}

// queueInfo reads one queue after a change to it.
func (a *admin) queueInfo(ctx context.Context, name string) (*jobwirev1.QueueInfo, error) {
	qs, err := a.b.ListQueues(ctx, name)
	if err != nil {
		return nil, toStatus(err)
	}
	if len(qs) == 0 {
		return nil, toStatus(fmt.Errorf("queue %q: %w", name, broker.ErrNotFound))
	}
	return queueToProto(qs[0], a.clk.Now()), nil
}

func (a *admin) PauseQueue(ctx context.Context, req *jobwirev1.PauseQueueRequest) (*jobwirev1.PauseQueueResponse, error) {
	if err := a.b.PauseQueue(ctx, req.GetQueue()); err != nil {
		return nil, toStatus(err)
	}
	q, err := a.queueInfo(ctx, req.GetQueue())
	if err != nil {
		return nil, err
	}
	return &jobwirev1.PauseQueueResponse{Queue: q}, nil
}

func (a *admin) ResumeQueue(ctx context.Context, req *jobwirev1.ResumeQueueRequest) (*jobwirev1.ResumeQueueResponse, error) {
	if err := a.b.ResumeQueue(ctx, req.GetQueue()); err != nil {
		return nil, toStatus(err)
	}
	q, err := a.queueInfo(ctx, req.GetQueue())
	if err != nil {
		return nil, err
	}
	return &jobwirev1.ResumeQueueResponse{Queue: q}, nil
}

func (a *admin) SetQueueLimit(ctx context.Context, req *jobwirev1.SetQueueLimitRequest) (*jobwirev1.SetQueueLimitResponse, error) {
	if err := a.b.SetQueueLimit(ctx, req.GetQueue(), int(req.GetLimit())); err != nil {
		return nil, toStatus(err)
	}
	q, err := a.queueInfo(ctx, req.GetQueue())
	if err != nil {
		return nil, err
	}
	return &jobwirev1.SetQueueLimitResponse{Queue: q}, nil
}

func (a *admin) GetStats(ctx context.Context, req *jobwirev1.GetStatsRequest) (*jobwirev1.GetStatsResponse, error) {
	read := a.b.Stats
	if req.GetCountsOnly() {
		read = func(ctx context.Context) (*broker.Stats, error) { return a.b.Counts(ctx, time.Minute) }
	}
	st, err := read(ctx)
	if err != nil {
		return nil, toStatus(err)
	}
	now := a.clk.Now()
	out := &jobwirev1.GetStatsResponse{}
	counts, countsOmitted := capList(st.Counts)
	queues, queuesOmitted := capList(st.Queues)
	out.CountsOmitted, out.QueuesOmitted = countsOmitted, queuesOmitted
	for _, c := range counts {
		out.Counts = append(out.Counts, &jobwirev1.StateCount{Queue: c.Queue, Type: c.Type,
			State: stateToProto(c.State), Count: c.Count})
	}
	for _, r := range st.Recent {
		out.Recent = append(out.Recent, &jobwirev1.RecentCounts{Window: dur(r.Window),
			Succeeded: r.Succeeded, Failed: r.Failed, Dead: r.Dead})
	}
	for _, q := range queues {
		out.Queues = append(out.Queues, queueToProto(q, now))
	}
	out.StorageRetries = st.StorageRetries
	if req.GetCountsOnly() {
		return out, nil
	}
	infos, err := a.b.ConcurrencyRules(ctx)
	if err != nil {
		return nil, toStatus(err)
	}
	out.Concurrency = concurrencyToProto(infos)
	if out.RateLimits, err = a.rateLimits(ctx); err != nil {
		return nil, err
	}
	return out, nil
}
