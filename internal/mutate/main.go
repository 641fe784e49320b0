// Command mutate checks that the tests guard what the broker's promises rest on: it applies
// deliberate one-line bugs (mutations) to those guards, one at a time, runs the tests that
// should notice, and expects them to fail. It prints a table of which mutations the tests
// killed and which survived, and exits with status 1 if any survived.
//
// Run it from the repository root with `make mutate` (or `go run ./internal/mutate`); -only
// takes a regular expression over mutation names. The source file is restored after each
// mutation, also when the run is interrupted. A mutation whose text is not found exactly once
// stops the run before anything is changed, so the list cannot rot unnoticed.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"regexp"
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
	pkgs     []string // the packages whose tests must kill it
	run      string   // their -run pattern
}

const (
	fenced   = "TestStoreContract/FencedWrites"
	matrix   = "TestStorageFaultMatrix"
	restart  = "TestStaleTokensAfterRestart"
	txFile   = "store/sqlite/tx.go"
	storePkg = "./store/sqlite"
	srvPkg   = "./server"
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

func mutations() []mutation {
	var ms []mutation
	add := func(m ...mutation) { ms = append(ms, m...) }

	// Attempt counting: only a start spends an attempt, and every attempt is numbered once.
	add(mutation{name: "attempts: a start does not count the attempt", file: txFile,
		from: "SET state = 4, attempts = attempts + 1,", to: "SET state = 4, attempts = attempts,",
		pkgs: []string{srvPkg}, run: matrix + "/start"})
	add(mutation{name: "attempts: an assignment numbers the attempt one too high", file: "broker/dispatch.go",
		from: "job: &kept, attempt: j.Attempts + 1,", to: "job: &kept, attempt: j.Attempts + 2,",
		pkgs: []string{srvPkg}, run: "TestSuccess$"})
	add(mutation{name: "attempts: a lease rebuilt from storage counts its attempt again", file: "broker/session.go",
		from: "l.started, l.startedAt, l.attempt = true, j.StartedAt, j.Attempts\n",
		to:   "l.started, l.startedAt, l.attempt = true, j.StartedAt, j.Attempts+1\n",
		pkgs: []string{srvPkg}, run: restart})
	add(mutation{name: "attempts: an expired lease is recorded as a new attempt", file: "broker/sweep.go",
		from: "a := job.Attempt{Number: j.Attempts,", to: "a := job.Attempt{Number: j.Attempts + 1,",
		pkgs: []string{srvPkg}, run: matrix + "/lease_expiry"})

	// Fencing in SQL: the database refuses any token but the current one.
	add(sqlFence("JobStart", "lease_token = ? AND lease_secret = ? AND state = 3`,\n\t\tnanos(p.Now)")...)
	add(sqlFence("JobFinish (success)", "lease_token = ? AND lease_secret = ? AND state IN (3, 4)`,\n\t\t\ta.Number")...)
	add(sqlFence("JobFinish (failure)", "lease_token = ? AND lease_secret = ? AND state IN (3, 4) RETURNING attempt_base")...)
	add(sqlFence("JobRelease", "lease_token = ? AND lease_secret = ? AND state = 3`, ref.JobID")...)
	add(sqlFence("JobExtendLeases", "lease_token = ? AND lease_secret = ? AND state IN (3, 4)`,\n\t\t\tnanos(until)")...)
	add(sqlFence("JobGetHeld", "FROM jobs WHERE id = ? AND lease_token = ? AND lease_secret = ? AND state IN (3, 4)`,")...)
	add(sqlFence("JobSucceedMany", "jobs.lease_token = f.value ->> 1")...)

	// Fencing in memory: the broker's lease table refuses any token but the current one.
	add(mutation{name: "fencing in memory: any token of a held job is current", file: "broker/session.go",
		from: "if l == nil || l.ref.Token != ref.Token {", to: "if l == nil {",
		pkgs: []string{srvPkg}, run: restart + "|TestStaleFencingTokenRefused"})

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
	add(mutation{name: "rerun: a stored release is stale", file: txFile,
		from: "st == job.StatePending, err", to: "st == job.StateLeased, err",
		pkgs: []string{storePkg}, run: fenced})
	add(mutation{name: "rerun: another attempt's effect counts as this one's", file: txFile,
		from: "token == ref.Token && n == attempts && st == state", to: "token == ref.Token && n >= 0 && st == state",
		pkgs: []string{storePkg}, run: "TestStoreContract/JobStart$"})
	add(mutation{name: "rerun: a newer token's effect counts as this one's", file: txFile,
		from: "token == ref.Token && n == attempts && st == state", to: "token.Seq <= ref.Token.Seq && n == attempts && st == state",
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
		from: "if b.gen != p.Generation {", to: "if false {",
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
	add(mutation{name: "unreachable: the writer writes an enqueue its caller withdrew", file: "broker/reach.go",
		from: "return o.state.v.CompareAndSwap(opQueued, opTaken) || o.state.v.Load() == opTaken", to: "return true",
		pkgs: []string{"./broker"}, run: "TestSilentDatabaseWithdrawsQueuedEnqueues"})
	add(mutation{name: "unreachable: a queued enqueue is said to be maybe applied", file: "broker/reach.go",
		from: "func (o *op) withdraw() bool { return o.state.v.CompareAndSwap(opQueued, opWithdrawn) }",
		to:   "func (o *op) withdraw() bool { return false }",
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
	return ms
}

// result is what became of one mutation.
type result struct {
	m       mutation
	outcome string // killed, SURVIVED, or an error
	took    time.Duration
}

func main() {
	only := flag.String("only", "", "run only the mutations whose name matches this regular expression")
	timeout := flag.Duration("timeout", 5*time.Minute, "the longest one mutation's tests may run")
	flag.Parse()
	if err := run(*only, *timeout); err != nil {
		fmt.Fprintln(os.Stderr, "mutate:", err)
		os.Exit(2)
	}
}

func run(only string, timeout time.Duration) error {
	re, err := regexp.Compile(only)
	if err != nil {
		return fmt.Errorf("-only: %w", err)
	}
	var ms []mutation
	for _, m := range mutations() {
		if re.MatchString(m.name) {
			ms = append(ms, m)
		}
	}
	// Check the whole list before changing anything.
	originals := map[string][]byte{}
	for _, m := range ms {
		src, ok := originals[m.file]
		if !ok {
			if src, err = os.ReadFile(m.file); err != nil {
				return err
			}
			originals[m.file] = src
		}
		if n := bytes.Count(src, []byte(m.from)); n != 1 {
			return fmt.Errorf("mutation %q: its text is in %s %d times, want exactly once: update the list", m.name, m.file, n)
		}
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	// The tests must pass before any mutation, or a failure proves nothing.
	fmt.Println("mutate: running the tests unmutated first")
	for _, m := range uniqueRuns(ms) {
		out, err := goTest(ctx, m, timeout)
		if err != nil {
			os.Stdout.Write(out)
			return fmt.Errorf("tests %s -run %q fail without any mutation", strings.Join(m.pkgs, " "), m.run)
		}
		if bytes.Contains(out, []byte("[no tests to run]")) {
			return fmt.Errorf("tests %s -run %q: a package runs no test: update the list", strings.Join(m.pkgs, " "), m.run)
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
	killed := report(results)
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
	out, terr := goTest(ctx, m, timeout)
	switch {
	case ctx.Err() != nil:
		return "interrupted", nil
	case terr == nil:
		return "SURVIVED", nil
	case bytes.Contains(out, []byte("[build failed]")) || bytes.Contains(out, []byte("[setup failed]")):
		os.Stdout.Write(out)
		return "", fmt.Errorf("mutation %q does not compile: fix the list", m.name)
	}
	return "killed", nil
}

// goTest runs m's tests in a process group of their own, so that an interrupt stops the test
// binaries too.
func goTest(ctx context.Context, m mutation, timeout time.Duration) ([]byte, error) {
	args := []string{"test", "-count=1", "-timeout", timeout.String()}
	if m.run != "" {
		args = append(args, "-run", m.run)
	}
	cmd := exec.CommandContext(ctx, "go", append(args, m.pkgs...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	return cmd.CombinedOutput()
}

// uniqueRuns is one mutation for each distinct set of tests.
func uniqueRuns(ms []mutation) []mutation {
	seen := map[string]bool{}
	var out []mutation
	for _, m := range ms {
		k := strings.Join(m.pkgs, " ") + "\x00" + m.run
		if !seen[k] {
			seen[k] = true
			out = append(out, m)
		}
	}
	return out
}

// report prints the table and returns how many mutations were killed.
func report(results []result) int {
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
	fmt.Printf("\nkilled %d of %d mutations (%.0f%%)\n", killed, len(results), rate)
	return killed
}
