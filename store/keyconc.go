package store

import (
	"context"
	"fmt"
	"slices"

	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/ratelimit"
)

// Concurrency per key: at most a number of jobs of one key (one customer, say) leased or
// running at once, under any broker's lease. The key and its limit are computed when the job is
// enqueued (JobInsertParams.Concurrency) and stored with it; a lease that honours keys
// (JobLeaseParams.Keyed) takes a keyed job only while its key's LEASED and RUNNING jobs in the
// database, this transaction's included, stay under the job's limit, and takes the keys' jobs
// round-robin (dispatchrule.FairOrder). A lease that does not honour keys leaves every keyed job
// out, so a broker that does not know of keys yet never overfills one.
//
// A keyed lease applies the rate limits too (JobLeaseParams.Rates, ratelimit.go): PickKeyed
// admits each candidate its key and queue have room for through the lease's rate gate, last,
// so a job held back by its rate limit spends no allowance, takes no room of its key or
// queue, and the candidates behind it of other buckets may still go. When the candidates a
// pass read were not all of them, the next pass reads again without the held buckets' jobs.

// EventConcurrency is published (Tx.Publish) when concurrency rules change or keyed jobs are
// enqueued: the other brokers read the rules again and their leases honour keys.
const EventConcurrency EventKind = "concurrency"

// Concurrency is a job's concurrency key as stored with it.
type Concurrency struct {
	Key string // "" for none
	// Limit is how many jobs of Key may be leased or running at once (at least 1 with a key).
	Limit int
	// Rule names the configured rule that set the key; "" when the producer gave it.
	Rule string
}

// ConcurrencyRule is a configured limit of running jobs per key, for the jobs of one type
// and/or queue ("" for any), whose key Key (a job/jobkey expression) takes from each job.
type ConcurrencyRule struct {
	Name       string
	Type       string
	Queue      string
	Key        string
	MaxRunning int
}

// ConcurrencyStat is how busy the keys of one rule are ("" for the keys producers gave).
type ConcurrencyStat struct {
	Rule string
	// Keys is how many keys have jobs leased, running or waiting; AtLimit how many of them
	// have as many jobs leased or running as their limit allows.
	Keys, AtLimit int
	// Held is how many of the rule's jobs are leased or running, Waiting how many are ready
	// and waiting.
	Held, Waiting int
}

// ConcurrencyTx is the writes of concurrency keys (part of Tx).
type ConcurrencyTx interface {
	// ConcurrencyRuleSave adds or replaces a rule. The jobs its earlier version keyed that
	// still wait get its new limit; jobs enqueued before it existed keep no key.
	ConcurrencyRuleSave(r ConcurrencyRule) error
	// ConcurrencyRuleDelete removes a rule, and the keys it gave the jobs still waiting, which
	// then run as jobs without a key. It reports whether the rule existed.
	ConcurrencyRuleDelete(name string) (bool, error)
}

// ConcurrencyReader is the reads of concurrency keys (part of Store).
type ConcurrencyReader interface {
	// ConcurrencyRules reads every configured rule, by name.
	ConcurrencyRules(ctx context.Context) ([]ConcurrencyRule, error)
	// ConcurrencyOfJob reads a job's key, and how many jobs of that key are leased or
	// running; ErrNotFound for no such job.
	ConcurrencyOfJob(ctx context.Context, id int64) (Concurrency, int, error)
	// ConcurrencyStats reads how busy each rule's keys are, by rule name; keys only producers
	// gave come under "".
	ConcurrencyStats(ctx context.Context) ([]ConcurrencyStat, error)
	// ConcurrencyKeyed reports whether any job that waits or runs has a key.
	ConcurrencyKeyed(ctx context.Context) (bool, error)
}

// CheckConcurrency refuses a key without a positive limit, and a limit without a key.
func CheckConcurrency(c Concurrency) error {
	switch {
	case c.Key == "" && (c.Limit != 0 || c.Rule != ""):
		return fmt.Errorf("a concurrency limit of %d without a key", c.Limit)
	case c.Key != "" && c.Limit < 1:
		return fmt.Errorf("concurrency key %q has limit %d: it must be at least 1", c.Key, c.Limit)
	}
	return nil
}

// Keyed returns the indexes of ps whose jobs have a concurrency key and were added (not
// duplicates), for a store to write their keys after inserting them; it refuses the first of
// ps whose concurrency CheckConcurrency refuses.
func Keyed(ps []*JobInsertParams, rs []JobInsertResult) ([]int, error) {
	var out []int
	for i, p := range ps {
		if p.Concurrency == (Concurrency{}) {
			continue
		}
		if err := CheckConcurrency(p.Concurrency); err != nil {
			return nil, err
		}
		if !rs[i].Duplicate {
			out = append(out, i)
		}
	}
	return out, nil
}

// KeyedCandidate is a ready job a lease that honours keys may take, as the store read it, in
// fair order (dispatchrule.FairOrder).
type KeyedCandidate struct {
	ID      int64
	Type    string
	Queue   string
	RateKey string // the job's key in keyed rate limits
	Key     string // the concurrency key, "" for none
	Limit   int    // the job's key's limit
	Held    int    // the key's jobs leased or running when read
	Size    int    // payload bytes
}

// KeyedPick is what PickKeyed chose.
type KeyedPick struct {
	IDs []int64
	// Full is a capped queue whose room ran out before a job of it that could otherwise have
	// gone: the lease reads again without it.
	Full string
	// Bytes is the payload bytes picked.
	Bytes int
	// Held is the rate limits' buckets that held a candidate back, each once: the lease reads
	// again without their jobs when the candidates were not all read.
	Held []ratelimit.Hold
}

// PickKeyed walks candidates in order and picks up to want of them: a job of a capped queue
// (caps, counted down as it picks) while the queue has room, a keyed job while its key's jobs
// held and picked stay under the job's limit, and then only if gate (nil for no rate limit)
// admits it, until the payloads reach maxBytes (less bytes already leased; no bound when
// maxBytes is 0 or less). skip marks jobs another transaction holds, which are passed over.
// The gate comes last: a job it admits is picked, and one it holds back takes nothing.
func PickKeyed(cands []KeyedCandidate, caps map[string]int, want, maxBytes, bytes int, skip func(int64) bool, gate *ratelimit.Gate) KeyedPick {
	var out KeyedPick
	picked := make(map[string]int)
	for _, c := range cands {
		if len(out.IDs) >= want || maxBytes > 0 && bytes+out.Bytes >= maxBytes {
			break
		}
		if skip != nil && skip(c.ID) {
			continue
		}
		if c.Key != "" && c.Held+picked[c.Key] >= c.Limit {
			continue
		}
		room, capped := caps[c.Queue]
		if capped && room <= 0 {
			out.Full = c.Queue
			break
		}
		if gate != nil {
			if h := gate.Admit(c.Type, c.Queue, c.RateKey); h != nil {
				out.held(*h)
				continue
			}
		}
		if capped {
			caps[c.Queue] = room - 1
		}
		if c.Key != "" {
			picked[c.Key]++
		}
		out.IDs = append(out.IDs, c.ID)
		out.Bytes += c.Size
	}
	return out
}

// held adds h to Held unless its bucket is there already.
func (p *KeyedPick) held(h ratelimit.Hold) {
	for _, o := range p.Held {
		if o.Rule.Name == h.Rule.Name && o.Key == h.Key {
			return
		}
	}
	p.Held = append(p.Held, h)
}

// MarkKeys sets the concurrency key and limit of jobs a keyed lease took from cands: the
// broker then knows which ended leases free a key's room.
func MarkKeys(jobs []*job.Job, cands []KeyedCandidate) {
	if len(jobs) == 0 {
		return
	}
	byID := make(map[int64]*KeyedCandidate, len(cands))
	for i := range cands {
		byID[cands[i].ID] = &cands[i]
	}
	for _, j := range jobs {
		if c := byID[j.ID]; c != nil {
			j.ConcurrencyKey, j.ConcurrencyLimit = c.Key, c.Limit
		}
	}
}

// KeysOf is the distinct concurrency keys of jobs, sorted.
func KeysOf(jobs []*job.Job) []string {
	var keys []string
	for _, j := range jobs {
		if j.ConcurrencyKey != "" {
			keys = append(keys, j.ConcurrencyKey)
		}
	}
	slices.Sort(keys)
	return slices.Compact(keys)
}
