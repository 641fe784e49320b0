package store

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Cluster links the brokers that serve one database at the same time. A store whose database
// several brokers may serve (PostgreSQL) offers one; a broker given none (SQLite) is alone, and
// everything it decides lives in its own memory.
//
// With a Cluster, what must hold across brokers lives in the database (leases, fencing tokens,
// queue pauses and caps, circuit breakers); each broker's memory only caches it. Brokers tell
// each other of changes through events published inside a transaction and delivered after it
// commits, and maintenance that must run once (promoting scheduled jobs, expiring leases,
// retention, breaker timers) runs on the one broker that holds the leadership.
type Cluster interface {
	// BrokerID names this broker among every broker that has ever served the database: it is
	// never reused, so a record one broker left behind is never mistaken for another's.
	BrokerID() string
	// Listen calls fn with every event any broker (this one included) publishes, in commit
	// order per publishing broker, until ctx ends. After a gap in delivery (the listening
	// connection was lost and came back) it calls fn with an EventResync: events may have been
	// missed, and the receiver must look at the database afresh. Listen returns when ctx ends.
	// fn must be quick; it is called on one goroutine.
	Listen(ctx context.Context, fn func(Event))
	// Campaign competes for the leadership until ctx ends. It calls lead(true) when this broker
	// becomes the leader and lead(false) when it stops being it (its claim on the database was
	// lost, or ctx ended while it led). At most one broker holds the leadership at a time; when
	// the leader dies, another takes over within the failover time the store documents. A
	// leader whose claim is lost without its knowing (its session ended on the database side)
	// learns it within a time the store documents too, and may overlap its successor until
	// then: what a leader does must be safe when two do it at once (fenced or idempotent
	// writes), only wasteful.
	Campaign(ctx context.Context, lead func(leader bool))
}

// EventKind says what changed.
type EventKind string

const (
	// EventReady: jobs may have become ready to lease (enqueued, retried, released, promoted).
	EventReady EventKind = "ready"
	// EventQueues: a queue was paused, resumed or had its concurrency limit changed; Key is
	// the queue.
	EventQueues EventKind = "queues"
	// EventBreaker: a circuit breaker's shared state changed; Key is the job type.
	EventBreaker EventKind = "breaker"
	// EventScheduled: a job was stored SCHEDULED (delayed, or a retry waiting out its
	// backoff); Key is its run_at in Unix nanoseconds, so the leader, which promotes, wakes then.
	EventScheduled EventKind = "scheduled"
	// EventCancel: a job held under a lease was cancelled; Key is the lease, "<job id>:<token>",
	// so that the broker whose worker holds it tells the worker to stop.
	EventCancel EventKind = "cancel"
	// EventTokenRevoked: an API token was revoked; Key is its id, so that every broker stops
	// accepting it and ends the worker streams it opened.
	EventTokenRevoked EventKind = "token_revoked"
	// EventResync: events may have been lost; look at the database afresh.
	EventResync EventKind = "resync"
	// EventJob: jobs that another broker may watch changed; Key is their ids, comma-separated.
	// A broker publishes it for the jobs its own writes change (broker/watchcluster.go); a
	// store, for the waiting jobs its settling cancelled and those a requeue revived
	// (DependentsChangedNotifier), whose ids only it knows.
	EventJob EventKind = "job"
)

// JobEventIDs is the most ids one EventJob names: a notification's payload holds under
// 8000 bytes whatever their size (the PostgreSQL store's jobwire_settle_dependents splits
// its lists the same way).
const JobEventIDs = 300

// JobEvents are the EventJob events that name ids, JobEventIDs an event.
func JobEvents(ids []int64) []Event {
	var out []Event
	for part := range slices.Chunk(ids, JobEventIDs) {
		var s strings.Builder
		for i, id := range part {
			if i > 0 {
				s.WriteByte(',')
			}
			s.WriteString(strconv.FormatInt(id, 10))
		}
		out = append(out, Event{Kind: EventJob, Key: s.String()})
	}
	return out
}

// JobEventIDsOf reads the ids an EventJob (or any key of comma-separated ids) names, skipping
// what is not an id.
func JobEventIDsOf(key string) []int64 {
	var ids []int64
	for s := range strings.SplitSeq(key, ",") {
		if id, err := strconv.ParseInt(s, 10, 64); err == nil {
			ids = append(ids, id)
		}
	}
	return ids
}

// Event is one change a broker published.
type Event struct {
	Kind EventKind
	Key  string
	// From is the BrokerID of the broker that published it.
	From string
}

// BrokerRecord is one broker that has opened the database, as the database knows it.
type BrokerRecord struct {
	ID        string
	Addr      string // the address it said it listens on; empty if it gave none
	PID       int
	Host      string
	StartedAt time.Time
	// LastSeen is when it last wrote that it is alive (every election interval while it runs),
	// by the database server's clock.
	LastSeen time.Time
	// Leader: it holds the leadership now.
	Leader bool
	// Alive: it was seen within a few election intervals. A broker that stopped or died stays
	// listed, not alive, until the leader forgets it.
	Alive bool
	// Workers is how many worker streams it served when it last wrote that it is alive.
	Workers int
}

// PoolStats are the counters of a store's pool of database connections (a PostgreSQL store's),
// for sizing it (docs/deploying.md): how many connections are in use against the most it may
// open, and how often and how long a write or read waited for one.
type PoolStats struct {
	Max, InUse, Idle, Constructing int32
	// Acquires counts the connections taken from the pool; EmptyAcquires those that found none
	// idle and waited for one to be opened or given back; CanceledAcquires those whose caller
	// gave up waiting.
	Acquires, EmptyAcquires, CanceledAcquires int64
	// AcquireWait is the time all successful acquires took together.
	AcquireWait time.Duration
}
