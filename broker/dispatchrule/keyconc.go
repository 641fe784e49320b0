package dispatchrule

import (
	"cmp"
	"slices"
)

// Key is the state of a job's concurrency key: how many jobs of one key (one customer, say)
// may be leased or running at once, and how many are.
type Key struct {
	// Limit is the most jobs of the key that may be leased or running at once. The job that
	// waits carries it (it was computed with the key, at enqueue), so a job's own limit is the
	// one that holds it back.
	Limit int
	// Held is how many jobs of the key are leased or running now, under any broker's lease.
	Held int
}

// Room is how many more of the key's jobs may be leased now.
func (k Key) Room() int { return max(0, k.Limit-k.Held) }

// KeyReason is KeyAtLimit when j has a concurrency key whose jobs leased or running fill its
// limit, else None. A job without a key is never held back by one.
func KeyReason(j Job, k Key) Reason {
	if j.Key != "" && k.Held >= k.Limit {
		return KeyAtLimit
	}
	return None
}

// Keyed is a job that waits as the fair order reads it.
type Keyed struct {
	Key      string // "" for none
	Priority int
	// Seq is the job's place in dispatch order among jobs of equal priority (run time, then
	// id).
	Seq int
}

// FairOrder sorts waiting jobs into the order dispatch takes them when concurrency keys are
// in use: by priority first, and within one priority round-robin across keys: every key's
// first job, then every key's second, and so on, each round in dispatch order. A job without
// a key is a key of its own (its first job). One customer's backlog of a thousand jobs then
// takes one turn in each round, not the next thousand slots, so the others are not starved
// behind it. It returns each job's turn (its rank within its key and priority, from 1) in
// the order given.
func FairOrder(jobs []Keyed) (order []int, turns []int) {
	turns = make([]int, len(jobs))
	byPrio := make(map[int][]int) // job indexes in Seq order, by priority
	for i := range jobs {
		byPrio[jobs[i].Priority] = append(byPrio[jobs[i].Priority], i)
	}
	for _, is := range byPrio {
		slices.SortFunc(is, func(a, b int) int { return cmp.Compare(jobs[a].Seq, jobs[b].Seq) })
		seen := make(map[string]int)
		for _, i := range is {
			if jobs[i].Key == "" {
				turns[i] = 1
				continue
			}
			seen[jobs[i].Key]++
			turns[i] = seen[jobs[i].Key]
		}
	}
	order = make([]int, len(jobs))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int {
		return cmp.Or(cmp.Compare(jobs[b].Priority, jobs[a].Priority), cmp.Compare(turns[a], turns[b]),
			cmp.Compare(jobs[a].Seq, jobs[b].Seq))
	})
	return order, turns
}
