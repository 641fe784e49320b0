package broker

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jobwire/jobwire/store"
)

// This file keeps the audit trail: who did each operator action, what, when, to how many jobs
// and on which broker. An action that is a storage write records its event in its own
// transaction (audit), so the two commit or roll back together; one that is not (a breaker of
// a broker alone, kept in memory) records it in a write of its own right after it took effect
// (auditAfter).

// The actions the trail records.
const (
	AuditJobCancel      = "job.cancel"
	AuditJobRunNow      = "job.run_now"
	AuditJobRetryNow    = "job.retry_now"
	AuditJobDelete      = "job.delete"
	AuditJobPriority    = "job.priority"
	AuditDeadRequeue    = "dlq.requeue"
	AuditDeadPurge      = "dlq.purge"
	AuditSucceededPurge = "jobs.purge_succeeded"
	AuditQueuePause     = "queue.pause"
	AuditQueueResume    = "queue.resume"
	AuditQueueLimit     = "queue.limit"
	AuditBreakerReset   = "breaker.reset"
	AuditBreakerForce   = "breaker.force"
	AuditTokenCreate    = "token.create"
	AuditTokenRevoke    = "token.revoke"
	// AuditConcurrencySet and AuditConcurrencyRemove change the concurrency rules (keyconc.go).
	AuditConcurrencySet    = "concurrency.set"
	AuditConcurrencyRemove = "concurrency.remove"
)

// AuditActions lists every action the trail records.
var AuditActions = []string{AuditJobCancel, AuditDeadRequeue, AuditDeadPurge, AuditSucceededPurge,
	AuditQueuePause, AuditQueueResume, AuditQueueLimit, AuditBreakerReset, AuditBreakerForce,
	AuditTokenCreate, AuditTokenRevoke, AuditJobRunNow, AuditJobRetryNow, AuditJobDelete, AuditJobPriority,
	AuditScheduleAdd, AuditScheduleUpdate, AuditScheduleRemove, AuditSchedulePause, AuditScheduleResume,
	AuditScheduleTrigger, AuditScheduleBackfill, AuditConcurrencySet, AuditConcurrencyRemove}

// Anonymous is the actor name of a caller without a token (auth off).
const Anonymous = "anonymous"

// Actor is who asked for an action, as the server learned it.
type Actor struct {
	TokenID string // '' without a token
	Name    string // the token's name; Anonymous without a token
	Source  string // "api" (gRPC: the CLI and SDKs), "dashboard" or "startup"
	Peer    string // the caller's address, when known
}

type actorKey struct{}

// WithActor returns ctx carrying a, for the actions called with it to record.
func WithActor(ctx context.Context, a Actor) context.Context {
	return context.WithValue(ctx, actorKey{}, a)
}

// ActorFrom returns the actor ctx carries; without one, an anonymous actor.
func ActorFrom(ctx context.Context) Actor {
	if a, ok := ctx.Value(actorKey{}).(Actor); ok {
		return a
	}
	return Actor{Name: Anonymous}
}

// brokerID is this broker's id in its cluster; ” for a broker alone on its database.
func (b *Broker) brokerID() string { return b.mode.id() }

// audit records e, done now by ctx's actor on this broker, in tx.
func (b *Broker) audit(ctx context.Context, tx store.Tx, e *store.AuditEvent) error {
	a := ActorFrom(ctx)
	e.ID, e.At, e.BrokerID = 0, b.now(), b.brokerID()
	e.ActorID, e.ActorName, e.Source, e.Peer = a.TokenID, a.Name, a.Source, a.Peer
	return tx.AuditInsert(e)
}

// auditAfter records e in a write of its own, for an action that wrote nothing to storage and
// has taken effect. If that write fails the action stays done: the error says so.
func (b *Broker) auditAfter(ctx context.Context, e store.AuditEvent) error {
	err := b.do(ctx, "audit", func(tx store.Tx) error { return b.audit(ctx, tx, &e) })
	if err != nil {
		return fmt.Errorf("%s %s is done, but its audit event was not stored: %w", e.Action, e.Target, err)
	}
	return nil
}

// AuditToken records a token created (RevokedAt zero) or revoked, in tx, the transaction that
// stores the change: the token keeper calls it (auth.Options.Audit).
func (b *Broker) AuditToken(ctx context.Context, tx store.Tx, t store.TokenRecord) error {
	action := AuditTokenCreate
	if !t.RevokedAt.IsZero() {
		action = AuditTokenRevoke
	}
	return b.audit(ctx, tx, &store.AuditEvent{Action: action, Target: t.ID,
		Detail: fmt.Sprintf("name=%q role=%s", t.Name, t.Role)})
}

// AuditEvent is one operator action (see store.AuditEvent).
type AuditEvent struct {
	ID                               int64
	At                               time.Time
	Action                           string
	ActorID, ActorName, Source, Peer string
	BrokerID                         string
	Target, Detail                   string
	Count                            int64
	JobIDs                           []int64
}

// AuditFilter selects and pages audit events (see store.AuditListParams).
type AuditFilter struct {
	Action       string
	Actor        string // token id or name
	Since, Until time.Time
	BeforeID     int64
	Limit        int
}

// AuditEvents reads the audit events f matches, newest first.
func (b *Broker) AuditEvents(ctx context.Context, f AuditFilter) ([]AuditEvent, error) {
	evs, err := b.st.AuditList(ctx, (*store.AuditListParams)(&f))
	if err != nil {
		return nil, err
	}
	out := make([]AuditEvent, len(evs))
	for i, e := range evs {
		out[i] = AuditEvent(e)
	}
	return out, nil
}

// ApplyAuditRetention deletes the audit events older than Retention.Audit, in small batches,
// and returns how many it deleted. The retention sweep runs it with ApplyRetention.
func (b *Broker) ApplyAuditRetention(ctx context.Context) (int64, error) {
	before := b.now().Add(-b.cfg.Retention.Audit)
	var total int64
	for {
		if err := ctx.Err(); err != nil {
			return total, err
		}
		var n int
		err := b.do(ctx, "delete_audit", func(tx store.Tx) error {
			var err error
			n, err = tx.AuditDeleteBefore(before, retentionBatch)
			return err
		})
		if err != nil {
			return total, err
		}
		total += int64(n)
		if n < retentionBatch {
			return total, nil
		}
	}
}

// describeSelection words a bulk selection for an audit event's detail.
func describeSelection(sel Selection) string {
	var parts []string
	switch {
	case sel.Filter == nil:
		parts = append(parts, fmt.Sprintf("ids=%d", len(sel.IDs)))
	case *sel.Filter == (DeadFilter{}):
		parts = append(parts, "all")
	default:
		f := sel.Filter
		add := func(k, v string) {
			if v != "" {
				parts = append(parts, k+"="+v)
			}
		}
		add("queue", f.Queue)
		add("type", f.Type)
		if f.Reason != 0 {
			add("reason", f.Reason.String())
		}
		add("error_type", f.ErrorType)
		if !f.DeadAfter.IsZero() {
			add("dead_after", f.DeadAfter.Format(time.RFC3339))
		}
		if !f.DeadBefore.IsZero() {
			add("dead_before", f.DeadBefore.Format(time.RFC3339))
		}
	}
	parts = append(parts, fmt.Sprintf("limit=%d", sel.Limit))
	return strings.Join(parts, " ")
}

// describeRequeue words a requeue for an audit event's detail: its selection and what it
// changed besides.
func describeRequeue(sel Selection, rq Requeue) string {
	d := describeSelection(sel)
	if rq.Priority != nil {
		d += fmt.Sprintf(" priority=%d", *rq.Priority)
	}
	if rq.Payload != nil {
		d += fmt.Sprintf(" payload=%dB", len(rq.Payload))
	}
	if !rq.RunAt.IsZero() {
		d += " run_at=" + rq.RunAt.UTC().Format(time.RFC3339)
	}
	return d
}
