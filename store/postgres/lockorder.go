package postgres

import "slices"

// The lock order. Brokers that share a database write the same rows: a job whose lease one
// broker's sweep ends while its worker's result reaches another, a result replayed at a second
// broker, the totals and breakers of one queue and type. A transaction that waits for a row
// another holds is fine; two that each hold a row the other waits for deadlock, and the server
// breaks the cycle after deadlock_timeout (a second, by default) by aborting one of them
// (40P01), which the storage retries run again: no write is lost, but both stall. Every write
// of this store therefore takes its rows in one order:
//
//  1. jobs, by id ascending (and the idempotency and unique keys its inserts wait for: see
//     totals.go);
//  2. the finished totals, by queue, type and state (finishedOrder, totals.go);
//  3. the breakers, by type;
//  4. the capped queues, by name (lockCappedSQL, queues.go);
//  5. the rate limits, every one, by name (rateLocksSQL, ratelimit.go), and then the buckets a
//     lease takes from, which only holders of those locks write.
//  6. a periodic schedule (ScheduleLock, schedules.go): one per write, of the schedule it fires,
//     triggers, backfills or changes; the jobs it inserts are new rows, which no other
//     transaction waits for. A writer's batch holding two such writes of two schedules locks
//     them in the order they came, which two brokers may not share; only the leader fires, so
//     such a cycle needs an operator's change racing the leader's fire, and the server breaks
//     it (40P01) for the storage retries to run again.
//  7. the concurrency keys' one advisory lock (lockConcurrency, keyconc.go), taken by a lease that
//     honours keys, which then waits for no row (its reads of jobs skip locked rows), and the
//     rows of concurrency_turns, written only under that lock. A keyed lease that applies rate
//     limits takes step 5 first and writes the buckets last, which only holders of step 5's
//     locks write: waiting for the limits' rows, it holds no keys' lock
//     (TestKeyedRatedLeaseLocksTheLimitsBeforeTheKeys).
//  8. the batches, by id (countBatchJobsSQL, batches.go): a transaction counts the batch jobs
//     it finished where its writes end, after every row above. Adding jobs to a batch takes
//     its row FOR KEY SHARE, which no count waits for; closing one takes it FOR UPDATE. The
//     count's mark of the jobs it counts (countBatchJobsSQL) comes after those rows but locks
//     no job it has not written: a job final and not counted yet is one whose final write has
//     not committed, and the statement's snapshot shows another's such job as not final.
//
// Within one statement the store keeps the order itself; across statements the caller does
// (the writer's queue.write, broker/commit/queue.go: jobs, then the totals the store writes at
// once, then the breakers sorted, then the capped queues). The statements that lock rows of
// jobs, and the order they lock them in:
//
//   - A lease's read (leaseQuery: leaseAtOnceSQL, leaseCapped) locks ready jobs in dispatch
//     order, but with SKIP LOCKED: it never waits for a job, so it closes no cycle; its UPDATE
//     (leaseAtOnceSQL, leaseSQL) changes only the rows it locked.
//   - An insert (insertRun, offeredInsertSQL, insertOne) locks only the new rows, which no other
//     transaction sees; an insert with an idempotency or a unique key waits for another's
//     uncommitted insert of that key (totals.go), or, for a unique key, another's uncommitted
//     change of the job holding it (a state change may take it out of the unique index). A
//     unique key is thus a lock of the jobs class taken in the order of the batch's enqueues,
//     as an idempotency key is.
//   - An operator's change of a waiting job (JobChangeWaiting: run now, retry now, delete,
//     priority) locks one job FOR UPDATE, as JobCancel does.
//   - JobRequeue first locks the dead jobs in id order and takes the unique key off those whose
//     key another job holds (requeueUniqueSQL), then requeues them; then it locks the
//     dependents their deaths cancelled, in id order, a level of dependents per statement
//     (reviveSQL). Those are CANCELLED jobs, which only a retention delete or another requeue
//     writes; their batches' rows it leaves to the transaction's count (countSQL).
//   - The writes of one lease (JobStart, JobFinish, JobRelease) and JobCancel lock one job each,
//     and JobFinish's and JobCancel's attempt rows refer to (KEY SHARE) the job they just
//     locked. A transaction that runs several locks them in the order of its calls, which keep
//     the rule only when they come in id order: the sweep of expired leases does
//     (JobHeldExpired lists in id order). A writer's batch applies its ops in the order they
//     came in, one-job writes first and its writes of many after, so it locks every job they
//     write first, in id order (JobLockRows, lockRowsSQL, from broker/commit): two brokers
//     failing one job and storing the success of another, in opposite roles, deadlocked before
//     (TestWritersLockJobsFirstInIDOrder, broker/commit).
//   - The writes of many leases (startManySQL, releaseManySQL, extendLeasesSQL,
//     succeedManySQL) joined their arrays to jobs and locked the rows in the order of the
//     plan's join, the order of the arrays: the order the results came in, not the ids'. A
//     broker finishing jobs 1 and then 2 one by one and another storing the successes of 2
//     and 1 with one statement deadlocked (TestManyWritesLockJobsInIDOrder). They now lock
//     their jobs first, in id order, with lockLeasesSQL, fenced as their write is, in the same
//     transaction: the write then waits for no job, and sees what committed while it waited.
//     Jobs JobLockRows locked already are not locked again: a writer's batch costs the one
//     locking statement it did before.
//   - JobRequeue, JobDeleteDead, JobDeleteFinished and JobPromoteScheduled change many jobs
//     chosen by a condition, in the order of their plan's scan (an index's order, a bitmap's
//     physical order): a requeue and a retention delete of the same dead jobs deadlocked
//     (TestRetentionAndRequeueLockJobsInIDOrder). Each now selects its jobs first, in a CTE,
//     ORDER BY id FOR UPDATE (FOR NO KEY UPDATE before an UPDATE), its condition checked again
//     on a job changed while it waited, and writes the rows it locked
//     (TestPromotionLocksJobsInIDOrder checks the promotion's).
//   - JobReleaseAllLeased changes every LEASED job, and runs only for a broker alone on its
//     database (at start and at shutdown).
//   - A delete of jobs takes their attempts with it (ON DELETE CASCADE), rows only writers of
//     the job itself lock, after the job.
//   - Settling the dependents of the jobs a transaction made final (jobwire_settle_dependents,
//     deps.go) comes last, with COMMIT: it locks WAITING jobs, in id order level by level, after
//     the transaction's own jobs and totals, and adds a cancelled dependent to the totals after
//     locking it. No write of a lease, a start or a result locks a WAITING job; only a cancel of
//     one and another transaction's settling do, so a cycle needs two transactions that both
//     settle or cancel the same waiting jobs, which the server breaks (40P01) for the storage
//     retries to run again. Adding a dependent locks its parents FOR SHARE, in id order, after
//     inserting the new (unseen) rows, so that none of them is settled before its edge exists.
//     Another broker's lease skips a PENDING parent so held, so the write then publishes
//     EventReady (parentStates, deps.go): that broker looks again once the lock is let go.

// lockLeasesSQL locks the jobs of many leases (the arrays of their ids, token numbers and
// secrets) that the leases still hold, in id order, as the write of them that follows will
// change them (FOR NO KEY UPDATE, an UPDATE's own lock): the same jobs, fenced the same way. A
// job another transaction changes meanwhile is checked again once that one commits, and left
// alone if it no longer matches. It returns nothing: the write that follows, a statement of its
// own, reads the jobs again from a snapshot taken after the locks.
const lockLeasesSQL = `SELECT FROM unnest($1::bigint[], $2::bigint[], $3::bytea[]) AS u(id, seq, secret)
	JOIN jobs ON jobs.id = u.id AND jobs.lease_token = u.seq AND jobs.lease_secret = u.secret
	WHERE jobs.state + 0 IN (3, 4)
	ORDER BY jobs.id FOR NO KEY UPDATE OF jobs`

// lockLeases locks the jobs of the leases ids, seqs and secrets (leaseArrays) in id order
// (lockLeasesSQL), with the statement sent next: it precedes a write of many leases, under
// the settings of joinByKey, which hold its join to probing the primary key too. Jobs the
// transaction locked already with JobLockRows (a writer's batch) are not locked again.
func (t *tx) lockLeases(ids, seqs []int64, secrets [][]byte) error {
	if t.lockedAll(ids) {
		return nil // JobLockRows locked them, in id order, before any write of jobs
	}
	return t.hold(lockLeasesSQL, ids, seqs, secrets)
}

// lockRowsSQL locks the jobs of the ids $1 that are leased (LEASED or RUNNING), in id order, as
// the writes that follow will change them (FOR NO KEY UPDATE): JobLockRows. The writes of a
// writer's batch change leased jobs only; a job in another state (a stale result's, whose job
// waits SCHEDULED for its next attempt) is left to the transactions that do change it, such as
// the promotion of due jobs: holding it too closed a cycle with one. A job that changes state
// while the lock waits is checked again once its writer commits.
const lockRowsSQL = `SELECT FROM jobs WHERE id = ANY($1::bigint[]) AND state + 0 IN (3, 4)
	ORDER BY id FOR NO KEY UPDATE`

// JobLockRows locks the jobs ids in id order (lockRowsSQL), with the statement sent next. A
// writer's batch locks every job it writes this way before it writes any: its one-job writes
// (JobFinish, JobRelease, JobStart), applied in the order their messages came, and its writes
// of many then wait for no job.
//
// It runs under joinByKey's settings, as the writes of many that follow it do (so they cost
// no statement of their own). Without them the plan the server kept for it could be one made
// while the table was nearly empty, a sequential scan: beside 10,000 jobs each batch's lock
// took 3 ms, most of a group commit's time at 1,000 jobs/s on PostgreSQL
// (TestLockRowsProbesThePrimaryKey).
func (t *tx) JobLockRows(ids []int64) error {
	defer t.frontSafe()() // a lock changes no job
	ids = slices.Clone(ids)
	slices.Sort(ids)
	ids = slices.Compact(ids)
	if len(ids) == 0 {
		return nil
	}
	t.locked = slices.Compact(slices.Sorted(slices.Values(append(t.locked, ids...))))
	if err := t.joinByKey(true); err != nil {
		return err
	}
	if err := t.hold(lockRowsSQL, ids); err != nil {
		return err
	}
	return t.joinByKey(false)
}

// lockedAll reports whether JobLockRows took every job of ids already (locking the leased).
func (t *tx) lockedAll(ids []int64) bool {
	if len(t.locked) == 0 {
		return false
	}
	for _, id := range ids {
		if _, ok := slices.BinarySearch(t.locked, id); !ok {
			return false
		}
	}
	return true
}
