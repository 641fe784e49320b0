package store

import "time"

// AuditEvent is one operator action the broker did: who asked, what, when, on which broker and
// what it touched. Events are written in the transaction of the action they record, where the
// action is a storage write, so that neither is ever stored without the other.
type AuditEvent struct {
	ID int64 // given by the store, rising in the order events are stored
	At time.Time
	// Action names what was done, as broker.AuditActions lists them (queue.pause, dlq.purge...).
	Action string
	// ActorID is the id of the token that asked ('' when auth is off); ActorName is its name,
	// or "anonymous" when auth is off.
	ActorID   string
	ActorName string
	// Source is how the request came: "api" (gRPC, the CLI and SDKs), "dashboard" or "startup".
	Source string
	// Peer is the caller's network address, when known.
	Peer string
	// BrokerID is the broker that did it ('' on a broker alone on its database).
	BrokerID string
	// Target is what the action was on: a queue, a job type, a token id, a job id; '' for a
	// selection of jobs.
	Target string
	// Detail says the rest of what was asked: a selection's filter, a breaker's new state, a
	// queue's new limit.
	Detail string
	// Count is how many jobs the action changed.
	Count int64
	// JobIDs are the first MaxAuditJobIDs of the jobs it changed, when it named them.
	JobIDs []int64
}

// MaxAuditJobIDs bounds the job ids one audit event keeps; Count says how many there were.
const MaxAuditJobIDs = 100

// AuditListParams filter and page the audit trail. Zero fields match any.
type AuditListParams struct {
	Action string
	// Actor matches an event's ActorID or ActorName.
	Actor string
	Since time.Time // At >= Since
	Until time.Time // At < Until
	// BeforeID pages: only events with a lower ID (0: from the newest).
	BeforeID int64
	Limit    int
}

// Conds calls add with each condition p sets, as a column with its comparison and the value to
// compare with, in a fixed order, so both stores filter the trail by the same rules. The actor
// condition compares two columns with one value: add gets it once, as "actor".
func (p *AuditListParams) Conds(add func(cond string, v any)) {
	if p.Action != "" {
		add("action =", p.Action)
	}
	if p.Actor != "" {
		add("actor", p.Actor)
	}
	if !p.Since.IsZero() {
		add("at >=", p.Since.UnixNano())
	}
	if !p.Until.IsZero() {
		add("at <", p.Until.UnixNano())
	}
	if p.BeforeID > 0 {
		add("id <", p.BeforeID)
	}
}
