package broker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/store"
)

// This file holds what operators do: list jobs, work the dead-letter queue, delete old jobs,
// read stats.

// ErrNotDead is returned when a dead-letter action names a job that is not dead.
var ErrNotDead = errors.New("job is not in the dead-letter queue")

// SampleSize is how many matched jobs a bulk action shows.
const SampleSize = 10

// retentionBatch is how many jobs one retention transaction deletes: small, so the write
// lock is held briefly and other work goes between batches.
const retentionBatch = 500

// racedCancel is a cancel that found no lease in memory for a LEASED job.
type racedCancel struct {
	token job.LeaseToken
	at    time.Time
}

// takeRacedCancelLocked reports whether ref was cancelled before it was handed out, and
// forgets it.
func (b *Broker) takeRacedCancelLocked(ref job.LeaseRef) bool {
	rc, ok := b.table.racedCancels[ref.JobID]
	if !ok || rc.token != ref.Token {
		return false
	}
	delete(b.table.racedCancels, ref.JobID)
	return true
}

// pruneRacedCancelsLocked forgets raced cancels no dispatch round will claim: a round hands
// out what it leased long before a lease would expire.
func (b *Broker) pruneRacedCancelsLocked() {
	cutoff := b.now().Add(-b.cfg.LeaseDuration)
	for id, rc := range b.table.racedCancels {
		if rc.at.Before(cutoff) {
			delete(b.table.racedCancels, id)
		}
	}
}

// JobFilter selects jobs. Zero fields match any.
type JobFilter struct {
	State job.State
	Queue string
	Type  string
}

// SortColumn names a column a listing sorts by, as the admin API names it (JobSortColumns,
// DeadSortColumns).
type SortColumn string

// ListOrder is a listing's order: by a column, ties broken by id, ascending or (the default)
// descending. By "" is the listing's default column.
type ListOrder struct {
	By  SortColumn
	Asc bool
}

func (o ListOrder) store() store.ListOrder {
	return store.ListOrder{By: store.ListSort(o.By), Asc: o.Asc}
}

// ListCursor is where a page ended: the last job's value in the sort column (Int for numbers
// and times in Unix nanoseconds, Str for text) and its id.
type ListCursor struct {
	Int int64
	Str string
	ID  int64
}

func sortColumns(from []store.ListSort) []SortColumn {
	out := make([]SortColumn, len(from))
	for i, c := range from {
		out[i] = SortColumn(c)
	}
	return out
}

// JobSortColumns are the columns ListJobs sorts by, its default (created_at) first.
func JobSortColumns() []SortColumn { return sortColumns(store.JobSorts) }

// DeadSortColumns are the columns ListDeadJobs sorts by, its default (died_at) first.
func DeadSortColumns() []SortColumn { return sortColumns(store.DeadSorts) }

// JobCursorOf is j's position in the order o of ListJobs.
func JobCursorOf(o ListOrder, j *job.Job) (ListCursor, error) {
	c, err := o.store().CursorOf(store.JobSorts, j)
	return ListCursor(c), err
}

// DeadCursorOf is j's position in the order o of ListDeadJobs.
func DeadCursorOf(o ListOrder, j *job.Job) (ListCursor, error) {
	c, err := o.store().CursorOf(store.DeadSorts, j)
	return ListCursor(c), err
}

// ListJobs reads up to limit jobs f matches in the order o, starting after after (nil: from
// the first), without history or payload.
func (b *Broker) ListJobs(ctx context.Context, f JobFilter, o ListOrder, after *ListCursor, limit int) ([]*job.Job, error) {
	return b.st.JobList(ctx, &store.JobListParams{State: f.State, Queue: f.Queue, Type: f.Type,
		Order: o.store(), After: (*store.ListCursor)(after), Limit: limit})
}

// DeadFilter selects dead jobs. Zero fields match any.
type DeadFilter struct {
	Queue      string
	Type       string
	Reason     job.DeadReason
	ErrorType  string
	DeadAfter  time.Time // finished at or after
	DeadBefore time.Time // finished before
}

// storeFilter is the store's form of f.
func (f DeadFilter) storeFilter() *store.DeadJobFilter {
	sf := store.DeadJobFilter(f)
	return &sf
}

// ListDeadJobs reads up to limit dead jobs f matches in the order o, starting after the
// cursor (nil: from the first), without history or payload.
func (b *Broker) ListDeadJobs(ctx context.Context, f DeadFilter, o ListOrder, after *ListCursor, limit int) ([]*job.Job, error) {
	return b.st.JobListDead(ctx, &store.DeadJobListParams{Filter: *f.storeFilter(), Order: o.store(),
		After: (*store.ListCursor)(after), Limit: limit})
}

// DeadErrorGroup is the dead jobs that share a last error type.
type DeadErrorGroup struct {
	ErrorType     string
	Count         int64
	LastSeen      time.Time
	SampleMessage string
	// Fingerprint is set on the groups TopDeadErrors splits a generic error type into: the
	// Fingerprint of the messages of the group's jobs.
	Fingerprint string
}

// TopDeadErrors groups the dead jobs f matches by last error type, largest group first. A group
// of a generic error type is split by message fingerprint (see deadgroups.go).
func (b *Broker) TopDeadErrors(ctx context.Context, f DeadFilter, limit int) ([]DeadErrorGroup, error) {
	sf := f.storeFilter()
	groups, err := b.st.DeadErrorGroups(ctx, sf, limit)
	if err != nil {
		return nil, err
	}
	if groups, err = b.splitGeneric(ctx, sf, groups, limit); err != nil {
		return nil, err
	}
	out := make([]DeadErrorGroup, len(groups))
	for i, g := range groups {
		out[i] = DeadErrorGroup(g)
	}
	return out, nil
}

// Selection picks dead jobs for a bulk action: by IDs or by Filter.
type Selection struct {
	IDs    []int64
	Filter *DeadFilter // nil: select by IDs
	// Limit is the most jobs the action touches; with a filter, the newest Limit match.
	Limit int
	// Preview counts and samples what would be touched and changes nothing.
	Preview bool
}

// BulkResult is what a bulk action matched and changed.
type BulkResult struct {
	Matched  int
	Affected int
	Sample   []*job.Job // up to SampleSize matched jobs, without history or payload
	// IDs are every matched job's id on a preview, newest first for a filter: what a confirm
	// names to act on exactly the jobs previewed.
	IDs []int64
}

// Requeue says how dead jobs go back to run.
type Requeue struct {
	Priority *int      // nil keeps each job's own
	Payload  []byte    // nil keeps each job's own; only for a single job
	RunAt    time.Time // zero: now
}

// RequeueDead sends dead jobs back to run: a new run of attempts starting at 0, the dead
// reason cleared, the earlier attempts kept in the history (see JobRequeue). By IDs every
// job must exist and be dead, or nothing changes.
func (b *Broker) RequeueDead(ctx context.Context, sel Selection, rq Requeue) (BulkResult, error) {
	if sel.Preview {
		return b.previewDead(ctx, sel)
	}
	if rq.Payload != nil && (sel.Filter != nil || len(sel.IDs) != 1) {
		return BulkResult{}, errors.New("a replacement payload needs exactly one job selected by id")
	}
	now := b.now()
	runAt := notBefore(rq.RunAt, now)
	var res BulkResult
	err := b.do(ctx, "dlq_requeue", func(tx store.Tx) error {
		res = BulkResult{}
		ids, err := b.selectDead(tx, sel)
		if err != nil {
			return err
		}
		res.Matched = len(ids)
		if res.Affected, err = tx.JobRequeue(&store.JobRequeueParams{IDs: ids, RunAt: runAt,
			Priority: rq.Priority, Payload: rq.Payload, Now: now}); err != nil {
			return err
		}
		switch {
		case res.Affected == 0:
		case runAt.After(now):
			tx.Publish(scheduledEvent(runAt))
		default:
			tx.Publish(readyEvent)
		}
		if res.Sample, err = tx.JobGetMany(ids[:min(len(ids), SampleSize)]); err != nil {
			return err
		}
		return b.audit(ctx, tx, &store.AuditEvent{Action: AuditDeadRequeue, Detail: describeRequeue(sel, rq),
			Count: int64(res.Affected), JobIDs: ids})
	})
	if err != nil {
		return BulkResult{}, err
	}
	if res.Affected > 0 {
		if runAt.After(now) {
			b.schedule(runAt)
		} else {
			b.signal()
		}
	}
	return res, nil
}

// PurgeDead deletes dead jobs and their attempts for good.
func (b *Broker) PurgeDead(ctx context.Context, sel Selection) (BulkResult, error) {
	if sel.Preview {
		return b.previewDead(ctx, sel)
	}
	var res BulkResult
	err := b.do(ctx, "dlq_purge", func(tx store.Tx) error {
		res = BulkResult{}
		ids, err := b.selectDead(tx, sel)
		if err != nil {
			return err
		}
		res.Matched = len(ids)
		if res.Sample, err = tx.JobGetMany(ids[:min(len(ids), SampleSize)]); err != nil {
			return err
		}
		if res.Affected, err = tx.JobDeleteDead(ids); err != nil {
			return err
		}
		return b.audit(ctx, tx, &store.AuditEvent{Action: AuditDeadPurge, Detail: describeSelection(sel),
			Count: int64(res.Affected), JobIDs: ids})
	})
	if err != nil {
		return BulkResult{}, err
	}
	return res, nil
}

// selectDead resolves a selection inside the write, so what is matched is what is changed.
func (b *Broker) selectDead(tx store.Tx, sel Selection) ([]int64, error) {
	if sel.Filter != nil {
		return tx.JobDeadIDs(sel.Filter.storeFilter(), sel.Limit)
	}
	ids := dedupe(sel.IDs)
	states, err := tx.JobStates(ids)
	if err != nil {
		return nil, err
	}
	if err := checkDead(ids, states); err != nil {
		return nil, err
	}
	return ids, nil
}

// previewDead counts and samples a selection from the readers, changing nothing.
func (b *Broker) previewDead(ctx context.Context, sel Selection) (BulkResult, error) {
	if sel.Filter != nil {
		jobs, err := b.ListDeadJobs(ctx, *sel.Filter, ListOrder{}, nil, sel.Limit)
		if err != nil {
			return BulkResult{}, err
		}
		return BulkResult{Matched: len(jobs), Sample: jobs[:min(len(jobs), SampleSize)], IDs: jobIDs(jobs)}, nil
	}
	ids := dedupe(sel.IDs)
	jobs, err := b.st.JobGetMany(ctx, ids)
	if err != nil {
		return BulkResult{}, err
	}
	states := make(map[int64]job.State, len(jobs))
	for _, j := range jobs {
		states[j.ID] = j.State
	}
	if err := checkDead(ids, states); err != nil {
		return BulkResult{}, err
	}
	return BulkResult{Matched: len(jobs), Sample: jobs[:min(len(jobs), SampleSize)], IDs: jobIDs(jobs)}, nil
}

func jobIDs(jobs []*job.Job) []int64 {
	ids := make([]int64, len(jobs))
	for i, j := range jobs {
		ids[i] = j.ID
	}
	return ids
}

// checkDead fails unless every id names a dead job, naming the first that does not.
func checkDead(ids []int64, states map[int64]job.State) error {
	for _, id := range ids {
		st, ok := states[id]
		switch {
		case !ok:
			return fmt.Errorf("job %d: %w", id, store.ErrNotFound)
		case st != job.StateDead:
			return fmt.Errorf("job %d is %s: %w", id, st, ErrNotDead)
		}
	}
	return nil
}

func dedupe(ids []int64) []int64 {
	seen := make(map[int64]bool, len(ids))
	out := make([]int64, 0, len(ids))
	for _, id := range ids {
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}

// PurgeSucceeded deletes SUCCEEDED jobs that finished more than olderThan ago, in small
// batches, and returns how many it deleted (also when it stops early with an error). Its audit
// event is stored with the first batch and counts each batch in the batch's own write.
func (b *Broker) PurgeSucceeded(ctx context.Context, olderThan time.Duration) (int64, error) {
	ev := &store.AuditEvent{Action: AuditSucceededPurge, Detail: "older_than=" + olderThan.String()}
	return b.deleteFinished(ctx, []job.State{job.StateSucceeded}, b.now().Add(-olderThan), ev)
}

// ApplyRetention deletes the finished jobs past their retention period: succeeded ones after
// Retention.Succeeded, dead and cancelled ones after Retention.Dead. It runs every
// Retention.Interval; tests call it after moving a fake clock.
func (b *Broker) ApplyRetention(ctx context.Context) (int64, error) {
	now := b.now()
	n, err := b.deleteFinished(ctx, []job.State{job.StateSucceeded}, now.Add(-b.cfg.Retention.Succeeded), nil)
	if err != nil {
		return n, err
	}
	m, err := b.deleteFinished(ctx, []job.State{job.StateDead, job.StateCancelled}, now.Add(-b.cfg.Retention.Dead), nil)
	return n + m, err
}

// deleteFinished deletes finished jobs in batches, each its own write through the writer. An
// operator's purge passes its audit event, ev: the first batch stores it, counting its jobs,
// and each later batch adds its own to it, so the event counts exactly the batches that
// committed. Retention passes none.
func (b *Broker) deleteFinished(ctx context.Context, states []job.State, before time.Time, ev *store.AuditEvent) (int64, error) {
	var total int64
	recorded := false
	for {
		if err := ctx.Err(); err != nil {
			return total, err
		}
		var n int
		err := b.do(ctx, "delete_finished", func(tx store.Tx) error {
			var err error
			n, err = tx.JobDeleteFinished(&store.JobDeleteFinishedParams{States: states,
				FinishedBefore: before, Limit: retentionBatch})
			switch {
			case err != nil || ev == nil:
				return err
			case !recorded:
				ev.Count = int64(n)
				return b.audit(ctx, tx, ev)
			}
			return tx.AuditAddCount(ev.ID, int64(n))
		})
		if err != nil {
			return total, err
		}
		recorded = true
		total += int64(n)
		if n < retentionBatch {
			return total, nil
		}
	}
}

// StatsWindows are the trailing windows Stats counts recent work in.
var StatsWindows = []time.Duration{time.Minute, 5 * time.Minute}

// RecentWindow counts what finished in a trailing window.
type RecentWindow struct {
	Window    time.Duration
	Succeeded int64 // jobs that succeeded
	Failed    int64 // attempts that failed, timed out or lost their lease
	Dead      int64 // jobs that went to the dead-letter queue
}

// StateCount is how many jobs of one queue and type are in one state.
type StateCount struct {
	Queue string
	Type  string
	State job.State
	Count int64
}

// QueueStats is a queue's settings and shape.
type QueueStats struct {
	Name             string
	Paused           bool
	ConcurrencyLimit int // 0: no cap
	Depth            map[job.State]int64
	// OldestReadyAt is the run-at of the oldest PENDING job; zero when none is ready.
	OldestReadyAt time.Time
}

func queueStatsOf(qs []store.QueueStats) []QueueStats {
	out := make([]QueueStats, len(qs))
	for i, q := range qs {
		out[i] = QueueStats{Name: q.Name, Paused: q.Paused, ConcurrencyLimit: q.ConcurrencyLimit,
			Depth: q.Depth, OldestReadyAt: q.OldestReadyAt}
	}
	return out
}

// Stats is a snapshot of the broker's jobs and queues.
type Stats struct {
	Counts []StateCount
	Recent []RecentWindow
	Queues []QueueStats
	// StorageRetries counts the storage operations retried, by error code name; nil when the
	// store keeps no such counters.
	StorageRetries map[string]int64
}

// storageRetryCounter is implemented by a store that counts the storage operations it
// retried, by error code name.
type storageRetryCounter interface {
	StorageRetries() map[string]int64
}

// Stats reads job counts, recent throughput in each of StatsWindows and every queue's shape.
func (b *Broker) Stats(ctx context.Context) (*Stats, error) {
	out, err := b.Counts(ctx, StatsWindows...)
	if err != nil {
		return nil, err
	}
	if out.Queues, err = b.ListQueues(ctx, ""); err != nil {
		return nil, err
	}
	return out, nil
}

// Counts reads the part of Stats a graph sampled every few seconds needs: the job counts and
// what finished in each of windows, and no queue. Each part left out is a read of the store,
// and counting a window reads every job that finished in it (at 1,000 jobs/s, 300,000 for the
// five minutes of StatsWindows).
func (b *Broker) Counts(ctx context.Context, windows ...time.Duration) (*Stats, error) {
	counts, err := b.st.JobCounts(ctx)
	if err != nil {
		return nil, err
	}
	out := &Stats{Counts: make([]StateCount, len(counts))}
	for i, c := range counts {
		out.Counts[i] = StateCount(c)
	}
	now := b.now()
	for _, w := range windows {
		rc, err := b.st.RecentCounts(ctx, now.Add(-w))
		if err != nil {
			return nil, err
		}
		out.Recent = append(out.Recent, RecentWindow{Window: w, Succeeded: rc.Succeeded, Failed: rc.Failed, Dead: rc.Dead})
	}
	if c, ok := b.st.(storageRetryCounter); ok {
		out.StorageRetries = c.StorageRetries()
	}
	return out, nil
}
