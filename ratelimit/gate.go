package ratelimit

import (
	"cmp"
	"slices"
	"time"
)

// Rule is a named limit and the jobs it counts: those of Type (any when empty) in Queue (any
// when empty). With Key set (a job/jobkey expression), each key's jobs are counted apart, in a
// bucket of their own: one customer's backlog then cannot use up every other's allowance.
type Rule struct {
	Name  string
	Type  string
	Queue string
	Key   string
	Limit
}

// Matches reports whether r counts the jobs of typ in queue.
func (r *Rule) Matches(typ, queue string) bool {
	return (r.Type == "" || r.Type == typ) && (r.Queue == "" || r.Queue == queue)
}

// BucketOf is the bucket of r a job with rate key key counts in: the key's own when r is keyed,
// else r's one bucket ("").
func (r *Rule) BucketOf(key string) BucketKey {
	if r.Key == "" {
		return BucketKey{Name: r.Name}
	}
	return BucketKey{Name: r.Name, Key: key}
}

// Overlap reports whether some job could match both a and b.
func Overlap(a, b *Rule) bool {
	return (a.Type == "" || b.Type == "" || a.Type == b.Type) && (a.Queue == "" || b.Queue == "" || a.Queue == b.Queue)
}

// KeysClash reports whether a and b are keyed limits by different keys that can count the same
// job: they cannot both be set, since a job has one rate key.
func KeysClash(a, b *Rule) bool {
	return a.Key != "" && b.Key != "" && a.Key != b.Key && Overlap(a, b)
}

// BucketKey names one bucket: a rule's, and within a keyed rule, a key's.
type BucketKey struct{ Name, Key string }

// Hold says which bucket holds a job back, and until when.
type Hold struct {
	Rule  *Rule
	Key   string
	Until time.Time
}

// Gate applies rules to the jobs of one dispatch round, in dispatch order: a job may start when
// every rule that matches it has allowance in the job's bucket, and starting takes one from
// each. It is the rule the stores' leases run, with the buckets they read and write back; it
// does no I/O.
type Gate struct {
	Rules   []Rule
	Now     time.Time
	buckets map[BucketKey]Bucket
	changed map[BucketKey]bool
	next    time.Time
}

// NewGate is a gate over rules at now, with no bucket known yet (Set them before Admit).
func NewGate(rules []Rule, now time.Time) *Gate {
	return &Gate{Rules: rules, Now: now, buckets: map[BucketKey]Bucket{}, changed: map[BucketKey]bool{}}
}

// Any reports whether some rule matches typ in queue.
func (g *Gate) Any(typ, queue string) bool {
	return slices.ContainsFunc(g.Rules, func(r Rule) bool { return r.Matches(typ, queue) })
}

// Needs lists the buckets a job of typ in queue with rate key key counts in that the gate does
// not know yet.
func (g *Gate) Needs(typ, queue, key string) []BucketKey {
	var out []BucketKey
	for i := range g.Rules {
		r := &g.Rules[i]
		if !r.Matches(typ, queue) {
			continue
		}
		k := r.BucketOf(key)
		if _, ok := g.buckets[k]; !ok {
			out = append(out, k)
		}
	}
	return out
}

// Set makes b the state of bucket k, as read (a bucket never stored is the zero Bucket).
func (g *Gate) Set(k BucketKey, b Bucket) { g.buckets[k] = b }

// Check is the first rule that holds back a job of typ in queue with rate key key, and until
// when; nil when every rule lets it through. It takes nothing.
func (g *Gate) Check(typ, queue, key string) *Hold {
	for i := range g.Rules {
		r := &g.Rules[i]
		if !r.Matches(typ, queue) {
			continue
		}
		k := r.BucketOf(key)
		b := g.buckets[k]
		if r.Allowance(b, g.Now) < 1 {
			return &Hold{Rule: r, Key: k.Key, Until: r.NextAt(b, g.Now)}
		}
	}
	return nil
}

// Admit lets a job of typ in queue with rate key key start, taking one from each of its
// buckets, or returns the hold that keeps it back (taking nothing).
func (g *Gate) Admit(typ, queue, key string) *Hold {
	if h := g.Check(typ, queue, key); h != nil {
		if g.next.IsZero() || h.Until.Before(g.next) {
			g.next = h.Until
		}
		return h
	}
	for i := range g.Rules {
		r := &g.Rules[i]
		if !r.Matches(typ, queue) {
			continue
		}
		k := r.BucketOf(key)
		g.buckets[k], _ = r.Take(g.buckets[k], g.Now)
		g.changed[k] = true
	}
	return nil
}

// Changed lists the buckets Admit took from, with their new state, in name and key order: the
// rows a store writes back.
func (g *Gate) Changed() []BucketState {
	out := make([]BucketState, 0, len(g.changed))
	for k := range g.changed {
		out = append(out, BucketState{BucketKey: k, Bucket: g.buckets[k]})
	}
	slices.SortFunc(out, func(a, b BucketState) int {
		return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(a.Key, b.Key))
	})
	return out
}

// NextAt is the earliest moment a job Admit held back may start (zero when none was held).
func (g *Gate) NextAt() time.Time { return g.next }

// BucketState is a bucket with its name.
type BucketState struct {
	BucketKey
	Bucket
}
