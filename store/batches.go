package store

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/jobwire/jobwire/job"
)

// Batches are groups of jobs with callbacks enqueued once, when the last job of the group is
// final. A batch is created open, jobs are added to it (by one transaction or many), and it is
// closed: from then on its size is fixed, and it completes once every one of its jobs is final.
//
// Counting is the store's, in the transaction of each job's final write, so that a callback is
// enqueued exactly once however many brokers finish the batch's jobs and however often a
// result is repeated:
//
//   - A final write of a batch's job (JobFinish, JobSucceedMany, JobCancel; JobFinishParams.Batch
//     names the batch) makes the job a candidate, and so does the settling that cancels a
//     dependent because a parent failed (store/deps.go), which comes before the count. Where
//     the transaction's writes end, before COMMIT, the store counts the candidates that are
//     final and not counted yet (jobs.batch_counted), marking them counted: a repeated or
//     stale write counts nothing.
//   - The counts are added to each batch's row, the rows taken in id order. A batch that is
//     closed and whose counts reach its size completes in that transaction: its callbacks are
//     inserted, with its counts and failed jobs in their metadata (BatchMeta...), and their ids
//     stored on the batch.
//   - Closing counts the batch's jobs (its size) and completes it at once when they are all
//     final already.
//
// Each job is counted once per run: a dead job requeued from the dead-letter queue leaves its
// batch's dead count in the requeue's transaction (its mark cleared) and is counted again when
// it is final. A batch that completed stays complete: its callbacks never run again, while its
// counts follow its jobs.

// ErrBatchClosed is returned when a job is added to a batch that is closed.
var ErrBatchClosed = errors.New("batch is closed")

// The metadata keys of a batch's callback job. Values are decimal numbers, except
// BatchMetaCallback ("success" or "complete") and BatchMetaFailed (a comma-separated list of
// ids).
const (
	BatchMetaID        = "jobwire.batch"
	BatchMetaCallback  = "jobwire.batch.callback"
	BatchMetaTotal     = "jobwire.batch.total"
	BatchMetaSucceeded = "jobwire.batch.succeeded"
	BatchMetaDead      = "jobwire.batch.dead"
	BatchMetaCancelled = "jobwire.batch.cancelled"
	// BatchMetaFailed lists the ids of the batch's DEAD and CANCELLED jobs, lowest first, at
	// most BatchFailedMax of them; BatchMetaFailedMore counts those left out.
	BatchMetaFailed     = "jobwire.batch.failed"
	BatchMetaFailedMore = "jobwire.batch.failed_more"
)

// BatchFailedMax is how many failed job ids a callback's metadata and a batch read carry.
const BatchFailedMax = 1000

// BatchCallback is a callback job as its batch stores it until it is enqueued: a validated
// job with its defaults filled in.
type BatchCallback struct {
	Type           string            `json:"type"`
	Queue          string            `json:"queue"`
	Payload        []byte            `json:"payload,omitempty"`
	Priority       int               `json:"priority,omitempty"`
	MaxAttempts    int               `json:"max_attempts"`
	AttemptTimeout time.Duration     `json:"attempt_timeout_ns"`
	Metadata       map[string]string `json:"metadata,omitempty"`
}

// BatchCreateParams is a new batch.
type BatchCreateParams struct {
	Description           string
	OnSuccess, OnComplete *BatchCallback // nil: none
	Now                   time.Time
}

// Batch is a batch as stored.
type Batch struct {
	ID          int64
	Description string
	CreatedAt   time.Time
	ClosedAt    time.Time // zero while open
	CompletedAt time.Time // zero until its callbacks were enqueued
	// Total is its size: fixed when it closes; while open, the jobs added so far.
	Total                       int64
	Succeeded, Dead, Cancelled  int64
	OnSuccess, OnComplete       *BatchCallback
	SuccessJobID, CompleteJobID int64
	// FailedJobIDs are the ids of its DEAD and CANCELLED jobs, lowest first, at most
	// BatchFailedMax; filled by BatchGet only.
	FailedJobIDs []int64
}

// Open reports whether jobs may still be added to b.
func (b *Batch) Open() bool { return b.ClosedAt.IsZero() }

// Complete reports whether b's callbacks were enqueued.
func (b *Batch) Complete() bool { return !b.CompletedAt.IsZero() }

// BatchListParams selects batches, newest first (by id, descending).
type BatchListParams struct {
	// Open, Closed and Complete select by state; all false: any.
	Open, Closed, Complete bool
	Before                 int64 // only ids below; 0: from the newest
	Limit                  int
}

// StateFilter is the condition on the batches' columns that selects p's states, as
// " AND (...)", or "" for any state.
func (p *BatchListParams) StateFilter() string {
	var states []string
	if p.Open {
		states = append(states, `closed_at IS NULL`)
	}
	if p.Closed {
		states = append(states, `(closed_at IS NOT NULL AND completed_at IS NULL)`)
	}
	if p.Complete {
		states = append(states, `completed_at IS NOT NULL`)
	}
	if len(states) == 0 {
		return ""
	}
	return ` AND (` + strings.Join(states, ` OR `) + `)`
}

// BatchReader reads batches.
type BatchReader interface {
	// BatchGet reads one batch with its failed jobs, or ErrNotFound.
	BatchGet(ctx context.Context, id int64) (*Batch, error)
	// BatchList reads the batches p selects, newest first, at most p.Limit.
	BatchList(ctx context.Context, p *BatchListParams) ([]*Batch, error)
}

// BatchWriter writes batches in a transaction.
type BatchWriter interface {
	// BatchCreate stores a new open batch and returns its id.
	BatchCreate(p *BatchCreateParams) (int64, error)
	// BatchAdd puts the jobs ids, inserted by this transaction, in the open batch id: ErrNotFound
	// when there is none, ErrBatchClosed when it is closed.
	BatchAdd(id int64, jobs []int64) error
	// BatchClose closes a batch, fixing its size, and completes it when every job is final
	// already; closing a closed batch changes nothing. It returns the batch as it is after, or
	// ErrNotFound.
	BatchClose(id int64, now time.Time) (*Batch, error)
}

// BatchCallbackParams is the job a batch's callback enqueues, with the batch's counts and
// failed jobs in its metadata; kind is "success" or "complete".
func BatchCallbackParams(b *Batch, cb *BatchCallback, kind string, failed []int64, failedMore int64, now time.Time) *JobInsertParams {
	meta := make(map[string]string, len(cb.Metadata)+8)
	for k, v := range cb.Metadata {
		meta[k] = v
	}
	meta[BatchMetaID] = itoa(b.ID)
	meta[BatchMetaCallback] = kind
	meta[BatchMetaTotal] = itoa(b.Total)
	meta[BatchMetaSucceeded] = itoa(b.Succeeded)
	meta[BatchMetaDead] = itoa(b.Dead)
	meta[BatchMetaCancelled] = itoa(b.Cancelled)
	meta[BatchMetaFailed] = joinIDs(failed)
	if failedMore > 0 {
		meta[BatchMetaFailedMore] = itoa(failedMore)
	}
	return &JobInsertParams{Type: cb.Type, Queue: cb.Queue, Payload: cb.Payload, Priority: cb.Priority,
		RunAt: now, MaxAttempts: cb.MaxAttempts, AttemptTimeout: cb.AttemptTimeout, Metadata: meta, Now: now}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// joinIDs writes ids as a comma-separated list.
func joinIDs(ids []int64) string {
	var b strings.Builder
	for i, id := range ids {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(itoa(id))
	}
	return b.String()
}

// BatchCandidates are the jobs of batches a transaction's final writes may have finished, which
// the store counts where the transaction's writes end, as of the latest of those writes, and
// the dead jobs of batches it requeued, which leave their batches' dead counts there.
type BatchCandidates struct {
	ids []int64
	now time.Time
	// uncounted are the batch and the final state of each counted job that is no longer final
	// (requeued, or revived with its parent).
	uncounted       []int64
	uncountedStates []int16
}

// Uncount notes a job of batch, counted as ended in state, that is no longer final; a batch of
// 0 is none.
func (c *BatchCandidates) Uncount(batch int64, state job.State) {
	if batch == 0 {
		return
	}
	c.uncounted = append(c.uncounted, batch)
	c.uncountedStates = append(c.uncountedStates, int16(state))
}

// TakeUncounted returns what Uncount noted, one entry per job (its batch and its state), and
// forgets it.
func (c *BatchCandidates) TakeUncounted() (batches []int64, states []int16) {
	batches, states = c.uncounted, c.uncountedStates
	c.uncounted, c.uncountedStates = nil, nil
	return batches, states
}

// Add notes a write that may make job jobID of batch final; a batch of 0 is none.
func (c *BatchCandidates) Add(batch, jobID int64, now time.Time) {
	if batch == 0 {
		return
	}
	c.ids = append(c.ids, jobID)
	if now.After(c.now) {
		c.now = now
	}
}

// Finished notes the final writes among ps.
func (c *BatchCandidates) Finished(ps ...*JobFinishParams) {
	for _, p := range ps {
		if p.State.Final() {
			c.Add(p.Batch, p.Ref.JobID, p.Now)
		}
	}
}

// Take returns the candidates noted and the time to count them at, and forgets them.
func (c *BatchCandidates) Take() ([]int64, time.Time) {
	ids, now := c.ids, c.now
	c.ids = nil
	return ids, now
}
