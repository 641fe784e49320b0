package broker

import (
	"github.com/jobwire/jobwire/job/unique"
	"github.com/jobwire/jobwire/store"
)

// Unique jobs. The broker only computes a job's unique key as it is enqueued (job/unique
// decides what goes into it); the store keeps one job per key among the jobs in their key's
// states, with a unique index, so the rule holds across every broker sharing the database, and
// answers an insert whose key is held with the holder (store.JobInsertResult.Unique). A job
// with a unique key is inserted alone, as one with an idempotency key is, never with others in
// one statement nor offered to a worker by its insert (enqueuer.go, offer.go).

// setUniqueKey computes p's unique key under o (nil: none); a period is picked by the job's
// run time, p.RunAt, which withDefaults resolved (never before now).
func setUniqueKey(p *store.JobInsertParams, o *unique.Options) {
	if o == nil {
		return
	}
	key, mask := o.KeyOf(unique.Source{Type: p.Type, Queue: p.Queue, Payload: p.Payload,
		Metadata: p.Metadata, At: p.RunAt})
	p.UniqueKey, p.UniqueStates = key, int(mask)
}
