package broker

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jobwire/jobwire/broker/dispatchrule"
	"github.com/jobwire/jobwire/internal/service"
	"github.com/jobwire/jobwire/job"
	"github.com/jobwire/jobwire/job/jobkey"
	"github.com/jobwire/jobwire/store"
)

// Concurrency per key: at most MaxRunning jobs of one key leased or running at once, the key
// taken from each job by a configured rule (ConcurrencyRule: "one running sync per customer")
// or given by the producer (JobSpec.ConcurrencyKey). The key is computed once, at enqueue, and
// stored with the job; the store enforces the limit in the lease's own statements, counting
// every broker's leases (store/keyconc.go), and takes keys round-robin
// (dispatchrule.FairOrder), so one key's backlog does not starve the others. A job held back
// waits PENDING and spends no attempt.
//
// The broker's part is small: it computes keys at enqueue, tells its leases to honour keys
// while any may exist (keyLimits.active: a lease that does not leaves keyed jobs out, so the
// jobs without keys keep the lease statements they had), keeps planning rounds while keyed
// jobs may wait for a key's slot, and explains a held job (WhyPending).

// ConcurrencyRule is a limit of running jobs per key for the jobs of one type and/or queue.
type ConcurrencyRule struct {
	// Name names the rule; it prefixes the keys it gives ("NAME:VALUE").
	Name string
	// Type and Queue choose the jobs the rule keys ("" for any). The first rule, by name,
	// that matches a job and finds its key gives it.
	Type, Queue string
	// Key is the key expression (job/jobkey): "metadata.customer", "payload.customer_id".
	Key string
	// MaxRunning is how many jobs of one key may be leased or running at once.
	MaxRunning int
}

// ConcurrencyInfo is a rule with how busy its keys are now.
type ConcurrencyInfo struct {
	ConcurrencyRule
	store.ConcurrencyStat
}

// ErrBadConcurrencyRule is wrapped by the errors of a rule or a key that cannot be used.
var ErrBadConcurrencyRule = errors.New("invalid concurrency rule")

// MaxConcurrencyRules bounds how many rules may be configured: each enqueue is matched against
// them.
const MaxConcurrencyRules = 256

var ruleName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$`)

// Validate refuses a rule that cannot be applied, with a sentence that says why.
func (r ConcurrencyRule) Validate() error {
	_, err := r.check()
	return err
}

// check refuses a rule that cannot be applied, with a sentence that says why, and returns its
// parsed key expression.
func (r ConcurrencyRule) check() (jobkey.Expr, error) {
	if !ruleName.MatchString(r.Name) {
		return jobkey.Expr{}, fmt.Errorf("%w: name %q must be 1-100 letters, digits, '.', '_' or '-', starting with a letter or digit",
			ErrBadConcurrencyRule, r.Name)
	}
	if r.MaxRunning < 1 {
		return jobkey.Expr{}, fmt.Errorf("%w %q: max running must be at least 1, got %d", ErrBadConcurrencyRule, r.Name, r.MaxRunning)
	}
	e, err := jobkey.Parse(r.Key)
	if err != nil {
		return jobkey.Expr{}, fmt.Errorf("%w %q: %v", ErrBadConcurrencyRule, r.Name, err)
	}
	return e, nil
}

type keyRule struct {
	ConcurrencyRule
	expr jobkey.Expr
}

// keyLimits is the broker's view of the rules and whether keyed jobs may exist.
type keyLimits struct {
	mu    sync.Mutex
	rules []keyRule // by name
	// on: leases honour keys. Set while rules exist or the store holds keyed jobs, and the
	// moment this broker enqueues one.
	on atomic.Bool
	// refresh reads the rules and the store's keyed jobs again, in a cluster every poll.
	refresh *service.Periodic
	// reload reads them again when another broker announces a change (changed), in a cluster.
	reload *queueReloader
}

// concurrencyEvent tells the other brokers of a cluster that rules changed or keyed jobs
// exist.
var concurrencyEvent = store.Event{Kind: store.EventConcurrency}

// watch has the broker hear of other brokers' rule changes and keyed jobs (a cluster only).
func (k *keyLimits) watch(b *Broker) {
	b.WatchCluster(func(e store.Event) {
		if e.Kind == store.EventConcurrency || e.Kind == store.EventResync {
			k.changed()
		}
	})
}

// changed turns keys on and has the rules read again, off the caller's goroutine (the
// cluster's listener, which must not block).
func (k *keyLimits) changed() {
	k.on.Store(true)
	k.reload.changed()
}

func newKeyLimits(b *Broker, clustered bool, poll time.Duration) *keyLimits {
	k := &keyLimits{}
	if clustered {
		k.refresh = service.NewPeriodic(b.clk, poll, func() {
			if err := k.load(b.ctx, b.st); err != nil {
				b.log.Warn("read concurrency rules", "err", err)
			}
		})
		k.reload = newQueueReloader(b.clk, b.log, "concurrency rules", func(ctx context.Context) error {
			defer b.signal() // a rule removed or loosened may let held jobs go
			return k.load(ctx, b.st)
		})
	}
	return k
}

// services are the timed services of concurrency keys: in a cluster, the rules read again
// every poll, as another broker may change them.
func (k *keyLimits) services() []service.Service {
	if k.refresh == nil {
		return nil
	}
	return []service.Service{k.refresh, k.reload}
}

// active reports whether leases must honour keys.
func (k *keyLimits) active() bool { return k != nil && k.on.Load() }

// load reads the rules and whether keyed jobs wait or run.
func (k *keyLimits) load(ctx context.Context, st store.Store) error {
	recs, err := st.ConcurrencyRules(ctx)
	if err != nil {
		return err
	}
	keyed, err := st.ConcurrencyKeyed(ctx)
	if err != nil {
		return err
	}
	rules := make([]keyRule, 0, len(recs))
	for _, rec := range recs {
		r := ConcurrencyRule{Name: rec.Name, Type: rec.Type, Queue: rec.Queue, Key: rec.Key, MaxRunning: rec.MaxRunning}
		e, err := r.check()
		if err != nil {
			return err
		}
		rules = append(rules, keyRule{r, e})
	}
	k.mu.Lock()
	k.rules = rules
	k.mu.Unlock()
	// Once on, leases honour keys until the broker restarts: turned off by a read that raced
	// an enqueue of a keyed job, they would leave that job out until the next change.
	if len(rules) > 0 || keyed {
		k.on.Store(true)
	}
	return nil
}

// assign gives each job its key: the producer's own, else the first rule that matches the job
// and finds its key. A rule that matches but finds no key (the payload lacks the field)
// leaves the job without one.
func (k *keyLimits) assign(specs []JobSpec, params []*store.JobInsertParams) error {
	if k == nil {
		return nil
	}
	k.mu.Lock()
	rules := k.rules
	k.mu.Unlock()
	keyed := false
	for i, s := range specs {
		c, err := concurrencyOf(s, params[i], rules)
		if err != nil {
			return err
		}
		params[i].Concurrency = c
		keyed = keyed || c.Key != ""
	}
	if keyed {
		k.on.Store(true)
	}
	return nil
}

func concurrencyOf(s JobSpec, p *store.JobInsertParams, rules []keyRule) (store.Concurrency, error) {
	if s.ConcurrencyKey != "" || s.ConcurrencyLimit != 0 {
		c := store.Concurrency{Key: s.ConcurrencyKey, Limit: s.ConcurrencyLimit}
		if err := store.CheckConcurrency(c); err != nil {
			return store.Concurrency{}, fmt.Errorf("%w: %v", ErrBadConcurrencyRule, err)
		}
		return c, nil
	}
	for _, r := range rules {
		if r.Type != "" && r.Type != p.Type || r.Queue != "" && r.Queue != p.Queue {
			continue
		}
		v, ok := r.expr.Of(jobkey.Source{Type: p.Type, Queue: p.Queue, Metadata: p.Metadata, Payload: p.Payload})
		if !ok {
			continue
		}
		return store.Concurrency{Key: r.Name + ":" + v, Limit: r.MaxRunning, Rule: r.Name}, nil
	}
	return store.Concurrency{}, nil
}

// SetConcurrencyRule adds or replaces a rule, in the store every broker reads. Jobs it keyed
// that still wait take its new limit; jobs enqueued before it keep no key.
func (b *Broker) SetConcurrencyRule(ctx context.Context, r ConcurrencyRule) error {
	if _, err := r.check(); err != nil {
		return err
	}
	b.svc.keys.mu.Lock()
	n, known := len(b.svc.keys.rules), slices.ContainsFunc(b.svc.keys.rules, func(k keyRule) bool { return k.Name == r.Name })
	b.svc.keys.mu.Unlock()
	if !known && n >= MaxConcurrencyRules {
		return fmt.Errorf("%w: %d rules are configured, the most there may be", ErrBadConcurrencyRule, n)
	}
	ev := store.AuditEvent{Action: AuditConcurrencySet, Target: r.Name,
		Detail: fmt.Sprintf("type=%s queue=%s key=%s max_running=%d", r.Type, r.Queue, r.Key, r.MaxRunning)}
	return b.changeKeys(ctx, ev, func(tx store.Tx) error {
		return tx.ConcurrencyRuleSave(store.ConcurrencyRule{Name: r.Name, Type: r.Type, Queue: r.Queue, Key: r.Key, MaxRunning: r.MaxRunning})
	})
}

// RemoveConcurrencyRule removes a rule; the jobs it keyed that still wait run without a key.
// store.ErrNotFound when there is no such rule.
func (b *Broker) RemoveConcurrencyRule(ctx context.Context, name string) error {
	ev := store.AuditEvent{Action: AuditConcurrencyRemove, Target: name}
	return b.changeKeys(ctx, ev, func(tx store.Tx) error {
		existed, err := tx.ConcurrencyRuleDelete(name)
		if err == nil && !existed {
			err = fmt.Errorf("concurrency rule %q: %w", name, store.ErrNotFound)
		}
		return err
	})
}

// changeKeys stores a change of the rules with its audit event, reads the rules again and
// asks for a dispatch round: a raised limit may let jobs through.
func (b *Broker) changeKeys(ctx context.Context, ev store.AuditEvent, write func(store.Tx) error) error {
	err := b.storeRuleChange(ctx, ruleChange{op: "concurrency_change", write: write,
		announce: []store.Event{readyEvent, concurrencyEvent}, audit: ev})
	if err != nil {
		return err
	}
	if err := b.svc.keys.load(ctx, b.st); err != nil {
		return err
	}
	b.signal()
	return nil
}

// ConcurrencyRules lists the rules with how busy their keys are; keys only producers gave
// come as a rule with no name.
func (b *Broker) ConcurrencyRules(ctx context.Context) ([]ConcurrencyInfo, error) {
	recs, err := b.st.ConcurrencyRules(ctx)
	if err != nil {
		return nil, err
	}
	stats, err := b.st.ConcurrencyStats(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]ConcurrencyInfo, 0, len(recs)+1)
	for _, r := range recs {
		info := ConcurrencyInfo{ConcurrencyRule: ConcurrencyRule{Name: r.Name, Type: r.Type, Queue: r.Queue, Key: r.Key,
			MaxRunning: r.MaxRunning}}
		if i := slices.IndexFunc(stats, func(s store.ConcurrencyStat) bool { return s.Rule == r.Name }); i >= 0 {
			info.ConcurrencyStat = stats[i]
		}
		out = append(out, info)
	}
	if i := slices.IndexFunc(stats, func(s store.ConcurrencyStat) bool { return s.Rule == "" }); i >= 0 {
		out = append(out, ConcurrencyInfo{ConcurrencyStat: stats[i]})
	}
	return out, nil
}

// applyConfiguredKeys stores the rules of the configuration file, at start: the file wins
// over a change made at run time to a rule of the same name.
func (b *Broker) applyConfiguredKeys(ctx context.Context) error {
	if len(b.cfg.Concurrency) > 0 { // checked by Config.Validate
		err := b.st.Write(ctx, "concurrency_config", func(tx store.Tx) error {
			for _, r := range b.cfg.Concurrency {
				rec := store.ConcurrencyRule{Name: r.Name, Type: r.Type, Queue: r.Queue, Key: r.Key, MaxRunning: r.MaxRunning}
				if err := tx.ConcurrencyRuleSave(rec); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("store the configured concurrency rules: %w", err)
		}
	}
	b.svc.keys.watch(b)
	return b.svc.keys.load(ctx, b.st)
}

// withConcurrency fills j's concurrency key, read apart from the job: only a read for a person
// needs it.
func (b *Broker) withConcurrency(ctx context.Context, j *job.Job) error {
	c, _, err := b.st.ConcurrencyOfJob(ctx, j.ID)
	if errors.Is(err, store.ErrNotFound) {
		return nil // deleted since: the job as read stands
	}
	j.ConcurrencyKey, j.ConcurrencyLimit, j.ConcurrencyRule = c.Key, c.Limit, c.Rule
	return err
}

// keyWaiting explains a ready job whose key is at its limit; false when its key does not hold
// it back (or it has none).
func (b *Broker) keyWaiting(j *job.Job) (Waiting, bool) {
	c, held, err := b.st.ConcurrencyOfJob(b.ctx, j.ID)
	if err != nil || c.Key == "" {
		return Waiting{}, false
	}
	j.ConcurrencyKey, j.ConcurrencyLimit, j.ConcurrencyRule = c.Key, c.Limit, c.Rule
	k := dispatchrule.Key{Limit: c.Limit, Held: held}
	if dispatchrule.KeyReason(dispatchrule.Job{Key: c.Key}, k) == dispatchrule.None {
		return Waiting{}, false
	}
	return Waiting{Reason: WaitKeyAtLimit, Limit: c.Limit,
		Detail: "concurrency key " + strconv.Quote(c.Key) + " has " + strconv.Itoa(held) + " of its " +
			strconv.Itoa(c.Limit) + " running slot(s) taken; it runs when one frees"}, true
}
