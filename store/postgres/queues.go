package postgres

import "github.com/jackc/pgx/v5"

// Queue pauses and caps enforced by the database (JobLeaseParams.EnforceQueues), for several
// brokers leasing from one database at once.
//
// A capped queue's room is its limit less its LEASED and RUNNING jobs, counted after locking
// the queue's row: a second transaction that wants to lease from the queue waits for the
// first to commit, and then counts the jobs the first leased (each statement of a READ
// COMMITTED transaction sees what committed before it started). Every transaction locks the
// rows of all capped queues at once and in name order, the first time it needs any of them:
// the leases of one transaction (one per worker stream of a dispatch round) may serve
// different queues in any order, and locking them one lease at a time would let two brokers
// take the same rows in opposite orders and deadlock. Writes that pause, resume or cap a queue
// take the same locks first, so a lease never counts against a limit that is being changed.

// lockCappedSQL locks the row of every capped queue, in name order.
const lockCappedSQL = `SELECT name, concurrency_limit, paused FROM queues
	WHERE concurrency_limit > 0 ORDER BY name FOR UPDATE`

// lockCappedQueues locks the row of every capped queue, in name order.
func (t *tx) lockCappedQueues() error {
	if err := t.flushFinished(); err != nil { // the totals' rows come before the queues'
		return err
	}
	rows, err := t.tx.Query(t.ctx, lockCappedSQL)
	if err != nil {
		return err
	}
	_, err = scanLimits(rows)
	return err
}

// scanLimits reads lockCappedSQL's rows as each unpaused queue's limit, and closes them.
func scanLimits(rows pgx.Rows) (map[string]int, error) {
	defer rows.Close()
	limits := map[string]int{}
	for rows.Next() {
		var name string
		var limit int
		var paused bool
		if err := rows.Scan(&name, &limit, &paused); err != nil {
			return nil, err
		}
		if !paused {
			limits[name] = limit
		}
	}
	return limits, rows.Err()
}

// queueRoom is how many more jobs each unpaused capped queue may have leased, counted from the
// database under the capped queues' locks. The transaction keeps the map and takes from it as
// it leases, so later leases of the same transaction need neither lock nor count again.
//
// The lock and the count go to the server in one batch (one round trip); the count is a
// statement of its own, which starts once the locks are granted and so sees every lease
// committed before them.
func (t *tx) queueRoom() (map[string]int, error) {
	if t.room != nil {
		return t.room, nil
	}
	if err := t.flushFinished(); err != nil { // the totals' rows come before the queues'
		return nil, err
	}
	batch := &pgx.Batch{}
	batch.Queue(lockCappedSQL)
	// One count per capped queue, each read from the held jobs of that queue alone
	// (jobs_held_queue): a join would read every held job of every queue.
	batch.Queue(`SELECT q.name, (SELECT count(*) FROM jobs WHERE state IN (3, 4) AND queue = q.name)
		FROM queues q WHERE q.concurrency_limit > 0 AND NOT q.paused`)
	res := t.tx.SendBatch(t.ctx, batch)
	defer res.Close()
	rows, err := res.Query()
	if err != nil {
		return nil, err
	}
	limits, err := scanLimits(rows)
	if err != nil {
		return nil, err
	}
	rows, err = res.Query()
	if err != nil {
		return nil, err
	}
	held := map[string]int{}
	for rows.Next() {
		var name string
		var n int
		if err := rows.Scan(&name, &n); err != nil {
			rows.Close()
			return nil, err
		}
		held[name] = n
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	room := make(map[string]int, len(limits))
	for name, limit := range limits {
		room[name] = max(0, limit-held[name])
	}
	t.room = room
	return room, nil
}

// queueChanging takes the capped queues' locks before a write changes a queue's pause or
// limit, and drops the room this transaction counted: a later lease counts again under the
// new settings.
func (t *tx) queueChanging() error {
	t.room = nil
	return t.lockCappedQueues()
}
