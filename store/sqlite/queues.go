package sqlite

// queueRoom is how many more jobs each unpaused capped queue may have leased, counted from the
// database (JobLeaseParams.EnforceQueues): its limit less its LEASED and RUNNING jobs, this
// transaction's included. The transaction holds the database's write lock, so nothing else
// leases between the count and the lease.
func (t *tx) queueRoom() (map[string]int, error) {
	rows, err := t.query(`SELECT q.name, q.concurrency_limit,
		(SELECT COUNT(*) FROM jobs WHERE ` + openState + ` AND state IN (3, 4) AND queue = q.name)
		FROM queues q WHERE q.concurrency_limit > 0 AND NOT q.paused`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	room := map[string]int{}
	for rows.Next() {
		var name string
		var limit, held int
		if err := rows.Scan(&name, &limit, &held); err != nil {
			return nil, err
		}
		room[name] = max(0, limit-held)
	}
	return room, rows.Err()
}
