package postgres

import (
	"cmp"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/jobwire/jobwire/job"
)

// The finished totals (finished_totals) are rows every broker's writer changes: one per queue,
// type and final state, so two brokers that finish jobs of the same queue and type update the
// same row, and the second waits for the first to commit. Waiting is fine; a cycle of waits is
// a deadlock, which the server breaks after deadlock_timeout by aborting one transaction, for
// the storage retries to run again.
//
// The rows were locked where each change came in the transaction: a failure's row when the
// failure was written, among the batch's other writes of jobs, and the successes' rows by the
// successes' statement, in whatever order its aggregate produced them. So two brokers that
// failed jobs of queues a and b, in opposite orders, each held one row and wanted the other's.
// And a row held from a failure early in the batch was still held when a later enqueue waited
// for an idempotency key that another broker's open transaction had just inserted; that
// transaction, failing or finishing a job of the same queue and type, then waited for the row.
//
// So a transaction now keeps its changes to the totals (tx.finished) and writes them all with
// one statement, its rows locked in one order (finishedOrder), once its writes of jobs are done:
// with the batch's successes, whose statement takes the changes held until then (succeedManySQL),
// or else before the first statement that locks a breaker or a capped queue, or before COMMIT
// (flushFinished). Every broker's writer thus takes its locks in one order: jobs (and the
// idempotency keys of its enqueues), then the finished totals, sorted, then the breakers,
// sorted by type, then the capped queues, sorted by name (see queue.write in broker/commit, and the
// store's whole lock order in lockorder.go). A
// transaction that waits for a job or a key holds no row of the totals, and one that waits for
// a row of the totals holds only rows that come before it.
//
// A delete of jobs takes the finished ones off the totals through the trigger
// finished_totals_delete, which locked their rows within the delete, in its aggregate's order:
// the database's collation (not byte by byte), or a hash's. It locks them in finishedOrder
// first since migration 009, for the brokers of earlier versions, whose deletes rely on it. This
// store's deletes (deleteJobs) tell the trigger to leave the totals alone, and hold the deleted
// jobs' changes with the transaction's others: a delete in a batch that fails or finishes jobs
// too, before it or after, takes no row of the totals before the one statement that writes them.

// finishedChange is a change to one row of the finished totals.
type finishedChange struct {
	queue, typ string
	state      int16
	n          int64
}

// finishedOrder is the order in which every statement that writes the finished totals takes
// their rows: by queue, type and state, the strings compared byte by byte (as Go does), not by
// the database's collation.
const finishedOrder = `queue COLLATE "C", type COLLATE "C", state`

// finishedTotalsSQL adds changes to the finished totals, in finishedOrder. An INSERT takes
// the rows its SELECT produces one by one, in the SELECT's order.
const finishedTotalsSQL = `INSERT INTO finished_totals (queue, type, state, n)
	SELECT queue, type, state, sum(n)::bigint
	FROM unnest($1::text[], $2::text[], $3::smallint[], $4::bigint[]) AS u(queue, type, state, n)
	GROUP BY queue, type, state
	ORDER BY ` + finishedOrder + `
	ON CONFLICT (queue, type, state) DO UPDATE SET n = finished_totals.n + excluded.n`

// takeFinished returns the changes held (as finishedTotalsSQL's four arrays: queues, types,
// states, amounts), one per row, sorted, and forgets them: the caller writes them.
func (t *tx) takeFinished() []any {
	changes := slices.Clone(t.finished)
	t.finished = nil
	slices.SortFunc(changes, func(a, b finishedChange) int {
		return cmp.Or(cmp.Compare(a.queue, b.queue), cmp.Compare(a.typ, b.typ), cmp.Compare(a.state, b.state))
	})
	queues, types := make([]string, 0, len(changes)), make([]string, 0, len(changes))
	states, ns := make([]int16, 0, len(changes)), make([]int64, 0, len(changes))
	for i, c := range changes {
		if i > 0 && c.queue == queues[len(queues)-1] && c.typ == types[len(types)-1] && c.state == states[len(states)-1] {
			ns[len(ns)-1] += c.n
			continue
		}
		queues, types, states, ns = append(queues, c.queue), append(types, c.typ), append(states, c.state), append(ns, c.n)
	}
	return []any{queues, types, states, ns}
}

// flushFinished writes the changes to the finished totals held (none: nothing), sent with the
// transaction's next statement.
func (t *tx) flushFinished() error {
	defer t.frontSafe()()
	if len(t.finished) == 0 {
		return nil
	}
	return t.hold(finishedTotalsSQL, t.takeFinished()...)
}

// totalsHeldSQL tells the trigger on deletes of jobs (finished_totals_delete, migration 009)
// that the transaction takes the jobs it deletes off the finished totals itself, for the rest
// of the transaction (or of the savepoint it is in: sent before each delete).
const totalsHeldSQL = `SELECT set_config('jobwire.finished_totals', 'held', true)`

// deleteJobs deletes the jobs locked, a SELECT of the ids of jobs that locks them (FOR UPDATE)
// in id order (lockorder.go), and holds the changes to the finished totals of the finished jobs
// it deleted, for the transaction's one statement that writes them: the trigger would lock
// their rows with the delete, before the changes held until then and those to come. It
// returns how many jobs it deleted.
func (t *tx) deleteJobs(locked string, args ...any) (int, error) {
	if err := t.hold(totalsHeldSQL); err != nil {
		return 0, err
	}
	rows, err := t.tx.Query(t.ctx, `WITH locked AS MATERIALIZED (`+locked+`),
		gone AS (DELETE FROM jobs USING locked WHERE jobs.id = locked.id RETURNING jobs.queue, jobs.type, jobs.state)
		SELECT queue, type, state, count(*) FROM gone GROUP BY queue, type, state`, args...)
	if err != nil {
		return 0, err
	}
	var deleted int
	var queue, typ string
	var state int16
	var n int
	_, err = pgx.ForEachRow(rows, []any{&queue, &typ, &state, &n}, func() error {
		deleted += n
		if !job.State(state).Final() {
			return nil
		}
		return t.addFinished(queue, typ, job.State(state), -n)
	})
	return deleted, err
}
