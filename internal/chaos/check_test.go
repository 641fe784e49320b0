package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobwire/jobwire/client"
	jobwirev1 "github.com/jobwire/jobwire/gen/jobwire/v1"
	"github.com/jobwire/jobwire/job"
)

// jobRow is a job as the database holds it, with its attempt history.
type jobRow struct {
	id          int64
	typ         string
	state       job.State
	attempts    int
	maxAttempts int
	dead        job.DeadReason
	token       string // the last lease's token in wire form, "" if never leased
	payload     payload
	numbers     []int32 // attempt rows, by number
	outcomes    []int16
	kinds       []int16
}

// loadJobs reads the jobs with the given ids and their attempt rows.
func loadJobs(ctx context.Context, db *pgx.Conn, ids []int64) (map[int64]*jobRow, error) {
	rows, err := db.Query(ctx, `SELECT j.id, j.type, j.state, j.attempts, j.max_attempts, j.dead_reason,
		CASE WHEN j.lease_token > 0 THEN j.lease_token::text || '.' || encode(j.lease_secret, 'hex') ELSE '' END,
		j.payload,
		coalesce(array_agg(a.number ORDER BY a.number) FILTER (WHERE a.job_id IS NOT NULL), '{}'),
		coalesce(array_agg(a.outcome ORDER BY a.number) FILTER (WHERE a.job_id IS NOT NULL), '{}'),
		coalesce(array_agg(a.failure_kind ORDER BY a.number) FILTER (WHERE a.job_id IS NOT NULL), '{}')
		FROM jobs j LEFT JOIN attempts a ON a.job_id = j.id
		WHERE j.id = ANY($1) GROUP BY j.id`, ids)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := make(map[int64]*jobRow, len(ids))
	for rows.Next() {
		var r jobRow
		var state, dead int16
		var data []byte
		if err := rows.Scan(&r.id, &r.typ, &state, &r.attempts, &r.maxAttempts, &dead, &r.token, &data,
			&r.numbers, &r.outcomes, &r.kinds); err != nil {
			return nil, err
		}
		r.state, r.dead = job.State(state), job.DeadReason(dead)
		if err := json.Unmarshal(data, &r.payload); err != nil {
			return nil, fmt.Errorf("job %d: payload %q: %w", r.id, data, err)
		}
		out[r.id] = &r
	}
	return out, rows.Err()
}

// unfinished counts the jobs among ids that are not in a final state.
func unfinished(ctx context.Context, db *pgx.Conn, ids []int64) (int, error) {
	var n int
	err := db.QueryRow(ctx, `SELECT count(*) FROM jobs WHERE id = ANY($1) AND state NOT IN (5, 6, 7)`, ids).Scan(&n)
	return n, err
}

// tally counts how the jobs ended, for the test's log.
type tally struct {
	succeeded, dead, unlucky, leaseExpired, staleRuns int
	acked                                             int // ResultAcks the workers received
}

// check returns every broken promise among the jobs: each must be final, its attempt count
// must match its attempt rows, each row must be what its handler did, a success must be the
// one of the job's last lease, and no success under another lease may have been acknowledged.
func check(jobs map[int64]*jobRow, ids []int64, l *ledger) ([]string, tally) {
	var bad []string
	var tl tally
	fail := func(r *jobRow, format string, args ...any) {
		bad = append(bad, fmt.Sprintf("job %d (%s %s, %s, attempts %d of %d, rows %v): ", r.id, r.payload.Do, r.typ, r.state,
			r.attempts, r.maxAttempts, describeRows(r))+fmt.Sprintf(format, args...))
	}
	for _, id := range ids {
		r, ok := jobs[id]
		if !ok {
			bad = append(bad, fmt.Sprintf("job %d was acknowledged but is not in the database", id))
			continue
		}
		p := r.payload
		if !r.state.Final() {
			fail(r, "not finished")
			continue
		}
		for i, n := range r.numbers {
			if int(n) != i+1 {
				fail(r, "attempt rows are not numbered 1..%d", len(r.numbers))
				break
			}
		}
		want := len(r.numbers)
		if r.state == job.StateSucceeded {
			want++ // the successful attempt lives on the job row
		}
		if r.attempts != want {
			fail(r, "attempts is %d but the history holds %d attempts", r.attempts, want)
		}
		if r.attempts > r.maxAttempts {
			fail(r, "more attempts than max_attempts")
		}
		failed := 0
		for i, o := range r.outcomes {
			n := int(r.numbers[i])
			switch job.Outcome(o) {
			case job.OutcomeFailed:
				failed++
				if !p.failsAt(n) {
					fail(r, "attempt %d is recorded FAILED, but its handler succeeds at attempt %d", n, n)
				}
				wantKind := job.KindTransient
				if p.Do == fatal {
					wantKind = job.KindFatal
				}
				if job.FailureKind(r.kinds[i]) != wantKind {
					fail(r, "attempt %d failed as %s, want %s", n, job.FailureKind(r.kinds[i]), wantKind)
				}
			case job.OutcomeLeaseExpired:
				tl.leaseExpired++
			default:
				fail(r, "attempt %d has outcome %s, which nothing in this test causes", n, job.Outcome(o))
			}
		}
		last := job.Outcome(0)
		if len(r.outcomes) > 0 {
			last = job.Outcome(r.outcomes[len(r.outcomes)-1])
		}

		l.mu.Lock()
		runs, acks := l.runs[id], l.acks[id]
		l.mu.Unlock()
		tl.acked += len(acks)
		for _, a := range acks {
			if a.decision == jobwirev1.Decision_DECISION_SUCCEEDED && (r.state != job.StateSucceeded || a.token != r.token) {
				fail(r, "a success under lease %s was acknowledged SUCCEEDED, but the job's last lease is %s", a.token, r.token)
			}
		}
		for _, rn := range runs {
			if rn.ok && rn.token != r.token {
				tl.staleRuns++
			}
		}

		switch r.state {
		case job.StateSucceeded:
			tl.succeeded++
			if p.failsAt(r.attempts) {
				fail(r, "SUCCEEDED at attempt %d, where its handler fails", r.attempts)
			}
			if !slices.ContainsFunc(runs, func(rn run) bool { return rn.ok && rn.token == r.token && rn.attempt == r.attempts }) {
				fail(r, "SUCCEEDED under lease %s at attempt %d, but no handler succeeded under that lease at that attempt (runs %v)",
					r.token, r.attempts, runs)
			}
		case job.StateDead:
			tl.dead++
			switch {
			case p.Do == fatal && r.dead == job.DeadFatal:
				if failed != 1 || last != job.OutcomeFailed {
					fail(r, "a fatal failure must end the job at its first failed attempt")
				}
			case r.dead == job.DeadMaxAttemptsExhausted && last == job.OutcomeFailed,
				r.dead == job.DeadLeaseExpired && last == job.OutcomeLeaseExpired:
				if r.attempts != r.maxAttempts {
					fail(r, "dead of %s with attempts left", r.dead)
				}
				if p.Do != transient {
					tl.unlucky++ // every attempt it had was lost with a broker or failed by design
				}
				if p.Do == fatal && failed > 0 {
					fail(r, "its fatal failure should have ended it at once")
				}
			default:
				fail(r, "dead of %s, last attempt %s: not how a %s job ends", r.dead, last, p.Do)
			}
		default:
			fail(r, "final state %s, which nothing in this test causes", r.state)
		}
	}
	if tl.succeeded > 0 && tl.acked == 0 {
		bad = append(bad, "no worker recorded a ResultAck: nothing checked that a success under a stale lease was refused")
	}
	return bad, tl
}

func describeRows(r *jobRow) string {
	parts := make([]string, len(r.outcomes))
	for i, o := range r.outcomes {
		parts[i] = fmt.Sprintf("%d:%s", r.numbers[i], job.Outcome(o))
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// breakerView is one broker's view of the breakers: type → state and generation.
type breakerView map[string]string

// readBreakers lists the breakers on one broker, failing on a type listed twice.
func readBreakers(ctx context.Context, c *client.Client) (breakerView, error) {
	bs, err := c.ListBreakers(ctx)
	if err != nil {
		return nil, err
	}
	v := breakerView{}
	for _, b := range bs {
		if _, dup := v[b.Type]; dup {
			return nil, fmt.Errorf("breaker %s listed twice", b.Type)
		}
		v[b.Type] = fmt.Sprintf("%s generation %d", b.State, b.Generation)
	}
	return v, nil
}

// agreeOnBreakers waits until every broker lists the same breakers, each in the same state
// and generation, and returns that view; a breaker may move (OPEN to HALF_OPEN on a timer)
// between two brokers' answers, so disagreement is only final at the deadline.
func agreeOnBreakers(ctx context.Context, clients map[int]*client.Client, within time.Duration) (breakerView, error) {
	deadline := time.Now().Add(within)
	for {
		views := map[int]breakerView{}
		var first breakerView
		agree := true
		var err error
		for i, c := range clients {
			v, e := readBreakers(ctx, c)
			if e != nil {
				err = fmt.Errorf("broker %d: %w", i, e)
				agree = false
				break
			}
			views[i] = v
			if first == nil {
				first = v
			} else if !sameView(first, v) {
				agree = false
			}
		}
		if agree {
			return first, nil
		}
		if time.Now().After(deadline) {
			if err != nil {
				return nil, err
			}
			return nil, fmt.Errorf("brokers disagree on the breakers: %s", describeViews(views))
		}
		select {
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func sameView(a, b breakerView) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func describeViews(views map[int]breakerView) string {
	var idx []int
	for i := range views {
		idx = append(idx, i)
	}
	sort.Ints(idx)
	var b strings.Builder
	for _, i := range idx {
		fmt.Fprintf(&b, "\n  broker %d: %v", i, views[i])
	}
	return b.String()
}
