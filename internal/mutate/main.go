// Command mutate checks that the tests guard what the broker's promises rest on: it applies
// deliberate one-line bugs (mutations) to those guards, one at a time, runs the tests that
// should notice, and expects them to fail. It prints a table of which mutations the tests
// killed and which survived, and exits with status 1 if any survived.
//
// Run it from the repository root with `make mutate`, which starts a private PostgreSQL for the
// PostgreSQL store's mutations (scripts/with-postgres.sh); -only takes a regular expression over
// mutation names. The source file is restored after each mutation, also when the run is
// interrupted. Most tests are Go's; a mutation of an SDK names its own test runner (sdk).
//
// The list cannot rot unnoticed: TestListApplies, part of go test ./..., fails as soon as an
// entry's text is not found exactly once, its package or test file is gone, or its -run
// pattern selects no test (-check does the same from the command line). Before any mutation
// the runner runs each entry's tests unmutated and stops unless they pass and run at least one
// test in every package named; a mutation counts as killed only when a test ran and failed,
// never when the tests did not build or none ran.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"
)

// mutation is one deliberate bug: in file, the text from (found exactly once) becomes to.
type mutation struct {
	name     string
	file     string
	from, to string
	// pkgs are the Go packages whose tests must kill it, or with sdk the SDK's test files.
	pkgs []string
	// run selects those tests: go test's -run pattern; with sdk "python" unittest's -k (a
	// substring of Class.test_method), with sdk "node" node --test's --test-name-pattern.
	run string
	// sdk names the test runner when the tests are not Go's: "python" or "node".
	sdk string
	// postgres: the tests need a PostgreSQL server (JOBWIRE_TEST_POSTGRES), without which
	// they skip; the runner refuses to start without one.
	postgres bool
}

const (
	sdkPython = "python"
	sdkNode   = "node"
	sdkJava   = "java"
	sdkRust   = "rust"
)

const (
	fenced    = "TestStoreContract/FencedWrites"
	matrix    = "TestStorageFaultMatrix"
	restart   = "TestStaleTokensAfterRestart"
	txFile    = "store/sqlite/tx.go"
	fenceFile = "store/fence.go"
	storePkg  = "./store/sqlite"
	srvPkg    = "./server"

	pgTx      = "store/postgres/tx.go"
	pgPkg     = "./store/postgres"
	pgFenced  = "TestStoreContract$/FencedWrites"
	secPkg    = "./security"
	authPkg   = "./internal/auth"
	webPkg    = "./internal/web"
	authzFile = "server/authz.go"
	authFile  = "internal/auth/auth.go"
)

// sqlFence is the two mutations of one fencing comparison in SQL: a token at or above the
// current one accepted, and one at or below it.
func sqlFence(write, from string) []mutation {
	var out []mutation
	for _, op := range []string{">=", "<="} {
		out = append(out, mutation{
			name: "fencing in SQL: " + write + " takes lease_token " + op,
			file: txFile, from: from, to: strings.Replace(from, "lease_token = ", "lease_token "+op+" ", 1),
			pkgs: []string{storePkg}, run: fenced,
		})
	}
	return out
}

// pgFence is sqlFence for the PostgreSQL store, whose tests need a server.
func pgFence(write, file, from string) []mutation {
	var out []mutation
	for _, op := range []string{">=", "<="} {
		out = append(out, mutation{
			name: "postgres fencing: " + write + " takes lease_token " + op,
			file: file, from: from, to: strings.Replace(from, "lease_token = ", "lease_token "+op+" ", 1),
			pkgs: []string{pgPkg}, run: pgFenced, postgres: true,
		})
	}
	return out
}

func mutations() []mutation {
	var ms []mutation
	add := func(m ...mutation) { ms = append(ms, m...) }

	// Attempt counting: only a start spends an attempt, and every attempt is numbered once.
	add(mutation{name: "attempts: a start does not count the attempt", file: txFile,
		from: "SET state = 4, attempts = attempts + 1,", to: "SET state = 4, attempts = attempts,",
		pkgs: []string{srvPkg}, run: matrix + "/start"})
	add(mutation{name: "attempts: an assignment numbers the attempt one too high", file: "broker/dispatch.go",
		from: "job: kept, attempt: j.Attempts + 1,", to: "job: kept, attempt: j.Attempts + 2,",
		pkgs: []string{srvPkg}, run: "TestSuccess$"})
	add(mutation{name: "attempts: a lease rebuilt from storage counts its attempt again", file: "broker/session.go",
		from: "l.started, l.startedAt, l.attempt = true, j.StartedAt, j.Attempts\n",
		to:   "l.started, l.startedAt, l.attempt = true, j.StartedAt, j.Attempts+1\n",
		pkgs: []string{srvPkg}, run: restart})
	add(mutation{name: "attempts: an expired lease is recorded as a new attempt", file: "broker/sweep.go",
		from: "a := job.Attempt{Number: j.Attempts,", to: "a := job.Attempt{Number: j.Attempts + 1,",
		pkgs: []string{srvPkg}, run: matrix + "/lease_expiry"})

	// Fencing in SQL: the database refuses any token but the current one.
	add(sqlFence("JobStart", "lease_token = ? AND lease_secret = ? AND state = 3\n\t\tAND lease_expires_at > ?`")...)
	add(sqlFence("a success (JobFinish, JobSucceedMany)", "lease_token = ? AND lease_secret = ? AND state IN (3, 4)`,\n\t\ta.Number")...)
	add(sqlFence("JobFinish (failure)", "lease_token = ? AND lease_secret = ? AND state IN (3, 4) RETURNING attempt_base")...)
	add(sqlFence("JobRelease", "lease_token = ? AND lease_secret = ? AND state = 3`, ref.JobID")...)
	add(sqlFence("JobExtendLeases", "lease_token = ? AND lease_secret = ? AND state IN (3, 4)\n\t\t\tAND lease_expires_at > ?`")...)
	add(sqlFence("JobGetHeld", "FROM jobs WHERE id = ? AND lease_token = ? AND lease_secret = ? AND state IN (3, 4)`,")...)
	add(mutation{name: "fencing in SQL: JobSucceedMany reports a success it did not store as applied", file: txFile,
		from: "if applied[i], err = t.alreadyFinished(p); err != nil {", to: "if applied[i], err = true, nil; err != nil {",
		pkgs: []string{storePkg}, run: "TestLeaseFencingComparesTheSecret"})

	// Fencing in memory: the broker's lease table refuses any token but the current one.
	add(mutation{name: "fencing in memory: any token of a held job is current", file: "broker/session.go",
		from: "if l == nil || l.ref.Token != ref.Token {", to: "if l == nil {",
		pkgs: []string{srvPkg}, run: restart + "|TestStaleFencingTokenRefused"})

	// The end of a stream: a job sent to the worker may run though its Started did not arrive,
	// so only one that provably never started goes back to PENDING at once.
	add(mutation{name: "stream end: a job sent whose Started did not arrive goes back at once", file: "broker/session.go",
		from: "case !l.started && (s.halfClosed || unsent[l.ref]):", to: "case !l.started && (s.halfClosed || unsent != nil):",
		pkgs: []string{"./broker", srvPkg}, run: "TestClosedStreamKeepsTheLeasesOfJobsSent|TestStartedLostWithTheStreamKeepsTheLease"})
	add(mutation{name: "stream end: a half-closed stream keeps the jobs it never started", file: "broker/session.go",
		from: "case !l.started && (s.halfClosed || unsent[l.ref]):", to: "case !l.started && unsent[l.ref]:",
		pkgs: []string{"./broker"}, run: "TestHalfClosedStreamHandsBackJobsNeverStarted"})

	// The idempotent-rerun rule: a write whose commit went through is not applied again, and a
	// write fenced by a lease that finds its own effect reports it applied.
	add(mutation{name: "rerun: Write runs a committed write again", file: "store/sqlite/sqlite.go",
		from: "if mayHaveCommitted {", to: "if false && mayHaveCommitted {",
		pkgs: []string{storePkg, srvPkg}, run: "TestWriteRunsAgain|" + matrix + "/enqueue"})
	add(mutation{name: "rerun: Write stores no receipt", file: "store/sqlite/sqlite.go",
		from: "if err := t.storeReceipt(receipt); err != nil {", to: "if err := error(nil); err != nil {",
		pkgs: []string{storePkg}, run: "TestWriteRunsAgain"})
	add(mutation{name: "rerun: a stored start is stale", file: txFile,
		from: "return t.alreadyApplied(p.Ref, job.StateRunning, p.Attempt)", to: "return false, nil",
		pkgs: []string{storePkg}, run: fenced})
	add(mutation{name: "rerun: a stored result is stale", file: txFile,
		from: "return t.alreadyApplied(p.Ref, p.State, p.Attempt.Number)", to: "return false, nil",
		pkgs: []string{storePkg}, run: fenced})
	add(mutation{name: "rerun: a stored release is stale", file: fenceFile,
		from: "s.Token == ref.Token && s.State == job.StatePending", to: "s.Token == ref.Token && s.State == job.StateLeased",
		pkgs: []string{storePkg}, run: fenced})
	add(mutation{name: "rerun: another attempt's effect counts as this one's", file: fenceFile,
		from: "s.Token == ref.Token && s.Attempts == attempts && s.State == state", to: "s.Token == ref.Token && s.Attempts >= 0 && s.State == state",
		pkgs: []string{storePkg}, run: "TestStoreContract/JobStart$"})
	add(mutation{name: "rerun: a newer token's effect counts as this one's", file: fenceFile,
		from: "s.Token == ref.Token && s.Attempts == attempts && s.State == state", to: "s.Token.Seq <= ref.Token.Seq && s.Attempts == attempts && s.State == state",
		pkgs: []string{storePkg}, run: fenced})

	// Jitter clipping: the job retry wait never passes its cap.
	add(mutation{name: "jitter: the window is not clipped at the cap", file: "retry/policy.go",
		from: "return min(p.JitterMax, max(0, p.MaxDelay-p.Capped(attempt)))", to: "return p.JitterMax",
		pkgs: []string{"./retry"}, run: ""})
	add(mutation{name: "jitter: a worker's retry-after passes the cap", file: "retry/policy.go",
		from: "return min(retryAfter, p.MaxDelay)", to: "return retryAfter",
		pkgs: []string{"./retry"}, run: ""})

	// Breaker permits.
	add(mutation{name: "breaker: one probe too many while HALF_OPEN", file: "breaker/set.go",
		from: "case b.state == StateHalfOpen && len(b.probes) < b.cfg.HalfOpenProbes:\n\t\tb.lastProbe++",
		to:   "case b.state == StateHalfOpen && len(b.probes) <= b.cfg.HalfOpenProbes:\n\t\tb.lastProbe++",
		pkgs: []string{"./breaker"}, run: ""})
	add(mutation{name: "breaker: a permit of an earlier generation counts", file: "breaker/set.go",
		from: "return b.gen == p.Generation", to: "return true",
		pkgs: []string{"./breaker"}, run: ""})
	add(mutation{name: "breaker: ratio mode trusts a window one call short of min_calls", file: "breaker/set.go",
		from: "if calls >= b.cfg.MinCalls && float64(failures)", to: "if calls >= b.cfg.MinCalls-1 && float64(failures)",
		pkgs: []string{"./breaker"}, run: "TestRatioMode"})
	add(mutation{name: "breaker: the default counts fatal failures", file: "breaker/breaker.go",
		from: "c.Count = DefaultKinds", to: "c.Count = AllKinds",
		pkgs: []string{"./breaker"}, run: "TestDefaultConfig"})
	add(mutation{name: "breaker: a failed attempt is not counted", file: "broker/breakers.go",
		from: "b.breakers.FailureNote(l.permit, breaker.Note{Job: l.ref.JobID, Kind: kind, Message: l.failMsg})",
		to:   "b.breakers.Release(l.permit)",
		pkgs: []string{srvPkg}, run: matrix + "/result"})
	add(mutation{name: "breaker: a probe that found no job keeps its worker's slot", file: "broker/dispatch.go",
		from: "if g.open != nil && len(g.leased) < g.reserved {", to: "if false {",
		pkgs: []string{"./broker"}, run: "TestProbeLeavesWorkerSlot$"})
	add(mutation{name: "breaker: a probe handed out has no timer for its slot's timeout", file: "broker/dispatch.go",
		from: "slot times out.\n\tb.armBreakerTimerLocked()\n", to: "slot times out.\n",
		pkgs: []string{"./broker"}, run: "TestHalfOpenWaitsForAJob$"})

	// Max attempts and always-fatal types.
	add(mutation{name: "max attempts: one attempt more than allowed", file: "triage/triage.go",
		from: "if a.Number >= maxAttempts {", to: "if a.Number > maxAttempts {",
		pkgs: []string{"./triage"}, run: ""})
	add(mutation{name: "always-fatal types are retried", file: "triage/triage.go",
		from: "if kind != job.KindFatal && t.AlwaysFatal[a.Failure.ErrorType] {", to: "if false {",
		pkgs: []string{"./triage"}, run: ""})

	// Storage retry limits.
	add(mutation{name: "storage retries: one retry more than configured", file: "store/storeretry/storeretry.go",
		from: "if attempt > p.opts.MaxTransientRetries {", to: "if attempt > p.opts.MaxTransientRetries+1 {",
		pkgs: []string{"./store/storeretry"}, run: ""})
	add(mutation{name: "storage retries: one retry fewer than configured", file: "store/storeretry/storeretry.go",
		from: "if attempt > p.opts.MaxTransientRetries {", to: "if attempt >= p.opts.MaxTransientRetries {",
		pkgs: []string{"./store/storeretry"}, run: ""})
	add(mutation{name: "storage retries: the retry wait passes its ceiling", file: "store/storeretry/storeretry.go",
		from: "if d > maxDuration-j {", to: "if false {",
		pkgs: []string{"./store/storeretry"}, run: ""})

	// A broker cut off from its database: what it withdraws is never written, what it cannot
	// vouch for is not resent without a key.
	add(mutation{name: "unreachable: the writer writes an enqueue its caller withdrew", file: "broker/commit/op.go",
		from: "return t.state.CompareAndSwap(queued, taken) || t.state.Load() == taken", to: "return true",
		pkgs: []string{"./broker"}, run: "TestSilentDatabaseWithdrawsQueuedEnqueues"})
	add(mutation{name: "unreachable: a queued enqueue is said to be maybe applied", file: "broker/commit/op.go",
		from: "func (t *Ticket) Withdraw() bool { return t.state.CompareAndSwap(queued, withdrawn) }",
		to:   "func (t *Ticket) Withdraw() bool { return false }",
		pkgs: []string{"./broker"}, run: "TestSilentDatabaseWithdrawsQueuedEnqueues"})
	add(mutation{name: "unreachable: a slow call is silence though others are answered", file: "store/reach/reach.go",
		from: "if start.Before(t.lastOK) {", to: "if false {",
		pkgs: []string{"./store/reach"}, run: ""})
	add(mutation{name: "unreachable: a call that may have been applied is resent without a key", file: "client/resend.go",
		from: "if j.GetIdempotencyKey() == \"\" {\n\t\t\t\treturn false", to: "if j.GetIdempotencyKey() == \"\" {\n\t\t\t\tcontinue",
		pkgs: []string{"./client"}, run: "TestMayResend"})
	add(mutation{name: "unreachable: streams that are not movable are ended too", file: "broker/reach.go",
		from: "if !s.movable || s.draining || s.closed {\n\t\t\tcontinue\n\t\t}\n\t\ts.draining = true\n\t\ts.out.closeWith(err)",
		to:   "if s.draining || s.closed {\n\t\t\tcontinue\n\t\t}\n\t\ts.draining = true\n\t\ts.out.closeWith(err)",
		pkgs: []string{srvPkg}, run: "TestUnreachableDatabaseMovesMovableWorkersAway"})

	add(mutation{name: "storage retries: the clock's sleep returns at once", file: "store/storeretry/sleep.go",
		from: "\t\tif d <= 0 {\n\t\t\treturn nil\n\t\t}\n\t\tfired", to: "\t\tif true {\n\t\t\treturn nil\n\t\t}\n\t\tfired",
		pkgs: []string{"./store/storeretry"}, run: "TestClockSleep"})
	add(mutation{name: "postgres: Listen reconnects without waiting (the sleep returns at once)", file: "store/storeretry/sleep.go",
		from: "\t\tif d <= 0 {\n\t\t\treturn nil\n\t\t}\n\t\tfired", to: "\t\tif true {\n\t\t\treturn nil\n\t\t}\n\t\tfired",
		pkgs: []string{pgPkg}, run: "TestListenBacksOffWhileTheDatabaseRefuses"})

	// Fencing in the PostgreSQL store's SQL.
	add(pgFence("JobStart", pgTx, "WHERE id = $4 AND lease_token = $5 AND lease_secret = $6 AND state = 3\n\t\tAND lease_expires_at > $1`")...)
	add(pgFence("JobFinish (success)", pgTx, "WHERE id = $4 AND lease_token = $5 AND lease_secret = $6 AND state IN (3, 4)`,")...)
	add(pgFence("JobFinish (failure)", pgTx, "lease_token = $9 AND lease_secret = $10 AND state IN (3, 4) RETURNING attempt_base")...)
	add(pgFence("JobRelease", pgTx, "WHERE id = $1 AND lease_token = $2 AND lease_secret = $3 AND state = 3`, ref.JobID")...)
	add(pgFence("JobGetHeld", pgTx, "FROM jobs WHERE id = $1 AND lease_token = $2 AND lease_secret = $3 AND state IN (3, 4)`,")...)
	add(pgFence("JobExtendLeases", pgTx, "jobs.lease_token = u.seq AND jobs.lease_secret = u.secret AND jobs.state + 0 IN (3, 4)\n\t\tAND jobs.lease_expires_at > $5")...)
	add(pgFence("JobSucceedMany", pgTx, "jobs.lease_token = u.seq AND jobs.lease_secret = u.secret AND jobs.state + 0 IN (3, 4)\n\tRETURNING u.ord")...)
	add(pgFence("JobStartMany", "store/postgres/many.go", "AS u(id, seq, secret, now, until, deadline)\n\tWHERE jobs.id = u.id AND jobs.lease_token = u.seq")...)
	add(pgFence("JobReleaseMany", "store/postgres/many.go", "worker_id = ''\n\tFROM unnest($1::bigint[], $2::bigint[], $3::bytea[]) AS u(id, seq, secret)\n\tWHERE jobs.id = u.id AND jobs.lease_token = u.seq")...)

	// A Started read at or after its lease's deadline starts nothing: the lease is left to the
	// sweep, which hands the job back with no attempt spent.
	add(mutation{name: "lease deadline: a Started revives a lease past its deadline", file: txFile,
		from: "AND state = 3\n\t\tAND lease_expires_at > ?`", to: "AND state = 3\n\t\tAND ? IS NOT NULL`",
		pkgs: []string{storePkg}, run: "TestStoreContract/JobStartRunOut"})
	add(mutation{name: "lease deadline: a Started read at the deadline starts the job", file: txFile,
		from: "AND state = 3\n\t\tAND lease_expires_at > ?`", to: "AND state = 3\n\t\tAND lease_expires_at >= ?`",
		pkgs: []string{storePkg}, run: "TestStoreContract/JobStartRunOut"})
	add(mutation{name: "postgres lease deadline: a Started read at the deadline starts the job", file: pgTx,
		from: "\t\tAND lease_expires_at > $1`", to: "\t\tAND lease_expires_at >= $1`",
		pkgs: []string{pgPkg}, run: "TestStoreContract/JobStartRunOut", postgres: true})
	add(mutation{name: "postgres lease deadline: a batched Started read at the deadline starts the job", file: "store/postgres/many.go",
		from: "\t\tAND jobs.lease_expires_at > u.now\n", to: "\t\tAND jobs.lease_expires_at >= u.now\n",
		pkgs: []string{pgPkg}, run: "TestStoreContract/JobStartRunOut", postgres: true})
	add(mutation{name: "lease deadline: a Started refused as run out is answered as stale", file: "broker/session.go",
		from: "if l != nil && late {", to: "if l != nil && false {",
		pkgs: []string{srvPkg}, run: "TestStartedReadAfterTheDeadlineDoesNotStart"})
	add(mutation{name: "lease deadline: a Started read after the deadline counts as an attempt started", file: "broker/session.go",
		from: "\tif !late {\n\t\tb.obs.AttemptStarted", to: "\tif true {\n\t\tb.obs.AttemptStarted",
		pkgs: []string{srvPkg}, run: "TestStartedReadAfterTheDeadlineDoesNotStart"})
	add(mutation{name: "cluster lease deadline: a Started refused as run out keeps the deadline it set", file: "broker/session.go",
		from: "l.started, l.startedAt, l.deadline = false, time.Time{}, was", to: "l.started, l.startedAt = false, time.Time{}",
		pkgs: []string{srvPkg}, run: "TestClusterStartedReadAfterTheDeadlineDoesNotStart", postgres: true})

	// The PostgreSQL store's leases: rows another transaction holds are skipped, neither
	// waited for nor leased twice; pauses and caps hold across brokers.
	add(mutation{name: "postgres: a lease waits for locked rows (no SKIP LOCKED)", file: pgTx,
		from: "` FOR UPDATE SKIP LOCKED`)", to: "` FOR UPDATE`)",
		pkgs: []string{pgPkg}, run: "TestConcurrentLeasesSkipLockedJobs", postgres: true})
	add(mutation{name: "postgres: a lease reads ready rows without locking them", file: pgTx,
		from: "` FOR UPDATE SKIP LOCKED`)", to: "``)",
		pkgs: []string{pgPkg}, run: "TestConcurrentLeasesSkipLockedJobs", postgres: true})
	add(mutation{name: "postgres: a paused queue is leased from", file: pgTx,
		from: "AND NOT EXISTS (SELECT 1 FROM queues WHERE queues.name = jobs.queue AND queues.paused)`)",
		to:   "AND NOT EXISTS (SELECT 1 FROM queues WHERE queues.name = jobs.queue AND false)`)",
		pkgs: []string{pgPkg}, run: "TestStoreContract$", postgres: true})
	add(mutation{name: "postgres caps: a capped queue has room for one more", file: "store/postgres/queues.go",
		from: "room[name] = max(0, limit-held[name])", to: "room[name] = max(0, limit-held[name]+1)",
		pkgs: []string{pgPkg}, run: "TestEnforcedCap", postgres: true})
	add(mutation{name: "postgres caps: a lease counts a capped queue without locking it", file: "store/postgres/queues.go",
		from: "WHERE concurrency_limit > 0 ORDER BY name FOR UPDATE`", to: "WHERE concurrency_limit > 0 ORDER BY name`",
		pkgs: []string{pgPkg}, run: "TestEnforcedCap", postgres: true})

	// Leadership: one leader, and a live one is not deposed.
	add(mutation{name: "postgres leadership: a broker leads without the lock", file: "store/postgres/cluster.go",
		from: "\t\t\tcase ok:\n\t\t\t\tleader = true", to: "\t\t\tcase err == nil:\n\t\t\t\tleader = true",
		pkgs: []string{pgPkg}, run: "TestCampaignElectsOneLeaderAndFailsOver", postgres: true})
	add(mutation{name: "postgres leadership: a leader that is not silent is ended", file: "store/postgres/cluster.go",
		from: "AND `+dbNow+` - b.last_seen > $2`,", to: "AND `+dbNow+` - b.last_seen > $2 / 1000000`,",
		pkgs: []string{pgPkg}, run: "TestBusyLeaderKeepsTheLeadership|TestFrozenLeaderOfAnotherRoleIsNotEnded", postgres: true})

	// Auth: the access table, its default, token scopes and revocation.
	add(mutation{name: "auth: a viewer may pause a queue", file: authzFile,
		from: "jobwirev1.AdminService_PauseQueue_FullMethodName:        adminOnly,", to: "jobwirev1.AdminService_PauseQueue_FullMethodName:        viewer,",
		pkgs: []string{secPkg}, run: "TestRoles"})
	add(mutation{name: "auth: a producer may connect as a worker", file: authzFile,
		from: "jobwirev1.WorkerService_Connect_FullMethodName: workerOnly,", to: "jobwirev1.WorkerService_Connect_FullMethodName: producerOnly,",
		pkgs: []string{secPkg}, run: "TestRoles"})
	add(mutation{name: "auth: a viewer may create tokens", file: authzFile,
		from: "jobwirev1.TokenService_CreateToken_FullMethodName: adminOnly,", to: "jobwirev1.TokenService_CreateToken_FullMethodName: viewer,",
		pkgs: []string{secPkg}, run: "TestRoles"})
	add(mutation{name: "auth: a call missing from the access table takes any token", file: authzFile,
		from: "\treturn adminOnly, false\n", to: "\treturn rule{anyRole: true}, false\n",
		pkgs: []string{srvPkg}, run: "TestUnlistedCallsAreAdminOnly"})
	add(mutation{name: "auth: every role may make every call", file: authzFile,
		from: "if r.anyRole || role == auth.RoleAdmin {", to: "if true {",
		pkgs: []string{secPkg}, run: "TestRoles"})
	add(mutation{name: "auth scope: a producer's job type is not checked", file: authzFile,
		from: "if !p.Scope.AllowsQueue(queue) || !p.Scope.AllowsType(typ) {", to: "if !p.Scope.AllowsQueue(queue) {",
		pkgs: []string{secPkg}, run: "TestProducerScope"})
	add(mutation{name: "auth scope: a producer cancels a job outside its scope", file: authzFile,
		from: "case *jobwirev1.CancelJobRequest:\n\t\treturn s.checkStoredJobScope(ctx, p, r.GetId())",
		to:   "case *jobwirev1.CancelJobRequest:\n\t\treturn nil",
		pkgs: []string{secPkg}, run: "TestProducerScope"})
	add(mutation{name: "auth scope: a worker serves job types outside its scope", file: authzFile,
		from: "if !p.Scope.AllowsType(t) {", to: "if false {",
		pkgs: []string{secPkg}, run: "TestWorkerScope|TestScopedWorkerGetsOnlyItsJobs"})
	add(mutation{name: "auth scope: a queue-scoped worker serves every queue", file: authzFile,
		from: "if len(p.Scope.Queues) > 0 && len(h.GetQueues()) == 0 {", to: "if false {",
		pkgs: []string{secPkg}, run: "TestWorkerScope|TestScopedWorkerGetsOnlyItsJobs"})
	add(mutation{name: "auth scope: a pattern without * matches by prefix", file: "internal/auth/scope.go",
		from: "\t\treturn pattern == name\n", to: "\t\treturn strings.HasPrefix(name, pattern)\n",
		pkgs: []string{authPkg}, run: "TestMatch"})
	add(mutation{name: "auth revocation: a token revoked in storage verifies", file: authFile,
		from: "err == nil && !r.RevokedAt.IsZero():", to: "err == nil && false:",
		pkgs: []string{authPkg}, run: ""})
	add(mutation{name: "auth revocation: a revoked token stays in the cache", file: "internal/auth/cache.go",
		from: "\t\t\tdelete(a.cache, h)\n", to: "\t\t\t_ = h\n",
		pkgs: []string{authPkg}, run: ""})
	add(mutation{name: "auth revocation: a read racing the revocation caches the token", file: authFile,
		from: "if _, gone := a.revoked[p.TokenID]; gone {\n\t\treturn Principal{}, ErrUnauthenticated",
		to:   "if false {\n\t\treturn Principal{}, ErrUnauthenticated",
		pkgs: []string{authPkg}, run: ""})
	add(mutation{name: "auth revocation: a revoked token's streams stay open", file: "internal/auth/cache.go",
		from: "\t\tt.cancel(ErrRevoked)\n", to: "\t\t_ = t\n",
		pkgs: []string{secPkg}, run: "TestRevokedTokenClosesStream"})

	// The dashboard's own role check, in front of the broker's.
	add(mutation{name: "dashboard: a viewer's write reaches the broker", file: "internal/web/auth.go",
		from: "\t\tcase role < min:\n", to: "\t\tcase role < RoleNone:\n",
		pkgs: []string{webPkg}, run: "TestDashboardRefusesAViewersWriteBeforeCallingTheBroker"})
	add(mutation{name: "dashboard: writes need only a viewer", file: "internal/web/dashboard.go",
		from: "d.authn.require(RoleAdmin, http.HandlerFunc(d.write))", to: "d.authn.require(RoleViewer, http.HandlerFunc(d.write))",
		pkgs: []string{webPkg}, run: "TestDashboardRefusesAViewersWriteBeforeCallingTheBroker"})
	add(mutation{name: "dashboard: a call without a token is forbidden, not unauthenticated", file: "internal/web/auth.go",
		from: "\t\tcase role == RoleNone:\n", to: "\t\tcase false:\n",
		pkgs: []string{webPkg}, run: "TestDashboardNeedsAViewerOrAdminToken"})

	// Limits on what a caller may send.
	add(mutation{name: "limits: a payload one byte over the limit is taken", file: "server/validate.go",
		from: "if n := len(s.GetPayload()); n > l.MaxPayload {", to: "if n := len(s.GetPayload()); n > l.MaxPayload+1 {",
		pkgs: []string{srvPkg}, run: "TestBadInputIsInvalidArgument"})
	add(mutation{name: "limits: a batch one job over the limit is taken", file: "server/producer.go",
		from: "if n == 0 || n > s.limits.MaxBatch {", to: "if n == 0 || n > s.limits.MaxBatch+1 {",
		pkgs: []string{srvPkg}, run: "TestLimitsHoldAtTheirBoundary"})
	add(mutation{name: "limits: a job scheduled a year past the limit is taken", file: "server/validate.go",
		from: "if at := sched.RunAt.AsTime(); at.After(now.Add(l.MaxScheduleAhead)) {", to: "if at := sched.RunAt.AsTime(); at.After(now.Add(l.MaxScheduleAhead).AddDate(1, 0, 0)) {",
		pkgs: []string{srvPkg}, run: "TestBadInputIsInvalidArgument"})
	add(mutation{name: "limits: one worker stream more than the limit", file: "server/workers.go",
		from: "if n := w.streams.Add(1); n > int64(w.limits.MaxWorkerStreams) {", to: "if n := w.streams.Add(1); n > int64(w.limits.MaxWorkerStreams)+1 {",
		pkgs: []string{secPkg}, run: "TestWorkerStreamCount"})
	add(mutation{name: "limits: a stream sends one message more than its rate", file: "server/workers.go",
		from: "if m.tokens < float64(n) {", to: "if m.tokens < float64(n)-1 {",
		pkgs: []string{secPkg}, run: "TestStreamMessageRate"})
	add(mutation{name: "limits: a hello names one job type more than the limit", file: "server/validate.go",
		from: "if n := len(h.GetJobTypes()); n > maxHelloTypes {", to: "if n := len(h.GetJobTypes()); n > maxHelloTypes+1 {",
		pkgs: []string{srvPkg}, run: "TestLimitsHoldAtTheirBoundary"})
	add(mutation{name: "limits: a hello names one queue more than the limit", file: "server/validate.go",
		from: "if n := len(h.GetQueues()); n > maxHelloQueues {", to: "if n := len(h.GetQueues()); n > maxHelloQueues+1 {",
		pkgs: []string{srvPkg}, run: "TestLimitsHoldAtTheirBoundary"})

	// The SDKs: what a handler sees of a cancel, and which failures are fatal.
	add(mutation{name: "python: a timeout cancel reads as requested", file: "sdks/python/jobwire/worker.py",
		from: "    pb.CANCEL_REASON_TIMEOUT: CANCEL_TIMEOUT,", to: "    pb.CANCEL_REASON_TIMEOUT: CANCEL_REQUESTED,",
		pkgs: []string{"sdks/python/tests/test_worker_stream.py"}, run: "test_cancel_reaches_handler", sdk: sdkPython})
	add(mutation{name: "python: bug exception types are transient", file: "sdks/python/jobwire/errors.py",
		from: "    if isinstance(exc, (FatalError,) + FATAL_EXCEPTION_TYPES):", to: "    if isinstance(exc, FatalError):",
		pkgs: []string{"sdks/python/tests/test_errors.py"}, run: "test_kinds", sdk: sdkPython})
	add(mutation{name: "python: a cancel before any wait is not seen", file: "sdks/python/jobwire/context.py",
		from: "                    if self.cancel_reason is not None:\n                        self._event.set()", to: "                    pass",
		pkgs: []string{"sdks/python/tests/test_context.py"}, run: "test_cancel_before_any_wait_is_seen_by_every_wait", sdk: sdkPython})
	add(mutation{name: "python: grpc's newer TLS wording is not recognised", file: "sdks/python/jobwire/connect.py",
		from: "    low = msg.lower().replace(\"_\", \" \")", to: "    low = msg.lower()",
		pkgs: []string{"sdks/python/tests/test_connect.py"}, run: "test_mismatched_tls_stops_run_with_the_fix", sdk: sdkPython})
	add(mutation{name: "node: a timeout cancel reads as requested", file: "sdks/node/src/worker.js",
		from: "  CANCEL_REASON_TIMEOUT: CancelReason.TIMEOUT,", to: "  CANCEL_REASON_TIMEOUT: CancelReason.REQUESTED,",
		pkgs: []string{"sdks/node/test/worker.test.js"}, run: "^cancel aborts the handler signal", sdk: sdkNode})
	add(mutation{name: "node: bug error types are transient", file: "sdks/node/src/errors.js",
		from: "const fatal = err instanceof FatalError || FATAL_ERROR_TYPES.some((T) => err instanceof T);", to: "const fatal = err instanceof FatalError;",
		pkgs: []string{"sdks/node/test/errors.test.js"}, run: "^classify maps error types to failure kinds$", sdk: sdkNode})
	add(mutation{name: "node: an absent payload reaches the handler as it was decoded", file: "sdks/node/src/worker.js",
		from: "this.payload = decoded && !Buffer.isBuffer(job.payload) ? Buffer.from(job.payload) : job.payload;", to: "this.payload = job.payload;",
		pkgs: []string{"sdks/node/test/worker.test.js"}, run: "^an empty payload reaches the handler as an empty Buffer$", sdk: sdkNode})
	add(mutation{name: "node: the handler sees the wire form of a decoded job", file: "sdks/node/src/worker.js",
		from: "this._plainJob = decoded ? undefined : job;", to: "this._plainJob = job;",
		pkgs: []string{"sdks/node/test/worker.test.js"}, run: "^the handler sees the job as the plain decoded Job, int64 as decimal strings$", sdk: sdkNode})
	add(mutation{name: "node: a job id past 2^53 is sent as a rounded number", file: "sdks/node/src/proto.js",
		from: "return Number.isSafeInteger(n) ? n : id;", to: "return n;",
		pkgs: []string{"sdks/node/test/proto.test.js"}, run: "^every request the worker sends encodes as proto-loader encodes it$", sdk: sdkNode})
	add(mutation{name: "node: a negative int64 takes the fast path", file: "sdks/node/src/proto.js",
		from: "v.high < SAFE_HIGH && v.high >= -SAFE_HIGH && !v.unsigned", to: "v.high < SAFE_HIGH && !v.unsigned",
		pkgs: []string{"sdks/node/test/proto.test.js"}, run: "^int64String$", sdk: sdkNode})
	add(mutation{name: "java: a lease that runs out cancels nothing", file: "sdks/java/worker/src/main/java/io/jobwire/worker/Worker.java",
		from: "if (leaseAllowanceNanos <= 0) {", to: "if (true) {",
		pkgs: []string{"sdks/java/worker/src/test/java/io/jobwire/worker/WorkerStreamTest.java"}, run: "aLeaseThatRunsOutWithoutAnExtensionCancelsTheHandler", sdk: sdkJava})
	add(mutation{name: "java: a cancelled job's outcome is still sent", file: "sdks/java/worker/src/main/java/io/jobwire/worker/Worker.java",
		from: "if (jobs.get(t.jobId) != t) {", to: "if (false) {",
		pkgs: []string{"sdks/java/worker/src/test/java/io/jobwire/worker/WorkerStreamTest.java"}, run: "aCancelInterruptsTheHandlerAndItsOutcomeIsDropped", sdk: sdkJava})
	add(mutation{name: "java: a job's interrupt reaches the next job on its thread", file: "sdks/java/worker/src/main/java/io/jobwire/worker/JobContext.java",
		from: "      thread = null;\n    }\n    Thread.interrupted();", to: "      thread = null;\n    }",
		pkgs: []string{"sdks/java/worker/src/test/java/io/jobwire/worker/WorkerStreamTest.java"}, run: "theHandlerThreadIsNotLeftInterrupted", sdk: sdkJava})
	add(mutation{name: "java: IllegalArgumentException is transient", file: "sdks/java/worker/src/main/java/io/jobwire/worker/Failures.java",
		from: "          IllegalArgumentException.class,\n", to: "",
		pkgs: []string{"sdks/java/worker/src/test/java/io/jobwire/worker/FailuresTest.java"}, run: "theThrownClassDecidesTheKind", sdk: sdkJava})
	add(mutation{name: "rust: a lease that runs out is kept", file: "sdks/rust/src/worker.rs",
		from: "j.seq == seq && j.result.is_none() && j.lease_end.is_some_and(|end| end <= now)", to: "j.seq == seq && j.result.is_none() && false",
		pkgs: []string{"sdks/rust/src/worker.rs"}, run: "a_lease_not_extended_is_given_up_before_the_broker_would", sdk: sdkRust})
	add(mutation{name: "rust: no error type is fatal by default", file: "sdks/rust/src/error.rs",
		from: "let mut fatal = fatal_by_default(TypeId::of::<E>());", to: "let mut fatal = false;",
		pkgs: []string{"sdks/rust/src/error.rs"}, run: "errors_are_classified_by_their_type", sdk: sdkRust})
	// The Go worker gives a handler up once its lease runs out on its own clock.
	add(mutation{name: "worker lease: a lease that ran out only cancels the handler", file: "worker/lease.go",
		from: "\tw.loseLocked(t, errLeaseExpired)", to: "\tt.cancel(errLeaseExpired)",
		pkgs: []string{"./worker"}, run: "TestLeaseRunsOutWithoutAnExtension"})
	add(mutation{name: "worker lease: an extension counts from the ack, not the heartbeat", file: "worker/lease.go",
		from: "if !t.heartbeatAt.IsZero() && t.heartbeatAt.Before(now) {", to: "if false {",
		pkgs: []string{"./worker"}, run: "TestHeartbeatAckExtendsTheLeaseFromTheHeartbeat"})
	add(mutation{name: "worker lease: the margin ignores the heartbeat interval", file: "worker/lease.go",
		from: "return max(min(m, (lease-heartbeat)/2), 0)", to: "return m",
		pkgs: []string{"./worker"}, run: "TestLeaseMargin"})
	add(mutation{name: "worker: a handler's end does not wake a Run that waits for it", file: "worker/worker.go",
		from: "\tif w.changed != nil {\n\t\tclose(w.changed)\n\t\tw.changed = nil\n\t}\n", to: "",
		pkgs: []string{"./worker"}, run: "TestRejectedReconnectReturnsOnceHandlersDo"})
	add(mutation{name: "broker: a lease keeps a large payload for as long as its attempt", file: "broker/dispatch.go",
		from: "if len(j.Payload) > leasePayloadKept {", to: "if false {",
		pkgs: []string{"./broker"}, run: "TestLeaseKeepsOnlyASmallPayload"})
	add(mutation{name: "worker lease: the margin has no floor or ceiling", file: "worker/lease.go",
		from: "m := min(max(lease/10, minLeaseMargin), maxLeaseMargin)", to: "m := lease / 10",
		pkgs: []string{"./worker"}, run: "TestLeaseMargin"})
	add(mutation{name: "worker lease: a heartbeat ack extends nothing", file: "worker/session.go",
		from: "\t\tw.onExtendedLocked(s, m.HeartbeatAck.GetExtended())\n", to: "\n",
		pkgs: []string{"./worker"}, run: "TestAnsweredHeartbeatsKeepTheLease"})
	add(mutation{name: "worker lease: no margin for the latency of the assignment", file: "worker/session.go",
		from: "\t\ts.leaseAllowance = lease - leaseMargin(lease, s.hbInterval)", to: "\t\ts.leaseAllowance = lease",
		pkgs: []string{"./worker"}, run: "TestHeartbeatAckExtendsTheLeaseFromTheHeartbeat"})
	add(mutation{name: "worker lease: heartbeats of a broken stream date an extension", file: "worker/session.go",
		from: "\tw.forgetHeartbeatsLocked()\n", to: "\n",
		pkgs: []string{"./worker"}, run: "TestHeartbeatsOfAnEarlierStreamAreForgotten"})
	add(mutation{name: "worker lease: an assignment arms no deadline", file: "worker/task.go",
		from: "\tw.armLeaseLocked(t, s, w.clock.Now())\n", to: "\n",
		pkgs: []string{"./worker"}, run: "TestLeaseRunsOut"})

	// The audit trail: each operator action is recorded once, with its caller and count.
	add(mutation{name: "audit: a cancel of a finished job is recorded", file: "broker/broker.go",
		from: "\t\tif err != nil || before.State.Final() {", to: "\t\tif err != nil {",
		pkgs: []string{srvPkg}, run: "TestOperatorActionsAreAudited"})
	add(mutation{name: "audit: later batches of a purge add no count", file: "broker/operate.go",
		from: "\t\t\treturn tx.AuditAddCount(ev.ID, int64(n))", to: "\t\t\treturn nil",
		pkgs: []string{srvPkg}, run: "TestPurgeInManyBatchesIsOneEventCountingThemAll"})
	add(mutation{name: "audit: retention deletes every event", file: "broker/audit.go",
		from: "\tbefore := b.now().Add(-b.cfg.Retention.Audit)", to: "\tbefore := b.now()",
		pkgs: []string{srvPkg}, run: "TestAuditEventsAreDeletedPastTheirRetention"})
	add(mutation{name: "audit: a pause is not recorded", file: "broker/rulechange.go",
		from: "\t\tev := c.audit\n\t\treturn b.audit(ctx, tx, &ev)", to: "\t\treturn nil",
		pkgs: []string{srvPkg}, run: "TestStorageFaultMatrix/pause"})
	add(mutation{name: "audit: the dashboard's actions read as the API's", file: "server/audit.go",
		from: "\t\ta.Source = sourceDashboard", to: "\t\ta.Source = sourceAPI",
		pkgs: []string{srvPkg}, run: "TestDashboardAndAnonymousActionsAreAudited"})

	// Authentication under attack, and revocation across brokers.
	add(mutation{name: "auth: one token may open one worker stream past its cap", file: "server/streamcap.go",
		from: "\tif t.n[id] >= limit {", to: "\tif t.n[id] > limit {",
		pkgs: []string{secPkg}, run: "TestWorkerStreamsPerToken"})
	add(mutation{name: "auth: failed authentications are never throttled", file: "internal/auth/throttle.go",
		from: "\tif b == nil || b.units >= 1 {", to: "\tif true {",
		pkgs: []string{secPkg}, run: "TestFailedAuthenticationsAreThrottled"})
	add(mutation{name: "auth: a token verified before is throttled like a guess", file: authFile,
		from: "\tcase known == unknown:", to: "\tcase known == unknown || known == stale:",
		pkgs: []string{authPkg}, run: "TestFailedAuthenticationsThrottledPerClient"})
	add(mutation{name: "auth: a refused token is looked up again each time", file: authFile,
		from: "\t\ta.refuse(h, now)", to: "\t\t_ = h",
		pkgs: []string{authPkg}, run: "TestRefusedTokenIsCached"})
	add(mutation{name: "auth: a cached token outlives its lifetime", file: "internal/auth/cache.go",
		from: "\ta.cache[h] = cached{p: p, expires: now.Add(a.ttl.TTL)}", to: "\ta.cache[h] = cached{p: p, expires: now.Add(1000 * a.ttl.TTL)}",
		pkgs: []string{authPkg}, run: "TestCachedTokenExpires"})
	add(mutation{name: "auth: a broker that missed events trusts its cache", file: "internal/auth/cache.go",
		from: "\t\t\tc.expires = time.Time{} // read again before it is trusted", to: "",
		pkgs: []string{authPkg}, run: "TestResyncFlushesCacheAndRechecksStreams"})
	add(mutation{name: "auth: a revocation is not told to the other brokers", file: authFile,
		from: "\t\ttx.Publish(store.Event{Kind: store.EventTokenRevoked, Key: id})", to: "\t\t_ = id",
		pkgs: []string{srvPkg}, run: "TestClusterRevocationReachesEveryBroker", postgres: true})
	add(mutation{name: "web: any host name may drive the open listener", file: "internal/web/web.go",
		from: "\tif opts.Auth == nil {", to: "\tif opts.Auth == nil && false {",
		pkgs: []string{"./internal/app"}, run: "TestHTTPListenerRefusesForeignHostNames"})
	add(mutation{name: "web: failed authentications are not counted per client", file: "internal/web/auth.go",
		from: "\tp, err := t.a.VerifyFrom(ctx, client, token)", to: "\tp, err := t.a.VerifyFrom(ctx, \"\", token+client[:0])",
		pkgs: []string{webPkg}, run: "TestHTTPFailedAuthenticationsAreThrottled"})
	// Deletes of finished jobs take the finished totals in the writers' order.
	add(mutation{name: "postgres totals: a store delete leaves its totals to the trigger too", file: "store/postgres/totals.go",
		from: "`SELECT set_config('jobwire.finished_totals', 'held', true)`", to: "`SELECT set_config('jobwire.finished_totals', 'kept', true)`",
		pkgs: []string{pgPkg}, run: "TestStoreContract$|TestDeleteInAWriteWithTotalsHeldTakesThemInOrder", postgres: true})
	add(mutation{name: "postgres totals: the delete trigger locks the totals in the database's collation", file: "store/postgres/migrations/009_finished_totals_delete_order.up.sql",
		from: `ORDER BY f.queue COLLATE "C", f.type COLLATE "C", f.state`, to: `ORDER BY f.queue, f.type, f.state`,
		pkgs: []string{pgPkg}, run: "TestDeletesTakeTheTotalsInOrder", postgres: true})
	// A lease that ran out stays run out: a heartbeat read at or after its deadline extends nothing.
	add(mutation{name: "lease deadline: a heartbeat revives a lease past its deadline", file: txFile,
		from: "AND state IN (3, 4)\n\t\t\tAND lease_expires_at > ?`", to: "AND state IN (3, 4)\n\t\t\tAND ? IS NOT NULL`",
		pkgs: []string{storePkg}, run: "TestStoreContract/JobExtendLeasesRunOut"})
	add(mutation{name: "lease deadline: a heartbeat read at the deadline extends the lease", file: txFile,
		from: "AND state IN (3, 4)\n\t\t\tAND lease_expires_at > ?`", to: "AND state IN (3, 4)\n\t\t\tAND lease_expires_at >= ?`",
		pkgs: []string{storePkg}, run: "TestStoreContract/JobExtendLeasesRunOut"})
	add(mutation{name: "postgres lease deadline: a heartbeat read at the deadline extends the lease", file: pgTx,
		from: "\t\tAND jobs.lease_expires_at > $5\n", to: "\t\tAND jobs.lease_expires_at >= $5\n",
		pkgs: []string{pgPkg}, run: "TestStoreContract/JobExtendLeasesRunOut", postgres: true})
	// A TLS or token mismatch stops a worker with what to change, instead of a retry loop.
	add(mutation{name: "connect: a worker retries a TLS or token mismatch forever", file: "worker/worker.go",
		from: "if ce := client.Classify(err); ce != nil {", to: "if ce := client.Classify(err); ce != nil && false {",
		pkgs: []string{"./worker"}, run: "TestRunStopsOnAnInsecurableConnection"})
	add(mutation{name: "connect: plaintext against a TLS broker reads as a dropped connection", file: "client/connerr.go",
		from: "\t\tif plaintext && answersTLS(c.addr) {", to: "\t\tif false && plaintext && answersTLS(c.addr) {",
		pkgs: []string{"./client"}, run: "TestClassifyCallErrors"})
	add(mutation{name: "shared breakers: successes are not counted in the ratio window", file: "broker/successes.go",
		from: "\t\tsh.Success(sh.Permit(id, breaker.Permit{}))",
		to:   "\t\t_ = id",
		pkgs: []string{"./broker"}, run: "TestSharedBreakerRatio", postgres: true})
	// Why a job waits is told from the dispatcher's own rules; a bulk confirm acts on what was previewed.
	add(mutation{name: "why pending: a paused queue is not named", file: "broker/whypending.go",
		from: "\tcase dispatchrule.QueuePaused:\n", to: "\tcase -1:\n",
		pkgs: []string{"./broker"}, run: "TestWhyPendingNamesEachRule"})
	add(mutation{name: "why pending: a full queue is not named", file: "broker/whypending.go",
		from: "\tcase dispatchrule.QueueAtCap:\n", to: "\tcase -1:\n",
		pkgs: []string{"./broker"}, run: "TestWhyPendingNamesEachRule"})
	add(mutation{name: "dashboard: failures per second are failures per minute", file: "internal/web/sampler.go",
		from: "\tsmp.FailedRate = float64(smp.FailedLastMinute) / sec", to: "\tsmp.FailedRate = float64(smp.FailedLastMinute)",
		pkgs: []string{webPkg}, run: "TestSampler"})
	add(mutation{name: "worker: a plain Go error reports its Go type", file: "worker/errors.go",
		from: "\t\treturn PlainErrorType", to: "\t\treturn \"*errors.errorString\"",
		pkgs: []string{"./worker"}, run: "TestClassify"})

	// What a newcomer types wrong is refused with a sentence.
	add(mutation{name: "cli: a --db URL of another database is taken as a file name", file: "cmd/jobwire/serve.go",
		from: "ok && isURLScheme(scheme) {", to: "ok && !isURLScheme(scheme) {",
		pkgs: []string{"./cmd/jobwire"}, run: "TestServeRejectsBadInputBeforeTouchingTheDisk"})
	add(mutation{name: "serve: no warning for an admin token written in a git work tree", file: "internal/app/security.go",
		from: "if _, err := os.Lstat(filepath.Join(dir, \".git\")); err == nil {", to: "if _, err := os.Lstat(filepath.Join(dir, \".git\")); err != nil {",
		pkgs: []string{"./internal/app"}, run: "TestBootstrapWarnsInsideAGitWorkTree"})
	add(mutation{name: "cli: one job is counted in the plural", file: "cmd/jobwire/output.go",
		from: "\tif n == 1 {", to: "\tif n == 2 {",
		pkgs: []string{"./cmd/jobwire"}, run: "TestDLQ"})
	// One outcome per attempt: a different one sent while the first is stored is refused.
	add(mutation{name: "results: a different outcome joins the one being stored", file: "broker/session.go",
		from: "if l.storing != this {", to: "if l.storing != this && false {",
		pkgs: []string{srvPkg}, run: "TestDifferentResultWhileTheFirstIsStoredIsRefused"})
	add(mutation{name: "results: a result joins a release being stored", file: "broker/session.go",
		from: "if l.storing != this {", to: "if l.storing != this && l.storing != endingRelease {",
		pkgs: []string{srvPkg}, run: "TestResultWhileTheReleaseIsStoredIsRefused"})
	add(mutation{name: "lists: jobs listed by id, not by the sort column", file: "store/sqlite/admin.go",
		from: "q.WriteString(` ORDER BY ` + k.Column + ` ` + k.Dir + `, id ` + k.Dir + ` LIMIT ?`)", to: "q.WriteString(` ORDER BY id ` + k.Dir + ` LIMIT ?`)",
		pkgs: []string{storePkg}, run: "TestStoreContract/JobList$"})
	add(mutation{name: "postgres lists: jobs listed by id, not by the sort column", file: "store/postgres/admin.go",
		from: "q.sql.WriteString(` ORDER BY ` + col + ` ` + k.Dir + `, id ` + k.Dir + ` LIMIT ` + q.arg(limit))", to: "q.sql.WriteString(` ORDER BY id ` + k.Dir + ` LIMIT ` + q.arg(limit))",
		pkgs: []string{pgPkg}, run: "TestJobListFollowsCreationAcrossBrokers", postgres: true})
	add(mutation{name: "breaker window: a bucket stays in the ratio window one width too long", file: "breaker/window.go",
		from: "return w.start(now).Add(-(WindowBuckets - 1) * w.width)", to: "return w.start(now).Add(-WindowBuckets * w.width)",
		pkgs: []string{"./breaker"}, run: "TestRatioMode"})
	add(mutation{name: "postgres lock order: a write of many leases locks its jobs in the order of its arrays", file: "store/postgres/lockorder.go",
		from: "\tORDER BY jobs.id FOR NO KEY UPDATE OF jobs`", to: "\tFOR NO KEY UPDATE OF jobs`",
		pkgs: []string{pgPkg}, run: "TestManyWritesLockJobsInIDOrder", postgres: true})
	add(mutation{name: "postgres lock order: a write of many leases does not lock its jobs first", file: "store/postgres/lockorder.go",
		from: "return t.hold(lockLeasesSQL, ids, seqs, secrets)", to: "return nil",
		pkgs: []string{pgPkg}, run: "TestManyWritesLockJobsInIDOrder", postgres: true})
	add(mutation{name: "postgres plans: a batch's lock of its jobs may keep a plan that reads the whole table", file: "store/postgres/lockorder.go",
		from: "\tif err := t.joinByKey(true); err != nil {\n\t\treturn err\n\t}\n\tif err := t.hold(lockRowsSQL",
		to:   "\tif err := t.hold(lockRowsSQL",
		pkgs: []string{pgPkg}, run: "TestLockRowsProbesThePrimaryKey", postgres: true})
	add(mutation{name: "dashboard: the throughput sampler reads the whole of GetStats", file: "internal/web/dashboard.go",
		from: "GetStatsRequest{CountsOnly: true}", to: "GetStatsRequest{}",
		pkgs: []string{"./internal/web"}, run: "TestDashboardSamplerReadsTheCountsOnly"})
	add(mutation{name: "stats: counts_only still reads the rules and rate limits", file: "server/operate.go",
		from: "\tif req.GetCountsOnly() {\n\t\treturn out, nil", to: "\tif false {\n\t\treturn out, nil",
		pkgs: []string{"./server"}, run: "TestStatsCounts"})
	add(mutation{name: "stats: counts_only still counts every window", file: "server/operate.go",
		from: "return a.b.Counts(ctx, time.Minute)", to: "return a.b.Counts(ctx, broker.StatsWindows...)",
		pkgs: []string{"./server"}, run: "TestStatsCounts"})
	add(mutation{name: "postgres stats: the open jobs are counted by one condition no index answers", file: "store/postgres/admin.go",
		from: `var openStateGroups = []string{"state = 1", "state = 2", "state IN (3, 4)", "state = 8"}`,
		to:   `var openStateGroups = []string{"state IN (1, 2, 3, 4)", "state = 8"}`,
		pkgs: []string{pgPkg}, run: "TestStatsReadTheOpenJobsOnly", postgres: true})
	add(mutation{name: "postgres stats: the job counts keep the plan made on the empty table", file: "store/postgres/admin.go",
		from: "s.pool.Query(ctx, jobCountsSQL, pgx.QueryExecModeExec)", to: "s.pool.Query(ctx, jobCountsSQL)",
		pkgs: []string{pgPkg}, run: "TestStatsReadTheOpenJobsOnly", postgres: true})
	add(mutation{name: "postgres stats: the keyed jobs are counted by one condition no index answers", file: "store/postgres/keyconc.go",
		from: "\t\t\t\tWHERE state = 2 AND concurrency_key <> ''\n\t\t\tUNION ALL SELECT concurrency_rule, concurrency_key, concurrency_limit, state FROM jobs\n\t\t\t\tWHERE state IN (3, 4) AND concurrency_key <> '') j",
		to:   "\t\t\t\tWHERE state IN (2, 3, 4) AND concurrency_key <> '') j",
		pkgs: []string{pgPkg}, run: "TestStatsReadTheOpenJobsOnly", postgres: true})
	add(mutation{name: "postgres lock order: a requeue locks dead jobs in its scan's order", file: "store/postgres/admin.go",
		from: "id = ANY($6) ORDER BY id FOR NO KEY UPDATE)", to: "id = ANY($6) FOR NO KEY UPDATE)",
		pkgs: []string{pgPkg}, run: "TestRetentionAndRequeueLockJobsInIDOrder", postgres: true})
	add(mutation{name: "service: a stopped service starts again", file: "internal/service/service.go",
		from: "\tif b.state != running {\n\t\treturn false", to: "\tif false {\n\t\treturn false",
		pkgs: []string{"./internal/service"}, run: "TestBaseStopsOnceAndNeverStartsAgain"})
	add(mutation{name: "promote: a later due job moves the wake-up back", file: "broker/promote.go",
		from: "\tp.alarm.SetEarlier(at)", to: "\tp.alarm.Set(at, true)",
		pkgs: []string{"./broker"}, run: "TestPromoterWakesForTheEarliestDueJob"})
	add(mutation{name: "breakers: no snapshot is stored at stop", file: "broker/breakerstore.go",
		from: "k.queue(k.cfg.snapshot())", to: "k.queue(nil)",
		pkgs: []string{"./broker"}, run: "TestBreakerKeeperStoresEveryBreakerAtItsStopUnlessShared"})
	add(mutation{name: "lists: ties on the sort column break the other way", file: "store/sqlite/admin.go",
		from: "q.WriteString(` ORDER BY ` + k.Column + ` ` + k.Dir + `, id ` + k.Dir + ` LIMIT ?`)", to: "q.WriteString(` ORDER BY ` + k.Column + ` ` + k.Dir + `, id LIMIT ?`)",
		pkgs: []string{"./store/sqlite"}, run: "TestStoreContract/ListsSortByEveryColumn"})
	add(mutation{name: "lists: an ascending page continues backwards", file: "store/listorder.go",
		from: "k.Dir, k.After = \"ASC\", \">\"", to: "k.Dir, k.After = \"ASC\", \"<\"",
		pkgs: []string{"./store/sqlite"}, run: "TestStoreContract/ListsSortByEveryColumn"})
	add(mutation{name: "lists: a page token continues another sort", file: "server/operate.go",
		from: "if parts[0] != string(o.By) || parts[1] != direction(o.Asc) {", to: "if false {",
		pkgs: []string{srvPkg}, run: "TestDeadJobsSortedByAColumnAndPaged"})
	add(mutation{name: "dashboard: an action leaves the list as it was until a reload", file: "internal/web/assets/app.js",
		from: "\n  await refresh();\n", to: "\n",
		pkgs: []string{webPkg}, run: "TestDashboardListsInBrowser/requeued_jobs_leave_the_list_without_a_reload"})
	add(mutation{name: "commit: an op bound to its batch is written alone when the batch fails", file: "broker/commit/grouped.go",
		from: "if boundToBatch(t.op) {", to: "if false {",
		pkgs: []string{"./broker/commit"}, run: "TestGroupedBatchBoundOpFallsWithItsBatch"})
	add(mutation{name: "commit: a superseded start is written with the others", file: "broker/commit/grouped.go",
		from: "\tif t.superseded {\n\t\treturn false\n\t}\n\tswitch o := t.op.(type) {", to: "\tswitch o := t.op.(type) {",
		pkgs: []string{"./broker/commit"}, run: "TestGroupedWritesOneCallPerKind"})
	add(mutation{name: "commit: a success that settles a shared breaker is stored at commit", file: "broker/session.go",
		from: "if o.d.Verdict != triage.Succeeded || o.settles == settlesAlone || o.endingAttempt.frees ||", to: "if o.d.Verdict != triage.Succeeded || o.endingAttempt.frees ||",
		pkgs: []string{"./broker"}, run: "TestSharedBreaker", postgres: true})
	add(mutation{name: "limits: a batch one message longer than the limit", file: "server/validate.go",
		from: "if len(msgs) > MaxBatchMessages {", to: "if len(msgs) > MaxBatchMessages+1 {",
		pkgs: []string{srvPkg}, run: "TestBatchRefusals"})
	add(mutation{name: "limits: a batch costs the budget one message", file: "server/workers.go",
		from: "cost += 1 + len(m.GetHeartbeat().GetLeases())", to: "cost = 1 + len(m.GetHeartbeat().GetLeases())",
		pkgs: []string{srvPkg}, run: "TestBatchCountsEachMessageAgainstTheBudget"})
	add(mutation{name: "batches: sent to a worker that did not ask for them", file: "server/workers.go",
		from: "sendLoop(sendCtx, stream, sess, hello.GetAcceptsBatches(),", to: "sendLoop(sendCtx, stream, sess, true,",
		pkgs: []string{srvPkg}, run: "TestNoBatchForAWorkerThatDidNotAskForThem"})
	add(mutation{name: "batches: a hello inside a batch is taken", file: "server/validate.go",
		from: "\t\t\treturn invalid(fmt.Sprintf(\"batch.messages[%d]\", i), \"is hello: hello must be the first message on the stream, alone\")\n", to: "",
		pkgs: []string{srvPkg}, run: "TestBatchRefusals/hello_inside"})
	add(mutation{name: "python: the worker does not ask for batches", file: "sdks/python/jobwire/worker.py",
		from: "accepts_batches=True,", to: "accepts_batches=False,",
		pkgs: []string{"sdks/python/tests/test_worker_stream.py"}, run: "test_batches_both_ways", sdk: sdkPython})
	add(mutation{name: "python: messages ready together go one by one", file: "sdks/python/jobwire/worker.py",
		from: "if len(batch) > 1:", to: "if len(batch) > 1 and False:",
		pkgs: []string{"sdks/python/tests/test_worker_stream.py"}, run: "test_batches_both_ways", sdk: sdkPython})
	add(mutation{name: "dispatch rules: a full queue takes one more", file: "broker/dispatchrule/rule.go",
		from: "case q.Cap > 0 && q.Held >= q.Cap:", to: "case q.Cap > 0 && q.Held > q.Cap:",
		pkgs: []string{"./broker"}, run: "TestWhyPendingNamesEachRule"})
	add(mutation{name: "dispatch rules: a paused queue is leased from", file: "broker/dispatchrule/rule.go",
		from: "\tcase q.Paused:\n\t\treturn QueuePaused", to: "\tcase false:\n\t\treturn QueuePaused",
		pkgs: []string{"./broker"}, run: "TestWhyPendingNamesEachRule"})
	add(mutation{name: "dispatch rules: a HALF_OPEN breaker with every probe out lets jobs through", file: "broker/dispatchrule/rule.go",
		from: "case b.State == HalfOpen && b.ProbeRoom > 0:", to: "case b.State == HalfOpen:",
		pkgs: []string{"./store/sqlite"}, run: "TestStoreContract/LeaseFollowsDispatchRules$"})
	add(mutation{name: "dispatch rules: an offer takes a probe slot", file: "broker/dispatchrule/rule.go",
		from: " && s.Breaker.State == Closed && Check", to: " && Check",
		pkgs: []string{"./store/sqlite"}, run: "TestStoreContract/OfferFollowsDispatchRules$"})
	add(mutation{name: "sqlite offer: a capped queue's job is offered", file: "store/sqlite/offer.go",
		from: "name = ? AND (paused OR concurrency_limit > 0))", to: "name = ? AND paused)",
		pkgs: []string{"./store/sqlite"}, run: "TestStoreContract/OfferFollowsDispatchRules$"})
	add(mutation{name: "sqlite offer: a job is offered ahead of a waiting one of its priority", file: "store/sqlite/offer.go",
		from: "read := q.String() + ` AND priority >= ? LIMIT `", to: "read := q.String() + ` AND priority > ? LIMIT `",
		pkgs: []string{"./store/sqlite"}, run: "TestStoreContract/InsertOfferedGoesAheadOfNothing$"})
	add(mutation{name: "sqlite offer: the job handed out lacks its metadata", file: "store/sqlite/offer.go",
		from: "j.Metadata = maps.Clone(p.Metadata)", to: "_ = maps.Clone(p.Metadata)",
		pkgs: []string{"./store/sqlite"}, run: "TestStoreContract/InsertOffered$"})
	add(mutation{name: "broker: a round forced by new jobs it cannot see leaves no word that they wait", file: "broker/dispatch.go",
		from: "} else if force {", to: "} else if false && force {",
		pkgs: []string{"./broker"}, run: "TestOffersLeaveTheRestForFreedSlots"})
	add(mutation{name: "commit: a lone enqueue whose offered insert failed is not written again", file: "broker/commit/grouped.go",
		from: "(len(batch) > 1 || offered)", to: "len(batch) > 1",
		pkgs: []string{"./broker/commit"}, run: "TestGroupedLoneOfferedEnqueueOutlivesItsOffers"})
	add(mutation{name: "sqlite offer: a job waiting in a queue the worker does not take keeps the offer back", file: "store/sqlite/offer.go",
		from: `args = in(&q, in(&q, nil, "queue", false, o.Queues), "type", false, types)`, to: `args = in(&q, nil, "type", false, types)`,
		pkgs: []string{"./store/sqlite"}, run: "TestOfferPassesQueuesItsWorkerDoesNotTake$"})
	add(mutation{name: "sqlite lease: a capped queue has room for one more", file: "store/sqlite/queues.go",
		from: "room[name] = max(0, limit-held)", to: "room[name] = max(0, limit-held+1)",
		pkgs: []string{"./store/sqlite"}, run: "TestStoreContract/LeaseFollowsDispatchRules$"})
	add(mutation{name: "sqlite lease: paused queues are leased from", file: "store/sqlite/tx.go",
		from: "jobs.queue AND queues.paused)`)", to: "jobs.queue AND queues.paused AND 0)`)",
		pkgs: []string{"./store/sqlite"}, run: "TestStoreContract/LeaseFollowsDispatchRules$"})
	add(mutation{name: "postgres lease: a shut breaker's type is leased", file: "store/postgres/tx.go",
		from: "breakers.type = jobs.type AND breakers.shut)`)", to: "breakers.type = jobs.type AND breakers.shut AND false)`)",
		pkgs: []string{pgPkg}, run: "TestStoreContract/LeaseFollowsDispatchRules", postgres: true})
	add(mutation{name: "postgres offer: a capped queue's job is offered", file: "store/postgres/tx.go",
		from: "AND (queues.paused OR queues.concurrency_limit > 0))\n\t\t\tAND NOT EXISTS (SELECT 1 FROM breakers WHERE breakers.type = u.type", to: "AND queues.paused)\n\t\t\tAND NOT EXISTS (SELECT 1 FROM breakers WHERE breakers.type = u.type",
		pkgs: []string{pgPkg}, run: "TestStoreContract/OfferFollowsDispatchRules", postgres: true})
	add(mutation{name: "node: the worker does not ask for batches", file: "sdks/node/src/worker.js",
		from: "          acceptsBatches: true,", to: "          acceptsBatches: false,",
		pkgs: []string{"sdks/node/test/worker.test.js"}, run: "^the worker announces that it accepts batches$", sdk: sdkNode})
	add(mutation{name: "node: messages ready together go one by one", file: "sdks/node/src/worker.js",
		from: "if (messages.length > 0) sess.call.write(messages.length === 1 ? messages[0] : { batch: { messages } });", to: "for (const m of messages) sess.call.write(m);",
		pkgs: []string{"sdks/node/test/worker.test.js"}, run: "a lone message goes unwrapped$", sdk: sdkNode})
	add(mutation{name: "node: a lone message is wrapped in a batch", file: "sdks/node/src/worker.js",
		from: "if (messages.length > 0) sess.call.write(messages.length === 1 ? messages[0] : { batch: { messages } });", to: "if (messages.length > 0) sess.call.write({ batch: { messages } });",
		pkgs: []string{"sdks/node/test/worker.test.js"}, run: "a lone message goes unwrapped$", sdk: sdkNode})
	add(mutation{name: "node: handlers start before their Started is written", file: "sdks/node/src/worker.js",
		from: "    this.flush(sess);\n    for (const [j, fn] of starting) {", to: "    for (const [j, fn] of starting) {",
		pkgs: []string{"sdks/node/test/worker.test.js"}, run: "a lone message goes unwrapped$", sdk: sdkNode})
	add(mutation{name: "node: a batch is read backwards", file: "sdks/node/src/worker.js",
		from: "          for (const m of resp.batch.messages) {", to: "          for (const m of [...resp.batch.messages].reverse()) {",
		pkgs: []string{"sdks/node/test/worker.test.js"}, run: "^a batch from the broker is handled in order$", sdk: sdkNode})
	add(mutation{name: "node: a batch holds one message more than the limit", file: "sdks/node/src/worker.js",
		from: "const MAX_BATCH = 1024;", to: "const MAX_BATCH = 1025;",
		pkgs: []string{"sdks/node/test/worker.test.js"}, run: "^no batch holds more than 1024 messages$", sdk: sdkNode})
	add(mutation{name: "java: the worker does not announce batches", file: "sdks/java/worker/src/main/java/io/jobwire/worker/Worker.java",
		from: ".setAcceptsBatches(true);", to: ".setAcceptsBatches(false);",
		pkgs: []string{"sdks/java/worker/src/test/java/io/jobwire/worker/WorkerStreamTest.java"}, run: "helloDeclaresTheWorkerAndAJobRunsToSuccess", sdk: sdkJava})
	add(mutation{name: "java: messages ready together leave one by one", file: "sdks/java/worker/src/main/java/io/jobwire/worker/Worker.java",
		from: "if (m != null && !m.hasDrain() && i - from < MAX_BATCH\n", to: "if (m != null && !m.hasDrain() && i - from < 1\n",
		pkgs: []string{"sdks/java/worker/src/test/java/io/jobwire/worker/WorkerStreamTest.java"}, run: "aResponseBatchIsHandledInOrderAndWhatItMakesReadyLeavesAsOneFrame", sdk: sdkJava})
	add(mutation{name: "java: a lone message is wrapped in a batch", file: "sdks/java/worker/src/main/java/io/jobwire/worker/Worker.java",
		from: "if (to - from > 1) {", to: "if (to - from > 0) {",
		pkgs: []string{"sdks/java/worker/src/test/java/io/jobwire/worker/WorkerStreamTest.java"}, run: "aLoneMessageTravelsUnwrapped", sdk: sdkJava})
	add(mutation{name: "java: Drain travels inside a batch", file: "sdks/java/worker/src/main/java/io/jobwire/worker/Worker.java",
		from: "if (m != null && !m.hasDrain() && i - from < MAX_BATCH\n", to: "if (m != null && i - from < MAX_BATCH\n",
		pkgs: []string{"sdks/java/worker/src/test/java/io/jobwire/worker/WorkerStreamTest.java"}, run: "drainTravelsAloneAndTheResultsReadyWithItLeaveAsOneFrame", sdk: sdkJava})
	add(mutation{name: "lock order: the writer does not lock its jobs first", file: "broker/commit/queue.go",
		from: "\t\tif len(locks) > 1 {", to: "\t\tif false {",
		pkgs: []string{"./broker/commit"}, run: "TestWritersLockJobsFirstInIDOrder", postgres: true})
	add(mutation{name: "lock order: a result's job is not locked first", file: "broker/commit/queue.go",
		from: "\t\t\tids = append(ids, f.Finishes().JobID)", to: "\t\t\t_ = f",
		pkgs: []string{"./broker/commit"}, run: "TestWritersLockJobsFirstInIDOrder", postgres: true})
	add(mutation{name: "postgres lock order: the up-front lock locks nothing", file: "store/postgres/lockorder.go",
		from: "\tif err := t.hold(lockRowsSQL, ids); err != nil {", to: "\tif err := error(nil); err != nil {",
		pkgs: []string{pgPkg}, run: "TestManyWritesLockJobsInIDOrder/JobLockRowsThenJobSucceedMany", postgres: true})
	add(mutation{name: "postgres lock order: a write of many trusts a lock it does not hold", file: "store/postgres/lockorder.go",
		from: "\tif t.lockedAll(ids) {", to: "\tif true {",
		pkgs: []string{pgPkg}, run: "TestManyWritesLockJobsInIDOrder", postgres: true})
	add(mutation{name: "broker size: one field more", file: "broker/broker.go",
		from: "\tshuttingDown bool\n}", to: "\tshuttingDown bool\n\tspare        int\n}",
		pkgs: []string{"./broker"}, run: "TestBrokerStaysSmall"})
	add(mutation{name: "server: a stream's enqueue skips a call's checks", file: "server/enqueuestream.go",
		from: "enqueue := bindUnary(p.requests, info,", to: "enqueue := bindUnary(nil, info,",
		pkgs: []string{"./client"}, run: "TestEnqueueStreamChecksEachRequestAsACall"})
	add(mutation{name: "client: an enqueue stream that ended while idle fails its Enqueue", file: "client/enqueuestream.go",
		from: "case err != nil && !sent && ctx.Err() == nil:", to: "case err != nil && !sent && false:",
		pkgs: []string{"./client"}, run: "TestEnqueueStreamsAfterBrokerRestart"})
	add(mutation{name: "client: a request the broker did not read fails its Enqueue", file: "client/enqueuestream.go",
		from: "len(s.st.Trailer().Get(unreadTrailer)) > 0 ||", to: "len(s.st.Trailer().Get(unreadTrailer)) > 9 ||",
		pkgs: []string{"./client"}, run: "TestEnqueueStreamEndedUnread"})
	add(mutation{name: "client: a stream refused with nothing applied fails its Enqueue", file: "client/enqueuestream.go",
		from: "|| brokerset.NotApplied(err)) {", to: "|| brokerset.NotApplied(nil)) {",
		pkgs: []string{"./client"}, run: "TestEnqueueStreamEndedUnread"})
	add(mutation{name: "server: a stream's request refused with nothing applied is answered, its details lost", file: "server/enqueuestream.go",
		from: "if brokerset.NotApplied(err) {", to: "if brokerset.NotApplied(nil) {",
		pkgs: []string{"./server"}, run: "TestEnqueueStreamEndsOnARefusalWithNothingApplied"})
	add(mutation{name: "server: a shutting-down broker keeps its idle enqueue streams open", file: "server/enqueuestream.go",
		from: "end := p.enqueueStreamsEnd()", to: "end := make(chan struct{})",
		pkgs: []string{"./client"}, run: "TestEnqueueStreamsLetTheBrokerStopGracefully"})
	add(mutation{name: "server: a stream's requests are not counted as calls", file: "server/server.go",
		from: "s.requests = append(slices.Clone(opts.RequestInterceptors), unary...)", to: "s.requests = unary",
		pkgs: []string{"./internal/metrics"}, run: "TestScrapeCountsStreamRequestsAsEnqueueCalls"})
	add(mutation{name: "server: a broker that cannot reach its database keeps its enqueue streams", file: "server/reach.go",
		from: "\t\ts.endEnqueueStreams(false)\n", to: "\n",
		pkgs: []string{"./client"}, run: "TestDialBrokersWithEnqueueStreamsLeaveABrokerThatCannotReachItsDatabase"})
	add(mutation{name: "broker: a retried round gives a probe's slots back twice", file: "broker/dispatch.go",
		from: "\t\t\tg.open.free = g.open.planned\n", to: "\n",
		pkgs: []string{"./server"}, run: "TestRetriedRoundLeasesNoMoreThanTheWorkersRoom"})
	add(mutation{name: "server: an enqueue stream ends while it carries requests", file: "server/enqueuestream.go",
		from: "if left := e.idleLeft(idle); left > 0 {", to: "if left := e.idleLeft(idle); false && left > 0 {",
		pkgs: []string{"./server"}, run: "TestEnqueueStreamEndsWhenIdle"})
	add(mutation{name: "server: an idle enqueue stream is kept", file: "server/enqueuestream.go",
		from: "timer := arm(idle)", to: "timer := arm(1000 * time.Hour)",
		pkgs: []string{"./server"}, run: "TestEnqueueStreamEndsWhenIdle"})
	add(mutation{name: "app: the environment's GOGC is ignored", file: "internal/app/app.go",
		from: "if os.Getenv(\"GOGC\") == \"\" {", to: "if true {",
		pkgs: []string{"./internal/app"}, run: "TestBrokerSetsGOGCUnlessTheEnvironmentDoes"})
	add(mutation{name: "postgres: the URL's idle timeout is overridden", file: "store/postgres/postgres.go",
		from: "; !set && opts.IdleInTransaction > 0 {", to: "; (set || !set) && opts.IdleInTransaction > 0 {",
		pkgs: []string{pgPkg}, run: "TestSessionIdleInTransactionSetting", postgres: true})
	add(mutation{name: "dashboard: the ticked Purge requeues", file: "internal/web/assets/app.js",
		from: "onclick: () => run(\"PurgeDeadJobs\", \"Purge\")", to: "onclick: () => run(\"RequeueDeadJobs\", \"Purge\")",
		pkgs: []string{webPkg}, run: "TestDashboardListsInBrowser/a_ticked_purge_deletes_exactly_the_jobs_ticked"})
	add(mutation{name: "dashboard: a sort orders only the page shown", file: "internal/web/assets/app.js",
		from: "page_token: this.params.get(\"page\") || \"\" }, listSort(\"dlq\", this.params).req)", to: "page_token: this.params.get(\"page\") || \"\" })",
		pkgs: []string{webPkg}, run: "TestDashboardListsInBrowser/a_sort_orders_the_whole_list,_not_the_page_shown"})
	add(mutation{name: "rust: a batch is read backwards", file: "sdks/rust/src/worker.rs",
		from: "            for m in batch.messages {", to: "            for m in batch.messages.into_iter().rev() {",
		pkgs: []string{"sdks/rust/src/worker.rs"}, run: "a_batch_from_the_broker_is_handled_in_order", sdk: sdkRust})
	add(mutation{name: "python: a batch holds more than the limit", file: "sdks/python/jobwire/worker.py",
		from: "while queue.qsize() and len(batch) < MAX_BATCH:", to: "while queue.qsize():",
		pkgs: []string{"sdks/python/tests/test_worker_stream.py"}, run: "test_no_batch_holds_more_than_1024_messages_and_drain_goes_alone", sdk: sdkPython})
	add(mutation{name: "python: Drain travels inside a batch", file: "sdks/python/jobwire/worker.py",
		from: "return msg is not _CLOSE and not msg.HasField(\"drain\")", to: "return msg is not _CLOSE",
		pkgs: []string{"sdks/python/tests/test_worker_stream.py"}, run: "test_no_batch_holds_more_than_1024_messages_and_drain_goes_alone", sdk: sdkPython})
	add(mutation{name: "java: a batch frame gathers past its byte limit", file: "sdks/java/worker/src/main/java/io/jobwire/worker/Worker.java",
		from: "(i == from || bytes + n <= MAX_BATCH_BYTES)", to: "(i == from || true)",
		pkgs: []string{"sdks/java/worker/src/test/java/io/jobwire/worker/WorkerStreamTest.java"}, run: "noBatchGathersMoreThanMaxBatchBytes", sdk: sdkJava})
	add(mutation{name: "node: a batch frame gathers past its byte limit", file: "sdks/node/src/worker.js",
		from: "(messages.length > 0 && bytes + n > MAX_BATCH_BYTES)", to: "false",
		pkgs: []string{"sdks/node/test/worker.test.js"}, run: "no batch gathers more than a mebibyte$", sdk: sdkNode})
	add(mutation{name: "python: a batch frame gathers past its byte limit", file: "sdks/python/jobwire/worker.py",
		from: "                        if size > MAX_BATCH_BYTES:", to: "                        if False:",
		pkgs: []string{"sdks/python/tests/test_worker_stream.py"}, run: "test_no_batch_gathers_more_than_a_mebibyte", sdk: sdkPython})
	add(mutation{name: "java: a batch holds more than the limit", file: "sdks/java/worker/src/main/java/io/jobwire/worker/Worker.java",
		from: "if (m != null && !m.hasDrain() && i - from < MAX_BATCH\n", to: "if (m != null && !m.hasDrain()\n",
		pkgs: []string{"sdks/java/worker/src/test/java/io/jobwire/worker/WorkerStreamTest.java"}, run: "noBatchHoldsMoreThanMaxBatchMessages", sdk: sdkJava})
	add(mutation{name: "batches: a frame is applied before all of it is checked", file: "server/workers.go",
		from: "if err := validateRequest(m, sess.Capacity()); err != nil {", to: "if err := applyRequest(sess, m); err != nil {",
		pkgs: []string{srvPkg}, run: "TestBatchWithABadMessageAppliesNoneOfIt"})
	add(mutation{name: "postgres lock order: promotion locks due jobs in its scan's order", file: "store/postgres/tx.go",
		from: "SELECT id FROM jobs WHERE state = 1 AND run_at <= $1 ORDER BY id FOR NO KEY UPDATE", to: "SELECT id FROM jobs WHERE state = 1 AND run_at <= $1 FOR NO KEY UPDATE",
		pkgs: []string{pgPkg}, run: "TestPromotionLocksJobsInIDOrder", postgres: true})
	add(mutation{name: "lock order: a cluster's writer does not lock its jobs first", file: "broker/writer.go",
		from: "LockJobs: b.mode.concurrentWriters()}", to: "LockJobs: false}",
		pkgs: []string{"./broker"}, run: "TestWriterLocksJobsFirstOnlyInACluster", postgres: true})
	add(mutation{name: "lock order: a lone writer locks its jobs first", file: "broker/commit/queue.go",
		from: "\tif q.cfg.LockJobs {", to: "\tif true {",
		pkgs: []string{"./broker"}, run: "TestWriterLocksJobsFirstOnlyInACluster", postgres: true})
	add(mutation{name: "waiting jobs: a change does not check the job's state", file: "store/waiting.go",
		from: "\tcond := \"state IN (\" + strings.Join(states, \", \") + \")\"", to: "\tcond := \"true\" + strings.Repeat(\"\", len(states))",
		pkgs: []string{storePkg}, run: "TestStoreContract/ChangeWaiting"})
	add(mutation{name: "waiting jobs: retry now takes a job never tried", file: "store/waiting.go",
		from: "\t\tcond += \" AND attempts > 0\"", to: "\t\tcond += \"\"",
		pkgs: []string{srvPkg}, run: "TestRetryJobNowEndsTheBackoff"})
	add(mutation{name: "unique: a unique job goes into a many-row insert", file: "store/store.go",
		from: "func (p *JobInsertParams) Keyed() bool { return p.IdempotencyKey != \"\" || p.UniqueKey != \"\" }", to: "func (p *JobInsertParams) Keyed() bool { return p.IdempotencyKey != \"\" }",
		pkgs: []string{storePkg}, run: "TestStoreContract/UniqueKeyInALargeInsert"})
	add(mutation{name: "unique: the broker computes no key", file: "broker/unique.go",
		from: "\tp.UniqueKey, p.UniqueStates = key, int(mask)", to: "\t_, p.UniqueStates = key, int(mask)",
		pkgs: []string{srvPkg}, run: "TestUniqueKeyAnswersWithTheWaitingJobUntilItFinishes"})
	add(mutation{name: "unique: a requeued job keeps a key another holds", file: "store/sqlite/admin.go",
		from: "\t\t\t\t\tAND (o.unique_states >> o.state) & 1 = 1)", to: "\t\t\t\t\tAND 0 = 1)",
		pkgs: []string{storePkg}, run: "TestStoreContract/UniqueKeyOfRequeuedJobAlreadyTaken"})
	add(mutation{name: "deps: a dependent is released with a parent left", file: "store/sqlite/deps.go",
		from: "\n\tif left > 0 {", to: "\n\tif left > 1 {",
		pkgs: []string{storePkg}, run: "TestStoreContract/DepsReleasedByEveryWayASuccessIsWritten"})
	add(mutation{name: "deps: a settling finds no dependents to settle", file: "store/postgres/migrations/020_settle_without_dependents.up.sql",
		from: "EXIT WHEN NOT EXISTS (SELECT FROM job_deps WHERE parent_id = ANY (frontier) AND NOT settled);", to: "EXIT WHEN true;",
		pkgs: []string{pgPkg}, run: "TestStoreContract/Deps", postgres: true})
	add(mutation{name: "postgres: the settle call is skipped while edges are left to settle", file: "store/postgres/deps.go",
		from: "WHERE EXISTS (SELECT FROM job_deps WHERE parent_id = ANY ($1) AND NOT settled)`", to: "WHERE EXISTS (SELECT FROM job_deps WHERE parent_id = ANY ($1) AND settled)`",
		pkgs: []string{pgPkg}, run: "TestStoreContract/Deps", postgres: true})
	add(mutation{name: "postgres: whether keyed jobs exist is asked with a plan kept from the broker's start", file: "store/postgres/keyconc.go",
		from: "s.pool.QueryRow(ctx, concurrencyKeyedSQL, pgx.QueryExecModeExec).Scan(&keyed)", to: "s.pool.QueryRow(ctx, concurrencyKeyedSQL).Scan(&keyed)",
		pkgs: []string{pgPkg}, run: "TestConcurrencyKeyedIsPlannedAtEachCall", postgres: true})
	add(mutation{name: "deps: a settled edge is settled again", file: "store/postgres/migrations/020_settle_without_dependents.up.sql",
		from: "AND NOT d.settled", to: "AND true",
		pkgs: []string{pgPkg}, run: "TestStoreContract/DepsSettledOnceWhenRepeated", postgres: true})
	add(mutation{name: "deps: a released dependent wakes no other broker", file: "store/postgres/migrations/020_settle_without_dependents.up.sql",
		from: "PERFORM pg_notify(channel, '{\"k\":\"ready\",\"f\":\"dependencies\"}');", to: "PERFORM 1;",
		pkgs: []string{srvPkg}, run: "TestClusterParentOnOneBrokerReleasesDependentOnAnother", postgres: true})
	add(mutation{name: "deps: a graph with a cycle is accepted", file: "broker/deps.go",
		from: "\tif len(order) < len(nodes) {", to: "\tif false {",
		pkgs: []string{srvPkg}, run: "TestEnqueueGraphRefusesBadGraphs"})
	add(mutation{name: "deps: a dead parent is accepted", file: "store/deps.go",
		from: "if !p.RunAnyway && (st == job.StateDead || st == job.StateCancelled) {", to: "if false {",
		pkgs: []string{storePkg}, run: "TestStoreContract/DepsAddRefusesWhatCannotRun"})
	add(mutation{name: "schedules: a backfill enqueues an occurrence twice", file: "broker/schedules.go",
		from: "ScheduleOccurrenceGet(def.Name, at); err != nil || ok {", to: "ScheduleOccurrenceGet(def.Name, at); err != nil && ok {",
		pkgs: []string{srvPkg}, run: "TestScheduleBackfillEnqueuesEachOccurrenceOnce"})
	add(mutation{name: "schedules: the next fire time is not moved on", file: "broker/schedules.go",
		from: "\tr.NextFireAt, r.BufferedFireAt, r.UpdatedAt = d.Next, d.Buffered, now", to: "\tr.BufferedFireAt, r.UpdatedAt = d.Buffered, now",
		pkgs: []string{srvPkg}, run: "TestScheduleCatchUpAfterAStop"})
	add(mutation{name: "schedules: every overlap is allowed", file: "schedule/decide.go",
		from: "\t\tcase !running || d.Overlap == OverlapAllowAll:", to: "\t\tcase true:",
		pkgs: []string{"./schedule"}, run: "TestDecide"})
	add(mutation{name: "schedules: a late occurrence counts as on time", file: "schedule/decide.go",
		from: "\t\toldest = now.Add(-LateGrace)", to: "\t\toldest = now.Add(-100 * LateGrace)",
		pkgs: []string{"./schedule"}, run: "TestDecide"})
	add(mutation{name: "schedules: the alarm moves later", file: "broker/schedules.go",
		from: "{ s.alarm.SetEarlier(at) }", to: "{ s.alarm.Set(at, true) }",
		pkgs: []string{"./broker"}, run: "TestSchedulerAlarmOnlyMovesEarlier"})
	add(mutation{name: "batches: a job is counted twice (SQLite)", file: "store/sqlite/batches.go",
		from: "AND batch_id IS NOT NULL AND batch_counted = 0 AND ", to: "AND batch_id IS NOT NULL AND ",
		pkgs: []string{storePkg}, run: "TestStoreContract/BatchCompletesOnceWhenEveryJobIsFinal"})
	add(mutation{name: "batches: a job is counted twice (PostgreSQL)", file: "store/postgres/batches.go",
		from: "AND batch_id IS NOT NULL AND NOT batch_counted AND state IN (5, 6, 7)", to: "AND batch_id IS NOT NULL AND state IN (5, 6, 7)",
		pkgs: []string{pgPkg}, run: "TestStoreContract/BatchCompletesOnceWhenEveryJobIsFinal", postgres: true})
	add(mutation{name: "batches: a result does not name its batch", file: "broker/session.go",
		from: "Attempt: a, Now: now, Batch: batchOf(j)}", to: "Attempt: a, Now: now}",
		pkgs: []string{srvPkg}, run: "TestBatchCallbacksRunOnce"})
	add(mutation{name: "keyconc: a key runs one over its limit", file: "store/keyconc.go",
		from: "if c.Key != \"\" && c.Held+picked[c.Key] >= c.Limit {", to: "if c.Key != \"\" && c.Held+picked[c.Key] > c.Limit {",
		pkgs: []string{storePkg}, run: "TestStoreContract/KeyedLeaseHoldsEachKeyToItsLimit"})
	add(mutation{name: "keyconc: a keyed lease takes no lock", file: "store/postgres/keyconc.go",
		from: "\tif t.keysLocked {", to: "\tif true {",
		pkgs: []string{pgPkg}, run: "TestKeyedLeaseWaitsForConcurrentLease", postgres: true})
	add(mutation{name: "keyconc: a lease without keys takes keyed jobs", file: "store/sqlite/tx.go",
		from: "\t\tsel.WriteString(` AND concurrency_key = ''`)", to: "\t\tsel.WriteString(``)",
		pkgs: []string{storePkg}, run: "TestStoreContract/KeyedJobsAreLeftOutByALeaseWithoutKeys"})
	add(mutation{name: "keyconc: keys do not take turns", file: "store/sqlite/keyconc.go",
		from: "ORDER BY priority DESC, turn, served, run_at, id LIMIT", to: "ORDER BY priority DESC, run_at, id LIMIT",
		pkgs: []string{srvPkg}, run: "TestConcurrencyKeysTakeTurns"})
	add(mutation{name: "ratelimit: an empty bucket lets a job through", file: "ratelimit/ratelimit.go",
		from: "\tif l.Allowance(b, now) < 1 {", to: "\tif l.Allowance(b, now) < 0 {",
		pkgs: []string{"./ratelimit"}, run: "TestBurstThenSteadyRate$"})
	add(mutation{name: "ratelimit: the SQLite lease ignores the gate", file: "store/sqlite/tx.go",
		from: "if held = gate.Admit(j.Type, j.Queue, j.RateKey); held != nil {", to: "if held = gate.Admit(j.Type, j.Queue, j.RateKey); false {",
		pkgs: []string{storePkg}, run: "TestStoreContract/LeaseFollowsRateRule$"})
	add(mutation{name: "ratelimit: the PostgreSQL lease skips the limits", file: "store/postgres/tx.go",
		from: "\tif len(caps) == 0 && p.Rates == nil {", to: "\tif len(caps) == 0 {",
		pkgs: []string{pgPkg}, run: "TestStoreContract/RateLimitedLeaseTakesBurstThenRate$", postgres: true})
	add(mutation{name: "ratelimit: a job's type does not pick its limits", file: "store/sqlite/ratelimit.go",
		from: "WHERE (job_type = '' OR job_type = ?)", to: "WHERE (job_type = '-' AND job_type = ?)",
		pkgs: []string{storePkg}, run: "TestStoreContract/RateKeyStoredWithJob$"})
	add(mutation{name: "ratelimit: a lease does not lock the limits", file: "store/postgres/ratelimit.go",
		from: "FROM rate_limits ORDER BY name FOR UPDATE", to: "FROM rate_limits ORDER BY name",
		pkgs: []string{srvPkg}, run: "TestClusterRateLimitHoldsAcrossBrokers$", postgres: true})
	add(mutation{name: "ratelimit: a held job waits for no alarm", file: "broker/ratelimit.go",
		from: "\tr.wake.SetEarlier(rl.NextAt)", to: "\t_ = r.wake",
		pkgs: []string{srvPkg}, run: "TestRateLimitHoldsJobsBackWithoutSpendingAttempts$"})
	add(mutation{name: "limits: a keyed lease applies no rate limit", file: "store/keyconc.go",
		from: "if h := gate.Admit(c.Type, c.Queue, c.RateKey); h != nil {", to: "if h := gate.Admit(c.Type, c.Queue, c.RateKey); false {",
		pkgs: []string{storePkg}, run: "TestStoreContract/KeyedLeaseHoldsRateLimitedJobsWithoutTheirKeysSlot$"})
	add(mutation{name: "limits: a keyed lease takes a rate limit's start before its key's room", file: "store/keyconc.go",
		from: "\t\tif c.Key != \"\" && c.Held+picked[c.Key] >= c.Limit {\n\t\t\tcontinue\n\t\t}\n\t\troom, capped := caps[c.Queue]",
		to:   "\t\tif c.Key != \"\" && c.Held+picked[c.Key] >= c.Limit && (gate == nil || gate.Admit(c.Type, c.Queue, c.RateKey) != nil || true) {\n\t\t\tcontinue\n\t\t}\n\t\troom, capped := caps[c.Queue]",
		pkgs: []string{storePkg}, run: "TestStoreContract/KeyedLeaseHoldsRateLimitedJobsWithoutTheirKeysSlot$"})
	add(mutation{name: "limits: a keyed lease reads no further than a held bucket (SQLite)", file: "store/sqlite/keyconc.go",
		from: "held := len(pick.Held) > 0 && len(cands) == scope.Limit", to: "held := false && len(cands) == scope.Limit",
		pkgs: []string{storePkg}, run: "TestStoreContract/KeyedLeaseReadsPastAHeldBucket$"})
	add(mutation{name: "limits: a keyed lease reads no further than a held bucket (PostgreSQL)", file: "store/postgres/keyconc.go",
		from: "held := len(pick.Held) > 0 && cut", to: "held := false && cut",
		pkgs: []string{pgPkg}, run: "TestStoreContract/KeyedLeaseReadsPastAHeldBucket$", postgres: true})
	add(mutation{name: "limits: a keyed lease takes the keys' lock before the rate limits' rows", file: "store/postgres/keyconc.go",
		from: "\tgate, err := t.rateGate(p)\n\tif err != nil {\n\t\treturn nil, err\n\t}\n\tif err := t.lockKeys(); err != nil {\n\t\treturn nil, err\n\t}\n",
		to:   "\tif err := t.lockKeys(); err != nil {\n\t\treturn nil, err\n\t}\n\tgate, err := t.rateGate(p)\n\tif err != nil {\n\t\treturn nil, err\n\t}\n",
		pkgs: []string{pgPkg}, run: "TestKeyedRatedLeaseLocksTheLimitsBeforeTheKeys$", postgres: true})
	add(mutation{name: "limits: a keyed lease in a cluster applies no rate limit", file: "store/postgres/keyconc.go",
		from: "\tleased, err := t.leaseKeyedPasses(p, caps, gate)", to: "\tleased, err := t.leaseKeyedPasses(p, caps, nil)",
		pkgs: []string{srvPkg}, run: "TestClusterRateLimitAndConcurrencyKeyApplyTogether$", postgres: true})
	add(mutation{name: "python: a result over the limit is sent", file: "sdks/python/jobwire/worker.py",
		from: "if data and limit > 0 and len(data) > limit:", to: "if data and limit > 0 and len(data) > limit + 1:",
		pkgs: []string{"sdks/python/tests/test_results.py"}, run: "test_a_result_over_the_brokers_limit_is_a_fatal_result_too_large", sdk: sdkPython})
	add(mutation{name: "python: progress is not throttled", file: "sdks/python/jobwire/progress.py",
		from: "if self._sent_at is None or now >= self._sent_at + self._interval:", to: "if True:",
		pkgs: []string{"sdks/python/tests/test_results.py"}, run: "test_first_goes_at_once_then_one_a_second_and_the_last_always", sdk: sdkPython})
	add(mutation{name: "python: the last progress is dropped", file: "sdks/python/jobwire/worker.py",
		from: "last = self._stop_progress(j)  # nothing after the result; what was held back goes before it", to: "last = None",
		pkgs: []string{"sdks/python/tests/test_results.py"}, run: "test_progress_held_back_goes_right_before_the_result_and_none_after", sdk: sdkPython})
	add(mutation{name: "node: a result over the limit is sent", file: "sdks/node/src/worker.js",
		from: "if (data && limit > 0 && data.length > limit) {", to: "if (data && limit > 0 && data.length > limit + 1) {",
		pkgs: []string{"sdks/node/test/worker.test.js"}, run: "^a result over the broker's limit", sdk: sdkNode})
	add(mutation{name: "node: the last progress is dropped", file: "sdks/node/src/worker.js",
		from: "const last = this.stopProgress(j); // nothing after the result; what was held back goes before it", to: "const last = undefined;",
		pkgs: []string{"sdks/node/test/worker.test.js"}, run: "^a progress report held back when the handler resolves", sdk: sdkNode})
	add(mutation{name: "node: a refused progress ends the job", file: "sdks/node/src/worker.js",
		from: "if (r.refusedMessage === 'REFUSED_MESSAGE_PROGRESS' && r.code === CODE_INVALID_ARGUMENT) {", to: "if (false) {",
		pkgs: []string{"sdks/node/test/worker.test.js"}, run: "^a refused progress report is only logged", sdk: sdkNode})
	add(mutation{name: "java: progress is not throttled", file: "sdks/java/worker/src/main/java/io/jobwire/worker/ProgressThrottle.java",
		from: "if (!sentOnce || now - sentAt >= intervalNanos) {", to: "if (true) {",
		pkgs: []string{"sdks/java/worker/src/test/java/io/jobwire/worker/ResultsTest.java"}, run: "theThrottleSendsTheFirstAtOnceThenOneASecondAndTheNewestAlways", sdk: sdkJava})
	add(mutation{name: "java: a result over the limit is sent", file: "sdks/java/worker/src/main/java/io/jobwire/worker/Worker.java",
		from: "value.length > maxResultBytes) {", to: "value.length > maxResultBytes + 1) {",
		pkgs: []string{"sdks/java/worker/src/test/java/io/jobwire/worker/ResultsTest.java"}, run: "theResultSetByTheHandlerIsSentAndOneOverTheBrokersLimitIsAFatalResultTooLarge", sdk: sdkJava})
	add(mutation{name: "rust: a result over the limit is sent", file: "sdks/rust/src/worker.rs",
		from: "Ok(result) if limit > 0 && result.len() > limit =>", to: "Ok(result) if limit > 0 && result.len() > limit + 1 =>",
		pkgs: []string{"sdks/rust/src/worker.rs"}, run: "a_returned_result_is_sent_and_one_over_the_brokers_limit_is_a_fatal_result_too_large", sdk: sdkRust})
	add(mutation{name: "rust: progress is not throttled", file: "sdks/rust/src/progress.rs",
		from: "Some(at) if now < at + self.interval =>", to: "Some(at) if false && now < at + self.interval =>",
		pkgs: []string{"sdks/rust/src/progress.rs"}, run: "the_first_report_goes_at_once_then_one_a_second_the_newest_held_back_always", sdk: sdkRust})
	add(mutation{name: "deps: a dependent cancelled by its parent is not counted in its batch", file: "store/sqlite/deps.go",
		from: "\t\tt.batches.Add(batch.Int64, child, now)\n", to: "",
		pkgs: []string{srvPkg}, run: "TestBatchCountsItsDependentsHoweverTheyEnd"})
	add(mutation{name: "postgres deps: a dependent cancelled by its parent is not counted in its batch", file: "store/postgres/batches.go",
		from: "rows, err = t.tx.Query(t.ctx, countCascadeSQL, ids, requeued, states, failed)", to: "rows, err = t.tx.Query(t.ctx, countBatchJobsSQL, ids, requeued, states)",
		pkgs: []string{srvPkg}, run: "TestBatchCountsItsDependentsHoweverTheyEnd", postgres: true})
	add(mutation{name: "batches: a requeued dead job stays counted in its batch", file: "store/sqlite/admin.go",
		from: "payload = COALESCE(?, payload), batch_counted = 0,", to: "payload = COALESCE(?, payload),",
		pkgs: []string{srvPkg}, run: "TestRequeuedDeadJobIsCountedAgainInItsBatch"})
	add(mutation{name: "postgres batches: a requeued dead job stays in its batch's dead count", file: "store/postgres/admin.go",
		from: "\t\tt.batches.Uncount(batch, state)\n", to: "",
		pkgs: []string{srvPkg}, run: "TestRequeuedDeadJobIsCountedAgainInItsBatch", postgres: true})
	add(mutation{name: "deps: a requeued parent leaves its dependents cancelled", file: "store/sqlite/admin.go",
		from: "return len(requeued), t.reviveDependents(requeued)", to: "return len(requeued), nil",
		pkgs: []string{srvPkg}, run: "TestRequeuedParentRevivesItsDependents"})
	add(mutation{name: "postgres deps: a requeued parent leaves its dependents cancelled", file: "store/postgres/admin.go",
		from: "return len(requeued), t.reviveDependents(requeued)", to: "return len(requeued), nil",
		pkgs: []string{srvPkg}, run: "TestRequeuedParentRevivesItsDependents", postgres: true})
	add(mutation{name: "deps: a revived dependent stays in the cancelled totals", file: "store/sqlite/admin.go",
		from: "if err := t.addFinished(j.queue, j.typ, job.StateCancelled, -1); err != nil {", to: "if err := error(nil); err != nil {",
		pkgs: []string{srvPkg}, run: "TestRequeuedParentRevivesItsDependents"})
	add(mutation{name: "batches: callbacks a cascade enqueued wake no dispatch", file: "store/sqlite/sqlite.go",
		from: "s.dependentsReady(released + t.callbacks)", to: "s.dependentsReady(released)",
		pkgs: []string{srvPkg}, run: "TestBatchCountsItsDependentsHoweverTheyEnd"})
	add(mutation{name: "results: a result over the limit is stored", file: "broker/outcome.go",
		from: "if max := b.maxResultBytes(); len(result) > max {", to: "if max := b.maxResultBytes(); len(result) > max+1<<30 {",
		pkgs: []string{srvPkg}, run: "TestResultTooLargeIsAFatalFailure"})
	add(mutation{name: "metrics: a message whose send failed counts as sent", file: "internal/metrics/grpc.go",
		from: "if err == nil {\n\t\tm.sentOK.Inc()", to: "if err == nil || true {\n\t\tm.sentOK.Inc()",
		pkgs: []string{"./internal/metrics"}, run: "TestGRPCCountsAsTheProviderDid"})
	add(mutation{name: "metrics: a context error counts as Unknown", file: "internal/metrics/grpc.go",
		from: "s = status.FromContextError(err)", to: "_ = s",
		pkgs: []string{"./internal/metrics"}, run: "TestGRPCCountsAsTheProviderDid"})
	add(mutation{name: "progress: a forged lease writes progress", file: "store/sqlite/results.go",
		from: "progress_at = ? WHERE id = ? AND lease_token = ? AND lease_secret = ? AND state IN (3, 4)`",
		to:   "progress_at = ? WHERE id = ? AND lease_token = ? AND (lease_secret = ? OR 1) AND state IN (3, 4)`",
		pkgs: []string{storePkg}, run: "TestStoreContract/JobProgressMany"})
	add(mutation{name: "progress: a report that changed no row is applied", file: "store/sqlite/results.go",
		from: "stored[i] = n == 1", to: "stored[i] = n >= 0",
		pkgs: []string{storePkg}, run: "TestStoreContract/JobProgressMany"})
	add(mutation{name: "watch: a change another broker made is not sent", file: "broker/watch.go",
		from: "if (known && v != was) || (!known && v.State.Final()) || !ok {", to: "if (known && v != was && false) || (!known && v.State.Final()) || !ok {",
		pkgs: []string{"./broker"}, run: "TestBackstopTellsWhatChangedUntold"})
	add(mutation{name: "watch: a write wakes no watcher on another broker", file: "broker/watchcluster.go",
		from: "if b.clustered() && b.watchedElsewhere(id) {", to: "if false {",
		pkgs: []string{srvPkg}, run: "TestClusterWaitAcrossBrokers", postgres: true})
	add(mutation{name: "go worker: progress rules unchecked in the library", file: "worker/outcome.go",
		from: "job.CheckProgress(p.GetFraction(), p.Fraction != nil, p.Message)", to: "job.CheckProgress(p.GetFraction(), false, p.Message)",
		pkgs: []string{"./worker"}, run: "TestProgressRulesAreCheckedInTheLibrary"})
	add(mutation{name: "go worker: a parent's state keeps the proto's spelling", file: "worker/outcome.go",
		from: "State: strings.ToLower(job.State(p.GetState()).String())}", to: "State: strings.ToUpper(job.State(p.GetState()).String())}",
		pkgs: []string{"./worker"}, run: "TestParentResultsKeepOrderAndNameStates"})
	add(mutation{name: "java: a refused result names the library, not the codec", file: "sdks/java/worker/src/main/java/io/jobwire/worker/Failures.java",
		from: " || t instanceof ResultException;", to: ";",
		pkgs: []string{"sdks/java/worker/src/test/java/io/jobwire/worker/FailuresTest.java"}, run: "aPayloadOrResultTheCodecRefusedIsFatalWithTheCodecsError", sdk: sdkJava})
	add(mutation{name: "node: a parent's state is not named from the schema", file: "sdks/node/src/proto.js",
		from: "JobState.valuesById[state] ?? ", to: "undefined ?? ",
		pkgs: []string{"sdks/node/test/worker.test.js"}, run: "results of an assignment reach the handler in order", sdk: sdkNode})
	add(mutation{name: "keyconc: another broker's rule change is not read", file: "broker/keyconc.go",
		from: "\tk.reload.changed()", to: "\t_ = k.reload",
		pkgs: []string{srvPkg}, run: "TestClusterConcurrencyKeyHoldsAcrossBrokers", postgres: true})
	add(mutation{name: "ratelimit: two keyed limits over the same jobs may take different keys", file: "ratelimit/gate.go",
		from: "a.Key != b.Key && Overlap(a, b)", to: "Overlap(a, b)",
		pkgs: []string{"./ratelimit"}, run: "TestKeyClash"})
	add(mutation{name: "service: an alarm moves later", file: "internal/service/timer.go",
		from: "\tif a.timer != nil && !at.Before(a.at) {", to: "\tif false {",
		pkgs: []string{"./internal/service"}, run: "TestAlarmSetEarlierKeepsTheEarliestMoment"})
	add(mutation{name: "chaos: a rate limit across three brokers without its lock", file: "store/postgres/ratelimit.go",
		from: "FROM rate_limits ORDER BY name FOR UPDATE", to: "FROM rate_limits ORDER BY name",
		pkgs: []string{"./internal/chaos"}, run: "TestRateLimitHoldsAcrossThreeBrokers$", postgres: true})
	add(mutation{name: "progress: every report is its own write", file: "broker/outcome.go",
		from: "\tsubmit := !q.queued", to: "\tsubmit := true",
		pkgs: []string{srvPkg}, run: "TestProgressBurstIsOneWrite"})
	add(mutation{name: "watch: the broker's own writes wake no watch", file: "broker/watch.go",
		from: "func (b *Broker) jobsChanged(c jobChange, ids ...int64) { b.svc.watches.changed(c, ids...) }", to: "func (b *Broker) jobsChanged(c jobChange, ids ...int64) {}",
		pkgs: []string{srvPkg}, run: "TestWaitReturnsFinalJobsWithResults$|TestFinalOnlyWatchSleepsThroughStartAndProgress$"})
	add(mutation{name: "cli: a number out of its range is taken", file: "cmd/jobwire/flags.go",
		from: "\tif n < lo || n > hi {", to: "\tif false {",
		pkgs: []string{"./cmd/jobwire"}, run: "TestBadCommandLinesExitTwoWithOneSentence"})
	add(mutation{name: "store: a keyed job with no limit is inserted", file: "store/keyconc.go",
		from: "case c.Key != \"\" && c.Limit < 1:", to: "case c.Key != \"\" && c.Limit < 0:",
		pkgs: []string{storePkg}, run: "TestStoreContract/KeyedInsertRefusesABadLimit"})
	add(mutation{name: "store: a limit without a key is inserted", file: "store/keyconc.go",
		from: "if err := CheckConcurrency(p.Concurrency); err != nil {", to: "if err := CheckConcurrency(p.Concurrency); err != nil && p.Concurrency.Key != \"\" {",
		pkgs: []string{storePkg}, run: "TestStoreContract/KeyedInsertRefusesABadLimit"})
	add(mutation{name: "store: keys always said to be in use", file: "store/sqlite/keyconc.go",
		from: "SELECT EXISTS (SELECT 1 FROM jobs WHERE state = 2 AND concurrency_key <> '')", to: "SELECT 1 OR EXISTS (SELECT 1 FROM jobs WHERE state = 2 AND concurrency_key <> '')",
		pkgs: []string{storePkg}, run: "TestStoreContract/ConcurrencyRulesReachWaitingJobs"})
	add(mutation{name: "store: dropping a queue changes the caller's list", file: "store/store.go",
		from: "p.Queues = slices.DeleteFunc(slices.Clone(p.Queues)", to: "p.Queues = slices.DeleteFunc(p.Queues",
		pkgs: []string{"./store"}, run: "TestDropQueue"})
	add(mutation{name: "watch: a final-only watch is woken by a start", file: "broker/watch.go",
		from: "if c == changeRunning && w.finalOnly {", to: "if false {",
		pkgs: []string{srvPkg}, run: "TestFinalOnlyWatchSleepsThroughStartAndProgress$"})
	add(mutation{name: "watch: a full watch sleeps through a start", file: "broker/watch.go",
		from: "if c == changeRunning && w.finalOnly {", to: "if c == changeRunning {",
		pkgs: []string{srvPkg}, run: "TestWatchYieldsStateAndProgress$"})
	add(mutation{name: "store: a watched job's outcome without its result", file: "store/sqlite/results.go",
		from: "j.Result, j.Progress = result, progress", to: "_ = progress",
		pkgs: []string{storePkg}, run: "TestStoreContract/JobOutcomes"})
	add(mutation{name: "sqlite: a lease of named queues reads every queue", file: "store/reads.go",
		from: "case len(queues) > 0 && len(queues)*len(types) <= MaxReads:", to: "case false:",
		pkgs: []string{storePkg}, run: "TestQueryPlansUsePartialIndexes"})
	add(mutation{name: "sqlite: a lease of every queue but some reads the paused ones' backlog", file: "store/sqlite/tx.go",
		from: "\t\t\tscope.Queues = named", to: "\t\t\t_ = named",
		pkgs: []string{storePkg}, run: "TestLeaseOfEveryQueueButSomeNamesTheRest"})
	add(mutation{name: "web: the sampler reads a slow backlog every tick", file: "internal/web/sampler.go",
		from: "if began.Before(s.restAt) {", to: "if false && began.Before(s.restAt) {",
		pkgs: []string{webPkg}, run: "TestSamplerSpacesOutSlowReadings"})
	add(mutation{name: "watch: a job that reported progress is known to its result's write", file: "broker/session.go",
		from: "known: l.fresh && !l.progressed && ref.Token.Seq == 1 &&", to: "known: l.fresh && ref.Token.Seq == 1 &&",
		pkgs: []string{srvPkg}, run: "TestWatchSendsFinalJobsAsStored"})
	add(mutation{name: "watch: a lease read back from the database is known to its result's write", file: "broker/session.go",
		from: "known: l.fresh && !l.progressed && ref", to: "known: !l.progressed && ref",
		pkgs: []string{srvPkg}, run: "TestClusterWatchReadsAJobWhoseWorkerCameBack$", postgres: true})
	add(mutation{name: "watch: a result handed to watches loses its result", file: "broker/session.go",
		from: "s.Result = p.Result // a success without one stores NULL", to: "s.Result = nil",
		pkgs: []string{srvPkg}, run: "TestWatchSendsFinalJobsAsStored"})
	add(mutation{name: "watch: a result handed to watches keeps the old dead reason", file: "broker/session.go",
		from: "s.DeadReason = p.DeadReason", to: "s.DeadReason = j.DeadReason",
		pkgs: []string{srvPkg}, run: "TestWatchSendsFinalJobsAsStored"})
	add(mutation{name: "watch: a job told of twice is taken from the hand-over", file: "broker/watch.go",
		from: "if _, twice := w.changed[id]; twice {", to: "if false {",
		pkgs: []string{srvPkg}, run: "TestWatchReadsAJobToldOfTwice$"})
	add(mutation{name: "sqlite: a lease of 1,000 queues reads them one by one", file: "store/reads.go",
		from: "case len(queues) > 0 && len(queues)*len(types) <= MaxReads:", to: "case len(queues) > 0:",
		pkgs: []string{storePkg}, run: "TestLeaseOfManyNamedQueuesRuns"})
	add(mutation{name: "sqlite: a union of queues' reads binds past SQLite's limit", file: "store/sqlite/tx.go",
		from: "if len(args) > maxVariables {", to: "if false {",
		pkgs: []string{storePkg}, run: "TestLeaseOfManyNamedQueuesRuns"})
	add(mutation{name: "postgres: the keys' lock is the database's, not the schema's", file: "store/postgres/keyconc.go",
		from: "`SELECT pg_advisory_xact_lock($1, `+schemaKey+`)`, lockConcurrency", to: "`SELECT pg_advisory_xact_lock($1, 0)`, lockConcurrency",
		pkgs: []string{pgPkg}, run: "TestKeysLockIsTheSchemas", postgres: true})
	add(mutation{name: "watch: a wait's first look reports no job final", file: "broker/watch.go",
		from: "\treturn final\n", to: "\treturn final[:0]\n",
		pkgs: []string{"./broker"}, run: "TestBackstopTellsWhatChangedUntold"})
	add(mutation{name: "watch: a watch of versions reads only which jobs are final", file: "broker/watch.go",
		from: "return h.versionsMoved(ids) // which are gone, and which final", to: "return final // which are gone, and which final",
		pkgs: []string{"./broker"}, run: "TestBackstopTellsWhatChangedUntold"})
	add(mutation{name: "watch: the backstop misses a job that ended before it was first read", file: "broker/watch.go",
		from: "(!known && v.State.Final())", to: "(!known && false)",
		pkgs: []string{"./broker"}, run: "TestBackstopTellsWhatChangedUntold"})
	add(mutation{name: "wait: jobs not found are not refused", file: "server/watch.go",
		from: "if found < len(ids) {", to: "if found < 0 {",
		pkgs: []string{srvPkg}, run: "TestWatchJobsRefusesBadRequests"})
	add(mutation{name: "wait: the last jobs are held to gather company", file: "server/watch.go",
		from: "for f.w.Pending() < len(f.sent) {", to: "for f.w.Pending() < len(f.sent)+1 {",
		pkgs: []string{srvPkg}, run: "TestWaitSendsItsLastJobsWithoutGathering"})
	add(mutation{name: "wait: columns are accepted without final_only", file: "server/watch.go",
		from: "if req.GetColumns() && !req.GetFinalOnly() {", to: "if false {",
		pkgs: []string{srvPkg}, run: "TestWatchJobsRefusesBadRequests"})
	add(mutation{name: "wait columns: a job with only an error message is sent without it", file: "server/convert.go",
		from: `j.LastErrorType != "" || j.LastErrorMessage != ""`, to: `j.LastErrorType != ""`,
		pkgs: []string{srvPkg}, run: "TestEndsToProtoTellsWhatOutcomeTells"})
	add(mutation{name: "wait columns: a job's queue is sent as its type", file: "server/convert.go",
		from: "out.Types[i], out.Queues[i] = name(j.Type), name(j.Queue)", to: "out.Types[i], out.Queues[i] = name(j.Type), name(j.Type)",
		pkgs: []string{srvPkg}, run: "TestWaitColumnsNameEachTypeAndQueueOnce"})
	add(mutation{name: "client: job ends with a short column are taken", file: "client/convert.go",
		from: "len(ends.GetTypes()) != n || len(ends.GetQueues()) != n {", to: "len(ends.GetTypes()) != n {",
		pkgs: []string{"./client"}, run: "TestEndsFromProtoRefusesBrokenColumns"})
	add(mutation{name: "client: a job end's detail out of range panics", file: "client/convert.go",
		from: "if int(d.GetIndex()) >= n {", to: "if int(d.GetIndex()) > n {",
		pkgs: []string{"./client"}, run: "TestEndsFromProtoRefusesBrokenColumns"})
	add(mutation{name: "client: a waited job is placed by its index among distinct ids", file: "client/watch.go",
		from: "if !yield(w.place[i], j) {", to: "if !yield(i, j) {",
		pkgs: []string{srvPkg}, run: "TestWaitReturnsFinalJobsWithResults"})
	add(mutation{name: "client: a job named twice is returned once", file: "client/watch.go",
		from: "out[i] = out[w.first(id)] // named twice: its first place holds it", to: "_ = w.first(id)",
		pkgs: []string{srvPkg}, run: "TestWaitReturnsFinalJobsWithResults"})
	add(mutation{name: "sqlite: FinalAmong reads only the first id of each range", file: "store/sqlite/results.go",
		from: "BETWEEN r.value ->> 0 AND r.value ->> 1`", to: "BETWEEN r.value ->> 0 AND r.value ->> 0`",
		pkgs: []string{storePkg}, run: "TestStoreContract/FinalAmong"})
	add(mutation{name: "convert: the slab's times lose their nanoseconds", file: "server/convert.go",
		from: "Nanos: int32(t.Nanosecond())})", to: "})",
		pkgs: []string{srvPkg}, run: "TestProtoSlabMatchesJobToProto"})
	add(mutation{name: "deps watch: the broker is not told of dependents its store changed", file: "broker/deps.go",
		from: "st.OnDependentsChanged(func(ids []int64) { b.jobsChanged(changeAny, ids...) })", to: "st.OnDependentsChanged(func(ids []int64) {})",
		pkgs: []string{srvPkg}, run: "TestWaitOnDependentsReturnsAsTheirParentFails$"})
	add(mutation{name: "sqlite: a settling's cancelled dependents are not told", file: "store/sqlite/deps.go",
		from: "\t\tt.settle.changed = append(t.settle.changed, next...)\n", to: "",
		pkgs: []string{storePkg}, run: "TestStoreContract/DepsChangedToldAfterCommit"})
	add(mutation{name: "sqlite: changed dependents are not told after commit", file: "store/sqlite/sqlite.go",
		from: "\t\ts.dependentsChanged(t.settle.changed)\n", to: "",
		pkgs: []string{storePkg}, run: "TestStoreContract/DepsChangedToldAfterCommit"})
	add(mutation{name: "sqlite: a requeue's revived dependents are not told", file: "store/sqlite/admin.go",
		from: "\t\tt.settle.changed = append(t.settle.changed, frontier...)\n", to: "",
		pkgs: []string{storePkg}, run: "TestStoreContract/DepsChangedToldAfterCommit"})
	add(mutation{name: "postgres: a settling's cancelled dependents are not told", file: "store/postgres/deps.go",
		from: "t.settle.changed = append(t.settle.changed, store.JobEventIDsOf(s.cancelled.String)...)", to: "_ = s",
		pkgs: []string{pgPkg}, run: "TestStoreContract$/DepsChangedToldAfterCommit", postgres: true})
	add(mutation{name: "postgres: changed dependents are not told after commit", file: "store/postgres/postgres.go",
		from: "\t\ts.dependentsChanged(t.settle.changed)\n", to: "",
		pkgs: []string{pgPkg}, run: "TestStoreContract$/DepsChangedToldAfterCommit", postgres: true})
	add(mutation{name: "postgres: a requeue's revived dependents are not told", file: "store/postgres/admin.go",
		from: "\t\tt.settle.changed = append(t.settle.changed, frontier...)\n", to: "",
		pkgs: []string{pgPkg}, run: "TestStoreContract$/DepsChangedToldAfterCommit", postgres: true})
	add(mutation{name: "postgres: a requeue's revived dependents are not published to other brokers", file: "store/postgres/admin.go",
		from: "\t\t\tt.Publish(e)\n\t\t}\n\t\tif _, err := t.exec(`UPDATE job_deps d SET settled", to: "\t\t\t_ = e\n\t\t}\n\t\tif _, err := t.exec(`UPDATE job_deps d SET settled",
		pkgs: []string{srvPkg}, run: "TestWaitOnDependentsReturnsAsTheirParentFailsOnAnotherBroker", postgres: true})
	add(mutation{name: "postgres: the settle function notifies no job events", file: "store/postgres/migrations/020_settle_without_dependents.up.sql",
		from: "PERFORM pg_notify(channel, json_build_object(", to: "PERFORM length(json_build_object(",
		pkgs: []string{srvPkg}, run: "TestWaitOnDependentsReturnsAsTheirParentFailsOnAnotherBroker", postgres: true})
	add(mutation{name: "postgres: the settle function forgets all but the first generation", file: "store/postgres/migrations/020_settle_without_dependents.up.sql",
		from: "        gone := gone || next;\n", to: "",
		pkgs: []string{pgPkg}, run: "TestStoreContract$/DepsChangedToldAfterCommit", postgres: true})
	add(mutation{name: "postgres: the settle function notifies only the first 300 ids", file: "store/postgres/migrations/020_settle_without_dependents.up.sql",
		from: "FOR i IN 1 .. cardinality(gone) BY 300 LOOP", to: "FOR i IN 1 .. 1 BY 300 LOOP",
		pkgs: []string{srvPkg}, run: "TestManyDependentsCancelledOnOneBrokerReachWaitsOnAnother", postgres: true})
	add(mutation{name: "watch cluster: a job event names only its first job", file: "broker/watchcluster.go",
		from: "h.changed(changeAny, store.JobEventIDsOf(e.Key)...)", to: "h.changed(changeAny, store.JobEventIDsOf(e.Key)[:1]...)",
		pkgs: []string{srvPkg}, run: "TestManyDependentsCancelledOnOneBrokerReachWaitsOnAnother", postgres: true})
	add(mutation{name: "worker: a batch frame from the broker is not unpacked", file: "worker/session.go",
		from: "if b, ok := msg.GetMessage().(*jobwirev1.ConnectResponse_Batch); ok {", to: "if b, ok := msg.GetMessage().(*jobwirev1.ConnectResponse_Batch); ok && false {",
		pkgs: []string{"./worker"}, run: "TestBatchFromBrokerIsHandledInOrder"})
	add(mutation{name: "worker: a Drain travels in a batch frame", file: "worker/session.go",
		from: "*jobwirev1.ConnectRequest_Release, *jobwirev1.ConnectRequest_Progress:", to: "*jobwirev1.ConnectRequest_Release, *jobwirev1.ConnectRequest_Progress, *jobwirev1.ConnectRequest_Drain:",
		pkgs: []string{"./worker"}, run: "TestFrames"})
	add(mutation{name: "worker: a batch frame holds one message more than the limit", file: "worker/session.go",
		from: "j-i < maxBatch && batchable", to: "j-i <= maxBatch && batchable",
		pkgs: []string{"./worker"}, run: "TestFrames"})
	add(mutation{name: "server: a batch frame or a watch response gathers past its byte limit", file: "server/packs.go",
		from: "i-start == maxN || total+n > maxBytes", to: "i-start == maxN",
		pkgs: []string{"./server"}, run: "TestFramesStopAtTheByteLimit|TestWatchParts|TestWatchSpreadsLargeResultsOverResponses"})
	add(mutation{name: "server: an assignment larger than a worker reads is sent", file: "server/workers.go",
		from: "ok && n > limit {", to: "ok && n < 0 {",
		pkgs: []string{"./server", "./worker"}, run: "TestFramesHoldBackAnAssignmentTooLargeToRead|TestAssignmentTooLargeIsDeadLettered"})
	add(mutation{name: "client: reads gRPC's default of 4 MiB a message", file: "client/client.go",
		from: "grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxReceiveBytes)),", to: "grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(4 << 20)),",
		pkgs: []string{"./internal/app"}, run: "TestPayloadsAndResultsPastFourMiBWhenConfigured"})
	add(mutation{name: "app: a raised payload limit leaves the broker reading 4 MiB", file: "internal/app/app.go",
		from: "cfg.Broker.MaxResultBytes+64<<10, cfg.MaxPayload+64<<10)", to: "cfg.Broker.MaxResultBytes+64<<10)",
		pkgs: []string{"./internal/app"}, run: "TestPayloadsAndResultsPastFourMiBWhenConfigured"})
	add(mutation{name: "server: a worker is sent no more than 4 MiB whatever the broker takes", file: "server/server.go",
		from: "s.maxToWorker = max(MaxWorkerMessageBytes, opts.Transport.MaxRecvMsgSize)", to: "s.maxToWorker = MaxWorkerMessageBytes",
		pkgs: []string{"./internal/app"}, run: "TestPayloadsAndResultsPastFourMiBWhenConfigured"})
	add(mutation{name: "server: a batch frame or a watch response carries one more than its count limit", file: "server/packs.go",
		from: "i-start == maxN ||", to: "i-start > maxN ||",
		pkgs: []string{"./server"}, run: "TestFramesChunking|TestWatchParts"})
	add(mutation{name: "go worker: its stream reads its connection's limit (gRPC's default of 4 MiB)", file: "worker/session.go",
		from: "grpc.MaxCallRecvMsgSize(client.MaxReceiveBytes))", to: "grpc.MaxCallRecvMsgSize(min(client.MaxReceiveBytes, 4<<20)))",
		pkgs: []string{"./internal/app"}, run: "TestPayloadsAndResultsPastFourMiBWhenConfigured"})
	add(mutation{name: "outbox: a job larger than the limit ends every stream it is offered to", file: "broker/outbox.go",
		from: "if o.bytes-o.largest > MaxOutboxBytes ||", to: "if o.bytes > MaxOutboxBytes ||",
		pkgs: []string{"./broker", "./internal/app"}, run: "TestOutboxOverflowLeavesOutTheLargestMessage|TestPayloadsAndResultsPastFourMiBWhenConfigured"})
	add(mutation{name: "outbox: the largest message is remembered after it was sent", file: "broker/outbox.go",
		from: "o.msgs, o.bytes, o.largest = nil, 0, 0", to: "o.msgs, o.bytes = nil, 0",
		pkgs: []string{"./broker"}, run: "TestOutboxCountsAfreshAfterASend"})
	add(mutation{name: "schedule: time zones need the system's database", file: "schedule/schedule.go",
		from: `_ "time/tzdata"`, to: `// _ "time/tzdata"`,
		pkgs: []string{"./schedule"}, run: "TestTimeZonesWithoutASystemDatabase"})
	add(mutation{name: "deps: a dependent is sent without its parents' results when they cannot be read", file: "broker/deps.go",
		from: "s.handBack(job.LeaseRef{JobID: a.Job.ID, Token: a.Token})", to: "out = append(out, m)",
		pkgs: []string{"./worker"}, run: "TestParentsResultsUnreadableHoldTheJobBack"})
	add(mutation{name: "broker: a worker is refused the hand back of a lease it never saw", file: "broker/session.go",
		from: "		if !quiet {\n", to: "		if true {\n",
		pkgs: []string{"./broker"}, run: "TestUndeliverableIsDeadAndUnanswered"})
	add(mutation{name: "python: reads gRPC's default of 4 MiB a message", file: "sdks/python/jobwire/worker.py",
		from: `("grpc.max_receive_message_length", MAX_RECEIVE_BYTES),`, to: `("grpc.max_receive_message_length", 4 << 20),`,
		pkgs: []string{"./conformance"}, run: "TestConformance/python$/large_jobs_when_configured"})
	add(mutation{name: "node: reads gRPC's default of 4 MiB a message", file: "sdks/node/src/worker.js",
		from: "'grpc.max_receive_message_length': MAX_RECEIVE_BYTES,", to: "'grpc.max_receive_message_length': 4 << 20,",
		pkgs: []string{"./conformance"}, run: "TestConformance/node$/large_jobs_when_configured"})
	add(mutation{name: "java: reads gRPC's default of 4 MiB a message", file: "sdks/java/worker/src/main/java/io/jobwire/worker/Worker.java",
		from: ".maxInboundMessageSize(MAX_RECEIVE_BYTES);", to: ".maxInboundMessageSize(4 << 20);",
		pkgs: []string{"./conformance"}, run: "TestConformance/java$/large_jobs_when_configured"})
	add(mutation{name: "rust: reads gRPC's default of 4 MiB a message", file: "sdks/rust/src/worker.rs",
		from: ".max_decoding_message_size(MAX_RECEIVE_BYTES);", to: ".max_decoding_message_size(4 << 20);",
		pkgs: []string{"./conformance"}, run: "TestConformance/rust$/large_jobs_when_configured"})
	add(mutation{name: "broker: a worker is answered about an ended lease it never saw", file: "broker/session.go",
		from: "if l == nil && quiet {", to: "if false {",
		pkgs: []string{"./broker"}, run: "TestUndeliverableIsDeadAndUnanswered"})
	add(mutation{name: "broker: a worker is answered about a lease it never saw", file: "broker/session.go",
		from: "if o.quiet {", to: "if false {",
		pkgs: []string{"./broker"}, run: "TestUndeliverableIsDeadAndUnanswered"})
	add(mutation{name: "broker: an undeliverable assignment spends an attempt", file: "broker/session.go",
		from: "		a.Number-- // attempts count only from a start\n", to: "",
		pkgs: []string{"./broker"}, run: "TestUndeliverableIsDeadAndUnanswered"})
	add(mutation{name: "broker: an undeliverable assignment counts against its type's breaker", file: "broker/session.go",
		from: "	case e.unstarted:\n		o.how = permitReleased\n", to: "",
		pkgs: []string{"./broker"}, run: "TestUndeliverableIsDeadAndUnanswered"})
	add(mutation{name: "metrics: a job dead unstarted counts a failed attempt", file: "internal/metrics/metrics.go",
		from: "	if !end.Unstarted {\n", to: "	if true {\n",
		pkgs: []string{"./worker"}, run: "TestAssignmentTooLargeIsDeadLettered"})
	add(mutation{name: "broker: the observer is not told an attempt ended unstarted", file: "broker/session.go",
		from: "Duration: o.params.Now.Sub(o.startedAt),\n		Unstarted: o.unstarted}", to: "Duration: o.params.Now.Sub(o.startedAt)}",
		pkgs: []string{"./worker"}, run: "TestAssignmentTooLargeIsDeadLettered"})
	add(mutation{name: "broker: an undeliverable assignment is reported started", file: "broker/session.go",
		from: "	if !quiet {\n		obs.AttemptStarted", to: "	if true {\n		obs.AttemptStarted",
		pkgs: []string{"./worker"}, run: "TestAssignmentTooLargeIsDeadLettered"})
	add(mutation{name: "store: a job dead unstarted gets an attempt record", file: txFile,
		from: "	if p.Unstarted {\n		return true, nil\n	}\n", to: "",
		pkgs: []string{storePkg}, run: "TestStoreContract/JobFinishUnstarted"})
	add(mutation{name: "postgres: a job dead unstarted gets an attempt record", file: pgTx,
		from: "	if p.Unstarted {\n		return true, nil\n	}\n", to: "",
		pkgs: []string{pgPkg}, run: "TestStoreContract/JobFinishUnstarted", postgres: true})
	add(mutation{name: "sqlite: a lease of every queue reads jobs_open, past the types it does not take", file: txFile,
		from: "	case store.ReadByType:\n		for _, t := range p.Types {", to: "	case store.ReadPlan(-1):\n		for _, t := range p.Types {",
		pkgs: []string{storePkg}, run: "TestQueryPlansUsePartialIndexes"})
	add(mutation{name: "sqlite: a lease of every queue reads 1,000 types one by one", file: "store/reads.go",
		from: "case len(types) == 0 || len(types) > MaxReads:", to: "case len(types) == 0:",
		pkgs: []string{storePkg}, run: "TestLeaseOfManyNamedQueuesRuns"})
	add(mutation{name: "postgres: a lease of types or named queues reads jobs_ready, past other types and queues", file: pgTx,
		from: "switch store.PlanReads(p.Queues, types) {", to: "switch store.ReadOpen {",
		pkgs: []string{pgPkg}, run: "TestLeaseOf(OneType|SeveralTypes|OneQueue)ReadsOnly", postgres: true})
	add(mutation{name: "postgres: a lease's reads are planned without their queue and type as a range", file: pgTx,
		from: "return ` AND ` + column + ` = ` + value + ` AND ` + column + ` >= ` + value + ` AND ` + column + ` <= ` + value",
		to:   "return ` AND ` + column + ` = ` + value",
		pkgs: []string{pgPkg}, run: "TestLeaseOf(OneType|OneQueue)ReadsOnly", postgres: true})
	add(mutation{name: "postgres: a lease of named queues reads each of them past the types it does not take", file: pgTx,
		from: `reads = append(reads, is("queue", queueArg)+is("type", t))`, to: `reads = append(reads, is("queue", queueArg)+strings.Repeat("", len(t)))`,
		pkgs: []string{pgPkg}, run: "TestLeaseOfSeveralTypesReadsOnlyTheirTypes", postgres: true})
	add(mutation{name: "postgres: a lease of several types merges reads that give no order", file: pgTx,
		from: "const order = ` ORDER BY priority DESC, run_at, id`", to: "const order = ``",
		pkgs: []string{pgPkg}, run: "TestLeaseOfSeveralTypes", postgres: true})
	add(mutation{name: "postgres: a lease takes the types it leaves out", file: pgTx,
		from: "scope.Types, scope.ExcludeTypes = p.LeasedTypes(), nil", to: "scope.ExcludeTypes = nil",
		pkgs: []string{pgPkg}, run: "TestLeaseOfSeveralTypesReadsOnlyTheirTypes", postgres: true})
	add(mutation{name: "postgres: a lease of several types waits for the jobs another transaction holds", file: pgTx,
		from: "jobs.state = 2\n\t\tFOR UPDATE SKIP LOCKED) j", to: "jobs.state = 2\n\t\tFOR UPDATE) j",
		pkgs: []string{pgPkg}, run: "TestConcurrentLeasesSkipLockedJobs", postgres: true})
	add(mutation{name: "postgres: a lease of several types locks each merged job by its id", file: pgTx,
		from: "FROM jobs WHERE jobs.ctid = c.ctid AND jobs.state = 2", to: "FROM jobs WHERE jobs.id = c.id AND jobs.state = 2",
		pkgs: []string{pgPkg}, run: "TestLeaseOfSeveralTypesLocksEachJobByItsRow", postgres: true})
	add(mutation{name: "postgres: an offer counts every ready job", file: pgTx,
		from: "	switch store.PlanReads(o.Queues, types) {\n	case store.ReadByQueueAndType:\n		for _, q := range o.Queues {",
		to:   "	switch store.ReadOpen {\n	case store.ReadByQueueAndType:\n		for _, q := range o.Queues {",
		pkgs: []string{pgPkg}, run: "TestOfferPassesWhatItsWorkerDoesNotTake", postgres: true})
	add(mutation{name: "postgres: an offer to a worker of every queue counts every ready job", file: pgTx,
		from: "	case store.ReadByType:\n		for _, t := range types {\n			read(\"\", t)",
		to:   "	case store.ReadByType:\n		for range types {\n			read(\"\", \"\")",
		pkgs: []string{pgPkg}, run: "TestOfferPassesWhatItsWorkerDoesNotTake", postgres: true})
	add(mutation{name: "postgres: an offer passes its worker's own queues' jobs", file: pgTx,
		from: "				read(q, t)\n", to: "				read(q+\"-\", t)\n",
		pkgs: []string{pgPkg}, run: "TestOfferPassesWhatItsWorkerDoesNotTake", postgres: true})
	add(mutation{name: "postgres: an offer reads its worker's jobs in no order", file: pgTx,
		from: "row_number() OVER (ORDER BY r.priority DESC) AS k\n\t\t\t\tFROM jobs r WHERE r.state = 2 ` + read + ` AND r.priority >= u.priority\n\t\t\t\tORDER BY r.priority DESC LIMIT",
		to:   "row_number() OVER () AS k\n\t\t\t\tFROM jobs r WHERE r.state = 2 ` + read + ` AND r.priority >= u.priority\n\t\t\t\tLIMIT",
		pkgs: []string{pgPkg}, run: "TestOfferPassesWhatItsWorkerDoesNotTake", postgres: true})
	add(mutation{name: "postgres: an offered job's checks run once per column that takes its lease", file: pgTx,
		from: "var offeredInsertSQL = `WITH u AS MATERIALIZED (", to: "var offeredInsertSQL = `WITH u AS (",
		pkgs: []string{pgPkg}, run: "TestOfferPassesWhatItsWorkerDoesNotTake", postgres: true})
	add(mutation{name: "worker: a Hello lists every job it is handing back, past its capacity", file: "worker/worker.go",
		from: "room := max(w.opts.Concurrency-len(held), 0)", to: "room := len(handingBack)",
		pkgs: []string{"./worker"}, run: "TestHeldStaysWithinCapacity"})
	add(mutation{name: "store: a lease's types keep those it leaves out", file: "store/store.go",
		from: "if !slices.Contains(p.ExcludeTypes, t) {", to: "if true {",
		pkgs: []string{storePkg}, run: "TestStoreContract/LeaseScope$"})
	add(mutation{name: "sqlite: a lease takes the types it leaves out", file: txFile,
		from: "scope.Types, scope.ExcludeTypes = types, nil", to: "scope.ExcludeTypes = nil",
		pkgs: []string{storePkg}, run: "TestStoreContract/LeaseScope$"})
	add(mutation{name: "sqlite: a lease of many types reads jobs_open, past the types it does not take", file: txFile,
		from: "	if store.NarrowsTypes(types) {", to: "	if false {",
		pkgs: []string{storePkg}, run: "TestLeaseOfManyTypesReadsThoseWithReadyJobs"})
	add(mutation{name: "sqlite: an offer to a worker of many types counts every ready job", file: "store/sqlite/offer.go",
		from: "			if store.NarrowsTypes(types) {", to: "			if false {",
		pkgs: []string{storePkg}, run: "TestOfferPassesTypesItsWorkerDoesNotTake"})
	add(mutation{name: "postgres: a lease of many types reads jobs_ready, past the types it does not take", file: pgTx,
		from: "	if store.NarrowsTypes(scope.Types) {", to: "	if false {",
		pkgs: []string{pgPkg}, run: "TestLeaseOfSeveralTypesReadsOnlyTheirTypes", postgres: true})
	add(mutation{name: "postgres: an offer to a worker of many types counts every ready job", file: pgTx,
		from: "	if store.NarrowsTypes(types) {\n		types = slices.DeleteFunc", to: "	if false {\n		types = slices.DeleteFunc",
		pkgs: []string{pgPkg}, run: "TestOfferPassesWhatItsWorkerDoesNotTake", postgres: true})
	add(mutation{name: "postgres: a lease with no type left reads the ready jobs", file: pgTx,
		from: "	if err != nil || len(scope.Types) == 0 {\n		return nil, err // no type left",
		to:   "	if err != nil {\n		return nil, err // no type left",
		pkgs: []string{pgPkg}, run: "TestLeaseOfManyTypesNoneReadyReadsNoJobs", postgres: true})
	add(mutation{name: "postgres: the ready types are read past a backlog of another type", file: pgTx,
		from: "WHERE EXISTS (SELECT 1 FROM jobs WHERE state = 2 AND jobs.type = u.type)",
		to:   "WHERE EXISTS (SELECT 1 FROM jobs WHERE state = 2 AND jobs.type || '' = u.type)",
		pkgs: []string{pgPkg}, run: "TestReadyTypesProbeEachType", postgres: true})
	add(mutation{name: "sqlite: an offer counts ready jobs of types its worker does not take", file: "store/sqlite/offer.go",
		from: "	case store.ReadByType:\n		q.WriteString(", to: "	case store.ReadPlan(-1):\n		q.WriteString(",
		pkgs: []string{storePkg}, run: "TestOfferPassesTypesItsWorkerDoesNotTake"})
	add(mutation{name: "sqlite: an offer to a worker of named queues counts ready jobs of types it does not take", file: "store/sqlite/offer.go",
		from: `args = in(&q, in(&q, nil, "queue", false, o.Queues), "type", false, types)`, to: `args = in(&q, nil, "queue", false, o.Queues)`,
		pkgs: []string{storePkg}, run: "TestOfferPassesTypesItsWorkerDoesNotTake"})
	add(mutation{name: "sqlite: a lease of named queues reads past the types it does not take", file: txFile,
		from: "read(\"jobs_ready_queue_type\", `queue = ? AND type = ?`, q, t)", to: "read(\"jobs_ready_queue_type\", `queue = ?`, q); _ = t",
		pkgs: []string{storePkg}, run: "TestQueryPlansUsePartialIndexes"})
	add(mutation{name: "sqlite: offers to workers of the same queues but other types share an answer", file: "store/sqlite/offer.go",
		from: `strings.Join(o.Queues, ","), strings.Join(o.Types, ",")}`, to: `strings.Join(o.Queues, ","), ""}`,
		pkgs: []string{storePkg}, run: "TestOfferSharesAnswersByWorkerScope"})
	add(mutation{name: "broker: an offer does not name its worker's types", file: "broker/offer.go",
		from: "Queues: s.queues, Types: s.types}}", to: "Queues: s.queues}}",
		pkgs: []string{"./broker"}, run: "TestOfferPassesABacklogOfAnotherType"})
	add(mutation{name: "worker: a batch frame gathers results past its byte limit", file: "worker/session.go",
		from: "size > maxBatchBytes {", to: "size < 0 {",
		pkgs: []string{"./worker"}, run: "TestFrames$|TestLargeJobsReadyTogether"})
	add(mutation{name: "commit: the writer takes any batch for a crowd of producers", file: "broker/commit/grouped.go",
		from: "		if inserts(o) {\n			n++", to: "		if inserts(o) || true {\n			n++",
		pkgs: []string{"./broker/commit"}, run: "TestCrowded"})
	add(mutation{name: "commit: a lone result never waits for the next enqueue", file: "broker/commit/grouped.go",
		from: "if !asked && w.deferResults(w.batch) {", to: "if false && w.deferResults(w.batch) {",
		pkgs: []string{"./broker/commit"}, run: "TestGroupedDefersLoneResultToNextEnqueue"})
	add(mutation{name: "commit: a result that may not wait is deferred", file: "broker/commit/grouped.go",
		from: "if t.waited || !o.MayWait() {", to: "if t.waited || !(o.MayWait() || true) {",
		pkgs: []string{"./broker/commit"}, run: "TestGroupedDefersLoneResultToNextEnqueue"})
	add(mutation{name: "commit: a result waits though no producer enqueued lately", file: "broker/commit/grouped.go",
		from: "w.cfg.Now().Sub(w.inserted) >= w.cfg.Window", to: "w.cfg.Now().Sub(w.inserted) < 0",
		pkgs: []string{"./broker/commit"}, run: "TestGroupedDefersLoneResultToNextEnqueue"})
	add(mutation{name: "commit: any write counts as a producer's enqueue", file: "broker/commit/grouped.go",
		from: "if err == nil && enqueues > 0 {", to: "if err == nil {",
		pkgs: []string{"./broker/commit"}, run: "TestGroupedDefersLoneResultToNextEnqueue"})
	add(mutation{name: "session: a result ending a batch's job may wait", file: "broker/session.go",
		from: "return o.params.Batch == 0 && !b.writing.readyMaybe.Load()", to: "return !b.writing.readyMaybe.Load()",
		pkgs: []string{"./broker"}, run: "TestResultMayWaitOnlyWhenNothingWaitsOnIt"})
	add(mutation{name: "session: a result may wait while a job waits for its slot", file: "broker/session.go",
		from: "o.params.Batch == 0 && !b.writing.readyMaybe.Load() && ", to: "o.params.Batch == 0 && ",
		pkgs: []string{"./broker"}, run: "TestResultMayWaitOnlyWhenNothingWaitsOnIt"})
	add(mutation{name: "session: a watched job's result may wait", file: "broker/session.go",
		from: "&& b.Watched() == 0 && o.Success() != nil", to: "&& o.Success() != nil",
		pkgs: []string{"./broker"}, run: "TestResultMayWaitOnlyWhenNothingWaitsOnIt"})
	add(mutation{name: "session: a failure may wait", file: "broker/session.go",
		from: "b.Watched() == 0 && o.Success() != nil", to: "b.Watched() == 0",
		pkgs: []string{"./broker"}, run: "TestResultMayWaitOnlyWhenNothingWaitsOnIt"})
	add(mutation{name: "postgres: a dependent's write that locks a pending parent publishes no ready", file: "store/postgres/deps.go",
		from: "if job.State(st) == job.StatePending {", to: "if job.State(st) == job.StateWaiting {",
		pkgs: []string{pgPkg}, run: "TestAddingADependentOfAPendingParentPublishesReady", postgres: true})
	add(mutation{name: "cluster: a dependent stored ready wakes no other broker", file: "broker/deps.go",
		from: "!r.Duplicate && r.State == job.StatePending", to: "!r.Duplicate && r.State == job.StateWaiting",
		pkgs: []string{srvPkg}, run: "TestIdleWorkerOnAnotherBrokerIsOfferedADependentOfADoneParent$", postgres: true})
	add(mutation{name: "session: a returning worker adopts a lease being handed back", file: "broker/session.go",
		from: "\tif l.storing == endingRelease {\n\t\t// Its job is being handed back", to: "\tif false {\n\t\t// Its job is being handed back",
		pkgs: []string{srvPkg}, run: "TestLeaseBeingHandedBackIsLostToAReturningWorker"})
	add(mutation{name: "watch: starts are skipped though a watch wants them", file: "broker/watch.go",
		from: "(c == changeRunning && h.running.Load() == 0)", to: "(c == changeRunning)",
		pkgs: []string{srvPkg}, run: "TestWatchSendsFinalJobsAsStored$|TestWatchReadsAJobToldOfTwice$"})
	add(mutation{name: "watch: running is not counted down as watches stop", file: "broker/watch.go",
		from: "\tif !w.finalOnly {\n\t\th.running.Add(-stopped)", to: "\tif false {\n\t\th.running.Add(-stopped)",
		pkgs: []string{"./broker"}, run: "TestStartsWakeOnlyWatchesOfEveryChange$"})
	add(mutation{name: "watch: a wait is sent the whole job", file: "server/watch.go",
		from: "slab, conv = newOutcomeSlab(len(jobs)), (*protoSlab).outcome", to: "slab, conv = newOutcomeSlab(len(jobs)), (*protoSlab).watched",
		pkgs: []string{srvPkg}, run: "TestWatchSendsFinalJobsAsStored$"})
	add(mutation{name: "watch: a wait is sent no result", file: "server/convert.go",
		from: "LastErrorType: j.LastErrorType, LastErrorMessage: j.LastErrorMessage, Result: j.Result}\n\treturn out", to: "LastErrorType: j.LastErrorType, LastErrorMessage: j.LastErrorMessage}\n\treturn out",
		pkgs: []string{srvPkg}, run: "TestWatchSendsFinalJobsAsStored$|TestWaitReturnsFinalJobsWithResults$"})
	add(mutation{name: "watch: every change wakes a gathering watcher", file: "broker/watch.go",
		from: "wake := len(w.changed) >= w.wakeAt", to: "wake := true",
		pkgs: []string{"./broker"}, run: "TestWatchWakesOnlyAtItsCount$"})
	add(mutation{name: "watch: a gathering watcher is woken one change late", file: "broker/watch.go",
		from: "wake := len(w.changed) >= w.wakeAt", to: "wake := len(w.changed) > w.wakeAt",
		pkgs: []string{srvPkg}, run: "TestWaitSendsItsLastJobsWithoutGathering$"})
	add(mutation{name: "watch: a job handed over final still counts as watched", file: "broker/watch.go",
		from: "\tdelete(h.byJob, id)\n\tdelete(h.seen, id)\n\th.watched.Add(-1)\n}", to: "\tdelete(h.byJob, id)\n\tdelete(h.seen, id)\n}",
		pkgs: []string{"./broker"}, run: "TestJobHandedFinalLeavesTheHub$"})
	add(mutation{name: "watch: a job handed over final still wants its starts", file: "broker/watch.go",
		from: "\t\tw.live--\n\t\tif !w.finalOnly {\n\t\t\th.running.Add(-1)", to: "\t\tw.live--\n\t\tif false {\n\t\t\th.running.Add(-1)",
		pkgs: []string{"./broker"}, run: "TestJobHandedFinalLeavesTheHub$"})
	add(mutation{name: "watch: a job handed over final stays in the hub", file: "broker/watch.go",
		from: "\tdelete(h.byJob, id)\n\tdelete(h.seen, id)\n\th.watched.Add(-1)\n}", to: "\tdelete(h.seen, id)\n\th.watched.Add(-1)\n}",
		pkgs: []string{"./broker"}, run: "TestJobHandedFinalLeavesTheHub$"})
	add(mutation{name: "breakers: a success of a ratio-mode breaker is counted in the write that ends its lease", file: "broker/sharedbreakers.go",
		from: "(how != permitFailed || cfg.Mode != breaker.ModeRatio && !cfg.Counts(kind))", to: "(how == permitReleased || cfg.Mode != breaker.ModeRatio && !cfg.Counts(kind))",
		pkgs: []string{"./broker"}, run: "TestSharedBreakerRatioOfSuccessesWrittenAlone$", postgres: true})
	add(mutation{name: "breakers: held successes are never stored", file: "broker/successes.go",
		from: "b.clk.AfterFunc(breakerSaveDelay, func() { b.submit(&successesOp{b: b}) })", to: "_ = b",
		pkgs: []string{srvPkg}, run: "TestClusterSuccessesAreHeldForTheirBreaker$", postgres: true})
	add(mutation{name: "breakers: a failure is counted before the successes held", file: "broker/sharedbreakers.go",
		from: "\t\t\tb.writing.successes.fold(c.typ, bb.locked[c.typ])", to: "\t\t\t_ = c",
		pkgs: []string{"./broker"}, run: "TestSharedBreakerCountsHeldSuccessesBeforeAFailure$", postgres: true})
	add(mutation{name: "breakers: a success the store refused is held", file: "broker/session.go",
		from: "if o.succeeded && o.how == permitSucceeded && o.settles == settlesSuccessLater {", to: "if o.how == permitSucceeded && o.settles == settlesSuccessLater {",
		pkgs: []string{"./broker"}, run: "TestSharedBreakerHoldsOnlyStoredSuccesses$", postgres: true})
	add(mutation{name: "breakers: held successes stored are held again", file: "broker/successes.go",
		from: "\t\tfor typ, n := range h.folding {", to: "\t\tfor typ, n := range map[string]int{} {",
		pkgs: []string{srvPkg}, run: "TestClusterBreakerSavedWithoutItsLockCountsExactly$", postgres: true})
	add(mutation{name: "breakers: a broker forgets the successes it holds when it stops", file: "broker/broker.go",
		from: "\tb.storeHeldSuccesses(context.WithoutCancel(ctx))\n", to: "",
		pkgs: []string{srvPkg}, run: "TestClusterHeldSuccessesAreStoredAtShutdown$", postgres: true})
	add(mutation{name: "codec: strings are not checked for UTF-8", file: "internal/protocodec/codec.go",
		from: "\t\t\tif !utf8.Valid(v) {", to: "\t\t\tif !utf8.Valid(v[:0]) {",
		pkgs: []string{"./internal/protocodec"}, run: "TestUnmarshalRefusesInvalidUTF8InEveryStringField$"})
	add(mutation{name: "codec: a message's messages are not checked", file: "internal/protocodec/codec.go",
		from: "\t\t\tif err := scan(v, t.nested[num], depth-1); err != nil {", to: "\t\t\tif err := error(nil); err != nil {",
		pkgs: []string{"./internal/protocodec"}, run: "TestUnmarshalRefusesInvalidUTF8InEveryStringField$|TestUnmarshalRefusesNestingProtobufRefuses$"})
	add(mutation{name: "codec: nesting has no limit", file: "internal/protocodec/codec.go",
		from: "\tif depth < 0 {\n\t\treturn errTooDeep", to: "\tif false {\n\t\treturn errTooDeep",
		pkgs: []string{"./internal/protocodec"}, run: "TestUnmarshalRefusesNestingProtobufRefuses$"})
	add(mutation{name: "codec: unmarshalling merges into what the message held", file: "internal/protocodec/codec.go",
		from: "\tb := buf.ReadOnlyData()\n\tm.Reset()\n", to: "\tb := buf.ReadOnlyData()\n",
		pkgs: []string{"./internal/protocodec"}, run: "TestUnmarshalReplaces$"})
	add(mutation{name: "codec: a field of another wire type is refused", file: "internal/protocodec/codec.go",
		from: "\t\tm.Reset()\n\t\treturn proto.Unmarshal(b, m)\n\t}\n\treturn nil", to: "\t\treturn err\n\t}\n\treturn nil",
		pkgs: []string{"./internal/protocodec"}, run: "FuzzUnmarshalAgreesWithProtobuf$"})
	add(mutation{name: "codec: a field this jobwire.v1 does not know is left to the generated code", file: "internal/protocodec/codec.go",
		from: "\t\tif kind == unknownField {\n\t\t\treturn errUnknownField\n\t\t}\n", to: "\t\tif kind == unknownField {\n\t\t\tn = protowire.ConsumeFieldValue(num, typ, b)\n\t\t\tif n < 0 {\n\t\t\t\treturn protowire.ParseError(n)\n\t\t\t}\n\t\t\tb = b[n:]\n\t\t\tcontinue\n\t\t}\n",
		pkgs: []string{"./internal/protocodec"}, run: "FuzzUnmarshalAgreesWithProtobuf$"})
	// The fronts of the ready indexes (store/postgres/front.go): a lease reads past one only
	// while no job can be ready ahead of it.
	add(mutation{name: "fronts: a breaker taken out of shut keeps the fronts", file: "store/postgres/breakers.go",
		from: "\t\tif !shut && err == nil {\n\t\t\tt.unread--", to: "\t\tif err == nil {\n\t\t\tt.unread--",
		pkgs: []string{pgPkg}, run: "TestFrontsKeptByBreakerSavesUnlessOneReopens$", postgres: true})
	add(mutation{name: "fronts: a front ages from the last lease that moved it", file: "store/postgres/front.go",
		from: "f.m[shape] = frontAt{front: frontOf(to.last), at: to.began}", to: "f.m[shape] = frontAt{front: frontOf(to.last), at: now}",
		pkgs: []string{pgPkg}, run: "TestLeasesReadPastTheirFront$", postgres: true})
	add(mutation{name: "sweep: the expired leases are read with a bitmap scan", file: "store/postgres/plan.go",
		from: `return t.plannerOff(on, "enable_bitmapscan")`, to: `return nil`,
		pkgs: []string{pgPkg}, run: "TestSweepReadsTheHeldIndex$", postgres: true})
	add(mutation{name: "pipeline: a breaker's save waits for its own round trip", file: "store/postgres/breakers.go",
		from: "\treturn t.hold(breakerSaveSQL, r.Type, r.Data, r.Shut)", to: "\t_, err := t.exec(breakerSaveSQL, r.Type, r.Data, r.Shut)\n\treturn err",
		pkgs: []string{pgPkg}, run: "TestCountedSuccessRidesTheBreakersLock$", postgres: true})
	add(mutation{name: "breakers: a breaker saved without its lock overwrites another's change", file: "store/postgres/migrations/021_breaker_save_if.up.sql",
		from: "WHERE type = breaker_type AND data = seen;", to: "WHERE type = breaker_type;",
		pkgs: []string{srvPkg}, run: "TestClusterBreakerSavedWithoutItsLockCountsExactly$", postgres: true})
	add(mutation{name: "breakers: a breaker saved without its lock counts a success not stored", file: "store/postgres/migrations/021_breaker_save_if.up.sql",
		from: "jobs.lease_token = u.seq AND jobs.state + 0 = 5)) THEN", to: "jobs.lease_token = u.seq)) THEN",
		pkgs: []string{pgPkg}, run: "TestStoreContract/BreakerSaveIf$", postgres: true})
	add(mutation{name: "breakers: every counted success locks its breaker", file: "broker/sharedbreakers.go",
		from: "\t\t\tknown, ok = b.writing.seen.take(typ, b.now)", to: "\t\t\tknown, ok = b.writing.seen.take(typ, b.now)\n\t\t\tok = false",
		pkgs: []string{srvPkg}, run: "TestClusterBreakerSavedWithoutItsLockCountsExactly$", postgres: true})
	add(mutation{name: "breakers: a breaker whose save found it changed is saved without its lock again at once", file: "broker/sharedbreakers.go",
		from: "\tuntil := now().Add(seenOffFor)", to: "\tuntil := now()",
		pkgs: []string{"./broker"}, run: "TestBreakersSeenTakesWhatCommittedOnce$"})
	add(mutation{name: "breakers: a failed batch's breakers are taken as stored", file: "broker/sharedbreakers.go",
		from: "\tif err != nil {\n\t\ts.missed(bb, now)\n\t\treturn\n\t}", to: "\tif err != nil {\n\t\ts.missed(bb, now)\n\t}",
		pkgs: []string{"./broker"}, run: "TestBreakersSeenTakesWhatCommittedOnce$"})
	add(mutation{name: "breakers: a breaker's data is taken twice", file: "broker/sharedbreakers.go",
		from: "\tseen, ok = s.data[typ]\n\tdelete(s.data, typ)", to: "\tseen, ok = s.data[typ]",
		pkgs: []string{"./broker"}, run: "TestBreakersSeenTakesWhatCommittedOnce$"})
	add(mutation{name: "paused backlog: a queue just paused is taken for no backlog", file: "broker/queues.go",
		from: "if r.paused && !was.paused {\n\t\tq.pausedBacklog = true", to: "if r.paused && !was.paused {\n\t\tq.pausedBacklog = false",
		pkgs: []string{"./broker"}, run: "TestPausedBacklogCountedEverySweep$", postgres: true})
	add(mutation{name: "paused backlog: rules read again forget the count", file: "broker/queues.go",
		from: "q.set(r.Name, old[r.Name], queueRule{", to: "q.set(r.Name, queueRule{}, queueRule{",
		pkgs: []string{"./broker"}, run: "TestQueueRulesReadAgainKeepThePausedBacklogCounted$"})
	add(mutation{name: "paused backlog: it outlasts the last pause", file: "broker/queues.go",
		from: "return q.pausedQueues > 0 && q.pausedBacklog }", to: "return q.pausedBacklog }",
		pkgs: []string{"./broker"}, run: "TestQueueRulesReadAgainKeepThePausedBacklogCounted$"})
	add(mutation{name: "rate limits: a broker does not read them again when another changes them", file: "broker/queues.go",
		from: "\treturn b.reloadRateLimits(ctx)\n}", to: "\treturn nil\n}",
		pkgs: []string{srvPkg}, run: "TestRateLimitSetReachesARunningBroker$", postgres: true})
	add(mutation{name: "paused backlog: a sweep never counts it", file: "broker/sweep.go",
		from: "\tb.countPausedBacklog()\n", to: "",
		pkgs: []string{"./broker"}, run: "TestPausedBacklogCountedEverySweep$", postgres: true})
	add(mutation{name: "paused backlog: a silent count holds the sweeps back", file: "broker/queues.go",
		from: "ctx, cancel := context.WithTimeout(b.ctx, b.cfg.SweepInterval)", to: "ctx, cancel := context.WithCancel(b.ctx)",
		pkgs: []string{"./broker"}, run: "TestSilentPausedCountHoldsNoSweepBack$"})
	add(mutation{name: "paused backlog: leases are not told of it", file: "broker/dispatch.go",
		from: "PausedBacklog: b.queues.backlog(),", to: "PausedBacklog: b.queues.pausedQueues > 0,",
		pkgs: []string{"./broker"}, run: "TestPausedBacklogCountedEverySweep$", postgres: true})
	add(mutation{name: "paused backlog: jobs are offered beside it", file: "broker/offer.go",
		from: "|| b.queues.backlog() ||", to: "||",
		pkgs: []string{"./broker"}, run: "TestPausedBacklogCountedEverySweep$", postgres: true})
	add(mutation{name: "postgres: an offer waits behind a paused queue's jobs", file: pgTx,
		from: "OR NOT EXISTS (SELECT FROM queues q WHERE q.name = h.queue AND q.paused))`", to: "OR true)`",
		pkgs: []string{pgPkg}, run: "TestStoreContract/InsertOfferedPastPausedJobs$", postgres: true})
	add(mutation{name: "postgres: an offer goes ahead of a job waiting behind many paused ones", file: pgTx,
		from: "WHERE h.k = ` + strconv.Itoa(store.PausedBacklogMin) + ` OR NOT EXISTS", to: "WHERE NOT EXISTS",
		pkgs: []string{pgPkg}, run: "TestStoreContract/InsertOfferedPastPausedJobs$", postgres: true})
	add(mutation{name: "sqlite: an offer waits behind a paused queue's jobs", file: "store/sqlite/offer.go",
		from: "WHERE NOT EXISTS (SELECT 1 FROM queues WHERE name = h.queue AND paused))", to: "WHERE 1)",
		pkgs: []string{storePkg}, run: "TestStoreContract/InsertOfferedPastPausedJobs$"})
	add(mutation{name: "sqlite: an offer goes ahead of a job waiting behind many paused ones", file: "store/sqlite/offer.go",
		from: "`)) < ` + strconv.Itoa(store.PausedBacklogMin) + offerRulesSQL", to: "`)) < 1 + ` + strconv.Itoa(store.PausedBacklogMin) + offerRulesSQL",
		pkgs: []string{storePkg}, run: "TestStoreContract/InsertOfferedPastPausedJobs$"})
	add(mutation{name: "sqlite: the paused queues' count counts every queue", file: "store/sqlite/admin.go",
		from: "\tWHERE queues.paused LIMIT ?)`", to: "\tWHERE 1 LIMIT ?)`",
		pkgs: []string{storePkg}, run: "TestStoreContract/PausedReady$"})
	add(mutation{name: "postgres: the paused queues' count counts every queue", file: "store/postgres/admin.go",
		from: "\tWHERE queues.paused LIMIT $1) AS ready`", to: "\tWHERE true LIMIT $1) AS ready`",
		pkgs: []string{pgPkg}, run: "TestStoreContract/PausedReady$", postgres: true})
	add(mutation{name: "postgres: the paused queues' count reads them by bitmap", file: "store/postgres/admin.go",
		from: "\t\tORDER BY jobs.queue, jobs.type, jobs.priority DESC, jobs.run_at, jobs.id LIMIT $1) AS r", to: "\t\tLIMIT $1) AS r",
		pkgs: []string{pgPkg}, run: "TestPausedReadyReadsThePausedQueuesEntries$", postgres: true})
	return ms
}

// result is what became of one mutation.
type result struct {
	m       mutation
	outcome string // killed, SURVIVED, or why neither
	took    time.Duration
}

func main() {
	only := flag.String("only", "", "run only the mutations whose name matches this regular expression")
	timeout := flag.Duration("timeout", 5*time.Minute, "the longest one mutation's tests may run")
	check := flag.Bool("check", false, "only check that every entry still applies (texts, packages, tests), running nothing")
	flag.Parse()
	if err := run(*only, *timeout, *check); err != nil {
		fmt.Fprintln(os.Stderr, "mutate:", err)
		os.Exit(2)
	}
}

func run(only string, timeout time.Duration, checkOnly bool) error {
	re, err := regexp.Compile(only)
	if err != nil {
		return fmt.Errorf("-only: %w", err)
	}
	// Check the whole list before changing anything.
	all := mutations()
	if err := errList(append(checkList(".", all), alternativesExist(".", all)...)); err != nil {
		return fmt.Errorf("the list no longer fits the code:\n%w", err)
	}
	if checkOnly {
		fmt.Printf("mutate: all %d mutations apply\n", len(all))
		return nil
	}
	var ms []mutation
	for _, m := range all {
		if re.MatchString(m.name) {
			ms = append(ms, m)
		}
	}
	if len(ms) == 0 {
		return fmt.Errorf("-only %q matches no mutation", only)
	}
	originals := map[string][]byte{}
	for _, m := range ms {
		if _, ok := originals[m.file]; !ok {
			if originals[m.file], err = os.ReadFile(m.file); err != nil {
				return err
			}
		}
		if m.postgres && os.Getenv("JOBWIRE_TEST_POSTGRES") == "" {
			return fmt.Errorf("mutation %q needs PostgreSQL: run it under scripts/with-postgres.sh (make mutate does), or set JOBWIRE_TEST_POSTGRES", m.name)
		}
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	// The tests must pass before any mutation, or a failure proves nothing; and they must run,
	// in every package named, or a pass proves nothing.
	began := time.Now()
	fmt.Println("mutate: running the tests unmutated first")
	for _, m := range uniqueRuns(ms) {
		o := runTests(ctx, m, timeout)
		if err := o.cleanPass(m); err != nil {
			os.Stdout.Write(o.out)
			return err
		}
	}

	var results []result
	for i, m := range ms {
		if ctx.Err() != nil {
			break
		}
		fmt.Printf("mutate: [%d/%d] %s\n", i+1, len(ms), m.name)
		start := time.Now()
		outcome, err := try(ctx, m, originals[m.file], timeout)
		if err != nil {
			return err
		}
		results = append(results, result{m: m, outcome: outcome, took: time.Since(start)})
	}
	if ctx.Err() != nil {
		return errors.New("interrupted; every file is restored")
	}
	killed := report(results, time.Since(began))
	if killed < len(results) {
		os.Exit(1)
	}
	return nil
}

// try applies m, runs its tests and restores the file, whatever happens.
func try(ctx context.Context, m mutation, original []byte, timeout time.Duration) (outcome string, err error) {
	mutated := bytes.Replace(original, []byte(m.from), []byte(m.to), 1)
	if err := os.WriteFile(m.file, mutated, 0o644); err != nil {
		return "", err
	}
	defer func() {
		if rerr := os.WriteFile(m.file, original, 0o644); rerr != nil {
			err = errors.Join(err, fmt.Errorf("restore %s: %w", m.file, rerr))
		}
	}()
	// A mutation that does not compile proves nothing about the tests: the list is wrong.
	if out, err := compiles(ctx, m); err != nil {
		os.Stdout.Write(out)
		return "DOES NOT COMPILE", nil
	}
	o := runTests(ctx, m, timeout)
	switch {
	case ctx.Err() != nil:
		return "interrupted", nil
	case o.buildFailed:
		os.Stdout.Write(o.out)
		return "DOES NOT COMPILE", nil
	case o.ran == 0:
		// A run that fails before any test ran (a crash at start, a flag error) says
		// nothing about the guard.
		os.Stdout.Write(o.out)
		return "no test ran", nil
	case o.failed:
		return "killed", nil
	}
	return "SURVIVED", nil
}

// compiles checks a mutated Python or Node.js file's syntax, so that a mutation the
// interpreter cannot load is not counted as killed by the import error; Go's build failures
// show in go test's own report.
func compiles(ctx context.Context, m mutation) ([]byte, error) {
	var cmd *exec.Cmd
	switch {
	case strings.HasSuffix(m.file, ".py"):
		cmd = exec.CommandContext(ctx, python(), "-c", "import ast, sys; ast.parse(open(sys.argv[1]).read(), sys.argv[1])", m.file)
	case strings.HasSuffix(m.file, ".js"):
		cmd = exec.CommandContext(ctx, "node", "--check", m.file)
	default:
		return nil, nil
	}
	return cmd.CombinedOutput()
}

func python() string {
	if p := os.Getenv("PYTHON"); p != "" {
		return p
	}
	return "python3"
}

// testRun is what one run of a mutation's tests showed.
type testRun struct {
	out         []byte
	err         error          // the command's
	ran         int            // tests that passed or failed (not skipped)
	failed      bool           // a test, or the run as a whole, failed
	buildFailed bool           // Go: a package did not build
	perPkg      map[string]int // Go: tests run by package
	deepest     int            // Go: the deepest level of subtests run (1: top-level tests)
}

// cleanPass reports why the unmutated run o of m's tests proves nothing, or nil: a failure, a
// package (or test file) in which no test ran, or a -run pattern whose subtest levels selected
// no subtest.
func (o testRun) cleanPass(m mutation) error {
	tests := strings.Join(m.pkgs, " ")
	if m.run != "" {
		tests += " " + m.run
	}
	switch {
	case o.failed || o.err != nil:
		return fmt.Errorf("tests %s fail without any mutation (%v)", tests, o.err)
	case o.ran == 0:
		return fmt.Errorf("tests %s: no test ran: update the list", tests)
	case m.sdk != "":
		return nil
	}
	for _, p := range m.pkgs {
		if o.perPkg[strings.TrimPrefix(p, "./")] == 0 {
			return fmt.Errorf("tests %s: no test ran in %s (all skipped or none selected): update the list", tests, p)
		}
	}
	if levels := len(splitRun(m.run)); m.run != "" && o.deepest < levels {
		return fmt.Errorf("tests %s: no subtest ran at level %d of the pattern: update the list", tests, levels)
	}
	return nil
}

// runTests runs m's tests in a process group of their own, so that an interrupt stops the test
// binaries too.
func runTests(ctx context.Context, m mutation, timeout time.Duration) testRun {
	switch m.sdk {
	case sdkPython:
		return eachFile(m, func(f string) testRun {
			// Each test file is loaded by discovery from the SDK's directory, as make test-sdks does.
			dir, file := filepath.Split(f)
			top := strings.TrimSuffix(strings.TrimSuffix(dir, "/"), "/tests")
			return command(ctx, timeout, exec.Command(python(), "-m", "unittest", "discover", "-v",
				"-s", strings.TrimSuffix(dir, "/"), "-t", top, "-p", file, "-k", m.run))
		})
	case sdkJava:
		return runJavaTests(ctx, m, timeout)
	case sdkRust:
		return runRustTests(ctx, m, timeout)
	case sdkNode:
		r := command(ctx, timeout, exec.Command("node", append([]string{"--test", "--test-reporter=tap", "--test-name-pattern=" + m.run}, m.pkgs...)...))
		r.ran, r.failed = tapCount(r.out, "pass")+tapCount(r.out, "fail"), r.failed || tapCount(r.out, "fail") > 0
		return r
	}
	args := []string{"test", "-count=1", "-json", "-timeout", timeout.String()}
	if m.run != "" {
		args = append(args, "-run", m.run)
	}
	return command(ctx, timeout, exec.Command("go", append(args, m.pkgs...)...))
}

// eachFile runs one command per test file of m, for the runners that take one file (or the
// module or crate that holds it) at a time, and adds up what they report.
func eachFile(m mutation, run func(file string) testRun) testRun {
	var o testRun
	for _, f := range m.pkgs {
		r := run(f)
		o.out = append(o.out, r.out...)
		o.err = errors.Join(o.err, r.err)
		o.ran += r.ran
		o.failed = o.failed || r.failed
		o.buildFailed = o.buildFailed || r.buildFailed
	}
	return o
}

// command runs cmd with ctx (plus a margin over timeout, for interpreters that have no
// timeout of their own) and reads its report.
func command(ctx context.Context, timeout time.Duration, cmd *exec.Cmd) testRun {
	ctx, cancel := context.WithTimeout(ctx, timeout+time.Minute)
	defer cancel()
	c := exec.CommandContext(ctx, cmd.Path, cmd.Args[1:]...)
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	c.Cancel = func() error { return syscall.Kill(-c.Process.Pid, syscall.SIGKILL) }
	out, err := c.CombinedOutput()
	r := testRun{out: out, err: err, failed: err != nil}
	switch {
	case cmd.Args[0] == "go": // go test -json
		r.readGoJSON()
	case slices.Contains(cmd.Args, "unittest"):
		// unittest -v prints "Ran N tests" and, for a run that ran none, "NO TESTS RAN".
		if m := regexp.MustCompile(`(?m)^Ran (\d+) tests?`).FindSubmatch(out); m != nil {
			r.ran, _ = strconv.Atoi(string(m[1]))
		}
		// A module that cannot be imported shows as one failing test named after it.
		r.buildFailed = bytes.Contains(out, []byte("Failed to import test module"))
	}
	return r
}

// readGoJSON reads go test -json events: which tests ran where, and whether a build failed.
func (r *testRun) readGoJSON() {
	r.perPkg = map[string]int{}
	var plain []byte
	for _, line := range bytes.Split(r.out, []byte("\n")) {
		var e struct {
			Action, Package, Test, Output, FailedBuild string
		}
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &e) != nil {
			plain = append(plain, line...)
			plain = append(plain, '\n')
			continue
		}
		switch {
		case e.Action == "build-fail" || e.FailedBuild != "":
			r.buildFailed = true
		case e.Output != "":
			plain = append(plain, e.Output...)
		case e.Test != "" && (e.Action == "pass" || e.Action == "fail"):
			r.ran++
			r.perPkg[strings.TrimPrefix(e.Package, modulePath+"/")]++
			r.deepest = max(r.deepest, strings.Count(e.Test, "/")+1)
		}
	}
	r.out = plain // the text go test would have printed, for the person reading a failure
}

// modulePath is the module's import path, the prefix go test -json gives packages.
const modulePath = "github.com/jobwire/jobwire"

// tapCount reads a TAP summary line such as "# pass 3".
func tapCount(out []byte, what string) int {
	m := regexp.MustCompile(`(?m)^# ` + what + ` (\d+)$`).FindSubmatch(out)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(string(m[1]))
	return n
}

// uniqueRuns is one mutation for each distinct set of tests.
func uniqueRuns(ms []mutation) []mutation {
	seen := map[string]bool{}
	var out []mutation
	for _, m := range ms {
		k := m.sdk + "\x00" + strings.Join(m.pkgs, " ") + "\x00" + m.run
		if !seen[k] {
			seen[k] = true
			out = append(out, m)
		}
	}
	return out
}

// report prints the table and returns how many mutations were killed.
func report(results []result, took time.Duration) int {
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "\nMUTATION\tTESTS\tRESULT\tTIME")
	killed := 0
	for _, r := range results {
		if r.outcome == "killed" {
			killed++
		}
		tests := strings.Join(r.m.pkgs, " ")
		if r.m.run != "" {
			tests += " -run " + r.m.run
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", r.m.name, tests, r.outcome, r.took.Round(100*time.Millisecond))
	}
	_ = w.Flush()
	rate := 0.0
	if len(results) > 0 {
		rate = 100 * float64(killed) / float64(len(results))
	}
	fmt.Printf("\nkilled %d of %d mutations (%.0f%%) in %s\n", killed, len(results), rate, took.Round(time.Second))
	return killed
}
