package postgres

import "strings"

// readInDispatchOrder turns, for the statements that follow, sorting off (on: back to the
// server's setting), so the lease reads the ready jobs through the index that holds them in
// dispatch order and stops at its limit, whatever the planner's statistics say. Without it a
// fresh or freshly analysed table (few ready jobs seen) got a plan that reads every ready job
// and every dead index entry, then sorts them: 7 to 9 ms per lease with 2,500 jobs ready, where
// the index takes 0.1. SET LOCAL ends with the transaction, or with a savepoint rolled back.
func (t *tx) readInDispatchOrder(on bool) error { return t.plannerOff(on, "enable_sort") }

// readHeldByIndex turns, for the statements that follow, bitmap scans off (on: back to the
// server's setting), so the sweep reads the held jobs through their index (jobs_held_queue)
// one entry at a time. That index keeps an entry for each version of a job that was held, two
// a job, until a vacuum removes it. A bitmap scan, the planner's choice for a table it holds
// no statistics of yet (TestSweepReadsTheHeldIndex), visits the table for every one of them at
// every sweep, once a second, in the writer's transaction: through a drain of a million jobs
// the read went from 15 to 120 ms. An index scan marks the entries whose versions it finds
// dead to every transaction, and the scans after it pass over them without visiting the
// table: in psql, 300,000 jobs drained with no vacuum, 0.12 ms from its second run on,
// against 13-24 for the bitmap scan.
func (t *tx) readHeldByIndex(on bool) error { return t.plannerOff(on, "enable_bitmapscan") }

// joinByKey turns, for the statements that follow, hash and merge joins and sequential scans
// off (on: back to the server's settings), so that a write of many jobs at once, which joins the arrays of their
// ids (unnest) to jobs, probes jobs' primary key once per job whatever the planner's
// statistics say. Those writes also check the job's state as state + 0, which no partial index
// on state matches.
//
// Left to the planner, they read instead the partial index of the state they check
// (jobs_ready, jobs_held_queue) and hash-joined it, or the whole table. Those
// indexes keep an entry for every version of every job that passed through their state until
// a vacuum removes it, and the planner, which counts live rows only, took them for a few
// hundred: under a steady load, storing a hundred successes or leases read tens of thousands
// of index entries, or the whole table (TestManyWritesProbeThePrimaryKey).
func (t *tx) joinByKey(on bool) error { return t.plannerOff(on, keyJoinOff...) }

// keyJoinOff are the planner's settings joinByKey turns off: with them off and the partial
// indexes out of reach, a nested loop that probes the primary key is the only plan left. The
// sequential scan is among them because a statement's plan is kept (pgx prepares it) and may
// have been made while the table was small, when reading all of it looked cheaper. JIT
// compilation is too: a plan that cannot avoid a node these settings disable (a sort in the
// lease's read, say) costs a huge number, which switched JIT on for it, and compiling a
// statement took 200 ms (seen in the store's tests).
//
// Custom plans are off too (plan_cache_mode): with the join settled, the plan the server
// keeps is the one wanted, and planning anew only costs. Left to choose, the server weighed
// its kept plan, costed for an array of a hundred jobs (a parameter's length is unknown)
// against plans made for the array at hand, one or two jobs at a time, and in some runs at
// 1,000 jobs/s planned the successes' write anew on about half of its calls: 200 µs a plan,
// for a statement that runs in 70 (TestManyWritesKeepTheirPlan).
var keyJoinOff = []string{"enable_hashjoin", "enable_mergejoin", "enable_seqscan", "jit", "plan_cache_mode"}

// offValue is the value plannerOff gives the setting name: off, but for plan_cache_mode,
// whose custom plans it turns off.
func offValue(name string) string {
	if name == "plan_cache_mode" {
		return "force_generic_plan"
	}
	return "off"
}

// plannerOff turns the planner settings names off for the statements that follow in the
// transaction (on), or back to what they were (off), with one statement either way: each
// statement of a write's batch costs the server its own parse, bind and execute, and turning
// five settings off and back one statement each, around every lease and write of many, made
// up most of a small group commit's time on the server. The values before are kept in
// settings of the transaction's own (jobwire.kept_NAME), so the server's configuration is
// restored whatever it is. Like SET LOCAL, both end with the transaction, or with a savepoint
// rolled back.
//
// In a write (pipeTx) turning settings back waits for the next statement they could change
// (pipe.plannerOff): a write of many followed by a lease keeps the settings both turn off,
// and one that ends with statements no setting changes (plannerNeutral), as a group commit
// does, never turns them back.
func (t *tx) plannerOff(on bool, names ...string) error {
	if p, ok := t.tx.(*pipeTx); ok {
		p.plannerOff(on, names)
		return nil
	}
	_, err := t.tx.Exec(t.ctx, plannerSQL(on, names))
	return err
}

// plannerSQL is the statement that turns names off (on: each to its offValue) or back (off).
func plannerSQL(on bool, names []string) string {
	list := "'{" + strings.Join(names, ",") + "}'::text[]"
	if on {
		values := make([]string, len(names))
		for i, n := range names {
			values[i] = offValue(n)
		}
		return `SELECT set_config('jobwire.kept_' || n, current_setting(n), true), set_config(n, v, true)
			FROM unnest(` + list + `, '{` + strings.Join(values, ",") + `}'::text[]) AS s(n, v)`
	}
	return `SELECT set_config(n, current_setting('jobwire.kept_' || n), true) FROM unnest(` + list + `) AS n`
}

// plannerNeutral are the statements of a write whose plan none of the settings plannerOff
// turns off can change: they write or read a small table by its key, or no table at all. They
// run with the settings as they are, so settings waiting to be turned back still wait.
var plannerNeutral = map[string]bool{receiptSQL: true, notifySQL: true, breakerShutSQL: true,
	breakerLockSQL: true, breakerWasShutSQL: true, breakerSaveSQL: true, breakerSaveIfSQL: true}
