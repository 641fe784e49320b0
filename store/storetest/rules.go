package storetest

import (
	"cmp"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jobwire/jobwire/broker/dispatchrule"
	"github.com/jobwire/jobwire/store"
)

var _ = register(
	testCase{"LeaseFollowsDispatchRules", testLeaseFollowsDispatchRules},
	testCase{"OfferFollowsDispatchRules", testOfferFollowsDispatchRules},
)

// ruleWorlds is how many random states each property case sets up; ruleSeed makes them the same
// on every run, so a failure can be replayed.
const (
	ruleWorlds = 60
	ruleSeed   = 27
)

// ruleWorld is a random dispatch state stored in the database: queues paused or capped with
// some of their jobs already leased, breakers stored shut, and jobs that wait, ready or
// scheduled. Its names are its own, so the worlds of one case do not meet.
type ruleWorld struct {
	name     string
	queues   map[string]dispatchrule.Queue
	breakers map[string]dispatchrule.Breaker
	// keys are the concurrency keys' limits and held jobs. A keyed job has a priority no other
	// job of the world has, so that the fair order the keyed lease takes jobs in
	// (dispatchrule.FairOrder) is dispatch order here: these worlds check the key's limit among
	// the other rules, and the order is checked on its own (KeyedLeaseTakesKeysRoundRobin).
	keys   map[string]dispatchrule.Key
	worker dispatchrule.Worker
	jobs   []ruleJob // in dispatch order once stored
	base   int       // the world's lowest priority: every world's are above the last's (by 10)
	ranOut bool      // a lease takes a capped queue's last room and leaves its next job
	probed int       // jobs leased as probes
}

type ruleJob struct {
	id       int64
	j        dispatchrule.Job
	priority int
}

func (w *ruleWorld) String() string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "world %s: worker %+v\n", w.name, w.worker)
	for _, q := range slices.Sorted(maps.Keys(w.queues)) {
		fmt.Fprintf(&sb, "  queue %s %+v\n", q, w.queues[q])
	}
	for _, t := range slices.Sorted(maps.Keys(w.breakers)) {
		fmt.Fprintf(&sb, "  breaker %s %+v\n", t, w.breakers[t])
	}
	for _, k := range slices.Sorted(maps.Keys(w.keys)) {
		fmt.Fprintf(&sb, "  key %s %+v\n", k, w.keys[k])
	}
	for _, j := range w.jobs {
		fmt.Fprintf(&sb, "  job %d %s/%s key %q priority %d run_at %s\n", j.id, j.j.Type, j.j.Queue, j.j.Key, j.priority, j.j.RunAt.Format(time.TimeOnly))
	}
	return sb.String()
}

// newRuleWorld draws world i and stores it.
func (b *bundle) newRuleWorld(rng *rand.Rand, i int) *ruleWorld {
	b.t.Helper()
	w := &ruleWorld{name: fmt.Sprintf("w%d", i), queues: map[string]dispatchrule.Queue{},
		breakers: map[string]dispatchrule.Breaker{}, keys: map[string]dispatchrule.Key{}, base: 10 * i}
	var queues, types []string
	for k := range 3 {
		q := fmt.Sprintf("%s-q%d", w.name, k)
		queues = append(queues, q)
		w.queues[q] = dispatchrule.Queue{Paused: rng.IntN(5) == 0, Cap: []int{0, 0, 1, 2, 3, 4}[rng.IntN(6)], Held: rng.IntN(3)}
		t := fmt.Sprintf("%s-t%d", w.name, k)
		types = append(types, t)
		w.breakers[t] = []dispatchrule.Breaker{{State: dispatchrule.Closed}, {State: dispatchrule.Closed},
			{State: dispatchrule.Closed}, {State: dispatchrule.Open}, {State: dispatchrule.HalfOpen},
			{State: dispatchrule.HalfOpen, ProbeRoom: 1}, {State: dispatchrule.HalfOpen, ProbeRoom: 2}}[rng.IntN(7)]
	}
	w.worker = dispatchrule.Worker{Types: pick(rng, types, false), Free: 1 << 10}
	if rng.IntN(2) == 0 {
		w.worker.Queues = pick(rng, queues, false)
	}
	b.storeHeld(w, queues)
	b.storeKeys(rng, w)
	var ps []*store.JobInsertParams
	used := make(map[string]bool) // key and priority
	for range rng.IntN(16) {
		p := b.job(types[rng.IntN(len(types))])
		p.Queue, p.Priority = queues[rng.IntN(len(queues))], w.base+rng.IntN(3)
		p.RunAt = b.now.Add(-time.Duration(rng.IntN(5)) * time.Minute)
		if rng.IntN(8) == 0 {
			p.RunAt = b.now.Add(time.Hour)
		}
		// A keyed job takes a priority of its key's own, above the others', one job at most
		// at each (see keys).
		n := rng.IntN(3)
		if k, prio := fmt.Sprintf("%s-k%d", w.name, n), w.base+3+3*n+rng.IntN(3); w.keys[k].Limit > 0 && !used[fmt.Sprint(prio)] {
			used[fmt.Sprint(prio)] = true
			p.Priority = prio
			p.Concurrency = store.Concurrency{Key: k, Limit: w.keys[k].Limit}
		}
		ps = append(ps, p)
		w.jobs = append(w.jobs, ruleJob{j: dispatchrule.Job{Type: p.Type, Queue: p.Queue, RunAt: p.RunAt,
			Key: p.Concurrency.Key}, priority: p.Priority})
	}
	for k, id := range b.insert(ps...) {
		w.jobs[k].id = id
	}
	slices.SortFunc(w.jobs, func(x, y ruleJob) int { // dispatch order (testLeaseOrder)
		return cmp.Or(cmp.Compare(y.priority, x.priority), x.j.RunAt.Compare(y.j.RunAt), cmp.Compare(x.id, y.id))
	})
	b.storeRules(w, queues, types)
	return w
}

// storeHeld leases each queue's held jobs (of a type of their own) before any rule applies.
func (b *bundle) storeHeld(w *ruleWorld, queues []string) {
	b.t.Helper()
	for _, q := range queues {
		var ps []*store.JobInsertParams
		for range w.queues[q].Held {
			p := b.job(w.name + "-held")
			p.Queue, p.Priority = q, w.base
			ps = append(ps, p)
		}
		if len(ps) == 0 {
			continue
		}
		b.insert(ps...)
		if got := b.lease(b.leaseParams(8, w.name+"-held")); len(got) != len(ps) {
			b.t.Fatalf("%s: leased %d held jobs of queue %s, want %d", w.name, len(got), q, len(ps))
		}
	}
}

// storeKeys draws two concurrency keys (a third, k2, stays unused: its jobs have no key) and
// leases each key's held jobs, in a queue and of a type of their own.
func (b *bundle) storeKeys(rng *rand.Rand, w *ruleWorld) {
	b.t.Helper()
	for k := range 2 {
		key := fmt.Sprintf("%s-k%d", w.name, k)
		limit := 1 + rng.IntN(2)
		w.keys[key] = dispatchrule.Key{Limit: limit, Held: rng.IntN(limit + 1)}
		var ps []*store.JobInsertParams
		for range w.keys[key].Held {
			p := b.job(w.name + "-keyheld")
			p.Queue, p.Priority = w.name+"-keyheld", w.base
			p.Concurrency = store.Concurrency{Key: key, Limit: limit}
			ps = append(ps, p)
		}
		if len(ps) == 0 {
			continue
		}
		b.insert(ps...)
		p := b.leaseParams(8, w.name+"-keyheld")
		p.Keyed = true
		if got := b.lease(p); len(got) != len(ps) {
			b.t.Fatalf("%s: leased %d held jobs of key %s, want %d", w.name, len(got), key, len(ps))
		}
	}
}

// storeRules writes the queues' pauses and caps and the shut breakers.
func (b *bundle) storeRules(w *ruleWorld, queues, types []string) {
	b.write(func(tx store.Tx) error {
		for _, q := range queues {
			if err := tx.QueueSetPaused(q, true); err != nil { // creates the queue
				return err
			}
			if err := tx.QueueSetPaused(q, w.queues[q].Paused); err != nil {
				return err
			}
			if err := tx.QueueSetLimit(q, w.queues[q].Cap); err != nil {
				return err
			}
		}
		for _, t := range types {
			rec := store.BreakerRecord{Type: t, Data: []byte(`{}`), Shut: w.breakers[t].State != dispatchrule.Closed}
			if err := tx.BreakerSave(rec); err != nil {
				return err
			}
		}
		return nil
	})
}

// pick is a random subset of xs, never empty unless mayBeEmpty.
func pick(rng *rand.Rand, xs []string, mayBeEmpty bool) []string {
	for {
		var out []string
		for _, x := range xs {
			if rng.IntN(2) == 0 {
				out = append(out, x)
			}
		}
		if len(out) > 0 || mayBeEmpty {
			return out
		}
	}
}

// allowed is the jobs the rules let w's worker lease, in the order a round's grants lease them:
// first the probes of each HALF_OPEN type with probe room, type by type, then the rest, each in
// dispatch order. Each job is checked in turn, a capped queue's room and a breaker's probe room
// counted down by those taken before it. seen counts the reasons the rest were given.
func (w *ruleWorld) allowed(now time.Time, seen map[dispatchrule.Reason]int) []int64 {
	queues, breakers, keys := maps.Clone(w.queues), maps.Clone(w.breakers), maps.Clone(w.keys)
	var ids []int64
	taken := make(map[int64]bool)
	try := func(j ruleJob) dispatchrule.Reason {
		st := dispatchrule.State{Now: now, Queue: queues[j.j.Queue], Key: keys[j.j.Key], Breaker: breakers[j.j.Type],
			Workers: []dispatchrule.Worker{w.worker}}
		r := dispatchrule.Check(j.j, st)
		if r != dispatchrule.None {
			return r
		}
		ids = append(ids, j.id)
		taken[j.id] = true
		st.Queue.Held++
		queues[j.j.Queue] = st.Queue
		if j.j.Key != "" {
			st.Key.Held++
			keys[j.j.Key] = st.Key
		}
		if st.Breaker.State == dispatchrule.HalfOpen {
			st.Breaker.ProbeRoom--
			breakers[j.j.Type] = st.Breaker
		}
		return r
	}
	for _, t := range w.probeTypes() {
		for _, j := range w.jobs {
			if j.j.Type == t && try(j) == dispatchrule.None {
				w.probed++
			}
		}
	}
	for _, j := range w.jobs {
		if taken[j.id] {
			seen[dispatchrule.None]++
			continue
		}
		r := try(j)
		seen[r]++
		if r == dispatchrule.QueueAtCap && dispatchrule.QueueReason(w.queues[j.j.Queue]) == dispatchrule.None {
			w.ranOut = true // the jobs before it took its queue's room
		}
	}
	return ids
}

// probeTypes are the types w's worker serves whose breakers let probes through.
func (w *ruleWorld) probeTypes() []string {
	var ts []string
	for _, t := range w.worker.Types {
		if br := w.breakers[t]; br.State == dispatchrule.HalfOpen && dispatchrule.BreakerReason(br) == dispatchrule.None {
			ts = append(ts, t)
		}
	}
	return ts
}

// The lease statement repeats the dispatch rules in SQL: over random states, a lease under
// the rules the database holds (EnforceQueues, ExcludeShut, as brokers sharing a database ask)
// and a lease under the rules a lone broker holds in memory (the queues it may lease from,
// Caps, ExcludePaused, the types whose breakers let jobs through) take exactly the jobs
// dispatchrule.Check lets through, a capped queue's only while its room lasts.
func testLeaseFollowsDispatchRules(t *testing.T, b *bundle) {
	rng := rand.New(rand.NewPCG(ruleSeed, 1))
	seen := make(map[dispatchrule.Reason]int)
	ranOut, probed := make(map[bool]int), make(map[bool]int) // by shared
	for i := range ruleWorlds {
		w := b.newRuleWorld(rng, i)
		want := w.allowed(b.now, seen)
		shared := rng.IntN(2) == 0
		if w.ranOut {
			ranOut[shared]++
		}
		probed[shared] += w.probed
		var got []int64
		for _, p := range w.leases(b, shared) {
			got = append(got, ids(b.lease(p))...)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("leases (shared rules %t) took %v, the rules let through %v\n%s", shared, got, want, w)
		}
	}
	// The worlds must put every rule the statement repeats to the test.
	for _, r := range []dispatchrule.Reason{dispatchrule.None, dispatchrule.Scheduled, dispatchrule.QueuePaused,
		dispatchrule.QueueAtCap, dispatchrule.KeyAtLimit, dispatchrule.BreakerOpen, dispatchrule.BreakerProbing, dispatchrule.NoWorker} {
		if seen[r] == 0 {
			t.Errorf("no job of the random worlds came out %s: draw other worlds", r)
		}
	}
	if ranOut[true] == 0 || ranOut[false] == 0 {
		t.Errorf("a lease ran out of a capped queue's room in %d worlds with the database's rules and %d with a broker's own: draw other worlds",
			ranOut[true], ranOut[false])
	}
	if probed[true] == 0 || probed[false] == 0 {
		t.Errorf("%d probes were leased with the database's rules and %d with a broker's own: draw other worlds", probed[true], probed[false])
	}
}

// leases are the leases a round asks for w's worker, in order, as the planner makes them: a
// probe lease for each HALF_OPEN type with probe room, then one for the types whose breakers
// are CLOSED. With the rules in the database (shared), the store enforces pauses and caps and
// the leases but the probes leave shut breakers' types out; with a broker's own, the leases
// name the queues that let jobs through, or leave paused and full ones out, and share a map of
// the capped queues' room.
func (w *ruleWorld) leases(b *bundle, shared bool) []*store.JobLeaseParams {
	var ps []*store.JobLeaseParams
	caps := map[string]int{}
	for q, st := range w.queues {
		if st.Cap > 0 && !st.Paused {
			caps[q] = st.Room()
		}
	}
	for _, t := range w.probeTypes() {
		ps = append(ps, w.lease(b, shared, []string{t}, w.breakers[t].ProbeRoom, caps, true))
	}
	open := w.worker.Types
	if !shared {
		open = slices.DeleteFunc(slices.Clone(open), func(t string) bool { return w.breakers[t].State != dispatchrule.Closed })
	}
	if len(open) > 0 {
		ps = append(ps, w.lease(b, shared, open, 16, caps, false))
	}
	return slices.DeleteFunc(ps, func(p *store.JobLeaseParams) bool { return p == nil })
}

// lease is one lease of up to limit jobs of types, probes or not: nil when its worker serves
// no queue that lets jobs through.
func (w *ruleWorld) lease(b *bundle, shared bool, types []string, limit int, caps map[string]int, probe bool) *store.JobLeaseParams {
	p := b.leaseParams(limit, types...)
	p.Queues = w.worker.Queues
	p.Keyed = true
	if shared {
		p.EnforceQueues = true
		p.ExcludeShut = !probe
		return p
	}
	p.Caps = caps
	if len(w.worker.Queues) > 0 {
		p.Queues = slices.DeleteFunc(slices.Clone(p.Queues), func(q string) bool {
			return dispatchrule.QueueReason(w.queues[q]) != dispatchrule.None
		})
		if len(p.Queues) == 0 {
			return nil
		}
		return p
	}
	p.ExcludePaused = true
	for q, st := range w.queues {
		if dispatchrule.QueueReason(st) == dispatchrule.QueueAtCap {
			p.ExcludeQueues = append(p.ExcludeQueues, q)
		}
	}
	return p
}

// The offered insert repeats the rules in SQL too: over random states, a new job is leased by
// the write that stores it exactly when dispatchrule.MayOffer says so, given whether a ready job
// of at least its priority was stored before it.
func testOfferFollowsDispatchRules(t *testing.T, b *bundle) {
	rng := rand.New(rand.NewPCG(ruleSeed, 2))
	seen := make(map[string]int)
	for i := range ruleWorlds {
		w := b.newRuleWorld(rng, i)
		var ps []*store.JobInsertParams
		var offers []*store.JobOffer
		var js []ruleJob
		for k := range 1 + rng.IntN(3) {
			p := b.job(fmt.Sprintf("%s-t%d", w.name, rng.IntN(3)))
			// Priority w.base+9 goes ahead of every job of the world.
			p.Queue, p.Priority = fmt.Sprintf("%s-q%d", w.name, rng.IntN(3)), w.base+[]int{0, 1, 2, 9}[rng.IntN(4)]
			ps = append(ps, p)
			offers = append(offers, b.offerTo(byte(k)))
			js = append(js, ruleJob{j: dispatchrule.Job{Type: p.Type, Queue: p.Queue, RunAt: p.RunAt}, priority: p.Priority})
		}
		stored, leased := b.insertOffered(ps, offers)
		for k, j := range js {
			st := dispatchrule.State{Now: b.now, Queue: w.queues[j.j.Queue], Breaker: w.breakers[j.j.Type],
				Workers: []dispatchrule.Worker{{Types: []string{j.j.Type}, Free: 1}}}
			ahead := w.waitingAhead(b.now, j.priority)
			want := dispatchrule.MayOffer(j.j, st, ahead)
			seen[offerOutcome(j.j, st, ahead)]++
			if got := leased[k] != nil; got != want {
				t.Fatalf("offered job %d %s/%s priority %d: leased %t, the rules say %t\n%s",
					stored[k], j.j.Type, j.j.Queue, j.priority, got, want, w)
			}
		}
		// The world's jobs are left as they are: the next world's priorities are all higher,
		// so none of them waits ahead of its offers.
	}
	for _, o := range []string{"leased", "held by a rule", "behind a waiting job", "in a capped queue", "of a probing type"} {
		if seen[o] == 0 {
			t.Errorf("no offer of the random worlds was %s: draw others (%v)", o, seen)
		}
	}
}

// offerOutcome names what decides an offer of j in st: whether it is leased, or the first rule
// that keeps it PENDING, those stricter than a round's last.
func offerOutcome(j dispatchrule.Job, st dispatchrule.State, ahead bool) string {
	switch {
	case dispatchrule.Check(j, st) != dispatchrule.None:
		return "held by a rule"
	case ahead:
		return "behind a waiting job"
	case st.Queue.Cap > 0:
		return "in a capped queue"
	case st.Breaker.State != dispatchrule.Closed:
		return "of a probing type"
	}
	return "leased"
}

// waitingAhead reports whether a ready job of w, stored before, has at least priority.
func (w *ruleWorld) waitingAhead(now time.Time, priority int) bool {
	return slices.ContainsFunc(w.jobs, func(j ruleJob) bool {
		return dispatchrule.Ready(j.j, now) && j.priority >= priority
	})
}
