package sqlite

import (
	"strconv"

	"github.com/jobwire/jobwire/store"
)

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

// readyQueuesBut names the queues a lease of every queue but some (p.ExcludeQueues and, with
// p.ExcludePaused, the paused ones) may take from: those with ready jobs, less the ones left
// out. A lease that names them reads each through jobs_ready_queue_type (leaseQuery), where
// one of every queue reads its types through jobs_ready_type and passes over their ready jobs
// in the queues it leaves out: a paused queue is where a backlog waits. ok is false when more
// than store.MaxNamedQueues would be named. The queues are found by one index step each (a loose
// scan of jobs_ready_queue_type), so the cost follows the number of queues, not of their jobs.
func (t *tx) readyQueuesBut(p *store.JobLeaseParams) (names []string, ok bool, err error) {
	out := map[string]bool{}
	for _, q := range p.ExcludeQueues {
		out[q] = true
	}
	if p.ExcludePaused {
		paused, err := t.queryStrings(`SELECT name FROM queues WHERE paused`)
		if err != nil {
			return nil, false, err
		}
		for _, q := range paused {
			out[q] = true
		}
	}
	ready, err := t.queryStrings(`WITH RECURSIVE ready(name) AS (
			SELECT (SELECT queue FROM jobs INDEXED BY jobs_ready_queue_type WHERE state = 2 ORDER BY queue LIMIT 1)
			UNION ALL
			SELECT (SELECT queue FROM jobs INDEXED BY jobs_ready_queue_type WHERE state = 2 AND queue > ready.name
				ORDER BY queue LIMIT 1) FROM ready WHERE ready.name IS NOT NULL
		) SELECT name FROM ready WHERE name IS NOT NULL LIMIT ` + strconv.Itoa(store.MaxNamedQueues+len(out)+1))
	if err != nil {
		return nil, false, err
	}
	for _, q := range ready {
		if !out[q] {
			names = append(names, q)
		}
	}
	if len(names) > store.MaxNamedQueues || len(ready) > store.MaxNamedQueues+len(out) {
		return nil, false, nil
	}
	return names, true, nil
}

// queryStrings runs a query of one text column and returns its rows.
func (t *tx) queryStrings(q string, args ...any) ([]string, error) {
	rows, err := t.query(q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var v string
		if err := rows.Scan(&v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}
