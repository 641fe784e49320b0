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
	// Held is how many jobs of its key are leased or running; Served when its key last had a
	// job leased (0: never). Both are the key's, the same for each of its jobs.
	Held   int
	Served int64
}

// FairOrder sorts waiting jobs into the order dispatch takes them when concurrency keys are
// in use: by priority first, and within one priority by turn, the job's place among its key's
// waiting jobs (from 1) plus the key's jobs already running, so that keys take turns and the
// key with the fewest running goes first; among equal turns, the key served longest ago goes
// first (Served), then dispatch order. A job without a key is a key of its own, never served.
// One customer's backlog of a thousand jobs then takes one turn in each round, not the next
// thousand slots, so the others are not starved behind it; and a slot that frees goes to the
// key that waited longest for one, not to the key with the oldest jobs. It returns the order
// (indexes into jobs) and each job's turn.
func FairOrder(jobs []Keyed) (order []int, turns []int) {
	turns = make([]int, len(jobs))
	byPrio := make(map[int][]int) // job indexes by priority
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
			turns[i] = seen[jobs[i].Key] + jobs[i].Held
		}
	}
	served := func(i int) int64 {
		if jobs[i].Key == "" {
			return 0
		}
		return jobs[i].Served
	}
	order = make([]int, len(jobs))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int {
		return cmp.Or(cmp.Compare(jobs[b].Priority, jobs[a].Priority), cmp.Compare(turns[a], turns[b]),
			cmp.Compare(served(a), served(b)), cmp.Compare(jobs[a].Seq, jobs[b].Seq))
	})
	return order, turns
}
