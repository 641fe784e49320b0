package server

import (
	"cmp"
	"context"
	"fmt"
	"iter"
	"slices"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/jobwire/jobwire/broker"
	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/job"
)

// MaxWatchJobs is the most jobs one WatchJobs call follows.
const MaxWatchJobs = 10_000

// A call following at least coalesceFrom jobs reads the changes of coalesceFor at once: jobs
// finishing by thousands a second are then read a few hundred a statement, not one or two.
const (
	coalesceFrom = 100
	coalesceFor  = 20 * time.Millisecond
)

// gatherFor, when set (by tests: export_test.go, while calls read it), replaces coalesceFor.
var gatherFor atomic.Int64

// WatchJobs follows jobs until each is final (see the proto). The broker's watch says which
// jobs may have changed; only those are read again, so a call costs one read per change of a
// job, never a read per job per interval.
func (p *producer) WatchJobs(req *jobwirev1.WatchJobsRequest, stream jobwirev1.ProducerService_WatchJobsServer) error {
	ctx := stream.Context()
	if err := validateWatch(req); err != nil {
		return err
	}
	if err := p.authorizeRequest(ctx, req); err != nil {
		return err
	}
	// The watch starts before the first read, so no change between the two is missed.
	w := p.b.WatchJobs(req.GetIds(), broker.WatchOptions{FinalOnly: req.GetFinalOnly()})
	defer w.Close()
	f := &following{p: p, stream: stream, w: w, finalOnly: req.GetFinalOnly(), columns: req.GetColumns(), sent: make(map[int64]broker.JobVersion, len(req.GetIds()))}
	if err := f.first(ctx, req.GetIds()); err != nil {
		return err
	}
	for len(f.sent) > 0 {
		select {
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		case <-w.C():
		}
		if len(f.sent) >= coalesceFrom {
			// Many jobs finishing at once: gather a moment's worth into one read.
			if err := f.gather(ctx); err != nil {
				return err
			}
		}
		read, known := w.Changed()
		if err := f.check(ctx, read, known); err != nil {
			return err
		}
	}
	return nil
}

// following is one WatchJobs call's jobs: sent holds the version last sent of each job not
// final yet (zero when none was sent).
type following struct {
	p         *producer
	stream    jobwirev1.ProducerService_WatchJobsServer
	w         *broker.JobWatch
	finalOnly bool
	columns   bool // send final jobs as JobEnds (WatchJobsRequest.columns)
	sent      map[int64]broker.JobVersion
}

// gather waits coalesceFor for more of the jobs to change, to read and send them together, but
// no longer than until every job still followed has: then no change is left to wait for, and
// the last jobs of a wait are sent as they end, not coalesceFor later. Meanwhile the watch
// wakes it only when that many have changed (JobWatch.WakeAt), not at each change.
func (f *following) gather(ctx context.Context) error {
	d := time.Duration(gatherFor.Load())
	if d == 0 {
		d = coalesceFor
	}
	defer f.w.WakeAt(1)
	if f.w.WakeAt(len(f.sent)) {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	for f.w.Pending() < len(f.sent) {
		select {
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		case <-t.C:
			return nil
		case <-f.w.C(): // all of them, or a signal from before the gathering began
		}
	}
	return nil
}

// first reads every job once: its versions in one read, and in full only the jobs to send now.
func (f *following) first(ctx context.Context, ids []int64) error {
	if f.finalOnly {
		return f.firstFinal(ctx, ids)
	}
	versions, err := f.p.b.JobVersions(ctx, ids)
	if err != nil {
		return toStatus(err)
	}
	if len(versions) < len(ids) {
		return notFound(ids, versions)
	}
	var now []int64
	for _, id := range ids {
		v := versions[id]
		f.w.Saw(id, v)
		if f.finalOnly && !v.State.Final() {
			f.sent[id] = v
			continue
		}
		f.sent[id] = broker.JobVersion{}
		now = append(now, id)
	}
	return f.check(ctx, now, nil)
}

// firstFinal is first for a watch of final jobs only: it needs no version of a job not final
// yet (no change but its end is sent), so the jobs are counted and only the final ones named,
// in one row, and read in full to be sent now. A final job the first look missed is told by the
// broker's write or by the backstop, which tells a job it first reads final.
func (f *following) firstFinal(ctx context.Context, ids []int64) error {
	found, final, err := f.p.b.FinalAmong(ctx, ids)
	if err != nil {
		return toStatus(err)
	}
	if found < len(ids) {
		versions, err := f.p.b.JobVersions(ctx, ids) // to name the job missing
		if err != nil {
			return toStatus(err)
		}
		return notFound(ids, versions)
	}
	for _, id := range ids {
		f.sent[id] = broker.JobVersion{}
	}
	return f.check(ctx, final, nil)
}

// notFound is the NotFound error for the first job of ids that versions lacks.
func notFound(ids []int64, versions map[int64]broker.JobVersion) error {
	for _, id := range ids {
		if _, ok := versions[id]; !ok {
			return status.Errorf(codes.NotFound, "ids: job %d does not exist", id)
		}
	}
	return status.Error(codes.NotFound, "ids: a job does not exist")
}

// check reads the jobs of ids still followed that may have changed, in one read, takes the jobs
// of known still followed as they are (the broker's own final writes told them: no read), and
// sends each that changed (with finalOnly, only once final); a final job is followed no more.
func (f *following) check(ctx context.Context, ids []int64, known []*job.Job) error {
	open := ids[:0:0]
	for _, id := range ids {
		if _, ok := f.sent[id]; ok {
			open = append(open, id)
		}
	}
	var jobs []*job.Job
	var final []int64 // the final jobs read, to stop watching (a known one left the watch already)
	if len(open) > 0 {
		read, err := f.p.b.JobOutcomes(ctx, open)
		if err != nil {
			return toStatus(err)
		}
		if len(read) < len(open) {
			return status.Errorf(codes.NotFound, "%s deleted while watched (retention or a purge)", missing(open, read))
		}
		for _, j := range read {
			if j.State.Final() {
				final = append(final, j.ID)
			}
		}
		jobs = read
	}
	for _, j := range known {
		if _, ok := f.sent[j.ID]; ok {
			jobs = append(jobs, j)
		}
	}
	if len(known) > 0 {
		slices.SortFunc(jobs, func(a, b *job.Job) int { return cmp.Compare(a.ID, b.ID) }) // sent in id order
	}
	send := jobs[:0]
	for _, j := range jobs {
		if f.changed(j) {
			send = append(send, j)
		}
	}
	// Final jobs need watching no longer: one call for all, not a lock of the hub each.
	f.w.Stop(final...)
	for part := range watchParts(send) {
		if err := f.stream.Send(f.response(part)); err != nil {
			return err
		}
	}
	return nil
}

// response is the message that sends jobs: as columns, how each ended (columns), or a Job
// each, how it ended (finalOnly) or as it is.
func (f *following) response(jobs []*job.Job) *jobwirev1.WatchJobsResponse {
	if f.columns {
		return &jobwirev1.WatchJobsResponse{Ends: endsToProto(jobs)}
	}
	slab, conv := newProtoSlab(len(jobs)), (*protoSlab).watched
	if f.finalOnly {
		slab, conv = newOutcomeSlab(len(jobs)), (*protoSlab).outcome
	}
	out := make([]*jobwirev1.Job, len(jobs))
	for i, j := range jobs {
		out[i] = conv(slab, j)
	}
	return &jobwirev1.WatchJobsResponse{Jobs: out}
}

// maxWatchBatch is the most jobs one WatchJobsResponse carries.
const maxWatchBatch = 500

// maxWatchBytes is about how much of results and error messages one WatchJobsResponse
// gathers: a job that would take a response past it starts the next, and one larger than it
// goes alone. Results may be up to 1 MiB each (more if the operator raised max_result_bytes),
// and a client's gRPC library reads at most 4 MiB a message unless told otherwise, so jobs
// that finish together, gathered by count alone, could make a response their watcher cannot
// read: its stream would end with RESOURCE_EXHAUSTED, on every retry.
const maxWatchBytes = MaxBatchBytes

// watchParts splits jobs into the responses that send them, in order: at most maxWatchBatch
// jobs and maxWatchBytes of results and error messages each (packs).
func watchParts(jobs []*job.Job) iter.Seq[[]*job.Job] {
	return packs(jobs, maxWatchBatch, maxWatchBytes, func(j *job.Job) int { return len(j.Result) + len(j.LastErrorMessage) })
}

// changed reports whether j is to be sent: it changed since it was last sent (and, with
// finalOnly, is final). It notes j as sent; a final job is followed no more (the caller stops
// its watch).
func (f *following) changed(j *job.Job) bool {
	final := j.State.Final()
	if f.finalOnly && !final {
		return false
	}
	v := broker.VersionOf(j)
	if v == f.sent[j.ID] {
		return false
	}
	if final {
		delete(f.sent, j.ID)
	} else {
		f.sent[j.ID] = v
	}
	return true
}

// missing names the first job of ids that jobs lacks.
func missing(ids []int64, jobs []*job.Job) string {
	have := make(map[int64]bool, len(jobs))
	for _, j := range jobs {
		have[j.ID] = true
	}
	for _, id := range ids {
		if !have[id] {
			return fmt.Sprintf("job %d was", id)
		}
	}
	return "a job was"
}

// validateWatch checks a WatchJobs request: 1..MaxWatchJobs positive ids, each once, and
// columns only with final_only.
func validateWatch(req *jobwirev1.WatchJobsRequest) error {
	ids := req.GetIds()
	if len(ids) == 0 || len(ids) > MaxWatchJobs {
		return invalid("ids", "names %d jobs; name 1..%d", len(ids), MaxWatchJobs)
	}
	if req.GetColumns() && !req.GetFinalOnly() {
		return invalid("columns", "is for final jobs only: set final_only too")
	}
	seen := make(map[int64]bool, len(ids))
	for i, id := range ids {
		if id <= 0 {
			return invalid("ids", "ids[%d] is %d; job ids are positive", i, id)
		}
		if seen[id] {
			return invalid("ids", "job %d is named twice", id)
		}
		seen[id] = true
	}
	return nil
}
